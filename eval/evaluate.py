"""Score policies on the same held-out seeds of one environment and compare them pairwise.

A policy is named by `base` (the base model), a PEFT adapter folder (what `tracegym train`
writes, its warm start included), or a routed folder (what `tracegym route` writes). The first
policy named is the baseline: every other is compared with it seed by seed (paired bootstrap 95%
intervals of the difference). `tracegym eval` prints the table and writes `eval.json`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from peft import PeftModel
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from tracegym.adapters.heldout import METRICS, compare, score_heldout
from tracegym.adapters.train import env_factory_for, load_base
from tracegym.environment import Environment
from tracegym.errors import UserError
from tracegym.eval.config import EvaluateConfig
from tracegym.models import check_model
from tracegym.rollout import fit_turn_budget
from tracegym.schema import AdapterArtifact, EnvSpec

BASE = "base"


@dataclass
class LoadedPolicy:
    """A policy ready to roll out, and the environment spec it was trained on (None for the base)."""

    name: str
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    env_spec: EnvSpec | None


def load_policy(reference: str, base_model: str) -> LoadedPolicy:
    """`base`, a PEFT adapter folder or a routed folder (UserError naming it otherwise)."""
    if reference == BASE:
        check_model(base_model)
        model, tokenizer = load_base(base_model)
        return LoadedPolicy(f"{BASE} ({base_model})", model, tokenizer, None)
    folder = Path(reference)
    if (folder / "router.json").is_file():
        from tracegym.moe_router import load_policy as load_routed

        model, tokenizer = load_routed(folder)
        return LoadedPolicy(str(folder), model, tokenizer, None)
    if not (folder / "adapter_config.json").is_file():
        raise UserError(
            f"{folder}: not 'base', a PEFT adapter folder (adapter_config.json) or a routed folder (router.json)"
        )
    artifact_file = folder / "artifact.json"
    artifact = AdapterArtifact.model_validate_json(artifact_file.read_text()) if artifact_file.is_file() else None
    model, tokenizer = load_base(artifact.base_model if artifact else base_model)
    return LoadedPolicy(
        str(folder),
        PeftModel.from_pretrained(model, str(folder)).eval(),
        tokenizer,
        artifact.env_spec if artifact else None,
    )


def evaluate_policies(
    references: list[str],
    env_spec: EnvSpec,
    config: EvaluateConfig,
    env_factory: Callable[[], Environment] | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Scores of every policy (in order; the same one may appear twice) on `config.eval.seeds`
    evaluation seeds of `env_spec`, and each later policy's paired difference from the first."""
    factory = env_factory or env_factory_for(env_spec)
    seeds = list(range(env_spec.eval_seeds[0], min(env_spec.eval_seeds[0] + config.eval.seeds, env_spec.eval_seeds[1])))
    names, scores, rollout = [], [], config.rollout
    for reference in references:
        policy = load_policy(reference, config.model)
        rollout = fit_turn_budget(rollout, factory(), policy.tokenizer)  # once: every policy shares the base tokenizer
        names.append(policy.name)
        scores.append(
            score_heldout(
                policy.model,
                policy.tokenizer,
                factory,
                seeds,
                rollout,
                config.eval.sampled,
                progress=progress,
                greedy=config.eval.greedy,
            )
        )
    return {
        "env_spec": env_spec.model_dump(mode="json"),
        "policies": [
            {"name": name, **s.to_dict(), "versus_first": compare(scores[0], s) if i else None}
            for i, (name, s) in enumerate(zip(names, scores))
        ],
    }


def format_evaluation(result: dict[str, Any]) -> str:
    """One row per policy: each metric's mean [95% interval], then its paired change from the first."""
    lines = [f"{result['env_spec']['family']} {json.dumps(result['env_spec']['knobs'])}"]
    for data in result["policies"]:
        cells = [f"{metric} {s['mean']:.3f} [{s['low']:.3f}, {s['high']:.3f}]" for metric, s in data["summary"].items()]
        lines.append(f"{data['name']}  (n={len(data['seeds'])})\n    " + "   ".join(cells))
        change = data["versus_first"]
        if change:
            lines.append(
                "    change vs first: "
                + "   ".join(
                    f"{metric} {c['mean']:+.3f} [{c['low']:+.3f}, {c['high']:+.3f}]"
                    for metric, c in change.items()
                    if metric in METRICS
                )
            )
    return "\n".join(lines)
