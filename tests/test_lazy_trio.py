"""The worker command's Trio without its TLS, DTLS, subprocess and file
parts until they are used (``chronos_trio._lazy_trio``): they are not
imported at start, and every name of Trio's public modules is then the
same object, with the same module and qualified name, as in a plain
``import trio``, whichever way it is first reached."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: Run as ``-c`` with ``worker`` (the worker command's import of the
#: package: the lazy Trio) or ``plain``, then what argv[2] names: prints a
#: JSON report.
PROBE = r"""
import json, sys
how = sys.argv[2]
if sys.argv[1] == "worker":
    sys.orig_argv = [sys.executable, "-m", "chronos_trio", "worker", "app:app"]
    sys.argv = ["-m", "worker", "app:app"]
import chronos_trio, trio, trio.lowlevel

HEAVY = ("ssl", "ctypes", "ctypes.util", "subprocess", "trio._dtls", "trio._file_io",
         "trio._highlevel_ssl_helpers", "trio._path", "trio._ssl", "trio._subprocess")
MODULES = ("trio", "trio.lowlevel", "trio.socket", "trio.abc", "trio.from_thread",
           "trio.to_thread")
loaded_at_start = [name for name in HEAVY if name in sys.modules]
dirs = {name: dir(sys.modules[name]) for name in MODULES}
if how == "star":
    namespace = {}
    exec("from trio import *", namespace)
    star = sorted(k for k in namespace if k != "__builtins__")
elif how == "submodule":
    import trio._ssl
    assert trio.SSLStream is trio._ssl.SSLStream
elif how == "lowlevel":
    trio.lowlevel.open_process
elif how == "from":
    from trio import Path
elif how == "threads":
    import threading
    got = []
    threads = [threading.Thread(target=lambda: got.append(trio.Path)) for _ in range(8)]
    for t in threads: t.start()
    for t in threads: t.join()
    assert len(set(map(id, got))) == 1 and got[0] is trio.Path


def describe(obj):
    return [type(obj).__name__, getattr(obj, "__module__", None),
            getattr(obj, "__qualname__", None), getattr(obj, "__name__", None)]


names = {}
for module_name in MODULES:
    module = sys.modules[module_name]
    for name in dirs[module_name]:
        obj = getattr(module, name)
        names[f"{module_name}.{name}"] = describe(obj)
        if isinstance(obj, type):
            for key, value in vars(obj).items():
                names[f"{module_name}.{name}.{key}"] = describe(value)[1:3]
print(json.dumps({
    "loaded_at_start": loaded_at_start,
    "dirs": dirs,
    "dirs_after": {name: dir(sys.modules[name]) for name in MODULES},
    "names": names,
    "star": star if how == "star" else None,
    "getattr": [getattr(getattr(sys.modules[m], "__getattr__", None), "__qualname__", None)
                for m in MODULES],
}))
"""


def probe(mode: str, how: str = "", **env_extra: str) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if k != "CHRONOS_LAZY_TRIO"}
    env.update(PYTHONPATH=str(ROOT), CHRONOS_CODE_CACHE="off", **env_extra)
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, mode, how],
        env=env, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    report: dict[str, object] = json.loads(proc.stdout)
    return report


@pytest.fixture(scope="module")
def plain() -> dict[str, object]:
    report = probe("plain")
    assert "trio._ssl" in report["loaded_at_start"]  # type: ignore[operator]
    return report


def test_the_worker_command_imports_trio_without_its_unused_parts() -> None:
    assert probe("worker")["loaded_at_start"] == []


def test_turned_off_it_imports_trio_whole() -> None:
    report = probe("worker", CHRONOS_LAZY_TRIO="off")
    assert "trio._ssl" in report["loaded_at_start"]  # type: ignore[operator]


@pytest.mark.parametrize("how", ["", "submodule", "lowlevel", "from", "threads", "star"])
def test_every_name_resolves_as_in_a_plain_import(plain: dict[str, object], how: str) -> None:
    """Reached first by attribute, by importing a left-out module, through
    ``trio.lowlevel``, by ``from trio import``, from eight threads at once,
    or by ``from trio import *``: the same names (``dir()`` before and
    after), each with the type, module and qualified name (its class
    members' too) of a plain import, and each module's ``__getattr__``
    Trio's own again."""
    lazy = probe("worker", how)
    assert lazy["loaded_at_start"] == []
    assert lazy["dirs"] == plain["dirs"]
    assert lazy["dirs_after"] == plain["dirs_after"]
    assert lazy["names"] == plain["names"]
    assert lazy["getattr"] == plain["getattr"]
    if how == "star":
        assert lazy["star"] == probe("plain", "star")["star"]
        assert {"SSLStream", "Path", "run_process", "open_file"} <= set(lazy["star"])  # type: ignore[arg-type]


#: A stand-in Trio: the six modules, ``lowlevel`` and ``_util`` as the real
#: one has them, and a private module ``_other`` that varies by case.
FAKE_TRIO = {
    "__init__.py": "from . import lowlevel, _other\nfrom ._ssl import SSLStream\n"
    "from ._path import Path\nfrom ._util import fixup_module_metadata\n"
    "fixup_module_metadata(__name__, globals())\n"
    "fixup_module_metadata(lowlevel.__name__, lowlevel.__dict__)\n",
    "lowlevel.py": "from ._subprocess import open_process\n",
    "_util.py": "def fixup_module_metadata(module_name, namespace):\n"
    "    for name, obj in namespace.items():\n"
    "        if not name.startswith('_') and getattr(obj, '__module__', '').startswith('trio.'):\n"
    "            obj.__module__ = module_name\n",
    "_ssl.py": "class SSLStream: pass\n",
    "_dtls.py": "",
    "_file_io.py": "",
    "_highlevel_ssl_helpers.py": "",
    "_path.py": "from ._file_io import *\nclass Path: pass\n",
    "_subprocess.py": "from . import _subprocess_platform\nasync def open_process(): pass\n",
    "_subprocess_platform.py": "",
}

LOAD_LAZY = r"""
import json, sys, types
# the package's modules without its __init__ (which imports the real Trio)
package = types.ModuleType("chronos_trio")
package.__path__ = [sys.argv[1]]
sys.modules["chronos_trio"] = package
from chronos_trio import _lazy_trio as lazy
installed = lazy.install()
loaded = "trio._ssl" in sys.modules
import trio, trio._other
print(json.dumps({
    "installed": installed,
    "ssl_loaded_at_start": loaded,
    "other_real": trio._other.S is trio.SSLStream or issubclass(trio._other.S, trio.SSLStream),
    "ssl_stream": [trio.SSLStream.__name__, trio.SSLStream.__module__],
    "open_process": trio.lowlevel.open_process.__module__,
    "path": trio.Path.__name__,
    "other_ctypes": getattr(getattr(trio._other, "ctypes", None), "__file__", "absent"),
}))
"""


@pytest.mark.parametrize(
    ("other", "installed"),
    [
        ("", True),  # the real Trio's shape: the names are left out
        ("from ._ssl import SSLStream as S\n", False),  # a private module binds one
        ("from . import _ssl\nS = _ssl.SSLStream\n", False),  # one binds a stand-in
        ("from ._ssl import SSLStream\nclass S(SSLStream): pass\n", False),  # one uses it
        ("import ctypes\n", True),  # ctypes imported elsewhere: the real one at once
    ],
)
def test_a_trio_that_uses_the_left_out_parts_elsewhere_is_imported_whole(
    tmp_path: Path, other: str, installed: bool
) -> None:
    """A Trio whose other modules bind (or use at import) a name of the six
    is not left lazy: every such name is the real object (or Trio is
    imported again as usual), and the public names are fixed up as
    Trio's import fixes them."""
    package = tmp_path / "trio"
    package.mkdir()
    for name, source in {
        **FAKE_TRIO,
        "_other.py": other + "S = S if 'S' in dir() else type('S', (), {})\n",
    }.items():
        (package / name).write_text(source)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-c", LOAD_LAZY, str(ROOT / "chronos_trio")],
        env=env, capture_output=True, text=True, timeout=60, check=True, cwd=tmp_path,
    )  # fmt: skip
    report = json.loads(proc.stdout)
    assert report["installed"] is installed
    assert report["ssl_loaded_at_start"] is not installed
    assert report["other_real"] is not installed  # the private module's S is the real one
    assert report["ssl_stream"] == ["SSLStream", "trio"]
    assert report["open_process"] == "trio.lowlevel"
    assert report["path"] == "Path"
    if "ctypes" in other:
        assert report["other_ctypes"].endswith("__init__.py")  # the real package
    else:
        assert report["other_ctypes"] == "absent"


#: The OS name of a thread Trio runs a named job in, read by the job.
THREAD_NAME = r"""
import sys
if sys.argv[1] == "worker":
    sys.orig_argv = [sys.executable, "-m", "chronos_trio", "worker", "app:app"]
    sys.argv = ["-m", "worker", "app:app"]
import threading
import chronos_trio, trio

def comm():
    with open(f"/proc/self/task/{threading.get_native_id()}/comm") as f:
        return f.read().strip()

async def main():
    return [await trio.to_thread.run_sync(comm, thread_name=name) for name in ("first job", "2nd")]

print(" / ".join(trio.run(main)), "ctypes" in sys.modules)
"""


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads /proc")
def test_threads_are_named_as_trio_names_them() -> None:
    """The worker's Trio imports ``ctypes`` at its first named thread, and
    names the OS thread as a plain import of Trio does."""
    env = {k: v for k, v in os.environ.items() if k != "CHRONOS_LAZY_TRIO"}
    env.update(PYTHONPATH=str(ROOT), CHRONOS_CODE_CACHE="off")
    outs = []
    for mode in ("plain", "worker"):
        proc = subprocess.run(
            [sys.executable, "-c", THREAD_NAME, mode],
            env=env, capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        outs.append(proc.stdout)
    assert outs[0] == outs[1] == "first job / 2nd True\n"
