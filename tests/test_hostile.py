"""Issue 12: hostile submissions to the code-repair environment, and runaway SQL.

Every attack the issue found is played through the environment as an agent would (an edit of
utils.py, then a final answer). Attacks on the sandbox come with the correct fix, so only the
sandbox stands between them and reward 1.0; reward fakes come without one. Each must end with
reward 0 and its reason; afterwards no process of the submission is alive, nothing was written
outside, and no byte of a file outside reached the agent. Every attack runs twice: in the
sandbox, and with the sandbox switched off (`TRACEGYM_SANDBOX=off`, as on a machine without
namespaces), where code execution must refuse and run nothing.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tracegym.environment import StepResult
from tracegym.synth_envs import sandbox
from tracegym.synth_envs.base import play
from tracegym.synth_envs.registry import make_env
from tracegym.toolcalls import render_tool_call

SEED = 0
QUICK = sandbox.SandboxConfig(timeout_s=5, cpu_s=5)
# lines that first make the runner's notes vanish (they keep only its report): what remains must hold by itself
SILENCE = (
    "import __main__\n_emit = __main__.Reporter.emit\n"
    "__main__.Reporter.emit = lambda self, kind, payload: _emit(self, kind, payload) if kind == 'report' else None\n"
)


@dataclass(frozen=True)
class Attack:
    name: str
    module: Callable[[str, str, Places], str]  # (correct module, target function, places) -> utils.py
    reason: str  # in the reward breakdown's "stopped"


@dataclass(frozen=True)
class Places:
    """Host paths an attack aims at: nothing may appear at `escape`, `secret`'s text must not leak."""

    escape: Path
    secret: Path
    marker: str
    port: int


def _wrap(target: str, body: str) -> str:
    """Lines that wrap the target function so that `body` runs at every call."""
    lines = "".join(f"    {line}\n" for line in body.splitlines())
    return f"\n_real = {target}\n\ndef {target}(*args):\n{lines}    return _real(*args)\n"


FORK_EXEC = (
    "import _posixsubprocess, os\n"
    "for _ in range(40):\n"
    "    _posixsubprocess.fork_exec([b'/bin/sh', b'-c', b'sleep 1000; :', b'{marker}'], [b'/bin/sh'], True, (), "
    "None, None,\n"
    "        -1, -1, -1, -1, -1, -1, *os.pipe(), False, True, -1, None, None, None, -1, None, False)\n"
)

ATTACKS = [
    # the sandbox (issue 12, first list): each comes with the right fix
    Attack(
        "fork_exec of detached children", lambda m, t, p: FORK_EXEC.format(marker=p.marker) + m, "forbidden system call"
    ),
    Attack(
        "os.system running id",
        lambda m, t, p: f"import os\nos.system('id > {p.escape}')\n" + m,
        "process creation (os.system)",
    ),
    Attack(
        "os.system, hook notes silenced",
        lambda m, t, p: SILENCE + "import os\nos.system('id')\n" + m,
        "forbidden system call",
    ),
    Attack(
        "ctypes system",
        lambda m, t, p: SILENCE + "import ctypes\nctypes.CDLL(None).system(b'id')\n" + m,
        "forbidden system call",
    ),
    Attack(
        "runner globals overwritten, then writes and os.system",
        lambda m, t, p: (
            f"import __main__, os\n__main__.inside = lambda p: True\n__main__.deny = lambda r: None\n"
            f"try:\n    open({str(p.escape)!r}, 'w').write('pwned')\nexcept OSError:\n    pass\n" + m
        ),
        "wrote a file while graded",
    ),
    Attack(
        "os.open with dir_fd outside",
        lambda m, t, p: (
            f"import os\ntry:\n    os.open({p.escape.name!r}, os.O_CREAT | os.O_WRONLY, "
            f"dir_fd=os.open({str(p.escape.parent)!r}, os.O_RDONLY))\n"
            "except OSError:\n    pass\n" + m
        ),
        "read outside the task",
    ),
    Attack(
        "reads a file elsewhere and /etc/shadow, to leak them through run_tests",
        lambda m, t, p: (
            m
            + _wrap(
                t,
                f"leaked = []\nfor path in ({str(p.secret)!r}, '/etc/shadow'):\n    try:\n"
                "        leaked.append(open(path).read())\n    except OSError as error:\n"
                "        leaked.append(str(error))\nraise RuntimeError(' '.join(leaked))",
            )
        ),
        "read outside the task",
    ),
    Attack(
        "loopback connection, hook notes silenced",
        lambda m, t, p: (
            SILENCE + f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {p.port}), timeout=1)\n"
            "except OSError:\n    pass\n" + m
        ),
        "forbidden system call",
    ),
    # the reward (issue 12, second list, and item 2): none of these fixes the bug
    Attack(
        "always-equal object",
        lambda m, t, p: m + _wrap(t, "return type('E', (), {'__eq__': lambda s, o: True})()"),
        "not a plain value",
    ),
    Attack(
        "report forged on every descriptor, then os._exit(0)",
        lambda m, t, p: (
            m
            + (
                "\nimport os\nfor _fd in range(3, 64):\n    try:\n"
                '        os.write(_fd, b\'["report", {"results": {"test_x": "passed"}}]\\n\')\n'
                "    except OSError:\n        pass\nos._exit(0)\n"
            )
        ),
        "does not answer exactly the cases asked",
    ),
    Attack(
        "results replaced by an always-passed dict",
        lambda m, t, p: (
            m + "\nimport __main__\n__main__.results = type('P', (dict,), {'__getitem__': lambda s, k: 'passed'})()\n"
        ),
        "changed the runner or the builtins: results",
    ),
    Attack(
        "runner monkeypatched",
        lambda m, t, p: m + "\nimport __main__\n__main__.run_calls = lambda m, calls, r: {}\n",
        "changed the runner or the builtins: run_calls",
    ),
    Attack("sys.exit at import", lambda m, t, p: "import sys\nsys.exit(0)\n" + m, "exited during import"),
    Attack("os._exit at import", lambda m, t, p: "import os\nos._exit(0)\n" + m, "no_report"),
    Attack(
        "conftest.py written at import",
        lambda m, t, p: "open('conftest.py', 'w').write('x')\n" + m,
        "wrote a file while graded",
    ),
]


@pytest.fixture(params=["sandboxed", "switched off"])
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "switched off":
        monkeypatch.setenv(sandbox.SWITCH, "off")
    elif sandbox.unavailable() is not None:
        pytest.skip(f"no sandbox here: {sandbox.unavailable()}")
    return request.param


@pytest.fixture
def places(tmp_path: Path) -> Places:
    secret = tmp_path / "secret.txt"
    secret.write_text(f"CANARY-{uuid.uuid4().hex}")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return Places(tmp_path / "escape.txt", secret, f"tracegym-marker-{uuid.uuid4().hex}", port)


def _env():
    env = make_env("code_repair")
    env.sandbox_config = QUICK
    return env


def _submit(
    module: str | None = None, tests: str | None = None, run_tests: bool = False
) -> tuple[list[str], StepResult]:
    """Play seed SEED: read utils.py, replace it (and/or the tests) wholesale, maybe run the tests, answer."""
    env = _env()
    env.reset(SEED)
    world = env.world
    actions = [render_tool_call("read_file", {"path": "utils.py"})]
    if module is not None:
        actions.append(render_tool_call("replace_in_file", {"path": "utils.py", "old": world.buggy, "new": module}))
    if tests is not None:
        actions.append(render_tool_call("replace_in_file", {"path": "test_utils.py", "old": world.tests, "new": tests}))
    if run_tests:
        actions.append(render_tool_call("run_tests", {}))
    messages, result = play(env, SEED, actions + ["Fixed."])
    return [m.content for m in messages], result


def _world():
    """The episode's world, without running any code (no oracle checks)."""
    env = _env()
    env.verify = False
    env.reset(SEED)
    return env.world


def _target() -> tuple[str, str]:
    world = _world()
    return world.module, next(c.function for c in world.cases if c.case == world.target)


def _alive(marker: str) -> list[int]:
    """Processes whose command line holds `marker`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(int(pid))
        except OSError:
            continue
    return found


@pytest.mark.parametrize("attack", ATTACKS, ids=[a.name for a in ATTACKS])
def test_attack_is_stopped_with_reward_zero_and_its_reason(attack: Attack, mode: str, places: Places) -> None:
    correct, target = _target()
    listener = socket.socket()
    listener.bind(("127.0.0.1", places.port))
    listener.listen(1)
    listener.settimeout(0.2)
    try:
        if mode == "switched off":
            with pytest.raises(sandbox.SandboxUnavailable, match="code execution refused"):
                _submit(attack.module(correct, target, places), run_tests=True)
        else:
            texts, result = _submit(attack.module(correct, target, places), run_tests=True)
            assert result.reward == 0.0, (attack.name, result.info["reward_breakdown"])
            assert attack.reason in result.info["reward_breakdown"]["stopped"], result.info["reward_breakdown"]
            assert not any(places.secret.read_text() in text for text in texts), "a file outside reached the agent"
        with pytest.raises(socket.timeout):
            listener.accept()  # no connection came out
    finally:
        listener.close()
    time.sleep(0.05)
    assert not _alive(places.marker), "a process of the submission outlived the run"
    assert not places.escape.exists(), "something was written outside"


@pytest.mark.parametrize(
    "ending", ["", "    while True:\n        pass\n"], ids=["the run ends", "the run is killed at its timeout"]
)
def test_descendants_die_with_the_run_even_without_seccomp(ending: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The PID namespace alone: with a filter that allows everything, detached children started
    by the run (and seen running) are gone once it ends, or once it is killed."""
    if sandbox.unavailable() is not None:
        pytest.skip(f"no sandbox here: {sandbox.unavailable()}")
    monkeypatch.setattr(sandbox, "_seccomp_program", lambda: sandbox._ins(sandbox._RET, sandbox._ALLOW))
    marker = f"tracegym-marker-{uuid.uuid4().hex}"
    body = (
        "import subprocess\n\ndef test_spawn():\n"
        f"    children = [subprocess.Popen(['/bin/sh', '-c', 'sleep 1000; :', '{marker}'], start_new_session=True) "
        "for _ in range(5)]\n"
        "    assert all(child.poll() is None for child in children)\n" + ending
    )
    result = sandbox.run_tests({"test_spawn.py": body}, "test_spawn", sandbox.SandboxConfig(timeout_s=3, cpu_s=6))
    assert "process creation" in result.violations[0]
    assert result.passed == ["test_spawn"] if not ending else result.status == "timeout"
    time.sleep(0.05)
    assert not _alive(marker)


def test_the_fix_alone_earns_one(mode: str) -> None:
    """The baseline the attacks are measured against: the same edit without the attack."""
    correct, _ = _target()
    if mode == "switched off":
        with pytest.raises(sandbox.SandboxUnavailable):
            _submit(correct)
        return
    assert _submit(correct)[1].reward == 1.0


def test_edited_tests_earn_zero() -> None:
    world = _world()
    passing = world.tests.replace(f"def {world.target}():", f"def {world.target}():\n    return")
    for module in (None, world.module):  # a test edit alone, or with the right fix
        _, result = _submit(module, tests=passing)
        assert result.reward == 0.0 and result.info["reward_breakdown"]["stopped"] == "the tests were edited"


def test_conftest_cannot_be_added_through_the_tools() -> None:
    env = _env()
    env.verify = False  # no code runs: the tool refuses the path
    env.reset(SEED)
    observation = env.step(
        render_tool_call("replace_in_file", {"path": "conftest.py", "old": "", "new": "x"})
    ).observation
    assert "must be one of ['utils.py', 'test_utils.py']" in observation


def test_a_special_case_for_the_visible_test_fixes_nothing() -> None:
    """Hidden inputs: returning the visible test's expected value for its input earns no more than no edit."""
    world = _world()
    case = next(c for c in world.cases if c.case == world.target)
    special = world.buggy + _wrap(case.function, f"if args == {case.args}:\n    return {case.expected}")
    _, result = _submit(special)
    assert result.reward == 0.1 and result.info["reward_breakdown"]["target"] is False


def test_a_forgery_that_knows_the_protocol_earns_no_more_than_no_edit() -> None:
    """Reading the request from the runner's memory and reporting visible expected values: hidden cases fail."""
    world = _world()
    visible = {c.case: c.expected for c in world.cases if not c.case.startswith("hidden_")}
    forgery = world.buggy + (
        "\nimport gc, json, os\n"
        f"_visible = {visible!r}\n"
        "_request = next(o for o in gc.get_objects() if isinstance(o, dict) and o.get('mode') == 'calls')\n"
        "_results = {c: ['value', _visible.get(c, '0')] for c, _, _ in _request['calls']}\n"
        "_reporter = next(o for o in gc.get_objects() if type(o).__name__ == 'Reporter')\n"
        "os.write(_reporter.fd, (json.dumps(['report', {'results': _results}]) + '\\n').encode())\n"
        "os._exit(0)\n"
    )
    _, result = _submit(forgery)
    assert result.reward <= 0.1 and not result.info["reward_breakdown"].get("target"), result.info["reward_breakdown"]


@pytest.mark.parametrize(
    "query",
    [
        "SELECT count(*) FROM range(1000000000000)",
        "WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM t) SELECT count(*) FROM t",
        "SELECT string_agg(repeat('x', 1000), '') FROM range(100000000)",
    ],
)
def test_a_runaway_query_is_an_error_observation_and_the_episode_goes_on(query: str) -> None:
    env = make_env("causal_diagnosis")
    env.reset(0)
    began = time.perf_counter()
    result = env.step(render_tool_call("sql", {"query": query}))
    assert time.perf_counter() - began < env.sql_limits.timeout_s + 1.5
    assert not result.ended and "error: sql: SQL error:" in result.observation
    assert any(why in result.observation for why in ("time limit", "Out of Memory")), result.observation
    after = env.step(render_tool_call("sql", {"query": "SELECT count(*) AS n FROM budget_log"}))
    assert after.observation == "<tool_response>\nn\n14\n</tool_response>"
    assert env.step(env.oracle(0)[-1]).reward == 1.0
