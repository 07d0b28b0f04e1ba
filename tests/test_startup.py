"""Start-up: what ``python -m chronos_trio worker APP`` imports before its
first job. Start-up is import time (the store is reached and the first job
leased within milliseconds), so the modules a worker does not need there
are imported on first use; this test fails when one comes back.

Each case runs the real worker command in a subprocess on a small app (an
interval schedule, a handler of ``int`` payloads, decoded without cattrs)
whose first job writes down which of the watched modules are loaded, then
stops the worker with SIGTERM. On Redis the server is a fresh one, so the worker's first leases
meet ``NOSCRIPT`` (scripts not loaded yet) and must load them without
redis-py too."""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

import chronos_trio
from chronos_trio import _code_cache, _collector
from chronos_trio.cli._main import build_parser, build_worker_parser, parse_args
from chronos_trio.cli._options import UsageError
from chronos_trio.records import _codec
from chronos_trio.records._errors import PayloadError
from chronos_trio.store.redis import _scripts
from chronos_trio.testing.redis_server import RedisServer, call

ROOT = Path(__file__).resolve().parent.parent

#: Imported on first use only: none of them is needed before the first job.
NOT_AT_START = (
    "redis",  # redis-py: only Cluster, Sentinel, TLS, result waiters, errors
    "asyncio",  # redis-py imported it
    "croniter",  # only for cron schedules (this app has an interval one)
    "cattrs",  # only for typed payloads and results
    "chronos_trio.app._inspector",  # the Inspector (admin commands)
    "chronos_trio.cli._admin_commands",
    "chronos_trio.cli._output",  # admin commands' tables
    "chronos_trio.cli._process_manager",  # --processes N
    "chronos_trio.store.redis._check",  # the store checker
    "chronos_trio.store.redis._blocking",  # redis-py in threads
    "chronos_trio.store.redis._cluster",
    "chronos_trio.store.redis._sentinel",
    # the other commands: the worker builds its own parser only
    "chronos_trio.cli._admin",
    "chronos_trio.cli._dashboard_command",
    "chronos_trio.cli._migrate_command",
    # what no worker on these stores uses
    "chronos_trio.dashboard",
    "chronos_trio.store.postgres",
    "chronos_trio.store.sqlite",
    "prometheus_client",
    "opentelemetry",
    "importlib.resources",  # the Lua scripts are read with pathlib
    # isolated handlers' child processes, their wire protocol and records:
    # only an app with isolated tasks (this one has none)
    "chronos_trio.runtime._isolation",
    "chronos_trio.runtime._isolation_wire",
    # the feed of an app's metrics object and its record (this app has none)
    "chronos_trio.runtime._metrics_feed",
    "chronos_trio.runtime._job_metric",
    # Trio's TLS, DTLS, subprocess and file parts (``_lazy_trio``): on first use
    "ssl",
    "trio._dtls",
    "trio._file_io",
    "trio._highlevel_ssl_helpers",
    "trio._path",
    "trio._ssl",
    "trio._subprocess",
    # what Trio's thread cache imports to name its threads: at the first one
    # (``_trio_thread_names``)
    "ctypes",
    "subprocess",
    "tempfile",  # only a metrics manager's directory
    # what builds and starts a workflow: its step, chain, group and graph
    # classes (records._workflow, which runs a workflow's steps, holds none),
    # the templates of its start, its record's tree and keep, the graph
    # builder (App._flow_starts is made at the first start)
    "chronos_trio.records._flow_build",
    "chronos_trio.records._flow_start",
    "chronos_trio.records._flow_encoding",
    "chronos_trio.records._flow_keep",
    "chronos_trio.records._graph",
)
#: ... nor, on Redis, the in-memory store, or what only it imports eagerly.
NOT_AT_START_ON_REDIS = (
    *NOT_AT_START,
    "chronos_trio.store.memory",
    # search: only the Inspector, the dashboard and the search command
    "chronos_trio.store._search",
    "chronos_trio.store.redis._search",
    # the store checker's findings: only a check
    "chronos_trio.store._check_results",
    # a workflow's record and views: reading or aborting one (a worker only
    # runs its steps)
    "chronos_trio.records._flow_control",
    "chronos_trio.app._workflow_control",
    # the per-minute aggregates' records: built when the aggregator first
    # writes (after the first jobs), read by the dashboard
    "chronos_trio.records._aggregates",
    "chronos_trio.store.redis._aggregates",
)

APP = """
import json, os, signal, sys
from contextlib import asynccontextmanager
from typing import Any

import chronos_trio


@asynccontextmanager
async def enqueue_first(app):
    # The in-memory store lives in the worker: the first job comes from here.
    await app.enqueue("startup.first", 1)
    yield {}


URL = os.environ.get("STARTUP_URL")
app = chronos_trio.App(URL, name="startup", lifespan=None if URL else enqueue_first)
app.every(3600, None, task="startup.tick")


@app.task("startup.tick")
async def tick(args: Any, job: chronos_trio.JobContext) -> None:
    pass


@app.task("startup.first")
async def first(args: int, job: chronos_trio.JobContext) -> None:
    assert args == 1
    watched = json.loads(os.environ["STARTUP_WATCHED"])
    loaded = [m for m in watched if m in sys.modules]
    # the methods of our attrs classes loaded by now that attrs generated
    # (compiled) rather than records._attrs_methods' shared ones
    # (a public class reports its package as its module: all are looked at)
    generated = sorted({
        f"{cls.__module__}.{cls.__qualname__}.{method}"
        for name, module in list(sys.modules.items())
        if name.startswith("chronos_trio")
        for cls in vars(module).values()
        if isinstance(cls, type)
        and cls.__module__.startswith("chronos_trio")
        and hasattr(cls, "__attrs_attrs__")
        for method in ("__repr__", "__eq__", "__hash__")
        if getattr(getattr(cls, method), "__code__", None) is not None
        and getattr(cls, method).__code__.co_filename.startswith("<attrs generated")
    })
    from chronos_trio import _code_cache

    cache = {
        "installed": _code_cache._path is not None,
        "missed": _code_cache._missed,
        "used": len(_code_cache._used),
        "forward_refs": sum(key.startswith("eval\\0") for key in _code_cache._used),
    }
    with open(os.environ["STARTUP_REPORT"], "w") as f:
        json.dump({"loaded": loaded, "generated_methods": generated, "code_cache": cache}, f)
    os.kill(os.getpid(), signal.SIGTERM)  # a graceful stop
"""


def _first_job_report(
    tmp_path: Path, url: str | None, watched: tuple[str, ...], **env_extra: str
) -> dict[str, Any]:
    """Run the worker command on the app until its first job; the modules
    of ``watched`` loaded then (``loaded``), and our attrs classes loaded
    then whose ``__repr__``, ``__eq__`` or ``__hash__`` attrs generated
    (``generated_methods``)."""
    env = {"STARTUP_WATCHED": json.dumps(watched), **env_extra}
    if url is not None:
        env["STARTUP_URL"] = url
    return _run_to_first_job(tmp_path, "startup_app", APP, **env)


def _run_to_first_job(tmp_path: Path, module: str, source: str, **env_extra: str) -> dict[str, Any]:
    """Run the worker command on ``source`` (its ``app``, as ``module``)
    until its first job; what the job wrote to ``$STARTUP_REPORT``."""
    (tmp_path / f"{module}.py").write_text(source)
    report = tmp_path / "report.json"
    env = {k: v for k, v in os.environ.items() if k != "CHRONOS_URL"}
    env.update(PYTHONPATH=os.pathsep.join([str(ROOT), str(tmp_path)]), STARTUP_REPORT=str(report))
    env[_code_cache.ENV] = str(tmp_path / "code-cache")
    env.update(env_extra)
    argv = [sys.executable, "-m", "chronos_trio", "worker", f"{module}:app"]
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env, check=False
    )
    assert proc.returncode == 0, proc.stderr
    out: dict[str, Any] = json.loads(report.read_text())
    return out


def test_memory_store_worker_imports_only_what_its_first_job_needs(tmp_path: Path) -> None:
    assert _first_job_report(tmp_path, None, NOT_AT_START)["loaded"] == []


def test_a_worker_compiles_no_attrs_class_it_compiled_at_its_last_start(tmp_path: Path) -> None:
    """The second start of a worker takes the code of every attrs class it
    defines before its first job from the cache the first start wrote
    (at its app's import, then at its exit); the same hash seed, so no
    generated ``__hash__`` holds another type hash."""
    first = _first_job_report(tmp_path, None, (), PYTHONHASHSEED="11")["code_cache"]
    assert first["installed"] and first["used"] > 100
    # typing.ForwardRef's compiles too (string annotations of TypedDicts,
    # NamedTuples and handlers' signatures)
    assert first["forward_refs"] > 5
    (cache,) = (tmp_path / "code-cache").iterdir()
    assert cache.stat().st_size > 0
    second = _first_job_report(tmp_path, None, (), PYTHONHASHSEED="11")["code_cache"]
    assert second == {**first, "missed": 0}
    off = _first_job_report(tmp_path, None, (), CHRONOS_CODE_CACHE="off")["code_cache"]
    assert off == {"installed": False, "missed": 0, "used": 0, "forward_refs": 0}


#: A worker app whose first job (an attrs payload: cattrs compiles its
#: structure code when it is decoded) reports the code cache and ends the
#: process at once, as the start-up benchmark's does (no graceful exit).
TYPED_APP = """
import json, os
from contextlib import asynccontextmanager

import attrs

import chronos_trio


@attrs.frozen
class Payload:
    n: int
    name: str = "x"


@asynccontextmanager
async def enqueue_first(app):
    await app.enqueue("typed.first", Payload(1))
    yield {}


app = chronos_trio.App(name="typed", lifespan=enqueue_first)


@app.task("typed.first")
async def first(args: Payload, job: chronos_trio.JobContext) -> None:
    from chronos_trio import _code_cache

    assert args == Payload(1)
    with open(os.environ["STARTUP_REPORT"], "w") as f:
        json.dump({"missed": _code_cache._missed, "used": len(_code_cache._used)}, f)
    os._exit(0)
"""


def test_what_the_first_payload_compiled_is_kept_without_a_graceful_exit(
    tmp_path: Path,
) -> None:
    """The first job's decoding compiles cattrs' code for its payload's
    class; it is written to the cache right after (before the handler runs),
    so a worker that never exits gracefully takes it from there next time."""
    first, second = (
        _run_to_first_job(tmp_path, "typed_app", TYPED_APP, PYTHONHASHSEED="12") for _ in range(2)
    )
    # the first start compiled everything, its last compiles (cattrs') then
    # written before its handler ran; the second compiles nothing
    assert first["missed"] == 0 and first["used"] > 100
    assert second == {"missed": 0, "used": first["used"]}


@pytest.mark.redis
def test_redis_worker_reaches_its_first_job_without_redis_py(tmp_path: Path) -> None:
    """A plain redis:// URL: round trips on Trio sockets, no redis-py; the
    fresh server has no script loaded, so NOSCRIPT is handled without it."""
    with RedisServer() as server:

        async def enqueue() -> None:
            app = chronos_trio.App(server.url)
            try:
                with trio.fail_after(10):
                    await app.enqueue("startup.first", 1)
            finally:
                await app.aclose()

        trio.run(enqueue)
        call(server.port, "SCRIPT", "FLUSH")  # the worker's scripts too: all NOSCRIPT first
        report = _first_job_report(tmp_path, server.url, NOT_AT_START_ON_REDIS)
    assert report["loaded"] == []
    # Compiling the reprs, __eq__ and __hash__ attrs generates was about a
    # sixth of a worker's start-up: each class it loads before its first job
    # shares records._attrs_methods' instead.
    assert report["generated_methods"] == []


# -- the cyclic collector while the command line starts ----------------------------------------

#: A worker app whose first job reports the collector's state (given back
#: before the worker's run: the job waits for it to be, at most 10 s).
GC_APP = """
import gc, json, os, signal, sys

import trio

import chronos_trio
from chronos_trio import _code_cache, _collector

HELD = _collector.HELD_THRESHOLD
AT_IMPORT = {"threshold": list(gc.get_threshold()), "enabled": gc.isenabled()}
if os.environ.get("GC_APP_DISABLES"):
    gc.disable()
if os.environ.get("GC_APP_THRESHOLD"):
    gc.set_threshold(*json.loads(os.environ["GC_APP_THRESHOLD"]))


async def enqueue_first(app):
    await app.enqueue("gc.first", None)
    yield {}


from contextlib import asynccontextmanager

app = chronos_trio.App(name="gc", lifespan=asynccontextmanager(enqueue_first))


@app.task("gc.first")
async def first(args, job):
    with trio.fail_after(10):
        while gc.get_threshold()[0] == HELD:
            await trio.sleep(0.01)
    report = {
        "at_import": AT_IMPORT,
        "threshold": list(gc.get_threshold()),
        "enabled": gc.isenabled(),
        "frozen": gc.get_freeze_count(),
    }
    with open(os.environ["GC_REPORT"], "w") as f:
        json.dump(report, f)
    os.kill(os.getpid(), signal.SIGTERM)
"""


def _gc_report(tmp_path: Path, **env_extra: str) -> dict[str, Any]:
    (tmp_path / "gc_app.py").write_text(GC_APP)
    report = tmp_path / "gc.json"
    env = {k: v for k, v in os.environ.items() if k != "CHRONOS_URL"}
    env.update(PYTHONPATH=os.pathsep.join([str(ROOT), str(tmp_path)]), GC_REPORT=str(report))
    env.update(env_extra)
    argv = [sys.executable, "-m", "chronos_trio", "worker", "gc_app:app"]
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env, check=False
    )
    assert proc.returncode == 0, proc.stderr
    out: dict[str, Any] = json.loads(report.read_text())
    return out


def test_worker_starts_with_the_collector_held_and_gives_it_back_before_it_runs(
    tmp_path: Path,
) -> None:
    default = list(gc.get_threshold())  # this process's, as Python set them
    report = _gc_report(tmp_path)
    # held while the app was imported ...
    assert report["at_import"]["threshold"][0] == _collector.HELD_THRESHOLD
    assert report["at_import"]["enabled"] is True
    # ... and given back before the worker ran: thresholds as they were,
    # start-up's objects frozen
    assert report["threshold"] == default
    assert report["enabled"] is True
    assert report["frozen"] > 0


def test_an_app_that_disables_the_collector_keeps_it_disabled(tmp_path: Path) -> None:
    default = list(gc.get_threshold())
    report = _gc_report(tmp_path, GC_APP_DISABLES="1")
    assert report["enabled"] is False  # the app's choice is kept
    assert report["threshold"] == default


def test_an_app_that_sets_thresholds_keeps_them(tmp_path: Path) -> None:
    report = _gc_report(tmp_path, GC_APP_THRESHOLD="[5000, 20, 30]")
    assert report["threshold"] == [5000, 20, 30]
    assert report["enabled"] is True


def test_hold_and_release_leave_enabled_alone_and_restore_thresholds() -> None:
    before = gc.get_threshold()
    was_enabled = gc.isenabled()
    try:
        _collector.hold()
        assert gc.get_threshold()[0] == _collector.HELD_THRESHOLD
        assert gc.get_threshold() == (_collector.HELD_THRESHOLD, *before[1:])
        _collector.hold()  # a second hold changes nothing
        _collector.release()
        assert gc.get_threshold()[0] != _collector.HELD_THRESHOLD
        assert gc.get_threshold() == before
        assert gc.isenabled() is was_enabled
        _collector.release()  # not held: nothing
        assert gc.get_threshold() == before
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()


@pytest.mark.parametrize(
    ("orig_argv", "argv0", "expected"),
    [
        (["python", "-m", "chronos_trio", "worker", "a:app"], "-m", True),
        (["python", "-X", "importtime", "-m", "chronos_trio", "worker"], "-m", True),
        (["python", "-u", "-W", "ignore", "-m", "chronos_trio"], "-m", True),
        (["python", "-m", "benchmarks.chronos_worker"], "-m", False),
        (["python", "-m", "pytest", "-m", "chronos_trio"], "-m", False),
        (["python", "-c", "import chronos_trio", "-m", "chronos_trio"], "-c", False),
        (["python", "script.py", "-m", "chronos_trio"], "script.py", False),
        (["/venv/bin/python", "/venv/bin/chronos-trio", "worker"], "/venv/bin/chronos-trio", True),
    ],
)
def test_the_command_line_is_told_from_other_importers(
    monkeypatch: pytest.MonkeyPatch, orig_argv: list[str], argv0: str, expected: bool
) -> None:
    monkeypatch.setattr(sys, "orig_argv", orig_argv)
    monkeypatch.setattr(sys, "argv", [argv0])
    assert _collector.launched_as_command_line() is expected


def test_importing_the_package_elsewhere_leaves_the_collector_alone() -> None:
    code = (
        "import gc, json, chronos_trio.cli; "
        "print(json.dumps([list(gc.get_threshold()), gc.get_freeze_count()]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    threshold, frozen = json.loads(out.stdout)
    assert threshold == list(gc.get_threshold())
    assert frozen == 0


# -- the worker's own parser -------------------------------------------------------------------


def _full_worker_parser() -> argparse.ArgumentParser:
    return build_parser()[1][("worker",)]


def test_worker_parser_is_the_full_parsers_worker_command() -> None:
    ours, full = build_worker_parser(), _full_worker_parser()
    assert ours.prog == full.prog
    assert ours.format_help() == full.format_help()


def _a_value(action: argparse.Action) -> list[str]:
    """Argument words that ``action`` accepts: derived by trying candidates
    against the option's own type and choices."""
    if action.nargs == 0:
        return []
    if action.choices is not None:
        return [str(next(iter(action.choices)))]
    for candidate in ("5", "default=1", "x"):
        try:
            if action.type is not None:
                action.type(candidate)  # type: ignore[operator]
            return [candidate]
        except (argparse.ArgumentTypeError, ValueError, TypeError):
            continue
    raise AssertionError(f"no value found for {action.option_strings}")


def test_worker_parser_accepts_every_option_of_the_full_parser() -> None:
    full = _full_worker_parser()
    argv = ["worker", "app:app"]
    for action in full._actions:
        if action.option_strings and not isinstance(action, argparse._HelpAction):
            argv += [action.option_strings[-1], *_a_value(action)]
    ours = parse_args(argv)
    theirs = full.parse_intermixed_args(argv[1:])
    theirs.command = "worker"
    assert vars(ours) == vars(theirs)


def test_worker_parser_rejects_what_the_full_parser_rejects() -> None:
    full = _full_worker_parser()
    for bad in (["app:app", "--concurrency", "0"], ["app:app", "--no-such-option"], []):
        with pytest.raises(UsageError) as theirs:
            full.parse_intermixed_args(bad)
        with pytest.raises(UsageError) as ours:
            parse_args(["worker", *bad])
        assert str(ours.value) == str(theirs.value)


# -- Lua scripts composed on first use ---------------------------------------------------------


def test_a_script_is_composed_on_first_use_as_it_was_at_import() -> None:
    fresh = _scripts.Script("enqueue")
    assert not fresh.composed
    assert fresh.sha == hashlib.sha1(fresh.source).hexdigest()
    assert fresh.composed
    assert (fresh.source, fresh.sha) == (_scripts.ENQUEUE.source, _scripts.ENQUEUE.sha)
    missing = _scripts.Script("no_such_script")  # made without error ...
    with pytest.raises(OSError):
        missing.sha  # noqa: B018  (... raises when first used)
    _scripts.compose_all()
    assert all(s.composed for s in _scripts.scripts())


LAZY_SCRIPTS = """
import sys

import trio

from chronos_trio import NewJob
from chronos_trio.store.redis import RedisStore, _scripts as S
from chronos_trio.testing.redis_server import RedisServer, call


def job(job_id):
    return NewJob(id=job_id, queue="q", kind="k", payload=b"{}")


async def main():
    assert not any(s.composed for s in S.scripts()), "composed at import"
    with RedisServer() as server:
        store = RedisStore.from_url(server.url)
        try:
            with trio.fail_after(20):
                [r] = await store.enqueue_many([job("a")])
                assert r.created
                # a plain job due now takes enqueue_plain.lua once the store knows it
                # talks to one node (after its first topology read), else enqueue.lua
                assert S.ENQUEUE.composed or S.ENQUEUE_PLAIN.composed
                assert not S.RECOVER.composed
                loads = store.statistics().script_loads
                call(server.port, "SCRIPT", "FLUSH")
                [r] = await store.enqueue_many([job("b")])
                assert r.created and store.statistics().script_loads > loads
                used = S.ENQUEUE_PLAIN if S.ENQUEUE_PLAIN.composed else S.ENQUEUE
                sha = used.sha
                assert call(server.port, "SCRIPT", "EXISTS", sha) == [1]
                server.restart()  # empty, no script, every connection dead
                loads = store.statistics().script_loads
                [r] = await store.enqueue_many([job("c")])
                assert r.created and store.statistics().script_loads > loads
                assert used.sha == sha  # the same composition, loaded again
                assert call(server.port, "SCRIPT", "EXISTS", sha) == [1]
        finally:
            await store.aclose()
    print("ok")


trio.run(main)
"""


@pytest.mark.redis
def test_lazily_composed_scripts_load_after_script_flush_and_restart() -> None:
    """In a fresh interpreter (this one's scripts are composed by now)."""
    proc = subprocess.run(
        [sys.executable, "-c", LAZY_SCRIPTS],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


# -- scalar payloads decoded without cattrs ----------------------------------------------------

SCALAR_PAYLOADS = [
    b"1",
    b"-7",
    b"1.5",
    b"-0.0",
    b"1e308",
    b"123456789012345678901234567890",
    b"true",
    b"false",
    b"null",
    b'"12"',
    b'"1.5"',
    b'"x"',
    b'""',
    b'"true"',
    b"[1, 2]",
    b"{}",
    b'{"a": 1}',
    b"NaN",
]


@pytest.mark.parametrize("payload_type", [int, str, float, bool])
@pytest.mark.parametrize("data", SCALAR_PAYLOADS)
def test_scalar_decode_matches_cattrs(payload_type: type, data: bytes) -> None:
    raw = _codec.loads(data)
    try:
        expected: Any = _codec.converter.structure(raw, payload_type)
    except Exception as exc:
        expected = PayloadError(
            f"payload does not structure as {payload_type.__name__}: {_codec._describe(exc)}"
        )
    try:
        got: Any = _codec.decode_payload(data, payload_type)
    except PayloadError as exc:
        got = exc
    if isinstance(expected, PayloadError):
        assert isinstance(got, PayloadError)
        assert str(got) == str(expected)
    else:
        assert type(got) is type(expected)
        assert got == expected or (got != got and expected != expected)  # NaN


def test_scalar_decode_does_not_import_cattrs() -> None:
    code = (
        "import sys\n"
        "from chronos_trio.records._codec import decode_payload\n"
        "assert decode_payload(b'3', int) == 3 and decode_payload(b'\"x\"', str) == 'x'\n"
        "assert decode_payload(b'1.5', float) == 1.5 and decode_payload(b'true', bool) is True\n"
        "print('cattrs' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "False"


# -- names loaded on first use -----------------------------------------------------------------

LAZY_NAMES = """
import json, sys

import chronos_trio
from chronos_trio import records, store

lazy = ["chronos_trio.store._search", "chronos_trio.store._check_results",
        "chronos_trio.records._flow_control"]
before = [m for m in lazy if m in sys.modules]
app = chronos_trio.App()  # an App and its store's protocol load none of them
from chronos_trio.store import _roles
after_app = [m for m in lazy if m in sys.modules]
# reached from a private module first, each still names its public module
from chronos_trio.store._roles import Finding, finding_order
from chronos_trio.records._flow_control import WorkflowRecord
modules = {
    "Finding": Finding.__module__,
    "finding_order": finding_order.__module__,
    "WorkflowRecord": WorkflowRecord.__module__,
    "store.CheckReport": store.CheckReport.__module__,
    "store.Problem": store.Problem.__module__,
    "store.JobQuery": store.JobQuery.__module__,
    "WorkflowView": chronos_trio.WorkflowView.__module__,
    "records.StepView": records.StepView.__module__,
}
same = (store.Finding is Finding and records.WorkflowRecord is WorkflowRecord
        and chronos_trio.WorkflowRecord is WorkflowRecord
        and chronos_trio.JobQuery is store.JobQuery)
print(json.dumps({"before": before, "after_app": after_app, "modules": modules, "same": same}))
"""


def test_lazy_names_load_on_first_use_and_name_their_public_module() -> None:
    """Search, the checker's findings and the workflow records are no
    longer imported with their packages; reached any way, they are the same
    objects and report the module they are documented under."""
    out = subprocess.run(
        [sys.executable, "-c", LAZY_NAMES], capture_output=True, text=True, timeout=60, check=True
    )
    report = json.loads(out.stdout)
    assert report["before"] == []
    assert report["after_app"] == []
    assert report["same"] is True
    assert report["modules"] == {
        "Finding": "chronos_trio.store",
        "finding_order": "chronos_trio.store",
        "WorkflowRecord": "chronos_trio",
        "store.CheckReport": "chronos_trio.store",
        "store.Problem": "chronos_trio.store",
        "store.JobQuery": "chronos_trio.store",
        "WorkflowView": "chronos_trio",
        "records.StepView": "chronos_trio",
    }
