"""Codex's patch format: parsing a patch, and applying one file's hunks to its text.

The format (what Codex-trained models write for ``apply_patch``)::

    *** Begin Patch
    *** Add File: <path>          every following line is "+<text>"
    *** Delete File: <path>
    *** Update File: <path>
    *** Move to: <path>           optional, right after Update File
    @@ <a line of the file>       a hunk; "@@" alone, or a line naming where it is
     <context>  -<removed>  +<added>
    *** End of File               optional: the hunk's lines end the file
    *** End Patch

The rules follow Codex's own parser (``codex-rs/apply-patch``): markers may be
padded with whitespace; a patch wrapped in a heredoc (``<<'EOF'`` ... ``EOF``,
also after ``apply_patch``) is unwrapped; the first hunk of an Update may omit
its ``@@``; blank lines between hunks are skipped and an empty line inside a
hunk is an empty context line. One addition: several ``@@ <line>`` in a row
are sought one after the other (class, then method), as Codex's instructions
tell the model to write.

Applying (:func:`apply_hunks`) follows Codex too. Each hunk's ``@@`` line and
then its old lines are sought from where the previous hunk ended, first
exactly, then ignoring trailing whitespace, then ignoring surrounding
whitespace, then with typographic dashes, quotes and spaces read as ASCII; a
hunk marked ``*** End of File`` must match at the end; a hunk that only adds
lines adds them at the end of the file. Context lines keep the file's text
(a lenient match changes only the lines the hunk adds or removes). Where
Codex takes the first match, we refuse a hunk without an ``@@`` line whose
old lines match more than one place: applying it at a guess could change the
wrong lines. Line endings are
kept: lines the patch does not touch keep theirs, new lines take the file's
(the ending of its first line, CRLF or LF), and a file that ended without a
newline still does.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

BEGIN = "*** Begin Patch"
END = "*** End Patch"
ADD = "*** Add File: "
DELETE = "*** Delete File: "
UPDATE = "*** Update File: "
MOVE = "*** Move to: "
END_OF_FILE = "*** End of File"

# ``<<EOF``, ``<<'EOF'``, ``<<"EOF"``, optionally after ``apply_patch``: the
# shell form models sometimes put in the argument itself.
_HEREDOC = re.compile(r"""^(?:apply_?patch\s*)?<<\s*(?:EOF|'EOF'|"EOF")$""")

# Typographic punctuation read as ASCII by the last, most lenient match.
_PUNCTUATION = str.maketrans(
    {
        **dict.fromkeys("\u2010\u2011\u2012\u2013\u2014\u2015\u2212", "-"),
        **dict.fromkeys("\u2018\u2019\u201a\u201b", "'"),
        **dict.fromkeys("\u201c\u201d\u201e\u201f", '"'),
        **dict.fromkeys(
            "\u00a0\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u202f\u205f\u3000",
            " ",
        ),
    }
)


class PatchError(ValueError):
    """A patch that is not well formed, or a hunk that does not apply."""


@dataclass(frozen=True)
class Hunk:
    """One ``@@`` hunk of an Update: ``old`` lines become ``new`` lines."""

    anchors: tuple[str, ...]  # the "@@ <line>" lines, sought in order before ``old``
    old: tuple[str, ...]
    new: tuple[str, ...]
    end_of_file: bool = False


@dataclass(frozen=True)
class AddFile:
    path: str
    content: str


@dataclass(frozen=True)
class DeleteFile:
    path: str


@dataclass(frozen=True)
class UpdateFile:
    path: str
    move_to: str | None
    hunks: tuple[Hunk, ...]


FileOperation = AddFile | DeleteFile | UpdateFile


# --- parsing -----------------------------------------------------------------


def _patch_lines(text: str) -> list[str]:
    """The lines between the Begin and End markers (heredoc unwrapped)."""
    lines = [line.removesuffix("\r") for line in text.strip().split("\n")]
    wrapped = len(lines) >= 4 and _HEREDOC.match(lines[0].strip()) is not None
    if wrapped and lines[-1].strip().endswith("EOF") and lines[1].strip() == BEGIN:
        lines = lines[1:-1]
    if not lines or lines[0].strip() != BEGIN:
        raise PatchError("invalid patch: the first line of the patch must be '*** Begin Patch'")
    if len(lines) < 2 or lines[-1].strip() != END:
        raise PatchError("invalid patch: the last line of the patch must be '*** End Patch'")
    return lines[1:-1]


def _hunk_error(number: int, message: str) -> PatchError:
    return PatchError(f"invalid patch at line {number}: {message}")


def _is_anchor(line: str) -> bool:
    return line.rstrip() == "@@" or line.startswith("@@ ")


def _parse_hunk(lines: list[str], at: int, first: bool, number: int) -> tuple[Hunk, int]:
    """The hunk starting at ``lines[at]`` and the index after it."""
    anchors: list[str] = []
    index = at
    while index < len(lines) and _is_anchor(lines[index]):
        anchor = lines[index][3:] if lines[index].startswith("@@ ") else ""
        if anchor.strip():
            anchors.append(anchor)
        index += 1
    if index == at and not first:
        raise _hunk_error(number, f"expected a hunk to start with '@@', got {lines[at]!r}")
    old: list[str] = []
    new: list[str] = []
    changed = 0
    end_of_file = False
    while index < len(lines):
        line = lines[index]
        if line.strip() == END_OF_FILE:
            if not changed:
                break
            end_of_file = True
            index += 1
            break
        marker, text = line[:1], line[1:]
        if marker == "":
            old.append("")  # an empty line: an empty context line
            new.append("")
        elif marker == " ":
            old.append(text)
            new.append(text)
        elif marker == "-":
            old.append(text)
        elif marker == "+":
            new.append(text)
        elif not changed:
            raise _hunk_error(
                number + index - at,
                f"unexpected line {line!r} in a hunk: every line starts with ' ' (context), "
                "'+' (added) or '-' (removed)",
            )
        else:
            break  # the next hunk or file section
        changed += 1
        index += 1
    if not changed:
        raise _hunk_error(number + index - at, "the hunk contains no lines")
    return Hunk(tuple(anchors), tuple(old), tuple(new), end_of_file), index


def _parse_update(lines: list[str], at: int, path: str, number: int) -> tuple[UpdateFile, int]:
    index = at + 1
    move_to = None
    if index < len(lines) and lines[index].strip().startswith(MOVE):
        move_to = lines[index].strip()[len(MOVE) :]
        index += 1
    hunks: list[Hunk] = []
    while index < len(lines):
        if not lines[index].strip():
            index += 1  # blank lines between hunks
            continue
        if lines[index].startswith("*"):
            break
        hunk, index = _parse_hunk(lines, index, not hunks, number + index - at)
        hunks.append(hunk)
    if not hunks:
        raise _hunk_error(number, f"the Update File section of {path!r} has no hunks")
    return UpdateFile(path, move_to, tuple(hunks)), index


def parse_patch(text: str) -> list[FileOperation]:
    """The file operations of ``text``, in order; :class:`PatchError` if it is not
    a well-formed patch. An empty patch (no operation) is well formed."""
    lines = _patch_lines(text)
    operations: list[FileOperation] = []
    index = 0
    while index < len(lines):
        header = lines[index].strip()
        number = index + 2  # 1-based, after the Begin line
        if header.startswith(ADD):
            index += 1
            content: list[str] = []
            while index < len(lines) and lines[index].startswith("+"):
                content.append(lines[index][1:] + "\n")
                index += 1
            operations.append(AddFile(header[len(ADD) :], "".join(content)))
        elif header.startswith(DELETE):
            operations.append(DeleteFile(header[len(DELETE) :]))
            index += 1
        elif header.startswith(UPDATE):
            update, index = _parse_update(lines, index, header[len(UPDATE) :], number)
            operations.append(update)
        elif not header:
            index += 1  # a blank line between file sections
        else:
            raise _hunk_error(
                number,
                f"{header!r} is not a valid file header: use '*** Add File: <path>', "
                "'*** Delete File: <path>' or '*** Update File: <path>'",
            )
    return operations


# --- applying ------------------------------------------------------------------


def _split(content: str) -> tuple[list[str], list[str]]:
    """The lines of ``content`` without their endings, and the endings
    (``"\\n"``, ``"\\r\\n"``, or ``""`` for a last line without one)."""
    texts: list[str] = []
    endings: list[str] = []
    pieces = content.split("\n")
    for piece in pieces[:-1]:
        if piece.endswith("\r"):
            texts.append(piece[:-1])
            endings.append("\r\n")
        else:
            texts.append(piece)
            endings.append("\n")
    if pieces[-1]:
        texts.append(pieces[-1])
        endings.append("")
    return texts, endings


_LEVELS = (
    lambda line: line,
    str.rstrip,
    str.strip,
    lambda line: line.strip().translate(_PUNCTUATION),
)


def _matches(
    lines: list[str], pattern: tuple[str, ...], start: int, end_of_file: bool
) -> list[int]:
    """Where ``pattern`` occurs in ``lines`` at or after ``start``, at the
    strictest level of leniency that finds it (empty: nowhere)."""
    if len(pattern) > len(lines):
        return []
    last = len(lines) - len(pattern)
    first = last if end_of_file else start
    if first < start:
        return []
    for level in _LEVELS:
        seen = [level(line) for line in lines]
        wanted = [level(line) for line in pattern]
        found = [
            index
            for index in range(first, last + 1)
            if seen[index] == wanted[0] and seen[index : index + len(wanted)] == wanted
        ]
        if found:
            return found
    return []


def _place(
    lines: list[str], hunk: Hunk, cursor: int, shown: str, number: int
) -> tuple[int, int, list[tuple[str, int | None]]]:
    """Where hunk ``number`` applies: (start, count of old lines, new lines,
    each with the index of the file's line it keeps, for a context line)."""
    for anchor in hunk.anchors:
        found = _matches(lines, (anchor,), cursor, False)
        if not found:
            raise PatchError(
                f"{shown}: hunk {number}: the line '@@ {anchor}' was not found"
                + (f" after line {cursor}" if cursor else "")
            )
        cursor = found[0] + 1
    if not hunk.old:
        # Only additions: they go at the end of the file (as Codex does).
        return len(lines), 0, [(text, None) for text in hunk.new]
    old, new = hunk.old, hunk.new
    found = _matches(lines, old, cursor, hunk.end_of_file)
    if not found and old[-1] == "":
        # A trailing empty line often stands for the file's last newline.
        old = old[:-1]
        new = new[:-1] if new and new[-1] == "" else new
        found = _matches(lines, old, cursor, hunk.end_of_file) if old else []
    if not found:
        where = "at the end of the file" if hunk.end_of_file else "in the file"
        expected = "\n".join(hunk.old)
        raise PatchError(
            f"{shown}: hunk {number}: the lines to change were not found {where}"
            + (f" after line {cursor}" if cursor else "")
            + f"; read the file and copy them exactly. Expected:\n{expected}"
        )
    if len(found) > 1 and not hunk.anchors:
        places = ", ".join(str(index + 1) for index in found[:5])
        raise PatchError(
            f"{shown}: hunk {number} is ambiguous: its lines match {len(found)} places "
            f"(lines {places}{', ...' if len(found) > 5 else ''}). Add context lines, or an "
            "'@@ <line>' naming the class or function the change is in."
        )
    start = found[0]
    return start, len(old), _keep_context(lines[start : start + len(old)], old, new)


def _keep_context(
    matched: list[str], old: tuple[str, ...], new: tuple[str, ...]
) -> list[tuple[str, int | None]]:
    """``new`` with each context line (one in ``old`` and ``new`` alike) as the
    file has it, and where in ``matched`` it is (``None``: a line the hunk
    adds): a lenient match changes only the lines the hunk changes, and a
    context line keeps its own line ending."""
    kept: list[tuple[str, int | None]] = [(text, None) for text in new]
    for block in difflib.SequenceMatcher(None, old, new, autojunk=False).get_matching_blocks():
        for offset in range(block.size):
            kept[block.b + offset] = (matched[block.a + offset], block.a + offset)
    return kept


def _new_endings(
    new: list[tuple[str, int | None]], replaced: list[str], preferred: str
) -> list[str]:
    """The line endings of a hunk's new lines: a context line keeps its own
    (a file of mixed endings stays as it was around the change); a line the
    hunk adds takes the one of the line before it in the hunk, else of the
    first line it replaces, else the file's first."""
    last = next((ending for ending in replaced if ending), preferred)
    out = []
    for _, kept in new:
        if kept is not None:
            last = replaced[kept] or preferred
        out.append(last)
    return out


def apply_hunks(content: str, hunks: tuple[Hunk, ...], shown: str) -> str:
    """``content`` with ``hunks`` applied; :class:`PatchError` naming ``shown``
    (the file as shown) and the hunk that does not apply."""
    lines, endings = _split(content)
    preferred = next((ending for ending in endings if ending), "\n")
    replacements: list[tuple[int, int, list[tuple[str, int | None]]]] = []
    cursor = 0
    for number, hunk in enumerate(hunks, start=1):
        start, count, new = _place(lines, hunk, cursor, shown, number)
        replacements.append((start, count, new))
        if hunk.old:
            cursor = start + count
    replacements.sort(key=lambda replacement: replacement[0])
    out_lines: list[str] = []
    out_endings: list[str] = []
    position = 0
    for start, count, new in replacements:
        out_lines += lines[position:start]
        out_endings += endings[position:start]
        out_lines += [text for text, _ in new]
        out_endings += _new_endings(new, endings[start : start + count], preferred)
        position = max(position, start + count)
    out_lines += lines[position:]
    out_endings += endings[position:]
    out_endings = [ending or preferred for ending in out_endings]
    if out_endings and content and not content.endswith("\n"):
        out_endings[-1] = ""  # the file ended without a newline: it still does
    return "".join(text + ending for text, ending in zip(out_lines, out_endings, strict=True))
