"""A real, throwaway PostgreSQL server for the tests (and for benches run as plain scripts).

One cluster per pytest process: under pytest-xdist every worker is its own process with its
own session, so each worker initdb's its own data directory in a fresh temporary directory
and listens on its own free loopback port. We chose that over one cluster shared by all
workers because sharing needs cross-process coordination (a lock file, a reference count to
know who stops it, recovery when the owning worker dies first), while a private cluster
costs only about 0.6 s (initdb and start) per worker and cannot be stopped under another
worker's feet. Tests still get isolation from each other inside a worker through
``postgres_url``: a fresh database per test, dropped afterwards.

The cluster starts lazily, the first time a test asks for ``postgres_cluster`` (directly or
through ``postgres_url``), so runs that need no PostgreSQL never pay for it.

Register the fixtures from ``tests/conftest.py`` with::

    pytest_plugins = ("tests.support.postgres",)

From a script (a bench), without pytest::

    with PostgresCluster.start_temporary() as cluster:
        url = asyncio.run(cluster.create_database())
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Final

import asyncpg
import pytest

MISSING_BINARIES: Final = (
    "PostgreSQL binaries not found: run `make postgres-deps` (Debian: apt-get install postgresql)"
)

# The OS user the Debian package creates; initdb and postgres refuse to run as root.
SERVICE_USER: Final = "postgres"
# The database superuser the tests connect as (trust auth on loopback: no password).
SUPERUSER: Final = "postgres"

# Durability is worthless for a database that is deleted at the end of the run, and fsync
# dominates the cost of CREATE DATABASE and of every commit; max_connections is generous
# because multi-node tests open several pools against the same cluster.
SETTINGS: Final[dict[str, str]] = {
    "listen_addresses": "'127.0.0.1'",
    "max_connections": "200",
    "shared_buffers": "32MB",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "wal_level": "minimal",
    "max_wal_senders": "0",
    "log_min_messages": "warning",
}

# How many times to retry start-up when the port we picked was taken in the meantime (the
# free-port probe and postgres' own bind() cannot be made atomic).
START_ATTEMPTS: Final = 5
START_TIMEOUT_S: Final = 60


class PostgresNotFoundError(RuntimeError):
    """The PostgreSQL server binaries (initdb, pg_ctl, postgres) are not installed."""

    def __init__(self) -> None:
        super().__init__(MISSING_BINARIES)


def find_bin_dir() -> Path:
    """The directory holding initdb/pg_ctl/postgres.

    ``$PG_BIN`` wins; then the highest version under Debian's /usr/lib/postgresql/*/bin
    (those are not on PATH); then whatever directory holds ``pg_ctl`` on PATH.
    """
    needed = ("initdb", "pg_ctl", "postgres")

    def complete(directory: Path) -> bool:
        return all((directory / name).is_file() for name in needed)

    override = os.environ.get("PG_BIN")
    if override:
        if complete(Path(override)):
            return Path(override)
        raise PostgresNotFoundError

    def version(directory: Path) -> tuple[int, ...]:
        # /usr/lib/postgresql/<version>/bin; compare numerically so that 9.6 < 15.
        return tuple(int(part) for part in re.findall(r"\d+", directory.parent.name))

    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=version, reverse=True)
    on_path = shutil.which("pg_ctl")
    if on_path:
        candidates.append(Path(on_path).resolve().parent)
    for directory in candidates:
        if complete(directory):
            return directory
    raise PostgresNotFoundError


def free_port() -> int:
    """A loopback TCP port nobody listens on right now (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class PostgresCluster:
    """A PostgreSQL cluster in a temporary directory, owned by this process.

    Use :meth:`start` and :meth:`stop`, or :meth:`start_temporary` as a context manager.
    The server runs as the ``postgres`` OS user when we are root (it refuses to run as
    root), as ourselves otherwise.
    """

    def __init__(self, bin_dir: Path | None = None, *, name: str = "") -> None:
        self.bin_dir = bin_dir or find_bin_dir()
        self.name = name
        self.port = 0
        self.root: Path | None = None
        self._as_service_user = os.geteuid() == 0

    # -- paths --------------------------------------------------------------------------

    @property
    def data_dir(self) -> Path:
        """The cluster's PGDATA."""
        assert self.root is not None, "cluster not started"
        return self.root / "data"

    @property
    def log_file(self) -> Path:
        """Where the server's own log goes (quoted in start-up failures)."""
        assert self.root is not None, "cluster not started"
        return self.root / "server.log"

    @property
    def socket_dir(self) -> Path:
        """The Unix socket directory: ours, not /var/run/postgresql, so clusters never clash."""
        assert self.root is not None, "cluster not started"
        return self.root

    @property
    def running(self) -> bool:
        """Whether :meth:`start` succeeded and :meth:`stop` has not run since."""
        return self.port != 0

    def url_for(self, dbname: str = "postgres") -> str:
        """``postgresql://postgres@127.0.0.1:PORT/DBNAME`` (trust auth: no password)."""
        assert self.running, "cluster not started"
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{dbname}"

    # -- life cycle ---------------------------------------------------------------------

    def start(self) -> None:
        """initdb a fresh cluster and start it; returns once it accepts connections."""
        if self.running:
            return
        prefix = f"appserver-pg-{self.name}-" if self.name else "appserver-pg-"
        self.root = Path(tempfile.mkdtemp(prefix=prefix))
        try:
            if self._as_service_user:
                try:
                    account = pwd.getpwnam(SERVICE_USER)
                except KeyError:
                    raise PostgresNotFoundError from None
                # initdb creates data/ inside root, and the server writes its log and socket
                # there, so the whole directory must belong to the service user.
                os.chown(self.root, account.pw_uid, account.pw_gid)
            self._initdb()
            self._start_on_a_free_port()
        except BaseException:
            self._remove_root()
            raise
        # A cluster left running holds a port and shared memory until the machine reboots:
        # stop it even when the session ends without reaching our finaliser.
        atexit.register(self.stop)

    def stop(self) -> None:
        """Stop the server (immediate mode: no checkpoint) and delete its directory."""
        if self.running:
            self.port = 0
            # Immediate shutdown skips the final checkpoint; the data is thrown away anyway.
            self._run("pg_ctl", "stop", "-D", str(self.data_dir), "-m", "immediate", "-w")
        self._remove_root()
        atexit.unregister(self.stop)

    @classmethod
    @contextlib.contextmanager
    def start_temporary(
        cls, bin_dir: Path | None = None, *, name: str = ""
    ) -> Iterator[PostgresCluster]:
        """A started cluster for the duration of a ``with`` block (synchronous)."""
        cluster = cls(bin_dir, name=name)
        cluster.start()
        try:
            yield cluster
        finally:
            cluster.stop()

    # -- databases ----------------------------------------------------------------------

    async def create_database(self) -> str:
        """Create a fresh, uniquely named, empty database; returns its URL."""
        dbname = f"t_{uuid.uuid4().hex}"
        connection = await asyncpg.connect(self.url_for("postgres"))
        try:
            await connection.execute(f'CREATE DATABASE "{dbname}"')
        finally:
            await connection.close()
        return self.url_for(dbname)

    async def drop_database(self, url: str) -> None:
        """Drop the database behind ``url``, disconnecting whoever is still connected."""
        dbname = url.rsplit("/", 1)[1]
        connection = await asyncpg.connect(self.url_for("postgres"))
        try:
            # FORCE: a test that leaked a connection must not make the teardown fail.
            await connection.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
        finally:
            await connection.close()

    # -- internals ----------------------------------------------------------------------

    def _command(self, program: str, *args: str) -> list[str]:
        command = [str(self.bin_dir / program), *args]
        if self._as_service_user:
            return ["runuser", "-u", SERVICE_USER, "--", *command]
        return command

    def _run(self, program: str, *args: str) -> subprocess.CompletedProcess[str]:
        # cwd: the service user may not be allowed into our working directory, and pg_ctl
        # and initdb complain when they cannot chdir back to it.
        return subprocess.run(
            self._command(program, *args),
            cwd=self.root,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            check=False,
        )

    def _initdb(self) -> None:
        result = self._run(
            "initdb",
            "--pgdata",
            str(self.data_dir),
            "--username",
            SUPERUSER,
            "--auth",
            "trust",
            "--encoding",
            "UTF8",
            # The C locale exists everywhere (no locales package needed) and sorts bytewise.
            "--locale",
            "C",
            # Nothing to make durable: the directory is deleted at the end of the run.
            "--no-sync",
            "--no-instructions",
        )
        if result.returncode != 0:
            raise RuntimeError(f"initdb failed ({result.returncode}):\n{result.stderr}")
        settings = {**SETTINGS, "unix_socket_directories": f"'{self.socket_dir}'"}
        # Appending to the file initdb wrote keeps its owner; later lines win in postgres
        # configuration files.
        with (self.data_dir / "postgresql.conf").open("a") as conf:
            conf.write("\n# tests/support/postgres.py\n")
            conf.writelines(f"{key} = {value}\n" for key, value in settings.items())

    def _start_on_a_free_port(self) -> None:
        failures: list[str] = []
        for _ in range(START_ATTEMPTS):
            port = free_port()
            result = self._pg_ctl_start(port)
            if result.returncode == 0:
                self.port = port
                return
            log = self._log_tail()
            failures.append(f"port {port}: {result.stdout}{result.stderr}{log}")
            # Only a lost race for the port is worth another try; anything else is a real
            # failure that retrying would only repeat.
            if "could not bind" not in log and "Address already in use" not in log:
                break
        raise RuntimeError("PostgreSQL failed to start:\n" + "\n".join(failures))

    def _pg_ctl_start(self, port: int) -> subprocess.CompletedProcess[str]:
        # -w: pg_ctl itself waits until the server accepts connections (no sleeps here).
        return self._run(
            "pg_ctl",
            "start",
            "-D",
            str(self.data_dir),
            "-l",
            str(self.log_file),
            "-o",
            f"-p {port}",
            "-w",
            "-t",
            str(START_TIMEOUT_S),
        )

    def _log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_file.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def _remove_root(self) -> None:
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None


# -- pytest fixtures (register with `pytest_plugins = ("tests.support.postgres",)`) ----------


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[PostgresCluster]:
    """This pytest process's PostgreSQL cluster, started on first use, stopped at session end."""
    started = time.monotonic()
    missing = ""
    try:
        cluster = PostgresCluster(name=os.environ.get("PYTEST_XDIST_WORKER", ""))
        cluster.start()
    except PostgresNotFoundError as error:
        missing = str(error)
    if missing:
        # Failed outside the except block: the message alone, not a chained traceback.
        pytest.fail(missing, pytrace=False)
    # Visible with -rP/-s; helps to tell a slow machine from a slow test.
    print(f"postgres cluster on port {cluster.port} in {time.monotonic() - started:.2f}s")  # noqa: T201
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
async def postgres_url(postgres_cluster: PostgresCluster, anyio_backend: str) -> AsyncIterator[str]:
    """A fresh empty database for one test, as a URL; dropped afterwards.

    Depends on ``anyio_backend`` so that anyio's pytest plugin runs it (asyncpg needs the
    asyncio backend, which tests/conftest.py selects).
    """
    url = await postgres_cluster.create_database()
    try:
        yield url
    finally:
        await postgres_cluster.drop_database(url)
