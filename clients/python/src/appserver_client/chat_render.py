"""Colour and Markdown for the chat, with rich.

Only on a terminal with colour (:func:`appserver_client.chat_exact.wants_colour`):
otherwise the chat prints plain text and never calls these. What the model
wrote reaches the terminal only through rich, after its control characters
(ESC and the other C0/C1 codes but newline and tab) are shown as ``⟨U+XXXX⟩``,
so a reply cannot move the cursor or recolour the screen.
"""

from __future__ import annotations

import io
import re
import shutil
import unicodedata

from rich.console import Console
from rich.markdown import Markdown
from rich.style import Style

#: The style of each kind of line the chat prints (rich style names).
STYLES = {
    "tool": Style.parse("cyan"),
    "command": Style.parse("bold cyan"),
    "result": Style.parse("green"),
    "error": Style.parse("bold red"),
    "approval": Style.parse("yellow"),
    "thinking": Style.parse("dim italic"),
    "note": Style.parse("dim"),
}
_TRAILING_SPACES = re.compile(r" +\n")


def width() -> int:
    """The terminal's width in columns (80 when it cannot be told)."""
    return shutil.get_terminal_size((80, 24)).columns


def safe(text: str) -> str:
    """``text`` with every control character but newline and tab as ``⟨U+XXXX⟩``."""
    return "".join(
        f"⟨U+{ord(character):04X}⟩"
        if character not in "\n\t" and unicodedata.category(character) == "Cc"
        else character
        for character in text
    )


def styled(text: str, kind: str) -> str:
    """``text`` (already safe to print) in the colour of ``kind`` lines."""
    style = STYLES.get(kind)
    return style.render(text) if style is not None else text


def markdown(text: str, columns: int | None = None) -> str:
    """``text`` rendered as Markdown for a terminal of ``columns`` columns: code
    blocks highlighted, lists with bullets, emphasis in bold and italics. Ends
    with a newline; lines carry no trailing padding and leave the last column
    free, so no line runs into the next one as a wrap would."""
    buffer = io.StringIO()
    console = Console(
        file=buffer,
        force_terminal=True,
        width=(columns or width()) - 1,
        highlight=False,
        emoji=False,
    )
    console.print(Markdown(safe(text), code_theme="monokai"))
    return _TRAILING_SPACES.sub("\n", buffer.getvalue())
