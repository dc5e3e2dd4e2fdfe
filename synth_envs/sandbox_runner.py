"""The program the code sandbox runs: it imports untrusted code, runs it and reports once.

`tracegym.synth_envs.sandbox` starts it inside the sandbox as
`python -I -S -B /runner/sandbox_runner.py REPORT_FD` with a request on stdin, the repr of
`{"mode": "tests" | "calls", "module": NAME, "calls": [[ID, FUNCTION, ARGS_REPR], ...]}` (the
parent's own data, read with `eval` and no builtins). It imports only modules Python has loaded
at startup anyway (json, ast and typing would lengthen every run's start).

- mode "tests" (the agent's run_tests tool): every `test_*` function of the module, "passed" or
  the error it raised;
- mode "calls" (grading): each call `FUNCTION(*ARGS)` of the module, as
  ["value", repr] when the result is a plain value (exact builtin types, checked recursively, so
  an object that overrides `__eq__` is never compared), ["not_plain", type name] otherwise, or
  ["raises", error]. The parent reads values back with `ast.literal_eval` and compares them
  with expected values computed outside the sandbox.

This program is no barrier: the code it imports runs in its process and can undo anything here.
The barriers are outside it (namespaces, seccomp, resource limits), and the parent trusts only
what it can check: one well-formed report, values it compares itself. What this program adds is
evidence for a reason, lines on REPORT_FD, each the repr of a list (the parent reads them with
`ast.literal_eval`): ["violation", text] as soon as it sees something a fair submission never
does (audit events of process creation, sockets and ctypes; files opened outside the task, the
scratch directory and the Python installation; a write while graded; its globals, functions,
audit hook, reporter or the builtins changed; an exit during import), then one ["report", {...}].
A submission that silences these notes gains nothing by it: what it tried still meets the
barriers (tests/test_hostile.py plays such attacks).
"""

import builtins
import os
import sys
import types

WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
WRITE_EVENTS = (
    "os.remove",
    "os.rmdir",
    "os.mkdir",
    "os.rename",
    "os.chmod",
    "os.chown",
    "os.link",
    "os.symlink",
    "os.truncate",
    "os.utime",
    "shutil.rmtree",
    "shutil.move",
    "shutil.copyfile",
)
SPAWN_EVENTS = (
    "subprocess.Popen",
    "os.system",
    "os.exec",
    "os.posix_spawn",
    "os.spawn",
    "os.fork",
    "os.forkpty",
    "pty.spawn",
    "_posixsubprocess",
)
PLAIN = (int, float, complex, str, bytes, bool, type(None))
CONTAINERS = (list, tuple, set, frozenset)


class Reporter:
    """Writes one line per message, the repr of [kind, payload], to the report descriptor."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.write, self.repr = os.write, repr  # bound now: later monkeypatching does not reach them

    def emit(self, kind: str, payload: object) -> None:
        try:
            self.write(self.fd, (self.repr([kind, payload]) + "\n").encode())
        except OSError:  # the submission closed the descriptor: the parent sees a missing report
            pass


def is_plain(value: object, depth: int = 0) -> bool:
    """True when `value` is built from exact builtin types only (no subclass, no custom object)."""
    kind = type(value)
    if depth > 50:
        return False
    if kind in PLAIN:
        return True
    if kind in CONTAINERS:
        return all(is_plain(item, depth + 1) for item in value)
    if kind is dict:
        return all(is_plain(k, depth + 1) and is_plain(v, depth + 1) for k, v in value.items())
    return False


def make_guard(reporter: Reporter, graded: bool) -> types.FunctionType:
    """An audit hook that reports (never blocks) what a fair submission does not do."""
    realpath, fsdecode, startswith = os.path.realpath, os.fsdecode, str.startswith
    readable = tuple(
        {os.path.realpath(p) + os.sep for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
        | {"/task/", "/runner/", "/work/"}
    )
    seen = set()

    def note(reason: str) -> None:
        if reason not in seen:
            seen.add(reason)
            reporter.emit("violation", reason)

    def guard(event: str, args: tuple) -> None:
        if event == "open":
            path, mode, flags = args
            if isinstance(path, int) or path is None:
                return
            where = realpath(fsdecode(path))
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & WRITE_FLAGS
            )
            if writing and (graded or not startswith(where, "/work/")) and where != "/dev/null":
                note("wrote a file" + (" while graded: " if graded else " outside the scratch directory: ") + where)
            elif (
                not writing and not startswith(where + os.sep, readable) and where not in ("/dev/null", "/dev/urandom")
            ):
                note("read outside the task: " + where)
        elif event.startswith(SPAWN_EVENTS):
            note("process creation (" + event + ")")
        elif event.startswith("socket."):
            note("network access (" + event + ")")
        elif event.startswith("ctypes."):
            note("ctypes (" + event + ")")
        elif event in WRITE_EVENTS:
            note(event + " (" + ", ".join(fsdecode(a) for a in args if isinstance(a, (str, bytes))) + ")")

    return guard


def fingerprint(watched: dict) -> dict:
    """Identities of each watched object and of what it runs (a function's code, defaults and
    closure cells; a class's or instance's attributes): monkeypatching any of them changes one."""
    prints = {}
    for name, value in watched.items():
        parts = [id(value)]
        if isinstance(value, types.FunctionType):
            parts += [id(value.__code__), id(value.__defaults__)]
            for cell in value.__closure__ or ():
                try:
                    parts.append(id(cell.cell_contents))
                except ValueError:  # an empty cell
                    parts.append(0)
        elif isinstance(value, (type, Reporter)):
            parts += [id(item) for item in vars(value).values()]
        prints[name] = tuple(parts)
    return prints


def run_tests(module: object, reporter: Reporter) -> dict:
    """Each `test_*` function: "passed", or the error it raised (cut at 300 characters)."""
    results = {}
    for name, function in list(vars(module).items()):
        if name.startswith("test_") and callable(function):
            try:
                function()
                results[name] = "passed"
            except MemoryError:
                reporter.emit("violation", "memory limit exceeded")
                results[name] = "MemoryError"
            except BaseException as error:  # noqa: BLE001 - a test may raise anything, SystemExit included
                results[name] = (type(error).__name__ + ": " + str(error))[:300]
    return results


def run_calls(module: object, calls: list, reporter: Reporter) -> dict:
    """Each call's outcome: ["value", repr], ["not_plain", type name] or ["raises", error]."""
    results = {}
    for case, function, arguments in calls:
        try:
            value = getattr(module, function)(*eval(arguments, {"__builtins__": {}}))  # the parent's literal
            results[case] = ["value", repr(value)] if is_plain(value) else ["not_plain", type(value).__name__]
        except MemoryError:
            reporter.emit("violation", "memory limit exceeded")
            results[case] = ["raises", "MemoryError"]
        except SystemExit:
            reporter.emit("violation", "exited during a call (" + function + ")")
            results[case] = ["raises", "SystemExit"]
        except BaseException as error:  # noqa: BLE001 - the call under test may raise anything
            results[case] = ["raises", (type(error).__name__ + ": " + str(error))[:300]]
    return results


def main() -> None:
    reporter = Reporter(int(sys.argv[1]))
    request = eval(sys.stdin.read(), {"__builtins__": {}})  # the parent's literal, read before any untrusted import
    graded = request["mode"] == "calls"
    sys.path.insert(0, "/task")
    sys.setrecursionlimit(2000)
    guard = make_guard(reporter, graded)
    watched = {
        **vars(sys.modules["__main__"]),
        **{"builtins." + k: v for k, v in vars(builtins).items()},
        "the audit hook": guard,
        "the reporter": reporter,
    }
    before = fingerprint(watched)
    sys.addaudithook(guard)
    try:
        module = __import__(request["module"])
    except MemoryError:
        reporter.emit("violation", "memory limit exceeded during import")
        return
    except SystemExit as error:
        reporter.emit("violation", "exited during import (SystemExit " + str(error.code) + ")")
        return
    except BaseException as error:  # noqa: BLE001 - importing untrusted code may raise anything
        reporter.emit("report", {"error": (type(error).__name__ + ": " + str(error))[:300]})
        return
    results = run_calls(module, request["calls"], reporter) if graded else run_tests(module, reporter)
    after = fingerprint(
        {**watched, **vars(sys.modules["__main__"]), **{"builtins." + k: v for k, v in vars(builtins).items()}}
    )
    changed = sorted(name for name in set(before) | set(after) if before.get(name) != after.get(name))
    if changed:
        reporter.emit("violation", "changed the runner or the builtins: " + ", ".join(changed[:5]))
    reporter.emit("report", {"results": results})


if __name__ == "__main__":
    main()
