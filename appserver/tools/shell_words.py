"""Is a ``bash -c`` command line one simple command, and what are its words?

``shlex`` splits words the way bash does for quoting, but it cannot see
shell syntax: ``ls; rm x`` splits into harmless-looking words. So the line
is scanned once first, tracking quotes, and any character that bash would
treat as syntax or expansion outside single quotes (a pipe, a list, a
redirection, a substitution, a variable, a glob, a brace, a ``~`` that bash
expands (leading, or after ``=`` or ``:``), a leading ``#``, a newline) ends
the matter: :class:`NotSimple` says which, in words
a person reads in the approval prompt. Only a line free of all of them is
split into words.
"""

from __future__ import annotations

import shlex


class NotSimple(Exception):
    """The command line is not one simple command; the message says why."""


# Unquoted characters that make a line more than one plain command, and why.
_SYNTAX = {
    ";": "runs several commands (`;`)",
    "<": "redirects input (`<`)",
    ">": "redirects output (`>`)",
    "(": "runs a subshell (`(`)",
    ")": "runs a subshell (`)`)",
    "`": "substitutes a command's output (backticks)",
    "*": "expands a glob pattern (`*`)",
    "?": "expands a glob pattern (`?`)",
    "[": "expands a glob pattern (`[`)",
    "{": "expands braces (`{`)",
}
_WORD_START = {
    "~": "expands `~` (a home directory)",
    "#": "has a comment (`#`)",
}


def _dollar(command: str, index: int) -> str:
    follower = command[index + 1 : index + 2]
    if follower == "(":
        return "substitutes a command's output (`$(...)`)"
    return "expands a variable (`$`)"


def _operator(command: str, index: int) -> str:
    char, follower = command[index], command[index + 1 : index + 2]
    if char == "|":
        return (
            "runs another command if this one fails (`||`)"
            if follower == "|"
            else "pipes into another command (`|`)"
        )
    if follower == "&":
        return "runs several commands (`&&`)"
    return "runs in the background (`&`)" if follower != ">" else "redirects output (`&>`)"


def simple_words(command: str) -> list[str]:
    """The words of ``command`` if it is one simple command without
    expansions; raises :class:`NotSimple` otherwise."""
    if "\n" in command or "\r" in command:
        raise NotSimple("spans several lines")
    quote = ""  # the open quote character, if any
    word_start = True
    previous = ""  # the character before this one in the word, quoted or not
    index = 0
    while index < len(command):
        char = command[index]
        if quote == "'":
            quote = "" if char == "'" else quote
        elif quote == '"':
            if char == "\\":
                index += 1  # the escaped character is literal
            elif char == '"':
                quote = ""
            elif char == "$":
                raise NotSimple(_dollar(command, index))
            elif char == "`":
                raise NotSimple(_SYNTAX["`"])
        elif char in " \t":
            word_start = True
            previous = ""
            index += 1
            continue
        elif char == "\\":
            index += 1
        elif char in "'\"":
            quote = char
        elif char in "|&":
            raise NotSimple(_operator(command, index))
        elif char == "$":
            raise NotSimple(_dollar(command, index))
        elif char == "{" and word_start and command[index + 1 : index + 3] in ("}", "} ", "}\t"):
            index += 1  # a `{}` word expands to itself (find's placeholder); `''{},a}` does not
        elif char in _SYNTAX:
            raise NotSimple(_SYNTAX[char])
        elif word_start and char in _WORD_START:
            raise NotSimple(_WORD_START[char])
        elif char == "~" and previous in ("=", ":"):
            # bash expands `a=~/x` and `a:~/x` in a word that looks like an assignment
            raise NotSimple(_WORD_START["~"])
        word_start = False
        previous = command[index]
        index += 1
    try:
        words = shlex.split(command, posix=True)
    except ValueError:
        raise NotSimple("has unbalanced quotes") from None
    if not words:
        raise NotSimple("is empty")
    return words
