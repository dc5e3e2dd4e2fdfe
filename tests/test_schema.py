import pytest

from tracegym.schema import (
    Message,
    Source,
    ToolCall,
    Trajectory,
    from_dataset,
    read_jsonl,
    to_dataset,
    write_jsonl,
)


def _trajectory(index: int, diagnostics: dict) -> Trajectory:
    return Trajectory(
        id=f"run/{index}",
        task_id=str(index),
        source=Source(benchmark="tau2-airline", format="tau2_results", file="x.json", agent="a", model="m"),
        messages=[
            Message(role="user", content="hi"),
            Message(
                role="assistant",
                tool_calls=[ToolCall(id="c1", name="get_user", arguments={"id": index, "x": [1, {"y": None}]})],
            ),
            Message(role="tool", content='{"ok": true}', tool_call_id="c1", error=index % 2 == 0),
        ],
        reward=None if index == 2 else float(index % 2),
        success=index % 2 == 1,
        termination_reason="user_stop",
        diagnostics=diagnostics,
        metadata={"policy": "be nice"},
    )


# Heterogeneous diagnostics: Arrow would reject these as typed columns.
SAMPLES = [
    _trajectory(0, {"reward_info": {"action_checks": [{"action": {"name": "a"}, "action_match": True}]}}),
    _trajectory(1, {"resolved": True, "tests_status": {}}),
    _trajectory(2, {}),
]


def test_jsonl_round_trip(tmp_path):
    path = tmp_path / "t.jsonl"
    assert write_jsonl(SAMPLES, path) == 3
    assert list(read_jsonl(path)) == SAMPLES
    assert not list(tmp_path.glob("*.partial"))


def test_jsonl_bad_line_names_file_and_line(tmp_path):
    path = tmp_path / "t.jsonl"
    write_jsonl(SAMPLES[:1], path)
    with path.open("a") as handle:
        handle.write('{"id": "broken"}\n')
    with pytest.raises(ValueError, match=r"t\.jsonl:2: not a valid Trajectory"):
        list(read_jsonl(path))


def test_datasets_round_trip():
    dataset = to_dataset(SAMPLES)
    assert dataset.num_rows == 3
    assert from_dataset(dataset) == SAMPLES
