"""The layering of ARCHITECTURE.md, checked on every import in the source (in-function ones too).

The core (`tracegym.*` outside the stage packages) imports no stage; a stage imports the core and
earlier stages only (analysis < synth_envs < adapters < moe_router < eval); no library module
imports a CLI module (`tracegym.cli` or a stage's `cli` / `*_cli` module).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
STAGES = ("analysis", "synth_envs", "adapters", "moe_router", "eval")  # in pipeline order
PACKAGE_DIRS = {"tracegym": REPO / "tracegym", **{f"tracegym.{stage}": REPO / stage for stage in STAGES}}


def layer(module: str) -> int:
    """0 for the core, 1.. for the stages in pipeline order; -1 for modules outside tracegym."""
    parts = module.split(".")
    if parts[0] != "tracegym":
        return -1
    return STAGES.index(parts[1]) + 1 if len(parts) > 1 and parts[1] in STAGES else 0


def is_cli(module: str) -> bool:
    """A CLI module, or a name imported from one (`tracegym.analysis.cli.format_table`)."""
    return any(part == "cli" or part.endswith("_cli") for part in module.split(".")[1:])


def imported_modules(source: str, module: str) -> list[tuple[int, str]]:
    """(line, module) for every import statement anywhere in `source` (relative ones resolved)."""
    found = []
    package = module.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def forbidden_edges(module: str, source: str) -> list[str]:
    """The imports of `module` (whose text is `source`) that break the layering."""
    problems = []
    own = layer(module)
    for line, target in imported_modules(source, module):
        target_layer = layer(target)
        if target_layer < 0:
            continue
        if target_layer > own:
            problems.append(f"{module}:{line} imports {target} (a later layer)")
        if is_cli(target) and not is_cli(module):
            problems.append(f"{module}:{line} imports the CLI module {target}")
    return problems


def source_modules() -> list[tuple[str, Path]]:
    modules = []
    for package, folder in PACKAGE_DIRS.items():
        for path in sorted(folder.rglob("*.py")):
            relative = path.relative_to(folder).with_suffix("")
            parts = [p for p in relative.parts if p != "__init__"]
            if package == "tracegym" and parts and parts[0] in STAGES:
                continue
            modules.append((".".join([package, *parts]), path))
    return modules


def test_every_module_respects_the_layers():
    modules = source_modules()
    assert len(modules) > 40, "the walk found the package's modules"
    problems = [p for module, path in modules for p in forbidden_edges(module, path.read_text(encoding="utf-8"))]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    ("module", "source", "expected"),
    [
        ("tracegym.rollout", "from tracegym.synth_envs.base import Environment", "a later layer"),
        ("tracegym.synth_envs.calibration", "def f():\n    from tracegym.adapters import train", "a later layer"),
        ("tracegym.eval.pipeline", "from tracegym.analysis.cli import format_table", "the CLI module"),
        ("tracegym.synth_envs.base", "from ..adapters import grpo", "a later layer"),
    ],
)
def test_planted_violations_are_caught(module, source, expected):
    (problem,) = forbidden_edges(module, source)
    assert expected in problem


def test_allowed_edges_pass():
    assert forbidden_edges("tracegym.eval.pipeline", "from tracegym.adapters.train import train_adapter") == []
    assert forbidden_edges("tracegym.adapters.train_cli", "from tracegym.synth_envs.envs_cli import run_list") == []
    assert forbidden_edges("tracegym.synth_envs.checks", "import torch\nfrom . import base") == []
