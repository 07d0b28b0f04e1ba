"""The layer contract in pyproject.toml holds, and really fails on a bad
import: each planted import below breaks a copy of the package."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINT = Path(sys.executable).with_name("lint-imports")

pytestmark = pytest.mark.skipif(not LINT.exists(), reason="import-linter is a dev dependency")


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT), "--no-cache", "--no-logo", str(root / "pyproject.toml")],
        cwd=root,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_contract_holds() -> None:
    result = _lint(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "BROKEN" not in result.stdout and "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "planted", "contract"),
    [
        # a lower layer importing a higher one
        ("records/_jobs.py", "from ..store import Store", "Layers"),
        ("store/_roles.py", "from ..runtime import WorkerConfig", "Layers"),
        ("runtime/_config.py", "from ..worker import Worker", "Layers"),
        # a TYPE_CHECKING import back out of the App counts
        (
            "runtime/_state.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..app import App",
            "Layers",
        ),
        # a circle inside one layer
        ("store/_roles.py", "from . import memory", "No import cycles"),
        # actors talk over channels, never to each other
        ("actors/leaser.py", "from . import executor", "Actors never import each other"),
        # the producers outside Trio stand beside the App, not on it ...
        ("producers/_common.py", "from ..app import Task", "Layers"),
        ("app/_task.py", "from ..producers import SyncProducer", "Layers"),
        # ... nor on the worker side, nor on Trio
        ("producers/sync.py", "from ..runtime import TaskSpec", "Producers outside Trio import"),
        ("producers/asyncio.py", "import trio", "Producers outside Trio do not import trio"),
        # the dashboard and the integrations stand on the app, beside each other
        ("app/_app.py", "from ..dashboard import dashboard_app", "Layers"),
        ("dashboard/_app.py", "from ..cli import main", "Layers"),
        ("integrations/otel.py", "from ..dashboard import dashboard_app", "Layers"),
        # the root package re-exports every layer: importing it reaches past them
        ("integrations/prometheus.py", "from .. import __version__", "No module imports the root"),
        ("store/_roles.py", "import chronos_trio", "No module imports the root"),
    ],
)
def test_a_planted_bad_import_breaks_the_contract(
    tmp_path: Path, module: str, planted: str, contract: str
) -> None:
    shutil.copytree(ROOT / "chronos_trio", tmp_path / "chronos_trio")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / "chronos_trio" / module
    target.write_text(target.read_text() + f"\n{planted}  # noqa\n")
    result = _lint(tmp_path)
    assert result.returncode != 0, result.stdout
    broken = [line for line in result.stdout.splitlines() if line.endswith("BROKEN")]
    assert len(broken) >= 1 and any(line.startswith(contract) for line in broken), result.stdout
