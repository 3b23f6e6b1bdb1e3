"""Whether a repository's own settings let a read-only git command run a program
(``tools.safe_commands`` asks before such a command when they may).

git runs programs named in a repository's config even to read: ``git status``
starts ``core.fsmonitor``, ``git diff`` a ``diff.<driver>.textconv`` or a
``filter.<driver>.clean`` for the files ``.gitattributes`` gives that driver,
``git log`` a ``gpg.program``; and ``git status`` runs the repository's
``post-index-change`` hook when it refreshes the index. A workspace the server
trusts may still hold a repository unpacked from elsewhere, ``.git/`` and all,
so before a git command runs unasked:

* every setting of the repository's own config (``.git/config``, its worktree
  config and what they include: git's ``local`` and ``worktree`` scopes) must be
  one known to name no program (:data:`_SAFE`); the user's own (``system``,
  ``global``) are theirs and not judged;
* the ``post-index-change`` hook must not be there.

Anything else, or git failing to answer, asks.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def _names(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Settings of a repository's own config that name no program and point nowhere
# outside the repository: section -> variables ("*": all of them). A key with a
# subsection (``remote.origin.url``) is looked up as ``remote.*.url``.
_SAFE: dict[str, frozenset[str]] = {
    "core": _names(
        "repositoryformatversion filemode bare logallrefupdates ignorecase precomposeunicode "
        "symlinks autocrlf eol safecrlf quotepath checkstat trustctime untrackedcache "
        "splitindex abbrev whitespace sparsecheckout sparsecheckoutcone preloadindex "
        "commentchar compression loosecompression multipackindex commitgraph fscache "
        "longpaths hidedotfiles protecthfs protectntfs"
    ),
    "extensions": frozenset({"*"}),
    "remote.*": _names(
        "url pushurl fetch push mirror tagopt prune prunetags promisor partialclonefilter "
        "skipdefaultupdate skipfetchall"
    ),
    "branch.*": _names("remote merge rebase pushremote description"),
    "submodule.*": _names("url active branch ignore shallow fetchrecursesubmodules"),
    "user": _names("name email signingkey useconfigonly"),
    "init": frozenset({"defaultbranch"}),
    "pull": _names("rebase ff"),
    "push": _names("default autosetupremote followtags"),
    "fetch": _names("prune prunetags recursesubmodules writecommitgraph"),
    "color": frozenset({"*"}),
    "color.*": frozenset({"*"}),
    "advice": frozenset({"*"}),
    "status": frozenset({"*"}),
    "diff": _names(
        "renames renamelimit algorithm noprefix mnemonicprefix context interhunkcontext "
        "indentheuristic colormoved colormovedws submodule ignoresubmodules statgraphwidth "
        "relative dirstat suppressblankempty wordregex"
    ),
    "log": _names("abbrevcommit date decorate follow graphcolors showroot mailmap"),
    "merge": _names("conflictstyle ff log renames renamelimit"),
    "rerere": _names("enabled autoupdate"),
    "index": _names("version skiphash sparse"),
    "gc": frozenset({"*"}),
    "pack": frozenset({"*"}),
    "feature": frozenset({"*"}),
    "lfs": frozenset({"repositoryformatversion"}),
}
_TIMEOUT_S = 5.0


def _is_safe(key: str) -> bool:
    """Whether ``key`` (as git prints it: section and variable lower case)
    is on :data:`_SAFE`."""
    section, _, rest = key.partition(".")
    _subsection, dot, variable = rest.rpartition(".")
    allowed = _SAFE.get(f"{section}.*" if dot else section)
    return allowed is not None and ("*" in allowed or variable.lower() in allowed)


def _git(cwd: Path, *args: str) -> str | None:
    """git's output for ``args`` run in ``cwd``, or ``None`` when it failed."""
    try:
        done = subprocess.run(
            ["git", *args],
            cwd=cwd,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def repository_asks(cwd: Path) -> str | None:
    """Why a read-only git command run in ``cwd`` asks because of the
    repository's own settings or hooks, or ``None`` when they name no program.
    Outside any repository git reads no repository config: ``None``."""
    hook = _git(cwd, "rev-parse", "--git-path", "hooks/post-index-change")
    if hook is None:
        return None  # not in a repository (git diff then compares files)
    if os.access(cwd / hook.strip(), os.X_OK):
        return "the repository has a post-index-change hook, which git status runs"
    listed = _git(cwd, "config", "--list", "--show-scope", "--includes", "-z")
    if listed is None:
        return "git could not list the repository's config"
    fields = listed.split("\0")
    for scope, entry in zip(fields[::2], fields[1::2], strict=False):
        key = entry.partition("\n")[0]
        if scope in ("local", "worktree") and not _is_safe(key):
            return f"the repository's own config sets {key}, which may make git run a program"
    return None
