"""The diff an approval of ``write_file`` or ``edit_file`` shows.

A unified diff of the file as it is when the call is planned against what
the call would write, with git's headers: ``a/<path>`` and ``b/<path>``
relative to the workspace (the absolute path outside it), ``/dev/null`` for a
file that does not exist yet. Lines split on ``\\n`` only, and a last line
without one is followed by git's ``\\ No newline at end of file``, so a
person sees exactly what changes.

Plans run on the event loop, so the cost is bounded: a side larger than
:data:`DIFF_INPUT_MAX_BYTES` is not diffed (the diff says why instead); the
lines both sides share at the start and the end are set aside first (an
edit usually leaves a few lines in between), and ``difflib`` matches what is
left only while its worst case stays small (:data:`MATCH_MAX_PAIRS` line
pairs); past that the changed middle is shown as one hunk, every old line
removed and every new line added (still exact, just not minimal). A diff
longer than :data:`DIFF_MAX_BYTES` is cut at a line and ends with a line
saying how many lines were left out.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterator

DIFF_MAX_BYTES = 64 * 1024
DIFF_INPUT_MAX_BYTES = 1024 * 1024
# difflib is quadratic at worst (many equal lines): a changed middle of more
# line pairs than this is shown as one replacing hunk instead.
MATCH_MAX_PAIRS = 250_000
CONTEXT_LINES = 3
NO_NEWLINE = "\\ No newline at end of file\n"

Opcode = tuple[str, int, int, int, int]


def _lines(text: str) -> list[str]:
    """``text`` cut after each ``\\n`` (not at U+2028, form feeds or lone CRs,
    as ``str.splitlines`` would: those are part of a line in the file)."""
    pieces = text.split("\n")
    lines = [piece + "\n" for piece in pieces[:-1]]
    if pieces[-1]:
        lines.append(pieces[-1])
    return lines


def _quoted(name: str) -> str:
    """A file name as shown; one with control characters (a newline would
    fake a header line) is quoted, C-style, as git quotes it."""
    if any(ord(char) < 0x20 or ord(char) == 0x7F for char in name):
        return json.dumps(name)
    return name


def _side(prefix: str, shown: str) -> str:
    # Absolute paths (outside the workspace) are shown as they are, like git's
    # --no-index; relative ones get git's a/ and b/ prefixes.
    return _quoted(shown if shown.startswith("/") else f"{prefix}/{shown}")


def path_label(prefix: str, shown: str) -> str:
    """How a diff header names ``shown`` on side ``prefix`` (``a`` or ``b``)."""
    return _side(prefix, shown)


def not_diffable(shown: str, why: str) -> str:
    """The one-line "diff" of a file that cannot be diffed (binary, too large)."""
    return f"[no diff of {_quoted(shown)}: {why}]\n"


def _opcodes(old: list[str], new: list[str], max_pairs: int) -> list[Opcode]:
    """What turns ``old`` into ``new``, at a bounded cost."""
    head = 0
    limit = min(len(old), len(new))
    while head < limit and old[head] == new[head]:
        head += 1
    tail = 0
    while tail < limit - head and old[-1 - tail] == new[-1 - tail]:
        tail += 1
    old_end, new_end = len(old) - tail, len(new) - tail
    middle: list[Opcode]
    if (old_end - head) * (new_end - head) <= max_pairs:
        matcher = difflib.SequenceMatcher(None, old[head:old_end], new[head:new_end])
        middle = [
            (tag, i1 + head, i2 + head, j1 + head, j2 + head)
            for tag, i1, i2, j1, j2 in matcher.get_opcodes()
        ]
    else:
        middle = [("replace", head, old_end, head, new_end)]
    codes: list[Opcode] = []
    if head:
        codes.append(("equal", 0, head, 0, head))
    codes.extend(code for code in middle if code[1] != code[2] or code[3] != code[4])
    if tail:
        codes.append(("equal", old_end, len(old), new_end, len(new)))
    return codes


def _groups(codes: list[Opcode], context: int) -> Iterator[list[Opcode]]:
    """The opcodes cut into hunks with ``context`` equal lines around changes
    (``difflib.SequenceMatcher.get_grouped_opcodes`` for given opcodes)."""
    if not any(tag != "equal" for tag, *_ in codes):
        return
    if codes[0][0] == "equal":
        _, i1, i2, j1, j2 = codes[0]
        codes[0] = ("equal", max(i1, i2 - context), i2, max(j1, j2 - context), j2)
    if codes[-1][0] == "equal":
        _, i1, i2, j1, j2 = codes[-1]
        codes[-1] = ("equal", i1, min(i2, i1 + context), j1, min(j2, j1 + context))
    group: list[Opcode] = []
    for tag, i1, i2, j1, j2 in codes:
        if tag == "equal" and i2 - i1 > 2 * context:
            group.append((tag, i1, min(i2, i1 + context), j1, min(j2, j1 + context)))
            yield group
            group = []
            i1, j1 = max(i1, i2 - context), max(j1, j2 - context)
        group.append((tag, i1, i2, j1, j2))
    if group and not (len(group) == 1 and group[0][0] == "equal"):
        yield group


def _range(start: int, stop: int) -> str:
    """A hunk header's range, as ``difflib`` and git write it."""
    beginning, length = start + 1, stop - start
    if length == 1:
        return str(beginning)
    if not length:
        beginning -= 1
    return f"{beginning},{length}"


def _diff_lines(old: list[str], new: list[str], max_pairs: int) -> Iterator[str]:
    for group in _groups(_opcodes(old, new, max_pairs), CONTEXT_LINES):
        first, last = group[0], group[-1]
        yield f"@@ -{_range(first[1], last[2])} +{_range(first[3], last[4])} @@\n"
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                yield from (" " + line for line in old[i1:i2])
                continue
            if tag in ("replace", "delete"):
                yield from ("-" + line for line in old[i1:i2])
            if tag in ("replace", "insert"):
                yield from ("+" + line for line in new[j1:j2])


def unified_diff(
    shown: str,
    before: str | None,
    after: str,
    *,
    max_bytes: int = DIFF_MAX_BYTES,
    max_input_bytes: int = DIFF_INPUT_MAX_BYTES,
    match_max_pairs: int = MATCH_MAX_PAIRS,
) -> str:
    """The diff of ``shown`` (the path as shown) from ``before`` (``None``:
    the file does not exist) to ``after``, bounded to ``max_bytes``."""
    for which, text in (("the file", before or ""), ("the new content", after)):
        if len(text.encode("utf-8", errors="surrogatepass")) > max_input_bytes:
            limit = f"{max_input_bytes // 1024} KiB"
            return not_diffable(shown, f"{which} is larger than {limit}")
    header = f"--- {'/dev/null' if before is None else _side('a', shown)}\n"
    header += f"+++ {_side('b', shown)}\n"
    old, new = _lines(before or ""), _lines(after)
    if old == new:
        return header + "(no change)\n"
    out = [header]
    used = len(header.encode("utf-8"))
    lines = _diff_lines(old, new, match_max_pairs)
    for line in lines:
        # Only a file's last line can lack its "\n".
        text = line if line.endswith("\n") else line + "\n" + NO_NEWLINE
        size = len(text.encode("utf-8", errors="surrogatepass"))
        if used + size > max_bytes:
            left = 1 + sum(1 for _ in lines)
            out.append(f"[... diff truncated at {max_bytes // 1024} KiB: {left} more lines]\n")
            break
        out.append(text)
        used += size
    return "".join(out)


def file_header(before: str | None, after: str | None) -> str:
    """The two header lines of a file's diff: ``before`` and ``after`` are
    the paths as shown (``None``: ``/dev/null``, the file is new or gone);
    they differ when the file was moved."""
    old = "/dev/null" if before is None else _side("a", before)
    new = "/dev/null" if after is None else _side("b", after)
    return f"--- {old}\n+++ {new}\n"
