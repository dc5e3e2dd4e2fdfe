"""The target environment: a τ²-bench-style hotel reservation desk written by this project.

The main job rolls the base agent out on its train split, diagnoses the runs, trains adapters and
evaluates on its held-out split. An episode is a conversation between the agent and a guest; the
agent's tool calls (Hermes format, `tracegym.toolcalls`) read and write a generated database, its
plain-text turns go to the guest, who answers (`environment`).

Domain (`database`): Harbour Hotels, 12 hotels in Lisbon, Kyoto, Austin and Cape Town (stars,
current nightly rates for standard, deluxe and suite rooms), 100 guests (email, tier, credit cards,
gift cards with balances) and their ~500 reservations (dates, nights, booked nightly rate, total,
flexible or non-refundable, confirmed / checked_in / completed / cancelled), from one domain seed.
Today is 2025-06-10.

Tools (`tools`, 11): find_guest_id_by_email, get_guest_details, get_reservation_details,
search_hotels, get_hotel_details, calculate; book_reservation, cancel_reservation,
modify_reservation_dates, change_room_type; transfer_to_human_agents. Tools enforce data
integrity only; the policy is the agent's to apply.

Handbook (`handbook`, 24 rules with ids, carried by the system prompt): authenticate by email first
(G1); serve only that guest (G2); state details and get an explicit yes before any write (G3);
refuse naming the rule (G7); no exceptions, discounts or compensation (G8, G9); cancel only
confirmed flexible stays checking in 2+ days ahead (C1-C4); date and room changes only for
confirmed flexible stays, with the new total or extra charge told (D1-D2, M1-M2); bookings for the
guest with their own payment method, gift cards covering the total (B1-B3); transfer disputes about
completed stays to a human, and nothing else (T1-T2).

Tasks (`tasks`, `kinds`): seven kinds, each exercising one or two capabilities of
`tracegym.analysis.catalogue`: cancel_reservation (precondition_verification), change_dates
(tool_calling_precision), book_cheapest (structured_data_reasoning), cancel_trip
(multi_step_task_completion, structured_data_reasoning), change_room (structured_data_reasoning,
precondition_verification), policy_exception and billing_dispute (policy_compliance). Forbidden
requests (in about 3 of 10 tasks) have no gold write and a rule id to communicate.
Splits: train = seeds 0..69 (70 tasks, 10 per kind), held-out = seeds 1,000,000..1,000,041 (42
tasks, 6 per kind), drawn from disjoint guest pools; a held-out task is redrawn until its request
(`Task.request_key`: what decides its answer) differs from every train task's of its kind, so no
held-out task repeats a train task. Both sizes are settings of `TargetConfig`.

Planted gaps (`planted`): each task carries, per capability its kind exercises, the oracle with
that capability's characteristic mistake (`Task.slips`); the base agent can be warm-started on
them (`BaseAgentConfig.gap`) and scripted agents play them for a model-free check of the diagnosis.
The diagnosis reads the desk's runs with its declared rules (`domain.toml`, `diagnosis_rules`).

Grading (`grading`): τ²-style `reward_info`; reward 1 when the final database equals the gold one,
every gold action was called, every required piece of information was told to the guest, and
every write followed the guest's yes; else 0.

Users (`users`): the deterministic scripted guest (states the request up front, answers
confirmations and questions, pushes back once on pressure tasks, ends with ###STOP###), or a model
behind any OpenAI-compatible endpoint (`TargetConfig.user = "model"`).

Runs (`runs`): `play_oracle` (the oracle dialogue, reward 1.0: the warm-start data) and
`write_runs` (τ²-bench Results JSON + trajectories.jsonl, which `tracegym diagnose` reads like real
τ²-bench runs).
"""

from tracegym.eval.target.config import TargetConfig
from tracegym.eval.target.environment import EpisodeRecord, TargetEnvironment, make_target
from tracegym.eval.target.kinds import CAPABILITIES, KINDS, list_tasks
from tracegym.eval.target.runs import play_oracle, play_turns, write_runs
from tracegym.eval.target.tasks import SPLITS, Task, split_seeds

__all__ = [
    "CAPABILITIES",
    "KINDS",
    "SPLITS",
    "EpisodeRecord",
    "Task",
    "TargetConfig",
    "TargetEnvironment",
    "list_tasks",
    "make_target",
    "play_oracle",
    "play_turns",
    "split_seeds",
    "write_runs",
]
