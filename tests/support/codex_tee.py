"""Run a command between a Codex client and the face, recording both directions:
what the client sends to ``$CODEX_FRAMES_FILE.in``, what the face sends to
``$CODEX_FRAMES_FILE`` (one JSON per line), for the schema checks."""

import os
import subprocess
import sys
import threading


def _forward_input(child: subprocess.Popen[bytes], path: str) -> None:
    assert child.stdin is not None
    with open(path, "ab") as record:
        for line in sys.stdin.buffer:
            record.write(line)
            record.flush()
            child.stdin.write(line)
            child.stdin.flush()
    child.stdin.close()


def main(argv: list[str]) -> int:
    path = os.environ["CODEX_FRAMES_FILE"]
    child = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdout is not None
    threading.Thread(target=_forward_input, args=(child, path + ".in"), daemon=True).start()
    with open(path, "ab") as frames:
        for line in child.stdout:
            # Recorded before the client sees it: a client that ends the
            # process as soon as it has its answer must not leave it unrecorded.
            frames.write(line)
            frames.flush()
            sys.stdout.buffer.write(line)
            sys.stdout.buffer.flush()
    return child.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
