"""Error recovery: keep going when tools fail, and act on what the error says.

The agent must report the shipping status of several packages through a flaky tracking API.
Calls fail in seeded, deterministic ways: transient 503s that succeed on retry, rate limits that
require `wait(seconds)` of at least the stated time before the retry, an expired session that
needs `refresh_session()`, and merged packages whose error names the new id to query. Final
answer: a JSON object {package_id: status} over the ids the user gave. Reward: 0.8 × the share of
packages reported right + 0.2 when all are right. Knobs: packages, failure probability, failures
per transient error (1-3), error kinds enabled (1-4); `wait` and `refresh_session` are offered
only when rate limits and expired sessions are enabled.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

from tracegym.synth_envs.base import Environment, ToolError
from tracegym.synth_envs.common import call, calls, json_object
from tracegym.synth_envs.registry import register
from tracegym.synth_envs.tools import tool

STATUSES = ["in_transit", "out_for_delivery", "delivered", "held_at_customs", "returned_to_sender"]
KINDS = ("transient", "rate_limit", "session", "merged")
RECOVERY_TOOLS = {"rate_limit": "wait", "session": "refresh_session"}  # error kind -> the tool that clears it


@dataclass
class Config:
    """Difficulty knobs: packages to report, P(a package's lookups fail), retries per transient error,
    error kinds (1-4)."""

    n_packages: int = 3
    failure_rate: float = 0.6
    max_failures: int = 2
    n_error_kinds: int = 4


def _kinds(n_error_kinds: int) -> tuple[str, ...]:
    """The error kinds enabled at these knobs (the first 1-4 of KINDS)."""
    return KINDS[: min(max(n_error_kinds, 1), len(KINDS))]


@dataclass(frozen=True)
class _World:
    packages: tuple[str, ...]
    status: dict[str, str]
    fault: dict[str, tuple[str, int]]  # package -> (kind, parameter: failures / seconds)
    merged_into: dict[str, str]


@dataclass
class _State:
    failures_left: dict[str, int]  # transient package -> 503s still to come
    blocked: set[str]  # rate-limited and session packages not yet unblocked
    waited: int = 0  # longest wait (seconds) since the last tracking call
    session_ok: bool = True


@register
class ErrorRecovery(Environment):
    name = "error_recovery"
    capability = "error_recovery"
    description = (
        "Recovering from tool failures and error messages: retrying transient errors, following "
        "the instructions an error gives (wait, re-authenticate, use a new identifier), and not "
        "giving up or fabricating results when a call fails."
    )
    Config = Config
    # One knob at a time from rung 0 to 2, so that a briefly warm-started policy still earns reward on the
    # next rung (docs/engineering.md, "synth_envs").
    ladder = (
        {"n_packages": 1, "failure_rate": 0.5, "n_error_kinds": 1},
        {"n_packages": 2, "failure_rate": 0.5, "n_error_kinds": 1},
        {"n_packages": 2, "failure_rate": 0.5, "n_error_kinds": 2},
        {"n_packages": 3, "failure_rate": 0.6, "n_error_kinds": 4},
        {"n_packages": 5, "failure_rate": 0.8, "n_error_kinds": 4},
        {"n_packages": 8, "failure_rate": 1.0, "max_failures": 3, "n_error_kinds": 4},
    )
    max_turns = 12
    instructions = (
        "You track packages with an unreliable API. Errors tell you what to do; follow them and retry. "
        'Finish with a JSON object mapping each package id the user gave to its status, e.g. {"PKG-1234": "delivered"}.'
    )
    world: _World
    state: _State

    def _generate(self, seed: int) -> _World:
        cfg, rng = self.config, random.Random(seed)
        ids = [f"PKG-{n}" for n in rng.sample(range(1000, 9999), 2 * max(cfg.n_packages, 1))]
        packages, spare = ids[: max(cfg.n_packages, 1)], ids[max(cfg.n_packages, 1) :]
        kinds = _kinds(cfg.n_error_kinds)
        status, fault, merged = {}, {}, {}
        for package in packages:
            if rng.random() < cfg.failure_rate:
                kind = rng.choice(kinds)
                fault[package] = (
                    kind,
                    rng.randrange(1, max(cfg.max_failures, 1) + 1) if kind == "transient" else rng.choice([5, 10, 30]),
                )
                if kind == "merged":
                    merged[package] = spare.pop()
            status[merged.get(package, package)] = rng.choice(STATUSES)
        return _World(tuple(packages), status, fault, merged)

    def _tool_names(self) -> tuple[str, ...]:
        """track_package, and the recovery tools of the error kinds these knobs enable."""
        kinds = _kinds(self.config.n_error_kinds)
        return ("track_package", *(tool_name for kind, tool_name in RECOVERY_TOOLS.items() if kind in kinds))

    def _task(self) -> str:
        return f"What is the status of my packages {', '.join(self.world.packages)}?"

    def _new_state(self) -> _State:
        fault = self.world.fault
        return _State(
            {p: f[1] for p, f in fault.items() if f[0] == "transient"},
            {p for p, f in fault.items() if f[0] in ("rate_limit", "session")},
        )

    # -- tools ----------------------------------------------------------------------------------

    @tool
    def track_package(self, package_id: str) -> dict[str, Any]:
        """Current shipping status of a package."""
        w, state, package = self.world, self.state, package_id
        if package not in w.status and package not in w.merged_into:
            raise ToolError(f"404 unknown package {package!r}")
        kind, parameter = w.fault.get(package, ("", 0))
        if kind == "merged":
            raise ToolError(f"410 package {package} was merged into {w.merged_into[package]}; track that id instead")
        if kind == "transient" and state.failures_left[package] > 0:
            state.failures_left[package] -= 1
            raise ToolError("503 service temporarily unavailable; try again")
        if package in state.blocked:
            if kind == "rate_limit":
                if state.waited >= parameter:
                    state.blocked.discard(package)
                else:
                    state.waited = 0
                    raise ToolError(f"429 rate limited; call wait with seconds={parameter} before retrying")
            elif state.session_ok and any(c.name == "refresh_session" for c in self.calls):
                state.blocked.discard(package)
            else:
                state.session_ok = False
                raise ToolError("401 session expired; call refresh_session and retry")
        state.waited = 0
        return {"package_id": package, "status": w.status[package]}

    @tool
    def wait(self, seconds: int) -> dict[str, Any]:
        """Pause before the next request (rate limits)."""
        if seconds < 0:
            raise ToolError("seconds must be non-negative")
        self.state.waited = max(self.state.waited, seconds)
        return {"ok": True}

    @tool
    def refresh_session(self) -> dict[str, Any]:
        """Renew the expired API session."""
        self.state.session_ok = True
        return {"ok": True, "session": "renewed"}

    # -- scoring and solutions ------------------------------------------------------------------

    def _truth(self) -> dict[str, str]:
        w = self.world
        return {p: w.status[w.merged_into.get(p, p)] for p in w.packages}

    def _score(self, final_answer: str) -> tuple[float, dict[str, Any]]:
        truth = self._truth()
        answer = json_object(final_answer) or {}
        right = sum(answer.get(p) == s for p, s in truth.items())
        reward = 0.8 * right / len(truth) + 0.2 * (right == len(truth))
        return round(reward, 6), {"right": right, "packages": len(truth), "parsed": bool(answer)}

    def _plan(self) -> list[list[tuple[str, dict[str, Any]]]]:
        """Per package, the calls of each round until it succeeds (each round reacts to one error)."""
        plans = []
        for package in self.world.packages:
            kind, parameter = self.world.fault.get(package, ("", 0))
            track = ("track_package", {"package_id": package})
            if kind == "transient":
                rounds = [[track] for _ in range(parameter + 1)]
            elif kind == "rate_limit":
                rounds = [[track], [("wait", {"seconds": parameter}), track]]
            elif kind == "session":
                rounds = [[track], [("refresh_session", {}), track]]
            elif kind == "merged":
                rounds = [[track], [("track_package", {"package_id": self.world.merged_into[package]})]]
            else:
                rounds = [[track]]
            plans.append(rounds)
        return plans

    def _turns(self, truth: dict[str, str], rounds_cap: int | None = None) -> list[str]:
        plans = self._plan()
        depth = max(len(p) for p in plans) if rounds_cap is None else rounds_cap
        turns = []
        for round_index in range(depth):
            pairs = [pair for plan in plans if round_index < len(plan) for pair in plan[round_index]]
            if pairs:
                turns.append(calls(*pairs))
        return turns + [json.dumps(truth)]

    def _oracle(self) -> list[str]:
        return self._turns(self._truth())

    def _wrong(self) -> list[list[str]]:
        truth = self._truth()
        first = self.world.packages[0]
        flipped = {**truth, first: next(s for s in STATUSES if s != truth[first])}
        gave_up = {p: (s if p not in self.world.fault else "unknown") for p, s in truth.items()}
        wrong = [self._turns(flipped), [call("track_package", package_id=first), json.dumps({})]]
        if gave_up != truth:
            wrong.append(self._turns(gave_up, rounds_cap=1))
        return wrong

    def _reject(self) -> str | None:
        return None if self.world.fault else "no package fails: nothing to recover from"

    def _hint(self) -> str:
        return (
            "Track every package; when a call fails, read the error: retry 503s, call wait with the stated "
            "seconds after a 429, refresh_session after a 401, and track the new id after a 410."
        )
