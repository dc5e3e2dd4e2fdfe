"""Print one sampled τ²-bench simulation as plain text for labelling by reading (GUIDE.md).

    python labels/render.py N            # the N-th entry of labels/sample.json (0-based)
    python labels/render.py N --policy   # the policy that entry's run was given

Shows the task (user instructions, gold actions, assertions), the benchmark's verdict details,
and every message with its 0-based index in `messages[]` (the index labels cite). Tool results
longer than --width characters are cut (pass --width 0 for all of them).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "tau2"


def _short(text: str, width: int) -> str:
    return text if width <= 0 or len(text) <= width else text[:width] + f" …[{len(text) - width} more chars]"


def render(entry: dict, width: int) -> str:
    run = json.loads((DATA / "results" / entry["run_file"]).read_text())
    sim = next(s for s in run["simulations"] if s["id"] == entry["sim_id"])
    task = next(t for t in run["tasks"] if str(t["id"]) == str(sim["task_id"]))
    info = run["info"]
    lines = [
        f"# {entry['run_file']}  sim {sim['id']}  task {sim['task_id']}",
        f"agent: {info['agent_info'].get('implementation')} / {info['agent_info'].get('llm')}   "
        f"user: {info['user_info'].get('implementation')} / {info['user_info'].get('llm')}",
        f"reward {sim['reward_info'].get('reward')}   termination {sim.get('termination_reason')}",
        "",
        "## task",
        json.dumps(task.get("description"), indent=1),
        json.dumps(task["user_scenario"], indent=1),
        "",
        "## evaluation criteria (gold)",
        json.dumps(task["evaluation_criteria"], indent=1),
        "",
        "## verdict details",
    ]
    reward_info = sim["reward_info"]
    for key in ("db_check", "reward_breakdown", "nl_assertions", "communicate_checks", "env_assertions"):
        lines.append(f"{key}: {json.dumps(reward_info.get(key))}")
    for check in reward_info.get("action_checks") or []:
        action = check["action"]
        lines.append(
            f"action_check match={check['action_match']}: {action['name']}({json.dumps(action['arguments'])})"
            f" requestor={action.get('requestor')}"
        )
    lines += ["", "## messages"]
    for index, message in enumerate(sim["messages"]):
        role = message["role"]
        head = f"[{index}] {role}" + (f" ({message.get('requestor')})" if role == "tool" else "")
        if message.get("error"):
            head += " ERROR"
        body = message.get("content") or ""
        if role == "tool":
            body = _short(body, width)
        lines.append(f"{head}: {body}")
        for call in message.get("tool_calls") or []:
            lines.append(f"    -> {call['name']}({json.dumps(call['arguments'])})")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("index", type=int)
    parser.add_argument("--policy", action="store_true", help="print the policy the entry's run was given instead")
    parser.add_argument("--width", type=int, default=1500)
    args = parser.parse_args()
    entry = json.loads(Path(__file__).with_name("sample.json").read_text())[args.index]
    if args.policy:
        run = json.loads((DATA / "results" / entry["run_file"]).read_text())
        print(run["info"]["environment_info"]["policy"])
        return
    print(render(entry, args.width))


if __name__ == "__main__":
    main()
