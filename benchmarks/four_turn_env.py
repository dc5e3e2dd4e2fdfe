"""A benchmark environment whose episodes always last exactly four assistant turns, for measuring
the rollout engine and the GRPO step with the untrained embedded model (which emits no valid tool
call, so a real family's episodes would end after one turn). It measures the engine, not skill.

Episodes are multi_step_task_completion's (its system prompt and tasks, ~670 prompt tokens). Whatever
the policy writes, turns 1-3 step the oracle's first three tool calls and answer with the family's
real tool response plus a ~200-token log excerpt (observations of ~250-320 tokens, as in the
families with tabular or log output); turn 4 steps the oracle's final answer and ends the episode
with a reward graded on the policy's own last turn (distinct characters / 40, capped at 1), so GRPO
groups have reward variance and are trained on.
"""

from __future__ import annotations

from dataclasses import replace

from tracegym.synth_envs.registry import get_family

FAMILY = "multi_step_task_completion"
TOOL_TURNS = 3


def _log_excerpt(seed: int, turn: int) -> str:
    return "\nlog:\n" + "\n".join(
        f"{seed}.{turn}.{line:02d} record {line * 37 % 101} checked, unchanged" for line in range(14)
    )


class FourTurnEnv(get_family(FAMILY)):  # type: ignore[misc]
    """See the module docstring. Only instances from `four_turn_env()` script their turns: the twins
    that the episode checks build step the actions they are given."""

    scripted = False

    def step(self, action: str):
        if not self.scripted:
            return super().step(action)
        script, turn = self.oracle(self.seed), self.turns
        if turn < TOOL_TURNS:
            result = super().step(script[turn])
            return replace(result, observation=result.observation + _log_excerpt(self.seed, turn))
        return replace(super().step(script[-1]), reward=min(len(set(action)) / 40, 1.0))


def four_turn_env() -> FourTurnEnv:
    env = FourTurnEnv()
    env.scripted = True
    return env
