"""A finished command ends its process at once (appserver/quick_exit.py), and
nothing finalization would have done first is lost: the threads, every
``atexit`` handler (those registered before the command too), the standard
streams' buffers and the exit status."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# Run as `python -c`: argv[1] says how the command ends.
PROGRAM = textwrap.dedent(
    """
    import atexit, sys, threading
    atexit.register(print, "handler registered before the command")
    from appserver import quick_exit

    def command():
        go = threading.Event()

        def late_writer():
            go.wait()
            print("written by a thread still running after the command")

        threading.Thread(target=late_writer).start()
        atexit.register(print, "handler registered by the command")
        sys.stdout.write("buffered, never flushed by the command")
        go.set()
        how = sys.argv[1]
        if how == "help":
            raise SystemExit(0)
        if how == "message":
            raise SystemExit("a message")
        if how == "raise":
            raise RuntimeError("the command failed")
        return 3

    sys.exit(quick_exit.run(command))
    """
)


# Buffered standard streams (as users run) and no warnings options.
ENV = {
    key: value
    for key, value in os.environ.items()
    if key not in ("PYTHONUNBUFFERED", "PYTHONWARNINGS", "PYTHONDEVMODE")
}


def run(how: str, *flags: str, program: str = PROGRAM) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *flags, "-c", program, how],
        capture_output=True,
        text=True,
        timeout=60,
        env=ENV,
    )


@pytest.mark.parametrize(("how", "status"), [("return", 3), ("help", 0)])
def test_what_finalization_does_first_is_done(how: str, status: int) -> None:
    done = run(how)
    assert done.returncode == status
    assert "buffered, never flushed by the command" in done.stdout
    assert "written by a thread still running after the command" in done.stdout
    # Both handlers, the command's first, as the interpreter runs them.
    assert done.stdout.index("handler registered by the command") < done.stdout.index(
        "handler registered before the command"
    )
    assert done.stderr == ""


def test_an_exit_message_is_printed_as_usual() -> None:
    done = run("message")
    assert done.returncode == 1
    assert done.stderr.strip() == "a message"
    assert "handler registered before the command" in done.stdout


def test_a_command_that_raises_ends_as_usual() -> None:
    done = run("raise")
    assert done.returncode == 1
    assert "RuntimeError: the command failed" in done.stderr
    assert "handler registered before the command" in done.stdout


@pytest.mark.parametrize(
    "flags", [("-W", "default"), ("-X", "dev")], ids=["warnings-option", "dev-mode"]
)
def test_a_process_run_for_its_warnings_finishes_as_usual(flags: tuple[str, ...]) -> None:
    """The interpreter's teardown reports what was left open (here a file)."""
    leak = PROGRAM.replace("return 3", "globals()['leak'] = open(sys.executable, 'rb'); return 3")
    done = run("return", *flags, program=leak)
    assert done.returncode == 3
    assert "ResourceWarning" in done.stderr


def test_a_profiled_command_leaves_its_profile(tmp_path: Path) -> None:
    """`python -m cProfile -o FILE` writes FILE after the command returns."""
    script = tmp_path / "command.py"
    script.write_text(PROGRAM)
    profile = tmp_path / "profile.out"
    done = subprocess.run(
        [sys.executable, "-m", "cProfile", "-o", str(profile), str(script), "return"],
        capture_output=True,
        text=True,
        timeout=60,
        env=ENV,
    )
    # (cProfile itself swallows the command's SystemExit: its status is 0.)
    assert "handler registered before the command" in done.stdout, done.stderr
    assert profile.stat().st_size > 0


def test_a_stdout_nobody_reads_is_reported_as_usual() -> None:
    """The reader went away before the buffered output was flushed: the
    interpreter reports the broken pipe and exits 120, as without the quick exit."""
    program = textwrap.dedent(
        """
        import sys
        from appserver import quick_exit

        def command():
            sys.stdout.write("buffered, never flushed by the command")
            sys.stdin.read()  # until the test has closed the pipe's other end
            return 0

        sys.exit(quick_exit.run(command))
        """
    )
    child = subprocess.Popen(
        [sys.executable, "-c", program],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=ENV,
    )
    assert child.stdin is not None and child.stdout is not None and child.stderr is not None
    child.stdout.close()
    child.stdin.close()
    with child.stderr:
        error = child.stderr.read().decode()
    assert child.wait(timeout=60) == 120
    assert "BrokenPipeError" in error
