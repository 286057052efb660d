"""Splitting a probe's list of cases over processes (compiling dominates these probes; the GPU host has 16
cores): ``--jobs N`` re-runs the same command line N times with ``--part I/N``, each taking every N-th case."""

import subprocess
import sys


def add_arguments(ap) -> None:
    ap.add_argument("--jobs", type=int, default=1, help="split the cases over this many processes")
    ap.add_argument("--part", default="0/1", help="(set by --jobs) run only the I-th of every N cases")


def my_part(args) -> tuple[int, int]:
    """(I, N) of this process. With ``--jobs N`` this process starts N copies of itself, waits for them and
    exits with the worst status instead of returning."""
    if args.jobs > 1:
        argv = sys.argv[1:]
        at = next(i for i, a in enumerate(argv) if a == "--jobs" or a.startswith("--jobs="))
        del argv[at:at + (1 if "=" in argv[at] else 2)]  # exactly the --jobs option and its value
        procs = [subprocess.Popen([sys.executable, sys.argv[0], *argv, "--part", f"{i}/{args.jobs}"])
                 for i in range(args.jobs)]
        sys.exit(max(p.wait() for p in procs))
    part, parts = (int(v) for v in args.part.split("/"))
    return part, parts
