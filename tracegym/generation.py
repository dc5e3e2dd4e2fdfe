"""Generation backends behind one interface, shared by rollouts, the LLM judge and evaluation.

`HFBackend` samples with transformers' `generate` (batched, left-padded, KV cache) on CPU or GPU
and returns each completion's token ids and sampling log-probabilities. Prompts are chat
messages rendered with the tokenizer's chat template; `tool` messages (from ingested runs) are
shown to the model as user turns wrapped in `<tool_response>` (tracegym.toolcalls).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from tracegym.schema import Message
from tracegym.toolcalls import render_tool_call, render_tool_response


@dataclass(frozen=True)
class SamplingConfig:
    """Sampling settings. temperature 0 means greedy; `seed` makes a call reproducible.

    max_new_tokens None: fitted to the environment by `tracegym.rollout.run_episodes`; a backend
    needs a number.
    """

    max_new_tokens: int | None = None
    temperature: float = 0.7
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()


@dataclass
class Completion:
    """One sampled continuation: its text (special tokens removed), token ids (ending with the
    end-of-turn token when the model stopped by itself), per-token sampling log-probs, and
    `finish_reason` "stop" or "length"."""

    text: str
    token_ids: list[int]
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str = "stop"


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
    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingConfig) -> list[Completion]:
        """One completion per prompt, in order."""

    def chat(
        self, conversations: Sequence[Sequence[Message | dict[str, Any]]], params: SamplingConfig
    ) -> list[Completion]:
        """One assistant reply per conversation."""
        return self.generate([render_chat(self.tokenizer, c) for c in conversations], params)


class HFBackend(GenerationBackend):
    """transformers `generate` in batches of `batch_size` prompts (sorted by length to limit padding)."""

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, batch_size: int = 16) -> None:
        self.model, self.tokenizer, self.batch_size = model, tokenizer, batch_size
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id

    @torch.no_grad()
    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingConfig) -> list[Completion]:
        if params.max_new_tokens is None:
            raise ValueError("SamplingConfig.max_new_tokens is None: set it, or fit it to an environment with run_episodes")
        if params.seed is not None:
            torch.manual_seed(params.seed)
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        results: dict[int, Completion] = {}
        for start in range(0, len(order), self.batch_size):
            batch = order[start : start + self.batch_size]
            for index, completion in zip(batch, self._generate_batch([prompts[i] for i in batch], params)):
                results[index] = completion
        return [results[i] for i in range(len(prompts))]

    def _generate_batch(self, prompts: list[Sequence[int]], params: SamplingConfig) -> list[Completion]:
        device = self.model.device
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        attention_mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, prompt in enumerate(prompts):
            input_ids[row, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
            attention_mask[row, width - len(prompt) :] = 1
        sampling = params.temperature > 0
        extra: dict[str, Any] = {"stop_strings": list(params.stop), "tokenizer": self.tokenizer} if params.stop else {}
        output = self.model.generate(
            input_ids=input_ids.to(device),
            attention_mask=attention_mask.to(device),
            max_new_tokens=params.max_new_tokens,
            do_sample=sampling,
            temperature=params.temperature if sampling else None,
            top_p=params.top_p if sampling else None,
            top_k=None,
            pad_token_id=self.pad_id,
            eos_token_id=self.tokenizer.eos_token_id,
            return_dict_in_generate=True,
            output_scores=True,
            **extra,
        )
        new_tokens = output.sequences[:, width:].cpu()
        logprobs = torch.stack(output.scores, dim=1).float().log_softmax(-1).cpu()
        chosen = logprobs.gather(-1, new_tokens.unsqueeze(-1)).squeeze(-1)
        completions = []
        for row in range(len(prompts)):
            ids = new_tokens[row].tolist()
            length, stopped = self._length(ids, params)
            ids = ids[:length]
            completions.append(
                Completion(
                    text=self.tokenizer.decode(ids, skip_special_tokens=True),
                    token_ids=ids,
                    logprobs=chosen[row, :length].tolist(),
                    finish_reason="stop" if stopped else "length",
                )
            )
        return completions

    def _length(self, ids: list[int], params: SamplingConfig) -> tuple[int, bool]:
        """Tokens to keep (through the end-of-turn token or a stop string) and whether it stopped."""
        eos = self.tokenizer.eos_token_id
        if eos in ids:
            return ids.index(eos) + 1, True
        if params.stop:
            for length in range(1, len(ids) + 1):
                text = self.tokenizer.decode(ids[:length])
                if any(text.endswith(stop) for stop in params.stop):
                    return length, True
        return len(ids), False
