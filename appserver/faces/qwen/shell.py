"""Shell commands as the ``qwen`` face's command rules read them.

A command rule (``Bash(git *)``) names one program run with its arguments, so a
command is first split the way ``bash -c`` would run it: into simple commands at
``;``, ``&``, ``&&``, ``||``, ``|``, ``|&`` and newlines, with quotes, escapes,
comments and redirections understood. What this splitter does not follow —
command and process substitution (``$(...)``, backticks, ``<(...)``,
``>(...)``), here-documents, parentheses (subshells, functions, ``case``), the
``function`` keyword, unterminated quotes, a program name that is expanded
(``$CMD``, globs, braces) — makes the command *unreliable*.

* :func:`allowed_by`: an allow rule matches only a reliable command that is a
  single simple command, without redirections, background ``&``, newlines or
  keywords; the pattern is matched against its text.
* :func:`excluded_by`: an exclude rule matches when ANY simple command matches,
  also through ``VAR=value`` prefixes, a path on the program (``/bin/rm``),
  wrappers (``sudo``, ``env``, ``timeout``, ``xargs``, ``find -exec``...) and
  the strings ``sh -c``/``bash -c``/``eval``/``watch``/``su -c``/``trap``/
  ``script -c`` run; a command that
  cannot be read reliably is *unknown* (``None``), and the caller fails closed.

Patterns are ``fnmatch`` patterns; as in Claude Code, a trailing `` *`` also
matches the bare command (``git *`` matches ``git``), and ``git:*`` is read as
``git *``.
"""

from __future__ import annotations

import fnmatch
import posixpath
import re
from dataclasses import dataclass, field

# Keywords that may open a simple command's words; what follows is the command.
_PREFIX_KEYWORDS = frozenset(
    {"!", "{", "}", "if", "then", "else", "elif", "fi", "do", "done", "while", "until", "time"}
)
# Keywords whose words are not commands at all.
_LIST_KEYWORDS = frozenset({"for", "select", "in", "esac"})
# Keywords this splitter does not follow (a definition runs later, under another name).
_OPAQUE_KEYWORDS = frozenset({"function", "case", "coproc"})
# Programs that run another program named by a later word (options vary: every
# later word is tried as the program).
_WRAPPERS = frozenset(
    {
        "builtin",
        "busybox",
        "chrt",
        "command",
        "doas",
        "env",
        "exec",
        "flock",
        "ionice",
        "nice",
        "nohup",
        "setsid",
        "stdbuf",
        "sudo",
        "taskset",
        "time",
        "timeout",
        "unbuffer",
        "xargs",
    }
)
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash"})
_SCRIPT_RUNNERS = frozenset({"eval", "watch", "su"})  # run their arguments as shell text
# ``trap ACTION SIGNAL...``: the action runs later as shell text; every argument is
# read as one (a signal name read as a command matches nothing).
_TRAP = frozenset({"trap"})
# util-linux ``script``: ``-c``/``--command`` runs shell text; without it, an
# interactive shell reads what is typed (not visible here).
_SCRIPT = frozenset({"script"})
_FIND = frozenset({"find"})
_FIND_EXEC = frozenset({"-exec", "-execdir", "-ok", "-okdir"})
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\[[^\]]*\])?\+?=")
_MAX_DEPTH = 6  # nested sh -c strings followed before giving up (unknown)


@dataclass(frozen=True)
class Word:
    """One shell word after quote removal."""

    text: str
    quoted: bool  # some part was quoted or escaped
    dynamic: bool  # an unquoted expansion: $VAR, ${...}, $'...', a glob or a brace


@dataclass
class SimpleCommand:
    """One simple command: its text as written and its words (redirections dropped)."""

    text: str
    words: list[Word] = field(default_factory=list)
    redirected: bool = False


@dataclass
class Parsed:
    """A command line split into simple commands (see the module docstring)."""

    commands: list[SimpleCommand] = field(default_factory=list)
    reliable: bool = True
    compound: bool = False  # a separator, a background ``&`` or a newline


class _Splitter:
    """One left-to-right pass over the command (the shell's own tokenizing rules)."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.parsed = Parsed()
        self.start = 0  # where the current simple command's text starts
        self.words: list[Word] = []
        self.chars: list[str] = []
        self.in_word = False
        self.quoted = False
        self.dynamic = False
        self.redirected = False
        self.target_pending = False  # the next word is a redirection's target

    def add(self, text: str, *, quoted: bool = False, dynamic: bool = False) -> None:
        self.chars.append(text)
        self.in_word = True
        self.quoted |= quoted
        self.dynamic |= dynamic

    def end_word(self) -> None:
        if self.in_word:
            if self.target_pending:
                self.target_pending = False
            else:
                self.words.append(Word("".join(self.chars), self.quoted, self.dynamic))
        self.chars, self.in_word, self.quoted, self.dynamic = [], False, False, False

    def end_command(self, end: int) -> None:
        self.end_word()
        if self.target_pending:  # `echo >;` is a syntax error: nothing is known
            self.parsed.reliable = False
        text = self.source[self.start : end].strip()
        if text or self.words:
            self.parsed.commands.append(SimpleCommand(text, self.words, self.redirected))
        self.words, self.redirected = [], False

    def separator(self, index: int, width: int) -> int:
        self.end_command(index)
        self.parsed.compound = True
        self.start = index + width
        return index + width

    def redirection(self, index: int) -> int:
        source = self.source
        if source.startswith("<<", index) or source[index + 1 : index + 2] == "(":
            self.parsed.reliable = False  # here-document / process substitution
            return len(source)
        if self.in_word and not self.quoted and "".join(self.chars).isdigit():
            self.chars, self.in_word = [], False  # `2>`: the descriptor, not a word
        self.end_word()
        width = 1
        for operator in ("&>>", "&>", ">>", ">&", ">|", "<&", "<>"):
            if source.startswith(operator, index):
                width = len(operator)
                break
        self.redirected = True
        self.target_pending = True
        return index + width

    def single_quoted(self, index: int, *, ansi: bool) -> int:
        """``'...'`` (or ``$'...'``, where a backslash escapes the quote)."""
        source, position = self.source, index
        chars: list[str] = []
        while position < len(source):
            char = source[position]
            if char == "\\" and ansi and position + 1 < len(source):
                chars.append(source[position : position + 2])
                position += 2
                continue
            if char == "'":
                self.add("".join(chars), quoted=True, dynamic=ansi)
                return position + 1
            chars.append(char)
            position += 1
        self.parsed.reliable = False
        return len(source)

    def double_quoted(self, index: int, *, dynamic: bool) -> int:
        source, position = self.source, index
        chars: list[str] = []
        while position < len(source):
            char = source[position]
            following = source[position + 1 : position + 2]
            if char == "\\" and following and following in '$`"\\\n':
                chars.append("" if following == "\n" else following)
                position += 2
                continue
            if char == "`" or (char == "$" and following == "("):
                self.parsed.reliable = False
                return len(source)
            if char == '"':
                self.add("".join(chars), quoted=True, dynamic=dynamic)
                return position + 1
            dynamic |= char == "$"
            chars.append(char)
            position += 1
        self.parsed.reliable = False
        return len(source)

    def run(self) -> Parsed:
        source, index = self.source, 0
        while index < len(source) and self.parsed.reliable:
            char = source[index]
            following = source[index + 1 : index + 2]
            if char in " \t":
                self.end_word()
                index += 1
            elif char == "\\":
                if following == "\n":
                    pass  # a line continuation joins the lines
                elif following:
                    self.add(following, quoted=True)
                else:
                    self.add("\\")
                index += 2
            elif char == "'":
                index = self.single_quoted(index + 1, ansi=False)
            elif char == '"':
                index = self.double_quoted(index + 1, dynamic=False)
            elif char == "`" or (char == "$" and following == "("):
                self.parsed.reliable = False
            elif char == "$" and following == "'":
                index = self.single_quoted(index + 2, ansi=True)
            elif char == "$" and following == '"':
                index = self.double_quoted(index + 2, dynamic=True)
            elif char == "$":
                self.add("$", dynamic=True)
                index += 1
            elif char == "#" and not self.in_word:
                newline = source.find("\n", index)
                index = len(source) if newline < 0 else newline
            elif char in "<>" or (char == "&" and following == ">"):
                index = self.redirection(index)
            elif char in ";&|":
                doubled = {";": ";&", "&": "&", "|": "|&"}[char]  # ;; ;& && || |&
                index = self.separator(index, 2 if following and following in doubled else 1)
            elif char in "\n\r":
                index = self.separator(index, 1)
            elif char in "()":
                self.parsed.reliable = False
            else:
                self.add(char, dynamic=char in "*?[{")
                index += 1
        self.end_command(len(source))
        return self.parsed


def split_command(command: str) -> Parsed:
    """``command`` split into simple commands (see the module docstring)."""
    return _Splitter(command).run()


def pattern_matches(text: str, pattern: str) -> bool:
    """``fnmatch`` with Claude Code's two additions (``git *`` matches ``git``;
    ``git:*`` is ``git *``)."""
    if pattern.endswith(":*"):
        pattern = pattern[:-2] + " *"
    if pattern.endswith(" *") and fnmatch.fnmatchcase(text, pattern[:-2]):
        return True
    return fnmatch.fnmatchcase(text, pattern)


def _is_keyword(word: Word, keywords: frozenset[str]) -> bool:
    return not word.quoted and word.text in keywords


def allowed_by(command: str, patterns: list[str]) -> bool:
    """Whether an allow pattern covers ``command``: one reliable simple command
    with no redirection, no background ``&``, no newline and no keyword."""
    if not patterns or "\n" in command or "\r" in command:
        return False
    parsed = split_command(command)
    if not parsed.reliable or parsed.compound or len(parsed.commands) != 1:
        return False
    simple = parsed.commands[0]
    if simple.redirected or not simple.words:
        return False
    first = simple.words[0]
    keywords = _PREFIX_KEYWORDS | _LIST_KEYWORDS | _OPAQUE_KEYWORDS
    if first.dynamic or _is_keyword(first, keywords):
        return False
    return any(pattern_matches(simple.text, pattern) for pattern in patterns)


def _program_views(words: list[Word], depth: int) -> tuple[list[str], bool]:
    """The texts an exclude pattern is tried on for a command starting at
    ``words[0]`` (its program), and whether all of it could be read."""
    index = 0
    while index < len(words) and _ASSIGNMENT.match(words[index].text):
        index += 1
    words = words[index:]
    if not words:
        return [], True
    program = words[0]
    if program.dynamic:
        return [], False
    name = posixpath.basename(program.text)
    rest = [word.text for word in words[1:]]
    views, known = [" ".join([name, *rest])], True
    later: list[int] = []
    if name in _WRAPPERS:
        later = list(range(1, len(words)))
    elif name in _FIND:
        later = [i + 1 for i, word in enumerate(words) if word.text in _FIND_EXEC]
    for position in later:
        nested, nested_known = _program_views(words[position:], depth)
        views += nested
        known &= nested_known
    scripts: list[str] = []
    if name in _SCRIPT_RUNNERS:
        scripts = [" ".join(rest), *rest]
    elif name in _TRAP:
        scripts = rest
    elif name in _SCRIPT:
        scripts = _script_commands(rest)
        known &= bool(scripts)
    elif name in _SHELLS:
        options = [word for word in rest if word.startswith("-") and not word.startswith("--")]
        if any("c" in option for option in options):
            scripts = rest
        elif len(options) == len(rest) or any("s" in option for option in options):
            known = False  # reads its program from stdin: not visible here
    if scripts and any(word.dynamic for word in words[1:]):
        known = False
    for script in scripts:
        nested, nested_known = _views(script, depth + 1)
        views += nested
        known &= nested_known
    return views, known


def _script_commands(arguments: list[str]) -> list[str]:
    """What ``script`` runs as shell text: with ``-c``/``--command`` (any
    abbreviation, attached or not) every later word, read generously, as the
    exclusion side must; empty without one."""
    for index, argument in enumerate(arguments):
        if argument == "--":
            break
        name, equals, value = argument.partition("=")
        if argument.startswith("--") and len(name) > 2 and "--command".startswith(name):
            return ([value] if equals else []) + arguments[index + 1 :]
        if argument.startswith("-") and not argument.startswith("--") and "c" in argument:
            attached = argument[argument.index("c") + 1 :]
            return ([attached] if attached else []) + arguments[index + 1 :]
    return []


def _views(command: str, depth: int) -> tuple[list[str], bool]:
    """Every text an exclude pattern is tried on, and whether all of
    ``command`` could be read."""
    if depth > _MAX_DEPTH:
        return [], False
    parsed = split_command(command)
    views: list[str] = []
    known = parsed.reliable
    for simple in parsed.commands:
        views.append(simple.text)
        words = simple.words
        while words and _is_keyword(words[0], _PREFIX_KEYWORDS):
            timed = words[0].text == "time"
            words = words[1:]
            if timed and words and words[0].text == "-p":
                words = words[1:]
        if words and _is_keyword(words[0], _OPAQUE_KEYWORDS):
            known = False
            continue
        if words and _is_keyword(words[0], _LIST_KEYWORDS):
            continue
        program, program_known = _program_views(words, depth)
        views += program
        known &= program_known
    return views, known


def excluded_by(command: str, patterns: list[str]) -> bool | None:
    """``True`` when an exclude pattern matches any simple command of
    ``command``; ``None`` when none matches but some part cannot be read
    reliably; ``False`` otherwise."""
    if not patterns:
        return False
    views, known = _views(command, 0)
    if any(pattern_matches(view, pattern) for view in views for pattern in patterns):
        return True
    return False if known else None
