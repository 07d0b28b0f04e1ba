"""What a type checker makes of the public API: ``@app.task`` gives a
``Task`` typed by the handler's payload parameter in every handler shape,
so ``mypy --strict`` checks a user's enqueue calls (before, every task was
``Task[Never]`` and every enqueue an error), and the examples users copy
type-check."""

from __future__ import annotations

from pathlib import Path

import pytest

mypy_api = pytest.importorskip("mypy.api")

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _at_the_root(monkeypatch: pytest.MonkeyPatch) -> None:
    # mypy finds the package (an editable install) from the project's root
    monkeypatch.chdir(ROOT)


def run_mypy(*paths: Path) -> str:
    out, err, _ = mypy_api.run(
        # the project's settings (strict, as users are told to run it; unused
        # ignores in the package are the package's own check's business)
        ["--config-file", str(ROOT / "pyproject.toml"), "--no-error-summary",
         "--cache-dir", str(ROOT / ".mypy_cache"), *map(str, paths)]
    )  # fmt: skip
    return out + err


def test_a_task_is_typed_by_its_handlers_payload() -> None:
    out = run_mypy(ROOT / "tests" / "data" / "typed_tasks.py")
    revealed = [
        line.split("Revealed type is ")[1] for line in out.splitlines() if "Revealed" in line
    ]
    # the Email's module path depends on how mypy names the file
    assert [r.startswith('"chronos_trio.app._task.Task[') for r in revealed] == [True] * 4, out
    assert revealed[0].endswith('typed_tasks.Email]"'), out
    assert revealed[1:] == [
        '"chronos_trio.app._task.Task[int]"',
        '"chronos_trio.app._task.Task[list[str]]"',
        '"chronos_trio.app._task.Task[Any]"',
    ], out
    errors = [line for line in out.splitlines() if ": error:" in line]
    # the one deliberate mistake: an int where an Email goes
    assert len(errors) == 1 and 'incompatible type "int"; expected "Email"' in errors[0], out


def test_the_examples_type_check() -> None:
    examples = sorted((ROOT / "examples").glob("*.py"))
    assert examples
    out = run_mypy(*examples)
    assert ": error:" not in out, out
