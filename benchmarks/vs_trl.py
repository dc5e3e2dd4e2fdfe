"""tracegym's GRPO trainer against TRL's `GRPOTrainer`, side by side in one run (issue 42).

The peer a user would pick instead: TRL 1.16's GRPOTrainer with `environment_factory`
(tracegym.synth_envs.trl_adapter) trains the same LoRA warm start as tracegym's TurnGRPOTrainer,
on the same family, model, group size, steps, training seeds (in the order tracegym drew them; no
redraws), learning rate and sampling temperature. TRL sees the
conversations tracegym's rollouts see: the same system prompt (tools and call format included),
the same rendering of calls and results (`tracegym_chat_template`), a plain-text turn as the final
answer, scored by the environment (`final_answer_reward`).

Printed and written to `--out`/result.json: seconds per training step of each trainer, by wall
clock and by the process's CPU time (the sounder figure on a machine busy with other work), and
their ratio (TRL over tracegym: above 1 means tracegym is faster), and each trainer's held-out
change (after − warm start, greedy and sampled), paired per held-out seed, with tracegym − TRL.

What differs, by design of each library (stated in the result file):
- tokens: tracegym caps each assistant turn (`RolloutConfig.max_new_tokens`, fitted to the family)
  and the turns (`max_turns`); TRL caps the whole completion, tool results included
  (`max_completion_length` = max_turns × the turn cap) and the tool-calling rounds (max_turns − 1);
- a malformed tool call: tracegym answers it with an error and the episode goes on; TRL reads the
  turn as plain text, so it ends the episode as a wrong final answer;
- loss: tracegym's turn-credit clipped surrogate (clip 0.2 / 0.28) against TRL's default "dapo" loss
  with the same clip (epsilon 0.2, epsilon_high 0.28), no KL term on either side (TRL's default
  beta 0; tracegym's reference model serves the turn credit), constant learning rate on both.

    python benchmarks/vs_trl.py [--family F] [--steps N] [--runs N] [--heldout N] [--sampled N] [--out DIR]
    python benchmarks/vs_trl.py --quick   # seconds: the tiny random model, 1 step, group of 2

Cost (defaults: error_recovery, 6 steps, 1 run; embedded model, 2 CPU cores): the warm start, then
per run 6 steps × 8 rollouts for each trainer, and 32 held-out seeds scored greedily and sampled
before and after each; about 13 minutes. `--out` keeps every
stage, and a rerun reuses finished ones.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from learning import (
    FULL,
    QUICK,
    family_name,
    rollout_config,
    rung_spec,
    scored,
    trainer_from_warm_start,
    warm_start_scored,
)
from learning_report import interval_text, summarise

from tracegym.adapters.config import TurnGRPOConfig, WarmStartConfig
from tracegym.adapters.grpo import read_log
from tracegym.adapters.lora import attach_lora
from tracegym.adapters.train import env_factory_for, load_base
from tracegym.config import RolloutConfig
from tracegym.precision import use_bf16
from tracegym.rollout import fit_turn_budget
from tracegym.schema import EnvSpec
from tracegym.synth_envs.trl_adapter import (
    final_answer_reward,
    tracegym_chat_template,
    trl_dataset,
    trl_environment_class,
)

TRAINERS = ("tracegym", "trl")


def trl_budget(spec: EnvSpec, tokenizer: Any, rollout: RolloutConfig) -> dict[str, int]:
    """TRL's token and tool-round caps matching tracegym's turn cap × turns for `spec`."""
    env = env_factory_for(spec)()
    turn_tokens = fit_turn_budget(rollout, env, tokenizer).max_new_tokens
    assert turn_tokens is not None
    return {
        "turn_tokens": turn_tokens,
        "max_turns": env.max_turns,
        "max_completion_length": env.max_turns * turn_tokens,
        "max_tool_calling_iterations": env.max_turns - 1,
    }


def trl_run(
    spec: EnvSpec, settings: dict[str, Any], seed: int, out: Path, rollout: RolloutConfig, progress: bool
) -> dict[str, Any]:
    """TRL's GRPOTrainer on the warm start in out/warm_start (trained or reused from out/trl_SEED),
    on the training seeds tracegym's run of `seed` drew, in its order; its training rewards, wall
    time and held-out scores."""
    from trl import GRPOConfig, GRPOTrainer

    folder = out / f"trl_{seed}"
    record = folder / "run.json"
    if record.is_file():
        return json.loads(record.read_text())
    train_seeds = [s for step in read_log(out / f"tracegym_{seed}") for s in step["seeds"]]
    if len(train_seeds) != settings["steps"] * settings["groups"]:
        raise SystemExit(f"{out}/tracegym_{seed}: its log lists {len(train_seeds)} training seeds; delete it and rerun")
    model, tokenizer = load_base(settings["model"])
    budget = trl_budget(spec, tokenizer, rollout)
    config = GRPOConfig(
        output_dir=str(folder),
        max_steps=settings["steps"],
        per_device_train_batch_size=settings["groups"] * settings["group_size"],
        shuffle_dataset=False,  # tracegym's seeds in tracegym's order
        num_generations=settings["group_size"],
        learning_rate=settings["lr"],
        lr_scheduler_type="constant",
        temperature=rollout.temperature,
        max_completion_length=budget["max_completion_length"],
        max_tool_calling_iterations=budget["max_tool_calling_iterations"],
        epsilon=TurnGRPOConfig.epsilon_low,
        epsilon_high=TurnGRPOConfig.epsilon_high,
        max_grad_norm=TurnGRPOConfig.max_grad_norm,
        gradient_checkpointing=False,  # as tracegym's GRPO
        generation_kwargs={"use_cache": True},  # else TRL generates without the KV cache here, ~8x slower a step
        bf16=use_bf16(settings["bf16"], "cpu"),
        use_cpu=True,
        seed=seed,
        report_to=[],
        logging_steps=1,
        save_strategy="no",
        disable_tqdm=not progress,
    )
    trainer = GRPOTrainer(
        model=attach_lora(model, adapter_dir=out / "warm_start"),
        args=config,
        processing_class=tracegym_chat_template(tokenizer),
        train_dataset=trl_dataset(spec.family, train_seeds, tracegym_prompt=True, **spec.knobs),
        environment_factory=trl_environment_class(spec.family, answer_tool=False, **spec.knobs),
        reward_funcs=[final_answer_reward],
    )
    seconds = timed_training(trainer.train)
    after = scored(folder / "heldout_after.json", trainer.model, tokenizer, spec, settings, rollout)
    result = {
        "trainer": "trl",
        "credit": "trl",
        "seed": seed,
        "budget": budget,
        "train_seeds": train_seeds,
        "after": after.to_dict(),
        "train_reward": [entry["reward"] for entry in trainer.state.log_history if "reward" in entry],
        "rollouts": settings["steps"] * settings["groups"] * settings["group_size"],
        **seconds,
    }
    folder.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps(result))
    return result


def tracegym_run(
    spec: EnvSpec, settings: dict[str, Any], seed: int, out: Path, rollout: RolloutConfig, progress: bool
) -> dict[str, Any]:
    """tracegym's TurnGRPOTrainer (turn credit) on the same warm start (trained or reused from
    out/tracegym_SEED); its training rewards, wall time and held-out scores."""
    folder = out / f"tracegym_{seed}"
    record = folder / "run.json"
    if record.is_file():
        return json.loads(record.read_text())
    trainer = trainer_from_warm_start(
        spec, settings, "trace", seed, settings["lr"], out / "warm_start", folder, rollout
    )
    seconds = timed_training(lambda: trainer.train(progress=progress))
    after = scored(folder / "heldout_after.json", trainer.policy, trainer.tokenizer, spec, settings, rollout)
    steps = read_log(folder)
    result = {
        "trainer": "tracegym",
        "credit": "tracegym",
        "seed": seed,
        "after": after.to_dict(),
        "train_reward": [step["reward_mean"] for step in steps],
        "train_seeds": [s for step in steps for s in step["seeds"]],
        "rollouts": sum(step["rollouts"] for step in steps),
        **seconds,
    }
    record.write_text(json.dumps(result))
    return result


def timed_training(train: Callable[[], Any]) -> dict[str, float]:
    """Run `train()`; its wall seconds and this process's CPU seconds (all threads), which a
    machine busy with other work inflates far less than the wall time."""
    wall, cpu = time.perf_counter(), time.process_time()
    train()
    return {"train_wall_seconds": time.perf_counter() - wall, "train_cpu_seconds": time.process_time() - cpu}


def per_step(runs: list[dict[str, Any]], clock: str, steps: int) -> float:
    """Mean seconds of a training step over `runs` by `clock` ("wall" or "cpu")."""
    return sum(run[f"train_{clock}_seconds"] for run in runs) / (steps * len(runs))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="seconds-long smoke on the tiny random model")
    parser.add_argument(
        "--family", default="error_recovery", type=family_name, help="synthetic family (default %(default)s)"
    )
    parser.add_argument(
        "--steps", type=int, default=TurnGRPOConfig.steps, help="GRPO steps of each trainer (default %(default)s)"
    )
    parser.add_argument(
        "--runs", type=int, default=1, help="runs per trainer, each from its own trainer seed (default %(default)s)"
    )
    parser.add_argument("--heldout", type=int, help=f"held-out seeds (default {FULL['heldout']})")
    parser.add_argument("--sampled", type=int, default=1, help="sampled episodes per held-out seed (default 1)")
    parser.add_argument("--out", type=Path, help="keep every stage here (default: a temporary folder)")
    args = parser.parse_args(argv)
    settings = dict(QUICK if args.quick else FULL)
    settings.update(steps=1 if args.quick else args.steps, seeds=args.runs, sampled=args.sampled, redraws=0)
    if args.heldout is not None:
        settings["heldout"] = args.heldout
    spec, rollout = rung_spec(args.family), rollout_config(settings)
    with tempfile.TemporaryDirectory(prefix="tracegym-vs-trl-") as scratch:
        out = (args.out or Path(scratch)) / args.family
        warm, before = warm_start_scored(spec, settings, WarmStartConfig.learning_rate, out, rollout)
        runs = []
        for seed in range(args.runs):
            for train in (tracegym_run, trl_run):
                runs.append(train(spec, settings, seed, out, rollout, progress=not args.quick))
        seconds = {
            clock: {t: per_step([r for r in runs if r["trainer"] == t], clock, settings["steps"]) for t in TRAINERS}
            for clock in ("wall", "cpu")
        }
        family = {"family": args.family, "knobs": spec.knobs, "before": before.to_dict(), "runs": runs}
        comparison = summarise(family, TRAINERS)
        result = {
            "settings": settings,
            "seconds_per_step": seconds,
            "trl_over_tracegym": {clock: seconds[clock]["trl"] / seconds[clock]["tracegym"] for clock in seconds},
            "comparison": comparison,
            **family,
        }
        (out / "result.json").write_text(json.dumps(result, indent=1))
        report(result)
        print(f"wrote {out / 'result.json'}")
    return 0


def report(result: dict[str, Any]) -> None:
    """Print step times, their ratio and the paired held-out changes (* : the 95% interval excludes 0)."""
    seconds, ratio, comparison = result["seconds_per_step"], result["trl_over_tracegym"], result["comparison"]
    for clock in ("wall", "cpu"):
        print(
            f"{result['family']}: {clock} seconds per step: tracegym {seconds[clock]['tracegym']:.1f}, "
            f"TRL {seconds[clock]['trl']:.1f}; TRL / tracegym {ratio[clock]:.2f}x"
        )
    for metric, differences in comparison["tracegym_minus_trl"].items():
        changes = {t: comparison["after_minus_before"][t][metric] for t in TRAINERS}
        shown = ", ".join(f"{t} {interval_text(changes[t])}" for t in TRAINERS)
        print(f"  held-out {metric}: change {shown}; tracegym - TRL {interval_text(differences)}")


if __name__ == "__main__":
    sys.exit(main())
