"""Tool-calling precision: exact argument types, enum values, formats and ids.

The user asks in plain words for a meeting-room booking ("March 5, 2025 at 2:30 pm for an hour
and a half with Lena Park, high priority"). The agent must resolve people to employee ids (among
similar names) and the room to its id, and call `create_booking` with an ISO date, a 24-hour
time, an integer duration in minutes, an id array and enum values. Reward: 0.8 × the share of
booking fields exactly right in the (last) booking made + 0.2 when it was made once, on the first
try, with no rejected call. Knobs: attendees, optional fields (0-2), look-alike employees. The
prompt is the same at every setting: `video` and `catering` stay in the booking schema at 0
optional fields too, as setting a field the user did not ask for is graded as a wrong field.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from tracegym.synth_envs.base import Environment, ToolError
from tracegym.synth_envs.common import FIRST_NAMES, LAST_NAMES, call, calls
from tracegym.synth_envs.registry import register
from tracegym.synth_envs.tools import tool

Building = Literal["atrium", "harbour", "summit"]
Priority = Literal["low", "normal", "high", "urgent"]
Catering = Literal["none", "coffee", "lunch", "vegetarian_lunch"]
BUILDINGS, PRIORITIES, CATERING = get_args(Building), get_args(Priority), get_args(Catering)
MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]
PRIORITY_WORDS = {
    "low": "it's low priority",
    "normal": "normal priority",
    "high": "high priority, please",
    "urgent": "this is urgent",
}
CATERING_WORDS = {
    "none": "no catering",
    "coffee": "coffee for the group",
    "lunch": "lunch for everyone",
    "vegetarian_lunch": "vegetarian lunch",
}


@dataclass
class Config:
    """Difficulty knobs: attendees to resolve, optional fields requested (0-2), look-alike names per attendee."""

    n_attendees: int = 2
    n_optional: int = 1
    n_lookalikes: int = 2


@dataclass(frozen=True)
class _World:
    employees: tuple[tuple[str, str], ...]
    rooms: tuple[tuple[str, str, str], ...]
    building: str
    booking: dict[str, Any]
    request: str


@dataclass
class _State:
    bookings: list[dict[str, Any]] = field(default_factory=list)  # arguments of the accepted bookings
    rejected: int = 0  # create_booking calls refused for a format problem


def _date_phrase(rng: random.Random, year: int, month: int, day: int) -> str:
    return rng.choice(
        [f"{MONTHS[month - 1]} {day}, {year}", f"{day} {MONTHS[month - 1]} {year}", f"{month}/{day}/{year} (US format)"]
    )


def _time_phrase(hour: int, minute: int) -> str:
    suffix = "am" if hour < 12 else "pm"
    return f"{(hour - 1) % 12 + 1}:{minute:02d} {suffix}"


def _duration_phrase(rng: random.Random, minutes: int) -> str:
    options = [f"{minutes} minutes"]
    if minutes % 60 == 0:
        options.append(f"{minutes // 60} hour{'s' if minutes > 60 else ''}")
    if minutes == 90:
        options.append("an hour and a half")
    if minutes == 45:
        options.append("three quarters of an hour")
    return rng.choice(options)


@register
class ToolCallingPrecision(Environment):
    name = "tool_calling_precision"
    capability = "tool_calling_precision"
    description = (
        "Calling tools with exactly correct arguments: the right types, allowed enum values, exact "
        "formats for dates, times and numbers, and the exact identifiers looked up from other tools "
        "rather than names or guesses."
    )
    Config = Config
    ladder = (
        {"n_attendees": 1, "n_optional": 0, "n_lookalikes": 0},
        {"n_attendees": 1, "n_optional": 1, "n_lookalikes": 1},
        {"n_attendees": 2, "n_optional": 1, "n_lookalikes": 2},
        {"n_attendees": 3, "n_optional": 2, "n_lookalikes": 3},
        {"n_attendees": 4, "n_optional": 2, "n_lookalikes": 4},
    )
    max_turns = 8
    instructions = (
        "You are an office assistant. Resolve every person and room to its id with the lookup tools, "
        "then make exactly one booking with exactly formatted arguments. Reply 'Booked.' when done."
    )
    world: _World
    state: _State

    def _generate(self, seed: int) -> _World:
        cfg, rng = self.config, random.Random(seed)
        n_attendees, n_optional, n_lookalikes = cfg.n_attendees, cfg.n_optional, cfg.n_lookalikes
        ids = rng.sample(range(10_000, 99_999), 4 * (n_attendees + 1) * (n_lookalikes + 1) + 8)
        employees, attendees = [], []
        firsts = rng.sample(FIRST_NAMES, min(len(FIRST_NAMES), max(n_attendees, 1)))
        for first in firsts:
            lasts = rng.sample(LAST_NAMES, n_lookalikes + 1)
            for index, last in enumerate(lasts):
                employees.append((f"E{ids.pop()}", f"{first} {last}"))
                if index == 0:
                    attendees.append(employees[-1])
        for _ in range(4):
            employees.append((f"E{ids.pop()}", f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}"))
        rng.shuffle(employees)
        rooms = []
        for building in BUILDINGS:
            for name in rng.sample(["Maple", "Birch", "Cedar", "Aspen", "Willow", "Oak"], 3):
                rooms.append((f"RM-{rng.randrange(100, 999)}", f"{name} room", building))
        room = rng.choice(rooms)
        year, month, day = 2025, rng.randrange(1, 13), rng.randrange(1, 29)
        hour, minute = rng.randrange(8, 18), rng.choice([0, 15, 30, 45])
        minutes = rng.choice([30, 45, 60, 90, 120])
        priority = rng.choice(PRIORITIES)
        booking: dict[str, Any] = {
            "room_id": room[0],
            "date": f"{year}-{month:02d}-{day:02d}",
            "start_time": f"{hour:02d}:{minute:02d}",
            "duration_minutes": minutes,
            "attendee_ids": sorted(a[0] for a in attendees),
            "priority": priority,
        }
        extras = []
        optional = rng.sample(["video", "catering"], min(max(n_optional, 0), 2))
        if "video" in optional:
            booking["video"] = rng.random() < 0.5
            extras.append("we need a video link" if booking["video"] else "no video link needed")
        if "catering" in optional:
            booking["catering"] = rng.choice(CATERING)
            extras.append(CATERING_WORDS[booking["catering"]])
        names = " and ".join(a[1] for a in attendees)
        request = (
            f"Book the {room[1]} in the {room[2]} building on {_date_phrase(rng, year, month, day)} at "
            f"{_time_phrase(hour, minute)} for {_duration_phrase(rng, minutes)} with {names}; "
            f"{PRIORITY_WORDS[priority]}" + "".join(f"; {extra}" for extra in extras) + "."
        )
        return _World(tuple(employees), tuple(rooms), room[2], booking, request)

    def _task(self) -> str:
        return self.world.request

    def _new_state(self) -> _State:
        return _State()

    # -- tools ----------------------------------------------------------------------------------

    @tool
    def find_employee(self, query: str) -> list[dict[str, str]]:
        """Employees whose name contains the query: employee_id, name."""
        text = query.strip().lower()
        return [{"employee_id": e, "name": n} for e, n in self.world.employees if text and text in n.lower()]

    @tool
    def list_rooms(self, building: Building) -> list[dict[str, str]]:
        """Rooms of a building: room_id, name."""
        return [{"room_id": r, "name": n} for r, n, b in self.world.rooms if b == building]

    @tool
    def create_booking(
        self,
        room_id: str,
        date: str,
        start_time: str,
        duration_minutes: int,
        attendee_ids: list[str],
        priority: Priority,
        video: bool | None = None,
        catering: Catering | None = None,
    ) -> dict[str, Any]:
        """Book a room.

        Args:
            date: YYYY-MM-DD
            start_time: HH:MM (24-hour)
            attendee_ids: employee ids
        """
        given = {
            "room_id": room_id,
            "date": date,
            "start_time": start_time,
            "duration_minutes": duration_minutes,
            "attendee_ids": attendee_ids,
            "priority": priority,
            "video": video,
            "catering": catering,
        }
        booking = {k: v for k, v in given.items() if v is not None}  # optional fields only when given
        problem = self._format_problem(booking)
        if problem:
            self.state.rejected += 1
            raise ToolError(problem)
        self.state.bookings.append(booking)
        return {"ok": True, "booking_id": f"BK-{len(self.state.bookings)}"}

    def _format_problem(self, args: dict[str, Any]) -> str | None:
        date, start = args["date"], args["start_time"]
        if len(date) != 10 or date[4] != "-" or date[7] != "-" or not (date[:4] + date[5:7] + date[8:]).isdigit():
            return f"date must be YYYY-MM-DD, got {date!r}"
        if len(start) != 5 or start[2] != ":" or not (start[:2] + start[3:]).isdigit():
            return f"start_time must be HH:MM (24-hour), got {start!r}"
        if not all(isinstance(a, str) for a in args["attendee_ids"]):
            return "attendee_ids must be a list of employee id strings"
        if args["room_id"] not in {r for r, _, _ in self.world.rooms}:
            return f"unknown room_id {args['room_id']!r}"
        return None

    def _score(self, final_answer: str) -> tuple[float, dict[str, Any]]:
        target = self.world.booking
        bookings = self.state.bookings
        if not bookings:
            return 0.0, {"fields_right": 0, "fields": len(target), "booked": False}
        made = bookings[-1]
        right = sum((sorted(made.get(k, [])) if k == "attendee_ids" else made.get(k)) == v for k, v in target.items())
        extra = any(k not in target for k in made)
        share = right / len(target) if not extra else right / (len(target) + 1)
        clean = len(bookings) == 1 and self.state.rejected == 0 and right == len(target) and not extra
        reward = 0.8 * share + 0.2 * clean
        return round(reward, 6), {"fields_right": right, "fields": len(target), "booked": True, "clean": clean}

    def _lookups(self) -> str:
        w = self.world
        names = {n for e, n in w.employees if e in w.booking["attendee_ids"]}
        return calls(
            *[("find_employee", {"query": n}) for n in sorted(names)], ("list_rooms", {"building": w.building})
        )

    def _oracle(self) -> list[str]:
        return [self._lookups(), call("create_booking", **self.world.booking), "Booked."]

    def _wrong(self) -> list[list[str]]:
        w, booking = self.world, self.world.booking
        hour, minute = booking["start_time"].split(":")
        twelve = f"{(int(hour) - 1) % 12 + 1:02d}:{minute}"
        wrong_time = twelve if twelve != booking["start_time"] else f"{int(hour) + 1:02d}:{minute}"
        lookalike = next(e for e, n in w.employees if e not in booking["attendee_ids"])
        day_first = f"{booking['date'][:4]}-{booking['date'][8:]}-{booking['date'][5:7]}"
        return [
            [self._lookups(), call("create_booking", **{**booking, "start_time": wrong_time}), "Booked."],
            [
                self._lookups(),
                call("create_booking", **{**booking, "attendee_ids": booking["attendee_ids"][1:] + [lookalike]}),
                "Booked.",
            ],
            [
                self._lookups(),
                call("create_booking", **{**booking, "duration_minutes": str(booking["duration_minutes"])}),
                "Booked.",
            ],
            [
                self._lookups(),
                call(
                    "create_booking", **{**booking, "date": day_first if day_first != booking["date"] else "2025-13-01"}
                ),
                "Booked.",
            ],
        ]

    def _hint(self) -> str:
        b = self.world.booking
        return (
            f"Use find_employee for each attendee's full name and list_rooms for the {self.world.building} building; "
            f"the booking needs date {b['date']} and start_time {b['start_time']} in that exact format."
        )
