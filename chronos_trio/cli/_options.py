"""What every command module shares: exit codes, :class:`CliError`, and
argument types whose bad values are one-line usage errors naming the option."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import NoReturn

#: Exit codes of every command, in one place (docs/cli.md lists them).
EXIT_OK = 0  #: success; also a worker or process manager stopped by SIGTERM/SIGINT
EXIT_FAILURE = 1  #: the worker failed at run time (an actor exceeded its restart intensity)
EXIT_USAGE = 2  #: bad command line or option value (argparse's own code too)
EXIT_NO_APP = 3  #: APP cannot be imported or used: not an App, or a schedule of an unknown task
EXIT_BAD_URL = 4  #: unsupported or malformed store URL
EXIT_UNAVAILABLE = 5  #: the store cannot be reached (Redis down, wrong host/port, auth)
EXIT_NOT_FOUND = 6  #: unknown queue or job id
EXIT_REFUSED = 7  #: action refused: job in the wrong state, topology change refused, not confirmed
EXIT_RESTARTS = 8  #: process manager gave up: worker processes crashed too often
EXIT_PROBLEMS = 9  #: ``check`` found problems (with ``--repair``: problems it could not repair)
EXIT_PENDING = 10  #: ``migrate --check``: the PostgreSQL schema has migrations to apply
EXIT_RECYCLED = 11  #: a managed worker process past its job or memory limit (it is replaced)
EXIT_JOB_FAILED = 12  #: ``enqueue --wait``: the job ended dead (failed for good) or aborted
EXIT_TIMEOUT = 13  #: ``enqueue --wait --timeout``: the job had not finished in time
EXIT_INTERRUPTED = 130  #: a second SIGINT/SIGTERM forced an immediate exit

#: Exit codes a worker process cannot recover from by restarting.
FATAL_CHILD_EXITS = frozenset({EXIT_USAGE, EXIT_NO_APP, EXIT_BAD_URL})

#: How often a managed worker process writes to its heartbeat pipe.
CHILD_HEARTBEAT_INTERVAL = 1.0


#: Each exit code's name, as a JSON error object gives it (``not_found``).
EXIT_NAMES = {
    value: name.removeprefix("EXIT_").lower()
    for name, value in dict(globals()).items()
    if name.startswith("EXIT_") and isinstance(value, int)
}


class CliError(Exception):
    """A one-line error for the user and the exit code that goes with it."""

    def __init__(self, message: str, code: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.code = code


def one_line(text: str) -> str:
    return " ".join(str(text).split())


class UsageError(SystemExit):
    """A bad command line: exit code 2 and the one line that says why
    (printed by ``main``, as text or, under ``--json``, a JSON object)."""

    def __init__(self, message: str) -> None:
        super().__init__(EXIT_USAGE)
        self.message = message


class Parser(argparse.ArgumentParser):
    """Usage errors are one line (plus a hint), exit code 2."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: error: {one_line(message)} (see --help)")


def print_error(message: str, code: int, *, as_json: bool, prefix: str = "error: ") -> None:
    """An error as every command reports it: ``prefix`` and ``message`` as
    one line on stderr; under ``--json`` also one JSON object on stdout,
    ``{"error": {"message", "exit_code", "reason"}}`` (``reason`` names
    the exit code: ``not_found``, ``usage``, ...), so a program reading the
    JSON output reads the error there too."""
    print(f"{prefix}{message}", file=sys.stderr)
    if as_json:
        error = {"message": message, "exit_code": code, "reason": EXIT_NAMES.get(code, "failure")}
        print(json.dumps({"error": error}, ensure_ascii=False))


# -- option types: a bad value is a one-line usage error naming the option ----------
def int_at_least(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {text!r}")
        return value

    parse.__name__ = f"integer >= {minimum}"
    return parse


def seconds(*, allow_zero: bool = False) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        if not (value >= 0 if allow_zero else value > 0) or value == float("inf"):
            bound = ">= 0" if allow_zero else "> 0"
            raise argparse.ArgumentTypeError(f"expected seconds {bound}, got {text!r}")
        return value

    parse.__name__ = "seconds"
    return parse
