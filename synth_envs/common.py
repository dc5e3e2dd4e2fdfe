"""Small helpers the families share: call text, seeded names, lenient answer parsing."""

from __future__ import annotations

import json
import random
import re
from typing import Any

from tracegym.toolcalls import render_tool_call

FIRST_NAMES = (
    "Ana",
    "Ben",
    "Chen",
    "Dara",
    "Eli",
    "Fay",
    "Gus",
    "Hana",
    "Ivo",
    "Jia",
    "Kai",
    "Lena",
    "Milo",
    "Nia",
    "Omar",
    "Pia",
    "Quin",
    "Rosa",
    "Sam",
    "Tara",
    "Uma",
    "Vik",
    "Wen",
    "Yara",
)
LAST_NAMES = (
    "Abe",
    "Brooks",
    "Cruz",
    "Diaz",
    "Evans",
    "Fox",
    "Garcia",
    "Hill",
    "Ito",
    "Jones",
    "Khan",
    "Li",
    "Moreau",
    "Novak",
    "Okafor",
    "Park",
    "Quinn",
    "Rossi",
    "Silva",
    "Tanaka",
    "Ueda",
    "Vega",
)


def call(name: str, **arguments: Any) -> str:
    """One tool-call turn of the canonical format."""
    return render_tool_call(name, arguments)


def calls(*pairs: tuple[str, dict[str, Any]]) -> str:
    """Several tool calls in one assistant turn."""
    return "\n".join(render_tool_call(name, arguments) for name, arguments in pairs)


def person_name(rng: random.Random) -> str:
    return f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}"


def last_number(text: str) -> float | None:
    """The last number written in `text` (commas allowed as thousands separators), or None."""
    found = re.findall(r"-?\d[\d,]*(?:\.\d+)?", text)
    if not found:
        return None
    try:
        return float(found[-1].replace(",", ""))
    except ValueError:
        return None


def json_object(text: str) -> dict[str, Any] | None:
    """The outermost JSON object in `text` (models wrap answers in prose or code fences), or None."""
    start, end = text.find("{"), text.rfind("}")
    if start == -1 or end <= start:
        return None
    try:
        value = json.loads(text[start : end + 1])
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None
