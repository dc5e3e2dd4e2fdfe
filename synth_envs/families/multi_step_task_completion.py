"""Multi-step task completion: carry out a request of 2-6 dependent operations, some of them bulk.

An inventory manager asks for a chain of changes (mark low-stock items for reorder, then move the
reordered ones, restock the emptiest item, reprice the cheapest, archive empty ones...). Each step
picks its targets from the state the earlier steps left, so order matters. Verified on the final
database: reward = 0.8 × the share of touched items (required or actually changed) whose final
record is right, + 0.2 success bonus when every item is right. Knobs: items, operations.
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass
from typing import Any, Callable

from tracegym.schema import ToolCall
from tracegym.synth_envs.base import Environment, ToolError
from tracegym.synth_envs.common import call, calls
from tracegym.synth_envs.registry import register

WAREHOUSES = ["north", "south", "east", "west"]
STATUSES = ["active", "reorder", "archived"]
NOUNS = ["bolt", "valve", "hinge", "gasket", "spring", "pulley", "clamp", "washer", "bracket", "rivet", "sprocket", "bearing"]
ADJECTIVES = ["steel", "brass", "nylon", "copper", "zinc", "rubber"]

Db = dict[str, dict[str, Any]]
Write = tuple[str, dict[str, Any]]


@dataclass
class Config:
    """Difficulty knobs: items in the inventory, dependent operations in the request (2-6)."""

    n_items: int = 16
    n_operations: int = 3


def _in(db: Db, warehouse: str, status: str | None = None) -> list[str]:
    return sorted(i for i, r in db.items() if r["warehouse"] == warehouse and (status is None or r["status"] == status))


def _op_reorder(db: Db, rng: random.Random) -> tuple[str, list[Write]] | None:
    w, limit = rng.choice(WAREHOUSES), rng.randrange(4, 12)
    targets = [i for i in _in(db, w, "active") if db[i]["quantity"] < limit]
    text = f"mark every active item in the {w} warehouse with quantity below {limit} as 'reorder'"
    return (text, [("update_status", {"item_id": i, "status": "reorder"}) for i in targets]) if targets else None


def _op_move(db: Db, rng: random.Random) -> tuple[str, list[Write]] | None:
    w = rng.choice(WAREHOUSES)
    to = rng.choice([x for x in WAREHOUSES if x != w])
    targets = _in(db, w, "reorder")
    text = f"move every item with status 'reorder' in the {w} warehouse to the {to} warehouse"
    return (text, [("move_item", {"item_id": i, "warehouse": to}) for i in targets]) if targets else None


def _op_restock(db: Db, rng: random.Random) -> tuple[str, list[Write]] | None:
    w, units = rng.choice(WAREHOUSES), rng.randrange(5, 40)
    pool = _in(db, w, "active") + _in(db, w, "reorder")
    if not pool:
        return None
    lowest = min(db[i]["quantity"] for i in pool)
    if sum(db[i]["quantity"] == lowest for i in pool) > 1:
        return None
    target = next(i for i in pool if db[i]["quantity"] == lowest)
    return (f"add {units} units to the non-archived item with the lowest quantity in the {w} warehouse",
            [("adjust_quantity", {"item_id": target, "delta": units})])


def _op_reprice(db: Db, rng: random.Random) -> tuple[str, list[Write]] | None:
    w, percent = rng.choice(WAREHOUSES), rng.choice([5, 10, 15, 20, 25])
    pool = _in(db, w, "active")
    if not pool:
        return None
    cheapest = min(db[i]["price"] for i in pool)
    if sum(db[i]["price"] == cheapest for i in pool) > 1:
        return None
    target = next(i for i in pool if db[i]["price"] == cheapest)
    price = round(db[target]["price"] * (1 + percent / 100), 2)
    return (f"raise the price of the cheapest active item in the {w} warehouse by {percent}% (round to cents)",
            [("set_price", {"item_id": target, "price": price})])


def _op_archive(db: Db, rng: random.Random) -> tuple[str, list[Write]] | None:
    w = rng.choice(WAREHOUSES)
    targets = [i for i in _in(db, w) if db[i]["quantity"] == 0 and db[i]["status"] != "archived"]
    text = f"archive every item in the {w} warehouse whose quantity is 0"
    return (text, [("update_status", {"item_id": i, "status": "archived"}) for i in targets]) if targets else None


OPERATIONS: tuple[Callable[[Db, random.Random], tuple[str, list[Write]] | None], ...] = (
    _op_reorder, _op_move, _op_restock, _op_reprice, _op_archive,
)


def _apply(db: Db, tool: str, args: dict[str, Any]) -> None:
    record = db[args["item_id"]]
    if tool == "update_status":
        record["status"] = args["status"]
    elif tool == "move_item":
        record["warehouse"] = args["warehouse"]
    elif tool == "adjust_quantity":
        record["quantity"] += args["delta"]
    elif tool == "set_price":
        record["price"] = round(args["price"], 2)


def _copy(db: Db) -> Db:
    return {key: dict(record) for key, record in db.items()}


@functools.lru_cache(maxsize=512)
def _world(seed: int, n_items: int, n_operations: int) -> tuple[Db, list[tuple[str, list[Write]]], Db]:
    """Initial inventory, the chained steps with their writes, and the expected final inventory."""
    rng = random.Random(seed)
    db: Db = {}
    for index in range(n_items):
        item_id = f"IT-{100 + index * 13 + rng.randrange(13)}"
        db[item_id] = {"name": f"{rng.choice(ADJECTIVES)} {rng.choice(NOUNS)}", "warehouse": rng.choice(WAREHOUSES),
                       "status": rng.choice(["active", "active", "active", "reorder"]),
                       "quantity": rng.choice([0, 0, rng.randrange(1, 30), rng.randrange(1, 60)]),
                       "price": round(rng.uniform(0.5, 90), 2)}
    expected = _copy(db)
    steps: list[tuple[str, list[Write]]] = []
    for _ in range(n_operations):
        step = None
        for _try in range(12):
            step = rng.choice(OPERATIONS)(expected, rng)
            if step is not None:
                break
        if step is None:
            break
        for tool, args in step[1]:
            _apply(expected, tool, args)
        steps.append(step)
    return db, steps, expected


@register(aliases=("multi_step_completion", "task_completion", "sequential_operations"))
class MultiStepTaskCompletion(Environment):
    name = "multi_step_task_completion"
    capability = "multi_step_task_completion"
    description = (
        "Completing a request that needs several dependent operations in sequence, some of them "
        "bulk updates over many records, without stopping early, skipping steps or changing "
        "records the request did not ask for; later steps depend on the results of earlier ones."
    )
    Config = Config
    ladder = ({"n_operations": 2, "n_items": 10}, {"n_operations": 3, "n_items": 16}, {"n_operations": 4, "n_items": 20}, {"n_operations": 5, "n_items": 24}, {"n_operations": 6, "n_items": 28})
    max_turns = 16
    _ID = {"type": "string", "description": "item id, e.g. IT-301"}
    tools = [
        {"name": "search_items", "description": "Items of a warehouse (optionally with one status): id, name, status, quantity, price.",
         "parameters": {"type": "object", "properties": {"warehouse": {"type": "string", "enum": WAREHOUSES},
                                                         "status": {"type": "string", "enum": STATUSES}}, "required": ["warehouse"]}},
        {"name": "update_status", "description": "Set an item's status.",
         "parameters": {"type": "object", "properties": {"item_id": _ID, "status": {"type": "string", "enum": STATUSES}},
                        "required": ["item_id", "status"]}},
        {"name": "move_item", "description": "Move an item to another warehouse.",
         "parameters": {"type": "object", "properties": {"item_id": _ID, "warehouse": {"type": "string", "enum": WAREHOUSES}},
                        "required": ["item_id", "warehouse"]}},
        {"name": "adjust_quantity", "description": "Add (or, if negative, remove) units of an item.",
         "parameters": {"type": "object", "properties": {"item_id": _ID, "delta": {"type": "integer"}}, "required": ["item_id", "delta"]}},
        {"name": "set_price", "description": "Set an item's unit price in USD.",
         "parameters": {"type": "object", "properties": {"item_id": _ID, "price": {"type": "number"}}, "required": ["item_id", "price"]}},
    ]

    instructions = (
        "You manage a parts inventory. Carry out every step of the manager's request, in order, "
        "with the tools; change nothing else. When all steps are done, reply with a short summary."
    )

    def _generate(self, seed: int) -> str:
        self.initial, self.steps, self.expected = _world(seed, *self.knob_values)
        self.db = _copy(self.initial)
        lines = "\n".join(f"{n}. {text}" for n, (text, _) in enumerate(self.steps, start=1))
        return f"Please do the following, in this order:\n{lines}"

    def _reject(self) -> str | None:
        if len(self.steps) < self.config.n_operations:
            return "could not chain enough operations with targets"
        if self.expected == self.initial:
            return "the request changes nothing"
        return None

    def _call(self, call_: ToolCall) -> Any:
        args = call_.arguments
        if call_.name == "search_items":
            ids = _in(self.db, args["warehouse"], args.get("status"))
            return [{"item_id": i, **{k: v for k, v in self.db[i].items() if k != "warehouse"}} for i in ids]
        if args["item_id"] not in self.db:
            raise ToolError(f"no item with id {args['item_id']!r}")
        if call_.name == "set_price" and args["price"] < 0:
            raise ToolError("price must be non-negative")
        _apply(self.db, call_.name, args)
        return {"ok": True, "item": {"item_id": args["item_id"], **self.db[args["item_id"]]}}

    def _score(self, final_answer: str) -> tuple[float, dict[str, Any]]:
        required = {i for i in self.expected if self.expected[i] != self.initial[i]}
        changed = {i for i in self.db if self.db[i] != self.initial[i]}
        touched = required | changed
        right = sum(self.db[i] == self.expected[i] for i in touched)
        fraction = right / len(touched)
        success = right == len(touched)
        reward = 0.8 * fraction + 0.2 * success
        return round(reward, 6), {"items_right": right, "items_touched": len(touched), "required": len(required), "success": success}

    def _turns(self, steps: list[tuple[str, list[Write]]]) -> list[str]:
        turns = []
        for text, writes in steps:
            warehouse = next(w for w in WAREHOUSES if f"the {w} warehouse" in text)
            turns.append(call("search_items", warehouse=warehouse))
            turns.append(calls(*writes))
        return turns + ["All requested steps are done."]

    def _oracle(self) -> list[str]:
        return self._turns(self.steps)

    def _wrong(self) -> list[list[str]]:
        wrong = [self._turns(self.steps[:-1]), self._turns(self.steps[1:])]
        first_text, first_writes = self.steps[0]
        tool, args = first_writes[0]
        field_name, value = {"update_status": ("status", args.get("status")), "move_item": ("warehouse", args.get("warehouse")),
                             "adjust_quantity": ("quantity", None), "set_price": ("price", args.get("price"))}[tool]
        targets = {a["item_id"] for _, a in first_writes}
        extra = next((i for i in sorted(self.initial) if i not in targets and self.expected[i][field_name] != value
                      and self.expected[i] == self.initial[i]), None)
        if extra is not None:
            wrong.append(self._turns([(first_text, first_writes + [(tool, {**args, "item_id": extra})])] + self.steps[1:]))
        return wrong

    def _hint(self) -> str:
        return ("Work step by step: before each step, search the warehouse it names (the earlier steps "
                "change which items qualify), then apply the change to every qualifying item.")
