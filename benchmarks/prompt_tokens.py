"""System-prompt tokens per family and knob setting, now vs before knob-specific prompts, as a ratio.

Rollouts on a CPU are dominated by prefill, and every turn of every episode re-reads the system
prompt, so its length is a direct cost. Counted with the embedded tokenizer
(`tracegym.models.load_tokenizer()`), at each family's default knobs and at every rung of its
ladder. "before" is the table below, recorded with `--record` at commit 3462f4b (every family
listing all its tools and rules at every setting); "now" is the current code.

    python benchmarks/prompt_tokens.py [--record]
"""

from __future__ import annotations

import argparse
import json

from tracegym.models import load_tokenizer
from tracegym.synth_envs.registry import families, knob_settings, make_env

BEFORE: dict[str, int] = {
    'causal_diagnosis {"effect_size": 0.4, "n_confounders": 2, "daily_impressions": 400000, "window_days": 7}': 434,
    'causal_diagnosis {"effect_size": 0.8, "n_confounders": 0, "daily_impressions": 400000, "window_days": 7}': 434,
    'causal_diagnosis {"effect_size": 0.6, "n_confounders": 1, "daily_impressions": 400000, "window_days": 7}': 434,
    'causal_diagnosis {"effect_size": 0.3, "n_confounders": 3, "daily_impressions": 400000, "window_days": 7}': 434,
    'code_repair {"n_functions": 5, "tests_per_function": 2}': 368,
    'code_repair {"n_functions": 2, "tests_per_function": 2}': 368,
    'code_repair {"n_functions": 4, "tests_per_function": 2}': 368,
    'code_repair {"n_functions": 6, "tests_per_function": 2}': 368,
    'code_repair {"n_functions": 8, "tests_per_function": 2}': 368,
    'code_repair {"n_functions": 11, "tests_per_function": 2}': 368,
    'error_recovery {"n_packages": 3, "failure_rate": 0.6, "max_failures": 2, "n_error_kinds": 4}': 269,
    'error_recovery {"n_packages": 1, "failure_rate": 0.5, "max_failures": 2, "n_error_kinds": 1}': 269,
    'error_recovery {"n_packages": 2, "failure_rate": 0.5, "max_failures": 2, "n_error_kinds": 2}': 269,
    'error_recovery {"n_packages": 5, "failure_rate": 0.8, "max_failures": 2, "n_error_kinds": 4}': 269,
    'error_recovery {"n_packages": 8, "failure_rate": 1.0, "max_failures": 3, "n_error_kinds": 4}': 269,
    'multi_step_task_completion {"n_items": 16, "n_operations": 3}': 590,
    'multi_step_task_completion {"n_items": 10, "n_operations": 2}': 590,
    'multi_step_task_completion {"n_items": 20, "n_operations": 4}': 590,
    'multi_step_task_completion {"n_items": 24, "n_operations": 5}': 590,
    'multi_step_task_completion {"n_items": 28, "n_operations": 6}': 590,
    'precondition_verification {"n_orders": 4, "forbidden_share": 0.5, "max_conditions": 3}': 565,
    'precondition_verification {"n_orders": 1, "forbidden_share": 0.5, "max_conditions": 1}': 565,
    'precondition_verification {"n_orders": 2, "forbidden_share": 0.5, "max_conditions": 2}': 565,
    'precondition_verification {"n_orders": 8, "forbidden_share": 0.5, "max_conditions": 3}': 565,
    'structured_data_reasoning {"n_customers": 24, "orders_per_customer": 4, "n_constraints": 2}': 295,
    'structured_data_reasoning {"n_customers": 8, "orders_per_customer": 4, "n_constraints": 1}': 295,
    'structured_data_reasoning {"n_customers": 16, "orders_per_customer": 4, "n_constraints": 1}': 295,
    'structured_data_reasoning {"n_customers": 36, "orders_per_customer": 4, "n_constraints": 3}': 295,
    'structured_data_reasoning {"n_customers": 48, "orders_per_customer": 4, "n_constraints": 4}': 295,
    'tool_calling_precision {"n_attendees": 2, "n_optional": 1, "n_lookalikes": 2}': 473,
    'tool_calling_precision {"n_attendees": 1, "n_optional": 0, "n_lookalikes": 0}': 473,
    'tool_calling_precision {"n_attendees": 1, "n_optional": 1, "n_lookalikes": 1}': 473,
    'tool_calling_precision {"n_attendees": 3, "n_optional": 2, "n_lookalikes": 3}': 473,
    'tool_calling_precision {"n_attendees": 4, "n_optional": 2, "n_lookalikes": 4}': 473,
}


def count() -> dict[str, int]:
    """Prompt tokens per "family knobs-json" label."""
    tokenizer = load_tokenizer()
    return {
        f"{family} {json.dumps(knobs)}": len(
            tokenizer(make_env(family, **knobs).system_prompt, add_special_tokens=False)["input_ids"]
        )
        for family in families()
        for knobs in knob_settings(family)
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", action="store_true", help="print the table to paste as BEFORE")
    args = parser.parse_args()
    now = count()
    if args.record:
        print(json.dumps(now, indent=4))
        return
    print(f"{'family':28s} {'knobs':60s} {'before':>6s} {'now':>5s} {'ratio':>6s}")
    for label, tokens in now.items():
        family, knobs = label.split(" ", 1)
        before = BEFORE.get(label)
        ratio = f"{tokens / before:6.2f}" if before else "   n/a"
        print(f"{family:28s} {knobs[:60]:60s} {before or '-':>6} {tokens:5d} {ratio}")
    paired = [(BEFORE[label], tokens) for label, tokens in now.items() if label in BEFORE]
    if paired:
        print(
            f"all settings: {sum(t for _, t in paired)} / {sum(b for b, _ in paired)} tokens = "
            f"{sum(t for _, t in paired) / sum(b for b, _ in paired):.2f} of before"
        )


if __name__ == "__main__":
    main()
