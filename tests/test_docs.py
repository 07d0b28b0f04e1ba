"""The documentation stays true: every code block marked runnable in README.md
and docs/*.md runs and prints what it says, every page is in the site's nav,
and the README's relative links point at files that exist.

Convention (docs/index.md, "About the code blocks"): a whole program is a
fenced ``python`` block right after a line ``<!-- runnable ... -->``, whose
``expect="..."`` attributes (``\\n`` for a line break) are texts its output
must contain. Each runs in a subprocess on the in-memory store (no
CHRONOS_URL), all of them at once, each bounded by a timeout. The strict
build itself (broken links, missing API references) runs in ``.ci/run``.
"""

from __future__ import annotations

import concurrent.futures
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
TIMEOUT = 90.0
#: Blocks run at once.
PARALLEL = 4

_MARKER = re.compile(r"^<!-- runnable(?P<attrs>.*?)-->\s*$")
_EXPECT = re.compile(r'expect="(?P<text>(?:[^"\\]|\\.)*)"')


class Block(NamedTuple):
    where: str  # file:line of the fence
    code: str
    expects: tuple[str, ...]


def runnable_blocks(path: Path) -> list[Block]:
    """The runnable blocks of one Markdown file (ValueError for a marker that
    is not followed by a python fence: a marker must never go unnoticed)."""
    lines = path.read_text().splitlines()
    blocks = []
    for i, line in enumerate(lines):
        m = _MARKER.match(line)
        if m is None:
            continue
        fence = i + 1
        if fence >= len(lines) or lines[fence].strip() != "```python":
            raise ValueError(f"{path.name}:{i + 1}: a runnable marker not followed by ```python")
        end = next(j for j in range(fence + 1, len(lines)) if lines[j].startswith("```"))
        expects = tuple(
            e["text"].replace("\\n", "\n").replace('\\"', '"') for e in _EXPECT.finditer(m["attrs"])
        )
        code = "\n".join(lines[fence + 1 : end]) + "\n"
        name = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
        blocks.append(Block(f"{name}:{fence + 1}", code, expects))
    return blocks


def doc_files() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


BLOCKS = [b for path in doc_files() for b in runnable_blocks(path)]


def _run(block: Block, tmp: Path) -> subprocess.CompletedProcess[str]:
    script = tmp / (re.sub(r"\W", "_", block.where) + ".py")
    script.write_text(block.code)
    env = {k: v for k, v in os.environ.items() if k != "CHRONOS_URL"}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=tmp,
        env=env,
    )


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every runnable block run once, a few at a time (each in its own
    process): all 25 at once on 2 cores took 28 s, and a block timed out at
    load 12."""
    tmp = tmp_path_factory.mktemp("doc_blocks")
    with concurrent.futures.ThreadPoolExecutor(max_workers=PARALLEL) as pool:
        futures = {b.where: pool.submit(_run, b, tmp) for b in BLOCKS}
        return {where: f.result() for where, f in futures.items()}


def test_the_docs_have_runnable_blocks() -> None:
    """The convention is in use where the docs promise whole programs."""
    files = {b.where.split(":")[0] for b in BLOCKS}
    assert "README.md" in files
    assert len(BLOCKS) >= 8, [b.where for b in BLOCKS]
    assert all(b.expects for b in BLOCKS), "every runnable block says what it prints"


@pytest.mark.parametrize("block", BLOCKS, ids=[b.where for b in BLOCKS])
def test_a_runnable_block_runs_and_prints_what_it_says(
    block: Block, outcomes: dict[str, subprocess.CompletedProcess[str]]
) -> None:
    proc = outcomes[block.where]
    assert proc.returncode == 0, f"{block.where} failed:\n{proc.stderr}"
    assert "Traceback" not in proc.stderr, proc.stderr
    for text in block.expects:
        assert text in proc.stdout, f"{block.where}: {text!r} not in its output:\n{proc.stdout}"


def test_a_marker_without_its_block_is_refused(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text('<!-- runnable expect="x" -->\n```bash\necho x\n```\n')
    with pytest.raises(ValueError, match="not followed by"):
        runnable_blocks(page)
    page.write_text('text\n<!-- runnable expect="a\\nb" -->\n```python\nprint("a")\n```\n')
    [block] = runnable_blocks(page)
    assert block.expects == ("a\nb",) and block.code == 'print("a")\n'


def _nav_pages(node: Any) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, list):
        return [p for item in node for p in _nav_pages(item)]
    if isinstance(node, dict):
        return [p for value in node.values() for p in _nav_pages(value)]
    return []


def test_every_docs_page_is_in_the_nav_and_every_nav_entry_exists() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    nav = _nav_pages(config["nav"])
    assert len(nav) == len(set(nav)), "a page listed twice"
    left_out = [line.strip() for line in config.get("not_in_nav", "").splitlines() if line.strip()]
    pages = {
        str(p.relative_to(DOCS))
        for p in DOCS.rglob("*.md")
        if not any(p.match(pattern.lstrip("/")) for pattern in left_out)
    }
    assert set(nav) == pages
    assert config["strict"] is True
    assert config["validation"]["omitted_files"] == "warn"


def test_the_readme_links_point_at_files_that_exist() -> None:
    text = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\((?!https?:|#)([^)#\s]+)", text)
    assert any(t.startswith("docs/") for t in targets)
    missing = [t for t in targets if not (ROOT / t).exists()]
    assert not missing, missing
