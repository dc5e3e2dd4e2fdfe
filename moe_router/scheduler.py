"""The rows the server decodes together: requests join at a token boundary and leave when done.

A `RunningBatch` holds each running request's KV cache in the rows of one `tracegym.kv_session`
buffer (`RowCache`: per-row caches, masked padding, explicit positions, so padding changes no row's
values). `join(requests)` encodes the new prompts together in a batch of their own, samples each
one's first token, and rebuilds the buffer with the running rows' caches and the new ones;
`step()` feeds every row its last sampled token in one forward pass and samples the next. A row
that is done (end of turn, its max_tokens, a stop string, its client gone) leaves at once: its
request's sink has its reply, and its cache is dropped. The buffer has room for a bounded number
of steps (`GROWTH_STEPS`) and is rebuilt, compacted, when they are used up.

Each row samples by its own request's settings: greedy, or temperature and top_p (transformers'
order: an opening's mask, then temperature, then the nucleus) drawn from a generator of its own,
seeded by the request's `seed`, else from torch's global generator when the request joins. Each
row is routed by its request's slot (`MixtureRouter.routing_rows`: a LoRA slot, the base, or the
gates token by token).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import nn
from transformers import PreTrainedTokenizerBase

from tracegym.kv_session import CacheEntry, RowCache
from tracegym.moe_router.mixture import MixtureRouter
from tracegym.moe_router.request import GenerationRequest, TokenLogprob
from tracegym.sampling import ends_with_stop, top_p_filter

logger = logging.getLogger(__name__)
GROWTH_STEPS = 64  # decode steps a rebuilt buffer has room for (at most what its rows still need)


@dataclass
class _Row:
    """A running request: the tokens its cache holds (`fed`: the prompt, then every sampled token
    but the last), what it sampled, its generator (None when greedy) and why it ended."""

    request: GenerationRequest
    generator: torch.Generator | None
    fed: list[int]
    sampled: list[int] = field(default_factory=list)
    finish: str | None = None

    @property
    def remaining(self) -> int:
        """Decode steps the row may still take (each feeds one token and samples the next)."""
        return self.request.max_new_tokens - len(self.sampled)


def opening_mask(options: tuple[tuple[int, ...], ...], written: Sequence[int]) -> list[int] | None:
    """The tokens a row that must open with one of `options` may sample after `written`; None when
    it is free (no options, one of them already written, or none continues what it wrote)."""
    if not options:
        return None
    step, written = len(written), tuple(written)
    if any(len(option) <= step and option == written[: len(option)] for option in options):
        return None
    allowed = sorted({option[step] for option in options if len(option) > step and option[:step] == written})
    return allowed or None


def _token_logprob(raw: torch.Tensor, token: int, top: int) -> TokenLogprob:
    """`token`'s log-probability in `raw` (vocab,) log-softmax, with the `top` most likely tokens."""
    values, ids = raw.topk(top) if top else (raw[:0], raw[:0].long())
    return TokenLogprob(float(raw[token]), tuple(zip(ids.tolist(), values.tolist())))


class RunningBatch:
    """The running rows of one model (see the module docstring); used from one thread at a time,
    under `torch.inference_mode()`. Counts its forward passes in `forwards` and their rows in
    `forward_rows`."""

    def __init__(self, model: nn.Module, tokenizer: PreTrainedTokenizerBase, router: MixtureRouter) -> None:
        self.model, self.tokenizer, self.router = model, tokenizer, router
        self.eos = tokenizer.eos_token_id
        self.rows: list[_Row] = []
        self.cache: RowCache | None = None
        self.room = 0  # decode steps left in `cache`
        self.forwards = 0
        self.forward_rows = 0

    def __len__(self) -> int:
        return len(self.rows)

    def join(self, requests: Sequence[GenerationRequest]) -> None:
        """Encode `requests`' prompts (slots already set), sample their first tokens and add the
        rows that are not done yet to the batch."""
        if not requests:
            return
        device = self.model.device
        prefill = RowCache(self.model, [(None, 0)] * len(requests), max(len(r.prompt) for r in requests), 0)
        logits = self._forward(prefill, [r.prompt for r in requests], [r.slot for r in requests])
        rows = [_Row(r, self._generator(r, device), list(r.prompt)) for r in requests]
        entries = [prefill.entry(index, row.fed) for index, row in enumerate(rows)]
        self._sample(rows, logits)
        kept = [(row, entry) for row, entry in zip(rows, entries) if row.finish is None]
        if kept:
            running = [(row, self.cache.entry(index, row.fed)) for index, row in enumerate(self.rows)]
            self._rebuild(running + kept)

    def step(self) -> None:
        """One decode step for every running row; rows that are done leave."""
        if not self.rows:
            return
        if self.room == 0:
            self._rebuild([(row, self.cache.entry(index, row.fed)) for index, row in enumerate(self.rows)])
        logits = self._forward(self.cache, [row.sampled[-1:] for row in self.rows], [r.request.slot for r in self.rows])
        self.room -= 1
        for row in self.rows:
            row.fed.append(row.sampled[-1])
        self._sample(self.rows, logits)
        live = [index for index, row in enumerate(self.rows) if row.finish is None]
        if len(live) < len(self.rows):
            self.rows = [self.rows[index] for index in live]
            if live:
                self.cache.keep(live)
            else:
                self.cache, self.room = None, 0

    def fail(self, message: str) -> None:
        """End every running row with an error (after a failed forward pass); a sink that fails
        in turn is logged and skipped."""
        rows, self.rows, self.cache, self.room = self.rows, [], None, 0
        for row in rows:
            try:
                row.request.sink.error(message)
            except Exception:
                logger.exception("a reply sink failed")

    @staticmethod
    def _generator(request: GenerationRequest, device: torch.device) -> torch.Generator | None:
        if request.temperature == 0:
            return None
        seed = request.seed if request.seed is not None else int(torch.randint(0, 2**62, (1,)).item())
        return torch.Generator(device=device).manual_seed(seed % 2**63)

    def _rebuild(self, rows: list[tuple[_Row, CacheEntry]]) -> None:
        """A new buffer holding `rows`' caches, with room for their next steps."""
        self.rows = [row for row, _ in rows]
        self.room = min(max(row.remaining for row in self.rows), GROWTH_STEPS)
        self.cache = RowCache(self.model, [(entry, len(entry.ids)) for _, entry in rows], 0, self.room)

    def _forward(self, rows: RowCache, tokens: list[list[int]], slots: list[int | None]) -> torch.Tensor:
        with self.router.routing_rows(slots):
            logits = rows.feed(tokens)
        self.forwards += 1
        self.forward_rows += len(tokens)
        return logits

    def _sample(self, rows: list[_Row], logits: torch.Tensor) -> None:
        """Each row's next token from its `logits` (rows, vocab) float32, handed to its sink."""
        raw = logits.log_softmax(-1) if any(row.request.logprobs is not None for row in rows) else None
        for index, row in enumerate(rows):
            request = row.request
            if request.cancelled.is_set():
                row.finish = "cancelled"
                continue
            token = self._choose(row, logits[index])
            logprob = None
            if raw is not None and request.logprobs is not None:
                logprob = _token_logprob(raw[index], token, request.logprobs)
            row.sampled.append(token)
            request.sink.token(token, logprob)
            self._check_end(row)

    def _choose(self, row: _Row, logits: torch.Tensor) -> int:
        """The row's next token from its (vocab,) logits: its opening's mask, then greedy or sampling."""
        allowed = opening_mask(row.request.openings, row.sampled)
        if allowed is not None:
            keep = torch.full_like(logits, float("-inf"))
            keep[allowed] = 0.0
            logits = logits + keep
        if row.generator is None:
            return int(logits.argmax())
        filtered = top_p_filter(logits[None] / row.request.temperature, row.request.top_p)
        return int(torch.multinomial(filtered.softmax(-1)[0], 1, generator=row.generator))

    def _check_end(self, row: _Row) -> None:
        request, token = row.request, row.sampled[-1]
        if token == self.eos:
            row.finish = "stop"
        elif request.stops and ends_with_stop(self.tokenizer, row.sampled, request.stops):
            row.finish = "stop"
        elif len(row.sampled) >= request.max_new_tokens:
            row.finish = "length"
        if row.finish is not None:
            request.sink.end(row.finish)
