"""Command line: ``python -m chronos_trio <command>``."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

import trio

#: Exit codes, in one place (documented in the README).
EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m chronos_trio",
        description="Reliable distributed delayed jobs on Redis, built on Trio.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = sub.add_parser("demo", help="run producer + worker on the in-memory store")
    demo.add_argument("--jobs", type=int, default=200, help="email jobs to enqueue (default 200)")
    demo.add_argument("--no-live", action="store_true", help="print frames instead of redrawing")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if args.command == "demo":
        from ._demo import run_demo

        if args.jobs < 1:
            print("error: --jobs must be >= 1", file=sys.stderr)
            return EXIT_USAGE
        return trio.run(lambda: run_demo(jobs=args.jobs, live=False if args.no_live else None))
    return EXIT_USAGE  # pragma: no cover - argparse rejects unknown commands
