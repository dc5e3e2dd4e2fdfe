"""Continuous batching for the server: a bounded queue and one worker thread that owns the model.

Requests wait in a queue of at most `max_queue` (a full queue refuses at once: the server answers
503). The worker decodes up to `max_batch_size` requests together (`scheduler.RunningBatch`): at
every token boundary, queued requests join while rows are free (their prompts encoded together,
then decoded with the others, each row's KV cache kept), and a request that is done leaves at once
(its reply ends, its row is freed). No request waits for requests it did not start with; when the
worker is idle, it waits up to `batch_wait_s` for more requests to encode with the first.

Rows may use different routes: each row's slot is forced (a single adapter, the base, the task
router's choice, a LoRA adapter named by the request and looked up when it joins) or left to the
gates (`MixtureRouter.routing_rows`). Each row has its own sampling settings and stops by itself
(end of turn, its own max_tokens, its stop strings, or its client gone); every sampled token, the
end-of-turn token included, is handed to the request's `TokenSink` as it is produced, so replies
stream.

Per row, on request: the log-probability of each sampled token and the most likely tokens at that
step, under the model's distribution before temperature and top_p (vLLM's default "raw" logprobs);
and an opening the reply must start with (one of several token sequences: the tokens that cannot
continue one are masked), which is how a tool call is required.

`exclusive()` holds the model so that adapter weights change between requests only: while one
waits, no request joins; it gets the model once the running rows are done, and none join until it
ends.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator

import torch
from torch import nn
from transformers import PreTrainedTokenizerBase

from tracegym.kv_session import PackedLinears
from tracegym.moe_router.mixture import MixtureRouter
from tracegym.moe_router.request import GATED, GenerationRequest, QueueFull, TokenLogprob, TokenSink
from tracegym.moe_router.scheduler import RunningBatch

__all__ = ["GATED", "Engine", "GenerationRequest", "QueueFull", "TokenLogprob", "TokenSink"]

logger = logging.getLogger(__name__)


class Engine:
    """The queue and the worker thread; `submit` from any thread, `start` / `stop` once.
    `forward_passes` counts forward passes and `forward_rows` their rows (rows per pass on average:
    forward_rows / forward_passes); `running` is the number of rows being decoded now."""

    def __init__(
        self,
        model: nn.Module,
        tokenizer: PreTrainedTokenizerBase,
        router: MixtureRouter,
        choose_slot: Callable[[str], int],
        max_batch_size: int = 8,
        max_queue: int = 64,
        batch_wait_s: float = 0.005,
        adapter_slot: Callable[[str], int] | None = None,
    ) -> None:
        """`choose_slot(task)`: the task router's slot for a request's first user message;
        `adapter_slot(name)`: the slot of a loaded adapter (KeyError when there is none);
        `max_batch_size`: rows decoded at once (at least 1)."""
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be at least 1, got {max_batch_size}")
        self.model, self.choose_slot = model, choose_slot
        self.adapter_slot = adapter_slot
        self._model_lock = threading.Lock()
        self._turnstile = threading.Lock()  # a waiting `exclusive()` holds it: no request joins meanwhile
        self.max_batch_size, self.max_queue, self.batch_wait_s = max_batch_size, max_queue, batch_wait_s
        self._queue: collections.deque[GenerationRequest] = collections.deque()
        self._ready = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._work, name="tracegym-engine", daemon=True)
        self._batch = RunningBatch(model, tokenizer, router)
        self._packed = PackedLinears()

    @property
    def queued(self) -> int:
        return len(self._queue)

    @property
    def running(self) -> int:
        return len(self._batch)

    @property
    def forward_passes(self) -> int:
        return self._batch.forwards

    @property
    def forward_rows(self) -> int:
        return self._batch.forward_rows

    def submit(self, request: GenerationRequest) -> None:
        """Queue `request`; raises QueueFull when `max_queue` requests are already waiting."""
        with self._ready:
            if len(self._queue) >= self.max_queue:
                raise QueueFull(f"{self.max_queue} requests already waiting")
            self._queue.append(request)
            self._ready.notify()

    def start(self) -> None:
        self._thread.start()

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the model: waits for the running rows to end (none join meanwhile); no request
        starts inside the block."""
        with self._turnstile, self._model_lock:
            yield

    def stop(self, timeout: float = 30.0) -> None:
        """Finish the running rows, fail what still waits, and end the worker."""
        with self._ready:
            self._stopping = True
            self._ready.notify()
        self._thread.join(timeout)
        while self._queue:
            self._queue.popleft().sink.error("server shutting down")

    def _wait_for_work(self) -> bool:
        """Block until a request waits (then up to `batch_wait_s` more for others); False when stopping."""
        with self._ready:
            while not self._queue and not self._stopping:
                self._ready.wait()
            if self._stopping:
                return False
            deadline = time.monotonic() + self.batch_wait_s
            while len(self._queue) < self.max_batch_size and (left := deadline - time.monotonic()) > 0:
                self._ready.wait(left)
            return True

    def _admit(self) -> list[GenerationRequest]:
        """The queued requests that join now (oldest first, as many as rows are free): none while
        an `exclusive()` waits or the engine stops."""
        if self._turnstile.locked() or self._stopping:
            return []
        joining = []
        with self._ready:
            while self._queue and len(self._batch) + len(joining) < self.max_batch_size:
                request = self._queue.popleft()
                if not request.cancelled.is_set():
                    joining.append(request)
        return self._routed(joining)

    @torch.inference_mode()
    def _work(self) -> None:
        while self._wait_for_work():
            with self._turnstile:
                pass
            try:
                with self._model_lock, self._packed.update(self.model):
                    self._run()
            except Exception as error:  # the worker outlives any failure: the rows it held fail instead
                logger.exception("the engine failed")
                self._batch.fail(f"generation failed: {type(error).__name__}: {error}")

    def _run(self) -> None:
        """Decode until no row runs and none may join."""
        while True:
            joining = self._admit()
            try:
                self._batch.join(joining)
            except Exception as error:  # one bad request must not stop the server
                logger.exception("encoding a prompt failed")
                for request in joining:
                    request.sink.error(f"generation failed: {type(error).__name__}: {error}")
            if not len(self._batch):
                return
            try:
                self._batch.step()
            except Exception as error:
                logger.exception("generation failed")
                self._batch.fail(f"generation failed: {type(error).__name__}: {error}")

    def _routed(self, requests: list[GenerationRequest]) -> list[GenerationRequest]:
        """`requests` with every slot set; a request whose adapter is no longer loaded fails."""
        kept = []
        for request in requests:
            if request.adapter is not None:
                try:
                    request.slot = self.adapter_slot(request.adapter) if self.adapter_slot else None
                except KeyError:
                    request.slot = None
                if request.slot is None:
                    request.sink.error(f"adapter '{request.adapter}' was unloaded before the request started")
                    continue
            elif request.slot is None:
                try:
                    request.slot = self.choose_slot(request.task or "")
                except Exception as error:  # the task router's forward pass, e.g. a task past the context
                    logger.exception("routing a request failed")
                    request.sink.error(f"routing failed: {type(error).__name__}: {error}")
                    continue
            kept.append(request)
        return kept
