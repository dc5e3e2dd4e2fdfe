"""Small runs in every ingest format, written by the tests that need them (not a test module)."""

from __future__ import annotations

import json
from pathlib import Path


def write_json(path: Path, document: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def harness_report(instance_id: str, resolved: bool) -> dict:
    return {
        "patch_exists": True,
        "patch_successfully_applied": True,
        "resolved": resolved,
        "tests_status": {
            "FAIL_TO_PASS": {"success": ["t1"] if resolved else [], "failure": [] if resolved else ["t1"]},
            "PASS_TO_PASS": {"success": ["t2"], "failure": []},
        },
    }


def mini_swe_run(root: Path, instance_ids: list[str], with_report: set[str]) -> Path:
    """A mini-swe-agent run folder; only the ids in `with_report` get a harness report."""
    for instance_id in instance_ids:
        write_json(
            root / "trajs" / instance_id / f"{instance_id}.traj.json",
            {
                "instance_id": instance_id,
                "trajectory_format": "mini-swe-agent-1",
                "info": {
                    "exit_status": "Submitted",
                    "submission": "diff --git a/x.py b/x.py\n",
                    "mini_version": "1.15.0",
                    "config": {"model": {"model_name": "m"}},
                },
                "messages": [
                    {"role": "system", "content": "sys"},
                    {
                        "role": "user",
                        "content": "<pr_description>\nConsider the following PR description:\nFix x\n</pr_description>",
                    },
                    {"role": "assistant", "content": "```bash\npytest\n```"},
                ],
            },
        )
        if instance_id in with_report:
            write_json(root / "logs" / instance_id / "report.json", {instance_id: harness_report(instance_id, True)})
        else:
            (root / "logs" / instance_id).mkdir(parents=True, exist_ok=True)
    return root


def openhands_run(root: Path, resolved: dict[str, bool]) -> Path:
    """An OpenHands output folder: one completion per instance, the summary, eval and infer logs."""
    write_json(root / "metadata.json", {"agent_class": "CodeActAgent", "llm_config": {"model": "m"}})
    for instance_id, ok in resolved.items():
        write_json(
            root / "llm_completions" / instance_id / "litellm-m-1733339462.5.json",
            {
                "messages": [
                    {"role": "system", "content": [{"type": "text", "text": "sys"}]},
                    {
                        "role": "user",
                        "content": [{"type": "text", "text": "<pr_description>\nFix y\n</pr_description>"}],
                    },
                    {
                        "role": "assistant",
                        "content": "look",
                        "tool_calls": [
                            {
                                "id": "c1",
                                "type": "function",
                                "function": {"name": "execute_bash", "arguments": '{"command": "ls"}'},
                            }
                        ],
                    },
                    {"role": "tool", "tool_call_id": "c1", "content": "x.py"},
                ],
                "response": {"choices": [{"index": 0, "message": {"role": "assistant", "content": "done"}}]},
                "kwargs": {"tools": []},
            },
        )
        log = root / "output.swebench_eval.logs" / f"instance_{instance_id}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(f"2024 INFO report: {harness_report(instance_id, ok)!r}\n", encoding="utf-8")
        infer = root / "infer_logs" / f"instance_{instance_id}.log"
        infer.parent.mkdir(parents=True, exist_ok=True)
        infer.write_text(
            f"Got git diff for instance {instance_id}:\n--------\ndiff --git a/y.py b/y.py\n--------\n",
            encoding="utf-8",
        )
    sections = {
        "Resolved": [i for i, ok in resolved.items() if ok],
        "Unresolved": [i for i, ok in resolved.items() if not ok],
    }
    (root / "output.swebench_eval.md").write_text(
        "# SWE-bench Report\n\n"
        + "".join(
            f"## {name} Instances\n"
            + "".join(f"- [{i}](output.swebench_eval.logs/instance_{i}.log)\n" for i in ids)
            + "\n"
            for name, ids in sections.items()
        ),
        encoding="utf-8",
    )
    return root
