"""The desk's 11 tools, as typed methods of a mixin (`tracegym.synth_envs.tools`).

Reads: find_guest_id_by_email, get_guest_details, get_reservation_details, search_hotels,
get_hotel_details, calculate. Writes: book_reservation, cancel_reservation,
modify_reservation_dates, change_room_type. And transfer_to_human_agents. Tools read the episode's
database (`self.db` plus `self.changes`) and enforce only data integrity: ids exist,
dates are YYYY-MM-DD with check-out after check-in, a payment method is the guest's own, a gift
card covers its charge, a cancelled reservation is not changed again. Policy conditions (status,
rate plan, dates relative to today, confirmation) are the agent's to check; a tool does what it
is asked. Price differences of changes are charged to (or refunded from) the reservation's gift
card; credit cards are not tracked.
"""

from __future__ import annotations

import ast
import operator
import re
from datetime import date
from typing import Any, Literal

from tracegym.eval.target.database import TODAY, Changes, Database, iso
from tracegym.synth_envs.base import ToolError
from tracegym.synth_envs.tools import tool

City = Literal["Lisbon", "Kyoto", "Austin", "Cape Town"]
RoomType = Literal["standard", "deluxe", "suite"]
_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_MAX_NIGHTS = 60  # a data-integrity bound; the policy's limit (14) is the agent's to apply
_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
_LARGEST = 1e12  # the largest number `calculate` accepts or returns


def parse_date(text: str, name: str) -> date:
    """A YYYY-MM-DD date; ToolError naming the argument otherwise."""
    try:
        if not _ISO_DATE.fullmatch(text):
            raise ValueError
        return date.fromisoformat(text)
    except ValueError:
        raise ToolError(f"{name} must be a date written YYYY-MM-DD, got {text!r}") from None


def nights_between(check_in: str, check_out: str) -> int:
    """Nights of a stay; ToolError unless 1 <= nights <= 60."""
    nights = (parse_date(check_out, "check_out") - parse_date(check_in, "check_in")).days
    if not 1 <= nights <= _MAX_NIGHTS:
        raise ToolError(f"check_out must be 1 to {_MAX_NIGHTS} nights after check_in, got {nights}")
    return nights


def evaluate(expression: str) -> float:
    """The value of an arithmetic expression (numbers, + - * /, parentheses), rounded to cents."""
    if len(expression) > 200:
        raise ToolError("expression longer than 200 characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except (SyntaxError, ValueError):
        raise ToolError(f"not an arithmetic expression: {expression[:60]!r}") from None
    return float(round(_value(tree.body), 2))


def _value(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        value = node.value
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = -_value(node.operand) if isinstance(node.op, ast.USub) else _value(node.operand)
    elif isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = _value(node.left), _value(node.right)
        if isinstance(node.op, ast.Div) and right == 0:
            raise ToolError("division by zero")
        value = _OPERATORS[type(node.op)](left, right)
    else:
        raise ToolError("only numbers, + - * / and parentheses are allowed")
    if not abs(value) <= _LARGEST:  # also rejects nan and inf
        raise ToolError(f"numbers beyond {_LARGEST:.0e} are not supported")
    return value


class DeskTools:
    """The tools; a class that mixes them in provides `db` and `changes`."""

    db: Database
    changes: Changes

    def _reservation(self, reservation_id: str) -> dict[str, Any]:
        record = self.changes.reservation(self.db, reservation_id)
        if record is None:
            raise ToolError(f"no reservation with id {reservation_id!r}")
        return record

    def _changeable(self, reservation_id: str) -> dict[str, Any]:
        record = self._reservation(reservation_id)
        if record["status"] == "cancelled":
            raise ToolError(f"reservation {reservation_id} is cancelled")
        return record

    def _guest(self, guest_id: str) -> dict[str, Any]:
        guest = self.db.guests.get(guest_id)
        if guest is None:
            raise ToolError(f"no guest with id {guest_id!r}")
        return guest

    def _charge(self, guest_id: str, method_id: str, amount: float) -> None:
        """Charge `amount` dollars (negative: refund) to a payment method of the guest."""
        method = self.db.payment_method(guest_id, method_id)
        if method is None:
            raise ToolError(f"payment method {method_id!r} is not one of guest {guest_id}'s")
        if method["type"] != "gift_card":
            return
        balance = round(self.changes.balance(method) - amount, 2)
        if balance < 0:
            raise ToolError(f"gift card {method_id} holds {self.changes.balance(method):.2f}, less than {amount:.2f}")
        self.changes.balances[method_id] = balance

    def _save(self, record: dict[str, Any]) -> dict[str, Any]:
        self.changes.reservations[record["reservation_id"]] = record
        return record

    @tool
    def find_guest_id_by_email(self, email: str) -> str:
        """The guest id registered under an email address.

        Args:
            email: the guest's email address, e.g. ana.diaz12@example.com
        """
        guest_id = self.db.by_email.get(email.strip().lower())
        if guest_id is None:
            raise ToolError(f"no guest with email {email!r}")
        return guest_id

    @tool
    def get_guest_details(self, guest_id: str) -> dict[str, Any]:
        """A guest's profile: name, email, tier, payment methods (gift card balances) and reservation ids.

        Args:
            guest_id: e.g. ana_diaz_1234
        """
        guest = self._guest(guest_id)
        methods = [
            {**m, "balance": self.changes.balance(m)} if m["type"] == "gift_card" else m
            for m in guest["payment_methods"]
        ]
        return {**guest, "payment_methods": methods, "reservations": self.changes.guest_reservations(self.db, guest_id)}

    @tool
    def get_reservation_details(self, reservation_id: str) -> dict[str, Any]:
        """A reservation: hotel, room type, dates, nights, nightly rate, total, rate plan, status, payment method.

        Args:
            reservation_id: six characters, e.g. K7Q2XP
        """
        return self._reservation(reservation_id)

    @tool
    def search_hotels(self, city: City) -> list[dict[str, Any]]:
        """The hotels of a city with their stars and current nightly rates per room type.

        Args:
            city: one of the cities the chain serves
        """
        return self.db.hotels_in(city)

    @tool
    def get_hotel_details(self, hotel_id: str) -> dict[str, Any]:
        """A hotel's name, city, stars and current nightly rates per room type.

        Args:
            hotel_id: e.g. tagus_riverside
        """
        hotel = self.db.hotels.get(hotel_id)
        if hotel is None:
            raise ToolError(f"no hotel with id {hotel_id!r}")
        return hotel

    @tool
    def calculate(self, expression: str) -> float:
        """The value of an arithmetic expression, rounded to cents.

        Args:
            expression: numbers, + - * / and parentheses, e.g. 3 * 129 - 250
        """
        return evaluate(expression)

    @tool
    def book_reservation(
        self, guest_id: str, hotel_id: str, room_type: RoomType, check_in: str, check_out: str, payment_method_id: str
    ) -> dict[str, Any]:
        """Book a room at the hotel's current rate (flexible plan) and charge the total.

        Args:
            guest_id: the guest the booking is for
            hotel_id: e.g. tagus_riverside
            room_type: the room type
            check_in: YYYY-MM-DD
            check_out: YYYY-MM-DD, after check_in
            payment_method_id: one of the guest's payment methods
        """
        guest = self._guest(guest_id)
        hotel = self.db.hotels.get(hotel_id)
        if hotel is None:
            raise ToolError(f"no hotel with id {hotel_id!r}")
        nights = nights_between(check_in, check_out)
        rate = hotel["rates"][room_type]
        self._charge(guest_id, payment_method_id, rate * nights)
        return self._save(
            {
                "reservation_id": self.changes.new_reservation_id(self.db),
                "guest_id": guest["guest_id"],
                "hotel_id": hotel_id,
                "hotel_name": hotel["name"],
                "city": hotel["city"],
                "room_type": room_type,
                "check_in": check_in,
                "check_out": check_out,
                "nights": nights,
                "nightly_rate": rate,
                "total": rate * nights,
                "rate_plan": "flexible",
                "status": "confirmed",
                "payment_method_id": payment_method_id,
                "booked_on": iso(TODAY),
            }
        )

    @tool
    def cancel_reservation(self, reservation_id: str) -> dict[str, Any]:
        """Cancel a reservation and refund its total to its payment method.

        Args:
            reservation_id: six characters, e.g. K7Q2XP
        """
        record = self._changeable(reservation_id)
        self._charge(record["guest_id"], record["payment_method_id"], -record["total"])
        return self._save({**record, "status": "cancelled", "refund": record["total"]})

    @tool
    def modify_reservation_dates(self, reservation_id: str, check_in: str, check_out: str) -> dict[str, Any]:
        """Move a reservation to new dates at its nightly rate; the price difference goes to its payment method.

        Args:
            reservation_id: six characters, e.g. K7Q2XP
            check_in: new check-in, YYYY-MM-DD
            check_out: new check-out, YYYY-MM-DD, after check_in
        """
        record = self._changeable(reservation_id)
        nights = nights_between(check_in, check_out)
        total = nights * record["nightly_rate"]
        self._charge(record["guest_id"], record["payment_method_id"], total - record["total"])
        return self._save({**record, "check_in": check_in, "check_out": check_out, "nights": nights, "total": total})

    @tool
    def change_room_type(self, reservation_id: str, room_type: RoomType) -> dict[str, Any]:
        """Change a reservation's room type at the hotel's current rate; the price difference goes to its payment method.

        Args:
            reservation_id: six characters, e.g. K7Q2XP
            room_type: the new room type
        """
        record = self._changeable(reservation_id)
        if record["room_type"] == room_type:
            raise ToolError(f"reservation {reservation_id} already has a {room_type} room")
        rate = self.db.hotels[record["hotel_id"]]["rates"][room_type]
        total = rate * record["nights"]
        self._charge(record["guest_id"], record["payment_method_id"], total - record["total"])
        return self._save({**record, "room_type": room_type, "nightly_rate": rate, "total": total})

    @tool
    def transfer_to_human_agents(self, summary: str) -> str:
        """Hand the conversation to a human agent, with a summary of the guest's issue.

        Args:
            summary: what the guest needs and why it is transferred
        """
        self.changes.transfers.append(summary)
        return "Transfer successful"


class Ledger(DeskTools):
    """The tools over a database and fresh changes, outside any episode: how gold databases are made."""

    def __init__(self, db: Database) -> None:
        self.db, self.changes = db, Changes()

    def apply(self, name: str, arguments: dict[str, Any]) -> Any:
        """Call tool `name`; a ToolError propagates (a gold action that fails is a bug)."""
        return getattr(self, name)(**arguments)
