"""Generation backends behind one interface, shared by rollouts, the LLM judge and evaluation.

`GenerationBackend.generate` samples one completion per token-id prompt; `chat` renders chat
messages with the tokenizer's chat template first (`tool` messages from ingested runs are shown to
the model as user turns wrapped in `<tool_response>`, tracegym.toolcalls). A multi-turn caller
opens a `session()`: its calls may reuse work for prompts that extend earlier prompts and
completions (HFBackend keeps each row's KV cache, tracegym.kv_session).

Sampling seeds are per row: `seeds[i]` alone decides row i's random draws, so a prompt's completion
does not depend on what else is in the call, its position or the batch size.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any

from tracegym.schema import Message
from tracegym.toolcalls import render_tool_call, render_tool_response

if TYPE_CHECKING:  # torch and transformers load only where a model runs
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


def check_sampling(temperature: float, max_new_tokens: int | None) -> None:
    """Raise ValueError unless temperature >= 0 (0: greedy) and max_new_tokens is None or >= 1."""
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0 (0: greedy), got {temperature}")
    if max_new_tokens is not None and max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be at least 1, got {max_new_tokens}")


@dataclass(frozen=True)
class SamplingConfig:
    """Sampling settings. temperature 0 means greedy; top_p in (0, 1] keeps the smallest set of
    most likely tokens whose probability reaches it (default 1.0: all); `stop` strings end a
    completion like the end-of-turn token does.

    seed: base of the per-row seeds when a call gives none (row i gets sampling_seed(seed, i));
    None draws them from torch's global generator.
    max_new_tokens: per completion; None is fitted to the environment by
    `tracegym.rollout.run_episodes`, and a backend needs a number.
    """

    max_new_tokens: int | None = None
    temperature: float = 0.7
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_sampling(self.temperature, self.max_new_tokens)
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if any(not stop for stop in self.stop):
            raise ValueError("stop strings must not be empty")


@dataclass
class Completion:
    """One sampled continuation: its text (special tokens removed), token ids (ending with the
    end-of-turn token when the model stopped by itself), per-token sampling log-probs, and
    `finish_reason` "stop" or "length"."""

    text: str
    token_ids: list[int]
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str = "stop"


def sampling_seed(*parts: int) -> int:
    """A 63-bit seed mixed from integer `parts` (blake2b of their decimal text): distinct tuples
    such as (base seed, episode seed, rollout, turn) give unrelated seeds, where sums like
    base + 7919·turn collide."""
    digest = hashlib.blake2b(",".join(str(int(part)) for part in parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def _as_template_dict(message: Message | dict[str, Any]) -> dict[str, str]:
    message = message if isinstance(message, Message) else Message.model_validate(message)
    if message.role == "tool":
        return {"role": "user", "content": render_tool_response(message.content)}
    content = message.content
    if message.tool_calls:
        calls = "\n".join(render_tool_call(call.name, call.arguments) for call in message.tool_calls)
        content = f"{content}\n{calls}".strip()
    return {"role": message.role, "content": content}


def render_chat(
    tokenizer: PreTrainedTokenizerBase, messages: Sequence[Message | dict[str, Any]], add_generation_prompt: bool = True
) -> list[int]:
    """Token ids of a conversation in the tokenizer's chat template."""
    text = tokenizer.apply_chat_template(
        [_as_template_dict(m) for m in messages], tokenize=False, add_generation_prompt=add_generation_prompt
    )
    return tokenizer(text, add_special_tokens=False)["input_ids"]


class GenerationBackend(ABC):
    """Samples completions for token-id prompts or chat conversations."""

    tokenizer: PreTrainedTokenizerBase

    @abstractmethod
    def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingConfig, seeds: Sequence[int] | None = None
    ) -> list[Completion]:
        """One completion per prompt, in order; `seeds[i]` seeds row i's sampling (None: see
        SamplingConfig.seed)."""

    def session(self) -> GenerationSession:
        """A session for calls whose prompts extend earlier ones (this default re-sends them)."""
        return GenerationSession(self)

    def chat(
        self, conversations: Sequence[Sequence[Message | dict[str, Any]]], params: SamplingConfig
    ) -> list[Completion]:
        """One assistant reply per conversation."""
        return self.generate([render_chat(self.tokenizer, c) for c in conversations], params)


class GenerationSession:
    """Calls of one backend whose prompts extend earlier prompts and completions (the turns of
    multi-turn rollouts). This base version passes every call to `backend.generate`; a backend
    may keep state between calls (HFBackend keeps KV caches). A session's state is only valid for
    the weights it was computed with: open one per rollout, never across an optimizer step. Use it
    as a context manager, which frees that state on exit."""

    def __init__(self, backend: GenerationBackend) -> None:
        self.backend = backend

    def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingConfig, seeds: Sequence[int] | None = None
    ) -> list[Completion]:
        """As `GenerationBackend.generate`."""
        return self.backend.generate(prompts, params, seeds)

    def close(self) -> None:
        """Free what the session keeps between calls."""

    def __enter__(self) -> GenerationSession:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()


class HFBackend(GenerationBackend):
    """A transformers causal LM on CPU or GPU: batches of up to `batch_size` rows (default 16), a
    decode loop of our own over KV caches kept across a session's calls (tracegym.kv_session)."""

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, batch_size: int = 16) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        self.model, self.tokenizer, self.batch_size = model, tokenizer, batch_size
        self.packed: Any = None  # the sessions' packed weights (tracegym.kv_session.PackedLinears)

    def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingConfig, seeds: Sequence[int] | None = None
    ) -> list[Completion]:
        with self.session() as session:
            return session.generate(prompts, params, seeds)

    def session(self) -> GenerationSession:
        from tracegym.kv_session import KVSession

        return KVSession(self)
