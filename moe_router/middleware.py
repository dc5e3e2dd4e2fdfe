"""The server's ASGI guards and its error shape: OpenAI-style JSON errors, a body size limit, an API key.

Errors are `{"error": {"message", "type", "param", "code"}}`, type "invalid_request_error" below
500 and "server_error" from 500.
"""

from __future__ import annotations

import hmac

from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send


def error_response(status: int, message: str, code: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """An OpenAI-style error answer."""
    kind = "invalid_request_error" if status < 500 else "server_error"
    return JSONResponse(
        {"error": {"message": message, "type": kind, "param": None, "code": code}}, status, headers=headers
    )


class BodyLimit:
    """ASGI middleware refusing request bodies over `limit` bytes with 413.

    A body with a Content-Length is judged by it before any byte is read (the server checks that
    the body matches it); a body without one (`Transfer-Encoding: chunked`) is read here, up to
    `limit` bytes, and handed on whole, so the app never sees a partial body.
    """

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None:
            if not declared.isdigit() or int(declared) > self.limit:
                await self._refuse(scope, receive, send)
                return
            await self.app(scope, receive, send)
            return
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client left
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.limit:
                await self._refuse(scope, receive, send)
                return
            if not message.get("more_body", False):
                break
        whole: Message | None = {"type": "http.request", "body": b"".join(chunks), "more_body": False}

        async def replay() -> Message:
            nonlocal whole
            if whole is not None:
                message, whole = whole, None
                return message
            return await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        await error_response(413, f"request body over {self.limit} bytes", "body_too_large")(scope, receive, send)


class ApiKey:
    """ASGI middleware: every HTTP request but those to the `public` paths must carry
    `Authorization: Bearer KEY`; any other gets 401 with an OpenAI-style error. The key is
    compared in constant time and never written to a response or a log."""

    def __init__(self, app: ASGIApp, key: str, public: frozenset[str] = frozenset({"/health"})) -> None:
        self.app, self.key, self.public = app, key.encode(), public

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.public:
            await self.app(scope, receive, send)
            return
        header = dict(scope.get("headers") or []).get(b"authorization", b"")
        scheme, _, token = header.partition(b" ")
        if scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), self.key):
            await self.app(scope, receive, send)
            return
        problem = "invalid API key" if header else "missing API key"
        refusal = error_response(
            401,
            f"{problem}: send the header 'Authorization: Bearer KEY'",
            "invalid_api_key",
            {"WWW-Authenticate": "Bearer"},
        )
        await refusal(scope, receive, send)
