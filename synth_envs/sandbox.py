"""Run an untrusted pytest-style test file in a contained subprocess.

Containment, outermost first:
- its own temporary directory (the only place it may write), removed afterwards;
- a fresh network namespace via `unshare -rn` when the kernel allows it (no interface but a
  down loopback: no network at all), checked once per process;
- resource limits (`resource.setrlimit`): address space (`memory_mb`, default 512 MiB), CPU
  seconds, written file size (so output floods die), no core dumps; a wall-clock `timeout_s`
  (default 10 s) after which the whole process group is killed;
- an audit hook (PEP 578) installed before any test code is imported, which refuses and records
  sockets, process spawning, ctypes, and any write/delete/rename outside the directory;
- `python -I -S -B`: no environment variables, user site, site-packages or bytecode writes.

Tests are plain `test_*` functions (the file also runs under pytest); a tiny runner calls them
in-process, so a run costs one interpreter start (~20 ms) rather than pytest's ~300 ms. The
runner reports through stdout lines tagged with a random nonce given on stdin; a run that
leaves no report (killed, crashed, or closed its stdout) counts as failed. Any violation, a
timeout, a memory or output overrun makes `SandboxResult.ok` false with the reason.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import resource
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field

RUNNER = r'''
import json, os, sys
NONCE = sys.stdin.readline().strip()
ROOT = os.path.realpath(os.getcwd())
OUT = os.dup(1)

def emit(kind, payload):
    os.write(OUT, (NONCE + " " + json.dumps([kind, payload]) + "\n").encode())

def inside(path):
    try:
        real = os.path.realpath(os.fsdecode(path))
    except (TypeError, ValueError):
        return False
    return real == ROOT or real.startswith(ROOT + os.sep) or real == "/dev/null"

WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
PATH_EVENTS = {"os.remove", "os.rmdir", "os.mkdir", "os.rename", "os.chmod", "os.chown", "os.link",
               "os.symlink", "os.truncate", "os.utime", "shutil.rmtree", "shutil.move", "shutil.copyfile"}
SPAWN = ("subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "pty.spawn")

def deny(reason):
    emit("violation", reason)
    raise PermissionError("sandbox: " + reason)

def guard(event, args):
    if event == "open":
        path, mode, flags = args
        if isinstance(path, int) or path is None:
            return
        writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (isinstance(flags, int) and flags & WRITE_FLAGS)
        if writing and not inside(path):
            deny("write outside the sandbox: " + os.fsdecode(path))
    elif event.startswith("socket."):
        deny("network access (" + event + ")")
    elif event.startswith(SPAWN):
        deny("process spawning (" + event + ")")
    elif event.startswith("ctypes"):
        deny("ctypes")
    elif event in PATH_EVENTS:
        for item in args:
            if isinstance(item, (str, bytes, os.PathLike)) and not inside(item):
                deny(event + " outside the sandbox: " + os.fsdecode(item))

sys.addaudithook(guard)
sys.path.insert(0, ROOT)
sys.setrecursionlimit(2000)
results = {}
try:
    module = __import__(sys.argv[1])
    tests = [(name, fn) for name, fn in vars(module).items() if name.startswith("test_") and callable(fn)]
except MemoryError:
    emit("violation", "memory limit exceeded")
    tests = []
except BaseException as error:
    emit("collect_error", type(error).__name__ + ": " + str(error)[:300])
    tests = []
for name, fn in tests:
    try:
        fn()
        results[name] = "passed"
    except MemoryError:
        emit("violation", "memory limit exceeded")
        results[name] = "MemoryError"
    except BaseException as error:
        results[name] = (type(error).__name__ + ": " + str(error))[:300]
emit("results", results)
'''


@dataclass
class SandboxResult:
    """Outcome of one run: per-test verdicts plus why the run was not clean (if it was not)."""

    passed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    status: str = "ok"  # ok | timeout | killed | no_report | collect_error
    detail: str = ""
    isolation: str = ""

    @property
    def ok(self) -> bool:
        """True when the run finished, reported, and broke no rule."""
        return self.status == "ok" and not self.violations

    @property
    def reason(self) -> str:
        """Why the run is not ok ("" when it is)."""
        if self.violations:
            return f"sandbox violation: {self.violations[0]}"
        return "" if self.status == "ok" else f"{self.status}: {self.detail}".strip(": ")

    def summary(self, limit: int = 2_000) -> str:
        """Short text for the agent: counts, failing tests with their errors, and any reason."""
        lines = [f"{len(self.passed)} passed, {len(self.failed)} failed"]
        lines += [f"FAILED {name}: {error}" for name, error in sorted(self.failed.items())]
        if not self.ok:
            lines.append(f"RUN STOPPED: {self.reason}")
        text = "\n".join(lines)
        return text if len(text) <= limit else text[:limit] + "\n...[cut]"


@functools.lru_cache(maxsize=1)
def network_namespace_available() -> bool:
    """Whether `unshare -rn` works here (unprivileged user + network namespaces)."""
    if shutil.which("unshare") is None:
        return False
    try:
        return subprocess.run(["unshare", "-rn", "true"], capture_output=True, timeout=5).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def _limits(memory_mb: int, cpu_s: int, file_mb: int) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (memory_mb * 2**20, memory_mb * 2**20))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (file_mb * 2**20, file_mb * 2**20))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def run_tests(files: dict[str, str], test_module: str, timeout_s: float = 10.0, memory_mb: int = 512,
              output_limit: int = 1_000_000) -> SandboxResult:
    """Write `files` into a fresh directory and run `test_module`'s `test_*` functions there."""
    workdir = tempfile.mkdtemp(prefix="tracegym-sandbox-")
    logdir = tempfile.mkdtemp(prefix="tracegym-sandbox-log-")
    nonce = secrets.token_hex(16)
    isolation = "netns+rlimits+audit" if network_namespace_available() else "rlimits+audit"
    try:
        for name, text in files.items():
            if os.path.basename(name) != name:
                raise ValueError(f"sandbox file names must be plain names, got {name!r}")
            with open(os.path.join(workdir, name), "w", encoding="utf-8") as handle:
                handle.write(text)
        command = [sys.executable, "-I", "-S", "-B", "-c", RUNNER, test_module]
        if isolation.startswith("netns"):
            command = ["unshare", "-rn"] + command
        log_path = os.path.join(logdir, "out")
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                command, cwd=workdir, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, env={},
                start_new_session=True,
                preexec_fn=functools.partial(_limits, memory_mb, int(timeout_s) + 1, max(1, output_limit // 2**20 + 1)),
            )
            status, detail = "ok", ""
            assert process.stdin is not None
            try:
                process.stdin.write((nonce + "\n").encode())
                process.stdin.close()
            except BrokenPipeError:  # the child already died; its report (or its absence) tells why
                pass
            if not _wait(process, timeout_s):
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                status, detail = "timeout", f"killed after {timeout_s:g} s"
        with open(log_path, "rb") as log:
            output = log.read(output_limit).decode("utf-8", "replace")
        result = _parse(output, nonce)
        result.isolation = isolation
        if result.status == "no_report" and os.path.getsize(log_path) >= output_limit:
            result.detail = "output limit exceeded"
        if status != "ok":
            result.status, result.detail = status, detail
        elif process.returncode and process.returncode < 0:
            sig = -process.returncode
            why = {signal.SIGXFSZ: "output limit exceeded", signal.SIGXCPU: "CPU time limit exceeded"}.get(sig, "")
            result.status, result.detail = "killed", why or f"killed by signal {signal.Signals(sig).name} (memory limit?)"
        return result
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        shutil.rmtree(logdir, ignore_errors=True)


def _wait(process: subprocess.Popen, timeout_s: float) -> bool:
    """Wait for the child to exit (True) or the timeout (False).

    `Popen.wait(timeout)` polls with sleeps that add up to ~50 ms per run; a pidfd becomes
    readable the moment the child exits, so select() on it waits exactly as long as needed.
    """
    try:
        pidfd = os.pidfd_open(process.pid)
    except (AttributeError, OSError):
        try:
            process.wait(timeout=timeout_s)
            return True
        except subprocess.TimeoutExpired:
            return False
    try:
        ready, _, _ = select.select([pidfd], [], [], timeout_s)
    finally:
        os.close(pidfd)
    if ready:
        process.wait()
    return bool(ready)


def _parse(output: str, nonce: str) -> SandboxResult:
    result = SandboxResult(status="no_report", detail="the run ended without a test report")
    for line in output.splitlines():
        if not line.startswith(nonce + " "):
            continue
        try:
            kind, payload = json.loads(line[len(nonce) + 1:])
        except (ValueError, TypeError):
            continue
        if kind == "violation":
            result.violations.append(str(payload))
        elif kind == "collect_error":
            result.status, result.detail = "collect_error", str(payload)
        elif kind == "results" and isinstance(payload, dict):
            if result.status == "no_report":
                result.status, result.detail = "ok", ""
            for name, verdict in payload.items():
                if verdict == "passed":
                    result.passed.append(name)
                else:
                    result.failed[name] = str(verdict)
    return result


@functools.lru_cache(maxsize=512)
def _cached(key: str, payload: str, test_module: str, timeout_s: float) -> SandboxResult:
    return run_tests(json.loads(payload), test_module, timeout_s=timeout_s)


def run_tests_cached(files: dict[str, str], test_module: str, timeout_s: float = 10.0) -> SandboxResult:
    """`run_tests` memoised on the files' content (same code, same verdict: saves re-runs)."""
    payload = json.dumps(files, sort_keys=True)
    return _cached(hashlib.sha256(payload.encode()).hexdigest(), payload, test_module, timeout_s)
