"""One adapter, end to end: SFT warm start, calibration, GRPO, held-out reward before and after,
and the artifacts of adapters/artifacts.py. `tracegym train`, `tracegym run` and
benchmarks/learning.py call this.

Layout of `out_dir`: `warm_start/` (the SFT adapter, reused on rerun), `calibration.json`,
`checkpoint/` (exact resume), `heldout_before.json`, then the final artifacts at the top level.

Under several processes (a launcher's, `tracegym.adapters.grpo.process_state`), the warm start is
the SFT trainer's data parallelism, every process calibrates (the main one's knobs are kept), the
held-out seeds and the GRPO groups are split among the processes, and only the main process writes
files; every process reads `out_dir` (on several machines, a folder they all see).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from accelerate.utils import broadcast_object_list, gather_object
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from tracegym.adapters.artifacts import write_artifacts
from tracegym.adapters.checkpoint import find_checkpoint
from tracegym.adapters.config import TrainConfig
from tracegym.adapters.grpo import CHECKPOINT_DIR, TurnGRPOTrainer, process_state, read_log
from tracegym.adapters.heldout import METRICS, HeldoutScores, compare, score_heldout
from tracegym.adapters.lora import add_reference, attach_lora
from tracegym.adapters.sft import Rehearsal, warm_start
from tracegym.config import TINY_MODEL, RolloutConfig, config_dict
from tracegym.generation import HFBackend
from tracegym.models import check_model, load_model, tiny_model
from tracegym.rollout import fit_turn_budget
from tracegym.schema import AdapterArtifact, EnvSpec
from tracegym.served_rollout import connect
from tracegym.synth_envs.base import Environment
from tracegym.synth_envs.calibration import CalibrationConfig, backend_measure, calibrate, write_calibrations
from tracegym.synth_envs.registry import get_family, make_env

logger = logging.getLogger(__name__)


def load_base(name: str) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """`tiny` (random test model, smoke runs only), the embedded default, a local dir or hub id."""
    return tiny_model() if name == TINY_MODEL else load_model(name)


def env_factory_for(spec: EnvSpec) -> Callable[[], Environment]:
    """A factory of fresh environments of the spec's family at its knobs."""
    return functools.partial(make_env, spec.family, **spec.knobs)


def ladder_factories(spec: EnvSpec) -> list[Callable[[], Environment]]:
    """One factory per rung of the family's difficulty ladder (the spec's knobs under each rung).

    Calibration picks a rung after the warm start, so the warm start shows the policy every rung:
    trained on one setting only, the embedded model carries its shape into the others (asked
    for one attendee, it invents the second it was trained to look up).
    """
    ladder = get_family(spec.family).ladder or ({},)
    return [functools.partial(make_env, spec.family, **{**spec.knobs, **rung}) for rung in ladder]


def calibrate_to_policy(
    spec: EnvSpec,
    policy: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    calibration: CalibrationConfig,
    rollout: RolloutConfig,
    out_file: Path,
    policy_name: str,
) -> EnvSpec:
    """The spec with knobs searched against `policy` at the rollout temperature; the curve goes to
    `out_file` (reused on rerun). Under several processes every one searches, on the same seeds
    (waiting for the main one instead could outlast a collective's timeout), the main one writes the
    file, and all take the main one's knobs."""
    state = process_state()
    found_before = out_file.is_file()
    state.wait_for_everyone()  # every process has looked before the main one writes
    if found_before:
        found = json.loads(out_file.read_text())["families"][0]
    else:
        backend = HFBackend(policy, tokenizer, batch_size=32)
        result = calibrate(
            spec.family, backend_measure(backend, rollout, state.is_main_process), calibration, policy_name
        )
        if state.is_main_process:
            write_calibrations([result], out_file)
        found = result.as_dict()
    found = broadcast_object_list([found])[0]
    logger.info("calibrated %s to %s (mean in band: %s)", spec.family, found["knobs"], found["in_band"])
    summary = {"calibrated": True, "in_band": found["in_band"], "accepted": found["accepted"], "policy": policy_name}
    return spec.model_copy(update={"knobs": {**spec.knobs, **found["knobs"]}, "calibration": summary})


def merge_scores(parts: list[HeldoutScores]) -> HeldoutScores:
    """One HeldoutScores of consecutive shards of the same seeds, in order (each with the same
    `sampled_rollouts`)."""
    return HeldoutScores(
        [seed for part in parts for seed in part.seeds],
        *([value for part in parts for value in getattr(part, metric)] for metric in METRICS),
        parts[0].sampled_rollouts,
    )


def score_sharded(score: Callable[..., HeldoutScores], policy: PreTrainedModel, seeds: Sequence[int]) -> HeldoutScores:
    """`score(policy, seeds=...)` with the seeds split among the processes (consecutive shares,
    `PartialState.split_between_processes`), the shares gathered into every process in seed order.
    Equal to one process's scores: an episode's sampling depends on its seed, not on its batch.
    The main process scores even an empty share (no seeds at all: empty scores)."""
    state = process_state()
    with state.split_between_processes(list(seeds)) as share:
        mine = score(policy, seeds=share) if share or state.is_main_process else None
    parts = gather_object([mine])
    return merge_scores([part for part in parts if part is not None])


def train_adapter(
    env_spec: EnvSpec,
    out_dir: str | Path,
    config: TrainConfig,
    resume: bool = False,
    env_factory: Callable[[], Environment] | None = None,
    progress: bool = True,
    rehearsal: Rehearsal | None = None,
) -> AdapterArtifact:
    """Train one LoRA adapter for `env_spec` into `out_dir`; returns its AdapterArtifact.

    resume: continue from `out_dir`'s checkpoint (without it, an existing checkpoint is an error
    rather than silently overwritten). env_factory: an environment outside the registry (tests);
    it cannot be calibrated. rehearsal: dialogues the warm start trains on besides the family's
    (`sft.Rehearsal`; the loop's base agent's own demonstrations). With calibration enabled, the
    family's knobs are searched against the warm-started policy before GRPO and the adapter's
    artifact records the calibrated spec.
    With `config.grpo.served.url`, GRPO's rollouts come from that server (checked first: UserError
    for a missing adapter folder or a server that does not answer); evaluation stays in process.
    """
    calibrating = config.calibration.enabled and env_factory is None
    check_model(config.model)
    # a missing adapter folder or a silent server fails before any work; the trainer uses this connection
    connection = connect(config.grpo.served) if config.grpo.served.url is not None else None
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if not resume and find_checkpoint(out_dir / CHECKPOINT_DIR) is not None:
        raise FileExistsError(f"{out_dir} already holds a training checkpoint: resume it or use a fresh folder")
    factory = env_factory or env_factory_for(env_spec)
    state = process_state()  # one process, or each of a launcher's; files are written by the main one
    progress = progress and state.is_main_process
    model, tokenizer = load_base(config.model)
    adapter_dir = None
    if config.warm_start.enabled:
        adapter_dir = out_dir / "warm_start"
        if (adapter_dir / "adapter_config.json").is_file():
            logger.info("reusing the warm start in %s", adapter_dir)
        else:
            hi = env_spec.train_seeds[1]
            factories = ladder_factories(env_spec) if calibrating else [factory]
            seeds = range(hi - config.warm_start.dialogues, hi)
            peft_model, warm_metrics = warm_start(
                model, tokenizer, factories, seeds, config.warm_start, adapter_dir, rehearsal=rehearsal
            )
            if state.is_main_process:
                (adapter_dir / "warm_start.json").write_text(json.dumps(warm_metrics, indent=2))
            state.wait_for_everyone()
            model = peft_model.unload()
    policy = attach_lora(model, rank=config.grpo.lora_rank, adapter_dir=adapter_dir, seed=config.grpo.seed)
    if adapter_dir is not None:  # π_ref of turn credit: the frozen warm start, not the bare base model
        add_reference(policy, adapter_dir)
    policy = policy.to(state.device)
    if calibrating:
        policy_name = config.model + (" + warm start" if adapter_dir is not None else "")
        env_spec = calibrate_to_policy(
            env_spec, policy, tokenizer, config.calibration, config.rollout, out_dir / "calibration.json", policy_name
        )
        factory = env_factory_for(env_spec)
    config = dataclasses.replace(config, rollout=fit_turn_budget(config.rollout, factory(), tokenizer))
    logger.info("turn budget for %s: %d tokens", env_spec.family, config.rollout.max_new_tokens)
    eval_seeds = range(env_spec.eval_seeds[0], min(env_spec.eval_seeds[0] + config.eval.seeds, env_spec.eval_seeds[1]))
    score = functools.partial(
        score_heldout,
        tokenizer=tokenizer,
        env_factory=factory,
        seeds=eval_seeds,
        rollout=config.rollout,
        sampled=config.eval.sampled,
        greedy=config.eval.greedy,
        progress=progress,
    )
    evaluate = functools.partial(score_sharded, score, seeds=eval_seeds)
    before_file = out_dir / "heldout_before.json"
    scored_before = before_file.is_file()
    state.wait_for_everyone()  # every process has looked before the main one writes
    if config.eval.seeds and not scored_before:
        before = evaluate(policy)
        if state.is_main_process:
            before_file.write_text(json.dumps(before.to_dict()))
        state.wait_for_everyone()
    trainer = TurnGRPOTrainer(
        policy,
        tokenizer,
        factory,
        config.grpo,
        config.rollout,
        out_dir,
        train_seeds=env_spec.train_seeds,
        connection=connection,
    )
    if resume:
        trainer.resume()
    trainer.train(progress=progress)
    grpo = config.grpo
    metrics: dict[str, Any] = {
        "steps": trainer.step,
        "rollouts": trainer.step * grpo.groups_per_step * grpo.group_size,
        "turn_budget_tokens": config.rollout.max_new_tokens,
    }
    if config.eval.seeds:
        before = HeldoutScores.from_dict(json.loads(before_file.read_text()))
        after = evaluate(trainer.policy)
        metrics["heldout_before"], metrics["heldout_after"] = before.summary(), after.summary()
        metrics["heldout_difference"] = compare(before, after)
        metrics["heldout_per_seed"] = {"before": before.to_dict(), "after": after.to_dict()}
    if adapter_dir is not None:
        metrics["warm_start"] = json.loads((adapter_dir / "warm_start.json").read_text())
    credit = grpo.credit.credit
    if not state.is_main_process:
        return AdapterArtifact(
            capability=env_spec.capability,
            path=str(out_dir.resolve()),
            base_model=config.model,
            env_spec=env_spec,
            credit=credit,
            metrics=metrics,
        )
    return write_artifacts(
        out_dir, trainer.policy, config_dict(config), read_log(out_dir), env_spec, config.model, credit, metrics
    )
