"""Which shell commands only read, and so may run without asking.

One table, :data:`RULES`, names every command known to only read (a start
from Codex's ``is_known_safe_command``) with the flags it may take. A
command line runs unasked only when all of this holds:

* it is one simple command (``tools.shell_words``: no ``;``, ``&&``, ``|``,
  ``&``, redirection, substitution, variable, glob, newline);
* its first word is a bare name in :data:`RULES`, and every flag is one the
  rule knows (an unknown flag asks: it might write or run something);
* no flag the rule denies is there (``find -delete``, ``sort -o``,
  ``rg --pre``, anything that follows symlinks out of a tree);
* every word that may name a file (the positional words, and the values of
  flags that name a file) resolves inside the workspace, from the working
  directory, symlinks followed (``tools.sandbox.in_workspace``);
* for ``git``: the workspace is trusted (``storage/trust.py``), and the
  repository's own config names no program and it has no hook that a read
  runs (``tools.safe_git``): git runs programs named there (``core.fsmonitor``,
  diff drivers) even to read.

:func:`classify` answers with ``None`` (read-only) or the reason it asks.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from appserver.tools.base import ToolContext
from appserver.tools.safe_walks import WALKS, Call, Parsed
from appserver.tools.sandbox import in_workspace
from appserver.tools.shell_words import NotSimple, simple_words

_FOLLOWS = "follows symlinks, which may lead out of the workspace"


@dataclass(frozen=True)
class Rule:
    """The flags one read-only command may take.

    ``short``: single-letter flags without a value (they combine: ``-la``).
    ``short_values``: letters taking a value (attached ``-n5`` or the next
    word). ``short_attached``: letters whose value, if any, is attached only
    (``git status -uno``). ``long``: ``--flags`` without a value (``--x=v``
    is accepted for them too: optional values). ``long_values``: ``--flags``
    taking a value (``--x=v`` or the next word). ``files``: flags whose value
    names a file to read (checked like a positional path). ``denied``: flag
    -> why it asks. ``numbers``: ``-5``/``+5`` count as flags (head, tail).
    ``paths``: positional words name files (checked against the workspace).
    ``max_positional``: more positional words than this ask (uniq's second
    is a file it writes).
    """

    short: str = ""
    short_values: str = ""
    short_attached: str = ""
    long: frozenset[str] = frozenset()
    long_values: frozenset[str] = frozenset()
    files: frozenset[str] = frozenset()
    denied: Mapping[str, str] = field(default_factory=dict)
    numbers: bool = False
    paths: bool = True
    max_positional: int | None = None


def _set(text: str) -> frozenset[str]:
    return frozenset(f"--{name}" for name in text.split())


_GREP_LONG = _set(
    "extended-regexp fixed-strings basic-regexp perl-regexp ignore-case no-ignore-case "
    "invert-match word-regexp line-regexp count files-with-matches files-without-match "
    "only-matching quiet silent no-messages byte-offset with-filename no-filename line-number "
    "initial-tab null null-data text recursive color colour"
)
_GREP_VALUES = _set(
    "max-count after-context before-context context regexp file include exclude exclude-dir "
    "exclude-from label binary-files directories"
)
_RG_LONG = _set(
    "hidden no-ignore no-ignore-vcs no-ignore-parent no-ignore-dot no-ignore-global "
    "no-ignore-files type-list files files-with-matches files-without-match count count-matches "
    "ignore-case smart-case case-sensitive word-regexp line-regexp fixed-strings invert-match "
    "line-number no-line-number with-filename no-filename heading no-heading column "
    "no-column byte-offset null multiline multiline-dotall only-matching json vimgrep stats "
    "trim quiet text pcre2 no-messages max-columns-preview passthru unrestricted "
    "glob-case-insensitive one-file-system crlf no-unicode sort-files pretty no-config"
)
_RG_VALUES = _set(
    "glob iglob type type-not color colors context after-context before-context max-count "
    "max-depth max-filesize replace sort sortr regexp file encoding threads engine ignore-file "
    "max-columns context-separator field-match-separator path-separator"
)
_GIT_READ = _set(
    "oneline stat shortstat numstat name-only name-status patch no-patch graph decorate "
    "no-decorate all cached staged no-color color word-diff reverse first-parent follow "
    "abbrev-commit no-merges merges summary raw ignore-space-change ignore-all-space "
    "ignore-blank-lines minimal histogram patience relative-date date-order topo-order "
    "no-renames find-renames check exit-code quiet full-index binary short long branch "
    "porcelain untracked-files ignored show-stash verbose show-current list remotes "
    "no-column abbrev no-abbrev merged no-merged ahead-behind no-ahead-behind"
    # git takes a value for these only when attached (`--pretty=oneline`, `--unified=5`):
    # the next word is not theirs, so it is judged as a word of its own
    " pretty format unified"
)
_GIT_LOG_VALUES = _set(
    "max-count skip since after until before author committer grep date diff-filter"
)
_GIT_DENIED = {
    "--output": "writes: --output",
    "--ext-diff": "runs an external diff program: --ext-diff",
    "--textconv": "runs a conversion program: --textconv",
}
_GIT_LOG = Rule(
    short="pMCwbqsz",
    short_values="nSG",
    short_attached="U",  # `-U5`; a bare -U leaves the next word alone
    long=_GIT_READ,
    long_values=_GIT_LOG_VALUES,
    denied=_GIT_DENIED,
    numbers=True,
)
# git subcommands that only read, by name.
GIT_RULES: dict[str, Rule] = {
    "status": Rule(
        short="sbvz",
        short_attached="u",
        long=_GIT_READ,
        denied=_GIT_DENIED,
    ),
    "log": _GIT_LOG,
    "show": _GIT_LOG,
    "diff": _GIT_LOG,
    "branch": Rule(
        short="arlvi",
        long=_GIT_READ | _set("ignore-case omit-empty"),
        long_values=_set("contains no-contains sort points-at format"),
        denied=_GIT_DENIED,
    ),
}

# Every command known to only read, with the flags it may take.
RULES: dict[str, Rule] = {
    "ls": Rule(
        short="aAbBcCdfFgGhHiklmnNopqQrRsStuUvxXZ1",
        short_values="wIT",
        long=_set(
            "all almost-all human-readable recursive reverse color classify full-time inode "
            "group-directories-first no-group numeric-uid-gid size directory si literal "
            "escape author"
        ),
        long_values=_set("sort time format width time-style indicator-style ignore hide"),
        denied={"-L": _FOLLOWS, "--dereference": _FOLLOWS},
    ),
    "cat": Rule(
        short="AbeEnsTtuv",
        long=_set(
            "number number-nonblank show-all show-ends show-tabs squeeze-blank show-nonprinting"
        ),
    ),
    "head": Rule(
        short="qvz",
        short_values="cn",
        long=_set("quiet silent verbose zero-terminated"),
        long_values=_set("bytes lines"),
        numbers=True,
    ),
    "tail": Rule(
        short="qvz",
        short_values="cn",
        long=_set("quiet silent verbose zero-terminated"),
        long_values=_set("bytes lines"),
        denied={"-f": "never ends: -f", "-F": "never ends: -F", "--follow": "never ends: --follow"},
        numbers=True,
    ),
    "wc": Rule(short="clmwL", long=_set("bytes chars lines words max-line-length")),
    "grep": Rule(
        short="EFGPiyvwxcLloqsbHhnTZzaIrU",
        short_values="ABCefmd",
        long=_GREP_LONG,
        long_values=_GREP_VALUES,
        files=frozenset(("-f", "--file", "--exclude-from")),
        denied={"-R": _FOLLOWS, "--dereference-recursive": _FOLLOWS},
    ),
    "rg": Rule(
        short="abcFhHiIlnNopPqsSuUvVwx0.",
        short_values="ABCeEfgjmMrtT",
        long=_RG_LONG,
        long_values=_RG_VALUES,
        files=frozenset(("-f", "--file", "--ignore-file")),
        denied={
            "--pre": "runs a program on each file: --pre",
            "--pre-glob": "runs a program on each file: --pre-glob",
            "--hostname-bin": "runs a program: --hostname-bin",
            "--search-zip": "runs decompression programs: --search-zip",
            "-z": "runs decompression programs: -z",
            "-L": _FOLLOWS,
            "--follow": _FOLLOWS,
        },
    ),
    "pwd": Rule(short="LP", paths=False),
    "echo": Rule(short="neE", paths=False),
    "true": Rule(paths=False),
    "false": Rule(paths=False),
    "nl": Rule(short="p", short_values="bdfhilnsvw"),
    "cut": Rule(
        short="nsz",
        short_values="bcdf",
        long=_set("complement only-delimited zero-terminated"),
        long_values=_set("bytes characters delimiter fields output-delimiter"),
    ),
    "sort": Rule(
        short="bcCdfghiMnrRsuVz",
        short_values="ktS",
        long=_set(
            "ignore-leading-blanks dictionary-order ignore-case general-numeric-sort "
            "human-numeric-sort month-sort numeric-sort random-sort reverse version-sort check "
            "stable unique zero-terminated"
        ),
        long_values=_set("key field-separator buffer-size"),
        denied={
            "-o": "writes: -o",
            "--output": "writes: --output",
            "-T": "writes temporary files: -T",
            "--temporary-directory": "writes temporary files: --temporary-directory",
            "--compress-program": "runs a program: --compress-program",
        },
    ),
    "uniq": Rule(
        short="cdDiuz",
        short_values="fsw",
        long=_set("count repeated unique ignore-case zero-terminated all-repeated group"),
        long_values=_set("skip-fields skip-chars check-chars"),
        max_positional=1,
    ),
    "tr": Rule(short="cCdst", paths=False),
    "stat": Rule(short="Lft", short_values="c", long=_set("terse dereference file-system")),
    "file": Rule(
        short="bhikLN", long=_set("brief mime mime-type mime-encoding dereference no-dereference")
    ),
    "which": Rule(short="a", paths=False),
    "basename": Rule(short="az", short_values="s", paths=False),
    "dirname": Rule(short="z", paths=False),
    "realpath": Rule(short="emqsLPz", long=_set("canonicalize-existing quiet no-symlinks")),
    "readlink": Rule(short="efmnqsvz", long=_set("canonicalize canonicalize-existing")),
    "tac": Rule(short="br", short_values="s"),
    "rev": Rule(),
    "seq": Rule(short="w", short_values="fs", paths=False),
    "uname": Rule(short="asnrvmpio", paths=False),
    "whoami": Rule(paths=False),
    "id": Rule(short="gGnruz", paths=False),
    "du": Rule(
        short="abchksmx",
        short_values="d",
        long=_set("all apparent-size human-readable summarize total si"),
        long_values=_set("max-depth exclude"),
    ),
    # Not -r: a recursive diff follows symlinks out of the tree (one level:
    # tools.safe_walks checks what a directory argument holds).
    "diff": Rule(
        short="qsuaiwbBEtT",
        short_values="UC",
        long=_set(
            "brief report-identical-files ignore-case ignore-all-space "
            "ignore-space-change ignore-blank-lines new-file text strip-trailing-cr "
            "side-by-side normal color unified"
        ),
        long_values=_set("exclude label"),
    ),
}


# find's expression: primaries and how many words each takes.
def _words(text: str) -> list[str]:
    return text.split()


_FIND_PRIMARIES: dict[str, int] = {
    **dict.fromkeys(
        _words(
            "-name -iname -path -ipath -wholename -iwholename -regex -iregex -type -xtype -size "
            "-mtime -mmin -atime -amin -ctime -cmin -newer -maxdepth -mindepth -user -group -perm "
            "-links -inum -samefile -printf -regextype -uid -gid -used"
        ),
        1,
    ),
    **dict.fromkeys(
        _words(
            "-empty -print -print0 -ls -prune -quit -depth -mount -xdev -readable -writable "
            "-executable -true -false -not -a -and -o -or -nouser -nogroup -daystart -noleaf "
            "-ignore_readdir_race -P ! ( ) ,"
        ),
        0,
    ),
}
_FIND_FILES = frozenset(("-newer", "-samefile"))
_FIND_DENIED = {
    **dict.fromkeys(("-exec", "-execdir", "-ok", "-okdir"), "runs a program: {}"),
    "-delete": "writes: -delete",
    **dict.fromkeys(("-fls", "-fprint", "-fprint0", "-fprintf"), "writes a file: {}"),
    **dict.fromkeys(("-L", "-H", "-follow"), _FOLLOWS),
}
_SED_RANGE = re.compile(r"^\d+(,\d+)?p$")
_NUMBER = re.compile(r"^[-+]\d+$")
# tail's obsolete form `+5f` (or `+f`, `+2lf`): a follow, like -f
_OBSOLETE_FOLLOW = re.compile(r"^[-+]\d*[bcl]?f$")
_UNTRUSTED_GIT = (
    "git runs programs named in the repository's config, and this workspace is not trusted"
)


def _odd_value(flag: str, value: str) -> str | None:
    """Why a next word taken as ``flag``'s value asks: one that looks like a
    flag (a program that does not take it there reads it as one; ``-`` and
    numbers such as ``-5`` pass)."""
    if value.startswith("-") and value != "-" and not _NUMBER.match(value):
        return f"takes {value} as the value of {flag}"
    return None


def _flags(name: str, rule: Rule, words: list[str], call: Call) -> str | None:
    """Walk ``words`` (after the command name) against ``rule``; why it asks, or ``None``."""
    parsed = Parsed()
    positional = parsed.positional
    files: list[str] = []
    index = 0
    only_positional = False
    while index < len(words):
        word = words[index]
        index += 1
        if rule.numbers and "-f" in rule.denied and _OBSOLETE_FOLLOW.match(word):
            return rule.denied["-f"]
        if only_positional or word == "-" or not word.startswith("-"):
            positional.append(word)
            continue
        if word == "--":
            only_positional = True
            continue
        if rule.numbers and _NUMBER.match(word):
            continue
        if word.startswith("--"):
            flag, has_value, _ = word.partition("=")
            if flag in rule.denied:
                return rule.denied[flag]
            if flag in rule.long_values:
                if not has_value:
                    if index >= len(words):
                        return f"{flag} lacks its value"
                    why = _odd_value(flag, words[index])
                    if why:
                        return why
                    index += 1
                value = word.partition("=")[2] if has_value else words[index - 1]
                parsed.flags.append((flag, value))
                if flag in rule.files:
                    files.append(value)
            elif flag not in rule.long:
                return f"unknown flag for {name}: {flag}"
            else:
                parsed.flags.append((flag, None))
            continue
        for offset, letter in enumerate(word[1:], start=1):
            flag = f"-{letter}"
            if flag in rule.denied:
                return rule.denied[flag]
            if letter in rule.short_attached:
                parsed.flags.append((flag, word[offset + 1 :] or None))
                break
            if letter in rule.short_values:
                value = word[offset + 1 :]
                if not value:
                    if index >= len(words):
                        return f"{flag} lacks its value"
                    value = words[index]
                    why = _odd_value(flag, value)
                    if why:
                        return why
                    index += 1
                parsed.flags.append((flag, value))
                if flag in rule.files:
                    files.append(value)
                break
            if letter not in rule.short:
                return f"unknown flag for {name}: {flag}"
            parsed.flags.append((flag, None))
    if rule.max_positional is not None and len(positional) > rule.max_positional:
        return f"{name} writes its extra file argument: {positional[rule.max_positional]}"
    checked = [*positional, *files] if rule.paths else files
    why = next(filter(None, map(call.outside, checked)), None)
    walk = WALKS.get(name)
    return why if why is not None or walk is None else walk(parsed, call)


def _find(words: list[str], call: Call) -> str | None:
    index = 0
    while index < len(words) and words[index] in ("-P",):
        index += 1
    while index < len(words) and not words[index].startswith("-") and words[index] not in "!(":
        reason = call.outside(words[index])
        if reason:
            return reason
        index += 1
    while index < len(words):
        word = words[index]
        index += 1
        if word in _FIND_DENIED:
            return _FIND_DENIED[word].format(word)
        arity = _FIND_PRIMARIES.get(word)
        if arity is None:
            return f"unknown flag for find: {word}"
        if index + arity > len(words):
            return f"{word} lacks its value"
        if word in _FIND_FILES:
            reason = call.outside(words[index])
            if reason:
                return reason
        index += arity
    return None


def _sed(words: list[str], call: Call) -> str | None:
    if len(words) < 2 or words[0] != "-n" or not _SED_RANGE.match(words[1]):
        return "not a known read-only form of sed (only `sed -n Np` or `sed -n M,Np`)"
    flags = [word for word in words[2:] if word.startswith("-") and word != "-"]
    if flags:  # GNU sed reads flags after its files too (`-i` edits in place)
        return f"unknown flag for sed: {flags[0]}"
    return next(filter(None, map(call.outside, words[2:])), None)


def _git(words: list[str], call: Call, trusted: bool) -> str | None:
    if words and words[0].startswith("-") and words[0] != "--no-pager":
        return "git with global options (-c, -C, --git-dir, ...) is asked"
    if words and words[0] == "--no-pager":
        words = words[1:]
    rule = GIT_RULES.get(words[0]) if words else None
    if rule is None:
        return f"not a known read-only git command: git {words[0] if words else ''}".rstrip()
    if not trusted:
        return _UNTRUSTED_GIT
    why = _flags(f"git {words[0]}", rule, words[1:], call)
    listing = {"-l", "--list"} & set(words)
    named = any(not word.startswith("-") for word in words[1:])
    if why is None and words[0] == "branch" and named and not listing:
        return "git branch with a name creates a branch"
    if why is None:
        from appserver.tools.safe_git import repository_asks  # only for a git command

        why = repository_asks(call.cwd, call.root, words[0])
    return why


_SPECIAL: dict[str, Callable[[list[str], Call], str | None]] = {"find": _find, "sed": _sed}


def classify(command: str, cwd: Path, root: Path, *, trusted: bool = True) -> str | None:
    """``None`` when ``command``, run by ``bash -c`` in ``cwd``, only reads
    inside the workspace ``root`` (both absolute, symlink-free); otherwise
    why it must be asked, for the approval prompt. ``trusted``: the
    workspace's own files are trusted (git reads its config)."""
    try:
        words = simple_words(command)
    except NotSimple as exc:
        return str(exc)
    if not in_workspace(root, cwd):
        return "runs outside the workspace"
    name, arguments = words[0], words[1:]
    if name == "git":
        return _git(arguments, Call(cwd, root), trusted)
    special = _SPECIAL.get(name)
    if special is not None:
        return special(arguments, Call(cwd, root))
    rule = RULES.get(name)
    if rule is None:
        return f"not a known read-only command: {name}"
    return _flags(name, rule, arguments, Call(cwd, root))


def why_asked(
    command: str, cwd: Path, root: Path, ctx: ToolContext, *, background: bool
) -> str | None:
    """Why the shell tool asks before running ``command``, or ``None`` when it
    runs unasked: a known read-only command, in the foreground, with
    ``ctx.read_only_unasked`` on. Background terminals are always asked."""
    if background:
        return "a background terminal is always asked"
    why = classify(command, cwd, root, trusted=ctx.workspace_trusted)
    if why is None and not ctx.read_only_unasked:
        return "read-only commands are asked here (autoApproveReadOnlyCommands is off)"
    return why
