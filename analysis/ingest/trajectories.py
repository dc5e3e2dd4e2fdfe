"""tracegym's own trajectories.jsonl (what `tracegym ingest` writes): one Trajectory per line.

Read back exactly as written (`Trajectory.model_validate_json` per line). Record paths are
`line N` (1-based); a bad line is skipped with the first validation error only.
"""

from __future__ import annotations

from tracegym.analysis.ingest.common import Batch, InputFile, RecordError, jsonl_lines, validate_json
from tracegym.schema import Trajectory

FORMAT = "trajectories"
_FIELDS = {"id", "task_id", "source", "messages"}


def sniff(file: InputFile) -> bool:
    """The first line is an object with at least `id`, `task_id`, `source` and `messages`."""
    first = file.first_line()
    return isinstance(first, dict) and _FIELDS <= first.keys()


def read(file: InputFile) -> Batch:
    """Every line as a Trajectory; malformed lines are listed in `Batch.skipped`."""
    batch = Batch(str(file.path), FORMAT)
    for number, line in jsonl_lines(file.text):
        try:
            batch.trajectories.append(validate_json(Trajectory, line, f"line {number}"))
        except RecordError as error:
            batch.skip(error.json_path, error.reason)
    return batch
