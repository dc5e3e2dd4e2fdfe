"""A small two-step lookup-then-answer environment for the adapter tests (not a product family).

The user asks for the value stored under a key; the `lookup` tool returns it. Reward: 1.0 for the
right value, 0.3 for a final answer after looking up the right key but answering wrong, else 0.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from tracegym.models import tiny_model
from tracegym.synth_envs.base import Environment, ToolError
from tracegym.synth_envs.tools import tool
from tracegym.toolcalls import render_tool_call


@dataclass
class LookupConfig:
    keys: int = 4


@dataclass(frozen=True)
class LookupWorld:
    table: dict[str, str]
    key: str


class LookupEnv(Environment):
    name = "lookup_test"
    capability = "tool_calling_precision"
    description = "Look a key up, then answer with its value."
    Config = LookupConfig
    max_turns = 3
    instructions = "Answer with the value stored under the key the user names."
    world: LookupWorld

    def _generate(self, seed: int) -> LookupWorld:
        rng = random.Random(seed)
        table = {f"k{i}": str(rng.randrange(100, 1000)) for i in range(self.config.keys)}
        return LookupWorld(table, rng.choice(sorted(table)))

    def _task(self) -> str:
        return f"What is the value of {self.world.key}?"

    @tool
    def lookup(self, key: str) -> dict[str, str]:
        """Value stored under a key."""
        if key not in self.world.table:
            raise ToolError(f"no key {key!r}")
        return {"value": self.world.table[key]}

    def _score(self, final_answer: str) -> tuple[float, dict[str, Any]]:
        looked = any(c.arguments.get("key") == self.world.key for c in self.calls)
        right = final_answer.strip() == self.world.table[self.world.key]
        return (1.0 if right else 0.3 if looked else 0.0), {"looked_up": looked, "right": right}

    def _oracle(self) -> list[str]:
        return [render_tool_call("lookup", {"key": self.world.key}), self.world.table[self.world.key]]

    def _wrong(self) -> list[list[str]]:
        value = self.world.table[self.world.key]
        return [[render_tool_call("lookup", {"key": self.world.key}), str(int(value) + 1)], [value + "?"]]

    def _hint(self) -> str:
        return f"call lookup with key {self.world.key}, then reply with the value alone."


class ProseEnv(LookupEnv):
    """LookupEnv with a graded reward for any wrong final answer: 0.9 × the share of 12 distinct
    characters it uses (capped), so even a random policy's groups have reward variance."""

    name = "prose_test"

    def _score(self, final_answer: str) -> tuple[float, dict[str, Any]]:
        if final_answer.strip() == self.world.table[self.world.key]:
            return 1.0, {}
        return 0.9 * min(len(set(final_answer)) / 12, 1.0), {}


class FlatEnv(LookupEnv):
    """LookupEnv where every answer but the right value earns 0.5: a random policy's GRPO groups
    all have zero variance."""

    name = "flat_test"

    def _score(self, final_answer: str) -> tuple[float, dict[str, Any]]:
        return (1.0 if final_answer.strip() == self.world.table[self.world.key] else 0.5), {}


def chatty_tiny_model(seed: int = 0):
    """tracegym.models.tiny_model with an untied output layer whose bias makes <|im_end|> likely
    (about one token in seven), so a random policy ends its turns and episodes finish."""
    import torch

    model, tokenizer = tiny_model(seed=seed)
    head = torch.nn.Linear(model.config.hidden_size, model.config.vocab_size, bias=True)
    with torch.no_grad():
        head.weight.copy_(model.lm_head.weight)
        head.bias.zero_()
        head.bias[tokenizer.eos_token_id] = 9.0
    model.lm_head = head
    model.config.tie_word_embeddings = False
    return model, tokenizer
