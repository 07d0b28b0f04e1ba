"""Isolated handlers (``@app.task(isolate=True)``): CPU-bound or blocking
code in child processes of the worker, with hard time limits.

A child imports this module to find its handlers, so the app and its
isolated tasks live in a module (never in the script you run): see
docs/isolation.md for a program that runs them, or run a worker with
``python -m chronos_trio worker isolated_jobs:app`` from this directory.
"""

from __future__ import annotations

import os

import attrs

from chronos_trio import App, JobContext, SoftTimeLimit

app = App(os.environ.get("CHRONOS_URL"))


@attrs.frozen
class Primes:
    below: int


@attrs.frozen
class Count:
    primes: int
    complete: bool  # False: the soft limit stopped it early


@app.task("primes.count", isolate=True, timeout=2.0)
def count_primes(args: Primes, job: JobContext) -> Count:
    """Pure CPU: it would hold the worker's event loop (and the GIL) for
    as long as it runs; in its child it holds neither. At its timeout it
    gets ``SoftTimeLimit`` and returns what it has; if it did not, its
    child would be killed ``hard_limit_grace`` later."""
    found = 0
    try:
        for n in range(2, args.below):
            if all(n % d for d in range(2, int(n**0.5) + 1)):
                found += 1
    except SoftTimeLimit:
        return Count(found, complete=False)
    return Count(found, complete=True)
