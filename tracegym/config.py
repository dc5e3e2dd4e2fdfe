"""Configs as data: one dataclass per concept, each default written once, CLI flags generated.

A config is a dataclass whose fields carry their help text (TRL's pairing of a `Config` and its
docstrings, in a form argparse can read):

    @dataclass
    class CalibrationConfig:
        flag_prefix: ClassVar[str] = "calibration"
        seeds: int = option(8, "seeds per knob setting (the paper uses 100)")

`add_config_arguments(parser, CalibrationConfig)` adds `--calibration-seeds` with that help and
its default; a field that is itself a config dataclass is walked with that class's own prefix, so
every command that nests `CalibrationConfig` spells and defaults `--calibration-seeds` the same.
A flag name used twice in one tree is an error when the parser is built.

Values are resolved in this order: the defaults, then `--config FILE` (TOML or YAML, laid out
like the config: top-level keys, one table per nested config), then flags given on the command
line. A config file may hold tables the command does not use (one file serves `synth`, `train`
and `run`); an unknown key inside a table it does use is an error naming the file and the key.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tomllib
import types
import typing
from pathlib import Path
from typing import Any, Literal, TypeVar

from tracegym.errors import UserError
from tracegym.generation import check_sampling

C = TypeVar("C")
_NO_DEFAULT = dataclasses.MISSING
DEFAULT_MODEL = "smollm2-135m"  # the embedded SmolLM2-135M-Instruct (tracegym.models)
TINY_MODEL = "tiny"  # a random 2-layer Llama for smoke runs (tracegym.models.tiny_model)


def option(default: Any = _NO_DEFAULT, help: str = "", *, factory: Any = _NO_DEFAULT, flag: bool = True) -> Any:
    """A config field with its help text. `factory` for mutable defaults; `flag=False` keeps a
    field out of the generated CLI (it can still be set from a config file)."""
    metadata = {"help": help, "flag": flag}
    if factory is not _NO_DEFAULT:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def check_choice(field: str, value: Any, choices: Any) -> None:
    """Raise ValueError unless `value` is one of the values of the Literal type `choices`."""
    allowed = typing.get_args(choices)
    if value not in allowed:
        raise ValueError(f"{field} must be {' or '.join(repr(a) for a in allowed)}, got {value!r}")


def _prefix(cls: type) -> str:
    return getattr(cls, "flag_prefix", "")


def _flag(prefix: str, name: str) -> str:
    """`--prefix-name`; a field named `enabled` or named like its prefix is just `--prefix`."""
    parts = (prefix,) if name in ("enabled", prefix) else (prefix, name)
    return "--" + "-".join(part for part in parts if part).replace("_", "-")


def _dest(path: tuple[str, ...]) -> str:
    return "config." + ".".join(path)


def _is_config(kind: Any) -> bool:
    return isinstance(kind, type) and dataclasses.is_dataclass(kind)


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _default_text(field: dataclasses.Field) -> str:
    if field.default is not _NO_DEFAULT:
        value = field.default
    elif field.default_factory is not _NO_DEFAULT:  # type: ignore[misc]
        value = field.default_factory()  # type: ignore[misc]
    else:
        return "required"
    if value is None:
        return "none"
    if isinstance(value, (list, tuple)):
        return " ".join(str(v) for v in value) or "empty"
    return str(value)


def _argument_spec(kind: Any) -> dict[str, Any]:
    """argparse keywords for a field of type `kind`: type conversion, choices, nargs."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType) and type(None) in args:
        inner = [a for a in args if a is not type(None)]
        spec = _argument_spec(inner[0])
        convert = spec.get("type", str)
        spec["type"] = lambda text, convert=convert: None if text.lower() in ("none", "null") else convert(text)
        return spec
    if kind is bool:
        return {"action": argparse.BooleanOptionalAction}
    if origin is Literal:
        return {"type": type(args[0]), "choices": list(args)}
    if origin in (list, tuple):
        item = args[0] if args else str
        return {"type": item, "nargs": "*" if origin is list else len(args) if args[-1] is not Ellipsis else "*"}
    if kind in (int, float, str):
        return {"type": kind}
    return {"type": json.loads, "metavar": "JSON"}


def add_config_arguments(
    parser: argparse.ArgumentParser, cls: type, path: tuple[str, ...] = (), seen: dict[str, str] | None = None
) -> None:
    """Add one flag per field of config `cls` (recursing into nested configs) and `--config FILE`
    (once, at the top). Flags default to "not given", so `resolve_config` can layer them."""
    seen = {} if seen is None else seen
    if not path:
        parser.add_argument(
            "--config", type=Path, metavar="FILE", help="TOML or YAML file of settings (flags given here override it)"
        )
    summary = (cls.__doc__ or "").strip().splitlines()[0]
    group = parser.add_argument_group(cls.__name__, None if summary.startswith(cls.__name__ + "(") else summary)
    hints = _hints(cls)
    for field in dataclasses.fields(cls):
        kind = hints[field.name]
        if _is_config(kind):
            add_config_arguments(parser, kind, (*path, field.name), seen)
            continue
        if not field.metadata.get("flag", True):
            continue
        flag = _flag(_prefix(cls), field.name)
        owner = ".".join((*path, field.name))
        if flag in seen:
            raise ValueError(f"flag {flag} is generated twice: by {seen[flag]} and by {owner}")
        seen[flag] = owner
        help_text = field.metadata.get("help", "")
        spec = _argument_spec(kind)
        if "type" in spec and "choices" not in spec:
            spec["metavar"] = field.name.upper()
        group.add_argument(
            flag,
            dest=_dest((*path, field.name)),
            default=argparse.SUPPRESS,
            help=f"{help_text} (default: {_default_text(field)})".replace("%", "%%"),
            **spec,
        )


def read_config_file(path: Path) -> dict[str, Any]:
    """The settings in a TOML (.toml) or YAML (.yaml/.yml) file, as nested dicts."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise UserError(f"{path}: cannot read config file: {error.strerror}") from None
    try:
        if path.suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text) or {}
        else:
            data = tomllib.loads(text)
    except Exception as error:  # tomllib and yaml raise their own error types
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise UserError(
            f"{path}: not a valid {'YAML' if path.suffix in ('.yaml', '.yml') else 'TOML'} file: {first}"
        ) from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: a config file holds a table of settings, got {type(data).__name__}")
    return data


def build_config(cls: type[C], values: dict[str, Any], source: str = "config", path: tuple[str, ...] = ()) -> C:
    """Instance of `cls` from nested `values` (unknown nested tables are ignored, unknown keys in a
    known table are an error naming `source` and the key)."""
    hints, kwargs = _hints(cls), {}
    names = {f.name for f in dataclasses.fields(cls)}
    for key, value in values.items():
        where = ".".join((*path, key))
        if key not in names:
            if isinstance(value, dict) and path == ():
                continue  # a table for another command's config
            raise UserError(f"{source}: unknown setting '{where}' (known: {', '.join(sorted(names))})")
        kind = hints[key]
        if _is_config(kind):
            if not isinstance(value, dict):
                raise UserError(f"{source}: '{where}' must be a table of settings")
            kwargs[key] = build_config(kind, value, source, (*path, key))
        else:
            kwargs[key] = value
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as error:
        raise UserError(f"{source}: {'.'.join(path) or cls.__name__}: {error}") from None


def _merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in top.items():
        merged[key] = (
            _merge(merged[key], value) if isinstance(value, dict) and isinstance(merged.get(key), dict) else value
        )
    return merged


def resolve_config(cls: type[C], args: argparse.Namespace, under: Path | None = None) -> C:
    """The config of a command: defaults, then the file `under` (e.g. a preset), then `--config
    FILE`, then the flags given."""
    values: dict[str, Any] = read_config_file(under) if under is not None else {}
    if getattr(args, "config", None):
        values = _merge(values, read_config_file(args.config))
    given: dict[str, Any] = {}
    for dest, value in vars(args).items():
        if not dest.startswith("config."):
            continue
        node = given
        *parents, leaf = dest.split(".")[1:]
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    files = [str(path) for path in (under, getattr(args, "config", None)) if path]
    source = " + ".join([*files, "command line"] if given else files or ["defaults"])
    return build_config(cls, _merge(values, given), source)


def config_dict(config: Any) -> dict[str, Any]:
    """A config as plain nested dicts (what run.json records)."""
    return dataclasses.asdict(config)


@dataclasses.dataclass
class RolloutConfig:
    """How a policy is sampled in rollouts: training, calibration and sampled evaluation alike."""

    temperature: float = option(1.0, "sampling temperature of rollouts")
    max_new_tokens: int | None = option(
        None, "tokens per assistant turn; none: 1.25 x the environment's longest oracle turn"
    )

    def __post_init__(self) -> None:
        check_sampling(self.temperature, self.max_new_tokens)


@dataclasses.dataclass
class ServedRolloutConfig:
    """GRPO rollouts sampled by an OpenAI-compatible server (`tracegym serve MODEL --lora-root DIR`, or
    `vllm serve MODEL --enable-lora`) instead of in-process generation (tracegym.served_rollout).

    Off while `url` is None. With a URL, `adapter_dir` must be an existing folder the server may load
    adapters from (its --lora-root); the API key is read from the environment variable named by
    `api_key_env`, never from a config file. Raises ValueError for `in_flight` or `timeout` < 1.
    """

    flag_prefix: typing.ClassVar[str] = "rollout"
    url: str | None = option(
        None, "base URL of an OpenAI-compatible server to sample rollouts from (http://HOST:PORT); none: in-process"
    )
    model: str = option("tracegym", "the server's name of the base model (tracegym serve's --model-name)")
    api_key_env: str = option("TRACEGYM_API_KEY", "environment variable holding the server's API key (unset: none)")
    in_flight: int = option(
        16, "requests (one turn of one episode each) each training process sends to the server at once"
    )
    timeout: float = option(300.0, "seconds to wait for one reply before the server counts as not answering")
    adapter_dir: str | None = option(
        None, "folder the server may read (its --lora-root) where each step's LoRA is saved for it to load"
    )

    def __post_init__(self) -> None:
        if self.in_flight < 1 or self.timeout < 1:
            raise ValueError(f"need in_flight >= 1 and timeout >= 1, got {self.in_flight}, {self.timeout}")


@dataclasses.dataclass
class PolicyConfig:
    """The policy: its base model and how it is sampled."""

    model: str = option(DEFAULT_MODEL, f"policy model: {DEFAULT_MODEL}, a local directory, a hub id, or '{TINY_MODEL}'")
    rollout: RolloutConfig = option(help="sampling", factory=RolloutConfig)
