"""Gold actions τ²-bench itself corrected between its task sets v0.2.0 and v1.0 (airline, retail).

A run carries its own task set; when a gold action it was graded on is one the benchmark later
dropped or changed (`STALE`), a failure to match it is the benchmark's, and an agent that did what
the corrected set expects (`ADDED`) was right. Keyed by the action's content, not the task id alone,
so a run made with the corrected set is not blamed on the old errors. Nothing is looked up beside
the inputs: the table is part of the package.

Each action is named `<tool>:<first 12 hex digits of sha1 of canonical([name, arguments])>`;
`corrections_between(old_tasks, new_tasks)` computes the table from two τ²-bench tasks.json lists
(v0.2.0 and v1.0 of a domain); a test recomputes the table from them where the data is present.
"""

from __future__ import annotations

import hashlib
from typing import Any

from tracegym.analysis.detectors import canonical

# domain -> task id -> {"stale": actions v1.0 dropped or changed, "added": actions v1.0 put instead}
CORRECTIONS: dict[str, dict[str, dict[str, tuple[str, ...]]]] = {
    "airline": {
        "2": {"stale": ("send_certificate:281f394c1b3b",), "added": ()},
        "7": {
            "stale": ("update_reservation_flights:85fbbfad551a",),
            "added": ("update_reservation_flights:1913b5b5036f",),
        },
        "9": {"stale": ("cancel_reservation:2c7bffacb0e5",), "added": ()},
        "23": {
            "stale": ("book_reservation:d7c0408152df", "book_reservation:224e0722439a"),
            "added": ("book_reservation:197fbe4bad04", "book_reservation:c58c4a7a557e"),
        },
        "27": {"stale": ("send_certificate:8db5189168ba",), "added": ()},
        "29": {
            "stale": ("update_reservation_flights:119bf5bc110f", "update_reservation_baggages:3dfe59459311"),
            "added": ("cancel_reservation:0294d18d3c99", "book_reservation:faeacfe2804d"),
        },
        "33": {
            "stale": ("update_reservation_baggages:6fae13cc3883",),
            "added": ("update_reservation_baggages:483cf28a12e6",),
        },
        "35": {"stale": ("book_reservation:e0209c9783f3",), "added": ("book_reservation:df15c42f9888",)},
        "37": {"stale": ("cancel_reservation:2c7bffacb0e5",), "added": ()},
        "38": {"stale": ("send_certificate:281f394c1b3b",), "added": ()},
        "44": {"stale": ("cancel_reservation:dbdbae0fdb05",), "added": ()},
    },
    "retail": {
        "12": {"stale": ("return_delivered_order_items:c4c86eacf957",), "added": ()},
        "13": {"stale": ("return_delivered_order_items:c4c86eacf957",), "added": ()},
        "18": {
            "stale": ("exchange_delivered_order_items:7a95ccb31043",),
            "added": ("exchange_delivered_order_items:62df119d8813",),
        },
        "21": {
            "stale": (
                "get_product_details:6603ae568736",
                "get_product_details:20a2e78f52e2",
                "get_product_details:6603ae568736",
            ),
            "added": (
                "get_item_details:b33c73422c23",
                "get_item_details:93fde5b5b1bf",
                "get_item_details:b33c73422c23",
            ),
        },
        "59": {"stale": ("calculate:1c696cdb44a9",), "added": ()},
        "91": {
            "stale": ("exchange_delivered_order_items:662b765ef327",),
            "added": ("exchange_delivered_order_items:71a6e74cac49",),
        },
        "107": {
            "stale": ("exchange_delivered_order_items:fb77e5c4093b",),
            "added": ("exchange_delivered_order_items:aed551f185e5",),
        },
    },
}
SOURCE = "τ²-bench task sets v0.2.0 -> v1.0"


def fingerprint(name: str, arguments: dict[str, Any]) -> str:
    """`<tool>:<12 hex>` of a gold action or a call (arguments compared as canonical JSON)."""
    return f"{name}:{hashlib.sha1(canonical([name, arguments or {}]).encode()).hexdigest()[:12]}"


def corrections_between(old_tasks: list[dict], new_tasks: list[dict]) -> dict[str, dict[str, tuple[str, ...]]]:
    """{task id: {"stale", "added"}} for the tasks whose gold actions differ between two task sets."""

    def actions(task: dict | None) -> list[str]:
        return [
            fingerprint(a["name"], a.get("arguments") or {})
            for a in ((task or {}).get("evaluation_criteria") or {}).get("actions") or []
        ]

    new = {str(t["id"]): t for t in new_tasks}
    table = {}
    for task in old_tasks:
        before, after = actions(task), actions(new.get(str(task["id"])))
        stale, added = tuple(a for a in before if a not in after), tuple(a for a in after if a not in before)
        if stale or added:
            table[str(task["id"])] = {"stale": stale, "added": added}
    return table


def stale(domain: str, task_id: str, action: dict[str, Any]) -> bool:
    """Whether a gold action of the run is one the benchmark later dropped or changed."""
    entry = CORRECTIONS.get(domain, {}).get(str(task_id))
    return bool(entry) and fingerprint(action.get("name", ""), action.get("arguments") or {}) in entry["stale"]


def replaced(domain: str, task_id: str, name: str) -> bool:
    """Whether the corrected task set puts an action of tool `name` in place of the stale ones."""
    entry = CORRECTIONS.get(domain, {}).get(str(task_id))
    return bool(entry) and any(added.split(":")[0] == name for added in entry["added"])


def corrected_expects(domain: str, task_id: str, name: str, arguments: dict[str, Any]) -> bool:
    """Whether a call is an action the corrected task set expects instead."""
    entry = CORRECTIONS.get(domain, {}).get(str(task_id))
    return bool(entry) and fingerprint(name, arguments) in entry["added"]
