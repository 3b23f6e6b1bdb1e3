"""The warm parent: one command's modules imported and its wire models built
once, then a fork per launch onto the launcher's own streams
(:mod:`appserver.warm_launch` has the why, the wire and the client side).

``python -P -m appserver.warm_parent SOCKET IDLE ARGV0 ENTRY ARGS...``, started
detached by a launcher, in the launcher's environment and directory. It holds
``SOCKET``'s lock for as long as it lives (one parent a command), preloads,
listens, and for each launch forks a child that takes the launcher's
descriptors as its 0, 1 and 2 and runs ``ENTRY`` (``appserver`` or
``appserver-codex``) with ``ARGS`` exactly as a cold process would. The parent
never runs an event loop or a thread, so forking is safe; it reaps its
children and tells each launcher how its server ended, and kills a server
whose launcher was killed. It ends once it has had no server for IDLE
seconds, when asked to stop, or when appserver's code changed on disk (it
would fork stale code): then it takes no more launches (they run cold) and
ends when its last server has.
"""

from __future__ import annotations

import array
import contextlib
import gc
import importlib
import json
import os
import pkgutil
import select
import signal
import socket
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from appserver.warm_common import fingerprint, hold_lock, peer_is_us, read_line

WIRE_VERSION = 1
# A launcher sends its header and answers ``ready`` at once; one that does not
# within this is dropped (the parent serves launches one at a time).
HEADER_WAIT = 2.0

# What every door imports on its way to serving (the rest comes in with these).
CORE = (
    "appserver.cli",
    "appserver.face_command",
    "appserver.early_start",
    "appserver.hosting",
    "appserver.server.app",
    "appserver.server.process",
    "appserver.services.families",
    "appserver.services.threads",
    "appserver.services.turns",
    "appserver.transport.stdio",
    "appserver.providers.offline",
    "appserver.providers.openai_compat",
    "appserver.providers.anthropic_provider",
    "appserver.runtime.cluster",
    "appserver.runtime.cluster_approvals",
    "appserver.runtime.recent_broadcasts",
    "appserver.runtime.shared_log",
    "appserver.services.context",
    "appserver.services.handshake",
    "appserver.storage.cluster_sqlite",
    "anyio._backends._asyncio",
    "anyio._core._signals",
    "anyio._core._sockets",
    "anyio.streams.memory",
    "anyio.streams.stapled",
    "anyio.streams.tls",
    "httpx2",
)
# The face a command word runs (its whole package is preloaded).
FACES = {"acp": "acp", "router": "codeswarm", "codex": "codex", "rpc": "zot", "host": "zene"}


def face_of(entry: str, argv: Sequence[str]) -> str | None:
    """The face package ``entry`` with ``argv`` runs (``None``: the DotCraft door)."""
    if entry == "appserver-codex":
        return "codex"
    from appserver.cli import is_qwen_invocation

    if is_qwen_invocation(list(argv)):
        return "qwen"
    word = next((word for word in argv if not word.startswith("-")), "")
    return FACES.get(word)


def preload(entry: str, argv: Sequence[str]) -> None:
    """Import what the command will, and build every wire model's validator."""
    for name in CORE:
        importlib.import_module(name)
    face = face_of(entry, argv)
    if face is not None:
        package = importlib.import_module(f"appserver.faces.{face}")
        for module in pkgutil.iter_modules(package.__path__, f"{package.__name__}."):
            importlib.import_module(module.name)
    from pydantic import BaseModel

    # Every model loaded, the method table's and the faces' own: a validator
    # built here is one no server builds again.
    todo: list[type[BaseModel]] = [BaseModel]
    while todo:
        model = todo.pop()
        todo.extend(model.__subclasses__())
        if not model.__pydantic_complete__ and model.__module__.startswith("appserver."):
            with contextlib.suppress(Exception):  # one that cannot be built yet: its server will
                model.model_rebuild()


def module_stamps() -> dict[str, int | None]:
    """Each loaded appserver module's file's modification time (``None``: gone)."""
    stamps: dict[str, int | None] = {}
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if path and name.split(".", 1)[0] == "appserver":
            try:
                stamps[path] = os.stat(path).st_mtime_ns
            except OSError:
                stamps[path] = None
    return stamps


@dataclass
class Launch:
    """What a forked child runs: the launcher's streams and its start."""

    streams: list[int]
    started: float
    argv0: str
    entry: str
    argv: list[str]

    def run(self) -> int:
        """Become the server: the streams as 0, 1 and 2, then the command."""
        for target, stream in enumerate(self.streams):
            os.dup2(stream, target)
        for stream in self.streams:
            if stream > 2:
                os.close(stream)
        from appserver import startup

        startup.adopt_start(self.started)
        sys.argv = [self.argv0, *self.argv]
        from appserver import cli

        if self.entry == "appserver-codex":
            return cli.codex_main()
        return cli.main()


class Parent:
    """The listener, the servers it forked (pid -> their launcher's connection)
    and the idle clock."""

    def __init__(self, listener: socket.socket, idle: float, command: list[str]) -> None:
        self.listener = listener
        self.idle = idle
        self.argv0, self.entry, *self.argv = command
        self.servers: dict[int, socket.socket] = {}
        self.orphans: set[int] = set()  # servers whose launcher is gone (killed)
        self.served = 0
        self.stopping = False
        self._last = time.monotonic()
        self._stamps = module_stamps()
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_write, False)
        os.set_blocking(self._wake_read, False)
        self._keep: list[int] = []  # descriptors a child closes (set by serve)

    def serve(self, keep_closed: Sequence[int]) -> Launch | None:
        """Take launches until done; in a forked child, what it is to run."""
        self._keep = list(keep_closed)
        signal.set_wakeup_fd(self._wake_write)
        signal.signal(signal.SIGCHLD, _ignore)
        signal.signal(signal.SIGTERM, self._stop_signal)
        while not (self.stopping and not self.servers):
            now = time.monotonic()
            wait = None if self.servers else self._last + self.idle - now
            if wait is not None and wait <= 0:
                break
            watched = [self._wake_read, *self._launchers()]
            if not self.stopping:
                watched.append(self.listener.fileno())
            readable, _, _ = select.select(watched, [], [], wait)
            self._reap()
            for ready in readable:
                if ready == self.listener.fileno():
                    launch = self._accept()
                    if launch is not None:
                        return launch
                elif ready != self._wake_read:
                    self._launcher_gone(ready)
        return None

    def _stop_signal(self, signum: int, frame: object) -> None:
        self.stopping = True

    def _launchers(self) -> list[int]:
        return [
            connection.fileno()
            for pid, connection in self.servers.items()
            if pid not in self.orphans
        ]

    def _reap(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self._wake_read, 512):
                pass
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            connection = self.servers.pop(pid, None)
            self.orphans.discard(pid)
            self._last = time.monotonic()
            if connection is None:
                continue
            if os.WIFSIGNALED(status):
                line = f"signal {os.WTERMSIG(status)}\n"
            else:
                line = f"exit {os.waitstatus_to_exitcode(status)}\n"
            with contextlib.suppress(OSError):
                connection.sendall(line.encode())
            connection.close()

    def _launcher_gone(self, descriptor: int) -> None:
        """A launcher's connection said something or closed: it never does until
        told its server ended, so it was killed; its server is killed too."""
        for pid, connection in self.servers.items():
            if connection.fileno() == descriptor:
                self.orphans.add(pid)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                return

    def _accept(self) -> Launch | None:
        try:
            connection, _address = self.listener.accept()
        except OSError:
            return None
        connection.setblocking(True)
        if not peer_is_us(connection):
            connection.close()
            return None
        streams: list[int] = []
        try:
            connection.settimeout(HEADER_WAIT)
            header, streams = _receive_header(connection)
            launch = self._take(connection, header, streams)
        except (OSError, ValueError):
            launch = None
        if launch is None:
            for stream in streams:
                os.close(stream)
        return launch

    def _take(
        self, connection: socket.socket, header: dict[str, object], streams: list[int]
    ) -> Launch | None:
        if header.get("stop") is True:
            self.stopping = True
            connection.sendall(f"served {self.served}\n".encode())
            connection.close()
            return None
        started = header.get("started")
        if len(streams) != 3 or not isinstance(started, float) or self.stopping:
            connection.close()
            return None
        if module_stamps() != self._stamps:
            # appserver's code changed: a fork would run the old one.
            self.stopping = True
            connection.close()
            return None
        connection.sendall(b"ready\n")
        answer = read_line(connection, bytearray())
        if answer is None or answer[0] != b"go":
            connection.close()
            return None
        if threading.active_count() > 1:
            # Never so (nothing here starts a thread), but a fork would copy
            # another thread's locks without it.
            self.stopping = True
            connection.close()
            return None
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            self._become_child(connection)
            return Launch(streams, started, self.argv0, self.entry, list(self.argv))
        for stream in streams:
            os.close(stream)
        streams.clear()
        self.served += 1
        self.servers[pid] = connection
        connection.settimeout(None)
        try:
            connection.sendall(f"pid {pid}\n".encode())
        except OSError:
            self._launcher_gone(connection.fileno())
        return None

    def _become_child(self, own: socket.socket) -> None:
        """In a forked child: let go of everything that is the parent's."""
        signal.set_wakeup_fd(-1)
        for signum in (signal.SIGCHLD, signal.SIGTERM):
            signal.signal(signum, signal.SIG_DFL)
        self.listener.close()
        own.close()
        for connection in self.servers.values():
            connection.close()
        for descriptor in (self._wake_read, self._wake_write, *self._keep):
            os.close(descriptor)


def _ignore(signum: int, frame: object) -> None:
    """SIGCHLD's handler: the wake-up descriptor is what wakes the loop."""


def _receive_header(connection: socket.socket) -> tuple[dict[str, object], list[int]]:
    """The launcher's header line and the descriptors sent with it."""
    space = socket.CMSG_SPACE(3 * array.array("i").itemsize)
    data, ancillary, _flags, _address = connection.recvmsg(4096, space)
    streams: list[int] = []
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            received = array.array("i")
            received.frombytes(payload[: len(payload) - len(payload) % received.itemsize])
            streams.extend(received)
    line = read_line(connection, bytearray(data))
    if line is None:
        raise ValueError("no header")
    header = json.loads(line[0])
    if not isinstance(header, dict) or header.get("v") != WIRE_VERSION:
        raise ValueError("not a launcher's header")
    return header, streams


def main(arguments: Sequence[str] | None = None) -> int:
    """Run a warm parent; in each forked child, the server's exit status."""
    path, idle, *command = list(sys.argv[1:] if arguments is None else arguments)
    owner = os.getpid()
    if not path.endswith(f"-{fingerprint(command, os.environ, os.getcwd())}.sock"):
        # Launched with another install of appserver than this one imports (a
        # checkout run with ``python -m`` from its directory, which -P leaves
        # off the path): serving would run other code than the command's.
        sys.stderr.write("appserver: this is not the launcher's appserver install; not serving\n")
        return 0
    holder = hold_lock(path)
    if holder is None:
        return 0  # another parent serves this command
    listener: socket.socket | None = None
    launch = None
    try:
        gc.disable()  # as a cold start does (appserver/startup.py)
        preload(command[1], command[2:])
        gc.collect()
        gc.freeze()  # the children share these pages and never scan them
        gc.enable()
        # Bound and listening under another name, then renamed into place: a
        # launcher never finds the name before it can connect there.
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        fresh = f"{path}.{owner}"
        listener.bind(fresh)
        os.chmod(fresh, 0o600)
        listener.listen(64)
        os.replace(fresh, path)
        launch = Parent(listener, float(idle), command).serve([holder])
    finally:
        if os.getpid() == owner:
            # Gone before the lock is let go: a successor's socket is never removed.
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            if listener is not None:
                listener.close()
            os.close(holder)
    return 0 if launch is None else launch.run()


if __name__ == "__main__":
    sys.exit(main())
