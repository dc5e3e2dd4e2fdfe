"""Domain registration: declaration files (TOML, JSON) and their errors, Python domains, entry
points, `tracegym diagnose --domain`, the report's domain lines, and the hotel desk diagnosed
through the same registration."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable, Iterator
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest
from tau_runs import Run

from tracegym.analysis.detect_tau import detect
from tracegym.analysis.rules import DOMAINS, DomainError, domain_for, load_domain, register, registry
from tracegym.analysis.rules.declared import declare
from tracegym.analysis.rules.domain import GENERIC
from tracegym.cli import main
from tracegym.eval.target import TargetConfig, list_tasks, make_target, play_turns, write_runs
from tracegym.eval.target.handbook import HANDBOOK
from tracegym.eval.target.tasks import Task
from tracegym.schema import LabelValue, Trajectory, write_jsonl

FIXTURES = Path(__file__).parent / "fixtures" / "domains"
LIBRARY = FIXTURES / "library.toml"
POLICY = (FIXTURES / "library_policy.md").read_text(encoding="utf-8")
LOAN = {"loan_id": "L100", "member_id": "m1", "title": "Dune", "status": "active", "renewals": 0, "due": "2024-05-20"}
L = LabelValue.LACKING


@pytest.fixture
def library() -> Iterator:
    """The library domain registered from its declaration, and unregistered afterwards."""
    domain = register(load_domain(LIBRARY), replace_registered=True)
    yield domain
    registry.unregister("library")


def member(policy: str = POLICY) -> Run:
    return (
        Run("library", policy)
        .user("Hi, I'm Ana (member m1).")
        .call("find_member", {"member_id": "m1"}, email="ana@example.com")
    )


def renewal(loan: dict | None = None, due: str = "2024-06-03", read: bool = True, policy: str = POLICY) -> Run:
    loan = loan or LOAN
    run = member(policy).user("Please renew my loan L100.")
    if read:
        run.call("get_loan", loan, loan_id="L100")
    run.say(f"Loan L100 (Dune) can be renewed to {due}. Shall I renew it? (yes/no)").user("yes")
    run.call("renew_loan", {**loan, "due": due}, loan_id="L100", new_due_date=due)
    return run.say(f"Done: L100 is now due {due}.")


def finished(run: Run, success: bool = False) -> Trajectory:
    return run.trajectory([], [], success=success, task="renew")


def lacking(trajectory: Trajectory) -> dict[str, str]:
    """The LACKING capabilities with their evidence quotes joined."""
    return {
        name: " | ".join(e.quote for e in verdict.evidence)
        for name, verdict in detect(trajectory).items()
        if verdict.value == L
    }


# -- registration ---------------------------------------------------------------------------------


def test_built_in_domains_are_registered_and_others_fall_back_to_generic() -> None:
    assert {"airline", "retail", "telecom"} <= DOMAINS.keys()
    for name in ("airline", "retail", "telecom"):
        assert DOMAINS[name].origin == "built-in"
        assert DOMAINS[name].reads and not DOMAINS[name].reads & DOMAINS[name].writes
        assert "transfer_to_human_agents" not in DOMAINS[name].reads | DOMAINS[name].writes
    assert domain_for(Run("airline").trajectory([], [])) is DOMAINS["airline"]
    assert domain_for(Run("no_such_domain").trajectory([], [])) is GENERIC
    with pytest.raises(DomainError, match="already registered"):
        register(declare({"name": "airline", "tools": {"write": ["x"]}}, "inline"))


def test_a_declaration_file_becomes_the_domain_it_declares(library) -> None:
    assert library.writes == {"renew_loan", "return_book", "reserve_book"}
    assert library.reads == {"find_member", "get_loan", "search_catalogue"}
    assert library.record_keys == ("loan_id", "member_id")
    assert library.origin == str(LIBRARY)
    assert all(sentence in POLICY for sentence in library.sentences())
    assert domain_for(finished(renewal())) is library


def test_json_declares_what_toml_does(tmp_path: Path) -> None:
    data = tomllib.loads(LIBRARY.read_text(encoding="utf-8"))
    data["policy_file"] = str(FIXTURES / "library_policy.md")
    (tmp_path / "library.json").write_text(json.dumps(data), encoding="utf-8")
    from_json, from_toml = load_domain(tmp_path / "library.json"), load_domain(LIBRARY)
    assert from_json.sentences() == from_toml.sentences()
    assert (from_json.writes, from_json.reads, from_json.record_keys) == (
        from_toml.writes,
        from_toml.reads,
        from_toml.record_keys,
    )


def test_a_python_domain_loads_from_a_file_or_a_module_attribute(tmp_path: Path) -> None:
    coded = load_domain(FIXTURES / "library_rules.py")
    assert coded.name == "library" and len(coded.conversation_rules) == len(load_domain(LIBRARY).conversation_rules) + 1
    run = member()
    for book in ("b1", "b2", "b3", "b4"):
        run.call("search_catalogue", [{"book_id": book, "title": book}], query=book)
        run.say(f"Shall I reserve {book}? (yes/no)").user("yes").call("reserve_book", {"ok": True}, book_id=book)
    register(coded, replace_registered=True)
    try:
        assert "L10 A member holds at most 3" in lacking(finished(run))["policy_compliance"]
    finally:
        registry.unregister("library")
    assert load_domain("tracegym.eval.target.diagnosis_rules:DOMAIN").name == "hotel"


def test_the_hotel_desk_registers_through_its_entry_point() -> None:
    hotel = registry.lookup("hotel")
    assert hotel is not None, "no tracegym.domains entry point named hotel: run `pip install --no-deps -e .`"
    assert str(Path("eval", "target", "domain.toml")) in hotel.origin and "entry point hotel" in hotel.origin
    assert all(sentence.lower() in HANDBOOK.lower() for sentence in hotel.sentences())


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("tracegym_no_such_module:DOMAIN", "cannot be loaded (ModuleNotFoundError"),
        ("json:dumps", "is a function, not a tracegym Domain"),
        ("tracegym.eval.target.diagnosis_rules:DOMAIN", "its Domain is named 'hotel', not 'plugin'"),
    ],
)
def test_a_broken_entry_point_is_named(monkeypatch: pytest.MonkeyPatch, value: str, problem: str) -> None:
    point = EntryPoint(name="plugin", value=value, group=registry.ENTRY_POINTS)
    monkeypatch.setattr(registry, "entry_points", lambda group: [point] if group == registry.ENTRY_POINTS else [])
    try:
        with pytest.raises(DomainError, match="entry point plugin") as raised:
            domain_for(Run("plugin").trajectory([], []))
        assert problem in str(raised.value)
    finally:
        registry.unregister("plugin")


# -- declaration errors ---------------------------------------------------------------------------

BROKEN = [
    ('name = "library"', 'name = "library"\ncolour = "red"', "unknown key 'colour'"),
    ('tool = "find_member"', 'tool = "find_member"\ntols = 1', "rules[0] (call_first): unknown key 'tols'"),
    ('record_keys = ["loan_id", "member_id"]', "record_keys = 3", "record_keys: expected a list or a string"),
    ('name = "library"\n', "", "name: missing (required)"),
    ("pattern = '\\d{4}-\\d{2}-\\d{2}'", "pattern = '\\d{4}-('", "does not compile"),
    (
        'read = ["find_member", ',
        'read = ["renew_loan", "find_member", ',
        "'renew_loan' is listed as both read and write",
    ),
    ('name = "library"', 'name = "library', "not a valid TOML file"),
    ('kind = "call_first"', 'kind = "call_frist"', "unknown kind 'call_frist'"),
    ('read = ["get_loan"]', 'read = ["get_loans"]', "'get_loans' is not a declared read tool"),
    ('"L6 Never waive late fees."', '"L6 Never waive fees."', "'L6 Never waive fees.' does not occur in the policy"),
    ('not_in = ["active"] }', 'not_in = ["active"], in = ["lost"] }', "needs exactly one test"),
    ('policy_file = "library_policy.md"', 'policy_file = "nope.md"', "policy_file: cannot read"),
    ('tool = "find_member"', 'tool = "find_member"\ncapability = "speed"', "unknown capability 'speed'"),
    ("return_book = [", "get_loan = [", "confirmation.details.get_loan: not a declared write tool"),
    ("outside = [0, 1]", 'outside = [0, "1"]', "expected [LOW, HIGH], two numbers"),
    (
        'writes = ["reserve_book"]',
        'writes = "reserve_book"\nextra = true',
        "rules[7] (argument_seen): unknown key 'extra'",
    ),
]


@pytest.mark.parametrize(("old", "new", "problem"), BROKEN, ids=[b[2][:40] for b in BROKEN])
def test_a_broken_declaration_names_the_file_and_what_is_wrong(
    tmp_path: Path, old: str, new: str, problem: str
) -> None:
    text = LIBRARY.read_text(encoding="utf-8")
    assert old in text
    (tmp_path / "library_policy.md").write_text(POLICY, encoding="utf-8")
    path = tmp_path / "broken.toml"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    with pytest.raises(DomainError) as raised:
        load_domain(path)
    message = str(raised.value)
    assert message.startswith(f"{path}: ") and problem in message, message


@pytest.mark.parametrize(
    ("name", "content", "problem"),
    [
        ("broken.json", "{", "not a valid JSON file"),
        ("rules.yaml", "", "a domain is a .toml, .json or .py file, or module:attribute"),
        ("empty.py", "X = 1\n", "defines no Domain; name the one to use DOMAIN"),
        ("raises.py", "1 / 0\n", "failed to run (ZeroDivisionError"),
    ],
)
def test_a_broken_domain_file_names_itself(tmp_path: Path, name: str, content: str, problem: str) -> None:
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    with pytest.raises(DomainError, match=name) as raised:
        load_domain(path)
    assert problem in str(raised.value)


def test_a_broken_module_attribute_is_named() -> None:
    with pytest.raises(DomainError, match="cannot import tracegym_no_such_module"):
        load_domain("tracegym_no_such_module:DOMAIN")
    with pytest.raises(DomainError, match="has no attribute 'NOPE'"):
        load_domain("tracegym.eval.target.diagnosis_rules:NOPE")


# -- the declared rules on a user's domain ---------------------------------------------------------


def test_runs_that_keep_the_rules_have_no_finding(library) -> None:
    assert lacking(finished(renewal(), success=True)) == {}


RENEWAL_MISTAKES: list[tuple[str, Callable[[], Run], str, str]] = [
    ("unread loan", lambda: renewal(read=False), "precondition_verification", "L3 Read the loan"),
    ("not active", lambda: renewal({**LOAN, "status": "overdue"}), "policy_compliance", "status is 'overdue'"),
    ("third renewal", lambda: renewal({**LOAN, "renewals": 2}), "policy_compliance", "renewals is 2, outside 0-1"),
    ("date in words", lambda: renewal(due="June 3"), "tool_calling_precision", "L4 Due dates are written"),
    (
        "write before identifying",
        lambda: (
            Run("library", POLICY)
            .user("Renew L100")
            .call("renew_loan", LOAN, loan_id="L100", new_due_date="2024-06-03")
        ),
        "policy_compliance",
        "renew_loan before find_member",
    ),
    (
        "no yes",
        lambda: (
            member()
            .call("get_loan", LOAN, loan_id="L100")
            .call("renew_loan", LOAN, loan_id="L100", new_due_date="2024-06-03")
        ),
        "precondition_verification",
        "without an explicit yes",
    ),
    (
        "fee waived",
        lambda: renewal().say("Also, I've waived the late fee on your last loan."),
        "policy_compliance",
        "L6 Never waive late fees",
    ),
    (
        "fee misstated",
        lambda: (
            member()
            .call("get_loan", {**LOAN, "due": "2024-05-01"}, loan_id="L100")
            .say("Returning L100 (Dune) costs a late fee of $3.00. Shall I return it? (yes/no)")
            .user("yes")
            .call("return_book", {**LOAN, "status": "returned", "fee_charged": 4.5}, loan_id="L100")
        ),
        "structured_data_reasoning",
        "states 3.00 where the writes come to 4.50",
    ),
    (
        "book not searched",
        lambda: (
            member()
            .user("Reserve book b7 for me.")
            .say("Shall I reserve b7? (yes/no)")
            .user("yes")
            .call("reserve_book", {"ok": True}, book_id="b7")
        ),
        "tool_calling_precision",
        "book_id='b7' appears in no earlier tool result",
    ),
    (
        "transfer for an active loan",
        lambda: member().call("get_loan", LOAN, loan_id="L100").call("transfer_to_human_agents", "ok", summary="help"),
        "policy_compliance",
        "transfer the policy does not call for",
    ),
]


@pytest.mark.parametrize(
    ("name", "build", "capability", "quote"), RENEWAL_MISTAKES, ids=[m[0] for m in RENEWAL_MISTAKES]
)
def test_each_declared_rule_names_its_mistake(library, name: str, build, capability: str, quote: str) -> None:
    found = lacking(finished(build()))
    assert quote in found.get(capability, ""), found


def test_negations_and_allowed_transfers_are_no_finding(library) -> None:
    refused = renewal().say("I'm sorry, but I cannot waive the late fee (rule L6).")
    assert lacking(finished(refused, success=True)) == {}
    lost = member().call("get_loan", {**LOAN, "status": "lost"}, loan_id="L100")
    assert "policy_compliance" not in lacking(finished(lost.call("transfer_to_human_agents", "ok", summary="lost")))


def test_a_rule_applies_only_under_a_policy_that_holds_its_sentence(library) -> None:
    without_l2 = "\n".join(line for line in POLICY.splitlines() if not line.startswith("- L2"))
    assert "policy_compliance" not in lacking(finished(renewal({**LOAN, "status": "overdue"}, policy=without_l2)))


def test_an_unregistered_domain_gets_the_generic_checks() -> None:
    assert lacking(finished(renewal(read=False))) == {}  # no record keys: an unread loan goes unnoticed


# -- the command line and the report ---------------------------------------------------------------


def test_diagnose_takes_domain_files_and_reports_the_rules_applied(tmp_path: Path, capsys) -> None:
    runs = tmp_path / "trajectories.jsonl"
    without_l7 = "\n".join(line for line in POLICY.splitlines() if not line.startswith("- L7"))
    write_jsonl(
        [finished(renewal(), success=True), finished(renewal(read=False)), finished(renewal(policy=without_l7))], runs
    )
    try:
        assert main(["diagnose", str(runs), "--domain", str(LIBRARY), "--out", str(tmp_path / "declared")]) == 0
    finally:
        registry.unregister("library")
    assert f"domain library: rules from {LIBRARY}" in capsys.readouterr().out
    report = (tmp_path / "declared" / "report.md").read_text(encoding="utf-8")
    assert f"- `library`, 3 runs: the domain's rules (9 policy sentences) from {LIBRARY}" in report
    assert "not applied" not in report  # two of the runs' policies hold L7
    assert main(["diagnose", str(runs), "--out", str(tmp_path / "generic")]) == 0
    generic = (tmp_path / "generic" / "report.md").read_text(encoding="utf-8")
    assert "- `library`, 3 runs: no rules registered for this domain, so the generic checks applied" in generic


def test_diagnose_reports_rules_no_run_could_apply(tmp_path: Path) -> None:
    runs = tmp_path / "trajectories.jsonl"
    without_l7 = "\n".join(line for line in POLICY.splitlines() if not line.startswith("- L7"))
    write_jsonl([finished(renewal(policy=without_l7))], runs)
    try:
        assert main(["diagnose", str(runs), "--domain", str(LIBRARY), "--out", str(tmp_path / "out")]) == 0
    finally:
        registry.unregister("library")
    report = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    assert (
        "  - not applied, no run's policy holds: “L7 When a late book is returned, tell the member the fee charged.”"
        in report
    )


def test_diagnose_refuses_a_broken_domain_file(tmp_path: Path, capsys) -> None:
    runs = tmp_path / "trajectories.jsonl"
    write_jsonl([finished(renewal())], runs)
    broken = tmp_path / "broken.toml"
    broken.write_text('name = "library"\n[tools]\nwrite = 3\n', encoding="utf-8")
    assert main(["diagnose", str(runs), "--domain", str(broken), "--out", str(tmp_path / "out")]) == 1
    assert f"{broken}: tools.write: expected a list or a string, got an integer 3" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


# -- the hotel desk through the registration -------------------------------------------------------


@pytest.fixture(scope="module")
def hotel_tasks() -> list[Task]:
    return list_tasks(TargetConfig(), "train")


def hotel_runs(tmp_path: Path, plays: list[tuple[Task, list[str]]]) -> list[Trajectory]:
    """The episodes of scripted `plays`, written as the loop writes runs and read back."""
    env = make_target(TargetConfig())
    records = [play_turns(env, task.seed, list(turns), trial) for trial, (task, turns) in enumerate(plays)]
    return write_runs(env, records, tmp_path / "results.json", tmp_path / "trajectories.jsonl")


def test_the_hotel_oracle_breaks_no_rule(tmp_path: Path, hotel_tasks: list[Task]) -> None:
    runs = hotel_runs(tmp_path, [(task, list(task.oracle)) for task in hotel_tasks])
    assert {domain_for(t).name for t in runs} == {"hotel"}
    assert {t.id: lacking(t) for t in runs if lacking(t)} == {}


def wrong_play(
    tasks: list[Task], kind: str, test: Callable[[str], bool], variant: str | None = None
) -> tuple[Task, list[str]]:
    """The first train task of `kind` (and `variant`) with a wrong trajectory one of whose turns passes `test`."""
    for task in tasks:
        if task.kind == kind and variant in (None, task.notes.get("variant")):
            for turns in task.wrong:
                if any(test(turn) for turn in turns):
                    return task, list(turns)
    raise AssertionError(f"no wrong trajectory of {kind} passes the test")


HOTEL_MISTAKES = [
    ("cancel_reservation", "C2", lambda t: "cancel_reservation" in t, "policy_compliance", "C2 Non-refundable"),
    (
        "change_dates",
        None,
        lambda t: "modify_reservation_dates" in t and ", 20" in t,
        "tool_calling_precision",
        "Dates are YYYY-MM-DD",
    ),
    ("billing_dispute", None, lambda t: "(rule C4)" in t, "policy_compliance", "T1 Disputes about the charges"),
    ("policy_exception", "G9", lambda t: "exception for" in t, "policy_compliance", "G8 No exceptions"),
]


@pytest.mark.parametrize(
    ("kind", "variant", "test", "capability", "quote"), HOTEL_MISTAKES, ids=[m[0] for m in HOTEL_MISTAKES]
)
def test_the_hotel_rules_name_the_rule_broken(
    tmp_path: Path, hotel_tasks: list[Task], kind, variant, test, capability, quote
) -> None:
    (run,) = hotel_runs(tmp_path, [wrong_play(hotel_tasks, kind, test, variant)])
    assert quote in lacking(run).get(capability, ""), lacking(run)
