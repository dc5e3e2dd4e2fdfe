"""GRPO under two processes (`accelerate launch --multi_gpu --num_processes 2`, gloo on the CPU, the
tiny model) against one process on the same training seeds: each process rolls out and scores only
its share of the groups, a group's episodes depend on its seed only, one optimizer step gives the
same loss and LoRA weights, only the main process writes files, and a resume under two processes
continues where the checkpoint left off; `tracegym train` itself under two processes.

Run as a script, this file is the worker both runs launch (`python tests/test_two_processes.py OUT
REPORTS --stops 1 2 [--resume]`): it trains up to each stop and writes what this process did there to
REPORTS/<stop>-<process>.pt.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

WORKER = Path(__file__).resolve()
GROUPS, GROUP_SIZE = 4, 4
TRAIN_SEEDS = (0, 100)
HELDOUT_SEEDS = range(100, 105)  # five: an uneven split between two processes
# The two runs' gradients are the same sums taken in another order (float32): they and the weights differ
# by rounding only (measured: 5e-9 at most, gradients up to 1.6e-2; weights moved by 1e-3, the learning rate).
# AdamW's first step is blind to the gradient's scale, so the gradients are compared as well as the weights.
GRADIENT_ATOL = WEIGHT_ATOL = 1e-6
LOSS_RTOL = 1e-5
pytestmark = pytest.mark.slow  # launches three pairs of processes: about 45 s on 2 cores

# -- the worker ------------------------------------------------------------------------------


def _worker(argv: list[str]) -> None:
    """Train (resuming with --resume) up to each of --stops in turn; at each, write this process's
    seeds rolled out and scored, episodes, log records, LoRA weights and sharded held-out scores."""
    from adapters_lookup_env import ProseEnv, chatty_tiny_model

    from tracegym.adapters.config import CreditConfig, TurnGRPOConfig
    from tracegym.adapters.grpo import TurnGRPOTrainer, end_processes
    from tracegym.adapters.heldout import score_heldout
    from tracegym.adapters.lora import attach_lora, trainable_state
    from tracegym.adapters.train import score_sharded
    from tracegym.config import RolloutConfig

    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("reports", type=Path)
    parser.add_argument("--stops", type=int, nargs="+", required=True)
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args(argv)

    model, tokenizer = chatty_tiny_model()
    config = TurnGRPOConfig(
        steps=max(args.stops),
        groups_per_step=GROUPS,
        group_size=GROUP_SIZE,
        learning_rate=1e-3,
        lora_rank=4,
        save_every=1,
        max_redraws=0,  # redraws take the next seeds per process: the groups would differ from one process's
        hint_fraction=0.25,
        max_grad_norm=1e9,
        credit=CreditConfig(credit="trace"),
    )
    rollout = RolloutConfig(temperature=1.0, max_new_tokens=12)
    policy = attach_lora(model, rank=config.lora_rank, seed=config.seed)
    trainer = TurnGRPOTrainer(policy, tokenizer, ProseEnv, config, rollout, args.out, train_seeds=TRAIN_SEEDS)
    rolled, scored, episodes = [], [], []
    rollouts, advantages = trainer.rollouts, trainer.advantages

    def record_rollouts(seeds: list[int]) -> Any:
        rolled.extend(seeds)
        drawn = rollouts(seeds)
        episodes.extend((e.seed, e.hinted, e.completion_ids, e.reward) for e in drawn)
        return drawn

    def record_advantages(kept: list[Any]) -> Any:
        scored.extend(sorted({e.seed for e in kept}))
        return advantages(kept)

    trainer.rollouts, trainer.advantages = record_rollouts, record_advantages
    named = [(name, p) for name, p in trainer.policy.named_parameters() if p.requires_grad]
    gradients: list[dict[str, torch.Tensor]] = []
    step = trainer.optimizer.step

    def record_step(*step_args: Any, **kwargs: Any) -> Any:
        gradients.append({name: p.grad.detach().cpu().clone() for name, p in named})
        return step(*step_args, **kwargs)

    trainer.optimizer.step = record_step
    if args.resume:
        assert trainer.resume()
    score = functools.partial(score_heldout, tokenizer=tokenizer, env_factory=ProseEnv, rollout=rollout, sampled=2)
    args.reports.mkdir(parents=True, exist_ok=True)
    for stop in args.stops:
        records = trainer.train(progress=False, until=stop)
        heldout = score_sharded(score, trainer.policy, HELDOUT_SEEDS)
        report = {
            "process": trainer.accelerator.process_index,
            "processes": trainer.accelerator.num_processes,
            "rolled": rolled,
            "scored": scored,
            "episodes": episodes,
            "records": records,
            "weights": {name: w.cpu() for name, w in trainable_state(trainer.policy).items()},
            "gradients": gradients,
            "heldout": heldout.to_dict(),
        }
        torch.save(report, args.reports / f"{stop}-{report['process']}.pt")
        rolled, scored, episodes, gradients = [], [], [], []
    end_processes()


# -- the test --------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _started(processes: int, *program: str) -> subprocess.CompletedProcess[str]:
    """`program` (a script and its arguments, or `-m module ...`) run to its end in `processes`
    processes: `accelerate launch --multi_gpu` (torchrun underneath) for several, plain python for
    one; on the CPU (no GPU visible), one torch thread each."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
    launcher = [sys.executable]
    if processes > 1:
        launcher += ["-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(processes)]
        launcher += ["--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]
        launcher += ["--main_process_port", str(_free_port())]
    return subprocess.run([*launcher, *program], env=env, capture_output=True, text=True, timeout=900)


def _launch(processes: int, *program: str) -> str:
    """`_started`, which must succeed; its stdout."""
    done = _started(processes, *program)
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout


def _run(processes: int, out: Path, reports: Path, *args: str) -> None:
    """The worker in `processes` processes."""
    _launch(processes, str(WORKER), str(out), str(reports), *args)


def _report(reports: Path, stop: int, process: int) -> dict[str, Any]:
    return torch.load(reports / f"{stop}-{process}.pt", weights_only=False)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One process for two steps; two processes for one step (a checkpoint at step 1), then two
    processes resuming from it for the second."""
    root = tmp_path_factory.mktemp("two_processes")
    _run(1, root / "one", root / "one_reports", "--stops", "1", "2")
    _run(2, root / "two", root / "two_reports", "--stops", "1")
    _run(2, root / "two", root / "resumed_reports", "--stops", "2", "--resume")
    return root


def _log(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]


def _without_time(record: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in record.items() if not key.endswith("_seconds")}


def _assert_close(expected: dict[str, torch.Tensor], actual: dict[str, torch.Tensor], atol: float) -> None:
    assert expected.keys() == actual.keys()
    for name in expected:
        assert torch.allclose(expected[name], actual[name], rtol=0, atol=atol), name


def test_one_step_of_two_processes_equals_one_process(runs):
    one, two = _report(runs / "one_reports", 1, 0), [_report(runs / "two_reports", 1, p) for p in (0, 1)]
    assert [r["processes"] for r in two] == [2, 2] and one["processes"] == 1

    # each process rolls out and scores only its share: half the groups, disjoint, together the single run's
    shares = [set(r["rolled"]) for r in two]
    assert [len(r["rolled"]) for r in two] == [GROUPS // 2] * 2 and not shares[0] & shares[1]
    assert shares[0] | shares[1] == set(one["rolled"])
    assert all(set(r["scored"]) <= set(r["rolled"]) for r in two) and two[0]["scored"] and two[1]["scored"]
    # a group's episodes depend on its seed only, not on the process that drew it
    assert sorted(two[0]["episodes"] + two[1]["episodes"]) == sorted(one["episodes"])

    (single,) = one["records"]
    (record,), (other,) = (r["records"] for r in two)
    assert _without_time(record) == _without_time(other), "every process logs the same step"
    assert single["kept_groups"] == GROUPS, "a flat group would leave nothing to compare"
    assert record["loss"] == pytest.approx(single["loss"], rel=LOSS_RTOL) and abs(single["loss"]) > 1e-4
    for key in ("reward_mean", "reward_std", "train_tokens", "kept_groups", "clip_fraction", "rollouts"):
        assert record[key] == pytest.approx(single[key], rel=1e-9), key

    assert all(torch.equal(two[0]["weights"][n], w) for n, w in two[1]["weights"].items()), "processes diverged"
    (gradients,) = one["gradients"]
    assert max(g.abs().max() for g in gradients.values()) > 1e-3, "gradients too small to compare"
    for process in two:
        _assert_close(gradients, process["gradients"][0], GRADIENT_ATOL)  # all-reduced: the whole batch's
    _assert_close(one["weights"], two[0]["weights"], WEIGHT_ATOL)
    assert any(w.abs().max() > 1e-4 for n, w in one["weights"].items() if "lora_B" in n), "B starts at 0: no step"
    # the sharded held-out scores (three seeds and two) equal one process's
    assert two[0]["heldout"] == two[1]["heldout"] == one["heldout"]
    assert two[0]["heldout"]["seeds"] == list(HELDOUT_SEEDS)


def test_only_the_main_process_writes_and_a_resume_continues_the_run(runs):
    one_final, resumed = _report(runs / "one_reports", 2, 0), [_report(runs / "resumed_reports", 2, p) for p in (0, 1)]
    assert [r["processes"] for r in resumed] == [2, 2]
    assert [r["step"] for r in _log(runs / "two")] == [1, 2], "one record a step: the log is the main process's"
    assert sorted(p.name for p in (runs / "two").iterdir()) == ["checkpoint", "train_log.jsonl"]
    assert [r["step"] for r in resumed[0]["records"]] == [2], "the resumed run starts after the checkpoint"
    shares = [set(r["rolled"]) for r in resumed]
    assert shares[0] | shares[1] == set(one_final["rolled"]) and not shares[0] & shares[1]
    _assert_close(one_final["weights"], resumed[0]["weights"], WEIGHT_ATOL)
    assert _log(runs / "two")[1]["loss"] == pytest.approx(_log(runs / "one")[1]["loss"], rel=LOSS_RTOL)


def test_train_command_under_two_processes_prints_once_and_resumes(tmp_path):
    """`tracegym train` launched in two processes: one JSON line, the artifacts and one log record a
    step from the main process, held-out scores of every seed (three and two a process), a resume."""
    out = tmp_path / "adapter"
    common = ["-m", "tracegym.cli", "train", "precondition_verification", "--out", str(out), "--model", "tiny"]
    common += ["--grpo-groups-per-step", "2", "--grpo-group-size", "2", "--max-new-tokens", "6"]
    common += ["--eval-seeds", "5", "--eval-sampled", "1", "--grpo-save-every", "1", "--credit", "grpo"]
    printed = _launch(2, *common, "--grpo-steps", "1")
    assert len(printed.strip().splitlines()) == 1 and json.loads(printed)["adapter"] == str(out.resolve())
    printed = _launch(2, *common, "--grpo-steps", "2", "--resume")
    assert len(printed.strip().splitlines()) == 1
    assert [r["step"] for r in _log(out)] == [1, 2]
    artifact = json.loads((out / "artifact.json").read_text())
    assert artifact["metrics"]["steps"] == 2
    low = artifact["env_spec"]["eval_seeds"][0]
    for scores in artifact["metrics"]["heldout_per_seed"].values():
        assert scores["seeds"] == list(range(low, low + 5)) and len(scores["greedy_reward"]) == 5


def test_a_warm_start_step_trains_the_same_dialogues_in_two_processes_as_in_one(tmp_path):
    """The warm start's batch is split over the processes, not repeated in each: the tokens one step
    trains on are the same; a batch the processes cannot split is refused with the flag to change."""
    common = ["-m", "tracegym.cli", "train", "error_recovery", "--model", "tiny", "--warm-start"]
    common += ["--warm-start-dialogues", "2", "--warm-start-steps", "1", "--grpo-steps", "1"]
    common += ["--grpo-groups-per-step", "2", "--grpo-group-size", "2", "--max-new-tokens", "4", "--eval-seeds", "2"]
    trained = {}
    for processes in (1, 2):
        out = tmp_path / f"processes_{processes}"
        _launch(processes, *common, "--warm-start-batch-size", "2", "--out", str(out))
        trained[processes] = json.loads((out / "warm_start" / "warm_start.json").read_text())["trained_tokens"]
    assert trained[1] and trained[1] == trained[2]
    done = _started(2, *common, "--warm-start-batch-size", "1", "--out", str(tmp_path / "odd"))
    assert done.returncode != 0 and "does not split evenly over 2 processes" in done.stderr


if __name__ == "__main__":
    _worker(sys.argv[1:])
