"""Token-labelled dialogues for router training and its held-out accuracy.

Each adapter's `artifact.json` names the environment it was trained on (family, knobs, seed
ranges). For adapter slot s, oracle dialogues of that environment (`synth_envs.base.play` of
`env.oracle(seed)`) are tokenised with the chat template and labelled s, in one of two ways
(`RouterTrainingConfig.labels`):

- "dialogue" (default): every token of the dialogue (the issue's "tokens of each capability
  environment's trajectories"). A conversation the router recognises then runs on its adapter
  from its prompt on, exactly as the adapter ran in training (LoRA on the prompt's keys and
  values too), so the mixture keeps the adapter's behaviour;
- "assistant": only the assistant turns' tokens (what the policy samples, through their
  end-of-turn token); the system prompt, task and tool responses are labelled base. Replies then
  attend to prompt keys and values the base computed, which the adapter never saw in training.

"Other text" labelled base, available offline: whole oracle dialogues of the environment
families no adapter covers (about as many dialogues in all as one adapter gets, spread over
those families). The last uncovered family in name order is held out of training, to measure
routing on a family the router never saw (it should go to the base). When every family has an
adapter there is no base text and the gates never pick the base. A family whose oracle cannot
be played here (code_repair where no code sandbox can be set up) is left out of the base text,
with a warning: the router is then trained without it, not refused.

The agent's own domain (`DomainText`, the loop's target environment): its oracle dialogues are
labelled base too, in training and held out, about as many as one adapter gets. Without them the
gates have never seen the agent's own conversations and may send them to an adapter trained on a
synthetic family, whose prompt format and behaviour replace the agent's there.

Seeds: training dialogues come from the start of each spec's `train_seeds`, held-out ones from
the start of its `eval_seeds`; base families use their default knobs and the EnvSpec defaults.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from transformers import PreTrainedTokenizerBase

from tracegym.adapters.sft import dialogue_tokens
from tracegym.moe_router.mixture import BASE_SLOT
from tracegym.schema import EnvSpec
from tracegym.synth_envs import sandbox
from tracegym.synth_envs.base import Environment, play
from tracegym.synth_envs.registry import families, get_family, make_env

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LabelledDialogue:
    """One dialogue's task (its first user message), token ids and the slot each token should be
    routed to; `slot` is the adapter slot of its environment (base for uncovered families)."""

    family: str
    seed: int
    slot: int
    task: str
    input_ids: list[int]
    labels: list[int]


@dataclass(frozen=True)
class RouterData:
    """Training and held-out dialogues; `heldout_family` is None when every family has an adapter;
    `domain` names the agent's own domain when its dialogues are in the base text."""

    train: list[LabelledDialogue]
    heldout: list[LabelledDialogue]
    base_families: list[str]
    heldout_family: str | None
    domain: str | None = None


@dataclass(frozen=True)
class DomainText:
    """The agent's own domain, left to the base: `env` (any environment with an oracle, e.g. the
    loop's target) and the seeds of its training and held-out dialogues."""

    name: str
    env: Environment
    train_seeds: Sequence[int]
    heldout_seeds: Sequence[int]


def oracle_dialogues(
    tokenizer: PreTrainedTokenizerBase,
    spec: EnvSpec,
    slot: int,
    seeds: Sequence[int],
    max_tokens: int,
    assistant_only: bool = False,
) -> list[LabelledDialogue]:
    """Oracle dialogues of `spec`'s environment on `seeds` (see `env_dialogues`)."""
    env = make_env(spec.family, **spec.knobs)
    return env_dialogues(tokenizer, env, spec.family, slot, seeds, max_tokens, assistant_only)


def env_dialogues(
    tokenizer: PreTrainedTokenizerBase,
    env: Environment,
    family: str,
    slot: int,
    seeds: Sequence[int],
    max_tokens: int,
    assistant_only: bool = False,
) -> list[LabelledDialogue]:
    """Oracle dialogues of `env` (named `family`) on `seeds`, cut at `max_tokens` tokens: every token
    labelled `slot`, or with `assistant_only` the assistant turns `slot` and the rest base."""
    dialogues = []
    for seed in seeds:
        messages, _ = play(env, seed, env.oracle(seed))
        tokens = dialogue_tokens(tokenizer, messages)
        labels = [slot if assistant or not assistant_only else BASE_SLOT for assistant in tokens["assistant_masks"]]
        task = messages[1].content
        dialogues.append(
            LabelledDialogue(family, seed, slot, task, tokens["input_ids"][:max_tokens], labels[:max_tokens])
        )
    return dialogues


def router_data(
    tokenizer: PreTrainedTokenizerBase,
    specs: Sequence[EnvSpec],
    train_dialogues: int,
    heldout_dialogues: int,
    max_tokens: int,
    assistant_only: bool = False,
    domain: DomainText | None = None,
) -> RouterData:
    """Labelled dialogues for adapters with environment `specs` (spec i is slot i + 1), with
    `domain`'s dialogues in the base text when given."""
    train, heldout = [], []
    for slot, spec in enumerate(specs, start=1):
        train += oracle_dialogues(
            tokenizer, spec, slot, _first(spec.train_seeds, train_dialogues), max_tokens, assistant_only
        )
        heldout += oracle_dialogues(
            tokenizer, spec, slot, _first(spec.eval_seeds, heldout_dialogues), max_tokens, assistant_only
        )
    covered = {spec.family for spec in specs}
    uncovered = [name for name in families() if name not in covered and _playable(name)]
    held_family = uncovered.pop() if uncovered else None
    for family in uncovered:  # base text: about as many dialogues in all as one adapter gets
        spec = EnvSpec(capability=family, family=family)
        train += oracle_dialogues(
            tokenizer, spec, BASE_SLOT, _first(spec.train_seeds, -(-train_dialogues // len(uncovered))), max_tokens
        )
        heldout += oracle_dialogues(
            tokenizer, spec, BASE_SLOT, _first(spec.eval_seeds, -(-heldout_dialogues // len(uncovered))), max_tokens
        )
    if held_family:
        spec = EnvSpec(capability=held_family, family=held_family)
        heldout += oracle_dialogues(tokenizer, spec, BASE_SLOT, _first(spec.eval_seeds, heldout_dialogues), max_tokens)
    if domain:
        for seeds, split in ((domain.train_seeds, train), (domain.heldout_seeds, heldout)):
            split += env_dialogues(tokenizer, domain.env, domain.name, BASE_SLOT, seeds, max_tokens)
    return RouterData(train, heldout, uncovered, held_family, domain.name if domain else None)


def _playable(family: str) -> bool:
    """Whether `family`'s oracle dialogues can be played here (False, with a warning, when its
    grading runs code and no code sandbox can be set up)."""
    problem = sandbox.unavailable() if get_family(family).runs_code else None
    if problem:
        logger.warning("router base text leaves out %s: %s", family, problem)
    return problem is None


def _first(seeds: tuple[int, int], count: int) -> range:
    """The first `count` seeds of the half-open range `seeds`."""
    return range(seeds[0], min(seeds[1], seeds[0] + count))
