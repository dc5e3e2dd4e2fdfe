"""Print one sampled trajectory as plain text for labelling by reading (GUIDE.md).

    python labels/render.py N            # the N-th entry of labels/sample.json (0-based)
    python labels/render.py N --policy   # the policy that entry's run was given
    python labels/render.py N --sample labels/tau_v1_sample.json   # an entry of the τ-bench v1 round
    python labels/render.py --blocks DIR  # the v1 round as DIR/block1.md ... for its readers

Shows the task (user instructions, gold actions, assertions), the benchmark's verdict details,
and every message with its 0-based index in `messages[]` (τ²) or `traj[]` (τ-bench v1): the index
labels cite. Tool results longer than --width characters are cut (pass --width 0 for all of them;
block files show them all). A τ-bench v1 run's policy is its system message, `traj[0]`. Block
files name no half. The data folder is $TRACEGYM_SHARED_DATA, else shared/data beside the checkout.
"""

from __future__ import annotations

import argparse
import json
import os
from functools import lru_cache
from pathlib import Path

DATA_ROOT = Path(os.environ.get("TRACEGYM_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
DATA = DATA_ROOT / "tau2"
V1_SAMPLE = Path(__file__).with_name("tau_v1_sample.json")


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


@lru_cache(maxsize=4)
def _v1_records(path: Path) -> list[dict]:
    return json.loads(path.read_text())


def v1_record(entry: dict, data: Path = DATA_ROOT) -> dict:
    """The τ-bench v1 record of a `tau_v1_sample.json` entry (`file` relative to the data folder, `index`)."""
    return _v1_records(data / entry["file"])[entry["index"]]


def v1_policy(entry: dict, data: Path = DATA_ROOT) -> str:
    """The policy a τ-bench v1 run was given: its system message."""
    return next(m["content"] for m in v1_record(entry, data)["traj"] if m["role"] == "system")


def _v1_verdict(reward_info: dict | None, gold: list | None) -> str:
    """reward_info as JSON, its `actions` left out where they are the gold actions printed above."""
    if reward_info is None:
        return "null (no verdict details recorded)"
    if reward_info.get("actions") == gold:
        shown = {k: v for k, v in reward_info.items() if k != "actions"}
        return json.dumps(shown) + "  (its actions: the gold actions above)"
    return json.dumps(reward_info)


def render_v1(entry: dict, number: int, width: int, data: Path = DATA_ROOT, policy_shown: str | None = None) -> str:
    """Entry `number` of the τ-bench v1 round as text: task, gold, verdict details and every message of
    `traj` with its index (tool calls as recorded, arguments verbatim). The system message is replaced
    by a pointer when it equals `policy_shown`, the policy printed once above. The half is not shown."""
    record = v1_record(entry, data)
    task, reward_info = record["info"]["task"], record["info"].get("reward_info")
    lines = [
        f"# entry {number}: {entry['file']} [{entry['index']}]  task {record['task_id']}  trial {record['trial']}",
        f"reward {record['reward']}",
        "",
        "## task (the simulated user's instructions)",
        f"user_id: {task.get('user_id')}",
        task.get("instruction", ""),
        "",
        "## gold (the actions and outputs the grader expects)",
        "actions: " + json.dumps(task.get("actions"), indent=1),
        "outputs: " + json.dumps(task.get("outputs")),
        "",
        "## verdict details",
        "reward_info: " + _v1_verdict(reward_info, task.get("actions")),
        "",
        "## messages",
    ]
    for index, message in enumerate(record["traj"]):
        role, body = message["role"], message.get("content") or ""
        if role == "system" and policy_shown is not None and body == policy_shown:
            body = "(the policy printed at the head of this file, word for word)"
        head = f"[{index}] {role}" + (f" ({message.get('name')})" if role == "tool" else "")
        lines.append(f"{head}: {_short(body, width) if role == 'tool' else body}")
        for call in message.get("tool_calls") or []:
            lines.append(f"    -> {call['function']['name']}({call['function']['arguments']})")
    return "\n".join(lines)


def write_blocks(out: Path, sample: list[dict], data: Path = DATA_ROOT) -> list[Path]:
    """One file per block of the v1 round (`sample`: tau_v1_sample.json's entries, each with its
    `block`), `out`/block<K>.md: the policy once (when every run of the block had the same), then each
    entry in sample order, tool results in full. Returns the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for block in sorted({e["block"] for e in sample}):
        numbered = [(n, e) for n, e in enumerate(sample) if e["block"] == block]
        policies = {v1_policy(e, data) for _, e in numbered}
        policy = policies.pop() if len(policies) == 1 else None
        head = [
            f"# Block {block}: {len(numbered)} τ-bench v1 airline trajectories, entries "
            + ", ".join(str(n) for n, _ in numbered),
            "",
            "Read brief.md first. Each entry starts with a line `# entry N: ...`; messages are cited by the",
            "index in brackets.",
        ]
        if policy is not None:
            head += ["", "## The policy every run in this block was given (its system message, [0])", "", policy]
        entries = [render_v1(e, n, 0, data, policy) for n, e in numbered]
        path = out / f"block{block}.md"
        path.write_text("\n".join(head) + "\n\n---\n\n" + "\n\n---\n\n".join(entries) + "\n")
        written.append(path)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("index", type=int, nargs="?", help="the entry of --sample to print")
    parser.add_argument("--policy", action="store_true", help="print the policy the entry's run was given instead")
    parser.add_argument("--width", type=int, default=1500)
    parser.add_argument(
        "--sample", type=Path, default=Path(__file__).with_name("sample.json"), help="default labels/sample.json"
    )
    parser.add_argument("--blocks", type=Path, help="write the v1 round's block files (tau_v1_sample.json) here")
    args = parser.parse_args()
    if args.blocks is not None:
        for path in write_blocks(args.blocks, json.loads(V1_SAMPLE.read_text())):
            print(path)
        return
    if args.index is None:
        parser.error("give an entry index, or --blocks DIR")
    entry = json.loads(args.sample.read_text())[args.index]
    if "file" in entry:  # a τ-bench v1 entry
        print(v1_policy(entry) if args.policy else render_v1(entry, args.index, args.width))
        return
    if args.policy:
        run = json.loads((DATA / "results" / entry["run_file"]).read_text())
        print(run["info"]["environment_info"]["policy"])
        return
    print(render(entry, args.width))


if __name__ == "__main__":
    main()
