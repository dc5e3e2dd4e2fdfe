"""The code-repair sandbox contains hostile submissions; each is stopped and scored 0 with its reason."""

from __future__ import annotations

import os
import socket
import uuid

import pytest

from tracegym.synth_envs.base import play
from tracegym.synth_envs.registry import make_env
from tracegym.synth_envs.sandbox import network_namespace_available, run_tests
from tracegym.toolcalls import render_tool_call

TESTS = "from mod import f\n\ndef test_one():\n    assert f(1) == 2\n\ndef test_two():\n    assert f(2) == 3\n"


def _run(body: str, **limits: float) -> object:
    return run_tests({"mod.py": body, "test_mod.py": TESTS}, "test_mod", **limits)


def test_a_clean_run_reports_each_test() -> None:
    result = _run("def f(x):\n    return x + 1\n")
    assert result.ok and sorted(result.passed) == ["test_one", "test_two"] and not result.failed
    broken = _run("def f(x):\n    return x + 2\n")
    assert broken.ok and sorted(broken.failed) == ["test_one", "test_two"]
    assert "AssertionError" in broken.failed["test_one"]


def test_infinite_loop_is_killed() -> None:
    result = _run("def f(x):\n    while True:\n        pass\n", timeout_s=1.5)
    assert not result.ok and result.status == "timeout" and "killed after" in result.reason


def test_memory_bomb_is_stopped() -> None:
    result = _run("def f(x):\n    block = bytearray(8 * 2**30)\n    return x + 1\n")
    assert not result.ok and "memory limit" in result.reason


def test_write_outside_the_directory_is_refused() -> None:
    target = f"/tmp/tracegym-escape-{uuid.uuid4().hex}.txt"
    result = _run(f"def f(x):\n    open({target!r}, 'w').write('pwned')\n    return x + 1\n")
    assert not result.ok and "write outside the sandbox" in result.reason
    assert not os.path.exists(target)


def test_sockets_are_refused() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    try:
        result = _run(f"import socket\ndef f(x):\n    socket.create_connection(('127.0.0.1', {port}), timeout=1)\n    return x + 1\n")
    finally:
        listener.close()
    assert not result.ok and "network access" in result.reason


def test_spawning_processes_is_refused() -> None:
    marker = f"/tmp/tracegym-spawn-{uuid.uuid4().hex}"
    result = _run(f"import os\ndef f(x):\n    os.system('touch {marker}')\n    return x + 1\n")
    assert not result.ok and "process spawning" in result.reason and not os.path.exists(marker)


def test_output_flood_and_silent_exit_leave_no_passing_report() -> None:
    flood = _run("import sys\ndef f(x):\n    while True:\n        sys.stdout.write('x' * 65536)\n", timeout_s=5)
    assert not flood.ok and not flood.passed
    exit_early = _run("import os\nos._exit(0)\n")
    assert not exit_early.ok and exit_early.status == "no_report"


def test_network_namespace_is_used_when_available() -> None:
    result = _run("def f(x):\n    return x + 1\n")
    assert result.isolation == ("netns+rlimits+audit" if network_namespace_available() else "rlimits+audit")


@pytest.mark.parametrize("payload, reason", [
    ("while True:\n        pass", "timeout"),
    ("block = bytearray(8 * 2**30)", "memory limit"),
    ("open('/tmp/tracegym-escape.txt', 'w').write('x')", "write outside the sandbox"),
    ("__import__('socket').socket().connect(('10.255.255.1', 80))", "network access"),
])
def test_hostile_fix_in_code_repair_scores_zero_with_reason(payload: str, reason: str) -> None:
    env = make_env("code_repair")
    env.sandbox_timeout_s = 2.0  # keeps the infinite-loop case short
    seed = 0
    oracle = env.oracle(seed)
    bad_line, good_line = env._fresh(seed).world.fix
    indent = good_line[: len(good_line) - len(good_line.lstrip())]
    hostile = indent + payload.replace("\n", "\n" + indent) + "\n" + good_line
    edit = render_tool_call("replace_in_file", {"path": "utils.py", "old": bad_line, "new": hostile})
    _, result = play(env, seed, [oracle[0], edit, "Fixed."])
    assert result.reward == 0.0
    assert reason in result.info["reward_breakdown"]["stopped"]
