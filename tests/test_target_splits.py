"""The hotel desk's splits are disjoint in what they ask: no held-out task repeats the request of a
train task of its kind (`Task.request_key`), on the default splits and on larger ones."""

from __future__ import annotations

import pytest

from tracegym.eval.target import KINDS, TargetConfig, list_tasks
from tracegym.eval.target.database import database
from tracegym.eval.target.kinds import make_task

CONFIGS = {
    "default": TargetConfig(),
    "double": TargetConfig(train_tasks=140, heldout_tasks=84),
    "domain 7": TargetConfig(domain_seed=7),
}


@pytest.mark.parametrize("name", CONFIGS)
def test_no_heldout_task_repeats_a_train_request_of_its_kind(name: str) -> None:
    config = CONFIGS[name]
    train, heldout = list_tasks(config, "train"), list_tasks(config, "heldout")
    for kind in KINDS:
        asked = {t.request_key for t in train if t.kind == kind}
        repeats = [t.id for t in heldout if t.kind == kind and t.request_key in asked]
        assert not repeats, (kind, repeats)
        assert all(t.request_key for t in train + heldout if t.kind == kind), kind


@pytest.mark.parametrize("name", CONFIGS)
def test_the_request_key_holds_what_decides_the_answer(name: str) -> None:
    config = CONFIGS[name]
    db = database(config.domain_seed)
    tasks = list_tasks(config, "train") + list_tasks(config, "heldout")
    answers: dict[tuple[str, ...], str] = {}
    for task in tasks:
        key = task.request_key
        if task.kind == "book_cheapest":  # city, room type, the hotels meeting the star minimum
            notes = task.notes
            hotel = db.hotels[notes["hotel"]]
            fitting = sorted(h["hotel_id"] for h in db.hotels_in(hotel["city"]) if h["stars"] >= notes["stars"])
            assert key == (hotel["city"], notes["room"], *fitting)
            assert answers.setdefault(key, notes["hotel"]) == notes["hotel"], "one key, one answer"
            continue
        # the records the request is about: reservations, or a guest (a trip: the guest and a city)
        guests = {db.reservations[part]["guest_id"] for part in key if part in db.reservations}
        guests |= {part for part in key if part in db.guests}
        assert guests, (task.id, key)
        assert guests | {task.guest_id} <= set(db.pool(task.split)), "the records come from the split's own guests"


def test_the_three_heldout_book_cheapest_repeats_of_train_tasks_are_redrawn() -> None:
    config = TargetConfig()
    train = {t.seed: t for t in list_tasks(config, "train")}
    heldout = [t for t in list_tasks(config, "heldout") if t.kind == "book_cheapest"]
    db = database(config.domain_seed)

    def asked(task) -> tuple[str, str, int]:
        return db.hotels[task.notes["hotel"]]["city"], task.notes["room"], task.notes["stars"]

    # the train tasks stay as they were (the held-out draws used to repeat these three)
    assert asked(train[16]) == ("Cape Town", "deluxe", 3) and train[16].notes["hotel"] == "camps_bay_sands"
    assert asked(train[23]) == ("Lisbon", "standard", 3) and train[23].notes["hotel"] == "belem_garden"
    assert asked(train[58]) == ("Austin", "deluxe", 3) and train[58].notes["hotel"] == "congress_avenue_lofts"
    assert len(heldout) == 6
    assert not {asked(t) for t in heldout} & {asked(t) for t in train.values() if t.kind == "book_cheapest"}


def test_heldout_draws_are_deterministic_and_depend_on_the_train_split_they_avoid() -> None:
    config = CONFIGS["double"]
    first = [(t.id, t.request, t.oracle) for t in list_tasks(config, "heldout")]
    assert first == [(t.id, t.request, t.oracle) for t in list_tasks(config, "heldout")]
    db = database(0)
    small = make_task(db, 1_000_016, 7)  # beside one train task of each kind it need not be redrawn
    assert small.request_key != make_task(db, 1_000_016, 70).request_key
    with pytest.raises(RuntimeError, match="repeats a request of the first 1400 train tasks"):
        make_task(db, 1_000_002, 1400)  # 200 train book_cheapest tasks ask all 18 requests there are
