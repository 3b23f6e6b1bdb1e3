"""Dataclasses' generated methods kept compiled between runs (appserver/dataclass_cache.py).

Each probe is a fresh interpreter: the cache hooks ``dataclasses`` as it is
imported, and what a class does must not depend on whether its methods came
from the file or from ``compile``.
"""

from __future__ import annotations

import json
import marshal
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from appserver import dataclass_cache

# Makes one dataclass of each kind, exercises every generated method, and
# prints what they did, their code, and how many texts were compiled.
PROBE = r"""
import json, sys
CACHE = sys.argv[1]
if CACHE != "-":
    assert "dataclasses" not in sys.modules  # so the import hook is what patches it
    from appserver import dataclass_cache
    if len(sys.argv) > 2 and sys.argv[2] != "-":
        dataclass_cache.MAX_ENTRIES = int(sys.argv[2])
    dataclass_cache.install(CACHE)
    import importlib.util
    importlib.util.find_spec("dataclasses")  # a spec found and never loaded: still hooked
import dataclasses
from dataclasses import InitVar, dataclass, field

@dataclass
class Plain:
    name: str
    tags: list = field(default_factory=list)
    count: int = 0

@dataclass(frozen=True)
class Frozen:
    key: str
    weight: float = 1.0

@dataclass(order=True, slots=True)
class Ordered:
    rank: int
    label: str = field(default="", compare=False)

@dataclass(kw_only=True)
class KeywordOnly:
    first: int
    second: int = 2

@dataclass
class Derived(Plain):
    extra: bool = False
    seed: InitVar[int] = 0
    doubled: int = field(init=False, default=0)

    def __post_init__(self, seed):
        self.doubled = seed * 2

@dataclass(unsafe_hash=True, repr=False)
class Hashed:
    a: int
    b: tuple = ()

@dataclass
class Twin:
    a: int

@dataclass
class OtherTwin:  # the same generated texts as Twin's
    a: int

if len(sys.argv) > 3:  # one more class, whose field is named on the command line
    dataclasses.make_dataclass("Extra", [(sys.argv[3], int)])

out = {}
plain = Plain("x", ["t"])
out["plain"] = [repr(plain), plain == Plain("x", ["t"]), plain == Plain("y")]
frozen = Frozen("k")
try:
    frozen.key = "other"
    out["frozen_assign"] = "allowed"
except dataclasses.FrozenInstanceError:
    out["frozen_assign"] = "refused"
out["frozen"] = [repr(frozen), hash(frozen) == hash(Frozen("k")), frozen == Frozen("k", 1.0)]
out["ordered"] = [
    repr(sorted([Ordered(3), Ordered(1, "a"), Ordered(2)])),
    Ordered(1, "a") == Ordered(1, "b"),
]
out["kw"] = [repr(KeywordOnly(first=1)), repr(dataclasses.replace(KeywordOnly(first=1), second=5))]
derived = Derived("d", seed=4, extra=True)
out["derived"] = [repr(derived), derived.doubled, [f.name for f in dataclasses.fields(derived)]]
out["hashed"] = [hash(Hashed(1, (2,))) == hash(Hashed(1, (2,))), "Hashed object" in repr(Hashed(1))]
import inspect

# Everything a code object holds, flags and all (its marshal bytes would also
# differ in which strings are written as references).
def describe(code):
    fields = ("co_flags", "co_argcount", "co_posonlyargcount", "co_kwonlyargcount",
              "co_nlocals", "co_stacksize", "co_names", "co_varnames", "co_freevars",
              "co_cellvars", "co_filename", "co_name", "co_qualname", "co_firstlineno")
    consts = [describe(c) if hasattr(c, "co_code") else repr(c) for c in code.co_consts]
    return [*(repr(getattr(code, f)) for f in fields), code.co_code.hex(),
            code.co_linetable.hex(), code.co_exceptiontable.hex(), consts]

code = {}
for cls in (Plain, Frozen, Ordered, KeywordOnly, Derived, Hashed):
    for name in ("__init__", "__repr__", "__eq__", "__lt__", "__le__", "__gt__", "__ge__",
                 "__setattr__", "__delattr__", "__hash__"):
        method = cls.__dict__.get(name)
        inner = getattr(method, "__wrapped__", method)
        if inner is not None and hasattr(inner, "__code__"):
            code[f"{cls.__name__}.{name}"] = [
                describe(inner.__code__),
                repr(inner.__annotations__),
                str(inspect.signature(inner)),
            ]
out["code"] = code
# Each class has its own code objects, as when each is compiled.
out["twins_share_code"] = Twin.__init__.__code__ is OtherTwin.__init__.__code__
# The module keeps its own loader, and the finder is gone once it has patched.
out["loader"] = [type(dataclasses.__loader__).__name__, type(dataclasses.__spec__.loader).__name__]
out["finders"] = [type(finder).__name__ for finder in sys.meta_path]
if CACHE != "-":
    out["misses"] = dataclass_cache.misses()
    dataclass_cache.save()
    out["unsaved"] = dataclass_cache.misses()
    out["gave_up"] = dataclass_cache._unwritable
print(json.dumps(out))
"""


def probe(
    cache: Path | str, *extra: str, env: dict[str, str] | None = None, umask: int = -1
) -> dict[str, Any]:
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    environment.update(env or {})
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(cache), *extra],
        capture_output=True,
        env=environment,
        timeout=60,
        umask=umask,
    )
    assert done.returncode == 0, done.stderr.decode()
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def without_misses(result: dict[str, Any]) -> dict[str, Any]:
    return {
        key: value for key, value in result.items() if key not in ("misses", "unsaved", "gave_up")
    }


def test_classes_made_from_the_file_are_those_compiled(tmp_path: Path) -> None:
    cache = tmp_path / "methods"
    compiled = probe("-")  # no cache at all: dataclasses as the standard library makes them
    first = probe(cache)
    assert first["misses"] > 0
    assert first["unsaved"] == 0  # saved
    second = probe(cache)
    assert second["misses"] == 0  # every method came from the file
    assert without_misses(first) == without_misses(second) == compiled
    assert compiled["frozen_assign"] == "refused"
    assert compiled["derived"][1] == 8
    assert compiled["twins_share_code"] is False


def test_the_file_is_made_as_bytecode_is(tmp_path: Path) -> None:
    """With the source's permissions, whatever the umask (never writable by others)."""
    cache = tmp_path / "methods"
    probe(cache, umask=0)
    source = Path(dataclass_cache.__file__).stat().st_mode
    assert stat.S_IMODE(cache.stat().st_mode) == stat.S_IMODE(source) & 0o666
    assert list(tmp_path.iterdir()) == [cache]


def test_a_file_it_cannot_use_is_ignored_then_replaced(tmp_path: Path) -> None:
    cache = tmp_path / "methods"
    compiled = probe("-")
    probe(cache)
    header, _, body = cache.read_bytes().partition(b"\n")
    entries = marshal.loads(body)
    unusable = [
        b"",
        b"not a cache at all",
        header + b"\n" + marshal.dumps([1, 2]),
        # Every entry of a good file, but written by another Python.
        header[:-1] + bytes([header[-1] ^ 1]) + b"\n" + body,
        # Entries that are not code.
        header + b"\n" + marshal.dumps(dict.fromkeys(entries, b"junk")),
        header + b"\n" + marshal.dumps({text: marshal.dumps(42) for text in entries}),
        header + b"\n" + marshal.dumps(dict.fromkeys(entries, 42)),
    ]
    for bad in unusable:
        cache.write_bytes(bad)
        result = probe(cache)
        assert result["misses"] > 0, bad[:60]
        assert without_misses(result) == compiled
        assert probe(cache)["misses"] == 0  # the run before wrote a good one


def test_nothing_is_written_when_bytecode_is_not(tmp_path: Path) -> None:
    cache = tmp_path / "methods"
    probe(cache, env={"PYTHONDONTWRITEBYTECODE": "1"})
    assert not cache.exists()


def test_a_place_it_cannot_write_is_tried_once(tmp_path: Path) -> None:
    """A read-only install: nothing merged or written for nothing at each save."""
    cache = tmp_path / "a file, not a directory" / "methods"
    cache.parent.write_text("")
    result = probe(cache)
    assert result["misses"] > 0
    assert result["gave_up"] is True  # the save at exit does not try again
    assert list(tmp_path.iterdir()) == [cache.parent]


def test_a_file_it_cannot_replace_leaves_it_compiling(tmp_path: Path) -> None:
    cache = tmp_path / "methods"
    cache.mkdir()
    (cache / "in the way").write_text("")  # a directory that is not empty: no rename onto it
    result = probe(cache)
    assert result["misses"] > 0
    assert result["unsaved"] == result["misses"]  # kept for another try at exit
    assert list(tmp_path.iterdir()) == [cache]  # no temporary file left behind


def test_a_file_past_its_limit_keeps_only_the_last_runs_texts(tmp_path: Path) -> None:
    cache = tmp_path / "methods"
    probe(cache, "-", "alpha")
    assert probe(cache, "1", "beta")["misses"] > 0  # beta's texts are new: it saves, over the limit
    assert probe(cache, "-", "beta")["misses"] == 0  # what that run used is kept
    assert probe(cache, "-", "alpha")["misses"] > 0  # what it did not use is gone


# Records whether the cache was installed when the CLI was first imported
# (printed by an exit handler: the command ends the process).
ENTRY_PROBE = """
import atexit, sys
from appserver import dataclass_cache

class Spy:
    seen = None
    def find_spec(self, name, path=None, target=None):
        if name == "appserver.cli" and Spy.seen is None:
            Spy.seen = dataclass_cache._cache_file
        return None

sys.meta_path.insert(0, Spy())
atexit.register(lambda: print(Spy.seen is not None and Spy.seen == dataclass_cache.default_file()))
from appserver import launch
sys.argv = ["appserver", "--version"]
launch.{entry}()
"""


@pytest.mark.parametrize("entry", ["main", "codex_main"])
def test_both_commands_install_it_before_the_cli_loads(entry: str) -> None:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("APPSERVER_")}
    done = subprocess.run(
        [sys.executable, "-c", ENTRY_PROBE.replace("{entry}", entry)],
        capture_output=True,
        env=environment,
        timeout=60,
    )
    assert done.stdout.decode().split()[-1] == "True", done.stderr


def test_the_codex_command_holds_the_collector_off_while_it_starts() -> None:
    """As ``appserver`` does (cli.main): appserver-codex hands main() a list of
    arguments, which alone would not count as the process's own start."""
    script = (
        "import sys\n"
        "from appserver import cli, startup\n"
        "began = []\n"
        "startup.begin = lambda: began.append(True)\n"
        "sys.argv = ['appserver-codex', '--version']\n"
        "try:\n    cli.codex_main()\nexcept SystemExit:\n    pass\n"
        "print(began == [True])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, timeout=60, check=True
    )
    assert done.stdout.decode().split()[-1] == "True"
