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
and gpt-oss-120b airline) and 30 successes. Writes labels/sample.json (rounds 1-10 in order);
rerunning reproduces it exactly.

    python labels/make_sample.py [--data DIR]   # default: $TRACEGYM_SHARED_DATA, else shared/data beside the checkout
"""

from __future__ import annotations

import argparse
import json
import os
import random
from pathlib import Path

SEED = 20261130
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    beside = Path(__file__).resolve().parents[2] / "shared" / "data"
    parser.add_argument("--data", type=Path, default=Path(os.environ.get("TRACEGYM_SHARED_DATA", beside)))
    args = parser.parse_args()
    sample = draw_all(args.data)
    out = Path(__file__).with_name("sample.json")
    out.write_text(json.dumps(sample, indent=1) + "\n")
    print(f"{len(sample)} trajectories -> {out}")


if __name__ == "__main__":
    main()
