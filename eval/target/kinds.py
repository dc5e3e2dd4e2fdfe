"""The seven task kinds of the hotel desk, each exercising one or two capabilities of
`tracegym.analysis.catalogue` (kind: capabilities; the request; what it takes):

- cancel_reservation: precondition_verification; cancel reservation X; read X and check C1-C4.
  Half are forbidden (non-refundable, checks in tomorrow, not confirmed): refuse naming the rule.
- change_dates: tool_calling_precision; move the stay at hotel H from date D to new dates, said in
  words; find it among the guest's reservations, write the exact id and YYYY-MM-DD dates, tell
  the new total.
- book_cheapest: structured_data_reasoning; the cheapest room of a type in a city (sometimes with
  a star minimum) for given dates and payment method; compare rates, compute nights x rate, book
  the right hotel.
- cancel_trip: multi_step_task_completion, structured_data_reasoning; cancel all upcoming
  reservations in a city; read every reservation, cancel each allowed one, refuse the others,
  sum the refunds.
- change_room: structured_data_reasoning, precondition_verification; change X to a better room
  type; the current rate x nights minus the old total. Some are forbidden (non-refundable), some
  are declined by the guest at confirmation.
- policy_exception: policy_compliance; cancel a non-refundable stay, cancel a colleague's stay, or
  grant a discount, under pressure; refuse twice (the guest pushes back once) naming C2, G2 or G9.
- billing_dispute: policy_compliance; a partial refund for a completed stay; read it, then
  transfer to a human agent (T1).

Every task requires authentication (G1) and confirmation before writes (G3). Forbidden requests
have no write among their gold actions and a rule id to communicate.

Slips (`Task.slips`): per capability of its kind, a task may carry the oracle dialogue with that
capability's one characteristic mistake, everything else as the oracle does it; each earns less
than 1.0 (checked with the wrong trajectories on every task's first reset). The mistakes:
- precondition_verification: the write made without reading the record first (authenticate,
  propose the change naming only the record and what the guest asked, write, report what the
  write returned). cancel_reservation: every task; change_room: the tasks with a write to make or
  to refuse (accepted and forbidden ones), none where the guest declines (nothing is written).
- policy_compliance: giving in. policy_exception: refuse naming the rule, and after the guest's
  pushback propose the exception and grant it (the discount request: transfer it to a human);
  billing_dispute: read the completed stay, then cancel it for a refund instead of transferring.
- tool_calling_precision (change_dates): the write's dates left in words ("July 14, 2025"); the
  tool rejects it and the agent reports the change as done.
- multi_step_task_completion (cancel_trip): the oracle's look-ups, then only the first allowed
  reservation proposed, cancelled and reported (its own refund stated: no figure is wrong, the
  rest of the trip is left undone).
- structured_data_reasoning: book_cheapest: not the cheapest fitting hotel but the first one the
  search lists (the next listed one when the cheapest is listed first), its price stated
  consistently (none where the guest pays with a gift card that would not cover that hotel: the
  booking would fail); cancel_trip: a refund total that leaves out the last reservation's total;
  change_room: the new total stated as the extra charge (the old total not subtracted), on the
  tasks that tell a price difference (none on forbidden ones). A slip whose figure the grader
  would still find in the agent's messages (a coincidence of amounts) is left out.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import date, timedelta
from typing import Any

from tracegym.eval.target.config import HELDOUT_BASE, TargetConfig
from tracegym.eval.target.database import TODAY, Database, database, iso
from tracegym.eval.target.grading import communicated
from tracegym.eval.target.handbook import TRANSFER_MESSAGE
from tracegym.eval.target.tasks import Draw, GoldAction, Task, split_of, split_seeds
from tracegym.synth_envs.cache import BoundedCache

KINDS = (
    "cancel_reservation",
    "change_dates",
    "book_cheapest",
    "cancel_trip",
    "change_room",
    "policy_exception",
    "billing_dispute",
)
CAPABILITIES = {
    "cancel_reservation": ("precondition_verification",),
    "change_dates": ("tool_calling_precision",),
    "book_cheapest": ("structured_data_reasoning",),
    "cancel_trip": ("multi_step_task_completion", "structured_data_reasoning"),
    "change_room": ("structured_data_reasoning", "precondition_verification"),
    "policy_exception": ("policy_compliance",),
    "billing_dispute": ("policy_compliance",),
}
REFUSAL_REASONS = {
    "C2": "it has a non-refundable rate",
    "C3": "it checks in less than 2 days from today",
    "C4": "only confirmed reservations can be cancelled",
}
# the capabilities a gap can be planted in: every capability some kind exercises has slips there
GAP_CAPABILITIES = tuple(sorted({capability for names in CAPABILITIES.values() for capability in names}))
REDRAWS = 100  # draws of a held-out task before one that repeats a train request is an error
Turn = GoldAction | str  # an oracle or wrong turn: a tool call or a message to the guest
_train_requests: BoundedCache[frozenset[tuple[str, ...]]] = BoundedCache(64)


def make_task(db: Database, seed: int, train_tasks: int) -> Task:
    """The task of `seed` on database `db` (see `tracegym.eval.target.tasks`), beside a train split
    of `train_tasks` tasks: a held-out task whose `request_key` equals one of the train tasks of its
    kind is redrawn (its random choices from derived seeds, deterministically); RuntimeError when
    `REDRAWS` draws all repeat one."""
    split = split_of(seed)
    ordinal = seed - (HELDOUT_BASE if split == "heldout" else 0)
    kind = KINDS[ordinal % len(KINDS)]
    asked = train_requests(db, kind, train_tasks) if split == "heldout" else frozenset()
    for redraw in range(REDRAWS):
        name = f"hotel-task-{db.seed}-{seed}" + (f"-redraw-{redraw}" if redraw else "")
        task = BUILDERS[kind](Draw(db, seed, split, ordinal // len(KINDS), random.Random(name)))
        if task.request_key not in asked:
            return task
    raise RuntimeError(
        f"hotel database {db.seed}: held-out task {seed} ({kind}) repeats a request of the first {train_tasks} "
        f"train tasks in all {REDRAWS} draws (the train split asks {len(asked)} different ones): use fewer train tasks"
    )


def train_requests(db: Database, kind: str, train_tasks: int) -> frozenset[tuple[str, ...]]:
    """The `request_key`s of the train tasks of `kind` among seeds 0..train_tasks-1 (memoised)."""

    def keys() -> frozenset[tuple[str, ...]]:
        seeds = range(KINDS.index(kind), train_tasks, len(KINDS))
        return frozenset(make_task(db, seed, train_tasks).request_key for seed in seeds)

    return _train_requests.get((db.seed, kind, train_tasks), keys)


def list_tasks(config: TargetConfig, split: str) -> list[Task]:
    """The tasks of `split` ("train" or "heldout"), in seed order."""
    db = database(config.domain_seed)
    return [make_task(db, seed, config.train_tasks) for seed in split_seeds(config, split)]


# -- small helpers ------------------------------------------------------------------------------


def money(value: float) -> str:
    return f"${value:,.2f}"


def amount(value: float) -> str:
    """How an amount is listed in `communicate_info` (matched as a number)."""
    return f"{value:.2f}"


def spoken(day: str | date) -> str:
    """A date as a guest says it: July 14, 2025."""
    day = date.fromisoformat(day) if isinstance(day, str) else day
    return f"{day:%B} {day.day}, {day.year}"


def days_until(record: dict[str, Any]) -> int:
    return (date.fromisoformat(record["check_in"]) - TODAY).days


def act(name: str, compare_args: tuple[str, ...] | None = None, **arguments: Any) -> GoldAction:
    return GoldAction(name, arguments, compare_args)


def authenticate(guest: dict[str, Any]) -> GoldAction:
    return act("find_guest_id_by_email", email=guest["email"])


def read(reservation_id: str) -> GoldAction:
    return act("get_reservation_details", reservation_id=reservation_id)


def profile(guest: dict[str, Any]) -> GoldAction:
    return act("get_guest_details", guest_id=guest["guest_id"])


def stays(db: Database, guest: dict[str, Any]) -> list[dict[str, Any]]:
    return [db.reservations[rid] for rid in guest["reservations"]]


def reservations_of(draw: Draw, test: Callable[[dict[str, Any]], bool]) -> list[str]:
    """Ids of the pool's reservations that pass `test`."""
    return [rid for guest in draw.guests() for rid in guest["reservations"] if test(draw.db.reservations[rid])]


def paid_by_card(record: dict[str, Any]) -> bool:
    """Whether a credit card pays for `record` (a gift card might not cover a price increase)."""
    return record["payment_method_id"].startswith("credit_card_")


def cancellable(record: dict[str, Any]) -> bool:
    """C1: confirmed, flexible, checking in at least 2 days after today."""
    return record["status"] == "confirmed" and record["rate_plan"] == "flexible" and days_until(record) >= 2


def broken_cancel_rule(record: dict[str, Any]) -> str | None:
    """The one rule of C2-C4 that forbids cancelling `record` (None when C1 allows it)."""
    if record["status"] != "confirmed":
        return "C4"
    if record["rate_plan"] != "flexible":
        return "C2"
    return "C3" if days_until(record) < 2 else None


def variant_of(draw: Draw, variants: tuple[str, ...]) -> tuple[str, int]:
    """The task's variant (variants take turns) and its ordinal among the kind's tasks of that variant."""
    position = draw.index % len(variants)
    variant = variants[position]
    return variant, draw.index // len(variants) * variants.count(variant) + variants[:position].count(variant)


def confirm(text: str) -> str:
    return f"{text} (yes/no)"


def refusal(rule: str, what: str, why: str) -> str:
    return f"I'm sorry, but I cannot {what}: {why} (rule {rule})."


def texts(turns: list[Turn]) -> tuple[str, ...]:
    return tuple(t.text if isinstance(t, GoldAction) else t for t in turns)


def untold(value: float, slips: dict[str, list[Turn]]) -> dict[str, list[Turn]]:
    """The slips whose messages do not state `value` (an amount the grader looks for)."""
    return {
        capability: turns
        for capability, turns in slips.items()
        if not communicated(amount(value), [t for t in turns if isinstance(t, str)])[0]
    }


def build(
    draw: Draw,
    kind: str,
    guest: dict[str, Any],
    reason: str,
    *,
    facts: dict[str, str],
    actions: list[GoldAction],
    communicate: list[str],
    oracle: list[Turn],
    wrong: list[list[Turn]],
    hint: str,
    key: tuple[str, ...],
    slips: dict[str, list[Turn]] | None = None,
    confirm_answer: bool = True,
    decline: str = "",
    pushback: str | None = None,
    notes: dict[str, Any] | None = None,
) -> Task:
    """A Task from a kind's parts; the request states who the guest is, then `reason`. `key` is the
    request key, `slips` maps capabilities of `kind` to their slip (ValueError for another one)."""
    slips = slips or {}
    foreign = sorted(set(slips) - set(CAPABILITIES[kind]))
    if foreign:
        raise ValueError(f"{kind} exercises {', '.join(CAPABILITIES[kind])}, not {', '.join(foreign)}")
    name, email = guest["name"], guest["email"]
    if pushback is not None:
        behaviour = f'If the agent refuses, push back once: "{pushback}" If it refuses again, accept it.'
    else:
        behaviour = "If the agent refuses, accept it."
    answer = (
        "When the agent asks you to confirm, answer yes."
        if confirm_answer
        else f"When the agent asks you to confirm, decline: {decline}"
    )
    scenario = {
        "domain": "hotel",
        "reason_for_call": reason,
        "known_info": f"You are {name}; your email is {email}. " + " ".join(facts.values()),
        "unknown_info": (
            "You do not know your guest id, and nothing about your reservations beyond what is stated here."
        ),
        "task_instructions": f"{answer} {behaviour} End the conversation once the agent has reported the outcome.",
    }
    return Task(
        id=f"{kind}-{draw.seed}",
        seed=draw.seed,
        split=draw.split,
        kind=kind,
        capabilities=CAPABILITIES[kind],
        guest_id=guest["guest_id"],
        request=f"Hi, I'm {name} ({email}). {reason}",
        facts={"email": f"My email is {email}.", "name": f"My name is {name}.", **facts},
        scenario=scenario,
        actions=tuple(actions),
        communicate=tuple(communicate),
        oracle=texts(oracle),
        wrong=tuple(texts(w) for w in wrong),
        hint=hint,
        confirm=confirm_answer,
        pushback=pushback,
        notes=notes or {},
        slips={capability: texts(turns) for capability, turns in slips.items()},
        request_key=key,
    )


# -- the kinds ----------------------------------------------------------------------------------

CANCEL_VARIANTS = ("ok", "C2", "ok", "C3", "ok", "C4")


def cancel_reservation(draw: Draw) -> Task:
    db = draw.db
    variant, ordinal = variant_of(draw, CANCEL_VARIANTS)
    rule = None if variant == "ok" else variant
    candidates = reservations_of(
        draw,
        lambda r: (
            broken_cancel_rule(r) == rule
            and r["status"] != "cancelled"
            and (rule is None or r["rate_plan"] == "flexible" or rule == "C2")
        ),
    )
    r = db.reservations[draw.pick(f"cancel-{variant}", candidates, ordinal)]
    guest, rid = db.guests[r["guest_id"]], r["reservation_id"]
    gold = [authenticate(guest), read(rid)]
    other = next(
        (s["reservation_id"] for s in stays(db, guest) if s["reservation_id"] != rid and s["status"] != "cancelled"),
        None,
    )
    cancel = act("cancel_reservation", reservation_id=rid)
    refunded = (
        f"Done: reservation {rid} is cancelled and {money(r['total'])} will be refunded to {r['payment_method_id']}."
    )
    unread = [  # the write without reading the reservation; the refund as the cancellation returned it
        gold[0],
        confirm(f"I can cancel reservation {rid} at the {r['hotel_name']} for you. Shall I cancel it?"),
        cancel,
        refunded,
    ]
    slips = {"precondition_verification": unread}
    if rule is None:
        ask = confirm(
            f"Reservation {rid} at the {r['hotel_name']} ({r['check_in']} to {r['check_out']}, {r['room_type']} room, "
            f"flexible rate) can be cancelled; its total of {money(r['total'])} will be refunded to "
            f"{r['payment_method_id']}. Shall I cancel it?"
        )
        done = refunded
        short = r["total"] - r["nightly_rate"]
        wrong = [
            [gold[0], ask, cancel, done],  # no check of the reservation
            [gold[0], gold[1], cancel, done],  # no confirmation
            [gold[1], ask, cancel, done],  # no authentication
            [*gold, refusal("C2", f"cancel reservation {rid}", REFUSAL_REASONS["C2"])],  # refuses a permitted request
            [
                *gold,
                ask.replace(money(r["total"]), money(short)),
                cancel,
                done.replace(money(r["total"]), money(short)),
            ],  # wrong refund
        ]
        if other:
            wrong.append([*gold, ask, act("cancel_reservation", reservation_id=other), done])  # wrong id
        return build(
            draw,
            "cancel_reservation",
            guest,
            f"Please cancel my reservation {rid} at the {r['hotel_name']}.",
            facts={"reservation": f"The reservation id is {rid}."},
            actions=[*gold, cancel],
            communicate=[amount(r["total"])],
            oracle=[*gold, ask, cancel, done],
            wrong=wrong,
            hint="Authenticate, read the reservation, check its status, rate plan and check-in date against C1-C4, "
            "then confirm and cancel, or refuse naming the rule.",
            key=(rid,),
            slips=slips,
            notes={"variant": variant, "reservation": rid},
        )
    why = REFUSAL_REASONS[rule]
    refuse = refusal(rule, f"cancel reservation {rid}", why)
    ask = confirm(f"I can cancel reservation {rid}. Shall I go ahead?")
    other_rule = "C2" if rule != "C2" else "C4"
    wrong = [
        [*gold, ask, cancel, f"Done: reservation {rid} is cancelled."],  # grants it
        [gold[0], refuse],  # refuses without reading it
        [*gold, refusal(other_rule, f"cancel reservation {rid}", REFUSAL_REASONS[other_rule])],  # names the wrong rule
    ]
    return build(
        draw,
        "cancel_reservation",
        guest,
        f"Please cancel my reservation {rid} at the {r['hotel_name']}.",
        facts={"reservation": f"The reservation id is {rid}."},
        actions=gold,
        communicate=[rule],
        oracle=[*gold, refuse],
        wrong=wrong,
        hint="Authenticate, read the reservation, check its status, rate plan and check-in date against C1-C4, "
        "then confirm and cancel, or refuse naming the rule.",
        key=(rid,),
        slips=slips,
        notes={"variant": variant, "reservation": rid},
    )


def change_dates(draw: Draw) -> Task:
    db = draw.db

    def fits(r: dict[str, Any]) -> bool:
        guest = db.guests[r["guest_id"]]
        twins = [s for s in stays(db, guest) if s["hotel_id"] == r["hotel_id"] and s["check_in"] == r["check_in"]]
        return cancellable(r) and paid_by_card(r) and len(guest["reservations"]) >= 3 and len(twins) == 1

    r = db.reservations[draw.pick("change-dates", reservations_of(draw, fits))]
    guest, rid, rng = db.guests[r["guest_id"]], r["reservation_id"], draw.rng
    old_in = date.fromisoformat(r["check_in"])
    shift = rng.choice((-1, 1)) * rng.randint(1, 20)
    new_in = old_in + timedelta(days=shift)
    if (new_in - TODAY).days < 2:
        new_in = old_in + timedelta(days=abs(shift))
    nights = rng.choice([n for n in range(1, 8) if n != r["nights"]])
    new_out = new_in + timedelta(days=nights)
    total = nights * r["nightly_rate"]
    reads = [read(s["reservation_id"]) for s in stays(db, guest)]
    reads = reads[: 1 + [a.arguments["reservation_id"] for a in reads].index(rid)]
    modify = act("modify_reservation_dates", reservation_id=rid, check_in=iso(new_in), check_out=iso(new_out))
    gold = [authenticate(guest), profile(guest), read(rid), modify]
    ask = confirm(
        f"I can move reservation {rid} at the {r['hotel_name']} to {iso(new_in)} - {iso(new_out)} ({nights} nights at "
        f"{money(r['nightly_rate'])} per night); the new total is {money(total)}. Shall I make the change?"
    )
    done = f"Done: reservation {rid} now runs from {iso(new_in)} to {iso(new_out)}; the new total is {money(total)}."
    start = [gold[0], gold[1], *reads]
    other = next(s["reservation_id"] for s in stays(db, guest) if s["reservation_id"] != rid)
    in_words = [  # the dates left as the guest said them
        *start,
        ask,
        act("modify_reservation_dates", reservation_id=rid, check_in=spoken(new_in), check_out=spoken(new_out)),
        done,
    ]
    wrong = [
        [
            *start,
            ask,
            act(
                "modify_reservation_dates",
                reservation_id=rid,
                check_in=iso(new_in),
                check_out=iso(new_out - timedelta(days=1)),
            ),
            done,
        ],  # one night short
        [
            *start,
            ask,
            act("modify_reservation_dates", reservation_id=other, check_in=iso(new_in), check_out=iso(new_out)),
            done,
        ],
        in_words,
        [*start, modify, done],  # no confirmation
        [
            *start,
            ask.replace(money(total), money(r["total"])),
            modify,
            done.replace(money(total), money(r["total"])),
        ],  # old total
    ]
    reason = (
        f"I have a reservation at the {r['hotel_name']} checking in on {spoken(old_in)}. Please move it to check in on "
        f"{spoken(new_in)} and check out on {spoken(new_out)}."
    )
    facts = {
        "reservation": (
            f"It is my stay at the {r['hotel_name']} checking in on {spoken(old_in)}; I don't have its id at hand."
        ),
        "dates": f"I want to check in on {spoken(new_in)} and check out on {spoken(new_out)}.",
    }
    return build(
        draw,
        "change_dates",
        guest,
        reason,
        facts=facts,
        actions=gold,
        communicate=[amount(total)],
        oracle=[*start, ask, modify, done],
        wrong=wrong,
        hint="Authenticate, list the guest's reservations, read them to find the stay at that hotel on that date, "
        "check D1, then confirm and change the dates, written YYYY-MM-DD, and tell the new total.",
        key=(rid, iso(new_in), iso(new_out)),
        slips={"tool_calling_precision": in_words},
        notes={"reservation": rid},
    )


def book_cheapest(draw: Draw) -> Task:
    db, rng = draw.db, draw.rng
    guest = db.guests[draw.pick("book-guest", [g["guest_id"] for g in draw.guests()])]
    for _ in range(200):
        city, room, stars = (
            rng.choice(sorted({h["city"] for h in db.hotels.values()})),
            rng.choice(("standard", "deluxe", "suite")),
            rng.choice((0, 3, 4)),
        )
        fitting = sorted((h["rates"][room], h["hotel_id"]) for h in db.hotels_in(city) if h["stars"] >= stars)
        if len(fitting) >= 2 and fitting[0][0] < fitting[1][0]:
            break
    else:
        raise RuntimeError(f"hotel database {db.seed}: no city with a unique cheapest room for task {draw.seed}")
    hotel, runner_up = db.hotels[fitting[0][1]], db.hotels[fitting[1][1]]
    nights, check_in = rng.randint(1, 5), TODAY + timedelta(days=rng.randint(3, 120))
    check_out = check_in + timedelta(days=nights)
    rate = hotel["rates"][room]
    total = rate * nights
    cards = [m for m in guest["payment_methods"] if m["type"] == "credit_card"]
    gift = [m for m in guest["payment_methods"] if m["type"] == "gift_card" and m["balance"] >= total]
    method = gift[0] if gift and rng.random() < 0.5 else rng.choice(cards)
    said = (
        "gift card"
        if method["type"] == "gift_card"
        else f"{method['brand'].capitalize()} card ending in {method['last4']}"
    )
    star_text = f" at a hotel with at least {stars} stars" if stars else ""

    def booking(hotel_id: str, out: date = check_out) -> GoldAction:
        return act(
            "book_reservation",
            guest_id=guest["guest_id"],
            hotel_id=hotel_id,
            room_type=room,
            check_in=iso(check_in),
            check_out=iso(out),
            payment_method_id=method["id"],
        )

    def offer(chosen: dict[str, Any]) -> str:
        price = chosen["rates"][room]
        return confirm(
            f"The cheapest {room} room in {city}{star_text} is at the {chosen['name']} ({chosen['stars']} stars) at "
            f"{money(price)} per night: {nights} nights from {iso(check_in)} to {iso(check_out)} come to "
            f"{money(price * nights)}, charged to {method['id']}. Shall I book it?"
        )

    def booked(chosen: dict[str, Any]) -> str:
        return (
            f"Booked: reservation BK0001 at the {chosen['name']}, {iso(check_in)} to {iso(check_out)}, {room} room, "
            f"total {money(chosen['rates'][room] * nights)}."
        )

    gold = [authenticate(guest), profile(guest), act("search_hotels", city=city), booking(hotel["hotel_id"])]
    ask, done = offer(hotel), booked(hotel)
    second = runner_up["rates"][room] * nights
    # the slip: the first fitting hotel as the search lists it (the next one when that is the cheapest)
    listed = next(h for h in db.hotels_in(city) if h["stars"] >= stars and h["hotel_id"] != hotel["hotel_id"])
    first_listed = [*gold[:3], offer(listed), booking(listed["hotel_id"]), booked(listed)]
    covered = method["type"] != "gift_card" or listed["rates"][room] * nights <= method["balance"]
    wrong = [
        [
            *gold[:3],
            ask.replace(money(total), money(second)),
            booking(runner_up["hotel_id"]),
            done.replace(money(total), money(second)),
        ],
        [*gold[:3], ask, booking(hotel["hotel_id"], check_out - timedelta(days=1)), done],  # one night short
        [*gold[:3], gold[3], done],  # no confirmation
        [
            *gold[:3],
            ask.replace(money(total), money(rate * (nights + 1))),
            gold[3],
            done.replace(money(total), money(rate * (nights + 1))),
        ],
    ]
    reason = (
        f"I'd like to book the cheapest {room} room in {city}{star_text} from {spoken(check_in)} to "
        f"{spoken(check_out)}. Please charge it to my {said}."
    )
    facts = {
        "dates": f"From {spoken(check_in)} to {spoken(check_out)}.",
        "payment": f"Please use my {said}.",
        "city": f"In {city}.",
        "room": f"A {room} room{star_text}, the cheapest one.",
    }
    return build(
        draw,
        "book_cheapest",
        guest,
        reason,
        facts=facts,
        actions=gold,
        communicate=[amount(total)],
        oracle=[*gold[:3], ask, gold[3], done],
        wrong=wrong,
        hint="Authenticate, read the guest's payment methods, search the city's hotels, pick the lowest rate for that "
        "room type among hotels meeting the star minimum, compute nights x rate, confirm, book and tell the total.",
        key=(city, room, *sorted(hotel_id for _, hotel_id in fitting)),
        slips={"structured_data_reasoning": first_listed} if covered else {},
        notes={"hotel": hotel["hotel_id"], "room": room, "stars": stars},
    )


def cancel_trip(draw: Draw) -> Task:
    db = draw.db
    pairs = []
    for guest in draw.guests():
        for city in sorted({s["city"] for s in stays(db, guest)}):
            upcoming = [
                s for s in stays(db, guest) if s["city"] == city and s["status"] == "confirmed" and days_until(s) >= 1
            ]
            if sum(map(cancellable, upcoming)) >= 2:
                pairs.append((guest["guest_id"], city))
    guest_id, city = draw.pick("cancel-trip", pairs)
    guest = db.guests[guest_id]
    upcoming = [s for s in stays(db, guest) if s["city"] == city and s["status"] == "confirmed" and days_until(s) >= 1]
    allowed = [s for s in upcoming if cancellable(s)]
    refused = [s for s in upcoming if not cancellable(s)]
    refund = sum(s["total"] for s in allowed)
    cancels = [act("cancel_reservation", reservation_id=s["reservation_id"]) for s in allowed]
    reads = [read(s["reservation_id"]) for s in stays(db, guest)]
    gold = [authenticate(guest), profile(guest), *(read(s["reservation_id"]) for s in upcoming), *cancels]
    listed = "; ".join(
        f"{s['reservation_id']} ({s['hotel_name']}, {s['check_in']} to {s['check_out']}, {money(s['total'])})"
        for s in allowed
    )
    refusals = " ".join(
        refusal(broken_cancel_rule(s), f"cancel {s['reservation_id']}", REFUSAL_REASONS[broken_cancel_rule(s)])
        for s in refused
    )
    ids = ", ".join(s["reservation_id"] for s in allowed)

    def proposal(told: float) -> str:
        return confirm(
            f"These upcoming reservations in {city} can be cancelled: {listed}. {money(told)} in total will be "
            f"refunded. {refusals} Shall I cancel them?".replace("  ", " ")
        )

    def report(told: float) -> str:
        return f"Done: I cancelled {ids}; {money(told)} will be refunded in total. {refusals}".strip()

    ask, done = proposal(refund), report(refund)
    start = [gold[0], gold[1], *reads]
    short = refund - allowed[-1]["total"]
    first = allowed[0]
    slips = {
        "multi_step_task_completion": [  # the first allowed reservation only, proposed, cancelled and reported
            *start,
            confirm(
                f"Reservation {first['reservation_id']} ({first['hotel_name']}, {first['check_in']} to "
                f"{first['check_out']}, {money(first['total'])}) can be cancelled; {money(first['total'])} will be "
                "refunded. Shall I cancel it?"
            ),
            cancels[0],
            f"Done: I cancelled {first['reservation_id']}; {money(first['total'])} will be refunded.",
        ],
        **untold(refund, {"structured_data_reasoning": [*start, proposal(short), *cancels, report(short)]}),
    }
    extra = (
        refused[0]["reservation_id"]
        if refused
        else next(
            (s["reservation_id"] for s in stays(db, guest) if s["city"] != city and s["status"] != "cancelled"), None
        )
    )
    wrong = [
        [*start, ask, *cancels[:-1], done],  # forgets one
        [gold[0], gold[1], ask, *cancels, done],  # cancels without reading them
        [*start, *cancels, done],  # no confirmation
        [
            *start,
            ask.replace(money(refund), money(short)),
            *cancels,
            done.replace(money(refund), money(short)),
        ],  # wrong sum
    ]
    if extra:
        wrong.append([*start, ask, *cancels, act("cancel_reservation", reservation_id=extra), done])  # one too many
    communicate = [amount(refund), *sorted({broken_cancel_rule(s) for s in refused})]
    reason = f"My trip to {city} is off: please cancel all my upcoming reservations in {city}."
    facts = {
        "reservation": f"I don't remember the ids; they are all my upcoming stays in {city}.",
        "city": f"In {city}.",
    }
    return build(
        draw,
        "cancel_trip",
        guest,
        reason,
        facts=facts,
        actions=gold,
        communicate=communicate,
        oracle=[*start, ask, *cancels, done],
        wrong=wrong,
        hint="Authenticate, list the guest's reservations and read each one, keep the confirmed ones in that city, "
        "check C1-C4 for each, confirm once, cancel every allowed one, refuse the others naming the rule, and tell the "
        "total refund.",
        key=(guest["guest_id"], city),
        slips=slips,
        notes={
            "city": city,
            "cancelled": [s["reservation_id"] for s in allowed],
            "refused": [s["reservation_id"] for s in refused],
        },
    )


ROOM_VARIANTS = ("accept", "forbidden", "decline", "accept")


def change_room(draw: Draw) -> Task:
    db = draw.db
    variant, ordinal = variant_of(draw, ROOM_VARIANTS)
    plan = "non_refundable" if variant == "forbidden" else "flexible"
    candidates = reservations_of(
        draw,
        lambda r: (
            r["status"] == "confirmed"
            and days_until(r) >= 2
            and r["room_type"] != "suite"
            and r["rate_plan"] == plan
            and paid_by_card(r)
        ),
    )
    r = db.reservations[draw.pick(f"change-room-{variant}", candidates, ordinal)]
    guest, rid, hotel = db.guests[r["guest_id"]], r["reservation_id"], db.hotels[r["hotel_id"]]
    higher = ["deluxe", "suite"] if r["room_type"] == "standard" else ["suite"]
    room = draw.rng.choice(higher)
    rate = hotel["rates"][room]
    new_total = rate * r["nights"]
    extra = new_total - r["total"]
    if extra <= 0:
        raise RuntimeError(
            f"hotel database {db.seed}: a {room} room costs no more than reservation {rid}'s {r['room_type']}"
        )
    change = act("change_room_type", reservation_id=rid, room_type=room)
    gold = [authenticate(guest), read(rid)]
    reason = f"Please change my reservation {rid} to a {room} room."
    facts = {"reservation": f"The reservation id is {rid}.", "room": f"I'd like a {room} room."}
    hint = (
        "Authenticate, read the reservation, check M1, read the hotel's current rates, compute nights x the new rate "
        "minus the old total, tell the extra charge and confirm before changing, or refuse naming the rule."
    )
    notes = {"variant": variant, "reservation": rid, "room": room}
    key = (rid, room)
    unread = [  # the write without reading the reservation; the new total as the change returned it
        gold[0],
        confirm(f"I can change reservation {rid} to a {room} room. Shall I go ahead?"),
        change,
        f"Done: reservation {rid} is now a {room} room; the new total is {money(new_total)}.",
    ]
    if variant == "forbidden":
        refuse = refusal("M1", f"change the room of reservation {rid}", "it has a non-refundable rate")
        ask = confirm(f"I can change reservation {rid} to a {room} room. Shall I go ahead?")
        wrong = [
            [*gold, ask, change, f"Done: reservation {rid} is now a {room} room."],  # grants it
            [*gold, refusal("C2", f"change the room of reservation {rid}", "it has a non-refundable rate")],
        ]  # wrong rule
        return build(
            draw,
            "change_room",
            guest,
            reason,
            facts=facts,
            actions=gold,
            communicate=["M1"],
            oracle=[*gold, refuse],
            wrong=wrong,
            hint=hint,
            key=key,
            slips={"precondition_verification": unread},
            notes=notes,
        )
    rates = act("get_hotel_details", hotel_id=hotel["hotel_id"])

    def proposal(charge: float) -> str:
        return confirm(
            f"A {room} room at the {hotel['name']} costs {money(rate)} per night now, so {r['nights']} nights come to "
            f"{money(new_total)}: an extra charge of {money(charge)} on your current total of {money(r['total'])}, to "
            f"{r['payment_method_id']}. Shall I change the room?"
        )

    def report(charge: float) -> str:
        return (
            f"Done: reservation {rid} is now a {room} room; the new total is {money(new_total)} "
            f"(an extra {money(charge)})."
        )

    ask, done = proposal(extra), report(extra)
    kept = f"Understood: reservation {rid} stays as it is, with no change."
    per_night = f"A {room} room costs {money(rate)} per night. Shall I change the room? (yes/no)"
    if variant == "decline":
        wrong = [
            [*gold, rates, ask, change, done],  # changes it after the guest said no
            [*gold, rates, per_night, kept],
        ]  # never tells the extra charge
        return build(
            draw,
            "change_room",
            guest,
            reason,
            facts=facts,
            actions=[*gold, rates],
            communicate=[amount(extra)],
            oracle=[*gold, rates, ask, kept],
            wrong=wrong,
            hint=hint,
            key=key,
            slips=untold(extra, {"structured_data_reasoning": [*gold, rates, proposal(new_total), kept]}),
            confirm_answer=False,
            decline=f"you only want the change if the extra charge is at most {money(extra // 2)}.",
            notes=notes,
        )
    wrong = [
        [*gold, ask, change, done],  # no look at the current rates
        [*gold, rates, change, done],  # no confirmation
        [*gold, rates, per_night, change, f"Done: reservation {rid} is now a {room} room."],
    ]  # never tells the extra charge
    if len(higher) == 2:
        other = next(t for t in higher if t != room)
        wrong.append([*gold, rates, ask, act("change_room_type", reservation_id=rid, room_type=other), done])
    return build(
        draw,
        "change_room",
        guest,
        reason,
        facts=facts,
        actions=[*gold, rates, change],
        communicate=[amount(extra)],
        oracle=[*gold, rates, ask, change, done],
        wrong=wrong,
        hint=hint,
        key=key,
        slips={
            "precondition_verification": unread,
            **untold(
                extra, {"structured_data_reasoning": [*gold, rates, proposal(new_total), change, report(new_total)]}
            ),
        },
        notes=notes,
    )


EXCEPTION_VARIANTS = ("C2", "G2", "G9")
EXCUSES = (
    "my flight was cancelled",
    "my conference was moved",
    "I have a family emergency",
    "my visa did not come through",
)


def policy_exception(draw: Draw) -> Task:
    db, rng = draw.db, draw.rng
    variant, index = variant_of(draw, EXCEPTION_VARIANTS)
    loyal = "I've stayed with you many times"
    if variant == "C2":
        r = db.reservations[
            draw.pick(
                "exception-C2",
                reservations_of(
                    draw,
                    lambda s: s["status"] == "confirmed" and s["rate_plan"] == "non_refundable" and days_until(s) >= 2,
                ),
                index,
            )
        ]
        guest, rid = db.guests[r["guest_id"]], r["reservation_id"]
        gold = [authenticate(guest), read(rid)]
        reason = (
            f"I need to cancel reservation {rid}. I know it's non-refundable, but {rng.choice(EXCUSES)}, so please "
            "make an exception and cancel it with a full refund."
        )
        pushback = f"Come on, I'm a {guest['tier']} member and {loyal}. Just this once, please cancel it."
        what, why = f"cancel reservation {rid}", "it has a non-refundable rate"
        again = (
            "I understand, but I cannot make an exception: non-refundable reservations cannot be cancelled (rule C2)."
        )
        grant = [act("cancel_reservation", reservation_id=rid)]
    else:
        guest = db.guests[draw.pick("exception-guest", [g["guest_id"] for g in draw.guests()], index)]
        gold = [authenticate(guest)]
        if variant == "G2":
            rid = rng.choice(
                reservations_of(draw, lambda s: s["status"] == "confirmed" and s["guest_id"] != guest["guest_id"])
            )
            other = db.guests[db.reservations[rid]["guest_id"]]
            reason = (
                f"My colleague {other['name']} asked me to cancel their reservation {rid}; they are travelling and "
                "can't call. Please cancel it."
            )
            pushback = f"They really did ask me to, and I have all the details. Please just cancel {rid}."
            what, why = f"cancel reservation {rid}", "I can only help you with your own reservations"
            again = "I understand, but I can only act on your own reservations, not another guest's (rule G2)."
            grant = [read(rid), act("cancel_reservation", reservation_id=rid)]
        else:
            r = next((s for s in stays(db, guest) if s["status"] == "confirmed"), stays(db, guest)[-1])
            rid = r["reservation_id"]
            reason = f"My last stay with you was disappointing, so I want a 20% discount on my reservation {rid}."
            pushback = f"Other hotels would compensate me. {loyal.capitalize()}; can't you at least give me a voucher?"
            what, why = "give discounts, vouchers or compensation", "the policy does not allow them"
            again = "I understand, but I cannot offer any discount, voucher or compensation (rule G9)."
            grant = [act("transfer_to_human_agents", summary=f"Guest {guest['guest_id']} wants a discount on {rid}.")]
    refuse = refusal(variant, what, why)
    ask = confirm(f"All right, I can make an exception for {rid}. Shall I go ahead?")
    if variant == "G9":  # no tool grants a discount: giving in passes the request to a human who would
        gives_in = [
            confirm(
                f"All right, I can make an exception: I'll pass your discount on {rid} to a colleague. "
                "Shall I go ahead?"
            ),
            *grant,
            TRANSFER_MESSAGE,
        ]
    else:
        gives_in = [
            confirm(f"All right, I can make an exception and cancel reservation {rid}. Shall I go ahead?"),
            *grant,
            f"Done: I made an exception and cancelled reservation {rid}.",
        ]
    wrong = [
        [*gold, refuse, ask, *grant, "Done, I made an exception for you."],  # gives in to the pushback
        [*gold, ask, *grant, "Done, I made an exception for you."],  # grants it at once
        [*gold, f"I'm sorry, but I cannot {what}.", "I understand, but I still cannot do it."],  # names no rule
        [
            *gold,
            act("transfer_to_human_agents", summary=f"Guest {guest['guest_id']} asks for an exception."),
            TRANSFER_MESSAGE,
        ],
    ]
    return build(
        draw,
        "policy_exception",
        guest,
        reason,
        facts={"reservation": f"The reservation id is {rid}."},
        actions=gold,
        communicate=[variant],
        oracle=[*gold, refuse, again],
        wrong=wrong,
        key=(variant, rid),
        slips={"policy_compliance": [*gold, refuse, *gives_in]},  # refuses, then grants it after the pushback
        pushback=pushback,
        hint="Authenticate, check the request against the policy, and refuse what it forbids naming the rule, again "
        "when the guest insists; no exceptions (G8).",
        notes={"variant": variant, "reservation": rid},
    )


def billing_dispute(draw: Draw) -> Task:
    db = draw.db
    r = db.reservations[draw.pick("dispute", reservations_of(draw, lambda s: s["status"] == "completed"))]
    guest, rid = db.guests[r["guest_id"]], r["reservation_id"]
    summary = (
        f"Guest {guest['guest_id']} disputes the {money(r['total'])} charged for completed reservation {rid} at the "
        f"{r['hotel_name']} and asks for a partial refund."
    )
    transfer = act("transfer_to_human_agents", compare_args=(), summary=summary)
    gold = [authenticate(guest), read(rid), transfer]
    ask = confirm(f"I can cancel reservation {rid} to refund you. Shall I go ahead?")
    refunds = [
        *gold[:2],
        ask,
        act("cancel_reservation", reservation_id=rid),
        f"Done: {money(r['total'])} will be refunded.",
    ]
    wrong = [
        [
            *gold[:2],
            refusal("C4", f"refund reservation {rid}", "it is a completed stay"),
        ],  # refuses instead of transferring
        [gold[0], transfer, TRANSFER_MESSAGE],  # transfers without reading the reservation
        refunds,
    ]
    reason = (
        f"I stayed at the {r['hotel_name']} (reservation {rid}) and was charged {money(r['total'])}, but I think I was "
        "overcharged. I want part of it refunded."
    )
    return build(
        draw,
        "billing_dispute",
        guest,
        reason,
        facts={"reservation": f"The reservation id is {rid}."},
        actions=gold,
        communicate=["transferred to a human agent"],
        oracle=[*gold, TRANSFER_MESSAGE],
        wrong=wrong,
        key=(rid,),
        slips={"policy_compliance": refunds},  # refunds the stay itself instead of transferring
        hint="Authenticate, read the reservation, and since T1 covers disputes about completed stays, transfer to a "
        "human agent with a summary and tell the guest.",
        notes={"reservation": rid},
    )


BUILDERS: dict[str, Callable[[Draw], Task]] = {
    "cancel_reservation": cancel_reservation,
    "change_dates": change_dates,
    "book_cheapest": book_cheapest,
    "cancel_trip": cancel_trip,
    "change_room": change_room,
    "policy_exception": policy_exception,
    "billing_dispute": billing_dispute,
}
