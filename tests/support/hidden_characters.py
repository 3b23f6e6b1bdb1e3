"""The invisible and control characters an approval must reveal (issue 24), for the
web dialog's and the terminal chat's tests."""

from __future__ import annotations

# Found passing unseen by the web dialog.
LISTED = [
    "\u00ad",
    "\u034f",
    "\u115f",
    "\u1160",
    *map(chr, range(0x180B, 0x1810)),
    "\u2028",
    "\u2029",
    "\ufe0f",
    *map(chr, range(0xE0000, 0xE0080)),
    "\u17b4",
    "\ufff9",
    "\ufffa",
    "\ufffb",
    "\x1b",
    "\x08",
    "\r",
]
# Other controls, bidi controls and zero-width characters, revealed too.
OTHERS = [
    "\x01",
    "\x7f",
    "\x85",
    "\x9b",
    *map(chr, range(0x202A, 0x202F)),
    *map(chr, range(0x2066, 0x206A)),
    *map(chr, range(0x200B, 0x2010)),
    *map(chr, range(0x2060, 0x2065)),
    "\ufeff",
]


def badge(character: str) -> str:
    """How a revealed character is written: ``⟨U+00AD⟩``."""
    return f"⟨U+{ord(character):04X}⟩"
