"""Hand-built τ² trajectories for the detector tests (not a test module): a `Run` builder, an airline
policy holding the sentences the airline rules implement, a user profile and reservations."""

from __future__ import annotations

import json

from tracegym.analysis.detect_tau import detect
from tracegym.analysis.rules import airline
from tracegym.schema import LabelValue, Message, Source, ToolCall, Trajectory

P, L, N = LabelValue.PRESENT, LabelValue.LACKING, LabelValue.NA
# An airline policy holding the sentences the airline rules implement (each rule applies only under its own).
AIRLINE_POLICY = "\n".join(
    [
        "The current time is 2024-05-15 15:00:00 EST.",
        airline.DOMAIN.confirmation_policy,
        *(r.policy for r in airline.DOMAIN.action_rules + airline.DOMAIN.conversation_rules),
    ]
)
USER = {
    "user_id": "ana_1",
    "name": {"first_name": "Ana", "last_name": "Diaz"},
    "dob": "1990-01-01",
    "membership": "regular",
    "payment_methods": {
        "credit_card_1": {"source": "credit_card", "id": "credit_card_1", "brand": "visa", "last_four": "4321"},
        "gift_card_9": {"source": "gift_card", "id": "gift_card_9", "amount": 100},
    },
    "reservations": ["ABC123", "XYZ789"],
}


def booking(
    rid: str,
    created: str = "2024-05-15T10:00:00",
    cabin: str = "economy",
    insurance: str = "no",
    date: str = "2024-05-20",
    bags: int = 0,
) -> dict:
    return {
        "reservation_id": rid,
        "user_id": "ana_1",
        "origin": "JFK",
        "destination": "LAX",
        "flight_type": "one_way",
        "cabin": cabin,
        "flights": [{"flight_number": "HAT001", "origin": "JFK", "destination": "LAX", "date": date, "price": 200}],
        "passengers": [{"first_name": "Ana", "last_name": "Diaz", "dob": "1990-01-01"}],
        "created_at": created,
        "total_baggages": bags,
        "nonfree_baggages": 0,
        "insurance": insurance,
    }


class Run:
    """Builds a τ² trajectory message by message; tool calls get ids c0, c1, ..."""

    def __init__(self, domain: str = "airline", policy: str = AIRLINE_POLICY) -> None:
        self.messages: list[Message] = [Message(role="assistant", content="Hi! How can I help you today?")]
        self.domain, self.policy = domain, policy

    def user(self, text: str) -> Run:
        self.messages.append(Message(role="user", content=text))
        return self

    def say(self, text: str) -> Run:
        self.messages.append(Message(role="assistant", content=text))
        return self

    def call(self, name: str, result: object = "{}", error: bool = False, **arguments) -> Run:
        call_id = f"c{len(self.messages)}"
        self.messages.append(
            Message(role="assistant", tool_calls=[ToolCall(id=call_id, name=name, arguments=arguments)])
        )
        self.messages.append(
            Message(
                role="tool",
                tool_call_id=call_id,
                error=error,
                content=result if isinstance(result, str) else json.dumps(result),
            )
        )
        return self

    def trajectory(
        self,
        gold: list[dict],
        matched: list[bool],
        success: bool = False,
        task: str = "1",
        agent: str = "a",
        termination: str = "user_stop",
    ) -> Trajectory:
        gold = [{"action_id": f"g{i}", "requestor": "assistant", "compare_args": None, **g} for i, g in enumerate(gold)]
        checks = [{"action": g, "action_match": m, "action_reward": float(m)} for g, m in zip(gold, matched)]
        return Trajectory(
            id=f"{agent}/{task}/{len(self.messages)}",
            task_id=task,
            source=Source(benchmark=f"tau2-{self.domain}", format="tau2_results", file="x", agent=agent),
            messages=self.messages,
            reward=float(success),
            success=success,
            termination_reason=termination,
            diagnostics={"reward_info": {"reward": float(success), "action_checks": checks}, "gold_actions": gold},
            metadata={"domain": self.domain, "policy": self.policy},
        )


def values(trajectory: Trajectory) -> dict[str, LabelValue]:
    return {name: verdict.value for name, verdict in detect(trajectory).items()}


def quotes(trajectory: Trajectory, capability: str) -> str:
    return " | ".join(e.quote for e in detect(trajectory)[capability].evidence)


def cancel(rid: str) -> dict:
    return {"name": "cancel_reservation", "arguments": {"reservation_id": rid}}


def looked_up(rid: str, **record) -> Run:
    return (
        Run()
        .user("Hi, I'm ana_1 and I want to cancel ABC123, I booked it this morning.")
        .call("get_user_details", USER, user_id="ana_1")
        .call("get_reservation_details", booking(rid, **record), reservation_id=rid)
    )
