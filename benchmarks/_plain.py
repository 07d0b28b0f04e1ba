"""An interpreter that imports this checkout as a regular install would:
the start-up workload's worker runs on it (standard library only).

The project's own venv holds an editable install (``pip install -e .``),
whose ``.pth`` imports setuptools' finder, and with it ``pathlib`` and what
that imports, at every interpreter start: about 50M instructions that a user
who installed the wheel never runs, while the peers run from regular
installs. So the workload runs our worker on a venv of its own,
``benchmarks/.venv/chronos_trio_plain``, with no package in it and one
``.pth`` of plain paths: this checkout, then the project venv's
site-packages (Trio, attrs, ...), whose ``.pth`` files are then not
processed (a path line is only appended to ``sys.path``); the ones other
than the editable install's (setuptools' ``distutils-precedence.pth``, as a
pip-made venv has) are copied in beside it, so only the editable finder is
left out.
"""

from __future__ import annotations

import shutil
import site
import subprocess
import sys
from pathlib import Path

from benchmarks._proc import REPO

VENV = REPO / "benchmarks" / ".venv" / "chronos_trio_plain"
PTH = "chronos_trio_plain.pth"


def _site_packages(python: Path) -> Path:
    out = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    return Path(out.stdout.strip())


def plain_python() -> str:
    """The plain venv's interpreter (made on first use, its ``.pth``
    rewritten each call so it follows this interpreter's site-packages)."""
    python = VENV / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(VENV)], check=True)
    target = _site_packages(python)
    sources = [Path(p) for p in site.getsitepackages() if Path(p).is_dir()]
    lines = [str(REPO), *map(str, sources)]
    (target / PTH).write_text("\n".join(lines) + "\n")
    for source in sources:
        for pth in source.glob("*.pth"):
            if not pth.name.startswith("__editable__"):
                shutil.copyfile(pth, target / pth.name)
    return str(python)
