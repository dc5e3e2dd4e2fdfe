"""Typed tools: a family's tools are methods, and each one's JSON schema comes from its signature.

    @tool
    def get_order(self, order_id: str) -> dict[str, Any]:
        \"\"\"An order's status, total, address and days since delivery.

        Args:
            order_id: order id, e.g. #123456
        \"\"\"

Type hints give the JSON types: str -> string, int -> integer, float -> number (integers
accepted), bool -> boolean, list[X] -> array of X, dict -> object, Literal[...] -> an enum of
the values' type; `X | None = None` (any default) makes a parameter optional. The docstring's
first line is the tool's description; a Google-style `Args:` section describes parameters (those
it leaves out get no description). The same signature validates every call (`Tool.check`):
missing and unknown arguments, wrong types (a bool is no number) and values outside an enum come
back as one-line problems, which the environment answers as error observations. Schemas follow
the OpenAI function format and transformers' `get_json_schema`, so the methods can be handed to
TRL as they are.
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

_SIMPLE: dict[type, tuple[str, tuple[type, ...]]] = {
    str: ("string", (str,)),
    int: ("integer", (int,)),
    float: ("number", (int, float)),
    bool: ("boolean", (bool,)),
    list: ("array", (list,)),
    dict: ("object", (dict,)),
}
_ARG_LINE = re.compile(r"^(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


@dataclass(frozen=True)
class Parameter:
    """One tool parameter: its JSON schema, the Python types it accepts, its enum and whether required."""

    name: str
    schema: dict[str, Any]
    accepts: tuple[type, ...]
    enum: tuple[Any, ...] | None
    required: bool

    def problem(self, value: Any) -> str | None:
        """Why `value` is not acceptable for this parameter, or None."""
        kind = self.schema["type"]
        if not isinstance(value, self.accepts) or (isinstance(value, bool) and kind in ("integer", "number")):
            return f"argument '{self.name}' must be of type {kind}, got {type(value).__name__}"
        if self.enum is not None and value not in self.enum:
            return f"argument '{self.name}' must be one of {list(self.enum)}, got {value!r}"
        return None


@dataclass(frozen=True)
class Tool:
    """A typed tool: name, description, parameters by name (signature order), the method, the JSON schema."""

    name: str
    description: str
    parameters: dict[str, Parameter]
    function: Callable[..., Any]
    schema: dict[str, Any]

    def check(self, arguments: dict[str, Any]) -> str | None:
        """Why `arguments` do not fit the signature (first problem found), or None when they do."""
        for parameter in self.parameters.values():
            if parameter.required and parameter.name not in arguments:
                return f"missing required argument '{parameter.name}'"
        for name, value in arguments.items():
            parameter = self.parameters.get(name)
            if parameter is None:
                return f"unknown argument '{name}'"
            problem = parameter.problem(value)
            if problem is not None:
                return problem
        return None


def tool(function: Callable[..., Any]) -> Callable[..., Any]:
    """Method decorator: mark a method as a tool (its schema is built now, so mistakes fail at import)."""
    function.__tool__ = make_tool(function)  # type: ignore[attr-defined]
    return function


def tools_of(cls: type) -> dict[str, Tool]:
    """The tools of a class by name, in definition order (base classes first; overrides replace)."""
    found: dict[str, Tool] = {}
    for klass in reversed(cls.__mro__):
        for name, value in vars(klass).items():
            spec = getattr(value, "__tool__", None)
            if isinstance(spec, Tool):
                found[name] = spec
            elif name in found:
                del found[name]
    return found


def make_tool(function: Callable[..., Any]) -> Tool:
    """The Tool described by a method's signature and docstring; TypeError naming what is wrong."""
    where = f"tool {function.__qualname__}"
    description, documented = _parse_docstring(function.__doc__ or "", where)
    hints = typing.get_type_hints(function)
    signature = inspect.signature(function)
    names = list(signature.parameters)
    if not names or names[0] != "self":
        raise TypeError(f"{where}: a tool is a method; its first parameter must be self")
    parameters = []
    for name in names[1:]:
        item = signature.parameters[name]
        if item.kind not in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY):
            raise TypeError(f"{where}: parameter '{name}' must be a plain or keyword-only parameter")
        if name not in hints:
            raise TypeError(f"{where}: parameter '{name}' needs a type hint")
        schema, accepts, enum = json_type(hints[name], f"{where}, parameter '{name}'")
        if name in documented:
            schema = {**schema, "description": documented[name]}
        parameters.append(Parameter(name, schema, accepts, enum, item.default is inspect.Parameter.empty))
    unknown = set(documented) - set(names)
    if unknown:
        raise TypeError(f"{where}: Args documents no such parameter: {', '.join(sorted(unknown))}")
    body: dict[str, Any] = {"type": "object", "properties": {p.name: p.schema for p in parameters}}
    required = [p.name for p in parameters if p.required]
    if required:
        body["required"] = required
    schema = {"name": function.__name__, "description": description, "parameters": body}
    return Tool(function.__name__, description, {p.name: p for p in parameters}, function, schema)


def json_type(annotation: Any, where: str) -> tuple[dict[str, Any], tuple[type, ...], tuple[Any, ...] | None]:
    """(JSON schema, accepted Python types, enum values or None) of a type hint."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        kept = [a for a in args if a is not type(None)]
        if len(kept) != 1:
            raise TypeError(f"{where}: a union other than `X | None` has no JSON type")
        return json_type(kept[0], where)
    if origin is Literal:
        kinds = {type(value) for value in args}
        if len(kinds) != 1 or next(iter(kinds)) not in _SIMPLE:
            raise TypeError(f"{where}: Literal values must all be of one JSON type")
        kind, accepts = _SIMPLE[next(iter(kinds))]
        return {"type": kind, "enum": list(args)}, accepts, tuple(args)
    if origin is list:
        items = {"items": json_type(args[0], where)[0]} if args else {}
        return {"type": "array", **items}, (list,), None
    if origin is dict:
        return {"type": "object"}, (dict,), None
    if annotation in _SIMPLE:
        kind, accepts = _SIMPLE[annotation]
        return {"type": kind}, accepts, None
    raise TypeError(f"{where}: type {annotation!r} has no JSON type (use str, int, float, bool, list, dict or Literal)")


def _parse_docstring(doc: str, where: str) -> tuple[str, dict[str, str]]:
    """The first line and the `Args:` descriptions (continuation lines joined) of a docstring."""
    lines = inspect.cleandoc(doc).splitlines()
    if not lines or not lines[0].strip():
        raise TypeError(f"{where}: needs a docstring whose first line describes the tool")
    documented: dict[str, str] = {}
    inside, current = False, ""
    for line in lines[1:]:
        if line.strip() == "Args:":
            inside = True
            continue
        if not inside or not line.strip():
            continue
        if not line.startswith(" "):
            inside = False  # the next section (Returns:, ...) ends Args
            continue
        match = _ARG_LINE.match(line.strip())
        if match and len(line) - len(line.lstrip()) <= 4:
            current = match.group(1)
            documented[current] = match.group(2).strip()
        elif current:
            documented[current] = f"{documented[current]} {line.strip()}".strip()
    return lines[0].strip(), documented
