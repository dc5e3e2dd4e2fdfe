"""Does GRPO make the embedded model better on held-out seeds, and does TRACE turn credit beat plain
GRPO on the same training seeds? (issue 10, must-show)

Per family (default: two, at their easiest ladder rung): a deliberately short SFT warm start (a few
oracle dialogues: the policy calls tools but has not solved the family; whether its held-out mean
reward lies in the calibration band, default [0.2, 0.6], is reported), scored on held-out seeds,
greedy and sampled at the rollout temperature (TEMPERATURE, 0.7; tracegym.adapters.heldout). Then for each credit
("trace", "grpo") and each training seed: GRPO from the warm start (π_ref = the frozen warm start)
for `steps` steps of `groups × group_size` rollouts, a flat group (all rewards equal: no update)
replaced by a fresh seed's group up to `--redraws` rounds a step (default TurnGRPOConfig's 2; with 0
every run samples the same number of rollouts, the report lists each run's; updates in bfloat16
autocast where the device computes it natively, float32 elsewhere, as configs/default.toml trains:
tracegym.precision), then the held-out scores after.
Comparisons are paired per held-out seed (every policy is scored on the same seeds with the same
sampling seeds): each credit's after-score (mean over its training seeds) minus the warm start's,
and trace minus grpo, with paired bootstrap 95% intervals (tracegym.stats.paired_difference).
Writes result.json and curves.png (training reward per step).

    python benchmarks/learning.py [--out DIR] [--families F1,F2] [--steps N] [--seeds N] [--heldout N]
                                  [--sampled N] [--groups N] [--redraws N] [--lr LR] [--temperature T]
                                  [--warm-lr LR] [--warm-start FAMILY=DIALOGUESxSTEPS ...]
    python benchmarks/learning.py --out DIR --only grpo:2   # one run only, e.g. in a second process
    python benchmarks/learning.py --jobs 2   # each family's runs in two processes (two cores)
    python benchmarks/learning.py --quick    # seconds: the tiny random model, 2 steps, 1 seed

Cost (default config): sized for <= 45 min a family on 2 unloaded cores; `--out` keeps every run
folder, and a rerun reuses finished warm starts and resumes GRPO runs from their checkpoints.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from learning_report import plot_curves, report, summarise

from tracegym.adapters.config import CreditConfig, TurnGRPOConfig, WarmStartConfig
from tracegym.adapters.grpo import TurnGRPOTrainer, read_log
from tracegym.adapters.heldout import HeldoutScores, score_heldout
from tracegym.adapters.lora import add_reference, attach_lora
from tracegym.adapters.sft import warm_start
from tracegym.adapters.train import env_factory_for, load_base
from tracegym.config import DEFAULT_MODEL, TINY_MODEL, RolloutConfig
from tracegym.schema import EnvSpec
from tracegym.synth_envs.registry import get_family

CREDITS = ("trace", "grpo")
# (oracle dialogues, SFT steps) of each family's warm start (`--warm-start FAMILY=DxS` overrides), chosen
# with benchmarks/warm_start_probe.py (the probes, and why both lie below the band by sampled reward,
# are in the README, "Learning"); QUICK and unlisted families use WARM_START_DEFAULT.
WARM_START: dict[str, tuple[int, int]] = {"precondition_verification": (8, 4), "error_recovery": (5, 3)}
WARM_START_DEFAULT = (2, 1)
# Rollout temperature of the runs (training and sampled held-out episodes). Below the papers' 1.0: at 1.0 the
# 135M model's sampled reward lies under the band from any warm start greedy decoding does not solve
# (error_recovery 5x3: 0.17 at 1.0, 0.27 at 0.7 on the probe's training seeds; README, "Learning").
TEMPERATURE = 0.7
FULL: dict[str, Any] = dict(
    model=DEFAULT_MODEL,
    steps=TurnGRPOConfig.steps,
    groups=1,
    group_size=8,
    micro_batch=2,
    heldout=32,
    sampled=2,
    max_new_tokens=None,
    seeds=3,
    lr=TurnGRPOConfig.learning_rate,
    warm_start=WARM_START,
    bf16=True,
    redraws=TurnGRPOConfig.max_redraws,
    temperature=TEMPERATURE,
)
QUICK: dict[str, Any] = dict(
    model=TINY_MODEL,
    steps=2,
    groups=1,
    group_size=2,
    micro_batch=2,
    heldout=3,
    sampled=1,
    max_new_tokens=8,
    seeds=1,
    lr=TurnGRPOConfig.learning_rate,
    warm_start={},
    bf16=False,
    redraws=0,
    temperature=RolloutConfig.temperature,
)
FAMILIES = "precondition_verification,error_recovery"
SETTING_FLAGS = (
    "steps",
    "seeds",
    "heldout",
    "sampled",
    "groups",
    "redraws",
    "lr",
    "temperature",
)  # command-line overrides of FULL / QUICK


def rollout_config(settings: dict[str, Any]) -> RolloutConfig:
    """How the runs sample: training rollouts and the sampled held-out episodes alike."""
    return RolloutConfig(temperature=settings["temperature"], max_new_tokens=settings["max_new_tokens"])


def warm_start_size(text: str) -> tuple[int, int]:
    """'8x6' -> (8 oracle dialogues, 6 SFT steps)."""
    try:
        dialogues, steps = (int(part) for part in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"a warm-start size is DIALOGUESxSTEPS, e.g. 8x6; got {text!r}") from None
    if dialogues < 1 or steps < 1:
        raise argparse.ArgumentTypeError(f"a warm start needs at least 1 dialogue and 1 step; got {text!r}")
    return dialogues, steps


def family_name(text: str) -> str:
    """`text` if it names a registered family (an argparse type: a usage error otherwise)."""
    try:
        get_family(text)
    except KeyError as error:
        raise argparse.ArgumentTypeError(error.args[0]) from None
    return text


def family_warm_start(text: str) -> tuple[str, tuple[int, int]]:
    """'precondition_verification=8x6' -> the family and its warm-start size."""
    family, _, size = text.partition("=")
    if not family or not size:
        raise argparse.ArgumentTypeError(
            f"expected FAMILY=DIALOGUESxSTEPS, e.g. precondition_verification=8x6; got {text!r}"
        )
    return family_name(family), warm_start_size(size)


def rung_spec(family: str, rung: int = 0) -> EnvSpec:
    """The family at rung `rung` of its difficulty ladder (default 0, the easiest; its defaults if it has none)."""
    ladder = get_family(family).ladder
    return EnvSpec(capability=family, family=family, knobs=dict(ladder[rung]) if ladder else {})


def warm_started(spec: EnvSpec, settings: dict[str, Any], lr: float, folder: Path) -> dict[str, Any]:
    """Train (or reuse) the family's short warm start in `folder`; returns its metrics."""
    metrics_file = folder / "warm_start.json"
    dialogues, steps = settings["warm_start"].get(spec.family, WARM_START_DEFAULT)
    config = WarmStartConfig(dialogues=dialogues, steps=steps, batch_size=2, learning_rate=lr)
    if metrics_file.is_file():
        kept = json.loads(metrics_file.read_text())["config"]
        if (kept["dialogues"], kept["steps"], kept["learning_rate"]) != (dialogues, steps, lr):
            raise SystemExit(
                f"{folder}: holds a {kept['dialogues']}x{kept['steps']} warm start at lr {kept['learning_rate']}, "
                f"not the {dialogues}x{steps} at lr {lr} asked for; use another --out"
            )
    else:
        base, tokenizer = load_base(settings["model"])
        seeds = range(spec.train_seeds[1] - config.dialogues, spec.train_seeds[1])
        _, metrics = warm_start(base, tokenizer, [env_factory_for(spec)], seeds, config, folder)
        metrics_file.write_text(json.dumps(metrics))
    return json.loads(metrics_file.read_text())


def warm_start_scored(
    spec: EnvSpec, settings: dict[str, Any], lr: float, out: Path, rollout: RolloutConfig
) -> tuple[dict[str, Any], HeldoutScores]:
    """The family's warm start in out/warm_start (trained or reused) and its held-out scores."""
    warm = warm_started(spec, settings, lr, out / "warm_start")
    model, tokenizer = load_base(settings["model"])
    before = scored(
        out / "heldout_before.json",
        attach_lora(model, adapter_dir=out / "warm_start"),
        tokenizer,
        spec,
        settings,
        rollout,
    )
    return warm, before


def scored(
    path: Path, policy: Any, tokenizer: Any, spec: EnvSpec, settings: dict[str, Any], rollout: RolloutConfig
) -> HeldoutScores:
    """Held-out scores of `policy`, cached in `path` with the temperature of its sampled episodes
    (a cache of other seeds, sample counts or temperature is refused)."""
    seeds = list(range(spec.eval_seeds[0], spec.eval_seeds[0] + settings["heldout"]))
    if not path.is_file():
        scores = score_heldout(policy, tokenizer, env_factory_for(spec), seeds, rollout, sampled=settings["sampled"])
        path.write_text(json.dumps({**scores.to_dict(), "temperature": rollout.temperature}))
    kept = json.loads(path.read_text())
    asked = {"seeds": seeds, "sampled_rollouts": settings["sampled"], "temperature": rollout.temperature}
    differ = [key for key, value in asked.items() if kept.get(key) != value]
    if differ:
        held = (
            f"{len(kept['seeds'])} seeds, {kept['sampled_rollouts']} samples each "
            f"at temperature {kept.get('temperature')}"
        )
        raise SystemExit(
            f"{path}: holds {held}, not the {settings['heldout']} seeds, {settings['sampled']} samples at "
            f"temperature {rollout.temperature} asked for; use another --out, or delete the heldout_*.json files "
            "to score the runs again"
        )
    return HeldoutScores.from_dict(kept)


def trainer_from_warm_start(
    spec: EnvSpec,
    settings: dict[str, Any],
    credit: str,
    seed: int,
    lr: float,
    warm: Path,
    folder: Path,
    rollout: RolloutConfig,
) -> TurnGRPOTrainer:
    """A GRPO trainer (resumed from `folder` if it holds a checkpoint) of the warm start in `warm`,
    π_ref the frozen warm start, flat groups redrawn up to `settings["redraws"]` rounds a step."""
    model, tokenizer = load_base(settings["model"])
    policy = add_reference(attach_lora(model, adapter_dir=warm), warm)
    config = TurnGRPOConfig(
        steps=settings["steps"],
        groups_per_step=settings["groups"],
        group_size=settings["group_size"],
        micro_batch_size=settings["micro_batch"],
        learning_rate=lr,
        max_redraws=settings["redraws"],
        credit=CreditConfig(credit=credit),
        seed=seed,
        save_every=settings["steps"],
        bf16=settings["bf16"],
    )
    trainer = TurnGRPOTrainer(
        policy, tokenizer, env_factory_for(spec), config, rollout, folder, train_seeds=spec.train_seeds
    )
    trainer.resume()
    return trainer


def train_run(
    spec: EnvSpec,
    settings: dict[str, Any],
    credit: str,
    seed: int,
    lr: float,
    out: Path,
    rollout: RolloutConfig,
    progress: bool,
) -> dict[str, Any]:
    """One GRPO run from the warm start in out/warm_start; its training records and held-out scores."""
    folder = out / f"{credit}_{seed}"
    trainer = trainer_from_warm_start(spec, settings, credit, seed, lr, out / "warm_start", folder, rollout)
    trainer.train(progress=progress)
    after = scored(folder / "heldout_after.json", trainer.policy, trainer.tokenizer, spec, settings, rollout)
    records = read_log(folder)
    return {
        "credit": credit,
        "seed": seed,
        "after": after.to_dict(),
        "train_reward": [r["reward_mean"] for r in records],
        "kept_groups": [r["kept_groups"] for r in records],
        "rollouts": sum(r["rollouts"] for r in records),
        "train_seconds": sum(r["step_seconds"] for r in records),
    }


def run_names(seeds: int) -> list[str]:
    """Every run of a family as `--only` names it, CREDIT:SEED, credits in order."""
    return [f"{credit}:{seed}" for credit in CREDITS for seed in range(seeds)]


def spread_runs(family: str, settings: dict[str, Any], args: argparse.Namespace, out: Path) -> None:
    """Train and score the family's runs in `args.jobs` processes of this script (`--only`, one torch
    thread each, output in out/job_K.log), dealt in turn; returns when all have finished."""
    runs = run_names(settings["seeds"])
    passed = [
        f"--{key.replace('_', '-')}={value}"
        for key, value in vars(args).items()
        if key in (*SETTING_FLAGS, "warm_lr") and value is not None
    ]
    passed += [f"--warm-start={family}={dialogues}x{steps}" for family, (dialogues, steps) in args.warm_start]
    jobs = []
    for number in range(min(args.jobs, len(runs))):
        command = [
            sys.executable,
            __file__,
            "--out",
            str(out.parent),
            "--families",
            family,
            "--only",
            ",".join(runs[number :: args.jobs]),
            *passed,
            *(["--quick"] if args.quick else []),
        ]
        log = (out / f"job_{number}.log").open("w")
        jobs.append(
            (
                subprocess.Popen(
                    command, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "OMP_NUM_THREADS": "1"}
                ),
                log,
            )
        )
    for process, log in jobs:
        process.wait()
        log.close()
        if process.returncode:
            raise SystemExit(f"{family}: a run process failed (exit {process.returncode}); see {log.name}")


def run_family(family: str, settings: dict[str, Any], args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """The warm start, its held-out scores and every (credit, seed) run of one family (spread over
    `args.jobs` processes when > 1); "seconds" is this call's wall time, which excludes work reused from `out`."""
    spec = rung_spec(family)
    rollout = rollout_config(settings)
    started = time.perf_counter()
    warm, before = warm_start_scored(spec, settings, args.warm_lr, out, rollout)
    print(
        f"{family} {spec.knobs}: warm start loss {warm['first_loss']:.3f} -> {warm['final_loss']:.3f}; held-out "
        f"reward {before.summary()['greedy_reward']['mean']:.3f} greedy",
        flush=True,
    )
    if args.jobs > 1 and not args.only:
        spread_runs(family, settings, args, out)
    runs = []
    for credit in CREDITS:
        for seed in range(settings["seeds"]):
            if args.only and f"{credit}:{seed}" not in args.only:
                continue
            runs.append(train_run(spec, settings, credit, seed, settings["lr"], out, rollout, progress=not args.quick))
            print(
                f"  {credit} seed {seed}: train reward per step "
                f"{', '.join(f'{r:.2f}' for r in runs[-1]['train_reward'])}; "
                f"held-out greedy {runs[-1]['after']['summary']['greedy_reward']['mean']:.3f}",
                flush=True,
            )
    return {
        "family": family,
        "knobs": spec.knobs,
        "warm_start": warm,
        "before": before.to_dict(),
        "runs": runs,
        "seconds": time.perf_counter() - started,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="seconds-long smoke on the tiny random model")
    parser.add_argument(
        "--families",
        default=FAMILIES,
        type=lambda text: ",".join(map(family_name, text.split(","))),
        help=f"comma-separated families (default {FAMILIES})",
    )
    parser.add_argument("--steps", type=int, help=f"GRPO steps per run (default {FULL['steps']})")
    parser.add_argument("--seeds", type=int, help=f"training seeds per credit (default {FULL['seeds']})")
    parser.add_argument("--heldout", type=int, help=f"held-out seeds (default {FULL['heldout']})")
    parser.add_argument("--sampled", type=int, help=f"sampled episodes per held-out seed (default {FULL['sampled']})")
    parser.add_argument("--groups", type=int, help=f"groups per GRPO step (default {FULL['groups']})")
    parser.add_argument(
        "--redraws",
        type=int,
        help=f"rounds a step may redraw flat groups (default {FULL['redraws']}, "
        f"TurnGRPOConfig's; 0: equal rollouts in every run)",
    )
    parser.add_argument("--lr", type=float, help=f"GRPO learning rate (default {FULL['lr']}, TurnGRPOConfig's)")
    parser.add_argument(
        "--temperature",
        type=float,
        help=f"rollout temperature, in training and the sampled held-out episodes (default {FULL['temperature']})",
    )
    parser.add_argument("--warm-lr", type=float, default=WarmStartConfig.learning_rate, help="warm-start learning rate")
    parser.add_argument(
        "--warm-start",
        type=family_warm_start,
        action="append",
        default=[],
        metavar="FAMILY=DxS",
        help="a family's warm-start size, DIALOGUES x SFT STEPS (default WARM_START's; repeatable)",
    )
    parser.add_argument(
        "--out", type=Path, help="keep run folders, result.json and curves.png here (default: a temporary folder)"
    )
    parser.add_argument(
        "--only",
        type=lambda text: set(text.split(",")),
        default=set(),
        metavar="CREDIT:SEED,...",
        help="train and score only these runs, then stop (to spread a family's runs over processes sharing "
        "--out; a later run without --only reuses them and writes the comparison)",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="train a family's runs in this many processes of one torch thread each (default 1: here)",
    )
    args = parser.parse_args(argv)
    settings = dict(QUICK if args.quick else FULL)
    settings.update({key: getattr(args, key) for key in SETTING_FLAGS if getattr(args, key) is not None})
    settings["warm_start"] = {**settings["warm_start"], **dict(args.warm_start)}
    if args.only and not args.out:
        parser.error("--only needs --out: its runs are kept for a later run to compare")
    try:
        rollout_config(settings)
    except ValueError as error:
        parser.error(str(error))
    unknown = args.only - set(run_names(settings["seeds"]))
    if unknown:
        parser.error(
            f"--only: no such run {', '.join(sorted(unknown))} (runs are CREDIT:SEED, credits {', '.join(CREDITS)}, "
            f"seeds 0..{settings['seeds'] - 1})"
        )
    with tempfile.TemporaryDirectory(prefix="tracegym-learning-") as scratch:
        out = args.out or Path(scratch)
        families = [run_family(family, settings, args, out / family) for family in args.families.split(",")]
        if args.only:
            return 0
        result = {
            "settings": settings,
            "lr": settings["lr"],
            "warm_lr": args.warm_lr,
            "credits": list(CREDITS),
            "families": [{**family, "comparison": summarise(family, CREDITS)} for family in families],
        }
        (out / "result.json").write_text(json.dumps(result, indent=2))
        plot_curves(result, out / "curves.png")
        report(result)
        print(f"wrote {out / 'result.json'} and {out / 'curves.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
