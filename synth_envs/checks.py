"""Oracle checks on generated episodes, and the rejection report.

Every episode an environment accepts has passed, besides the family's own `_reject` (signal
detectable, answer not guessable...): the oracle trajectory earns exactly 1.0, and every plausible
wrong trajectory the family lists (`_wrong`) earns less. `Environment.reset` calls
`verify_generated` and regenerates from the next derived seed when it fails; `rejection_report`
measures how often that happens. This module works on any `tracegym.synth_envs.base.Environment`
it is handed and imports nothing from the base module (which imports it).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tracegym.synth_envs.cache import BoundedCache

# (family, knobs, generator seed) -> why the episode fails the checks, or None
verdicts: BoundedCache[str | None] = BoundedCache(4096)


def verify_generated(env: Any, generator_seed: int) -> str | None:
    """Why the episode built from `generator_seed` fails the oracle checks, or None when it passes.

    Verdicts are cached per (family, knobs, generator seed) in `verdicts`: episodes are pure
    functions of those, so replaying a seed (every `play` resets) does not re-run the checks.
    """
    return verdicts.get((env.key, generator_seed), _check, env, generator_seed)


def _check(env: Any, generator_seed: int) -> str | None:
    twin = type(env)(env.config)
    twin.verify = False
    twin.reset(generator_seed)
    oracle, wrong = twin._oracle(), twin._wrong()
    if not wrong:
        return "the family lists no wrong trajectories to check the verifier with"
    result = twin.replay(generator_seed, oracle)
    if not result.terminated or result.reward != 1.0:
        return f"oracle earns {result.reward} (terminated={result.terminated}), not 1.0"
    for index, actions in enumerate(wrong):
        result = twin.replay(generator_seed, actions)
        if result.reward >= 1.0:
            return f"wrong trajectory {index} earns {result.reward}"
    return None


@dataclass
class RejectionReport:
    """How many generation attempts the seeds needed and why attempts were rejected."""

    family: str
    seeds: int
    attempts: int
    reasons: Counter = field(default_factory=Counter)

    @property
    def rejection_rate(self) -> float:
        """Rejected attempts / all attempts."""
        return (self.attempts - self.seeds) / self.attempts if self.attempts else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "family": self.family,
            "seeds": self.seeds,
            "attempts": self.attempts,
            "rejection_rate": round(self.rejection_rate, 4),
            "reasons": dict(self.reasons.most_common(8)),
        }


def _reason_kind(reason: str) -> str:
    return reason.split(":")[0].split(" earns")[0][:60]


def rejection_report(env: Any, seeds: Iterable[int]) -> RejectionReport:
    """Reset `env` on every seed and count the attempts and rejection reasons."""
    report = RejectionReport(env.name, 0, 0)
    for seed in seeds:
        env.reset(seed)
        report.seeds += 1
        report.attempts += env.attempts
        report.reasons.update(_reason_kind(reason) for reason in env.rejections)
    return report
