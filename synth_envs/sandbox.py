"""Run untrusted Python (the code-repair family's submissions) in a sandbox that holds.

Every run is a fresh bubblewrap (`bwrap`) sandbox around `python -I -S -B` running
`tracegym.synth_envs.sandbox_runner`; nothing of the isolation lives in the tested process:

- namespaces: its own PID namespace (every process of the run dies with it: the runner's exit,
  a timeout or the parent's death ends them all), network (no interface but a down loopback),
  mount, IPC and UTS;
- an unprivileged uid: as root, bwrap sets up the namespaces and `setpriv` drops to uid/gid
  65534 with no groups, no capabilities and no-new-privs before Python starts; as any other
  user, bwrap maps that user in its own user namespace (no further namespaces allowed). Never
  uid 0 in the host's sense;
- the filesystem it sees: /usr, the Python installation and the loader's /lib links read-only;
  the submitted files read-only in /task; the runner in /runner; a size-capped tmpfs /work
  (`scratch_mb`), the only writable place and the working directory; its own /proc and a
  minimal /dev. Nothing else of the machine is there to read or write;
- seccomp (a BPF filter bwrap installs before Python starts): creating processes or threads
  (fork, vfork, clone, clone3), sockets other than AF_UNIX (those fail with EACCES), ptrace,
  process_vm_*, namespaces, mounts, bpf, perf, userfaultfd, keyctl and io_uring kill the
  process (SIGSYS);
- resource limits (`SandboxConfig`, set by `prlimit` before bwrap starts): address space, CPU
  seconds, file size, open files, processes of the sandbox uid, no core dumps; a wall-clock
  timeout and a cap on what the run may write back.

Where no sandbox can run, code execution refuses with `SandboxUnavailable` (fail closed):
untrusted code never runs unprotected. `availability()` tells the causes apart: switched off
(`TRACEGYM_SANDBOX=off`, which the tests use), missing (bwrap or a tool it needs is not installed,
or no filter for this machine), or broken (all installed, but a trial run fails: the tests fail
rather than skip then).

bwrap comes from the distribution (`apt-get install bubblewrap`; `make setup` installs it when
missing). Why bubblewrap, and what a sandboxed run costs: docs/engineering.md, "synth_envs".

The runner reports on a pipe the parent opened, one Python literal per line: the violations it
noticed, then one report. That pipe is no secret from the tested code (it runs in the runner's
process and can write there too), so the parent trusts only what it can check: exactly one
well-formed report that answers exactly what was asked, and a clean exit. `grade` compares
values outside against expected values that never enter the sandbox, so a forged report must
hold the right value for every input, hidden ones included, which only a fix computes. A run
that dies (seccomp, memory, timeout) leaves no report and counts as failed.
"""

from __future__ import annotations

import ast
import functools
import os
import platform
import selectors
import shutil
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from tracegym.config import option
from tracegym.errors import UserError

RUNNER = Path(__file__).with_name("sandbox_runner.py")
SANDBOX_UID = 65534  # "nobody" on Debian and most distributions
SWITCH = "TRACEGYM_SANDBOX"  # "off" refuses every run, as on a machine without namespaces


class SandboxUnavailable(UserError):
    """Code execution refused: no sandbox can be set up here (the message says why)."""


@dataclass(frozen=True)
class SandboxConfig:
    """Limits of one sandboxed run."""

    timeout_s: float = option(10.0, "wall-clock seconds a run may take before all of its processes are killed")
    memory_mb: int = option(512, "address-space limit of the sandboxed process, MiB")
    cpu_s: int = option(10, "CPU seconds the sandboxed process may use")
    file_mb: int = option(1, "largest file the run may write, MiB")
    scratch_mb: int = option(16, "size of the writable scratch directory /work (a tmpfs), MiB")
    open_files: int = option(64, "open file descriptors")
    processes: int = option(64, "processes of the sandbox uid 65534 machine-wide (only when run as root)")
    output_bytes: int = option(1_000_000, "bytes of report and of stdout+stderr kept; more stops the run")


@dataclass(frozen=True)
class Case:
    """One graded call: `function(*args)` of the submitted module must equal `expected`.

    `args` and `expected` are Python literals (reprs); only `case`, `function` and `args` enter
    the sandbox, `expected` stays with the parent.
    """

    case: str
    function: str
    args: str
    expected: str


@dataclass
class SandboxResult:
    """A run's outcome: what passed, what failed and why, and why the run itself is not clean."""

    passed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    status: str = "ok"  # ok | timeout | killed | exited | no_report | output_limit | collect_error
    detail: str = ""
    output: str = ""  # stdout and stderr of the run (capped)
    report: dict[str, Any] | None = field(default=None, repr=False)

    @property
    def ok(self) -> bool:
        """True when the run ended cleanly with one report and broke no rule."""
        return self.status == "ok" and not self.violations

    @property
    def reason(self) -> str:
        """Why the run is not ok ("" when it is)."""
        if self.violations:
            return f"sandbox violation: {self.violations[0]}"
        return "" if self.status == "ok" else f"{self.status}: {self.detail}".rstrip(": ")

    def summary(self, limit: int = 2_000) -> str:
        """Short text for the agent: counts, failing tests with their errors, and any reason."""
        lines = [f"{len(self.passed)} passed, {len(self.failed)} failed"]
        lines += [f"FAILED {name}: {error}" for name, error in sorted(self.failed.items())]
        if not self.ok:
            lines.append(f"RUN STOPPED: {self.reason}")
        text = "\n".join(lines)
        return text if len(text) <= limit else text[:limit] + "\n...[cut]"


# -- availability --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Availability:
    """Whether a sandbox can run here.

    `state` is "ok"; "off" (`TRACEGYM_SANDBOX=off`); "missing" (bwrap or a tool it needs is not
    installed, or no seccomp filter is known for this machine: nothing here can run one); or
    "broken" (all of it is installed but the trial run fails: a fault to fix, never a reason to
    skip). `reason` says why it is not "ok" ("" when it is).
    """

    state: Literal["ok", "off", "missing", "broken"]
    reason: str = ""


def availability() -> Availability:
    """Whether a sandbox can run here; the trial run is done once per process."""
    if os.environ.get(SWITCH, "").lower() == "off":
        return Availability("off", f"the sandbox is switched off ({SWITCH}=off)")
    return _probe()


def unavailable() -> str | None:
    """Why no sandbox can run here (None when one can), whatever the cause."""
    found = availability()
    return None if found.state == "ok" else found.reason


@functools.lru_cache(maxsize=1)
def _probe() -> Availability:
    needed = {
        "bwrap": "bubblewrap (bwrap) is not installed (apt-get install bubblewrap)",
        "prlimit": "prlimit (util-linux) is missing, so no resource limits could be set",
    }
    if os.geteuid() == 0:
        needed["setpriv"] = "setpriv (util-linux) is missing, so the sandbox could not drop root"
    for tool, problem in needed.items():
        if shutil.which(tool) is None:
            return Availability("missing", problem)
    if _seccomp_program() is None:
        return Availability("missing", f"no seccomp filter for the {platform.machine()} architecture")
    run = _grade.__wrapped__(  # a trial run is never memoised: it must see this machine as it is now
        (("probe.py", "def one(x):\n    return x\n"),),
        "probe",
        (Case("v", "one", "(1,)", "1"),),
        SandboxConfig(timeout_s=20),
    )
    if not run.ok or run.passed != ["v"]:
        why = "; ".join(part for part in (run.reason or "the trial run failed", run.output.strip()[:200]) if part)
        return Availability("broken", f"bwrap is installed but could not start a sandbox here ({why})")
    return Availability("ok")


def _require() -> None:
    problem = unavailable()
    if problem is not None:
        raise SandboxUnavailable(f"code execution refused: {problem}; untrusted code never runs unprotected")


# -- the two kinds of run ------------------------------------------------------------------------


def run_tests(files: dict[str, str], test_module: str, config: SandboxConfig = SandboxConfig()) -> SandboxResult:
    """Run every `test_*` function of `test_module` (one of `files`): the agent's own check.

    Memoised on the files' content (same code, same verdict). Raises SandboxUnavailable when no
    sandbox can be set up here, ValueError for a file name that is not a plain name.
    """
    _require()
    return _run_tests(tuple(sorted(files.items())), test_module, config)


def grade(
    files: dict[str, str], module: str, cases: Sequence[Case], config: SandboxConfig = SandboxConfig()
) -> SandboxResult:
    """Call each case's function of `module` in the sandbox and compare its value outside with
    `case.expected` (values read back with `ast.literal_eval`, compared with `==`).

    A case passes when its value equals the expected one; it fails when the value differs or
    the call raised. A value that is not a plain value (an object overriding `__eq__`, a
    subclass of a builtin), a report that does not answer exactly the cases asked, and
    everything `SandboxResult.ok` checks make the run not ok. Memoised like `run_tests`.
    """
    _require()
    return _grade(tuple(sorted(files.items())), module, tuple(cases), config)


@functools.lru_cache(maxsize=512)
def _run_tests(files: tuple[tuple[str, str], ...], test_module: str, config: SandboxConfig) -> SandboxResult:
    result = _execute(dict(files), {"mode": "tests", "module": test_module}, config)
    for name, verdict in _results(result).items():
        if verdict == "passed":
            result.passed.append(name)
        else:
            result.failed[name] = str(verdict)
    return result


@functools.lru_cache(maxsize=512)
def _grade(
    files: tuple[tuple[str, str], ...], module: str, cases: tuple[Case, ...], config: SandboxConfig
) -> SandboxResult:
    calls = [[c.case, c.function, c.args] for c in cases]
    result = _execute(dict(files), {"mode": "calls", "module": module, "calls": calls}, config)
    results = _results(result)
    if result.report is None:
        return result
    if set(results) != {c.case for c in cases}:
        result.violations.append("the report does not answer exactly the cases asked")
        return result
    for case in cases:
        outcome = results[case.case]
        kind, text = outcome if isinstance(outcome, list) and len(outcome) == 2 else ("", "")
        if kind == "value" and isinstance(text, str) and _equal(text, case.expected):
            result.passed.append(case.case)
        elif kind == "value" and isinstance(text, str):
            result.failed[case.case] = f"returned {text[:200]}, expected {case.expected[:200]}"
        elif kind == "raises" and isinstance(text, str):
            result.failed[case.case] = text[:300]
        elif kind == "not_plain":
            result.violations.append(f"{case.case} returned an object of type {str(text)[:60]}, not a plain value")
        else:
            result.violations.append(f"a malformed result for {case.case}")
    return result


def _results(result: SandboxResult) -> dict[str, Any]:
    """The report's per-test or per-case results; an import error makes the run a collect error."""
    report = result.report
    if report is None:
        return {}
    if isinstance(report.get("error"), str):
        result.status, result.detail = "collect_error", report["error"][:300]
        return {}
    results = report.get("results")
    if not isinstance(results, dict):
        result.violations.append("a malformed report")
        return {}
    return results


def _equal(value: str, expected: str) -> bool:
    """Whether two plain-value reprs denote equal values (`==` on the literals they spell)."""
    if value == expected:
        return True
    try:
        return bool(ast.literal_eval(value) == ast.literal_eval(expected))
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False


def _execute(files: dict[str, str], request: dict[str, Any], config: SandboxConfig) -> SandboxResult:
    for name in files:
        if not name or os.path.basename(name) != name or name.startswith("."):
            raise ValueError(f"sandbox file names must be plain names, got {name!r}")
    owned = [_memfd(text.encode()) for text in files.values()]
    runner, seccomp = _memfd(_runner()), _memfd(_seccomp_program() or b"")
    report_read, report_write = os.pipe()
    output_read, output_write = os.pipe()
    try:
        data = [
            arg
            for fd, name in zip(owned, files)
            for arg in ("--perms", "0444", "--ro-bind-data", str(fd), f"/task/{name}")
        ]
        command = _command(config, data, runner, seccomp, report_write)
        process = subprocess.Popen(
            _limits(config) + command,
            stdin=subprocess.PIPE,
            stdout=output_write,
            stderr=output_write,
            env={},
            start_new_session=True,
            pass_fds=(*owned, runner, seccomp, report_write),
        )
    finally:
        for fd in (*owned, runner, seccomp, report_write, output_write):
            os.close(fd)
    try:
        assert process.stdin is not None
        try:
            process.stdin.write(repr(request).encode())
            process.stdin.close()
        except BrokenPipeError:  # the sandbox died at once; its exit status says why
            pass
        streams, status = _collect(process, {report_read: b"", output_read: b""}, config)
    finally:
        os.close(report_read)
        os.close(output_read)
    return _verdict(streams[report_read], streams[output_read], status, process.returncode, config)


@functools.lru_cache(maxsize=1)
def _runner() -> bytes:
    return RUNNER.read_bytes()


def _command(config: SandboxConfig, data: list[str], runner: int, seccomp: int, report: int) -> list[str]:
    python = os.path.realpath(sys.executable)
    binds = []
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            binds += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            binds += ["--ro-bind", top, top]
    for path in sorted({os.path.realpath(sys.base_prefix), os.path.dirname(python)}):
        if path != "/usr" and not path.startswith("/usr/"):
            binds += ["--ro-bind", path, path]
    if os.geteuid() == 0:  # bwrap sets up the namespaces as root; setpriv drops to the sandbox uid
        options, launcher = (
            [],
            [
                "setpriv",
                f"--reuid={SANDBOX_UID}",
                f"--regid={SANDBOX_UID}",
                "--clear-groups",
                "--inh-caps=-all",
                "--bounding-set=-all",
                "--no-new-privs",
                "--",
            ],
        )
    else:  # an unprivileged user: its own user namespace, no capabilities, no nested namespaces
        options, launcher = ["--unshare-user", "--disable-userns", "--cap-drop", "ALL"], []
    return [
        _which("bwrap"),
        "--unshare-pid",
        "--unshare-net",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--die-with-parent",
        "--new-session",
        "--clearenv",
        "--hostname",
        "sandbox",
        *options,
        "--ro-bind",
        "/usr",
        "/usr",
        *binds,
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--perms",
        "1777",
        "--size",
        str(config.scratch_mb * 2**20),
        "--tmpfs",
        "/work",
        "--dir",
        "/task",
        *data,
        "--dir",
        "/runner",
        "--perms",
        "0444",
        "--ro-bind-data",
        str(runner),
        "/runner/sandbox_runner.py",
        "--remount-ro",
        "/",
        "--chdir",
        "/work",
        "--seccomp",
        str(seccomp),
        "--",
        *launcher,
        python,
        "-I",
        "-S",
        "-B",
        "/runner/sandbox_runner.py",
        str(report),
    ]


def _limits(config: SandboxConfig) -> list[str]:
    """`prlimit` setting the resource limits before bwrap starts (the sandboxed process inherits them).

    A launcher rather than `preexec_fn`, which would force a `fork()` of the (large) parent process.
    """
    mib = 2**20
    limits = [
        f"--as={config.memory_mb * mib}",
        f"--cpu={config.cpu_s}:{config.cpu_s + 1}",
        f"--fsize={config.file_mb * mib}",
        f"--nofile={config.open_files}",
        "--core=0",
    ]
    if os.geteuid() == 0:  # counted for uid 65534 once setpriv switches to it (root itself is exempt)
        limits.append(f"--nproc={config.processes}")
    return [_which("prlimit"), *limits, "--"]


def _which(tool: str) -> str:
    """The path of `tool` that the probe checked (found on PATH); the bare name where it is not found."""
    return shutil.which(tool) or tool


def _memfd(data: bytes) -> int:
    fd = os.memfd_create("tracegym-sandbox")
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _collect(
    process: subprocess.Popen, streams: dict[int, bytes], config: SandboxConfig
) -> tuple[dict[int, bytes], str]:
    """Read both pipes until they close, the deadline or the output cap; the run's end status."""
    deadline = time.monotonic() + config.timeout_s
    status = "ok"
    with selectors.DefaultSelector() as selector:
        for fd in streams:
            selector.register(fd, selectors.EVENT_READ)
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                status = "timeout"
                break
            for key, _ in selector.select(left):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    selector.unregister(key.fd)
                    continue
                streams[key.fd] += chunk
                if len(streams[key.fd]) > config.output_bytes:
                    status = "output_limit"
            if status != "ok":
                break
    if status != "ok":
        os.killpg(process.pid, signal.SIGKILL)  # bwrap; its PID namespace, and every process in it, dies with it
    process.wait()
    return streams, status


def _verdict(report: bytes, output: bytes, status: str, returncode: int, config: SandboxConfig) -> SandboxResult:
    run = SandboxResult(output=output[: config.output_bytes].decode("utf-8", "replace"))
    if status == "timeout":
        run.status, run.detail = "timeout", f"killed after {config.timeout_s:g} s"
    elif status == "output_limit":
        run.status, run.detail = "output_limit", f"more than {config.output_bytes} bytes of output"
    reports = []
    for line in report[: config.output_bytes].splitlines():
        try:
            kind, payload = ast.literal_eval(line.decode("utf-8", "replace"))
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            run.violations.append("a malformed line on the report channel")
            continue
        if kind == "violation" and isinstance(payload, str):
            run.violations.append(payload[:300])
        elif kind == "report" and isinstance(payload, dict):
            reports.append(payload)
        else:
            run.violations.append("an unknown message on the report channel")
    if len(reports) > 1:
        run.violations.append(f"{len(reports)} reports on the report channel (one is written)")
    if run.status != "ok":
        return run
    if returncode:
        signal_number = returncode - 128 if returncode > 128 else -returncode if returncode < 0 else 0
        run.status = "killed" if signal_number else "exited"
        run.detail = _signal_reason(signal_number) if signal_number else f"exit status {returncode}"
    elif len(reports) != 1:
        run.status, run.detail = "no_report", "the run ended without its report"
    else:
        run.report = reports[0]
    return run


def _signal_reason(number: int) -> str:
    reasons = {
        signal.SIGSYS: "a forbidden system call (process, thread or socket creation, ptrace, namespaces)",
        signal.SIGXCPU: "CPU time limit exceeded",
        signal.SIGXFSZ: "file size limit exceeded",
        signal.SIGSEGV: "crashed (memory limit?)",
        signal.SIGABRT: "aborted (memory limit?)",
    }
    try:
        name = signal.Signals(number).name
    except ValueError:
        name = f"signal {number}"
    return f"killed by {name}: {reasons.get(number, 'killed')}"


# -- seccomp -------------------------------------------------------------------------------------

# (AUDIT_ARCH value, syscalls that kill, the socket syscall) per machine; numbers from the kernel's
# asm/unistd_64.h (x86_64) and asm-generic/unistd.h (aarch64)
_SYSCALLS = {
    "x86_64": (
        0xC000003E,
        {
            "fork": 57,
            "vfork": 58,
            "clone": 56,
            "clone3": 435,
            "socketpair": 53,
            "ptrace": 101,
            "process_vm_readv": 310,
            "process_vm_writev": 311,
            "unshare": 272,
            "setns": 308,
            "mount": 165,
            "bpf": 321,
            "perf_event_open": 298,
            "userfaultfd": 323,
            "keyctl": 250,
            "io_uring_setup": 425,
        },
        41,
    ),
    "aarch64": (
        0xC00000B7,
        {
            "clone": 220,
            "clone3": 435,
            "socketpair": 199,
            "ptrace": 117,
            "process_vm_readv": 270,
            "process_vm_writev": 271,
            "unshare": 97,
            "setns": 268,
            "mount": 40,
            "bpf": 280,
            "perf_event_open": 241,
            "userfaultfd": 282,
            "keyctl": 219,
            "io_uring_setup": 425,
        },
        198,
    ),
}
_LOAD, _JEQ, _JGE, _RET = 0x20, 0x15, 0x35, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, BPF_JMP|JGE|K, BPF_RET|K
_KILL, _ALLOW, _EACCES = 0x80000000, 0x7FFF0000, 0x00050000 | 13  # SECCOMP_RET_KILL_PROCESS, _ALLOW, _ERRNO|EACCES
_AF_UNIX = 1


def _ins(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k)


@functools.lru_cache(maxsize=1)
def _seccomp_program() -> bytes | None:
    """The classic-BPF filter (struct sock_filter[]) for this machine, None where none is known.

    Layout: wrong architecture -> kill; x32 syscall numbers -> kill; each listed syscall -> kill;
    socket(AF_UNIX, ...) -> EACCES (setpriv's user lookup tries nscd's socket) and any other
    socket -> kill; everything else allowed. seccomp_data: nr at offset 0, arch at 4, args[0] at 16.
    """
    known = _SYSCALLS.get(platform.machine())
    if known is None:
        return None
    arch, kill, socket = known
    program = [
        _ins(_LOAD, 4),
        _ins(_JEQ, arch, 1, 0),
        _ins(_RET, _KILL),
        _ins(_LOAD, 0),
        _ins(_JGE, 0x40000000, 0, 1),
        _ins(_RET, _KILL),
    ]
    for number in kill.values():
        program += [_ins(_JEQ, number, 0, 1), _ins(_RET, _KILL)]
    program += [
        _ins(_JEQ, socket, 0, 4),
        _ins(_LOAD, 16),
        _ins(_JEQ, _AF_UNIX, 0, 1),
        _ins(_RET, _EACCES),
        _ins(_RET, _KILL),
        _ins(_RET, _ALLOW),
    ]
    return b"".join(program)
