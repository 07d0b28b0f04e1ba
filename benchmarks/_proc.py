"""Worker processes of the benchmark (standard library only).

Each group runs in its own session, so stopping it reaches every process the
command forked (process managers, ``--workers N``) and nothing else.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


class WorkerGroup:
    """One command (and whatever it forks), logging to ``log``."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str], log: Path) -> None:
        self.argv = list(argv)
        self._log = log.open("ab")
        self.proc = subprocess.Popen(
            self.argv,
            env={**os.environ, **env, "PYTHONPATH": str(REPO)},
            cwd=str(REPO),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill9(self) -> None:
        """``kill -9`` the group's leader process only (as a crash would)."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self, grace: float = 8.0) -> None:
        """SIGTERM the whole group, then SIGKILL whatever is left after ``grace``."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and self.proc.poll() is None:
            time.sleep(0.05)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)
        self._log.close()


@contextlib.contextmanager
def worker_group(argv: Sequence[str], env: Mapping[str, str], log: Path) -> Iterator[WorkerGroup]:
    group = WorkerGroup(argv, env, log)
    try:
        yield group
    finally:
        group.stop()
