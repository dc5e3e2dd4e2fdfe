"""Settings of `tracegym route` and `tracegym serve` (tracegym.config convention). Kept apart from
the modules that use them so that building the CLI parser imports no torch or fastapi."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from tracegym.config import option
from tracegym.errors import UserError

API_KEY_ENV = "TRACEGYM_API_KEY"  # `tracegym serve`'s key when --api-key is not given


@dataclass
class RouterTrainingConfig:
    """How `tracegym route` builds and trains the token router."""

    flag_prefix: ClassVar[str] = "router"
    labels: Literal["dialogue", "assistant"] = option(
        "dialogue",
        "which tokens of an adapter's dialogues are labelled with it: all, or the assistant turns (rest base)",
    )
    train_dialogues: int = option(8, "oracle dialogues per adapter to train on (base text: about as many in all)")
    heldout_dialogues: int = option(
        4, "held-out-seed dialogues per adapter, and of the held-out family, for the accuracy"
    )
    max_tokens: int = option(1536, "dialogues are cut at this many tokens")
    tokens_per_slot: int = option(2048, "training tokens drawn per slot (their hidden states are kept for every layer)")
    steps: int = option(300, "Adam steps on the gates")
    gate_batch: int = option(1024, "tokens per gate training step")
    learning_rate: float = option(0.01, "Adam learning rate of the gates")
    load_balance: float = option(0.001, "weight of the load-balancing term (paper: 0.001)")
    top_k: int = option(1, "slots per token at inference; k > 1 mixes k slots with renormalised gate weights")
    seed: int = option(0, "seed of the token draw")

    def __post_init__(self) -> None:
        for name in (
            "train_dialogues",
            "heldout_dialogues",
            "max_tokens",
            "tokens_per_slot",
            "steps",
            "gate_batch",
            "top_k",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.learning_rate <= 0 or self.load_balance < 0:
            raise ValueError("learning_rate must be positive and load_balance non-negative")


def _secret(field: Any) -> Any:
    """`field` (an `option`) left out of its config's repr, so that printing or logging the config
    never shows it."""
    field.repr = False
    return field


@dataclass
class ServeConfig:
    """`tracegym serve` settings."""

    flag_prefix: ClassVar[str] = ""
    model_name: str = option(
        "tracegym",
        "model id of what is served: a routed folder's token-routed mixture (NAME:task, NAME:base, "
        "NAME:<adapter> too), or a base model (its LoRA adapters go by their own names)",
    )
    host: str = option("127.0.0.1", "address to bind (default: this machine only)")
    port: int = option(8000, "TCP port (0: any free port)")
    max_batch_size: int = option(8, "requests decoded together (running rows); more wait in the queue")
    max_queue: int = option(64, "requests that may wait; more are refused with 503")
    batch_wait_ms: float = option(5.0, "milliseconds an idle worker waits for more requests to encode with the first")
    max_tokens: int = option(512, "completion tokens when a request does not say")
    max_context: int | None = option(
        None, "prompt + completion tokens allowed (default: the model's max_position_embeddings)"
    )
    max_body_bytes: int = option(4_000_000, "largest request body accepted")
    api_key: str | None = _secret(
        option(
            None,
            "API key clients send as 'Authorization: Bearer KEY' on every route but /health; none: "
            f"`tracegym serve` reads ${API_KEY_ENV} (which keeps it out of the process list), else serves "
            "without a key, on a loopback host only",
        )
    )

    lora: list[str] = option(
        help="LoRA adapters served on a base model from the start, as NAME=PATH (repeat --lora)",
        factory=list,
        flag=False,
    )
    lora_root: list[str] = option(
        help="folders under which POST /v1/load_lora_adapter may load adapters at run time (repeat "
        "--lora-root); none: loading and unloading at run time are off",
        factory=list,
        flag=False,
    )
    max_loras: int = option(4, "LoRA adapters a base model holds at once (each takes a slot of --max-lora-rank)")
    max_lora_rank: int = option(16, "largest LoRA rank an adapter of a base model may have")

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be in [0, 65535], got {self.port}")
        for name in ("max_batch_size", "max_queue", "max_tokens", "max_body_bytes", "max_loras", "max_lora_rank"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.batch_wait_ms < 0 or (self.max_context is not None and self.max_context < 2):
            raise ValueError("batch_wait_ms must be non-negative and max_context at least 2")
        if not self.model_name or ":" in self.model_name:
            raise ValueError(f"model_name must be non-empty without ':', got {self.model_name!r}")
        for entry in self.lora:
            name, _, path = entry.partition("=")
            if not name or not path:
                raise ValueError(f"lora entries are NAME=PATH, got {entry!r}")
        key = self.api_key
        if key is not None and not (key and key.isascii() and key.isprintable() and " " not in key):
            raise ValueError("api_key must be non-empty printable ASCII without spaces (what an HTTP header carries)")

    def check_exposure(self) -> None:
        """Raise UserError when `host` is not a loopback address and no `api_key` is set: the
        server would answer anyone who can reach this machine."""
        if self.api_key is None and not is_loopback(self.host):
            raise UserError(
                f"refusing to serve on {self.host} without an API key: anyone who can reach this machine "
                f"could use it; set {API_KEY_ENV} (or --api-key), or bind 127.0.0.1"
            )


def is_loopback(host: str) -> bool:
    """Whether `host` is "localhost" or a loopback IP address (127.0.0.0/8, ::1)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
