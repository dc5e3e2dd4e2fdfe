"""Adapters and a routed folder on the tiny model, shared by the moe_router and server tests.

The adapters are random LoRAs (B not zero, so each changes the model) with the artifact.json
`tracegym train` writes: capability, base model "tiny", and the environment they stand for.
"""

from __future__ import annotations

import re
import subprocess
import threading
import time
from pathlib import Path

import pytest
import torch
from peft import LoraConfig, get_peft_model

from tracegym.adapters.lora import LORA_TARGETS
from tracegym.models import tiny_model
from tracegym.moe_router.config import RouterTrainingConfig
from tracegym.moe_router.engine import Engine, TokenLogprob
from tracegym.moe_router.route import build_router
from tracegym.schema import AdapterArtifact, EnvSpec

FAMILIES = ("tool_calling_precision", "precondition_verification")
SMALL = RouterTrainingConfig(train_dialogues=3, heldout_dialogues=2, max_tokens=1024, tokens_per_slot=256, steps=60)


def make_adapter(folder: Path, family: str, seed: int, rank: int = 4) -> Path:
    """A PEFT folder of a random rank-`rank` LoRA on the tiny model, with its artifact.json."""
    base = tiny_model()[0]  # (seeds torch itself)
    torch.manual_seed(seed)
    config = LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=list(LORA_TARGETS), init_lora_weights=False)
    get_peft_model(base, config).save_pretrained(str(folder))
    artifact = AdapterArtifact(
        capability=family,
        path=str(folder),
        base_model="tiny",
        env_spec=EnvSpec(capability=family, family=family),
        credit="trace",
    )
    (folder / "artifact.json").write_text(artifact.model_dump_json())
    return folder


@pytest.fixture(scope="session")
def tiny_adapters(tmp_path_factory) -> list[Path]:
    root = tmp_path_factory.mktemp("tiny_adapters")
    return [make_adapter(root / family, family, seed) for seed, family in enumerate(FAMILIES)]


@pytest.fixture(scope="session")
def routed_folder(tmp_path_factory, tiny_adapters) -> Path:
    """`tracegym route`'s folder for the two tiny adapters (small router training)."""
    out = tmp_path_factory.mktemp("routed") / "router"
    build_router(tiny_adapters, out, SMALL)
    return out


def served_url(lines: list[str], process: subprocess.Popen, timeout_s: float) -> str:
    """The base URL a `tracegym serve` subprocess says it serves on, once it says so (its output grows
    in `lines`); AssertionError with the output's tail when it does not within `timeout_s` seconds."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and process.poll() is None:
        found = re.search(r"serving .* on (http://\S+)/v1 ", "".join(lines))
        if found:
            return found[1]
        time.sleep(0.1)
    raise AssertionError(f"the server did not start: {''.join(lines)[-2000:]}")


class RecordingSink:
    """An engine TokenSink recording tokens, log-probabilities, the finish reason and, when given
    the engine, its running rows at each token; `on_token(sink)` runs after each token."""

    def __init__(self, engine: Engine | None = None) -> None:
        self.engine, self.tokens, self.logprobs, self.running = engine, [], [], []
        self.done = threading.Event()
        self.finish: str | None = None
        self.on_token = None

    def token(self, token_id: int, logprob: TokenLogprob | None = None) -> None:
        self.tokens.append(token_id)
        self.logprobs.append(logprob)
        if self.engine is not None:
            self.running.append(self.engine.running)
        if self.on_token is not None:
            self.on_token(self)

    def end(self, finish_reason: str) -> None:
        self.finish = finish_reason
        self.done.set()

    def error(self, message: str) -> None:
        self.finish = f"error: {message}"
        self.done.set()
