"""The hotel desk's database: a seeded generator, and an episode's changes on top of it.

`generate(seed)` builds one database per domain seed (memoised by `database`): 12 hotels in 4
cities, each with a star rating and current nightly rates per room type (whole US dollars), and
100 guests, each with an email, a tier, one or two credit cards, maybe a gift card (balance in
dollars and cents) and 2-9 reservations: past stays (completed or cancelled), upcoming ones
(confirmed or cancelled, flexible or non-refundable), for half the guests a trip of 2-3 stays in
one city, for some a stay checking in tomorrow or one in progress (checked_in). A reservation
keeps the nightly rate it was booked at (85-110% of the hotel's current rate); total = nights ×
rate. Dates are ISO strings (YYYY-MM-DD); today is `TODAY`.

The database is never changed. An episode's writes go to its `Changes` (the records it changed
or created, gift card balances, transfers), and the final database a task is graded on is the
database plus those changes, compared through `Changes.snapshot`. Guests are split into pools
(`pool_of`): train tasks are drawn from 60 of them, held-out tasks from the other 40.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any

from tracegym.synth_envs.cache import BoundedCache
from tracegym.synth_envs.common import person_name

TODAY = date(2025, 6, 10)
ROOM_TYPES = ("standard", "deluxe", "suite")
CITIES = ("Lisbon", "Kyoto", "Austin", "Cape Town")
HOTEL_NAMES = {
    "Lisbon": ("Alfama Courtyard", "Tagus Riverside", "Belem Garden"),
    "Kyoto": ("Gion Lantern", "Kamo River Inn", "Arashiyama Retreat"),
    "Austin": ("Congress Avenue Lofts", "Barton Springs Lodge", "Rainey Street House"),
    "Cape Town": ("Table Bay View", "Bo-Kaap Terrace", "Camps Bay Sands"),
}
GUESTS = 100
_ID_CHARS = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I
_BRANDS = ("visa", "mastercard", "amex")


def iso(day: date) -> str:
    return day.isoformat()


def pool_of(guest_index: int) -> str:
    """ "heldout" for 40 of every 100 guests (index mod 5 in {3, 4}), else "train"."""
    return "heldout" if guest_index % 5 >= 3 else "train"


@dataclass(frozen=True)
class Database:
    """Hotels, guests and reservations by id (records are plain dicts: what the tools return)."""

    seed: int
    hotels: dict[str, dict[str, Any]]
    guests: dict[str, dict[str, Any]]
    reservations: dict[str, dict[str, Any]]
    by_email: dict[str, str]
    guest_order: tuple[str, ...]  # guest ids in generation order (their pool is `pool_of(index)`)

    def hotels_in(self, city: str) -> list[dict[str, Any]]:
        return [hotel for hotel in self.hotels.values() if hotel["city"] == city]

    def pool(self, name: str) -> list[str]:
        """The guest ids of pool `name` ("train" or "heldout")."""
        return [gid for index, gid in enumerate(self.guest_order) if pool_of(index) == name]

    def payment_method(self, guest_id: str, method_id: str) -> dict[str, Any] | None:
        return next((m for m in self.guests[guest_id]["payment_methods"] if m["id"] == method_id), None)


@dataclass
class Changes:
    """What an episode changed: full records of changed or created reservations, gift card
    balances, and the summaries of transfers to human agents."""

    reservations: dict[str, dict[str, Any]] = field(default_factory=dict)
    balances: dict[str, float] = field(default_factory=dict)
    transfers: list[str] = field(default_factory=list)

    def reservation(self, db: Database, reservation_id: str) -> dict[str, Any] | None:
        """The current record (None when there is no such reservation)."""
        return self.reservations.get(reservation_id) or db.reservations.get(reservation_id)

    def guest_reservations(self, db: Database, guest_id: str) -> list[str]:
        """The guest's reservation ids: the database's, then the ones created in this episode."""
        created = [
            rid for rid, r in self.reservations.items() if rid not in db.reservations and r["guest_id"] == guest_id
        ]
        return db.guests[guest_id]["reservations"] + created

    def balance(self, method: dict[str, Any]) -> float:
        return self.balances.get(method["id"], method["balance"])

    def new_reservation_id(self, db: Database) -> str:
        return f"BK{1 + sum(rid not in db.reservations for rid in self.reservations):04d}"

    def snapshot(self, db: Database) -> dict[str, Any]:
        """The final database as its differences from `db` (records equal to the original dropped)."""
        originals = {
            m["id"]: m["balance"] for g in db.guests.values() for m in g["payment_methods"] if m["type"] == "gift_card"
        }
        return {
            "reservations": {rid: r for rid, r in sorted(self.reservations.items()) if r != db.reservations.get(rid)},
            "balances": {mid: b for mid, b in sorted(self.balances.items()) if b != originals.get(mid)},
            "transfers": len(self.transfers),
        }


_DATABASES: BoundedCache[Database] = BoundedCache(8)


def database(seed: int) -> Database:
    """The database of domain seed `seed` (generated once, then memoised)."""
    return _DATABASES.get(seed, generate, seed)


def generate(seed: int) -> Database:
    """A fresh database from `seed` (see the module docstring)."""
    rng = random.Random(f"hotel-db-{seed}")
    hotels = _hotels(rng)
    guests: dict[str, dict[str, Any]] = {}
    reservations: dict[str, dict[str, Any]] = {}
    taken: set[str] = set()
    for _ in range(GUESTS):
        guest = _guest(rng, guests)
        guests[guest["guest_id"]] = guest
        for record in sorted(_stays(rng, hotels, guest), key=lambda r: r["check_in"]):
            record["reservation_id"] = _unique_code(rng, taken)
            reservations[record["reservation_id"]] = record
            guest["reservations"].append(record["reservation_id"])
    return Database(seed, hotels, guests, reservations, {g["email"]: gid for gid, g in guests.items()}, tuple(guests))


def _hotels(rng: random.Random) -> dict[str, dict[str, Any]]:
    hotels = {}
    for city in CITIES:
        for name in HOTEL_NAMES[city]:
            stars = rng.randint(2, 5)
            standard = 40 + 35 * stars + rng.randint(-10, 25)
            rates = {
                "standard": standard,
                "deluxe": round(standard * rng.uniform(1.3, 1.6)),
                "suite": round(standard * rng.uniform(2.0, 2.8)),
            }
            hotel_id = name.lower().replace("-", "_").replace(" ", "_")
            hotels[hotel_id] = {"hotel_id": hotel_id, "name": name, "city": city, "stars": stars, "rates": rates}
    return hotels


def _guest(rng: random.Random, guests: dict[str, dict[str, Any]]) -> dict[str, Any]:
    emails = {g["email"] for g in guests.values()}
    while True:
        name = person_name(rng)
        first, last = name.lower().split()
        guest_id = f"{first}_{last}_{rng.randrange(1000, 10000)}"
        email = f"{first}.{last}{rng.randrange(10, 100)}@example.com"
        if guest_id not in guests and email not in emails:
            break
    methods = [
        {
            "id": f"credit_card_{rng.randrange(10**6, 10**7)}",
            "type": "credit_card",
            "brand": rng.choice(_BRANDS),
            "last4": f"{rng.randrange(10000):04d}",
        }
        for _ in range(rng.randint(1, 2))
    ]
    if rng.random() < 0.4:
        methods.append(
            {
                "id": f"gift_card_{rng.randrange(10**6, 10**7)}",
                "type": "gift_card",
                "balance": round(rng.uniform(100, 1500), 2),
            }
        )
    tier = rng.choice(("basic", "basic", "basic", "silver", "silver", "gold"))
    return {
        "guest_id": guest_id,
        "name": name,
        "email": email,
        "tier": tier,
        "payment_methods": methods,
        "reservations": [],
    }


def _stays(rng: random.Random, hotels: dict[str, dict[str, Any]], guest: dict[str, Any]) -> list[dict[str, Any]]:
    """The guest's reservations (without ids), with dates, statuses and rate plans."""
    hotel_ids = sorted(hotels)
    stays = []

    def stay(hotel_id: str, check_in: date, nights: int, status: str, flexible_share: float) -> dict[str, Any]:
        hotel = hotels[hotel_id]
        room = rng.choice(ROOM_TYPES[:2] if rng.random() < 0.8 else ROOM_TYPES)
        rate = round(hotel["rates"][room] * rng.uniform(0.85, 1.1))
        booked = check_in - timedelta(days=rng.randint(3, 90))
        if booked >= TODAY:
            booked = TODAY - timedelta(days=rng.randint(1, 60))
        return {
            "reservation_id": "",
            "guest_id": guest["guest_id"],
            "hotel_id": hotel_id,
            "hotel_name": hotel["name"],
            "city": hotel["city"],
            "room_type": room,
            "check_in": iso(check_in),
            "check_out": iso(check_in + timedelta(days=nights)),
            "nights": nights,
            "nightly_rate": rate,
            "total": rate * nights,
            "rate_plan": "flexible" if rng.random() < flexible_share else "non_refundable",
            "status": status,
            "payment_method_id": rng.choice(guest["payment_methods"])["id"],
            "booked_on": iso(booked),
        }

    for _ in range(rng.randint(1, 2)):  # past stays
        stays.append(
            stay(
                rng.choice(hotel_ids),
                TODAY - timedelta(days=rng.randint(8, 200)),
                rng.randint(1, 6),
                "completed" if rng.random() < 0.85 else "cancelled",
                0.65,
            )
        )
    for _ in range(rng.randint(1, 3)):  # upcoming stays
        stays.append(
            stay(
                rng.choice(hotel_ids),
                TODAY + timedelta(days=rng.randint(2, 150)),
                rng.randint(1, 6),
                "confirmed" if rng.random() < 0.9 else "cancelled",
                0.65,
            )
        )
    if rng.random() < 0.5:  # a trip: 2-3 consecutive stays in one city
        city = rng.choice(CITIES)
        check_in = TODAY + timedelta(days=rng.randint(5, 120))
        for _ in range(rng.randint(2, 3)):
            nights = rng.randint(1, 3)
            stays.append(
                stay(
                    rng.choice([h for h in hotel_ids if hotels[h]["city"] == city]), check_in, nights, "confirmed", 0.8
                )
            )
            check_in += timedelta(days=nights)
    if rng.random() < 0.25:  # checking in tomorrow
        stays.append(stay(rng.choice(hotel_ids), TODAY + timedelta(days=1), rng.randint(1, 4), "confirmed", 0.7))
    if rng.random() < 0.15:  # in progress
        started = rng.randint(0, 2)
        stays.append(
            stay(
                rng.choice(hotel_ids), TODAY - timedelta(days=started), started + rng.randint(1, 3), "checked_in", 0.65
            )
        )
    return stays


def _unique_code(rng: random.Random, taken: set[str]) -> str:
    while True:
        code = "".join(rng.choice(_ID_CHARS) for _ in range(6))
        if code not in taken:
            taken.add(code)
            return code
