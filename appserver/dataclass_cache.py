"""Dataclasses' generated methods, compiled once and kept beside our bytecode.

Python 3.11's :mod:`dataclasses` writes each class's ``__init__``, ``__repr__``
and ``__eq__`` (frozen: also ``__setattr__``, ``__delattr__``, ``__hash__``) as
source text and compiles it with ``exec`` every time the class is made. A
server's start makes ~200 dataclasses (ours, pydantic's, anyio's): ~880
compiles, ~65 ms of a ~400 ms start's CPU. CPython keeps a module's bytecode in
``__pycache__`` so that it is not compiled at every start; this keeps those
methods' code the same way, in one file beside this module's own bytecode
(``__pycache__/dataclass_cache.cpython-311.methods``).

The file maps each generated source text to the marshalled code that
``compile`` made of it; each use unmarshals a fresh code object, as each
compile would. A class whose source changed (a field added, a library
upgraded) is a new text, compiled as before and added at the next save, so
classes behave exactly as without the file. The file is where the interpreter
itself reads and writes our bytecode (never the workspace), written as CPython
writes a ``.pyc``: a new file of the source's mode, then renamed over the old.
It is not written when writing bytecode is off (``PYTHONDONTWRITEBYTECODE``),
and a file that cannot be read is ignored.

How it is hooked in: the ``exec`` that :mod:`dataclasses` calls is looked up
in that module's globals before the builtins, so :func:`install` sets one
there, as ``dataclasses`` is imported (a finder on ``sys.meta_path``; the
entry points call it before anything is imported, and importing
``dataclasses`` itself costs ~8 ms that the early answers do without).
"""

from __future__ import annotations

import atexit
import errno
import marshal
import os
import sys

# Not `typing` or `types`: this runs before the early answers, which need neither.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec
    from types import CodeType, ModuleType
    from typing import Any

# What the file starts with: a file written by another interpreter is ignored.
_HEADER = b"appserver dataclass methods 2 " + sys.version.encode() + b"\n"
# A file holding more texts than this (upgrades leave old ones behind) is cut
# to those of the run that saves it.
MAX_ENTRIES = 3_000

_cache_file: str | None = None
_known: dict[str, bytes] | None = None  # read from the file at first use
_compiled: dict[str, bytes] = {}  # compiled by this process, not yet saved
_used: set[str] = set()
_unwritable = False  # a save could not make its file, for good: not tried again
# Why a file cannot be made that no retry in this process would change.
_NOT_WRITABLE = frozenset(
    {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR, errno.EEXIST, errno.ELOOP}
)
_builtin_exec = exec


def default_file() -> str | None:
    """Where the file is: beside this module's bytecode (``None`` when it has none)."""
    cached = globals().get("__cached__")
    return None if not cached else os.path.abspath(cached.removesuffix(".pyc") + ".methods")


def install(cache_file: str | None = None) -> None:
    """Serve :mod:`dataclasses`' compiles from the file (``cache_file``, else
    :func:`default_file`), and save what was compiled anew at exit (and at
    :func:`save`). Call before ``dataclasses`` is imported; if it already was,
    classes made from now on are served."""
    global _cache_file
    if _cache_file is not None:
        return
    chosen = cache_file or default_file()
    if chosen is None:
        return
    # Absolute: a relative pycache prefix would follow the process's directory.
    _cache_file = os.path.abspath(chosen)
    module = sys.modules.get("dataclasses")
    if module is not None:
        _patch(module)
    else:
        sys.meta_path.insert(0, _PatchOnImport())
    atexit.register(save)


def save() -> None:
    """Add the texts this process compiled to the file (others' additions since
    it was read are kept); nothing when none were, or bytecode is not written.
    Where the file cannot be written (a read-only install), a process tries once."""
    global _unwritable
    if not _compiled or _cache_file is None or sys.dont_write_bytecode or _unwritable:
        return
    try:
        # First: the merge is only worth making if it can be kept.
        descriptor, temporary = _new_file(_cache_file)
    except OSError as error:
        # A place this process may not write (a read-only install) stays so; a
        # passing failure (no descriptors, no room) is tried again at exit.
        _unwritable = error.errno in _NOT_WRITABLE
        return
    try:
        with open(descriptor, "wb") as out:  # closed whatever happens next
            entries = _read(_cache_file)
            entries.update(_compiled)
            if len(entries) > MAX_ENTRIES:
                entries = {text: code for text, code in entries.items() if text in _used}
            out.write(_HEADER + marshal.dumps(entries))
        os.replace(temporary, _cache_file)  # readers see the old file or the new, whole
    except BaseException as error:
        import contextlib  # only on this rare path

        with contextlib.suppress(OSError):
            os.unlink(temporary)  # ours: made with O_EXCL
        if isinstance(error, OSError):
            return  # kept for the next save (at exit)
        raise
    _compiled.clear()


def misses() -> int:
    """How many texts this process compiled since its last save."""
    return len(_compiled)


def _new_file(path: str) -> tuple[int, str]:
    """A new file beside ``path``, made as CPython makes bytecode (never an
    existing file or a link; the source's permissions): its descriptor and name."""
    mode = os.stat(__file__).st_mode & 0o666
    os.makedirs(os.path.dirname(path), exist_ok=True)
    temporary = f"{path}.{os.getpid()}.{os.urandom(4).hex()}"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    return os.open(temporary, flags, mode), temporary


def _cached_exec(source: Any, globals: Any = None, locals: Any = None, /, **options: Any) -> None:
    """``exec`` for :mod:`dataclasses`: a source text's code from the file, else compiled.

    3.11's dataclasses always passes the module's globals; any other call (no
    globals, or code rather than text) is handed to the built-in untouched."""
    if type(source) is str and globals is not None:
        source = _code_for(source)
    _builtin_exec(source, globals, locals, **options)


def _code_for(text: str) -> CodeType:
    global _known
    if _known is None:
        _known = _read(_cache_file) if _cache_file else {}
    _used.add(text)
    blob = _known.get(text)
    if blob is not None:
        try:
            code: CodeType = marshal.loads(blob)
        except (EOFError, ValueError, TypeError):  # not bytes, or not marshal's
            pass
        else:
            if type(code) is type(_code_for.__code__):  # types.CodeType, without importing types
                return code
    # dont_inherit: no __future__ flags from this module (dataclasses has none).
    code = compile(text, "<string>", "exec", dont_inherit=True)
    _compiled[text] = _known[text] = marshal.dumps(code)
    return code


def _read(path: str) -> dict[str, bytes]:
    try:
        with open(path, "rb") as source:
            data = source.read()
        if not data.startswith(_HEADER):
            return {}
        entries = marshal.loads(data[len(_HEADER) :])
    except (OSError, EOFError, ValueError, TypeError):
        return {}
    # Each entry is checked where it is used (_code_for): a bad one is compiled again.
    return entries if type(entries) is dict else {}


def _patch(module: ModuleType) -> None:
    setattr(module, "exec", _cached_exec)  # noqa: B010 (the module declares no such name)


class _PatchOnImport:
    """A ``sys.meta_path`` finder that patches ``dataclasses`` once it has been
    executed, then leaves the path (it loads nothing itself)."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> ModuleSpec | None:
        if name != "dataclasses":
            return None
        for finder in sys.meta_path:
            find_spec = getattr(finder, "find_spec", None)
            if finder is self or find_spec is None:
                continue
            spec: ModuleSpec | None = find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            # Duck-typed: importlib.abc.Loader would cost an import here.
            spec.loader = _Patching(spec.loader, self)  # type: ignore[assignment]
        return spec

    def leave(self) -> None:
        # A new list: another thread may be going through the old one.
        sys.meta_path = [finder for finder in sys.meta_path if finder is not self]


class _Patching:
    """The loader of ``dataclasses``, patching it once executed. The module is
    then given its own loader back (a finder's loader may serve other modules)."""

    def __init__(self, loader: Any, finder: _PatchOnImport) -> None:
        self.loader = loader
        self.finder = finder

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        created: ModuleType | None = self.loader.create_module(spec)
        return created

    def exec_module(self, module: ModuleType) -> None:
        module.__loader__ = self.loader
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        _patch(module)
        self.finder.leave()
