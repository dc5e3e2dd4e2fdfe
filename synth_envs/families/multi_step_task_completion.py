"""Multi-step task completion: carry out a request of 2-6 dependent operations, some of them bulk.

An inventory manager asks for a chain of changes (mark low-stock items for reorder, then move the
reordered ones, restock the emptiest item, reprice the cheapest, archive empty ones...). Each step
picks its targets from the state the earlier steps left, so order matters. Verified on the final
database: reward = 0.8 × the share of touched items (required or actually changed) whose final
record is right, + 0.2 success bonus when every item is right. Knobs: items, operations. Each step
is drawn from all five operations whatever the number of operations, so every setting needs, and
offers, all five tools: the prompt is the same at every setting.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, get_args

from tracegym.synth_envs.base import Environment, ToolError
from tracegym.synth_envs.common import call, calls
from tracegym.synth_envs.registry import register
from tracegym.synth_envs.tools import tool

Warehouse = Literal["north", "south", "east", "west"]
Status = Literal["active", "reorder", "archived"]
WAREHOUSES = get_args(Warehouse)
NOUNS = [
    "bolt",
    "valve",
    "hinge",
    "gasket",
    "spring",
    "pulley",
    "clamp",
    "washer",
    "bracket",
    "rivet",
    "sprocket",
    "bearing",
]
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
    return (
        f"add {units} units to the non-archived item with the lowest quantity in the {w} warehouse",
        [("adjust_quantity", {"item_id": target, "delta": units})],
    )


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
    return (
        f"raise the price of the cheapest active item in the {w} warehouse by {percent}% (round to cents)",
        [("set_price", {"item_id": target, "price": price})],
    )


def _op_archive(db: Db, rng: random.Random) -> tuple[str, list[Write]] | None:
    w = rng.choice(WAREHOUSES)
    targets = [i for i in _in(db, w) if db[i]["quantity"] == 0 and db[i]["status"] != "archived"]
    text = f"archive every item in the {w} warehouse whose quantity is 0"
    return (text, [("update_status", {"item_id": i, "status": "archived"}) for i in targets]) if targets else None


OPERATIONS: tuple[Callable[[Db, random.Random], tuple[str, list[Write]] | None], ...] = (
    _op_reorder,
    _op_move,
    _op_restock,
    _op_reprice,
    _op_archive,
)


# write tool -> its effect on the record it names (world generation applies the same writes)
EFFECTS: dict[str, Callable[[dict[str, Any], dict[str, Any]], None]] = {
    "update_status": lambda record, args: record.update(status=args["status"]),
    "move_item": lambda record, args: record.update(warehouse=args["warehouse"]),
    "adjust_quantity": lambda record, args: record.update(quantity=record["quantity"] + args["delta"]),
    "set_price": lambda record, args: record.update(price=round(args["price"], 2)),
}


def _apply(db: Db, tool_name: str, args: dict[str, Any]) -> None:
    EFFECTS[tool_name](db[args["item_id"]], args)


def _copy(db: Db) -> Db:
    return {key: dict(record) for key, record in db.items()}


@dataclass(frozen=True)
class _World:
    initial: Db  # the inventory the episode starts from
    steps: list[tuple[str, list[Write]]]  # each step's text and the writes it needs
    expected: Db  # the inventory after every step


@dataclass
class _State:
    db: Db  # the inventory as the agent's writes left it


@register
class MultiStepTaskCompletion(Environment):
    name = "multi_step_task_completion"
    capability = "multi_step_task_completion"
    description = (
        "Completing a request that needs several dependent operations in sequence, some of them "
        "bulk updates over many records, without stopping early, skipping steps or changing "
        "records the request did not ask for; later steps depend on the results of earlier ones."
    )
    Config = Config
    ladder = (
        {"n_operations": 2, "n_items": 10},
        {"n_operations": 3, "n_items": 16},
        {"n_operations": 4, "n_items": 20},
        {"n_operations": 5, "n_items": 24},
        {"n_operations": 6, "n_items": 28},
    )
    max_turns = 16
    instructions = (
        "You manage a parts inventory. Carry out every step of the manager's request, in order, "
        "with the tools; change nothing else. When all steps are done, reply with a short summary."
    )
    world: _World
    state: _State

    def _generate(self, seed: int) -> _World:
        """Initial inventory, the chained steps with their writes, and the expected final inventory."""
        rng = random.Random(seed)
        db: Db = {}
        for index in range(self.config.n_items):
            item_id = f"IT-{100 + index * 13 + rng.randrange(13)}"
            db[item_id] = {
                "name": f"{rng.choice(ADJECTIVES)} {rng.choice(NOUNS)}",
                "warehouse": rng.choice(WAREHOUSES),
                "status": rng.choice(["active", "active", "active", "reorder"]),
                "quantity": rng.choice([0, 0, rng.randrange(1, 30), rng.randrange(1, 60)]),
                "price": round(rng.uniform(0.5, 90), 2),
            }
        expected = _copy(db)
        steps: list[tuple[str, list[Write]]] = []
        for _ in range(self.config.n_operations):
            step = None
            for _try in range(12):
                step = rng.choice(OPERATIONS)(expected, rng)
                if step is not None:
                    break
            if step is None:
                break
            for tool_name, args in step[1]:
                _apply(expected, tool_name, args)
            steps.append(step)
        return _World(db, steps, expected)

    def _task(self) -> str:
        lines = "\n".join(f"{n}. {text}" for n, (text, _) in enumerate(self.world.steps, start=1))
        return f"Please do the following, in this order:\n{lines}"

    def _new_state(self) -> _State:
        return _State(_copy(self.world.initial))

    def _reject(self) -> str | None:
        if len(self.world.steps) < self.config.n_operations:
            return "could not chain enough operations with targets"
        if self.world.expected == self.world.initial:
            return "the request changes nothing"
        return None

    # -- tools ----------------------------------------------------------------------------------

    @tool
    def search_items(self, warehouse: Warehouse, status: Status | None = None) -> list[dict[str, Any]]:
        """Items of a warehouse (optionally with one status): id, name, status, quantity, price."""
        db = self.state.db
        return [
            {"item_id": i, **{k: v for k, v in db[i].items() if k != "warehouse"}} for i in _in(db, warehouse, status)
        ]

    def _known(self, item_id: str) -> None:
        if item_id not in self.state.db:
            raise ToolError(f"no item with id {item_id!r}")

    def _write(self, tool_name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Apply one write to the episode's inventory; the item as it is now."""
        db, item_id = self.state.db, arguments["item_id"]
        self._known(item_id)
        _apply(db, tool_name, arguments)
        return {"ok": True, "item": {"item_id": item_id, **db[item_id]}}

    @tool
    def update_status(self, item_id: str, status: Status) -> dict[str, Any]:
        """Set an item's status.

        Args:
            item_id: item id, e.g. IT-301
        """
        return self._write("update_status", {"item_id": item_id, "status": status})

    @tool
    def move_item(self, item_id: str, warehouse: Warehouse) -> dict[str, Any]:
        """Move an item to another warehouse.

        Args:
            item_id: item id, e.g. IT-301
        """
        return self._write("move_item", {"item_id": item_id, "warehouse": warehouse})

    @tool
    def adjust_quantity(self, item_id: str, delta: int) -> dict[str, Any]:
        """Add (or, if negative, remove) units of an item.

        Args:
            item_id: item id, e.g. IT-301
        """
        return self._write("adjust_quantity", {"item_id": item_id, "delta": delta})

    @tool
    def set_price(self, item_id: str, price: float) -> dict[str, Any]:
        """Set an item's unit price in USD.

        Args:
            item_id: item id, e.g. IT-301
        """
        self._known(item_id)
        if price < 0:
            raise ToolError("price must be non-negative")
        return self._write("set_price", {"item_id": item_id, "price": price})

    # -- scoring and solutions ------------------------------------------------------------------

    def _score(self, final_answer: str) -> tuple[float, dict[str, Any]]:
        initial, expected, db = self.world.initial, self.world.expected, self.state.db
        required = {i for i in expected if expected[i] != initial[i]}
        changed = {i for i in db if db[i] != initial[i]}
        touched = required | changed
        right = sum(db[i] == expected[i] for i in touched)
        fraction = right / len(touched)
        success = right == len(touched)
        reward = 0.8 * fraction + 0.2 * success
        return round(reward, 6), {
            "items_right": right,
            "items_touched": len(touched),
            "required": len(required),
            "success": success,
        }

    def _turns(self, steps: list[tuple[str, list[Write]]]) -> list[str]:
        turns = []
        for text, writes in steps:
            warehouse = next(w for w in WAREHOUSES if f"the {w} warehouse" in text)
            turns.append(call("search_items", warehouse=warehouse))
            turns.append(calls(*writes))
        return turns + ["All requested steps are done."]

    def _oracle(self) -> list[str]:
        return self._turns(self.world.steps)

    def _wrong(self) -> list[list[str]]:
        initial, steps, expected = self.world.initial, self.world.steps, self.world.expected
        wrong = [self._turns(steps[:-1]), self._turns(steps[1:])]
        first_text, first_writes = steps[0]
        tool_name, args = first_writes[0]
        field_name, value = {
            "update_status": ("status", args.get("status")),
            "move_item": ("warehouse", args.get("warehouse")),
            "adjust_quantity": ("quantity", None),
            "set_price": ("price", args.get("price")),
        }[tool_name]
        targets = {a["item_id"] for _, a in first_writes}
        extra = next(
            (
                i
                for i in sorted(initial)
                if i not in targets and expected[i][field_name] != value and expected[i] == initial[i]
            ),
            None,
        )
        if extra is not None:
            wrong.append(
                self._turns([(first_text, first_writes + [(tool_name, {**args, "item_id": extra})])] + steps[1:])
            )
        return wrong

    def _hint(self) -> str:
        return (
            "Work step by step: before each step, search the warehouse it names (the earlier steps "
            "change which items qualify), then apply the change to every qualifying item."
        )
