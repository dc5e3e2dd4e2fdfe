"""Log-probabilities in the form vLLM's OpenAI server returns them (`choices[].logprobs.content`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from transformers import PreTrainedTokenizerBase

from tracegym.moe_router.engine import TokenLogprob

FLOOR = -9999.0  # vLLM floors reported log-probabilities here (JSON has no -inf)


def logprobs_content(
    tokenizer: PreTrainedTokenizerBase,
    tokens: Sequence[int],
    logprobs: Sequence[TokenLogprob],
    top: int,
    as_token_ids: bool = False,
) -> list[dict[str, Any]]:
    """`choices[].logprobs.content` for the generated `tokens` and their `logprobs`, as vLLM writes
    it: each token decoded alone (or "token_id:<id>"), log-probabilities floored at -9999, `bytes`
    of the decoded token (of the written token in `top_logprobs`), `top` entries of top_logprobs
    with the sampled token first."""
    decoded: dict[int, str] = {}

    def shown(token_id: int) -> tuple[str, str]:
        if token_id not in decoded:
            decoded[token_id] = tokenizer.decode([token_id])
        return (f"token_id:{token_id}" if as_token_ids else decoded[token_id]), decoded[token_id]

    content = []
    for token_id, found in zip(tokens, logprobs):
        ranked = [(token_id, found.logprob), *((other, value) for other, value in found.top if other != token_id)]
        alternatives = []
        for other, value in ranked[:top]:
            written = shown(other)[0]
            alternatives.append(
                {"token": written, "logprob": max(value, FLOOR), "bytes": list(written.encode("utf-8", "replace"))}
            )
        written, text = shown(token_id)
        content.append(
            {
                "token": written,
                "logprob": max(found.logprob, FLOOR),
                "bytes": list(text.encode("utf-8", "replace")),
                "top_logprobs": alternatives,
            }
        )
    return content
