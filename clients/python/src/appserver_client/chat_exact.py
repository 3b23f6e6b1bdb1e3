"""Text the chat's approval prompt shows exactly as it will run or be written.

What the user approves must read as what happens, and nothing in it may act on
the terminal: every character that prints as nothing, moves the text or is a
terminal control (ESC, BS, CR, the other C0 and C1 controls, bidi controls,
zero-width and other default-ignorable characters, the line and paragraph
separators, tags, lone surrogates) is written as ``⟨U+XXXX⟩`` instead. A
command of several lines is shown one numbered line each; a file change as its
unified diff. With ``colour`` the badges are in reverse video and the diff's
added and removed lines green and red (ANSI SGR codes the chat writes itself:
nothing from the server reaches the terminal raw).
"""

from __future__ import annotations

import os
import unicodedata
from typing import TextIO

# Unicode's default-ignorable code points (DerivedCoreProperties) that are not
# already control (Cc) or format (Cf) characters: they print as nothing.
_IGNORABLE = (
    (0x034F, 0x034F),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x2060, 0x206F),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFFA0, 0xFFA0),
    (0xFFF0, 0xFFF8),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
)
_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})

_RESET = "\x1b[0m"
_BADGE = "\x1b[7m"  # reverse video
_DIM = "\x1b[2m"
_STYLES = {"add": "\x1b[32m", "del": "\x1b[31m", "hunk": "\x1b[36m", "file": "\x1b[1m"}


def wants_colour(out: TextIO) -> bool:
    """Colour only on a terminal, not with ``NO_COLOR`` or ``TERM=dumb``."""
    try:
        tty = out.isatty()
    except (AttributeError, ValueError):
        return False
    return tty and "NO_COLOR" not in os.environ and os.environ.get("TERM", "") != "dumb"


def is_hidden(character: str) -> bool:
    """Whether ``character`` is shown as a badge (tab and newline are not: see callers)."""
    if unicodedata.category(character) in _CATEGORIES:
        return True
    point = ord(character)
    return any(low <= point <= high for low, high in _IGNORABLE)


def badge(character: str) -> str:
    """``⟨U+00AD⟩`` for one character."""
    return f"⟨U+{ord(character):04X}⟩"


def reveal(text: str, *, colour: bool = False, after: str = "") -> str:
    """``text`` on one line: every hidden character, newlines too, as a badge
    (tabs stay). ``after``: the SGR code to go back to after a badge."""
    parts: list[str] = []
    for character in text:
        if character != "\t" and is_hidden(character):
            shown = badge(character)
            parts.append(f"{_BADGE}{shown}{_RESET}{after}" if colour else shown)
        else:
            parts.append(character)
    return "".join(parts)


def command_lines(text: str, *, colour: bool = False) -> list[str]:
    """A text of several lines, one numbered line each (``  1 | echo a``), each
    line revealed; a trailing empty line is shown too."""
    lines = text.split("\n")
    width = len(str(len(lines)))
    shown = []
    for number, line in enumerate(lines, 1):
        gutter = f"  {number:>{width}} | "
        if colour:
            gutter = f"{_DIM}{gutter}{_RESET}"
        shown.append(gutter + reveal(line, colour=colour))
    return shown


def diff_lines(diff: str, *, colour: bool = False, indent: str = "    ") -> list[str]:
    """A unified diff, one line each, revealed, added lines green and removed
    red when ``colour``."""
    shown = []
    for line in diff.removesuffix("\n").split("\n"):
        style = _STYLES.get(_diff_kind(line), "") if colour else ""
        text = reveal(line, colour=colour, after=style)
        shown.append(f"{indent}{style}{text}{_RESET}" if style else f"{indent}{text}")
    return shown


def _diff_kind(line: str) -> str:
    if line.startswith(("+++ ", "--- ")):
        return "file"
    if line.startswith(("@@", "\\")):  # a hunk, or "\ No newline at end of file"
        return "hunk"
    if line.startswith("+"):
        return "add"
    if line.startswith("-"):
        return "del"
    return "context"
