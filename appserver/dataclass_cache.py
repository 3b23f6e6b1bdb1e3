"""Dataclasses' generated methods, compiled once and kept beside our bytecode.

Python 3.11's :mod:`dataclasses` writes each class's ``__init__``, ``__repr__``
and ``__eq__`` (frozen: also ``__setattr__``, ``__delattr__``, ``__hash__``) as
source text and compiles it with ``exec`` every time the class is made. A
server's start makes ~200 dataclasses (ours, pydantic's, anyio's): ~800
compiles, ~65 ms of a ~400 ms start's CPU. CPython keeps a module's bytecode in
``__pycache__`` so that it is not compiled at every start; this keeps those
methods' code the same way, in one file beside this module's own bytecode
(``__pycache__/dataclass_cache.cpython-311.methods``).

The file maps each generated source text to the code ``compile`` made of it. A
class whose source changed (a field added, a library upgraded) is a new text,
compiled as before and added at the next save; the code run is always what
compiling that exact text gives, so classes behave exactly as without the file.
The file is where the interpreter itself reads and writes our bytecode (never
the workspace), it is not written when writing bytecode is off
(``PYTHONDONTWRITEBYTECODE``), and a file that cannot be read is ignored.

How it is hooked in: the ``exec`` that :mod:`dataclasses` calls is looked up
in that module's globals before the builtins, so :func:`install` sets one
there, when ``dataclasses`` is imported (a finder on ``sys.meta_path``; the
entry points call it before anything is imported, and importing
``dataclasses`` itself costs ~8 ms that the early answers do without).
"""

from __future__ import annotations

import atexit
import marshal
import os
import sys

# Not `typing` or `types`: this runs before the early answers, which do without them.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import CodeType, ModuleType
    from typing import Any

# What the file starts with: a file written by another interpreter is ignored.
_HEADER = b"appserver dataclass methods 1 " + sys.version.encode() + b"\n"
# More texts than this (upgrades accumulate them): the file keeps only this
# run's.
MAX_ENTRIES = 5_000

_cache_file: str | None = None
_known: dict[str, CodeType] | None = None  # read from the file at first use
_compiled: dict[str, CodeType] = {}  # compiled by this process, not yet saved
_used: set[str] = set()
_builtin_exec = exec


def default_file() -> str | None:
    """Where the file is: beside this module's bytecode (``None`` when it has none)."""
    cached = globals().get("__cached__")
    return None if not cached else cached.removesuffix(".pyc") + ".methods"


def install(cache_file: str | None = None) -> None:
    """Serve :mod:`dataclasses`' compiles from the file (``cache_file``, else
    :func:`default_file`), and save what was compiled anew at exit (and at
    :func:`save`). Call before ``dataclasses`` is imported; if it already was,
    classes made from now on are served."""
    global _cache_file
    if _cache_file is not None:
        return
    _cache_file = cache_file or default_file()
    if _cache_file is None:
        return
    module = sys.modules.get("dataclasses")
    if module is not None:
        _patch(module)
    else:
        sys.meta_path.insert(0, _PatchOnImport())
    atexit.register(save)


def save() -> None:
    """Add the texts this process compiled to the file (others' additions since
    it was read are kept); nothing when none were, or bytecode is not written."""
    if not _compiled or _cache_file is None or sys.dont_write_bytecode:
        return
    temporary = f"{_cache_file}.{os.getpid()}.tmp"
    try:
        os.makedirs(os.path.dirname(_cache_file), exist_ok=True)
        with open(temporary, "wb") as out:  # first: a read-only install stops here
            entries = _read(_cache_file)
            entries.update(_compiled)
            if len(entries) > MAX_ENTRIES:
                entries = {text: code for text, code in entries.items() if text in _used}
            out.write(_HEADER + marshal.dumps(entries))
        os.replace(temporary, _cache_file)  # readers see the old file or the new, whole
    except OSError:
        import contextlib  # only here: nothing at start needs it

        with contextlib.suppress(OSError):
            os.unlink(temporary)
        return
    _compiled.clear()


def misses() -> int:
    """How many texts this process compiled since its last save."""
    return len(_compiled)


def _cached_exec(source: Any, globals: Any = None, locals: Any = None, /, **options: Any) -> None:
    """``exec`` for :mod:`dataclasses`: a source text's code from the file, else compiled."""
    if type(source) is str:
        code = _code_for(source)
        if globals is None:  # exec would take the caller's: dataclasses' own
            globals = vars(sys.modules["dataclasses"])
        _builtin_exec(code, globals, locals, **options)
        return
    _builtin_exec(source, globals, locals, **options)


def _code_for(text: str) -> CodeType:
    global _known
    if _known is None:
        _known = _read(_cache_file) if _cache_file else {}
    _used.add(text)
    code = _known.get(text)
    if code is None:
        # dont_inherit: no __future__ flags from this module; dataclasses has none.
        code = _compiled[text] = _known[text] = compile(text, "<string>", "exec", dont_inherit=True)
    return code


def _read(path: str) -> dict[str, CodeType]:
    try:
        with open(path, "rb") as source:
            data = source.read()
        if not data.startswith(_HEADER):
            return {}
        entries = marshal.loads(data[len(_HEADER) :])
    except (OSError, EOFError, ValueError, TypeError):
        return {}
    if type(entries) is not dict or not all(type(text) is str for text in entries):
        return {}
    code_type = type(_read.__code__)  # types.CodeType, without importing types
    return {text: code for text, code in entries.items() if type(code) is code_type}


def _patch(module: ModuleType) -> None:
    module.exec = _cached_exec  # type: ignore[attr-defined]


class _PatchOnImport:
    """A ``sys.meta_path`` finder that patches ``dataclasses`` once it has been
    executed, then leaves the path (it finds nothing itself)."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "dataclasses":
            return None
        sys.meta_path.remove(self)
        for finder in sys.meta_path:
            find_spec = getattr(finder, "find_spec", None)
            spec = find_spec(name, path, target) if find_spec is not None else None
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        exec_module = getattr(loader, "exec_module", None)
        if exec_module is None:
            return spec

        def exec_and_patch(module: ModuleType) -> None:
            exec_module(module)
            _patch(module)

        loader.exec_module = exec_and_patch
        return spec
