"""What `tracegym train` leaves in its output folder.

adapter_config.json, adapter_model.safetensors   the LoRA, standard PEFT layout (PeftModel.from_pretrained, vLLM)
train_config.json                                TurnGRPOConfig (+ warm-start config) as JSON
train_log.jsonl                                  one record per step (written by the trainer)
learning_curve.png                               reward per step (mean ± std, unhinted mean)
artifact.json                                    tracegym.schema.AdapterArtifact
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from peft import PeftModel  # noqa: E402

from tracegym.adapters.lora import save_policy  # noqa: E402
from tracegym.files import write_text_atomic  # noqa: E402
from tracegym.schema import AdapterArtifact, EnvSpec  # noqa: E402

ARTIFACT_FILE = "artifact.json"
CONFIG_FILE = "train_config.json"
CURVE_FILE = "learning_curve.png"


def plot_learning_curve(records: list[dict[str, Any]], path: str | Path, title: str = "") -> None:
    """Reward mean (± std band) and unhinted reward mean per step."""
    steps = [r["step"] for r in records]
    mean = [r["reward_mean"] for r in records]
    std = [r["reward_std"] for r in records]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(steps, mean, label="reward (all rollouts)")
    ax.fill_between(steps, [m - s for m, s in zip(mean, std)], [m + s for m, s in zip(mean, std)], alpha=0.2)
    unhinted = [(r["step"], r["reward_unhinted_mean"]) for r in records if r.get("reward_unhinted_mean") is not None]
    if unhinted:
        ax.plot(*zip(*unhinted), label="reward (unhinted)", linestyle="--")
    ax.set_xlabel("step")
    ax.set_ylabel("episode reward")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_artifacts(
    out_dir: str | Path,
    model: PeftModel,
    config: dict[str, Any],
    records: list[dict[str, Any]],
    env_spec: EnvSpec,
    base_model: str,
    credit: str,
    metrics: dict[str, Any],
) -> AdapterArtifact:
    """Save the adapter, config, learning curve and artifact.json into `out_dir`."""
    out_dir = Path(out_dir)
    save_policy(model, out_dir)
    (out_dir / CONFIG_FILE).write_text(json.dumps(config, indent=2, default=str))
    plot_learning_curve(records, out_dir / CURVE_FILE, title=f"{env_spec.family} ({credit} credit)")
    artifact = AdapterArtifact(
        capability=env_spec.capability,
        path=str(out_dir.resolve()),
        base_model=base_model,
        env_spec=env_spec,
        credit=credit,
        metrics=metrics,
    )
    write_text_atomic(out_dir / ARTIFACT_FILE, artifact.model_dump_json(indent=2))
    return artifact
