"""Batched generation for the server: a bounded queue and one worker thread that owns the model.

Requests wait in a queue of at most `max_queue` (a full queue refuses at once: the server answers
503). The worker takes the oldest request and every queued request with the same sampling
settings (greedy, or the same temperature and top_p), up to `max_batch_size`, waiting up to
`batch_wait_s` for more to arrive, and generates them in one left-padded `generate` call (KV
cache). Rows may use different routes: each row's slot is forced (a single adapter, the base,
the task router's choice, a LoRA adapter named by the request and looked up when its batch starts)
or left to the gates (`MixtureRouter.routing_rows`). Each row stops by itself (end of turn, its own
max_tokens, its stop strings, or its client gone); every sampled token, the end-of-turn token
included, is handed to the request's `TokenSink` as it is produced, so replies stream.

Per row, on request: the log-probability of each sampled token and the most likely tokens at that
step, under the model's distribution before temperature and top_p (vLLM's default "raw" logprobs);
and an opening the reply must start with (one of several token sequences: the tokens that cannot
continue one are masked), which is how a tool call is required.

A batch holds the model from start to end: `exclusive()` waits for it and keeps the next from
starting, so that adapter weights change between batches only.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch
from torch import nn
from transformers import (
    LogitsProcessor,
    LogitsProcessorList,
    PreTrainedTokenizerBase,
    StoppingCriteria,
    StoppingCriteriaList,
)

from tracegym.moe_router.mixture import MixtureRouter

logger = logging.getLogger(__name__)
GATED = -1  # a row the gates route


@dataclass(frozen=True)
class TokenLogprob:
    """A sampled token's natural-log probability and the `top` most likely tokens of its step as
    (token id, log-probability), most likely first."""

    logprob: float
    top: tuple[tuple[int, float], ...] = ()


class TokenSink(Protocol):
    """Where a request's tokens go (called from the worker thread); `logprob` is None unless the
    request asked for log-probabilities."""

    def token(self, token_id: int, logprob: TokenLogprob | None = None) -> None: ...

    def end(self, finish_reason: str) -> None: ...

    def error(self, message: str) -> None: ...


class QueueFull(Exception):
    """The engine's queue is at capacity."""


@dataclass
class GenerationRequest:
    """One prompt to complete. `slot`: forced slot, `GATED` for the gates, or None to ask
    `choose_slot` (the task router) in the worker; `adapter`: a LoRA adapter's name, whose slot the
    engine's `adapter_slot` gives when the batch starts (the request fails if it is gone by then).
    `stops`: strings that end the reply. `logprobs`: None (none), or how many of the most likely
    tokens to report beside each sampled one (0 to 20). `openings`: token sequences the reply must
    start with one of (empty: free)."""

    prompt: list[int]
    max_new_tokens: int
    temperature: float
    top_p: float
    sink: TokenSink
    slot: int | None = GATED
    task: str | None = None
    stops: tuple[str, ...] = ()
    adapter: str | None = None
    logprobs: int | None = None
    openings: tuple[tuple[int, ...], ...] = ()
    cancelled: threading.Event = field(default_factory=threading.Event)

    @property
    def sampling_key(self) -> tuple[float, float]:
        return (0.0, 1.0) if self.temperature == 0 else (self.temperature, self.top_p)


class _RawScores(LogitsProcessor):
    """Keeps the log-softmax of each step's scores as they reach it (before temperature and top_p,
    which transformers applies after every processor passed to `generate`); changes nothing."""

    def __init__(self) -> None:
        self.latest: torch.Tensor | None = None

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        self.latest = scores.float().log_softmax(-1)
        return scores


class _Openings(LogitsProcessor):
    """Rows that must open with one of several token sequences: while a row's tokens are a proper
    prefix of some of its sequences, only their next tokens may be sampled."""

    def __init__(self, openings: Sequence[tuple[tuple[int, ...], ...]], prompt_length: int) -> None:
        self.openings, self.prompt_length = openings, prompt_length

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        step = input_ids.shape[1] - self.prompt_length
        for row, options in enumerate(self.openings):
            if not options:
                continue
            written = tuple(input_ids[row, self.prompt_length :].tolist())
            if any(len(option) <= step and option[:step] == written[: len(option)] for option in options):
                continue  # opened: free from here
            allowed = sorted({option[step] for option in options if len(option) > step and option[:step] == written})
            if allowed:
                keep = torch.full_like(scores[row], float("-inf"))
                keep[allowed] = 0.0
                scores[row] += keep
        return scores


class _RowStopper(StoppingCriteria):
    """Per-row bookkeeping after each sampled token: hand it (with its log-probabilities when asked)
    to the row's sink, decide whether the row is done (end of turn, max tokens, stop string,
    cancelled)."""

    def __init__(
        self, requests: Sequence[GenerationRequest], tokenizer: PreTrainedTokenizerBase, raw: _RawScores | None = None
    ) -> None:
        self.requests, self.tokenizer, self.eos, self.raw = requests, tokenizer, tokenizer.eos_token_id, raw
        self.generated: list[list[int]] = [[] for _ in requests]
        self.finish: list[str | None] = [None] * len(requests)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs: object) -> torch.BoolTensor:
        last = input_ids[:, -1].tolist()
        logprobs = self._logprobs(last)
        for row, request in enumerate(self.requests):
            if self.finish[row] is not None:
                continue
            if request.cancelled.is_set():
                self.finish[row] = "cancelled"
                continue
            request.sink.token(last[row], logprobs.get(row))
            if last[row] == self.eos:
                self._end(row, "stop")
                continue
            self.generated[row].append(last[row])
            if request.stops and any(stop in self.tokenizer.decode(self.generated[row]) for stop in request.stops):
                self._end(row, "stop")
            elif len(self.generated[row]) >= request.max_new_tokens:
                self._end(row, "length")
        return torch.tensor([f is not None for f in self.finish], device=input_ids.device)

    def _end(self, row: int, reason: str) -> None:
        self.finish[row] = reason
        self.requests[row].sink.end(reason)

    def _logprobs(self, last: list[int]) -> dict[int, TokenLogprob]:
        """Each live row that asked for them: its sampled token's log-probability and top tokens."""
        rows = [
            row
            for row, request in enumerate(self.requests)
            if request.logprobs is not None and self.finish[row] is None
        ]
        if not rows or self.raw is None or self.raw.latest is None:
            return {}
        latest = self.raw.latest[rows]
        chosen = latest.gather(1, torch.tensor([[last[row]] for row in rows], device=latest.device))[:, 0].tolist()
        k = max(self.requests[row].logprobs or 0 for row in rows)
        values, ids = latest.topk(k, dim=-1) if k else (latest[:, :0], latest[:, :0].long())
        values, ids = values.tolist(), ids.tolist()
        found = {}
        for index, row in enumerate(rows):
            want = self.requests[row].logprobs or 0
            found[row] = TokenLogprob(chosen[index], tuple(zip(ids[index][:want], values[index][:want])))
        return found


class Engine:
    """The queue and the worker thread; `submit` from any thread, `start` / `stop` once."""

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
        `adapter_slot(name)`: the slot of a loaded adapter (KeyError when there is none)."""
        self.model, self.tokenizer, self.router, self.choose_slot = model, tokenizer, router, choose_slot
        self.adapter_slot = adapter_slot
        self._model_lock = threading.Lock()
        self._turnstile = threading.Lock()  # a waiting `exclusive()` holds it: the worker lets it in first
        self.max_batch_size, self.max_queue, self.batch_wait_s = max_batch_size, max_queue, batch_wait_s
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self._queue: collections.deque[GenerationRequest] = collections.deque()
        self._ready = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._work, name="tracegym-engine", daemon=True)
        self.batches = 0
        self.batched_rows = 0

    @property
    def queued(self) -> int:
        return len(self._queue)

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
        """Hold the model: waits for the batch in progress to end; no batch starts inside the block."""
        with self._turnstile, self._model_lock:
            yield

    def stop(self, timeout: float = 30.0) -> None:
        """Finish the batch in progress, fail what still waits, and end the worker."""
        with self._ready:
            self._stopping = True
            self._ready.notify()
        self._thread.join(timeout)
        while self._queue:
            self._queue.popleft().sink.error("server shutting down")

    def _take_batch(self) -> list[GenerationRequest] | None:
        with self._ready:
            while not self._queue and not self._stopping:
                self._ready.wait()
            if self._stopping:
                return None
            deadline = time.monotonic() + self.batch_wait_s
            while len(self._queue) < self.max_batch_size and (left := deadline - time.monotonic()) > 0:
                self._ready.wait(left)
            key = self._queue[0].sampling_key
            batch = [r for r in self._queue if r.sampling_key == key][: self.max_batch_size]
            for request in batch:
                self._queue.remove(request)
            return batch

    def _work(self) -> None:
        while (batch := self._take_batch()) is not None:
            live = [r for r in batch if not r.cancelled.is_set()]
            try:
                if live:
                    with self._turnstile:
                        pass
                    with self._model_lock:
                        self._generate(live)
            except Exception as error:  # one bad batch must not stop the server
                logger.exception("generation failed")
                for request in live:
                    request.sink.error(f"generation failed: {type(error).__name__}: {error}")

    def _routed(self, batch: list[GenerationRequest]) -> list[GenerationRequest]:
        """The batch with every row's slot set; a row whose adapter is no longer loaded fails."""
        kept = []
        for request in batch:
            if request.adapter is not None:
                try:
                    request.slot = self.adapter_slot(request.adapter) if self.adapter_slot else None
                except KeyError:
                    request.slot = None
                if request.slot is None:
                    request.sink.error(f"adapter '{request.adapter}' was unloaded before the request started")
                    continue
            elif request.slot is None:
                request.slot = self.choose_slot(request.task or "")
            kept.append(request)
        return kept

    @torch.no_grad()
    def _generate(self, batch: list[GenerationRequest]) -> None:
        batch = self._routed(batch)
        if not batch:
            return
        padded = self.tokenizer.pad(
            {"input_ids": [r.prompt for r in batch]}, padding=True, padding_side="left", return_tensors="pt"
        )
        device = next(self.model.parameters()).device
        raw = _RawScores() if any(r.logprobs is not None for r in batch) else None
        processors = LogitsProcessorList([raw] if raw else [])
        if any(r.openings for r in batch):
            processors.append(_Openings([r.openings for r in batch], padded["input_ids"].shape[1]))
        stopper = _RowStopper(batch, self.tokenizer, raw)
        temperature, top_p = batch[0].sampling_key
        sampling = temperature > 0
        with self.router.routing_rows([r.slot for r in batch]):
            self.model.generate(
                input_ids=padded["input_ids"].to(device),
                attention_mask=padded["attention_mask"].to(device),
                max_new_tokens=max(r.max_new_tokens for r in batch),
                do_sample=sampling,
                temperature=temperature if sampling else None,
                top_p=top_p if sampling else None,
                top_k=None,
                pad_token_id=self.pad_id,
                eos_token_id=self.tokenizer.eos_token_id,
                logits_processor=processors,
                stopping_criteria=StoppingCriteriaList([stopper]),
            )
        for row, request in enumerate(batch):
            if stopper.finish[row] is None:  # generate ended first (cannot happen past max_new_tokens)
                request.sink.end("length")
        self.batches += 1
        self.batched_rows += len(batch)
