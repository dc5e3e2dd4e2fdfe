"""What the server asks its engine for: one request to complete, where its tokens go, and what a
sampled token's log-probabilities look like (`tracegym.moe_router.engine` re-exports these)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Protocol

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
    engine's `adapter_slot` gives when the request starts (it fails if the adapter is gone by then).
    `stops`: strings that end the reply. `logprobs`: None (none), or how many of the most likely
    tokens to report beside each sampled one (0 to 20). `openings`: token sequences the reply must
    start with one of (empty: free). `temperature` 0 is greedy; `top_p` in (0, 1]; `seed` seeds the
    reply's own sampler (None: a fresh seed)."""

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
    seed: int | None = None
    cancelled: threading.Event = field(default_factory=threading.Event)
