"""Hostile values anywhere in any format: ingest reads the file or raises IngestError, nothing else,
and whatever it accepts survives the trajectories.jsonl round trip unchanged.

Each case takes a good sample of one format, replaces one value (picked at random among every
JSON path of one of its files) by a hostile one or deletes it, then ingests it. Seeded, so every
run tries the same cases.
"""

from __future__ import annotations

import copy
import json
import random
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ingest_samples import mini_swe_run, openhands_run, write_json

from tracegym.analysis.examples import example_results
from tracegym.analysis.ingest import IngestError, ingest_paths
from tracegym.schema import Trajectory, write_jsonl

FIXTURES = Path(__file__).parent / "fixtures"
CASES_PER_FORMAT = 150
_DELETE = object()
HOSTILE: list[Any] = [
    _DELETE,
    None,
    True,
    0,
    -7,
    3.5,
    1e308,
    10**40,
    "",
    "x",
    "line\nbreak\u2028sep\x00nul",
    [],
    {},
    [1, "a", None],
    {"a": {"b": []}},
    {"role": "tool", "id": 5},
    {"function": 5},
    ["x", {"name": 1}],
    json.loads("[" * 150 + "]" * 150),
    '{"nested": ' + "[" * 199 + "]" * 199 + "}",
    "{not json",
]


def _tau2(root: Path) -> tuple[Path, Path]:
    path = write_json(root / "run.json", example_results())
    return path, path


def _tau_v1(root: Path) -> tuple[Path, Path]:
    path = write_json(root / "v1.json", json.loads((FIXTURES / "tau_v1_small.json").read_text()))
    return path, path


def _chat(root: Path) -> tuple[Path, Path]:
    path = root / "chat.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text((FIXTURES / "chat_small.jsonl").read_text())
    return path, path


def _trajectories(root: Path) -> tuple[Path, Path]:
    source, _ = _chat(root / "source")
    path = root / "trajectories.jsonl"
    write_jsonl(ingest_paths([source]).trajectories, path)
    return path, path


def _mini_swe(root: Path) -> tuple[Path, Path]:
    run = mini_swe_run(root / "run", ["r__a-1"], {"r__a-1"})
    return run, run / "trajs" / "r__a-1" / "r__a-1.traj.json"


def _openhands(root: Path) -> tuple[Path, Path]:
    run = openhands_run(root / "run", {"a__b-1": True})
    return run, run / "llm_completions" / "a__b-1" / "litellm-m-1733339462.5.json"


SAMPLES: dict[str, Callable[[Path], tuple[Path, Path]]] = {
    "tau2_results": _tau2,
    "tau_v1": _tau_v1,
    "chat_jsonl": _chat,
    "trajectories": _trajectories,
    "mini_swe_agent": _mini_swe,
    "openhands": _openhands,
}


def _paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    """Every JSON path in `value` (containers and leaves)."""
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, prefix + (key,))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _paths(item, prefix + (index,))
    return found


def _mutated(document: Any, rng: random.Random) -> Any:
    document = copy.deepcopy(document)
    path = rng.choice(_paths(document)[1:])
    parent = document
    for part in path[:-1]:
        parent = parent[part]
    value = rng.choice(HOSTILE)
    if value is _DELETE:
        del parent[path[-1]]
    else:
        parent[path[-1]] = copy.deepcopy(value)
    return document


def _write_mutation(file: Path, rng: random.Random, original: str) -> None:
    if file.suffix == ".jsonl":
        lines = original.splitlines()
        index = rng.randrange(len(lines))
        lines[index] = json.dumps(_mutated(json.loads(lines[index]), rng))
        file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    else:
        file.write_text(json.dumps(_mutated(json.loads(original), rng)), encoding="utf-8")


@pytest.mark.parametrize("fmt", SAMPLES)
def test_hostile_values_give_an_ingest_error_or_records_that_round_trip(fmt: str, tmp_path: Path) -> None:
    source, file = SAMPLES[fmt](tmp_path)
    original = file.read_text(encoding="utf-8")
    rng = random.Random(f"fuzz-{fmt}")
    accepted = refused = 0
    for case in range(CASES_PER_FORMAT):
        _write_mutation(file, rng, original)
        mutated = file.read_text(encoding="utf-8")
        try:
            ingest_paths([source])
        except IngestError as error:
            assert "\n" not in str(error), (case, str(error))
            refused += 1
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a mistyped field makes pydantic's serialiser warn
            result = ingest_paths([source], keep_going=True)
            lines = [t.model_dump_json() for t in result.trajectories]
        back = [Trajectory.model_validate_json(line) for line in lines]
        assert [t.model_dump() for t in back] == [t.model_dump() for t in result.trajectories], (case, mutated[:300])
        accepted += bool(result.trajectories)
    assert refused > CASES_PER_FORMAT // 10 and accepted > CASES_PER_FORMAT // 10, (refused, accepted)
