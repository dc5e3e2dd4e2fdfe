"""Next-token choice for a batch of rows, each row drawing from its own seeded generator, and the
stop-string test of a growing completion."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import PreTrainedTokenizerBase

from tracegym.generation import SamplingConfig


def top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """`logits` (rows, vocab) with every token outside the top-p nucleus set to -inf: transformers'
    TopPLogitsWarper rule (drop the least likely tokens whose cumulative probability is <= 1 - top_p,
    never the most likely one)."""
    if top_p >= 1.0:
        return logits
    ordered, order = logits.sort(dim=-1)
    drop = ordered.softmax(-1).cumsum(-1) <= 1.0 - top_p
    drop[:, -1] = False
    return logits.masked_fill(drop.scatter(-1, order, drop), float("-inf"))


class RowSampler:
    """Picks one token per row from (rows, vocab) logits.

    Temperature 0: the argmax, with its log-prob under the model's own distribution. Otherwise row
    i draws from softmax(top_p_filter(logits / temperature)) with a torch.Generator seeded with
    seeds[i], so its tokens do not depend on the other rows; the log-prob is that of the
    distribution drawn from (the temperature-scaled one, renormalised over the nucleus).
    """

    def __init__(self, params: SamplingConfig, seeds: Sequence[int], device: torch.device) -> None:
        self.temperature, self.top_p = params.temperature, params.top_p
        self.generators = (
            [] if self.temperature == 0 else [torch.Generator(device=device).manual_seed(seed) for seed in seeds]
        )

    def __call__(self, logits: torch.Tensor, rows: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """(tokens, log-probs) of shape (len(rows),) from `logits` (len(rows), vocab), whose row i
        belongs to row rows[i] of the seeds."""
        logits = logits.float()
        if self.temperature == 0:
            tokens = logits.argmax(-1)
            logprobs = logits.log_softmax(-1)
        else:
            logprobs = top_p_filter(logits / self.temperature, self.top_p).log_softmax(-1)
            probs = logprobs.exp()
            tokens = torch.cat(
                [torch.multinomial(probs[i], 1, generator=self.generators[row]) for i, row in enumerate(rows)]
            )
        return tokens, logprobs.gather(-1, tokens[:, None])[:, 0]


def ends_with_stop(tokenizer: PreTrainedTokenizerBase, ids: Sequence[int], stops: Sequence[str]) -> bool:
    """Whether the last token of `ids` completes a stop string: one occurs in the decoded text and
    ends inside that token (it may run past the stop string, as in transformers' StopStringCriteria)."""
    if not ids or not stops:
        return False
    before = len(tokenizer.decode(ids[:-1]))
    text = tokenizer.decode(ids)
    return any(stop in text[max(0, before - len(stop) + 1) :] for stop in stops)
