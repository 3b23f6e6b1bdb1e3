"""The warm parent: a command's modules imported and wire models built once, then a
fork per launch onto the launcher's streams (why, wire, client: :mod:`appserver.warm_launch`).

``python -P -m appserver.warm_parent SOCKET IDLE SLOT``, started detached by a
launcher in its directory, with the command (``[ARGV0, ENTRY, *ARGS]``) and the
launcher's environment as JSON on stdin. It holds ``SOCKET``'s lock while it
takes launches (one parent a command), preloads, listens, and for each launch
forks a child that takes the launcher's descriptors as its 0, 1 and 2, its
directory and environment, and runs ``ENTRY`` with ``ARGS`` as a cold process
would. The parent never runs an event loop or a thread, so forking is safe; it
reaps its children and tells each launcher how its server ended. A server
watches its launcher's connection and ends at once (SIGKILL) when it closes.
The parent ends once it has had no server for IDLE seconds, when asked to stop,
or when a module it loaded changed on disk (it would fork stale code): then it
lets go of its socket and lock at once (launches run cold until a new parent
starts) and ends with its last server.
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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from appserver import dataclass_cache, pydantic_plugins
from appserver.warm_common import CHUNK, descriptors, hold_lock, peer_is_us
from appserver.warm_launch import WIRE_VERSION, command_print

# A launcher sends its header and answers ``ready`` at once; one whose
# handshake takes longer than this is dropped (the parent serves launches one
# at a time), as is one whose header is larger than HEADER_MOST bytes.
HANDSHAKE_WAIT = 2.0
HEADER_MOST = 4 << 20
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
    "appserver.providers.http_client",
    "appserver.runtime.cluster",
    "appserver.runtime.cluster_approvals",
    "appserver.runtime.recent_broadcasts",
    "appserver.runtime.shared_log",
    "appserver.services.context",
    "appserver.services.handshake",
    "appserver.storage.cluster_sqlite",
    "appserver.protocol.terminals",  # these five: a cold process's at first use
    "appserver.protocol.editor_families",
    "appserver.tools.editor_families",
    "appserver.runtime.subagents",
    "appserver.tools.safe_commands",
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
    else:  # the DotCraft door: every family (shared with the servers it forks)
        from appserver.services.families import every_module

        for name in every_module():
            importlib.import_module(name)
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
    """Each loaded module's file's modification time (``None``: gone): appserver's
    own and every library it runs on."""
    stamps: dict[str, int | None] = {}
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if path:
            try:
                stamps[path] = os.stat(path).st_mtime_ns
            except OSError:
                stamps[path] = None
    return stamps


@dataclass
class Launch:
    """What a forked child runs: the launcher's streams, directory, environment
    and start, and its connection (watched: the launcher's life)."""

    streams: list[int]
    directory: int
    environment: dict[bytes, bytes]
    started: float
    launcher: int
    command: list[str]

    def run(self) -> int:
        """Become the server: the streams as 0, 1 and 2, the launcher's
        directory and environment, then the command."""
        for target, stream in enumerate(self.streams):
            os.dup2(stream, target)
        for stream in self.streams:
            if stream > 2:
                os.close(stream)
        # The launcher's directory itself, not its name: one deleted and made
        # again since the parent started is still the launcher's.
        os.fchdir(self.directory)
        os.close(self.directory)
        os.environb.clear()
        os.environb.update(self.environment)
        _end_with_launcher(self.launcher)
        from appserver import startup

        startup.adopt_start(self.started)
        argv0, entry, *argv = self.command
        sys.argv = [argv0, *argv]
        from appserver import cli

        if entry == "appserver-codex":
            return cli.codex_main()
        return cli.main()


def _end_with_launcher(connection: int) -> None:
    """Kill this process when the launcher's connection closes (it never says
    anything after ``go``): a killed launcher takes its server with it, as a
    killed cold server would be gone, whether or not the parent still lives."""

    def watch() -> None:
        select.select([connection], [], [])
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="launcher-watch", daemon=True).start()


class Refused(Exception):
    """A launch the parent does not take (before ``go``: the launcher runs it cold)."""


class Parent:
    """The listener and lock (the door), the servers forked (pid -> their
    launcher's connection) and the idle clock."""

    def __init__(
        self,
        door: tuple[socket.socket, str, int],
        idle: float,
        command: list[str],
        stamps: Mapping[str, int | None],
    ) -> None:
        self.listener: socket.socket | None = door[0]
        self.path, self.holder = door[1], door[2]
        self.idle = idle
        self.command = command
        self.servers: dict[int, socket.socket] = {}
        self.served = 0
        self.stopping = False
        self._last = time.monotonic()
        self._stamps = dict(stamps)
        self.slot: int | None = None  # the descriptor holding this parent's slot
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_write, False)
        os.set_blocking(self._wake_read, False)

    def serve(self) -> Launch | None:
        """Take launches until done; in a forked child, what it is to run."""
        signal.set_wakeup_fd(self._wake_write)
        signal.signal(signal.SIGCHLD, _ignore)
        signal.signal(signal.SIGTERM, self._stop_signal)
        while not (self.stopping and not self.servers):
            if self.stopping:
                self.close_door()
            now = time.monotonic()
            wait = None if self.servers else self._last + self.idle - now
            if wait is not None and wait <= 0:
                break
            watched = [self._wake_read]
            if self.listener is not None:
                watched.append(self.listener.fileno())
            readable, _, _ = select.select(watched, [], [], wait)
            self._reap()
            if self.listener is not None and self.listener.fileno() in readable:
                launch = self._accept()
                if launch is not None:
                    return launch
        return None

    def close_door(self) -> None:
        """Take no more launches: the socket's name and the lock go at once, so
        a new parent can start while this one's servers finish."""
        if self.listener is None:
            return
        # Unlinked while the lock is held: a successor's socket is never removed.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        self.listener.close()
        self.listener = None
        os.close(self.holder)

    def _stop_signal(self, signum: int, frame: object) -> None:
        self.stopping = True

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

    def _accept(self) -> Launch | None:
        assert self.listener is not None
        try:
            connection, _address = self.listener.accept()
        except OSError:
            return None
        if not peer_is_us(connection):
            connection.close()
            return None
        handshake = Handshake(connection, time.monotonic() + HANDSHAKE_WAIT)
        try:
            return self._take(handshake)
        except (OSError, ValueError, Refused):
            if handshake.ready_sent:
                # The launcher may have committed already: told, it runs cold.
                with contextlib.suppress(OSError):
                    handshake.connection.sendall(b"refused\n")
            handshake.close()
            return None

    def _take(self, handshake: Handshake) -> Launch | None:
        """Serve one connection: a launch (forked: in the child, its
        :class:`Launch`) or a request to stop."""
        line = handshake.line()
        if line.startswith(b"{"):
            if json.loads(line).get("stop") is not True:
                raise ValueError("not a request")
            self._stop()  # before the answer: once told, the asker finds the name gone
            handshake.connection.sendall(f"served {self.served}\n".encode())
            raise Refused("stopped")  # closes the connection
        started, environment = handshake.header(line)
        self._check()
        handshake.connection.sendall(b"ready\n")
        handshake.ready_sent = True
        if handshake.line() != b"go" or len(handshake.received) != 4:
            raise ValueError("no go")
        sys.stderr.flush()
        try:
            pid = os.fork()
        except OSError as error:
            raise Refused(f"no fork: {error.strerror}") from error
        streams, directory = handshake.received[:3], handshake.received[3]
        if pid == 0:
            launcher = os.dup(handshake.connection.fileno())
            self._become_child(handshake.connection)
            return Launch(streams, directory, environment, started, launcher, self.command)
        self.served += 1
        self.servers[pid] = handshake.connection
        handshake.connection.settimeout(None)
        handshake.close_received()
        try:
            server = os.pidfd_open(pid)
        except OSError:  # a kernel without pidfds: the launcher signals the pid
            server = None
        try:
            sent = array.array("i", [] if server is None else [server])
            ancillary = [] if server is None else [(socket.SOL_SOCKET, socket.SCM_RIGHTS, sent)]
            handshake.connection.sendmsg([f"pid {pid}\n".encode()], ancillary)
        except OSError:
            pass  # the launcher is gone: its server sees that and ends
        finally:
            if server is not None:
                os.close(server)
        return None

    def _check(self) -> None:
        """Refuse a launch this parent must not fork (before ``ready``)."""
        if self.stopping:
            raise Refused("stopping")
        if module_stamps() != self._stamps:
            self._stop()  # a module changed: a fork would run the old one
            raise Refused("stale")
        if threading.active_count() > 1:
            # Never so (nothing here starts a thread), but a fork would copy
            # another thread's locks without it.
            self._stop()
            raise Refused("threads")

    def _stop(self) -> None:
        self.stopping = True
        self.close_door()

    def _become_child(self, own: socket.socket) -> None:
        """In a forked child: let go of everything that is the parent's."""
        signal.set_wakeup_fd(-1)
        for signum in (signal.SIGCHLD, signal.SIGTERM):
            signal.signal(signum, signal.SIG_DFL)
        if self.listener is not None:
            self.listener.close()
            os.close(self.holder)
        own.close()
        for connection in self.servers.values():
            connection.close()
        os.close(self._wake_read)
        os.close(self._wake_write)
        if self.slot is not None:
            os.close(self.slot)


class Handshake:
    """One launcher's connection while it is being taken: lines read under one
    deadline, and the descriptors received with them."""

    def __init__(self, connection: socket.socket, deadline: float) -> None:
        self.connection = connection
        self.deadline = deadline
        self.buffer = bytearray()
        self.received: list[int] = []
        self.ready_sent = False

    def line(self) -> bytes:
        """The next line (without its newline)."""
        while b"\n" not in self.buffer:
            self._more()
        line, _, rest = self.buffer.partition(b"\n")
        self.buffer = bytearray(rest)
        return bytes(line)

    def header(self, line: bytes) -> tuple[float, dict[bytes, bytes]]:
        """The launch header's start and environment (``launch 2 T N`` + N bytes)."""
        words = line.split()
        if len(words) != 4 or words[:2] != [b"launch", str(WIRE_VERSION).encode()]:
            raise ValueError("not a launcher's header")
        started, size = float(words[2]), int(words[3])
        if not 0 <= size <= HEADER_MOST:
            raise ValueError("header too large")
        while len(self.buffer) < size:
            self._more()
        block, self.buffer = bytes(self.buffer[:size]), self.buffer[size:]
        # An entry without a name (``=x``, which execve allows) cannot be set.
        environment = dict(
            entry.partition(b"=")[::2] for entry in block.split(b"\0") if entry.find(b"=") > 0
        )
        return started, environment

    def _more(self) -> None:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0 or len(self.buffer) > HEADER_MOST:
            raise ValueError("handshake too slow or too large")
        self.connection.settimeout(remaining)
        space = socket.CMSG_SPACE(4 * array.array("i").itemsize)
        data, ancillary, _flags, _address = self.connection.recvmsg(CHUNK, space)
        self.received.extend(descriptors(ancillary))
        if not data:
            raise ValueError("closed")
        self.buffer += data

    def close_received(self) -> None:
        for descriptor in self.received:
            os.close(descriptor)
        self.received.clear()

    def close(self) -> None:
        self.close_received()
        self.connection.close()


def _ignore(signum: int, frame: object) -> None:
    """SIGCHLD's handler: the wake-up descriptor is what wakes the loop."""


def main(arguments: Sequence[str] | None = None) -> int:
    """Run a warm parent; in each forked child, the server's exit status."""
    started_ns = time.time_ns()
    dataclass_cache.install()  # before the preload makes its dataclasses
    pydantic_plugins.install()  # and its validators
    path, idle, slot = list(sys.argv[1:] if arguments is None else arguments)
    # The slot (one of the user's few) is held for as long as this process
    # lives; its servers let go of it (they close it when forked).
    os.set_inheritable(int(slot), False)
    given = json.loads(sys.stdin.buffer.read())
    command = list(given["command"])
    environment = {name: value for name, value in given["environment"].items() if name}
    # The whole environment (this process was started without its secrets).
    os.environ.clear()
    os.environ.update(environment)
    if not path.endswith(f"-{command_print(command, environment, os.getcwd())}.sock"):
        # Launched with another install of appserver than this one imports (a
        # checkout run with ``python -m`` from its directory, which -P leaves
        # off the path): serving would run other code than the command's.
        sys.stderr.write("appserver: this is not the launcher's appserver install; not serving\n")
        return 0
    holder = hold_lock(path)
    if holder is None:
        return 0  # another parent serves this command
    owner = os.getpid()
    parent: Parent | None = None
    launch = None
    try:
        gc.disable()  # as a cold start does (appserver/startup.py)
        preload(command[1], command[2:])
        # Kept now: otherwise every forked server would find them unsaved and write them.
        dataclass_cache.save()
        gc.collect()
        gc.freeze()  # the children share these pages and never scan them
        gc.enable()
        stamps = module_stamps()
        if any(stamp is not None and stamp > started_ns for stamp in stamps.values()):
            return 0  # code changed while it was loading: it might be half old
        # Bound and listening under another name, then renamed into place: a
        # launcher never finds the name before it can connect there.
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        fresh = f"{path}.{owner}"
        listener.bind(fresh)
        os.chmod(fresh, 0o600)
        listener.listen(64)
        os.replace(fresh, path)
        parent = Parent((listener, path, holder), float(idle), command, stamps)
        parent.slot = int(slot)
        launch = parent.serve()
    finally:
        if os.getpid() == owner:
            if parent is not None:
                parent.close_door()
            else:
                os.close(holder)
    return 0 if launch is None else launch.run()


if __name__ == "__main__":
    sys.exit(main())
