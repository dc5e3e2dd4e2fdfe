"""Precondition verification: act only when the state and the policy permit, and check first.

A customer asks to cancel an order, change its shipping address or refund it. Policy rules:
R1 only pending orders can be cancelled or re-addressed; R2 only delivered orders can be refunded;
R3 address changes and refunds need a verified account; R4 refunds only within 30 days of
delivery. Some requests break exactly one rule (drawn uniformly among the rules the knobs allow,
then a request it governs) and must be refused naming it. Reward needs the right decision: for a
permitted request, the right write (and no other, and no refusal after it); for a forbidden one,
the answer "REFUSED: R<k>" naming the broken rule, with no write. Anything else earns 0. The right
decision earns 0.75 if every record it depends on was checked before it (before the write; for a
refusal, the record that shows the broken rule) + 0.25 for the verdict ("DONE" after the write;
the refusal is its own verdict). So a decision made unchecked earns 0.25: neither a blanket
refusal, nor "read, then refuse", nor "write, then refuse", nor "write at once, then DONE" pays
more than a quarter of the share of episodes it happens to get right. Knobs: orders of the
customer, share of forbidden requests, conditions per request (1-3). The prompt states only the
rules and offers only the tools of the requests the knobs allow (at 1 condition: R1, get_order,
cancel_order).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Any

from tracegym.synth_envs.base import Environment, ToolError
from tracegym.synth_envs.common import call, calls, person_name
from tracegym.synth_envs.registry import register
from tracegym.synth_envs.tools import tool

# request -> (write tool, rules that govern it)
REQUESTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "cancel": ("cancel_order", ("R1",)),
    "change_address": ("update_address", ("R1", "R3")),
    "refund": ("refund_order", ("R2", "R3", "R4")),
}
RULE_RECORD = {"R1": "order", "R2": "order", "R3": "user", "R4": "order"}  # the record each rule reads
POLICY = {
    "R1": "only orders with status 'pending' can be cancelled or have their address changed.",
    "R2": "only orders with status 'delivered' can be refunded.",
    "R3": "address changes and refunds require a verified account.",
    "R4": "refunds are allowed only within 30 days of delivery.",
}
STREETS = ("Elm St", "Harbour Rd", "Mill Lane", "Cedar Ave", "King St", "Bay Rd")
WRITES = ("cancel_order", "update_address", "refund_order")


@dataclass
class Config:
    """Difficulty knobs: orders on the account, share of forbidden requests, max conditions (1-3)."""

    n_orders: int = 4
    forbidden_share: float = 0.5
    max_conditions: int = 3


def _requests(max_conditions: int) -> list[str]:
    """The requests governed by at most `max_conditions` rules (at least the one-rule request)."""
    return [r for r, (_, rules) in REQUESTS.items() if len(rules) <= max(max_conditions, 1)]


def _rules(max_conditions: int) -> list[str]:
    """The rules that govern some request at these knobs, in policy order."""
    return sorted({rule for request in _requests(max_conditions) for rule in REQUESTS[request][1]})


@dataclass(frozen=True)
class _World:
    user: dict[str, Any]
    orders: dict[str, dict[str, Any]]
    request: str
    order_id: str
    address: str
    broken: str | None  # the one rule the request breaks (None: it is permitted)


@dataclass
class _State:
    status: dict[str, str]  # order id -> current status


@register
class PreconditionVerification(Environment):
    name = "precondition_verification"
    capability = "precondition_verification"
    description = (
        "Verifying that the preconditions of an action hold, by looking up the current state of "
        "records and checking policy rules, before taking a state-changing action; refusing "
        "requests the policy forbids instead of executing them."
    )
    Config = Config
    ladder = (
        {"max_conditions": 1, "n_orders": 1},
        {"max_conditions": 2, "n_orders": 2},
        {"max_conditions": 3, "n_orders": 4},
        {"max_conditions": 3, "n_orders": 8},
    )
    max_turns = 8
    world: _World
    state: _State

    def _generate(self, seed: int) -> _World:
        cfg, rng = self.config, random.Random(seed)
        requests = _requests(cfg.max_conditions)
        broken = rng.choice(_rules(cfg.max_conditions)) if rng.random() < cfg.forbidden_share else None
        request = rng.choice([r for r in requests if broken is None or broken in REQUESTS[r][1]])
        rules = REQUESTS[request][1]
        user = {"user_id": f"U-{rng.randrange(1000, 9999)}", "name": person_name(rng), "verified": broken != "R3"}
        orders: dict[str, dict[str, Any]] = {}
        for _ in range(max(cfg.n_orders, 1)):
            status = rng.choice(["pending", "shipped", "delivered", "cancelled"])
            orders[f"#{rng.randrange(100_000, 999_999)}"] = {
                "status": status,
                "total": round(rng.uniform(10, 500), 2),
                "address": f"{rng.randrange(1, 99)} {rng.choice(STREETS)}",
                "days_since_delivery": rng.randrange(1, 90) if status == "delivered" else None,
            }
        order_id = rng.choice(sorted(orders))
        target = orders[order_id]
        # make the target satisfy every rule except `broken`
        if "R1" in rules:
            target["status"] = "shipped" if broken == "R1" else "pending"
            target["days_since_delivery"] = None
        if "R2" in rules:
            target["status"] = rng.choice(["shipped", "pending"]) if broken == "R2" else "delivered"
            target["days_since_delivery"] = None if broken == "R2" else rng.randrange(1, 31)
        if "R4" in rules and broken == "R4":
            target["days_since_delivery"] = rng.randrange(31, 120)
        address = f"{rng.randrange(1, 99)} {rng.choice(STREETS)}"
        return _World(user, orders, request, order_id, address, broken)

    @property
    def instructions(self) -> str:
        """The policy, with only the rules that govern some request at these knobs."""
        policy = "\n".join(f"{rule}: {POLICY[rule]}" for rule in _rules(self.config.max_conditions))
        return (
            "You are a customer-service agent. Follow this policy strictly:\n" + policy + "\n"
            "Check the records a rule depends on before any change. When finished, answer 'DONE' if "
            "you carried out the request, or 'REFUSED: <rule id>' naming the rule that forbids it."
        )

    def _tool_names(self) -> tuple[str, ...]:
        """get_order, get_user where R3 applies, and the write tool of each possible request."""
        cfg = self.config
        reads = ("get_order", "get_user") if "R3" in _rules(cfg.max_conditions) else ("get_order",)
        return reads + tuple(REQUESTS[request][0] for request in _requests(cfg.max_conditions))

    def _task(self) -> str:
        w = self.world
        ask = {
            "cancel": f"Please cancel my order {w.order_id}.",
            "change_address": f"Please ship my order {w.order_id} to {w.address} instead.",
            "refund": f"I want a refund for order {w.order_id}.",
        }[w.request]
        return f"Hi, I'm {w.user['name']} (user id {w.user['user_id']}). {ask}"

    def _new_state(self) -> _State:
        return _State({oid: o["status"] for oid, o in self.world.orders.items()})

    # -- tools ----------------------------------------------------------------------------------

    def _known(self, order_id: str) -> str:
        if order_id not in self.world.orders:
            raise ToolError(f"no order with id {order_id!r}")
        return order_id

    @tool
    def get_order(self, order_id: str) -> dict[str, Any]:
        """An order's status, total, address and days since delivery.

        Args:
            order_id: order id, e.g. #123456
        """
        order = self.world.orders[self._known(order_id)]
        return {"order_id": order_id, **order, "status": self.state.status[order_id]}

    @tool
    def get_user(self, user_id: str) -> dict[str, Any]:
        """The customer's account, including whether it is verified."""
        if user_id != self.world.user["user_id"]:
            raise ToolError(f"no user with id {user_id!r}")
        return {**self.world.user, "orders": sorted(self.world.orders)}

    @tool
    def cancel_order(self, order_id: str) -> dict[str, Any]:
        """Cancel an order.

        Args:
            order_id: order id, e.g. #123456
        """
        self.state.status[self._known(order_id)] = "cancelled"
        return {"ok": True}

    @tool
    def update_address(self, order_id: str, address: str) -> dict[str, Any]:
        """Change an order's shipping address.

        Args:
            order_id: order id, e.g. #123456
        """
        self._known(order_id)  # the new address is scored from the call itself (self.calls)
        return {"ok": True}

    @tool
    def refund_order(self, order_id: str) -> dict[str, Any]:
        """Refund an order in full.

        Args:
            order_id: order id, e.g. #123456
        """
        self.state.status[self._known(order_id)] = "refunded"
        return {"ok": True}

    # -- scoring and solutions ------------------------------------------------------------------

    def _needed_reads(self) -> set[str]:
        w = self.world
        rules = (w.broken,) if w.broken else REQUESTS[w.request][1]
        return {RULE_RECORD[rule] for rule in rules}

    def _score(self, final_answer: str) -> tuple[float, dict[str, Any]]:
        w = self.world
        write_tool = REQUESTS[w.request][0]
        writes = [c for c in self.calls if c.name in WRITES]
        first_write = next((n for n, c in enumerate(self.calls) if c.name in WRITES), len(self.calls))
        read = {
            "order"
            if c.name == "get_order" and c.arguments.get("order_id") == w.order_id
            else "user"
            if c.name == "get_user"
            else ""
            for c in self.calls[:first_write]
        }
        checked = self._needed_reads() <= read
        answer = final_answer.strip().upper()
        refused = re.match(r"REFUSED\W*(R\d)?", answer)
        if w.broken is None:  # the right write, and no refusal after it (that would contradict it)
            decided = (
                len(writes) == 1
                and writes[0].name == write_tool
                and writes[0].arguments.get("order_id") == w.order_id
                and (write_tool != "update_address" or writes[0].arguments.get("address", "").strip() == w.address)
                and not refused
            )
            verdict = float(answer.startswith("DONE"))
        else:  # the refusal naming the broken rule, and no write: a forbidden write is the very failure trained against
            decided = bool(refused) and refused.group(1) == w.broken and not writes
            verdict = float(decided)
        reward = decided * (0.75 * checked + 0.25 * verdict)  # an unchecked decision is a guess: 0.25 at most
        return round(reward, 6), {
            "forbidden": w.broken,
            "decided": decided,
            "checked_first": checked,
            "verdict": verdict,
        }

    def _reads(self) -> str:
        w = self.world
        pairs = [("get_order", {"order_id": w.order_id})]
        if "user" in self._needed_reads():
            pairs.append(("get_user", {"user_id": w.user["user_id"]}))
        return calls(*pairs)

    def _write(self) -> str:
        w = self.world
        write_tool = REQUESTS[w.request][0]
        return call(
            write_tool, order_id=w.order_id, **({"address": w.address} if write_tool == "update_address" else {})
        )

    def _oracle(self) -> list[str]:
        if self.world.broken:
            return [self._reads(), f"REFUSED: {self.world.broken}"]
        return [self._reads(), self._write(), "DONE"]

    def _wrong(self) -> list[list[str]]:
        if self.world.broken:
            other = next(r for r in ("R1", "R2", "R3", "R4") if r != self.world.broken)
            return [
                [self._reads(), self._write(), "DONE"],
                [self._write(), "DONE"],
                [self._reads(), f"REFUSED: {other}"],
            ]
        return [[self._write(), "DONE"], [self._reads(), "REFUSED: R1"], [self._reads(), "DONE"]]

    def _hint(self) -> str:
        rules = ", ".join(REQUESTS[self.world.request][1])
        return (
            f"This request is governed by {rules}: look up the order (and the account if R3 applies) before deciding."
        )
