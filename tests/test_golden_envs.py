"""No behaviour change: every family still produces the episodes recorded in the golden fixture.

tests/fixtures/golden_envs.json was recorded by `python -m tests.golden_envs` before the
typed-tool refactor; tasks, oracle turns, observations, rewards, hints and gold answers must stay
identical (system prompts are excluded: their tool schemas change by design).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.golden_envs import FIXTURE, episode_record, replay_record

GOLDEN: dict[str, Any] = json.loads(FIXTURE.read_text())


def _differences(recorded: dict[str, Any], now: dict[str, Any]) -> list[str]:
    return [
        f"{key}: recorded {recorded[key]!r}, now {now.get(key)!r}" for key in recorded if recorded[key] != now.get(key)
    ]


@pytest.mark.parametrize("family", sorted(GOLDEN))
def test_episodes_match_the_golden_record(family: str) -> None:
    problems = []
    for setting in GOLDEN[family]["settings"]:
        for recorded in setting["episodes"]:
            now = episode_record(family, setting["knobs"], recorded["seed"])
            problems += [f"{setting['knobs']} seed {recorded['seed']}: {d}" for d in _differences(recorded, now)]
    for index, recorded in enumerate(GOLDEN[family]["scripted"]):
        now = replay_record(family, recorded["seed"], recorded["actions"])
        problems += [f"scripted #{index}: {d}" for d in _differences(recorded, now)]
    assert not problems, f"{family}: {len(problems)} differences, first: " + "\n".join(problems[:5])
