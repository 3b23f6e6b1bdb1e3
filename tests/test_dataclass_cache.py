"""Dataclasses' generated methods kept compiled between runs (appserver/dataclass_cache.py).

Each probe is a fresh interpreter: the cache hooks ``dataclasses`` as it is
imported, and what a class does must not depend on whether its methods came
from the file or from ``compile``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

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
code = {}
for cls in (Plain, Frozen, Ordered, KeywordOnly, Derived, Hashed):
    for name in ("__init__", "__repr__", "__eq__", "__lt__", "__setattr__", "__hash__"):
        method = cls.__dict__.get(name)
        inner = getattr(method, "__wrapped__", method)
        if inner is not None and hasattr(inner, "__code__"):
            code[f"{cls.__name__}.{name}"] = inner.__code__.co_code.hex()
out["code"] = code
if CACHE != "-":
    out["misses"] = dataclass_cache.misses()
print(json.dumps(out))
"""


def probe(cache: Path | str, *extra: str, **env: str) -> dict[str, Any]:
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    environment.update(env)
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(cache), *extra],
        capture_output=True,
        env=environment,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr.decode()
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def without_misses(result: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in result.items() if key != "misses"}


def test_classes_made_from_the_file_are_those_compiled(tmp_path: Path) -> None:
    cache = tmp_path / "methods"
    compiled = probe("-")  # no cache at all: dataclasses as the standard library makes them
    first = probe(cache)
    assert first["misses"] > 0
    assert cache.exists()  # saved at exit
    second = probe(cache)
    assert second["misses"] == 0  # every method came from the file
    assert without_misses(first) == without_misses(second) == compiled
    assert compiled["frozen_assign"] == "refused"
    assert compiled["derived"][1] == 8


def test_a_file_it_cannot_read_is_ignored_then_replaced(tmp_path: Path) -> None:
    cache = tmp_path / "methods"
    compiled = probe("-")
    for bad in (b"", b"not a cache at all", b"appserver dataclass methods 1 Python 2.7\n{}"):
        cache.write_bytes(bad)
        result = probe(cache)
        assert result["misses"] > 0
        assert without_misses(result) == compiled
    assert probe(cache)["misses"] == 0  # the last run wrote a good one


def test_nothing_is_written_when_bytecode_is_not(tmp_path: Path) -> None:
    cache = tmp_path / "methods"
    probe(cache, PYTHONDONTWRITEBYTECODE="1")
    assert not cache.exists()


def test_an_unwritable_place_leaves_it_compiling(tmp_path: Path) -> None:
    cache = tmp_path / "a file, not a directory" / "methods"
    cache.parent.write_text("")
    assert probe(cache)["misses"] > 0
    assert list(tmp_path.iterdir()) == [cache.parent]  # no temporary file left behind


def test_a_file_past_its_limit_keeps_only_the_last_runs_texts(tmp_path: Path) -> None:
    cache = tmp_path / "methods"
    probe(cache, "-", "alpha")
    assert probe(cache, "1", "beta")["misses"] > 0  # beta's texts are new: it saves, over the limit
    assert probe(cache, "-", "beta")["misses"] == 0  # what that run used is kept
    assert probe(cache, "-", "alpha")["misses"] > 0  # what it did not use is gone


@pytest.mark.parametrize("entry", ["main", "codex_main"])
def test_both_commands_keep_the_methods_beside_their_bytecode(entry: str) -> None:
    script = (
        "import sys\n"
        "from appserver import launch\n"
        "sys.argv = ['appserver', '--version']\n"
        f"try:\n    launch.{entry}()\nexcept SystemExit:\n    pass\n"
        "cache = sys.modules['appserver.dataclass_cache']\n"
        "print(cache._cache_file == cache.default_file() is not None)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, timeout=60, check=True
    )
    assert done.stdout.decode().split()[-1] == "True"
