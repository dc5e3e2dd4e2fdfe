"""Configs: generated flags, the file < flags layering, clear errors, and each default written once."""

from __future__ import annotations

import argparse
import ast
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

import pytest
from test_architecture import source_modules

from tracegym.adapters.config import TrainConfig
from tracegym.analysis.diagnose import DiagnoseConfig
from tracegym.cli import build_parser
from tracegym.config import add_config_arguments, option, resolve_config
from tracegym.errors import UserError
from tracegym.eval.config import RunConfig
from tracegym.synth_envs.synthesise import SynthConfig

COMMAND_CONFIGS = {"train": TrainConfig, "synth": SynthConfig, "run": RunConfig, "diagnose": DiagnoseConfig}
HAND_WRITTEN = {
    "-h",
    "--help",
    "--out",
    "--resume",
    "--config",
    "--quick",
    "--domain",
    "--stop-after",
}  # --quick picks a preset file, like --config; --domain names an input (a domain's rules), like PATH;
# --stop-after says where this call ends, like --resume, and is no setting of the run (a later call drops it)


@dataclass
class Inner:
    flag_prefix: ClassVar[str] = "inner"
    enabled: bool = option(False, "switch")
    seeds: int = option(8, "seeds")


@dataclass
class Outer:
    steps: int = option(20, "steps")
    mode: Literal["a", "b"] = option("a", "mode")
    budget: int | None = option(None, "budget")
    inner: Inner = option(help="inner", factory=Inner)


def _parse(cls: type, argv: list[str]):
    parser = argparse.ArgumentParser()
    add_config_arguments(parser, cls)
    return resolve_config(cls, parser.parse_args(argv))


def test_flags_come_from_fields_and_layer_over_the_file(tmp_path):
    assert _parse(Outer, []) == Outer()
    parsed = _parse(Outer, ["--steps", "3", "--inner", "--inner-seeds", "2", "--budget", "none", "--mode", "b"])
    assert parsed == Outer(steps=3, mode="b", budget=None, inner=Inner(enabled=True, seeds=2))
    toml = tmp_path / "c.toml"
    toml.write_text("steps = 5\nbudget = 64\n[inner]\nseeds = 4\n[a_table_for_another_command]\nx = 1\n")
    assert _parse(Outer, ["--config", str(toml), "--steps", "7"]) == Outer(steps=7, budget=64, inner=Inner(seeds=4))
    yaml = tmp_path / "c.yaml"
    yaml.write_text("inner:\n  enabled: true\n")
    assert _parse(Outer, ["--config", str(yaml)]).inner.enabled is True


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[inner]\nseedz = 4\n", "unknown setting 'inner.seedz'"),
        ("stepz = 4\n", "unknown setting 'stepz'"),
        ("inner = 3\n", "'inner' must be a table"),
        ("steps = [\n", "not a valid TOML file"),
    ],
)
def test_bad_config_files_are_one_line_errors_naming_the_file(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(UserError, match=message) as raised:
        _parse(Outer, ["--config", str(path)])
    assert str(path) in str(raised.value) and "\n" not in str(raised.value)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--temperature", "-1"], "temperature must be >= 0"),
        (["--max-new-tokens", "0"], "max_new_tokens must be at least 1"),
    ],
)
def test_impossible_sampling_settings_are_refused_before_anything_runs(flags, message):
    with pytest.raises(UserError, match=f"^command line: rollout: {message}"):
        _parse(RunConfig, flags)


@dataclass
class Twice:
    """Nests `Inner` twice: both copies would generate `--inner-seeds`."""

    a: Inner = option(help="", factory=Inner)
    b: Inner = option(help="", factory=Inner)


def test_a_flag_generated_twice_is_refused():
    with pytest.raises(ValueError, match="generated twice"):
        add_config_arguments(argparse.ArgumentParser(), Twice)


def _subparser(command: str) -> argparse.ArgumentParser:
    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return subparsers.choices[command]


@pytest.mark.parametrize("command", sorted(COMMAND_CONFIGS))
def test_every_setting_flag_of_a_command_is_generated_from_its_config(command):
    """No hand-written flag (with a default of its own) beside the generated ones."""
    hand_written = [
        option
        for action in _subparser(command)._actions
        if not action.dest.startswith("config.")
        for option in action.option_strings
        if option not in HAND_WRITTEN
    ]
    assert hand_written == []


def test_shared_settings_are_spelled_and_defaulted_alike_across_commands():
    flags = {}
    for command in COMMAND_CONFIGS:
        for action in _subparser(command)._actions:
            for option_string in set(action.option_strings) - HAND_WRITTEN:
                flags.setdefault(option_string, set()).add((action.dest, action.help))
    assert "--calibration-seeds" in flags and "--temperature" in flags
    assert {flag: spellings for flag, spellings in flags.items() if len(spellings) > 1} == {}


def config_classes() -> dict[str, type]:
    """Every config dataclass reachable from the commands' configs."""
    found: dict[str, type] = {}

    def walk(cls: type) -> None:
        for base in cls.__mro__:
            if dataclasses.is_dataclass(base) and base is not object:
                found[base.__name__] = base
        for field in dataclasses.fields(cls):
            if field.default_factory is not dataclasses.MISSING and dataclasses.is_dataclass(field.default_factory):
                walk(field.default_factory)

    for cls in COMMAND_CONFIGS.values():
        walk(cls)
    return found


def repeated_defaults(source: str, configs: dict[str, type], module: str = "<planted>") -> list[str]:
    """Functions in `source` that take a setting of a config the module uses as a parameter with a
    default of its own, instead of taking the config (e.g. `def calibrate(seeds=range(20))`)."""
    tree = ast.parse(source)
    used = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)} | {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    used |= {node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}
    settings = {f.name: name for name, cls in configs.items() if name in used for f in dataclasses.fields(cls)}
    problems = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        arguments = node.args.args + node.args.kwonlyargs
        defaults = [None] * (len(node.args.args) - len(node.args.defaults)) + node.args.defaults + node.args.kw_defaults
        for argument, default in zip(arguments, defaults):
            if (
                default is not None
                and argument.arg in settings
                and not (isinstance(default, ast.Constant) and default.value is None)
            ):
                problems.append(
                    f"{module}:{node.lineno} {node.name}({argument.arg}=...) "
                    f"repeats {settings[argument.arg]}.{argument.arg}"
                )
    return problems


def test_each_config_default_is_written_once():
    configs = config_classes()
    assert {"TurnGRPOConfig", "CalibrationConfig", "RolloutConfig", "WarmStartConfig", "CreditConfig"} <= set(configs)
    problems = [
        p
        for module, path in source_modules()
        for p in repeated_defaults(path.read_text(encoding="utf-8"), configs, module)
    ]
    assert problems == []


@pytest.mark.parametrize(
    "source",
    [
        "from tracegym.synth_envs.calibration import CalibrationConfig\n"
        "def calibrate(family, seeds=range(20), rollouts=4): ...",
        "from tracegym.config import RolloutConfig\ndef heldout(model, temperature: float = 0.7): ...",
    ],
)
def test_a_planted_repeated_default_is_caught(source):
    assert repeated_defaults(source, config_classes())


def test_run_json_records_the_resolved_config(tmp_path):
    from tracegym.analysis.examples import write_example_run
    from tracegym.cli import main

    (tmp_path / "c.toml").write_text("max_adapters = 0\n[grpo]\nsteps = 3\n")
    example = str(write_example_run(tmp_path / "inputs"))
    assert (
        main(
            [
                "run",
                example,
                "--out",
                str(tmp_path / "run"),
                "--config",
                str(tmp_path / "c.toml"),
                "--model",
                "tiny",
                "--calibration-seeds",
                "5",
            ]
        )
        == 0
    )
    import json

    recorded = json.loads((tmp_path / "run" / "run.json").read_text())["config"]
    assert recorded["grpo"]["steps"] == 3 and recorded["calibration"]["seeds"] == 5 and recorded["model"] == "tiny"
    assert recorded["max_adapters"] == 0 and recorded["grpo"]["credit"]["credit"] == "trace"
    assert Path(tmp_path / "run" / "analysis" / "capabilities.json").is_file()


@pytest.mark.parametrize("name", ["default", "quick", "gpu"])
def test_each_shipped_config_resolves(name: str) -> None:
    path = Path(__file__).resolve().parents[1] / "configs" / f"{name}.toml"
    config = resolve_config(RunConfig, build_parser("run").parse_args(["run", "--out", "x", "--config", str(path)]))
    assert config.max_adapters >= 1 and config.grpo.steps >= 1
