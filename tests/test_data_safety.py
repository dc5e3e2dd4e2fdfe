"""Data safety of `tracegym ingest` and `tracegym diagnose` on hostile input (issue 12).

Every case: a good run is written first; then the bad input exits 1 with one line on stderr that
names the file, and the previous outputs are left byte-identical. Where `--keep-going` applies,
the bad record is skipped and listed and the rest is written.
"""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ingest_samples import write_json

from tracegym.analysis import report
from tracegym.analysis.examples import example_results, write_example_run
from tracegym.analysis.ingest import ingest_paths
from tracegym.analysis.ingest.common import ARGUMENTS_DEPTH, MAX_NESTING, JsonProblem, decode_json
from tracegym.analysis.ingest.outputs import REPORT, TRAJECTORIES
from tracegym.cli import main
from tracegym.files import PARTIAL, replace_together
from tracegym.schema import read_jsonl, write_jsonl


def _snapshot(out: Path) -> dict[str, bytes]:
    """Every file of the output folder, hidden ones included, with its bytes."""
    return {path.name: path.read_bytes() for path in sorted(out.iterdir())}


def _fails(argv: list[str], capsys: pytest.CaptureFixture[str], *named: str) -> str:
    """Run the CLI expecting exit 1 and one line on stderr naming each of `named`; returns the line."""
    capsys.readouterr()
    assert main(argv) == 1
    error = capsys.readouterr().err
    assert error.endswith("\n") and error.count("\n") == 1, error
    for name in named:
        assert name in error, (name, error)
    return error


@pytest.fixture
def good(tmp_path: Path) -> Path:
    """A good τ² run file (4 trajectories)."""
    return write_example_run(tmp_path / "good")


@pytest.fixture
def ingested(tmp_path: Path, good: Path) -> tuple[Path, dict[str, bytes]]:
    """An ingest output folder holding the good run's dataset, and its bytes."""
    out = tmp_path / "out"
    assert main(["ingest", str(good), "--out", str(out)]) == 0
    return out, _snapshot(out)


@pytest.fixture
def diagnosed(tmp_path: Path, good: Path) -> tuple[Path, dict[str, bytes]]:
    """A diagnose output folder for the good run, and its bytes."""
    out = tmp_path / "diagnosis"
    assert main(["diagnose", str(good), "--out", str(out), "--bootstrap", "50"]) == 0
    return out, _snapshot(out)


# --- empty input -------------------------------------------------------------------------------


def _empty_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "empty"
    folder.mkdir()
    return folder


def _no_simulations(tmp_path: Path) -> Path:
    document = example_results()
    document["simulations"] = []
    return write_json(tmp_path / "zero" / "results.json", document)


@pytest.mark.parametrize("command", ["ingest", "diagnose"])
@pytest.mark.parametrize("make", [_empty_folder, _no_simulations], ids=["empty folder", "0 simulations"])
def test_empty_input_never_replaces_the_outputs(command: str, make, tmp_path: Path, request, capsys) -> None:
    out, before = request.getfixturevalue("ingested" if command == "ingest" else "diagnosed")
    empty = make(tmp_path)
    _fails([command, str(empty), "--out", str(out)], capsys, str(empty), "no trajectories", "--allow-empty")
    assert _snapshot(out) == before
    assert main([command, str(empty), "--out", str(out), "--allow-empty"]) == 0
    if command == "ingest":
        assert (out / TRAJECTORIES).read_text() == "" and json.loads((out / REPORT).read_text())["trajectories"] == 0
    else:
        assert json.loads((out / "capabilities.json").read_text())["params"]["trajectories"] == 0


# --- nesting and encoding ----------------------------------------------------------------------


def _deep(path: Path) -> tuple[Path, str]:
    """Nested 100,000 levels: Python's json module raised RecursionError on this."""
    path.write_text('{"simulations": [{"messages": ' + "[" * 100_000 + "]" * 100_000 + '}], "tasks": []}')
    return path, "simulations[0].messages[0][0][0]"


def _binary(path: Path) -> tuple[Path, str]:
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe")
    return path, "not UTF-8 text"


def _nul_bytes(path: Path) -> tuple[Path, str]:
    path.write_bytes(b"\x00" * 4096)
    return path, "NUL byte"


def _huge_number(path: Path) -> tuple[Path, str]:
    document = example_results()
    document["simulations"][1]["messages"][2]["tool_calls"][0]["arguments"] = {"amount": 0}
    text = json.dumps(document).replace('"amount": 0', '"amount": ' + "9" * 5000)
    path.write_text(text)
    return path, "simulations[1].messages[2].tool_calls[0].arguments.amount"


def _lone_surrogate(path: Path) -> tuple[Path, str]:
    document = example_results()
    document["simulations"][0]["messages"][0]["content"] = "SURROGATE"
    path.write_text(json.dumps(document).replace("SURROGATE", "\\udc00"))
    return path, "simulations[0].messages[0].content"


def _infinite_reward(path: Path) -> tuple[Path, str]:
    document = example_results()
    document["simulations"][3]["reward_info"]["reward"] = 0.5
    path.write_text(json.dumps(document).replace('"reward": 0.5', '"reward": 1e400'))
    return path, "simulations[3].reward_info.reward"


BAD_FILES = {
    "deep nesting": _deep,
    "binary": _binary,
    "NUL bytes": _nul_bytes,
    "huge number": _huge_number,
    "lone surrogate": _lone_surrogate,
    "infinite reward": _infinite_reward,
}


@pytest.mark.parametrize("case", BAD_FILES)
def test_nesting_and_encoding_errors_are_one_line_and_skippable(
    case: str, tmp_path: Path, good: Path, ingested, capsys
) -> None:
    out, before = ingested
    bad, where = BAD_FILES[case](tmp_path / "bad.json")
    _fails(["ingest", str(good), str(bad), "--out", str(out)], capsys, "bad.json", where)
    assert _snapshot(out) == before
    assert main(["ingest", str(good), str(bad), "--out", str(out), "--keep-going"]) == 0
    printed = capsys.readouterr().out
    assert "skipped records (1):" in printed and where in printed
    written = json.loads((out / REPORT).read_text())
    assert (
        written["skipped"][0]["path"] == str(bad)
        and where in written["skipped"][0]["json_path"] + written["skipped"][0]["reason"]
    )
    expected = 4 + (3 if case == "infinite reward" else 0)  # a bad record leaves the file's other records
    assert written["trajectories"] == expected


@pytest.mark.parametrize("extra", [0, 1], ids=["at the limit", "one level deeper"])
def test_what_ingest_accepts_can_be_read_back(extra: int, tmp_path: Path) -> None:
    """The nesting limit is the reader's: tool-call arguments (decoded from a string, so not limited
    by the file's own nesting) at the limit round-trip through trajectories.jsonl; deeper are refused."""
    decode_json("[" * MAX_NESTING + "]" * MAX_NESTING)
    with pytest.raises(JsonProblem, match="nested too deeply"):
        decode_json("[" * (MAX_NESTING + 1) + "]" * (MAX_NESTING + 1))
    depth = MAX_NESTING - ARGUMENTS_DEPTH + extra
    arguments = {"a": json.loads("[" * (depth - 1) + "]" * (depth - 1))}
    call = {"id": "c1", "function": {"name": "f", "arguments": json.dumps(arguments)}}
    line = {"messages": [{"role": "assistant", "tool_calls": [call]}], "reward": 1.0}
    path = tmp_path / "deep_arguments.jsonl"
    path.write_text(json.dumps(line) + "\n" + json.dumps(line) + "\n")
    result = ingest_paths([path], keep_going=True)
    if extra:
        assert result.trajectories == [] and "arguments nested deeper" in result.skipped[0].reason
        return
    write_jsonl(result.trajectories, tmp_path / TRAJECTORIES)
    back = [t.model_dump() for t in read_jsonl(tmp_path / TRAJECTORIES)]
    assert len(back) == 2 and back == [t.model_dump() for t in result.trajectories]


def test_links_are_walked_once_by_real_path(tmp_path: Path, good: Path) -> None:
    """Three links to the parent folder made the walk exponential; a link loop is no problem either.
    The walk runs in a child process so that a walk that never ends fails the test instead of hanging it."""
    folder = good.parent
    nested = folder / "a" / "b"
    nested.mkdir(parents=True)
    for name in ("up1", "up2", "up3"):
        (nested / name).symlink_to(folder, target_is_directory=True)
    (folder / "loop").symlink_to(folder / "loop")  # a link to itself: never a file or folder
    (folder / "same.json").symlink_to(good)
    code = (
        "import json, sys; from tracegym.analysis.ingest import ingest_paths; r = ingest_paths(sys.argv[1:]); "
        "print(json.dumps([len(r.trajectories), [s.path for s in r.sources]]))"
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", code, str(folder), str(nested / "up1")], capture_output=True, text=True, timeout=60
        )
    except subprocess.TimeoutExpired:
        pytest.fail("the walk did not finish within 60 s")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [4, [str(good)]]


# --- diagnose reading a trajectories.jsonl -----------------------------------------------------


def _bad_line(tmp_path: Path, ingested: tuple[Path, dict[str, bytes]], damage: str) -> tuple[Path, int]:
    """A copy of the ingested trajectories.jsonl with line 3 damaged; returns it and the line number."""
    lines = (ingested[0] / TRAJECTORIES).read_text().splitlines()
    if damage == "truncated":
        lines[2] = lines[2][: len(lines[2]) // 2]
    elif damage == "binary":
        lines[2] = "\x00\x01\x02binary"
    else:
        record = json.loads(lines[2])
        record["messages"][0]["role"], record["reward"] = "robot", "high"  # two errors: only the first is told
        lines[2] = json.dumps(record)
    path = tmp_path / "damaged" / TRAJECTORIES
    path.parent.mkdir()
    path.write_text("\n".join(lines) + "\n")
    return path, 3


DAMAGE = {"truncated": "truncated JSON", "binary": "NUL byte", "invalid": ".messages[0].role: Input should be"}


@pytest.mark.parametrize("damage", DAMAGE)
def test_diagnose_names_the_bad_line_and_keep_going_skips_it(
    damage: str, tmp_path: Path, ingested, diagnosed, capsys
) -> None:
    out, before = diagnosed
    path, number = _bad_line(tmp_path, ingested, damage)
    error = _fails(["diagnose", str(path), "--out", str(out)], capsys, f"{path}: line {number}", DAMAGE[damage])
    assert "validation error" not in error and "'high'" not in error  # the first pydantic error only, not the list
    assert _snapshot(out) == before
    assert main(["diagnose", str(path), "--out", str(out), "--keep-going", "--bootstrap", "50"]) == 0
    printed = capsys.readouterr().out
    assert "skipped records (1):" in printed and f"{path}: line {number}" in printed
    assert json.loads((out / "capabilities.json").read_text())["params"]["trajectories"] == 3


def test_binary_jsonl_is_one_line_in_diagnose(tmp_path: Path, diagnosed, capsys) -> None:
    out, before = diagnosed
    path = tmp_path / "trajectories.jsonl"
    path.write_bytes(b"\xff\xfe\x00binary\x00")
    _fails(["diagnose", str(path), "--out", str(out)], capsys, str(path), "not UTF-8 text")
    assert _snapshot(out) == before


# --- outputs replaced together -----------------------------------------------------------------


def test_a_failure_while_writing_leaves_the_old_diagnosis_whole(
    tmp_path: Path, good: Path, diagnosed, monkeypatch
) -> None:
    """capabilities.json is written first: a crash after it (here in the plot) must not leave it new."""
    out, before = diagnosed
    document = example_results()
    document["simulations"] = document["simulations"][:3]
    fewer = write_json(tmp_path / "fewer" / "run.json", document)

    def broken_plot(*args, **kwargs) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(report, "plot_coverage_delta", broken_plot)
    assert main(["diagnose", str(fewer), "--out", str(out), "--bootstrap", "50"]) == 1
    assert _snapshot(out) == before


def test_stale_temporaries_of_a_killed_run_are_cleaned(ingested, good: Path) -> None:
    """Temporaries have fixed names, so the next run replaces them; a journal it cannot read is dropped."""
    out, _ = ingested
    (out / (TRAJECTORIES + PARTIAL)).write_text('{"half a line')
    (out / (REPORT + PARTIAL)).write_text("")
    (out / f".{TRAJECTORIES}.commit{PARTIAL}").write_text('["trajec')
    (out / f".{TRAJECTORIES}.commit").write_text("\x00garbage")
    assert main(["ingest", str(good), "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == [REPORT, TRAJECTORIES]
    assert len((out / TRAJECTORIES).read_text().splitlines()) == 4


def test_moves_interrupted_by_a_crash_are_finished_by_the_next_write(tmp_path: Path, monkeypatch) -> None:
    """A crash between the moves leaves a mixed set; the journal lets the next write finish it."""
    folder = tmp_path / "set"
    folder.mkdir()
    for name in ("a", "b", "c"):
        (folder / name).write_text("old")
    moves = []
    real_replace = os.replace

    def crash_after_one_move(source, target) -> None:
        if Path(target).name in ("a", "b", "c"):
            moves.append(target)
            if len(moves) == 2:
                raise KeyboardInterrupt  # stands for the process dying between two moves
        real_replace(source, target)

    monkeypatch.setattr(os, "replace", crash_after_one_move)
    with pytest.raises(KeyboardInterrupt):
        with replace_together(folder, ("a", "b", "c")) as outputs:
            for name in ("a", "b", "c"):
                outputs.write_text(name, "new")
    monkeypatch.setattr(os, "replace", real_replace)
    assert [(folder / name).read_text() for name in ("a", "b", "c")] == ["new", "old", "old"]
    with replace_together(folder, ("other",)) as outputs:  # any later write into the folder
        outputs.write_text("other", "x")
    assert [(folder / name).read_text() for name in ("a", "b", "c")] == ["new", "new", "new"]
    assert sorted(p.name for p in folder.iterdir()) == ["a", "b", "c", "other"]


def test_sigkill_during_ingest_keeps_the_old_outputs(tmp_path: Path, ingested) -> None:
    """Kill -9 an ingest while it writes its temporaries: the old pair stays; a rerun cleans up."""
    out, before = ingested
    document = example_results()
    simulations = document["simulations"]
    document["simulations"] = [dict(copy.deepcopy(simulations[i % 4]), id=f"sim-{i}") for i in range(3000)]
    large = write_json(tmp_path / "large" / "run.json", document)
    command = [sys.executable, "-m", "tracegym.cli", "ingest", str(large), "--out", str(out)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    partial = out / (TRAJECTORIES + PARTIAL)
    deadline = time.monotonic() + 120
    while not partial.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.001)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert process.returncode == -signal.SIGKILL, "the ingest finished before it could be killed mid-write"
    assert partial.exists()
    assert {name: data for name, data in _snapshot(out).items() if not name.endswith(PARTIAL)} == before
    assert subprocess.run(command, capture_output=True).returncode == 0
    assert sorted(p.name for p in out.iterdir()) == [REPORT, TRAJECTORIES]
    assert json.loads((out / REPORT).read_text())["trajectories"] == 3000
    assert len((out / TRAJECTORIES).read_text().splitlines()) == 3000
