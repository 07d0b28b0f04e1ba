"""How a handler's exception is kept on its job: one text, bounded, the
same whether the handler ran in this process or in an isolated child."""

from __future__ import annotations

import signal
import traceback

#: Longest error text kept on a job (message plus the end of the traceback).
MAX_ERROR_CHARS = 4000


def error_text(exc: BaseException, label: str | None = None) -> str:
    """``label: message`` (label defaults to the exception's type name)
    and its traceback, cut in the middle to :data:`MAX_ERROR_CHARS`."""
    head = f"{label or type(exc).__name__}: {exc}"
    tb = "".join(traceback.format_exception(exc))
    text = head if not tb else f"{head}\n{tb}"
    if len(text) > MAX_ERROR_CHARS:
        text = text[: MAX_ERROR_CHARS // 4] + "\n...\n" + text[-(MAX_ERROR_CHARS * 3) // 4 :]
    return text


def describe_exit(returncode: int) -> str:
    """A child process's exit status in words: ``killed by SIGSEGV``,
    ``exited`` (0) or ``failed`` (any other code)."""
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return "exited" if returncode == 0 else "failed"
