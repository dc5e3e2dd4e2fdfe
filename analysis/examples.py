"""A tiny τ²-style Results file the project writes itself, so a fresh clone has a run to ingest.

Three airline-like tasks, four simulations: two successes, one failure with a missed gold action
(the agent cancelled without reading the reservation first), and one failure stopped by the user.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

EXAMPLE_FILE = "example_agent__llm_agent__4sims_1trial.json"
POLICY = (
    "# Example airline policy\n"
    "- Look up the user and the reservation before changing anything.\n"
    "- A reservation can be cancelled only within 24 hours of booking or with travel insurance.\n"
    "- Obtain explicit confirmation (yes) before any write action."
)


def _action(task: str, index: int, name: str, **arguments: Any) -> dict[str, Any]:
    return {
        "action_id": f"{task}_{index}",
        "requestor": "assistant",
        "name": name,
        "arguments": arguments,
        "info": None,
        "compare_args": None,
    }


def _task(
    task_id: str, reason: str, known: str, actions: list[dict[str, Any]], communicate: list[str]
) -> dict[str, Any]:
    return {
        "id": task_id,
        "description": {"purpose": reason, "relevant_policies": None, "notes": None},
        "user_scenario": {
            "persona": None,
            "instructions": {
                "domain": "airline",
                "reason_for_call": reason,
                "known_info": known,
                "unknown_info": None,
                "task_instructions": "Confirm when asked.",
            },
        },
        "initial_state": None,
        "evaluation_criteria": {
            "actions": actions,
            "env_assertions": None,
            "communicate_info": communicate,
            "nl_assertions": None,
            "reward_basis": ["DB", "COMMUNICATE"],
        },
    }


def _call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "name": name, "arguments": arguments, "requestor": "assistant"}


def _turns(*turns: tuple[str, Any]) -> list[dict[str, Any]]:
    """Messages from (role, content-or-calls) pairs; a tool turn is ("tool", (call_id, content))."""
    messages = []
    for index, (role, payload) in enumerate(turns):
        if role == "tool":
            call_id, content = payload
            messages.append(
                {
                    "id": call_id,
                    "role": "tool",
                    "content": json.dumps(content),
                    "requestor": "assistant",
                    "error": "error" in content,
                    "turn_idx": index,
                }
            )
        elif isinstance(payload, list):
            messages.append({"role": role, "content": None, "tool_calls": payload, "turn_idx": index})
        else:
            messages.append({"role": role, "content": payload, "tool_calls": None, "turn_idx": index})
    return messages


def _simulation(
    sim_id: str,
    task: dict[str, Any],
    messages: list[dict[str, Any]],
    matched: list[bool],
    communicated: list[bool],
    stop: str,
) -> dict[str, Any]:
    gold = task["evaluation_criteria"]["actions"]
    reward = float(all(matched) and all(communicated))
    return {
        "id": sim_id,
        "task_id": task["id"],
        "trial": 0,
        "seed": 7,
        "duration": 30.0,
        "termination_reason": stop,
        "messages": messages,
        "reward_info": {
            "reward": reward,
            "db_check": {"db_match": all(matched), "db_reward": float(all(matched))},
            "env_assertions": None,
            "action_checks": [
                {"action": a, "action_match": m, "action_reward": float(m)} for a, m in zip(gold, matched)
            ],
            "nl_assertions": None,
            "communicate_checks": [
                {"info": i, "met": c, "justification": ""}
                for i, c in zip(task["evaluation_criteria"]["communicate_info"], communicated)
            ],
            "reward_basis": ["DB", "COMMUNICATE"],
            "reward_breakdown": {"DB": float(all(matched)), "COMMUNICATE": float(all(communicated))},
        },
    }


def example_results() -> dict[str, Any]:
    """The example Results document (deterministic)."""
    cancel = _task(
        "0",
        "Cancel reservation ABC123 booked an hour ago.",
        "You are Ana Diaz, user id ana_diaz_1.",
        [
            _action("0", 0, "get_reservation_details", reservation_id="ABC123"),
            _action("0", 1, "cancel_reservation", reservation_id="ABC123"),
        ],
        ["250"],
    )
    baggage = _task(
        "1",
        "Add one checked bag to reservation XYZ789.",
        "You are Bo Lee, user id bo_lee_2.",
        [
            _action("1", 0, "get_reservation_details", reservation_id="XYZ789"),
            _action("1", 1, "update_reservation_baggages", reservation_id="XYZ789", total_baggages=1),
        ],
        [],
    )
    status = _task("2", "Ask whether flight HAT001 is on time.", "You are Cy Moe, user id cy_moe_3.", [], ["on time"])
    good_cancel = _turns(
        ("assistant", "Hi! How can I help you today?"),
        ("user", "Please cancel reservation ABC123, I booked it an hour ago."),
        ("assistant", [_call("c1", "get_reservation_details", reservation_id="ABC123")]),
        ("tool", ("c1", {"reservation_id": "ABC123", "created_at": "2024-05-15T10:00:00", "total": 250})),
        ("assistant", "It was booked within 24 hours, so you get a full refund of 250. Shall I cancel it (yes/no)?"),
        ("user", "yes"),
        ("assistant", [_call("c2", "cancel_reservation", reservation_id="ABC123")]),
        ("tool", ("c2", {"reservation_id": "ABC123", "status": "cancelled"})),
        ("assistant", "Done: ABC123 is cancelled and 250 will be refunded."),
        ("user", "Thanks! ###STOP###"),
    )
    hasty_cancel = _turns(
        ("assistant", "Hi! How can I help you today?"),
        ("user", "Please cancel reservation ABC123, I booked it an hour ago."),
        ("assistant", [_call("d1", "cancel_reservation", reservation_id="ABC123")]),
        ("tool", ("d1", {"reservation_id": "ABC123", "status": "cancelled"})),
        ("assistant", "Your reservation is cancelled."),
        ("user", "Thanks. ###STOP###"),
    )
    bag = _turns(
        ("assistant", "Hi! How can I help you today?"),
        ("user", "I want one checked bag on XYZ789."),
        ("assistant", [_call("e1", "get_reservation_details", reservation_id="XYZ789")]),
        ("tool", ("e1", {"reservation_id": "XYZ789", "total_baggages": 0})),
        ("assistant", "One checked bag costs 50. Confirm (yes/no)?"),
        ("user", "yes"),
        ("assistant", [_call("e2", "update_reservation_baggages", reservation_id="XYZ789", total_baggages=1)]),
        ("tool", ("e2", {"reservation_id": "XYZ789", "total_baggages": 1})),
        ("assistant", "Added one checked bag."),
        ("user", "Great. ###STOP###"),
    )
    flight = _turns(
        ("assistant", "Hi! How can I help you today?"),
        ("user", "Is flight HAT001 on time today?"),
        ("assistant", [_call("f1", "get_flight_status", flight_number="HAT001", date="2024-05-15")]),
        ("tool", ("f1", {"error": "Error: date format not recognised"})),
        ("assistant", "Sorry, I cannot find that flight."),
        ("user", "Never mind. ###STOP###"),
    )
    return {
        "timestamp": "2025-01-01T00:00:00",
        "info": {
            "num_trials": 1,
            "max_steps": 50,
            "agent_info": {"implementation": "llm_agent", "llm": "example-agent", "llm_args": {}},
            "user_info": {"implementation": "user_simulator", "llm": "example-user", "llm_args": {}},
            "environment_info": {"domain_name": "airline", "policy": POLICY, "tool_defs": None},
        },
        "tasks": [cancel, baggage, status],
        "simulations": [
            _simulation("sim-0", cancel, good_cancel, [True, True], [True], "user_stop"),
            _simulation("sim-1", cancel, hasty_cancel, [False, True], [False], "user_stop"),
            _simulation("sim-2", baggage, bag, [True, True], [], "user_stop"),
            _simulation("sim-3", status, flight, [], [False], "user_stop"),
        ],
    }


def write_example_run(directory: str | Path) -> Path:
    """Write the example Results file into `directory` (created if needed); returns its path."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / EXAMPLE_FILE
    path.write_text(json.dumps(example_results(), indent=1), encoding="utf-8")
    return path
