"""Read a py-spy ``record --format raw`` file (collapsed stacks: ``frame;frame;...
count`` a line) and print where the samples went: by thread, by package and by
function. Prints figures; never asserts.

    .venv/bin/python bench/spy_summary.py FILE

py-spy samples every thread with native frames, so unlike cProfile it shows the
database thread beside the event loop and does not inflate many small calls.
It is not a project dependency: ``pip install --target DIR py-spy`` puts one
in ``DIR/bin/py-spy`` (bench/turn_burst.py's ``--py-spy`` takes that path).
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path

_FRAME = re.compile(r"(?P<name>.*) \((?P<path>.*):\d+\)$")


def _place(frame: str) -> tuple[str, str]:
    """``(function (short file), package)`` of one frame."""
    match = _FRAME.match(frame)
    if match is None:
        return frame or "(native)", "(native)"
    # py-spy names a file by its path under its sys.path entry when it can.
    short = match.group("path").split("site-packages/")[-1].split("python3.11/")[-1]
    parts = short.lstrip("/").split("/")
    top = parts[0].removesuffix(".py")
    if top == "appserver" and len(parts) > 1:
        package = "appserver." + parts[1].removesuffix(".py")
    elif top in sys.stdlib_module_names or short.startswith(("/", "<")):
        package = "stdlib " + top
    else:
        package = top
    return f"{match.group('name')} ({short})", package


def _thread(stack: list[str]) -> str:
    if any("_connection_worker_thread" in frame for frame in stack):
        return "aiosqlite's database thread"
    if stack and stack[0].startswith("Thread._bootstrap"):
        return "other threads"
    return "the event loop's thread"


def summarize(path: Path, top: int = 15) -> list[str]:
    """The summary's lines."""
    threads: Counter[str] = Counter()
    packages: Counter[str] = Counter()
    functions: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack_text, _, count_text = line.rpartition(" ")
        if not stack_text or not count_text.isdigit():
            continue
        count = int(count_text)
        total += count
        stack = stack_text.split(";")
        threads[_thread(stack)] += count
        function, package = _place(stack[-1])
        packages[package] += count
        functions[function] += count
    if not total:
        return [f"{path}: no samples"]
    lines = [f"{total} samples ({path})", "by thread:"]
    lines += [f"  {n / total * 100:5.1f} %  {name}" for name, n in threads.most_common()]
    lines.append("by package (where the sample was):")
    lines += [f"  {n / total * 100:5.1f} %  {name}" for name, n in packages.most_common(top)]
    lines.append("by function (where the sample was):")
    lines += [f"  {n / total * 100:5.1f} %  {name}" for name, n in functions.most_common(top)]
    return lines


if __name__ == "__main__":
    print("\n".join(summarize(Path(sys.argv[1]))))
