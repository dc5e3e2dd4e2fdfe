"""`tracegym serve`: an OpenAI-compatible HTTP server for a routed folder (FastAPI + uvicorn).

Endpoints: POST /v1/chat/completions (tools, streaming over server-sent events), GET /v1/models,
GET /health. Model ids: NAME (the token router), NAME:task (the v1 task router), NAME:base and
NAME:<adapter> (one adapter alone), all served by one mixture in shared batches.

Errors are OpenAI-shaped JSON (`{"error": {"message", "type", "code"}}`): 400 for a body that is
not JSON or not a valid request (the first problem named), a context too long, or an unsupported
option; 401 for a request without the right API key (when `api_key` is set: every route but
/health wants `Authorization: Bearer KEY`); 404 for an unknown model; 413 for a body over
`max_body_bytes`; 503 when the queue is full (with Retry-After). The `seed` field is ignored:
rows share batches, so per-request seeds would not reproduce.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hmac
import json
import logging
import socket
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tracegym.generation import render_chat
from tracegym.moe_router.chat_api import ChatRequest, RequestError, StreamWriter, completion, cut_at_stop, to_messages
from tracegym.moe_router.config import ServeConfig
from tracegym.moe_router.engine import GATED, Engine, GenerationRequest, QueueFull
from tracegym.moe_router.folder import load_mixture, task_router_for

logger = logging.getLogger(__name__)


def _error(status: int, message: str, code: str, headers: dict[str, str] | None = None) -> JSONResponse:
    kind = "invalid_request_error" if status < 500 else "server_error"
    return JSONResponse(
        {"error": {"message": message, "type": kind, "param": None, "code": code}}, status, headers=headers
    )


class BodyLimit:
    """ASGI middleware refusing request bodies over `limit` bytes with 413 (declared or streamed)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            await _error(413, f"request body over {self.limit} bytes", "body_too_large")(scope, receive, send)
            return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit:
                raise RequestError(413, f"request body over {self.limit} bytes", "body_too_large")
            return message

        await self.app(scope, limited, send)


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
        refusal = _error(
            401,
            f"{problem}: send the header 'Authorization: Bearer KEY'",
            "invalid_api_key",
            {"WWW-Authenticate": "Bearer"},
        )
        await refusal(scope, receive, send)


class _Channel:
    """A request's tokens, from the worker thread to the request's event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop, self.queue = loop, asyncio.Queue()

    def _put(self, item: tuple[str, Any]) -> None:
        self.loop.call_soon_threadsafe(self.queue.put_nowait, item)

    def token(self, token_id: int) -> None:
        self._put(("token", token_id))

    def end(self, finish_reason: str) -> None:
        self._put(("end", finish_reason))

    def error(self, message: str) -> None:
        self._put(("error", message))


def create_app(folder: str, config: ServeConfig) -> tuple[FastAPI, Engine]:
    """The app serving the routed folder `folder`, and its engine (started with the app)."""
    model, tokenizer, router, manifest = load_mixture(folder)
    task_router = task_router_for(model, tokenizer, router, manifest)
    engine = Engine(
        model,
        tokenizer,
        router,
        lambda task: task_router.choose([task])[0],
        config.max_batch_size,
        config.max_queue,
        config.batch_wait_ms / 1000,
    )
    context = config.max_context or int(getattr(model.config, "max_position_embeddings", 2048))
    name = config.model_name
    routes: dict[str, int | None] = {name: GATED, f"{name}:task": None, f"{name}:base": 0}
    routes.update({f"{name}:{adapter}": router.slot_of(adapter) for adapter in router.adapter_names})
    created = int(time.time())
    renderer = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="tracegym-render")

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine.start()
        try:
            yield
        finally:
            engine.stop()
            renderer.shutdown(wait=False, cancel_futures=True)

    app = FastAPI(title="tracegym", lifespan=lifespan)
    app.add_middleware(BodyLimit, limit=config.max_body_bytes)
    if config.api_key is not None:  # added last, so it runs first: no body is read before the key is checked
        app.add_middleware(ApiKey, key=config.api_key)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, error: RequestValidationError) -> JSONResponse:
        first = error.errors()[0]
        if first.get("type") == "json_invalid":
            return _error(
                400,
                f"request body is not valid JSON: {first.get('ctx', {}).get('error', first['msg'])}",
                "invalid_json",
            )
        where = ".".join(str(part) for part in first.get("loc", ()) if part != "body")
        return _error(400, f"{where or 'body'}: {first['msg']}", "invalid_request")

    @app.exception_handler(RequestError)
    async def _refused(request: Request, error: RequestError) -> JSONResponse:
        return _error(error.status, error.message, error.code)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, error: StarletteHTTPException) -> JSONResponse:
        return _error(error.status_code, str(error.detail), "http_error")

    @app.exception_handler(Exception)
    async def _crash(request: Request, error: Exception) -> JSONResponse:
        logger.exception("request failed")
        return _error(500, f"internal error: {type(error).__name__}", "internal_error")

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"status": "ok", "queued": engine.queued, "max_queue": engine.max_queue, "batches": engine.batches}

    @app.get("/v1/models")
    def models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [{"id": m, "object": "model", "created": created, "owned_by": "tracegym"} for m in routes],
        }

    @app.post("/v1/chat/completions", response_model=None)
    async def chat(body: ChatRequest) -> JSONResponse | StreamingResponse | dict[str, Any]:
        if body.model not in routes:
            raise RequestError(404, f"model '{body.model}' not found; served: {', '.join(routes)}", "model_not_found")
        messages = to_messages(body)
        # tokenising a long prompt takes a while: off the event loop, one at a time
        prompt = await asyncio.get_running_loop().run_in_executor(renderer, render_chat, tokenizer, messages)
        room = context - len(prompt)
        wanted = body.requested_tokens()
        if room < 1 or (wanted is not None and wanted > room):
            raise RequestError(
                400,
                f"context too long: {len(prompt)} prompt tokens + {wanted or 1} completion tokens "
                f"exceed the {context}-token context window",
                "context_length_exceeded",
            )
        channel = _Channel(asyncio.get_running_loop())
        first_user = next((m.content for m in messages if m.role == "user"), "")
        request = GenerationRequest(
            prompt=prompt,
            max_new_tokens=min(wanted or config.max_tokens, room),
            temperature=body.temperature,
            top_p=body.top_p,
            sink=channel,
            slot=routes[body.model],
            task=first_user,
            stops=body.stops(),
        )
        try:
            engine.submit(request)
        except QueueFull as error:
            return _error(503, f"server busy: {error}; retry later", "queue_full", {"Retry-After": "1"})
        if body.stream:
            include_usage = bool((body.stream_options or {}).get("include_usage"))
            return StreamingResponse(
                _stream(body.model, request, channel, include_usage), media_type="text/event-stream"
            )
        tokens: list[int] = []
        try:
            while True:
                kind, value = await channel.queue.get()
                if kind == "token":
                    tokens.append(value)
                elif kind == "error":
                    return _error(500, value, "generation_failed")
                else:
                    text = cut_at_stop(tokenizer.decode(tokens, skip_special_tokens=True), request.stops)
                    return completion(body.model, text, value, len(prompt), len(tokens))
        finally:
            request.cancelled.set()

    async def _stream(
        model_id: str, request: GenerationRequest, channel: _Channel, include_usage: bool
    ) -> AsyncIterator[str]:
        writer, tokens = StreamWriter(model_id, request.stops), []
        try:
            yield _sse(writer.chunk({"role": "assistant", "content": ""}))
            while True:
                kind, value = await channel.queue.get()
                if kind == "token":
                    tokens.append(value)
                    delta = writer.update(tokenizer.decode(tokens, skip_special_tokens=True))
                    if delta is not None:
                        yield _sse(delta)
                    continue
                if kind == "error":
                    yield _sse({"error": {"message": value, "type": "server_error", "code": "generation_failed"}})
                else:
                    for chunk in writer.finish(tokenizer.decode(tokens, skip_special_tokens=True), value):
                        yield _sse(chunk)
                    if include_usage:
                        usage = {
                            "prompt_tokens": len(request.prompt),
                            "completion_tokens": len(tokens),
                            "total_tokens": len(request.prompt) + len(tokens),
                        }
                        yield _sse(writer.chunk({}, usage=usage))
                yield "data: [DONE]\n\n"
                return
        finally:
            request.cancelled.set()

    return app, engine


def _sse(payload: dict[str, Any]) -> str:
    return f"data: {json.dumps(payload)}\n\n"


class RunningServer:
    """uvicorn serving `app` on a thread, bound to `host`:`port` (0: a free port); `with` starts it
    and waits until it accepts connections, leaving the block stops it."""

    def __init__(self, app: FastAPI, host: str = "127.0.0.1", port: int = 0) -> None:
        import uvicorn

        self.socket = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.socket.bind((host, port))
        self.host, self.port = host, self.socket.getsockname()[1]
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=5))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.socket]}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def __enter__(self) -> RunningServer:
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"server on {self.url} did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(30)
        self.socket.close()
