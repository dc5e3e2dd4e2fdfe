"""Typed tools (schemas and validation from signatures), the base class's caches and protocol."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest

from tracegym import environment
from tracegym.synth_envs.base import Environment
from tracegym.synth_envs.checks import verdicts
from tracegym.synth_envs.registry import families, make_env
from tracegym.synth_envs.tools import make_tool, tool
from tracegym.toolcalls import render_tool_call

REPO = Path(__file__).resolve().parents[1]


class _Shop:
    @tool
    def find(
        self,
        city: Literal["Oslo", "Lima"],
        ids: list[str],
        limit: int,
        price: float,
        express: bool = False,
        note: str | None = None,
        extra: dict | None = None,
    ) -> list[str]:
        """Find shops in a city.

        Args:
            city: where to look
            ids: shop ids to keep,
                one per shop
            limit: at most this many
        """
        return []


def test_schema_comes_from_signature_and_docstring() -> None:
    schema = _Shop.find.__tool__.schema
    assert schema == {
        "name": "find",
        "description": "Find shops in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "enum": ["Oslo", "Lima"], "description": "where to look"},
                "ids": {"type": "array", "items": {"type": "string"}, "description": "shop ids to keep, one per shop"},
                "limit": {"type": "integer", "description": "at most this many"},
                "price": {"type": "number"},
                "express": {"type": "boolean"},
                "note": {"type": "string"},
                "extra": {"type": "object"},
            },
            "required": ["city", "ids", "limit", "price"],
        },
    }


@pytest.mark.parametrize(
    "arguments, problem",
    [
        ({"ids": [], "limit": 1, "price": 1.0}, "missing required argument 'city'"),
        ({"city": "Oslo", "ids": [], "limit": 1, "price": 1, "colour": "red"}, "unknown argument 'colour'"),
        ({"city": "Oslo", "ids": [], "limit": "1", "price": 1.0}, "argument 'limit' must be of type integer, got str"),
        (
            {"city": "Oslo", "ids": [], "limit": True, "price": 1.0},
            "argument 'limit' must be of type integer, got bool",
        ),
        ({"city": "Oslo", "ids": [], "limit": 1, "price": False}, "argument 'price' must be of type number, got bool"),
        ({"city": "Oslo", "ids": "a", "limit": 1, "price": 1.0}, "argument 'ids' must be of type array, got str"),
        (
            {"city": "Rome", "ids": [], "limit": 1, "price": 1.0},
            "argument 'city' must be one of ['Oslo', 'Lima'], got 'Rome'",
        ),
        (
            {"city": "Oslo", "ids": [], "limit": 1, "price": 1.0, "note": None},
            "argument 'note' must be of type string, got NoneType",
        ),
        ({"city": "Oslo", "ids": [], "limit": 1, "price": 2, "express": True, "note": "x", "extra": {}}, None),
    ],
)
def test_calls_are_validated_against_the_signature(arguments: dict[str, Any], problem: str | None) -> None:
    assert _Shop.find.__tool__.check(arguments) == problem


def _untyped(self, query):
    """Search."""


def _undocumented(self, query: str) -> str:
    return query


def _bad_union(self, query: str | int) -> str:
    """Search."""
    return str(query)


def _stray_arg(self, query: str) -> str:
    """Search.

    Args:
        qurey: misspelt
    """
    return query


def _no_self(query: str) -> str:
    """Search."""
    return query


@pytest.mark.parametrize(
    "function, message",
    [
        (_untyped, "needs a type hint"),
        (_undocumented, "needs a docstring"),
        (_bad_union, "union other than"),
        (_stray_arg, "no such parameter: qurey"),
        (_no_self, "first parameter must be self"),
    ],
)
def test_tool_definition_mistakes_fail_at_import(function: Any, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        make_tool(function)


def test_a_tool_may_not_shadow_the_environment_api() -> None:
    def reset(self, seed: int) -> str:
        """Start over."""
        return ""

    with pytest.raises(TypeError, match="clash with Environment attributes: reset"):
        type("Bad", (Environment,), {"reset": tool(reset)})


@pytest.mark.parametrize("family", sorted(families()))
def test_families_implement_the_core_protocol_with_typed_tools(family: str) -> None:
    env = make_env(family)
    assert isinstance(env, environment.Environment)
    assert env.tools == [spec.schema for spec in type(env).tool_specs.values()] and env.tools
    for schema in env.tools:
        assert schema["description"] and schema["parameters"]["type"] == "object"
        assert all(
            p["type"] in ("string", "integer", "number", "boolean", "array", "object")
            for p in schema["parameters"]["properties"].values()
        )


def test_tools_dispatch_by_name_and_bad_calls_become_error_observations() -> None:
    env = make_env("precondition_verification")
    task = env.reset(0)
    user_id = task.split("user id ")[1].split(")")[0]
    observation = env.step(render_tool_call("get_user", {"user_id": user_id})).observation
    assert f'"user_id":"{user_id}"' in observation and env.errors == 0
    assert "error: unknown tool 'get_users'" in env.step(render_tool_call("get_users", {})).observation
    assert (
        "error: get_user: no user with id 'U-0'"
        in env.step(render_tool_call("get_user", {"user_id": "U-0"})).observation
    )
    assert env.errors == 2 and [c.name for c in env.calls] == ["get_user", "get_user"]


@dataclass(frozen=True)
class _Knobs:
    size: int = 1


class _CountingEnv(Environment):
    """A one-tool environment that counts how often its world is generated."""

    name = "counting_test"
    capability = "counting"
    description = "count"
    Config = _Knobs
    instructions = "Say the number."
    generated: list[int] = []

    def _generate(self, seed: int) -> int:
        self.generated.append(seed)
        return seed * self.config.size

    def _task(self) -> str:
        return "number?"

    @tool
    def peek(self) -> int:
        """The number."""
        return self.world

    def _score(self, final_answer: str) -> tuple[float, dict[str, Any]]:
        return float(final_answer == str(self.world)), {}

    def _oracle(self) -> list[str]:
        return [str(self.world)]

    def _wrong(self) -> list[list[str]]:
        return [["-1"]]


def test_worlds_and_verdicts_are_cached_per_family_knobs_and_seed() -> None:
    _CountingEnv.generated.clear()
    env = _CountingEnv()
    for _ in range(3):
        env.reset(5)
    assert _CountingEnv.generated == [5]  # checks and replays reuse the cached world
    assert (env.key, 5) in Environment.worlds and (env.key, 5) in verdicts
    _CountingEnv(size=2).reset(5)
    assert _CountingEnv.generated == [5, 5]  # other knobs, other world
    assert Environment.worlds.size == 256 and len(Environment.worlds) <= 256


def test_system_prompt_is_cached_per_family_and_knobs() -> None:
    small, large = make_env("causal_diagnosis", window_days=5), make_env("causal_diagnosis", window_days=9)
    assert "days 5-9" in small.system_prompt and "days 9-17" in large.system_prompt
    assert small.system_prompt is make_env("causal_diagnosis", window_days=5).system_prompt


def _imports(path: Path) -> set[str]:
    """Every module a file imports, at any depth (function bodies included)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_no_import_cycles_or_per_family_caches() -> None:
    assert not any(m.startswith("tracegym.synth_envs.base") for m in _imports(REPO / "synth_envs" / "checks.py"))
    assert not any(m.startswith("tracegym.synth_envs") for m in _imports(REPO / "tracegym" / "rollout.py"))
    assert not any(m.startswith("tracegym.synth_envs") for m in _imports(REPO / "tracegym" / "environment.py"))
    for path in (REPO / "synth_envs" / "families").glob("*.py"):
        assert "functools" not in _imports(path), f"{path.name}: memoise through the base class's caches"
