"""The TRL environment_factory adapter: tools as typed methods, reset from the row, reward on submit."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
from transformers.utils import get_json_schema

from tracegym.generation import render_chat
from tracegym.models import load_tokenizer
from tracegym.synth_envs.base import play
from tracegym.synth_envs.registry import make_env
from tracegym.synth_envs.trl_adapter import (
    final_answer_reward,
    tracegym_chat_template,
    trl_dataset,
    trl_environment_class,
)
from tracegym.toolcalls import parse_tool_calls


def _public_methods(instance: object) -> dict[str, object]:
    # the same discovery rule as trl.GRPOTrainer: functions on the class, minus reset/get_reward/_private
    return {
        name: getattr(instance, name)
        for name, _ in inspect.getmembers(type(instance), predicate=inspect.isfunction)
        if name not in ("reset", "get_reward") and not name.startswith("_")
    }


@pytest.mark.parametrize("family", ["tool_calling_precision", "error_recovery"])
def test_methods_are_the_tools_with_exact_schemas(family: str) -> None:
    instance = trl_environment_class(family)()
    methods = _public_methods(instance)
    env = make_env(family)
    assert set(methods) == {t["name"] for t in env.tools} | {"submit_answer"}
    for tool in env.tools:
        schema = get_json_schema(methods[tool["name"]])["function"]
        expected = tool.get("parameters", {}).get("properties", {})
        assert set(schema["parameters"]["properties"]) == set(expected)
        assert set(schema["parameters"].get("required", [])) == set(tool["parameters"].get("required", []))
        for name, spec in expected.items():
            assert schema["parameters"]["properties"][name]["type"] == spec["type"], (tool["name"], name)
            assert schema["parameters"]["properties"][name].get("enum") == spec.get("enum")


def test_methods_follow_the_tools_offered_at_the_knobs() -> None:
    methods = _public_methods(trl_environment_class("error_recovery", n_error_kinds=1)())
    assert set(methods) == {"track_package", "submit_answer"}


@pytest.mark.parametrize("family", ["tool_calling_precision", "error_recovery", "precondition_verification"])
def test_oracle_through_the_adapter_earns_the_env_reward(family: str) -> None:
    env = make_env(family)
    instance = trl_environment_class(family)()
    for seed in range(5):
        rows = trl_dataset(family, [seed])
        assert instance.reset(**rows[0]) == env.reset(seed)
        for turn in env.oracle(seed)[:-1]:
            for call in parse_tool_calls(turn).calls:
                getattr(instance, call.name)(**call.arguments)
        assert instance.get_reward() == 0.0  # nothing submitted yet
        instance.submit_answer(env.oracle(seed)[-1])
        assert instance.get_reward() == 1.0
        assert "episode is over" in instance.submit_answer("again")


def _trl_conversation(family: str, seed: int) -> tuple[list[dict], object]:
    """The oracle's episode as TRL builds it with answer_tool=False: the tracegym-prompt dataset row,
    each call parsed into `tool_calls` and answered by the adapter, the last turn plain text."""
    instance = trl_environment_class(family, answer_tool=False)()
    row = trl_dataset(family, [seed], tracegym_prompt=True)[0]
    messages = [*row["prompt"][:-1], {"role": "user", "content": instance.reset(**row)}]
    oracle = make_env(family).oracle(seed)
    for turn in oracle[:-1]:
        calls = parse_tool_calls(turn).calls
        messages.append(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in calls
                ],
            }
        )
        messages += [
            {"role": "tool", "name": c.name, "content": getattr(instance, c.name)(**c.arguments)} for c in calls
        ]
    messages.append({"role": "assistant", "content": oracle[-1]})
    return messages, instance


@pytest.mark.parametrize("family", ["precondition_verification", "error_recovery", "multi_step_task_completion"])
def test_trl_sees_the_conversation_tracegym_renders(family: str) -> None:
    tokenizer = load_tokenizer("smollm2-135m")
    trl_tokenizer = tracegym_chat_template(tokenizer)
    env = make_env(family)
    for seed in range(3):
        messages, instance = _trl_conversation(family, seed)
        dialogue, result = play(env, seed, env.oracle(seed))
        assert result.reward == 1.0
        assert trl_tokenizer.apply_chat_template(messages, tokenize=False) == tokenizer.decode(
            render_chat(tokenizer, dialogue, add_generation_prompt=False)
        )
        assert "submit_answer" not in dir(instance) and not hasattr(instance, "get_reward")
        assert final_answer_reward([messages[2:]], [instance]) == [1.0]


def test_final_answer_reward_scores_truncated_and_wrong_episodes() -> None:
    family = "precondition_verification"
    calls = make_env(family).oracle(0)[:-1]
    cut, cut_env = _trl_conversation(family, 0)  # ends on a tool result below: the turns ran out
    assert final_answer_reward([cut[2:-1]], [cut_env]) == [make_env(family).replay(0, [*calls, " "]).reward]
    wrong, wrong_env = _trl_conversation(family, 0)
    wrong[-1] = {"role": "assistant", "content": "no idea"}
    expected = make_env(family).replay(0, [*calls, "no idea"]).reward
    assert final_answer_reward([wrong[2:]], [wrong_env]) == [expected] and expected < 1.0
    tokenizer = tracegym_chat_template(load_tokenizer("smollm2-135m"))
    parsed = tokenizer.parse_response(
        '<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call><|im_end|>', prefix=""
    )
    assert parsed["tool_calls"][0]["function"] == {"name": "f", "arguments": {"a": 1}}


def test_bad_arguments_come_back_as_text_and_reset_needs_a_seed() -> None:
    instance = trl_environment_class("tool_calling_precision")()
    instance.reset(seed=1, prompt=[])
    assert instance.create_booking(
        room_id="RM-1", date="tomorrow", start_time="2pm", duration_minutes=30, attendee_ids=[], priority="high"
    ).startswith("error")
    assert "must be of type integer" in instance.create_booking(
        room_id="RM-1", date="2025-01-01", start_time="10:00", duration_minutes="30", attendee_ids=[], priority="high"
    )
    instance.submit_answer("Booked.")
    assert instance.get_reward() < 1.0
    with pytest.raises(ValueError, match="seed"):
        instance.reset(prompt=[])


def _one_step(folder) -> Any:
    """TRL's GRPOConfig for one CPU step of 2 rollouts of at most 8 tokens, logged."""
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=str(folder),
        max_steps=1,
        bf16=False,
        per_device_train_batch_size=2,
        num_generations=2,
        max_completion_length=8,
        report_to=[],
        use_cpu=True,
        logging_steps=1,
    )


def test_grpo_trainer_trains_a_step_on_the_environment(tmp_path, fresh_accelerate_state) -> None:
    from trl import GRPOTrainer
    from trl.chat_template_utils import qwen2_5_chat_template

    from tracegym.models import tiny_model

    model, tokenizer = tiny_model()
    # SmolLM2's own template cannot render tool calls; Qwen2.5's uses the same <|im_start|> tokens and
    # the Hermes <tool_call> format of tracegym.toolcalls, and TRL knows how to parse it.
    tokenizer.chat_template = qwen2_5_chat_template
    trainer = GRPOTrainer(
        model=model,
        args=_one_step(tmp_path),
        processing_class=tokenizer,
        train_dataset=trl_dataset("error_recovery", range(4)),
        environment_factory=trl_environment_class("error_recovery", n_packages=1),
    )
    names = {getattr(tool, "__name__", "") for tool in trainer.tools}
    assert {"track_package", "wait", "refresh_session", "submit_answer"} <= names
    assert "ErrorRecoveryTRLEnv" in trainer.reward_func_names
    trainer.train()
    logged = [entry for entry in trainer.state.log_history if "rewards/ErrorRecoveryTRLEnv/mean" in entry]
    assert logged and 0.0 <= logged[0]["rewards/ErrorRecoveryTRLEnv/mean"] <= 1.0


def test_grpo_trainer_trains_on_tracegym_conversations(tmp_path, fresh_accelerate_state) -> None:
    """answer_tool=False, the tracegym prompt and template: the plain-text turn is the scored answer."""
    from trl import GRPOTrainer

    from tracegym.models import tiny_model

    model, tokenizer = tiny_model()
    trainer = GRPOTrainer(
        model=model,
        args=_one_step(tmp_path),
        processing_class=tracegym_chat_template(tokenizer),
        train_dataset=trl_dataset("error_recovery", range(4), tracegym_prompt=True, n_packages=1),
        environment_factory=trl_environment_class("error_recovery", answer_tool=False, n_packages=1),
        reward_funcs=[final_answer_reward],
    )
    names = {getattr(tool, "__name__", "") for tool in trainer.tools}
    assert {"track_package", "wait", "refresh_session"} <= names and "submit_answer" not in names
    assert trainer.reward_func_names == ["final_answer_reward"]
    trainer.train()
    logged = [entry for entry in trainer.state.log_history if "rewards/final_answer_reward/mean" in entry]
    assert logged and 0.0 <= logged[0]["rewards/final_answer_reward/mean"] <= 1.0
