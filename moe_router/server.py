"""`tracegym serve`: an OpenAI-compatible HTTP server (FastAPI + uvicorn) for a routed folder or a
base model with LoRA adapters.

Endpoints: POST /v1/chat/completions (tools, streaming over server-sent events, log-probabilities),
GET /v1/models, GET /health, and vLLM's runtime LoRA endpoints POST /v1/load_lora_adapter
(`{"lora_name", "lora_path"}`) and POST /v1/unload_lora_adapter (`{"lora_name"}`), which answer
200 with a plain-text "Success: ..." line as vLLM does.

Model ids. A routed folder (`tracegym route`): NAME (the token router), NAME:task (the v1 task
router), NAME:base and NAME:<adapter> (one adapter alone), all served by one mixture in shared
batches; its adapters are fixed. A base model (`smollm2-135m`, `tiny`, a Hugging Face folder or
hub id): NAME is the base model, and each LoRA adapter goes by its own name, loaded at start or
at run time (`lora_registry`: where from and what is checked); requests for the base and for
any adapters share batches.

Errors are OpenAI-shaped JSON (`middleware.error_response`): 400 for a body that is not JSON or
not a valid request (the first problem named), a context too long, an unsupported option or an
adapter folder that does not fit; 401 for a request without the right API key (when `api_key` is
set: every route but /health wants `Authorization: Bearer KEY`); 403 for runtime LoRA loading
when it is off or a path outside its roots; 404 for an unknown model or adapter; 413 for a body
over `max_body_bytes` (declared or chunked); 500 when a required tool call did not come out
well-formed; 503 when the queue is full (with Retry-After). `seed` seeds the reply's own sampler,
so a sampled request sent again with the same seed gets the same reply.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import socket
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict
from starlette.exceptions import HTTPException as StarletteHTTPException

from tracegym.generation import render_chat
from tracegym.moe_router.chat_api import (
    ChatRequest,
    RequestError,
    StreamWriter,
    call_openings,
    check_request,
    completion,
    cut_at_stop,
    to_messages,
    tool_choice_problem,
)
from tracegym.moe_router.config import ServeConfig
from tracegym.moe_router.engine import Engine, GenerationRequest, QueueFull, TokenLogprob
from tracegym.moe_router.logprobs import logprobs_content
from tracegym.moe_router.lora_registry import LoraRegistry
from tracegym.moe_router.middleware import ApiKey, BodyLimit, error_response
from tracegym.moe_router.served import Served, load_served

logger = logging.getLogger(__name__)


class _Channel:
    """A request's tokens, from the worker thread to the request's event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop, self.queue = loop, asyncio.Queue()

    def _put(self, item: tuple[str, Any]) -> None:
        self.loop.call_soon_threadsafe(self.queue.put_nowait, item)

    def token(self, token_id: int, logprob: TokenLogprob | None = None) -> None:
        self._put(("token", (token_id, logprob)))

    def end(self, finish_reason: str) -> None:
        self._put(("end", finish_reason))

    def error(self, message: str) -> None:
        self._put(("error", message))


class LoadLoraRequest(BaseModel):
    """vLLM's load request. `load_inplace` is accepted and changes nothing: loading a loaded name
    always replaces its adapter."""

    model_config = ConfigDict(extra="ignore")
    lora_name: str
    lora_path: str
    load_inplace: bool = False


class UnloadLoraRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    lora_name: str


def create_app(model: str, config: ServeConfig) -> tuple[FastAPI, Engine]:
    """The app serving `model` (a routed folder, else a base model with `config.lora` adapters),
    and its engine (started with the app). Raises UserError for a model or adapter that cannot
    be served."""
    served = load_served(model, config)
    return _app(served, config), served.engine


def _app(served: Served, config: ServeConfig) -> FastAPI:
    engine, tokenizer, context = served.engine, served.tokenizer, served.context
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
    _add_error_handlers(app)

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {
            "status": "ok",
            "queued": engine.queued,
            "max_queue": engine.max_queue,
            "forward_passes": engine.forward_passes,
        }

    @app.get("/v1/models")
    def models() -> dict[str, Any]:
        return {"object": "list", "data": served.cards()}

    @app.post("/v1/load_lora_adapter", response_class=PlainTextResponse)
    async def load_lora_adapter(body: LoadLoraRequest) -> str:
        await asyncio.to_thread(_registry(served).load, body.lora_name, body.lora_path, from_client=True)
        return f"Success: LoRA adapter '{body.lora_name}' added successfully."

    @app.post("/v1/unload_lora_adapter", response_class=PlainTextResponse)
    async def unload_lora_adapter(body: UnloadLoraRequest) -> str:
        await asyncio.to_thread(_registry(served).unload, body.lora_name)
        return f"Success: LoRA adapter '{body.lora_name}' removed successfully."

    @app.post("/v1/chat/completions", response_model=None)
    async def chat(body: ChatRequest) -> JSONResponse | StreamingResponse | dict[str, Any]:
        slot, adapter = served.route(body.model)
        check_request(body)
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
        required = body.required_tools()
        channel = _Channel(asyncio.get_running_loop())
        request = GenerationRequest(
            prompt=prompt,
            max_new_tokens=min(wanted or config.max_tokens, room),
            temperature=body.temperature,
            top_p=body.top_p,
            sink=channel,
            slot=slot,
            task=next((m.content for m in messages if m.role == "user"), ""),
            stops=body.stops(),
            adapter=adapter,
            logprobs=body.top_count(),
            openings=call_openings(required, tokenizer) if required else (),
            seed=body.seed,
        )
        try:
            engine.submit(request)
        except QueueFull as error:
            return error_response(503, f"server busy: {error}; retry later", "queue_full", {"Retry-After": "1"})
        if body.stream:
            return StreamingResponse(_stream(body, request, channel), media_type="text/event-stream")
        tokens: list[int] = []
        logprobs: list[TokenLogprob] = []
        try:
            while True:
                kind, value = await channel.queue.get()
                if kind == "token":
                    tokens.append(value[0])
                    logprobs += [value[1]] if value[1] is not None else []
                    continue
                if kind == "error":
                    return error_response(500, value, "generation_failed")
                text = cut_at_stop(tokenizer.decode(tokens, skip_special_tokens=True), request.stops)
                problem = tool_choice_problem(text, required) if required else None
                if problem:
                    return _tool_call_failed(problem, value, text)
                content = _logprobs(body, tokens, logprobs) if body.logprobs else None
                return completion(body.model, text, value, len(prompt), len(tokens), content)
        finally:
            request.cancelled.set()

    async def _stream(body: ChatRequest, request: GenerationRequest, channel: _Channel) -> AsyncIterator[str]:
        writer, tokens, pending = StreamWriter(body.model, request.stops), [], []
        required = body.required_tools()

        def with_logprobs(chunk: dict[str, Any]) -> dict[str, Any]:
            """`chunk` carrying the log-probabilities of the tokens not reported yet."""
            if body.logprobs and pending:
                ids, found = [t for t, _ in pending], [lp for _, lp in pending]
                chunk["choices"][0]["logprobs"] = {"content": _logprobs(body, ids, found)}
                pending.clear()
            return chunk

        try:
            yield _sse(writer.chunk({"role": "assistant", "content": ""}))
            while True:
                kind, value = await channel.queue.get()
                if kind == "token":
                    tokens.append(value[0])
                    pending.extend([value] if value[1] is not None else [])
                    delta = writer.update(tokenizer.decode(tokens, skip_special_tokens=True))
                    if delta is not None:
                        yield _sse(with_logprobs(delta))
                    continue
                text = tokenizer.decode(tokens, skip_special_tokens=True)
                problem = tool_choice_problem(cut_at_stop(text, request.stops), required) if required else None
                if kind == "error" or problem:
                    message = value if kind == "error" else _tool_call_message(problem, value, text)
                    code = "generation_failed" if kind == "error" else "tool_call_failed"
                    yield _sse({"error": {"message": message, "type": "server_error", "code": code}})
                else:
                    closing = writer.finish(text, value)
                    closing[0] = with_logprobs(closing[0])
                    for chunk in closing:
                        yield _sse(chunk)
                    if (body.stream_options or {}).get("include_usage"):
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

    def _logprobs(body: ChatRequest, tokens: list[int], found: list[TokenLogprob]) -> list[dict[str, Any]]:
        return logprobs_content(tokenizer, tokens, found, body.top_logprobs or 0, bool(body.return_tokens_as_token_ids))

    return app


def _registry(served: Served) -> LoraRegistry:
    if served.registry is None:
        raise RequestError(
            403, "this server serves a routed folder, whose adapters are fixed: no LoRA loading", "lora_not_supported"
        )
    return served.registry


def _tool_call_message(problem: str, finish: str, text: str) -> str:
    """Why a required tool call failed, with the start of what the model wrote."""
    cut = " (cut at max_tokens)" if finish == "length" else ""
    shown = text if len(text) <= 300 else text[:300] + "..."
    return f"tool_choice asks for a tool call, but {problem}{cut}; retry, or raise max_tokens. The reply: {shown}"


def _tool_call_failed(problem: str, finish: str, text: str) -> JSONResponse:
    return error_response(500, _tool_call_message(problem, finish, text), "tool_call_failed")


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, error: RequestValidationError) -> JSONResponse:
        first = error.errors()[0]
        if first.get("type") == "json_invalid":
            return error_response(
                400,
                f"request body is not valid JSON: {first.get('ctx', {}).get('error', first['msg'])}",
                "invalid_json",
            )
        where = ".".join(str(part) for part in first.get("loc", ()) if part != "body")
        return error_response(400, f"{where or 'body'}: {first['msg']}", "invalid_request")

    @app.exception_handler(RequestError)
    async def _refused(request: Request, error: RequestError) -> JSONResponse:
        return error_response(error.status, error.message, error.code)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, error: StarletteHTTPException) -> JSONResponse:
        return error_response(error.status_code, str(error.detail), "http_error")

    @app.exception_handler(Exception)
    async def _crash(request: Request, error: Exception) -> JSONResponse:
        logger.exception("request failed")
        return error_response(500, f"internal error: {type(error).__name__}", "internal_error")


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
