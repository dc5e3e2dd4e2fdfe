"""Start-up cost of the light CLI: wall time of `tracegym ingest --help` over that of
`python -c "import pydantic"`, measured interleaved in the same run (goal: ≤ 3×).

    python benchmarks/cli_startup.py [--repeats 7]

Also prints which heavy libraries (torch, transformers, peft, trl, accelerate) the command
imported: none should be.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

HEAVY = ("torch", "transformers", "peft", "trl", "accelerate")
PROBE = (
    "import sys, runpy; sys.argv = ['tracegym', 'ingest', '--help']\n"
    "try:\n    runpy.run_module('tracegym.cli', run_name='__main__')\n"
    "except SystemExit:\n    pass\n"
    f"print('HEAVY:' + ','.join(m for m in {HEAVY!r} if m in sys.modules))"
)


def wall(command: list[str]) -> tuple[float, str]:
    started = time.perf_counter()
    output = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    return time.perf_counter() - started, output


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7, help="interleaved measurements of each (default 7)")
    args = parser.parse_args(argv)
    baseline, cli, heavy = [], [], ""
    for _ in range(args.repeats):
        baseline.append(wall([sys.executable, "-c", "import pydantic"])[0])
        seconds, output = wall([sys.executable, "-c", PROBE])
        cli.append(seconds)
        heavy = output.rsplit("HEAVY:", 1)[-1].strip()
    base, ours = statistics.median(baseline), statistics.median(cli)
    print(f"import pydantic:        {base * 1000:7.0f} ms (median of {args.repeats})")
    print(f"tracegym ingest --help: {ours * 1000:7.0f} ms (median of {args.repeats})")
    print(f"heavy libraries imported: {heavy or 'none'}")
    print(f"RATIO tracegym ingest --help / import pydantic: {ours / base:.2f} (goal <= 3)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
