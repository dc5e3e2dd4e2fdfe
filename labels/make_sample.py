"""Draw the diagnosis reference sample from ../shared/data/tau2 once, and split it.

Stratified by run file: from each chosen run, `failures` failed and `successes` passed
simulations drawn at random (seed 20261130). Each drawn trajectory is then assigned to the
"tune" or "test" half by a second seeded shuffle, so the split is fixed before any label or
detector output is seen. Writes labels/sample.json; rerunning reproduces it exactly.

    python labels/make_sample.py [--data ../shared/data]
"""

from __future__ import annotations

import argparse
import json
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


def draw(data: Path) -> list[dict]:
    rng = random.Random(SEED)
    sample = []
    for run_file, (n_fail, n_pass) in PLAN.items():
        simulations = json.loads((data / "tau2" / "results" / run_file).read_text())["simulations"]
        graded = [s for s in simulations if (s.get("reward_info") or {}).get("reward") is not None]
        failed = [s for s in graded if s["reward_info"]["reward"] < 1.0]
        passed = [s for s in graded if s["reward_info"]["reward"] >= 1.0]
        for sim in rng.sample(failed, n_fail) + rng.sample(passed, n_pass):
            sample.append({"run_file": run_file, "sim_id": sim["id"], "task_id": str(sim["task_id"]),
                           "reward": sim["reward_info"]["reward"]})
    order = list(range(len(sample)))
    random.Random(SEED + 1).shuffle(order)
    for rank, index in enumerate(order):
        sample[index]["split"] = "tune" if rank < len(order) // 2 else "test"
    return sample


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    args = parser.parse_args()
    sample = draw(args.data)
    out = Path(__file__).with_name("sample.json")
    out.write_text(json.dumps(sample, indent=1) + "\n")
    print(f"{len(sample)} trajectories -> {out}")


if __name__ == "__main__":
    main()
