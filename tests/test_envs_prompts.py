"""System prompts carry the tools and rules the knobs need and no others, and never depend on the seed."""

from __future__ import annotations

import re

import pytest

from tracegym.synth_envs.registry import families, knob_settings, make_env
from tracegym.toolcalls import parse_tool_calls, render_tool_call

SEEDS = {"causal_diagnosis": range(4), "code_repair": range(3)}
# tools a family offers on purpose at every setting though no oracle calls them (its docstring says why)
AIDS = {"code_repair": {"list_files", "run_tests"}}


@pytest.mark.parametrize("family", sorted(families()))
def test_prompt_offers_the_tools_solutions_use_and_ignores_the_seed(family: str) -> None:
    for knobs in knob_settings(family):
        env = make_env(family, **knobs)
        env.verify = False  # the oracle checks would quietly discard episodes that need a tool not offered
        prompt, instructions, tools = env.system_prompt, env.instructions, env.tools
        offered, needed, aids = {tool["name"] for tool in tools}, set(), AIDS.get(family, set())
        assert aids <= offered, (family, knobs, aids - offered)
        for seed in SEEDS.get(family, range(20)):
            env.reset(seed)
            # the memoised prompt is keyed by knobs: what it is built from must not change with the episode
            assert (env.instructions, env.tools, env.system_prompt) == (instructions, tools, prompt), (
                family,
                knobs,
                seed,
            )
            for actions in [env.oracle(seed), *env.wrong_trajectories(seed)]:
                used = {call.name for turn in actions for call in parse_tool_calls(turn).calls}
                assert used <= offered, (family, knobs, seed, used - offered)
            needed |= {call.name for turn in env.oracle(seed) for call in parse_tool_calls(turn).calls}
            refused = re.match(r"REFUSED: (R\d)", env.oracle(seed)[-1])
            assert refused is None or f"{refused.group(1)}: " in prompt, (knobs, seed)
        # and nothing more: every other offered tool is one some episode at these knobs needs
        assert offered - aids <= needed, (family, knobs, offered - aids - needed)


def test_precondition_prompt_lists_only_the_rules_and_tools_of_its_requests() -> None:
    easy, full = make_env("precondition_verification", max_conditions=1), make_env("precondition_verification")
    assert "R1: " in easy.system_prompt and not any(f"R{k}: " in easy.system_prompt for k in (2, 3, 4))
    assert [t["name"] for t in easy.tools] == ["get_order", "cancel_order"]
    assert all(f"R{k}: " in full.system_prompt for k in (1, 2, 3, 4)) and len(full.tools) == 5
    assert [t["name"] for t in make_env("precondition_verification", max_conditions=2).tools] == [
        "get_order",
        "get_user",
        "cancel_order",
        "update_address",
    ]


def test_tools_not_offered_at_the_knobs_are_unknown() -> None:
    env = make_env("error_recovery", n_error_kinds=1)
    assert [t["name"] for t in env.tools] == ["track_package"]
    env.reset(0)
    assert "error: unknown tool 'wait'" in env.step(render_tool_call("wait", {"seconds": 5})).observation
    assert [t["name"] for t in make_env("error_recovery", n_error_kinds=2).tools] == ["track_package", "wait"]
    assert len(make_env("error_recovery").tools) == 3
