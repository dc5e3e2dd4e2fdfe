"""Structured data reasoning: answer a question that needs filters, a join and an aggregate
across several tool results.

The agent finds the customers of a city (optionally of one tier), lists each one's orders, keeps
the orders that satisfy every constraint (category, status, month range) and reports a count,
sum or maximum. Reward: 0.7 for the exact answer + 0.3 × the share of qualifying customers whose
orders were actually looked up. Knobs: customers, orders per customer, constraints (1-4). The
prompt is the same at every setting: any constraint, the tier filter included, can be drawn at
any number of constraints.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Literal, get_args

from tracegym.synth_envs.base import Environment, ToolError
from tracegym.synth_envs.common import call, calls, last_number, person_name
from tracegym.synth_envs.registry import register
from tracegym.synth_envs.tools import tool

City = Literal["Lisbon", "Osaka", "Denver", "Nairobi", "Quito", "Oslo"]
Tier = Literal["bronze", "silver", "gold"]
CITIES, TIERS = get_args(City), get_args(Tier)
CATEGORIES = ["books", "garden", "toys", "audio", "kitchen"]
STATUSES = ["delivered", "returned", "pending"]
AGGREGATES = ("count", "sum", "max")


@dataclass
class Config:
    """Difficulty knobs: customers in the store, orders per customer, constraints (1-4)."""

    n_customers: int = 24
    orders_per_customer: int = 4
    n_constraints: int = 2


@dataclass(frozen=True)
class _World:
    customers: list[dict[str, Any]]
    orders: dict[str, list[dict[str, Any]]]
    city: str
    constraints: dict[str, Any]
    aggregate: str
    qualifying: list[str]  # customers of the city (and tier) whose orders must be read
    answer: float
    looser_answer: float  # the answer without the last constraint (a plausible wrong answer)


def _keep(order: dict[str, Any], constraints: dict[str, Any]) -> bool:
    if "category" in constraints and order["category"] != constraints["category"]:
        return False
    if "status" in constraints and order["status"] != constraints["status"]:
        return False
    if "months" in constraints:
        low, high = constraints["months"]
        if not low <= order["month"] <= high:
            return False
    return True


def _aggregate(orders: list[dict[str, Any]], kind: str) -> float:
    if kind == "count":
        return float(len(orders))
    amounts = [o["amount"] for o in orders]
    if kind == "sum":
        return round(sum(amounts), 2)
    return max(amounts) if amounts else 0.0


def _format(value: float, kind: str) -> str:
    return str(int(value)) if kind == "count" else f"{value:.2f}"


@register
class StructuredDataReasoning(Environment):
    name = "structured_data_reasoning"
    capability = "structured_data_reasoning"
    description = (
        "Reasoning over structured records returned by tools: filtering by several constraints, "
        "joining records across tool results (customers to orders), and computing aggregates such "
        "as counts, sums and maxima correctly from the data rather than guessing."
    )
    Config = Config
    ladder = (
        {"n_customers": 8, "n_constraints": 1},
        {"n_customers": 16, "n_constraints": 1},
        {"n_customers": 24, "n_constraints": 2},
        {"n_customers": 36, "n_constraints": 3},
        {"n_customers": 48, "n_constraints": 4},
    )
    max_turns = 8
    instructions = (
        "You are a data analyst for an online store. Answer the user's question exactly, "
        "using only data returned by the tools. End with the final number on its own."
    )
    world: _World

    def _generate(self, seed: int) -> _World:
        cfg, rng = self.config, random.Random(seed)
        draw = rng.random  # int(draw() * n) is a uniform index, several times cheaper than rng.choice
        customers, orders = [], {}
        for index in range(cfg.n_customers):
            cid = f"C-{1000 + index * 7 + int(draw() * 7)}"
            customers.append(
                {
                    "customer_id": cid,
                    "name": person_name(rng),
                    "tier": TIERS[int(draw() * 3)],
                    "city": CITIES[int(draw() * 6)],
                }
            )
            orders[cid] = [
                {
                    "order_id": f"O-{10_000 + int(draw() * 89_999)}",
                    "category": CATEGORIES[int(draw() * 5)],
                    "status": STATUSES[int(draw() * 3)],
                    "amount": round(5 + draw() * 395, 2),
                    "month": f"2024-{1 + int(draw() * 12):02d}",
                }
                for _ in range(1 + int(draw() * (2 * cfg.orders_per_customer - 1)))
            ]
        anchor = rng.choice(customers)
        city = anchor["city"]
        anchor_order = rng.choice(orders[anchor["customer_id"]])
        kinds = rng.sample(["tier", "category", "status", "months"], min(max(cfg.n_constraints, 1), 4))
        constraints: dict[str, Any] = {}
        for kind in kinds:
            if kind == "tier":
                constraints["tier"] = anchor["tier"]
            elif kind == "category":
                constraints["category"] = anchor_order["category"]
            elif kind == "status":
                constraints["status"] = anchor_order["status"]
            else:
                start = rng.randrange(1, 10)
                constraints["months"] = (f"2024-{start:02d}", f"2024-{start + rng.randrange(2, 4):02d}")
        aggregate = rng.choice(AGGREGATES)
        qualifying = [
            c["customer_id"] for c in customers if c["city"] == city and c["tier"] == constraints.get("tier", c["tier"])
        ]
        kept = [o for cid in qualifying for o in orders[cid] if _keep(o, constraints)]
        last = kinds[-1]
        looser = {k: v for k, v in constraints.items() if k != last}
        pool = [c["customer_id"] for c in customers if c["city"] == city and c["tier"] == looser.get("tier", c["tier"])]
        looser_answer = _aggregate([o for cid in pool for o in orders[cid] if _keep(o, looser)], aggregate)
        return _World(
            customers, orders, city, constraints, aggregate, qualifying, _aggregate(kept, aggregate), looser_answer
        )

    def _task(self) -> str:
        w = self.world
        c = w.constraints
        who = f"{c['tier']}-tier customers" if "tier" in c else "customers"
        parts = []
        if "category" in c:
            parts.append(f"in the {c['category']} category")
        if "status" in c:
            parts.append(f"with status '{c['status']}'")
        if "months" in c:
            parts.append(f"placed from {c['months'][0]} to {c['months'][1]} inclusive")
        what = {
            "count": "How many orders",
            "sum": "What is the total amount in USD of the orders",
            "max": "What is the largest single order amount in USD among the orders",
        }[w.aggregate]
        return f"{what} of {who} in {w.city} {' and '.join(parts)}?".replace("  ", " ")

    def _reject(self) -> str | None:
        w = self.world
        if not w.qualifying:
            return "no customer qualifies"
        if w.answer == 0:
            return "the answer is zero (guessable)"
        if w.answer == w.looser_answer:
            return "the last constraint does not change the answer"
        return None

    # -- tools ----------------------------------------------------------------------------------

    @tool
    def find_customers(self, city: City, tier: Tier | None = None) -> list[dict[str, Any]]:
        """Customers living in a city, optionally of one loyalty tier."""
        return [
            {"customer_id": c["customer_id"], "name": c["name"], "tier": c["tier"]}
            for c in self.world.customers
            if c["city"] == city and (tier is None or c["tier"] == tier)
        ]

    @tool
    def list_orders(self, customer_id: str) -> list[dict[str, Any]]:
        """All orders of one customer: order_id, category, status, amount (USD), month (YYYY-MM)."""
        orders = self.world.orders.get(customer_id)
        if orders is None:
            raise ToolError(f"no customer with id {customer_id!r}")
        return orders

    # -- scoring and solutions ------------------------------------------------------------------

    def _score(self, final_answer: str) -> tuple[float, dict[str, Any]]:
        w = self.world
        value = last_number(final_answer)
        correct = value is not None and abs(value - w.answer) <= 0.005
        listed = {c.arguments.get("customer_id") for c in self.calls if c.name == "list_orders"}
        coverage = sum(cid in listed for cid in w.qualifying) / len(w.qualifying)
        reward = 0.7 * correct + 0.3 * coverage
        return round(reward, 6), {"answer_correct": correct, "coverage": coverage, "expected": w.answer}

    def _oracle(self) -> list[str]:
        w = self.world
        find = {"city": w.city, **({"tier": w.constraints["tier"]} if "tier" in w.constraints else {})}
        customers = [c["customer_id"] for c in w.customers if c["city"] == w.city]
        if "tier" in w.constraints:
            customers = w.qualifying
        return [
            call("find_customers", **find),
            calls(*[("list_orders", {"customer_id": cid}) for cid in customers]),
            f"The answer is {_format(w.answer, w.aggregate)}",
        ]

    def _wrong(self) -> list[list[str]]:
        w = self.world
        oracle = self._oracle()
        off = w.answer + (1 if w.aggregate == "count" else 10.0)
        wrong = [
            oracle[:-1] + [f"The answer is {_format(w.looser_answer, w.aggregate)}"],
            oracle[:-1] + [f"The answer is {_format(off, w.aggregate)}"],
            [oracle[0], f"The answer is {_format(w.answer, w.aggregate)}"],
        ]
        return wrong

    def _hint(self) -> str:
        filters = ", ".join(f"{k}={v}" for k, v in self.world.constraints.items())
        return (
            f"Call find_customers for {self.world.city}, then list_orders for every customer returned; "
            f"keep only orders matching {filters}; then compute the {self.world.aggregate}."
        )
