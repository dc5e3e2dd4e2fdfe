"""Oracle checks on generated episodes, and the rejection report.

Every episode an environment accepts has passed, besides the family's own `_reject` (signal
detectable, answer not guessable...): the oracle trajectory earns exactly 1.0, and every plausible
wrong trajectory the family lists (`_wrong`) earns less. `Environment.reset` calls
`verify_generated` and regenerates from the next derived seed when it fails; `rejection_report`
measures how often that happens.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable

if TYPE_CHECKING:
    from tracegym.synth_envs.base import Environment


_VERDICTS: OrderedDict[tuple[type, tuple, int], str | None] = OrderedDict()
_VERDICTS_KEPT = 4096


def verify_generated(env: "Environment", generator_seed: int) -> str | None:
    """Why the episode built from `generator_seed` fails the oracle checks, or None when it passes.

    Verdicts are memoised per (family, knobs, generator seed): episodes are pure functions of
    those, so replaying a seed (every `play` resets) does not re-run the checks.
    """
    key = (type(env), env.knob_values, generator_seed)
    if key in _VERDICTS:
        _VERDICTS.move_to_end(key)
        return _VERDICTS[key]
    verdict = _check(env, generator_seed)
    _VERDICTS[key] = verdict
    if len(_VERDICTS) > _VERDICTS_KEPT:
        _VERDICTS.popitem(last=False)
    return verdict


def _check(env: "Environment", generator_seed: int) -> str | None:
    from tracegym.synth_envs.base import replay

    twin = type(env)(env.config)
    twin.verify = False
    twin.reset(generator_seed)
    oracle, wrong = twin._oracle(), twin._wrong()
    if not wrong:
        return "the family lists no wrong trajectories to check the verifier with"
    result = replay(twin, generator_seed, oracle)
    if not result.done or result.reward != 1.0:
        return f"oracle earns {result.reward} (done={result.done}), not 1.0"
    for index, actions in enumerate(wrong):
        result = replay(twin, generator_seed, actions)
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
        return {"family": self.family, "seeds": self.seeds, "attempts": self.attempts,
                "rejection_rate": round(self.rejection_rate, 4), "reasons": dict(self.reasons.most_common(8))}


def _reason_kind(reason: str) -> str:
    return reason.split(":")[0].split(" earns")[0][:60]


def rejection_report(env: "Environment", seeds: Iterable[int]) -> RejectionReport:
    """Reset `env` on every seed and count the attempts and rejection reasons."""
    report = RejectionReport(env.name, 0, 0)
    for seed in seeds:
        env.reset(seed)
        report.seeds += 1
        report.attempts += env.attempts
        report.reasons.update(_reason_kind(reason) for reason in env.rejections)
    return report
