"""Draw the diagnosis reference sample from the data folder's tau2/ runs once, and split it.

Stratified by run file: from each chosen run, `failures` failed and `successes` passed
simulations drawn at random (seed 20261130). Each drawn trajectory is then assigned to the
"tune" or "test" half by a second seeded shuffle, so the split is fixed before any label or
detector output is seen. A second round (`ROUND_2`, its own seeds) draws 46 more trajectories
that are in neither half yet, from the same runs and the runs round 1 left out, and splits them
the same way: the halves grow with fresh trajectories no labeller was tuned on. A third round
(`ROUND_3`), drawn after the test half had been measured once, adds 41 more the same way (retail
has no undrawn failures left, so only its successes). A fourth round (`ROUND_4`), drawn after the
test half had been measured again, adds 46 more, two failures for each success where the run has
them. A fifth round (`ROUND_5`), drawn after the test half had been measured a fourth time, adds
44 more the same way. A sixth round (`ROUND_6`), drawn after the test half had been
measured a fifth time, adds 40 more, mostly airline failures (26 failures, 14 successes), where
data reasoning and tool-calling precision disagree most. A seventh round (`ROUND_7`), drawn after
the test half had been measured a sixth time, adds 40 more the same way (27 failures, 13
successes; again mostly airline). An eighth round (`ROUND_8`), drawn after round 7's test half
had been measured once, adds 41 more the same way (27 failures, 14 successes; qwen2.5-7b has no
undrawn successes left). A ninth round (`ROUND_9`), drawn after the test half had been measured
with the rules tuned on round 8's tune half, adds 40 more (19 failures, 21 successes; 28 airline,
8 telecom, 4 retail). A tenth round (`ROUND_10`), drawn after the test half had been measured with
the rules tuned on round 9's tune half, adds 42 more: every failure not yet drawn (12, qwen2.5-7b
and gpt-oss-120b airline) and 30 successes.

Those halves (`split`) were dealt by trajectory, so most test trajectories share a task with a tune
one. They are kept as drawn; beside them each entry carries `task` (domain/task id of the task the
simulation ran, as tracegym's ingest names it) and `task_split`: the distinct tasks, sorted,
shuffled once (seed `TASK_SPLIT_SEED`) and halved, every trajectory going with its task.

`draw_v1` draws a fresh round from the τ-bench v1 airline file (`V1_FILE`, 50 tasks x 4 trials):
two trials of 40 tasks, split by task into halves and dealt to reading blocks (seed `V1_SEED`),
written to labels/tau_v1_sample.json.

Writes labels/sample.json (rounds 1-10 in order) and labels/tau_v1_sample.json; rerunning
reproduces both exactly.

    .venv/bin/python labels/make_sample.py [--data DIR]
    # DIR: the data folder; default $TRACEGYM_SHARED_DATA, else shared/data beside the checkout
"""

from __future__ import annotations

import argparse
import json
import os
import random
from pathlib import Path

SEED = 20261130
TASK_SPLIT_SEED = 20261206  # the halves by task, drawn once after rounds 1-10 (issue 41)
V1_FILE = "tau2/tau-bench/gpt-4o-airline_4trials_v1format.json"  # relative to the data folder
V1_SEED = 20261207  # the τ-bench v1 round: its draw, halves and blocks
# run file (relative to tau2/results) -> (failures, successes) drawn from it
PLAN: dict[str, tuple[int, int]] = {
    "airline/claude-opus-4-6__experimental_agent__50sims_1trial.json": (4, 3),
    "airline/claude-sonnet-4-5__llm_agent__50sims_1trial.json": (4, 3),
    "airline/gpt-4.1-mini-2025-04-14__llm_agent__50sims_1trial.json": (4, 3),
    "airline/gpt-4o-2024-11-20__llm_agent__50sims_1trial.json": (4, 3),
    "airline/gpt-oss-120b__langchain_agent__50sims_1trial.json": (4, 3),
    "airline/qwen2.5-7b__llm_agent__50sims_1trial.json": (4, 3),
    "retail/gpt-4.1__llm_agent__40sims_1trial.json": (5, 5),
    "retail/gpt-4.1-finetuned-tau2-sft__llm_agent__40sims_1trial.json": (5, 5),
    "telecom/gpt-4.1__llm_agent__40sims_1trial.json": (4, 3),
    "telecom/gpt-4o__llm_agent__20sims_1trial.json": (4, 3),
    "telecom/gpt-4.1-finetuned-tau2-sft__llm_agent__40sims_1trial.json": (4, 3),
}
ROUND_2: dict[str, tuple[int, int]] = {
    "airline/claude-opus-4-6__llm_agent__44sims_1trial.json": (3, 2),
    "airline/gpt-4.1__llm_agent__20sims_1trial.json": (3, 2),
    "airline/gpt-4.1-finetuned-tau2-sft__llm_agent__20sims_1trial.json": (3, 2),
    "airline/gpt-4o-2024-11-20__llm_agent__50sims_1trial.json": (2, 1),
    "airline/gpt-oss-120b__langchain_agent__50sims_1trial.json": (2, 1),
    "airline/qwen2.5-7b__llm_agent__50sims_1trial.json": (2, 1),
    "retail/gpt-4.1__llm_agent__40sims_1trial.json": (1, 3),
    "retail/gpt-4.1-finetuned-tau2-sft__llm_agent__40sims_1trial.json": (1, 3),
    "telecom/gpt-4.1__llm_agent_solo__40sims_1trial__solo.json": (3, 2),
    "telecom/gpt-4.1-finetuned-tau2-sft__llm_agent_solo__40sims_1trial__solo.json": (2, 2),
    "telecom/gpt-4.1__llm_agent__40sims_1trial.json": (3, 2),
}


ROUND_3: dict[str, tuple[int, int]] = {
    "airline/claude-opus-4-6__experimental_agent__50sims_1trial.json": (2, 1),
    "airline/claude-opus-4-6__llm_agent__44sims_1trial.json": (2, 1),
    "airline/claude-sonnet-4-5__llm_agent__50sims_1trial.json": (2, 1),
    "airline/gpt-4.1-mini-2025-04-14__llm_agent__50sims_1trial.json": (2, 1),
    "airline/gpt-4o-2024-11-20__llm_agent__50sims_1trial.json": (2, 1),
    "airline/gpt-oss-120b__langchain_agent__50sims_1trial.json": (2, 1),
    "airline/qwen2.5-7b__llm_agent__50sims_1trial.json": (2, 1),
    "retail/gpt-4.1__llm_agent__40sims_1trial.json": (0, 3),
    "retail/gpt-4.1-finetuned-tau2-sft__llm_agent__40sims_1trial.json": (0, 3),
    "telecom/gpt-4.1__llm_agent__40sims_1trial.json": (3, 1),
    "telecom/gpt-4.1__llm_agent_solo__40sims_1trial__solo.json": (2, 1),
    "telecom/gpt-4.1-2025-04-14__llm_agent_solo__20sims_4trials__solo.json": (2, 1),
    "telecom/gpt-4o__llm_agent__20sims_1trial.json": (1, 1),
    "telecom/gpt-4.1-finetuned-tau2-sft__llm_agent__40sims_1trial.json": (1, 1),
}

ROUND_4: dict[str, tuple[int, int]] = {
    "airline/claude-opus-4-6__experimental_agent__50sims_1trial.json": (2, 1),
    "airline/claude-opus-4-6__llm_agent__44sims_1trial.json": (2, 1),
    "airline/claude-sonnet-4-5__llm_agent__50sims_1trial.json": (2, 1),
    "airline/gpt-4.1-finetuned-tau2-sft__llm_agent__20sims_1trial.json": (2, 1),
    "airline/gpt-4.1-mini-2025-04-14__llm_agent__50sims_1trial.json": (2, 1),
    "airline/gpt-4.1__llm_agent__20sims_1trial.json": (2, 1),
    "airline/gpt-4o-2024-11-20__llm_agent__50sims_1trial.json": (2, 1),
    "airline/gpt-oss-120b__langchain_agent__50sims_1trial.json": (2, 1),
    "airline/qwen2.5-7b__llm_agent__50sims_1trial.json": (2, 1),
    "retail/gpt-4.1__llm_agent__40sims_1trial.json": (0, 2),
    "retail/gpt-4.1-finetuned-tau2-sft__llm_agent__40sims_1trial.json": (0, 2),
    "telecom/gpt-4.1__llm_agent__40sims_1trial.json": (2, 1),
    "telecom/gpt-4.1__llm_agent_solo__40sims_1trial__solo.json": (2, 1),
    "telecom/gpt-4.1-2025-04-14__llm_agent_solo__20sims_4trials__solo.json": (1, 1),
    "telecom/gpt-4.1-finetuned-tau2-sft__llm_agent__40sims_1trial.json": (2, 1),
    "telecom/gpt-4.1-finetuned-tau2-sft__llm_agent_solo__40sims_1trial__solo.json": (1, 1),
    "telecom/gpt-4o__llm_agent__20sims_1trial.json": (1, 1),
}

ROUND_5: dict[str, tuple[int, int]] = {
    "airline/claude-opus-4-6__experimental_agent__50sims_1trial.json": (2, 1),
    "airline/claude-opus-4-6__llm_agent__44sims_1trial.json": (2, 1),
    "airline/claude-sonnet-4-5__llm_agent__50sims_1trial.json": (2, 1),
    "airline/gpt-4.1-finetuned-tau2-sft__llm_agent__20sims_1trial.json": (2, 1),
    "airline/gpt-4.1-mini-2025-04-14__llm_agent__50sims_1trial.json": (2, 1),
    "airline/gpt-4.1__llm_agent__20sims_1trial.json": (2, 1),
    "airline/gpt-4o-2024-11-20__llm_agent__50sims_1trial.json": (2, 1),
    "airline/gpt-oss-120b__langchain_agent__50sims_1trial.json": (2, 1),
    "airline/qwen2.5-7b__llm_agent__50sims_1trial.json": (2, 1),
    "retail/gpt-4.1__llm_agent__40sims_1trial.json": (0, 2),
    "retail/gpt-4.1-finetuned-tau2-sft__llm_agent__40sims_1trial.json": (0, 2),
    "telecom/gpt-4.1__llm_agent__40sims_1trial.json": (2, 1),
    "telecom/gpt-4.1__llm_agent_solo__40sims_1trial__solo.json": (2, 1),
    "telecom/gpt-4.1-2025-04-14__llm_agent_solo__20sims_4trials__solo.json": (1, 1),
    "telecom/gpt-4.1-finetuned-tau2-sft__llm_agent__40sims_1trial.json": (1, 1),
    "telecom/gpt-4.1-finetuned-tau2-sft__llm_agent_solo__40sims_1trial__solo.json": (1, 1),
    "telecom/gpt-4o__llm_agent__20sims_1trial.json": (0, 1),
}

ROUND_6: dict[str, tuple[int, int]] = {
    "airline/claude-opus-4-6__experimental_agent__50sims_1trial.json": (2, 1),
    "airline/claude-opus-4-6__llm_agent__44sims_1trial.json": (2, 1),
    "airline/claude-sonnet-4-5__llm_agent__50sims_1trial.json": (2, 1),
    "airline/gpt-4.1-finetuned-tau2-sft__llm_agent__20sims_1trial.json": (0, 1),
    "airline/gpt-4.1-mini-2025-04-14__llm_agent__50sims_1trial.json": (3, 1),
    "airline/gpt-4.1__llm_agent__20sims_1trial.json": (2, 1),
    "airline/gpt-4o-2024-11-20__llm_agent__50sims_1trial.json": (3, 1),
    "airline/gpt-oss-120b__langchain_agent__50sims_1trial.json": (3, 1),
    "airline/qwen2.5-7b__llm_agent__50sims_1trial.json": (3, 1),
    "retail/gpt-4.1__llm_agent__40sims_1trial.json": (0, 1),
    "retail/gpt-4.1-finetuned-tau2-sft__llm_agent__40sims_1trial.json": (0, 1),
    "telecom/gpt-4.1__llm_agent__40sims_1trial.json": (2, 1),
    "telecom/gpt-4.1__llm_agent_solo__40sims_1trial__solo.json": (2, 1),
    "telecom/gpt-4.1-2025-04-14__llm_agent_solo__20sims_4trials__solo.json": (0, 1),
    "telecom/gpt-4.1-finetuned-tau2-sft__llm_agent__40sims_1trial.json": (1, 0),
    "telecom/gpt-4.1-finetuned-tau2-sft__llm_agent_solo__40sims_1trial__solo.json": (1, 0),
}

ROUND_7: dict[str, tuple[int, int]] = {
    "airline/claude-opus-4-6__experimental_agent__50sims_1trial.json": (0, 1),
    "airline/claude-opus-4-6__llm_agent__44sims_1trial.json": (1, 1),
    "airline/claude-sonnet-4-5__llm_agent__50sims_1trial.json": (1, 1),
    "airline/gpt-4.1-finetuned-tau2-sft__llm_agent__20sims_1trial.json": (0, 1),
    "airline/gpt-4.1-mini-2025-04-14__llm_agent__50sims_1trial.json": (4, 1),
    "airline/gpt-4.1__llm_agent__20sims_1trial.json": (1, 1),
    "airline/gpt-4o-2024-11-20__llm_agent__50sims_1trial.json": (4, 1),
    "airline/gpt-oss-120b__langchain_agent__50sims_1trial.json": (4, 1),
    "airline/qwen2.5-7b__llm_agent__50sims_1trial.json": (4, 1),
    "retail/gpt-4.1__llm_agent__40sims_1trial.json": (0, 1),
    "retail/gpt-4.1-finetuned-tau2-sft__llm_agent__40sims_1trial.json": (0, 1),
    "telecom/gpt-4.1__llm_agent__40sims_1trial.json": (3, 1),
    "telecom/gpt-4.1__llm_agent_solo__40sims_1trial__solo.json": (3, 1),
    "telecom/gpt-4.1-finetuned-tau2-sft__llm_agent__40sims_1trial.json": (1, 0),
    "telecom/gpt-4.1-finetuned-tau2-sft__llm_agent_solo__40sims_1trial__solo.json": (1, 0),
}

ROUND_8: dict[str, tuple[int, int]] = {
    "airline/claude-opus-4-6__experimental_agent__50sims_1trial.json": (0, 1),
    "airline/claude-opus-4-6__llm_agent__44sims_1trial.json": (1, 1),
    "airline/claude-sonnet-4-5__llm_agent__50sims_1trial.json": (1, 1),
    "airline/gpt-4.1-finetuned-tau2-sft__llm_agent__20sims_1trial.json": (0, 1),
    "airline/gpt-4.1-mini-2025-04-14__llm_agent__50sims_1trial.json": (3, 1),
    "airline/gpt-4.1__llm_agent__20sims_1trial.json": (0, 1),
    "airline/gpt-4o-2024-11-20__llm_agent__50sims_1trial.json": (4, 1),
    "airline/gpt-oss-120b__langchain_agent__50sims_1trial.json": (5, 1),
    "airline/qwen2.5-7b__llm_agent__50sims_1trial.json": (6, 0),
    "retail/gpt-4.1__llm_agent__40sims_1trial.json": (0, 1),
    "retail/gpt-4.1-finetuned-tau2-sft__llm_agent__40sims_1trial.json": (0, 1),
    "telecom/gpt-4.1__llm_agent__40sims_1trial.json": (3, 1),
    "telecom/gpt-4.1__llm_agent_solo__40sims_1trial__solo.json": (4, 1),
    "telecom/gpt-4o__llm_agent__20sims_1trial.json": (0, 1),
    "telecom/gpt-4.1-finetuned-tau2-sft__llm_agent_solo__40sims_1trial__solo.json": (0, 1),
}


ROUND_9: dict[str, tuple[int, int]] = {
    "airline/claude-opus-4-6__experimental_agent__50sims_1trial.json": (0, 2),
    "airline/claude-opus-4-6__llm_agent__44sims_1trial.json": (0, 1),
    "airline/claude-sonnet-4-5__llm_agent__50sims_1trial.json": (0, 1),
    "airline/gpt-4.1-finetuned-tau2-sft__llm_agent__20sims_1trial.json": (0, 1),
    "airline/gpt-4.1-mini-2025-04-14__llm_agent__50sims_1trial.json": (2, 2),
    "airline/gpt-4o-2024-11-20__llm_agent__50sims_1trial.json": (4, 2),
    "airline/gpt-oss-120b__langchain_agent__50sims_1trial.json": (5, 2),
    "airline/qwen2.5-7b__llm_agent__50sims_1trial.json": (6, 0),
    "retail/gpt-4.1__llm_agent__40sims_1trial.json": (0, 2),
    "retail/gpt-4.1-finetuned-tau2-sft__llm_agent__40sims_1trial.json": (0, 2),
    "telecom/gpt-4.1__llm_agent__40sims_1trial.json": (0, 2),
    "telecom/gpt-4.1__llm_agent_solo__40sims_1trial__solo.json": (2, 1),
    "telecom/gpt-4o__llm_agent__20sims_1trial.json": (0, 1),
    "telecom/gpt-4.1-finetuned-tau2-sft__llm_agent__40sims_1trial.json": (0, 1),
    "telecom/gpt-4.1-finetuned-tau2-sft__llm_agent_solo__40sims_1trial__solo.json": (0, 1),
}

ROUND_10: dict[str, tuple[int, int]] = {  # every undrawn failure left (qwen2.5-7b 10, gpt-oss-120b 2), then successes
    "airline/claude-opus-4-6__experimental_agent__50sims_1trial.json": (0, 3),
    "airline/claude-opus-4-6__llm_agent__44sims_1trial.json": (0, 2),
    "airline/claude-sonnet-4-5__llm_agent__50sims_1trial.json": (0, 3),
    "airline/gpt-4.1-finetuned-tau2-sft__llm_agent__20sims_1trial.json": (0, 1),
    "airline/gpt-4.1__llm_agent__20sims_1trial.json": (0, 1),
    "airline/gpt-4.1-mini-2025-04-14__llm_agent__50sims_1trial.json": (0, 2),
    "airline/gpt-4o-2024-11-20__llm_agent__50sims_1trial.json": (0, 2),
    "airline/gpt-oss-120b__langchain_agent__50sims_1trial.json": (2, 2),
    "airline/qwen2.5-7b__llm_agent__50sims_1trial.json": (10, 0),
    "retail/gpt-4.1__llm_agent__40sims_1trial.json": (0, 2),
    "retail/gpt-4.1-finetuned-tau2-sft__llm_agent__40sims_1trial.json": (0, 2),
    "telecom/gpt-4.1__llm_agent__40sims_1trial.json": (0, 1),
    "telecom/gpt-4.1__llm_agent_solo__40sims_1trial__solo.json": (0, 2),
    "telecom/gpt-4o__llm_agent__20sims_1trial.json": (0, 1),
    "telecom/gpt-4.1-finetuned-tau2-sft__llm_agent__40sims_1trial.json": (0, 3),
    "telecom/gpt-4.1-finetuned-tau2-sft__llm_agent_solo__40sims_1trial__solo.json": (0, 3),
}


def draw(data: Path, plan: dict[str, tuple[int, int]], seed: int, taken: set[tuple[str, str]]) -> list[dict]:
    """One round: per run file, failures and successes drawn at random among the graded
    simulations not `taken`, then split into halves by a seeded shuffle."""
    rng = random.Random(seed)
    sample = []
    for run_file, (n_fail, n_pass) in plan.items():
        simulations = json.loads((data / "tau2" / "results" / run_file).read_text())["simulations"]
        graded = [
            s
            for s in simulations
            if (s.get("reward_info") or {}).get("reward") is not None and (run_file, s["id"]) not in taken
        ]
        failed = [s for s in graded if s["reward_info"]["reward"] < 1.0]
        passed = [s for s in graded if s["reward_info"]["reward"] >= 1.0]
        for sim in rng.sample(failed, n_fail) + rng.sample(passed, n_pass):
            sample.append(
                {
                    "run_file": run_file,
                    "sim_id": sim["id"],
                    "task_id": str(sim["task_id"]),
                    "reward": sim["reward_info"]["reward"],
                }
            )
    order = list(range(len(sample)))
    random.Random(seed + 1).shuffle(order)
    for rank, index in enumerate(order):
        sample[index]["split"] = "tune" if rank < len(order) // 2 else "test"
    return sample


def draw_all(data: Path) -> list[dict]:
    """Round 1, then rounds 2-10, each excluding the trajectories of the rounds before it."""
    sample = draw(data, PLAN, SEED, set())
    rounds = (ROUND_2, ROUND_3, ROUND_4, ROUND_5, ROUND_6, ROUND_7, ROUND_8, ROUND_9, ROUND_10)
    for number, plan in enumerate(rounds, start=2):
        taken = {(entry["run_file"], entry["sim_id"]) for entry in sample}
        sample += [{**entry, "round": number} for entry in draw(data, plan, SEED + 2 * (number - 1), taken)]
    return sample


def run_tasks(data: Path, sample: list[dict]) -> list[str]:
    """The task each entry's simulation ran, as "domain/task id", in entry order: the task id
    tracegym's ingest gives the trajectory. That is the file's `task_id` except where the simulation's
    recorded verdict is another single task's (the gpt-4.1-mini airline file names other tasks; its
    readers labelled the task the conversation and verdict show, the one ingest gives)."""
    from tracegym.analysis.ingest import ingest_paths  # here: the draws themselves need the standard library only

    files = sorted({entry["run_file"] for entry in sample})
    ingested = {t.id: t.task_id for t in ingest_paths([data / "tau2" / "results" / f for f in files]).trajectories}
    tasks = []
    for entry in sample:
        trajectory_id = f"{Path(entry['run_file']).stem}/{entry['sim_id']}"
        tasks.append(f"{entry['run_file'].split('/')[0]}/{ingested[trajectory_id]}")
    return tasks


def split_by_task(sample: list[dict], tasks: list[str], seed: int = TASK_SPLIT_SEED) -> None:
    """Set each entry's `task` (from `tasks`, in entry order) and `task_split`: the distinct tasks,
    sorted, shuffled once with `seed`; the first half (rounded down) is "tune", the rest "test", and
    every entry goes to its task's half. The trajectory split `split` is left as drawn."""
    distinct = sorted(set(tasks))
    random.Random(seed).shuffle(distinct)
    tune = set(distinct[: len(distinct) // 2])
    for entry, task in zip(sample, tasks, strict=True):
        entry["task"] = task
        entry["task_split"] = "tune" if task in tune else "test"


def draw_v1(
    records: list[dict], seed: int = V1_SEED, all_fail: int = 8, all_pass: int = 6, blocks: int = 4
) -> list[dict]:
    """The fresh round from a τ-bench v1 file (`records`: its list of `{task_id, trial, reward, ...}`),
    two trials for each of its tasks drawn, before any label or detector output exists.

    A trial fails when its reward is below 1 (an ungraded trial, `reward_info` null, carries reward 0).
    Every task whose trials have both outcomes gives one success and one failure, drawn at random;
    `all_fail` tasks of those whose trials all failed and `all_pass` of those whose trials all passed
    give two trials each. Within each of those three groups the tasks are shuffled and halved (the
    first half, rounded down, "tune"); each half's tasks are dealt in turn to `blocks` reading blocks,
    so every block holds both halves. Entries are ordered by block, shuffled within it; each is
    `{file: V1_FILE, index (in records), task_id, trial, reward, half, block (1-based)}`. Raises
    ValueError when a group has fewer tasks than asked."""
    rng = random.Random(seed)
    trials: dict[str, list[int]] = {}
    for index, record in enumerate(records):
        trials.setdefault(str(record["task_id"]), []).append(index)
    failed = {task: [i for i in indices if records[i]["reward"] < 1.0] for task, indices in trials.items()}
    passed = {task: [i for i in indices if records[i]["reward"] >= 1.0] for task, indices in trials.items()}
    mixed = [task for task in sorted(trials, key=int) if failed[task] and passed[task]]
    never = [task for task in sorted(trials, key=int) if not passed[task]]
    always = [task for task in sorted(trials, key=int) if not failed[task]]
    if len(never) < all_fail or len(always) < all_pass:
        raise ValueError(f"{len(never)} tasks always fail, {len(always)} always pass: fewer than asked")
    groups = [mixed, rng.sample(never, all_fail), rng.sample(always, all_pass)]
    chosen = {task: [rng.choice(failed[task]), rng.choice(passed[task])] for task in mixed}
    chosen |= {task: sorted(rng.sample(trials[task], 2)) for task in groups[1] + groups[2]}
    halves: dict[str, list[str]] = {"tune": [], "test": []}
    for group in groups:
        order = list(group)
        rng.shuffle(order)
        halves["tune"] += order[: len(order) // 2]
        halves["test"] += order[len(order) // 2 :]
    dealt: list[list[dict]] = [[] for _ in range(blocks)]
    for half, tasks in halves.items():
        for position, task in enumerate(tasks):
            for index in chosen[task]:
                record = records[index]
                dealt[position % blocks].append(
                    {
                        "file": V1_FILE,
                        "index": index,
                        "task_id": str(record["task_id"]),
                        "trial": record["trial"],
                        "reward": record["reward"],
                        "half": half,
                        "block": position % blocks + 1,
                    }
                )
    for block in dealt:
        rng.shuffle(block)
    return [entry for block in dealt for entry in block]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    beside = Path(__file__).resolve().parents[2] / "shared" / "data"
    parser.add_argument("--data", type=Path, default=Path(os.environ.get("TRACEGYM_SHARED_DATA", beside)))
    args = parser.parse_args()
    sample = draw_all(args.data)
    split_by_task(sample, run_tasks(args.data, sample))
    out = Path(__file__).with_name("sample.json")
    out.write_text(json.dumps(sample, indent=1) + "\n")
    print(f"{len(sample)} trajectories -> {out}")
    fresh = draw_v1(json.loads((args.data / V1_FILE).read_text()))
    out = Path(__file__).with_name("tau_v1_sample.json")
    out.write_text(json.dumps(fresh, indent=1) + "\n")
    print(f"{len(fresh)} τ-bench v1 trajectories -> {out}")


if __name__ == "__main__":
    main()
