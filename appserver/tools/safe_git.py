"""Whether a repository's own settings let a read-only git command run a program
(``tools.safe_commands`` asks before such a command when they may).

git runs programs named in a repository's config even to read: ``git status``
starts ``core.fsmonitor``, ``git diff`` a ``diff.<driver>.textconv`` or a
``filter.<driver>.clean`` for the files ``.gitattributes`` gives that driver,
``git log`` a ``gpg.program``; and ``git status`` runs the repository's
``post-index-change`` hook when it refreshes the index. A workspace the server
trusts may still hold a repository unpacked from elsewhere, ``.git/`` and all,
so before a git command runs unasked:

* the repository's work tree, git directory and object store lie in the
  workspace (a ``.git`` file, a workspace inside a bigger repository or
  ``objects/info/alternates`` would let git read outside it);
* it has no submodules (git reads their own config and runs their hooks);
* every setting of the repository's own config (``.git/config``, its worktree
  config and what they include: git's ``local`` and ``worktree`` scopes) must be
  one known to name no program (:data:`_SAFE`); the user's own (``system``,
  ``global``) are theirs and not judged;
* the hooks a read runs (``post-index-change``, ``pre-auto-gc``) are not there.

Outside a repository only ``git diff`` runs (comparing files, walking
directories): it asks. Anything else, or git failing to answer, asks.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from appserver.tools.sandbox import in_workspace


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
    # Not partialclone (nor remote.*.promisor): a read of a missing object would
    # fetch, and a fetch runs `git maintenance --auto` and its hook.
    "extensions": _names("objectformat worktreeconfig"),
    "remote.*": _names("url pushurl fetch push mirror tagopt prune prunetags skipdefaultupdate"),
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
    "pack": frozenset({"*"}),
    "feature": frozenset({"*"}),
    "lfs": frozenset({"repositoryformatversion"}),
}
_TIMEOUT_S = 5.0
# Hooks a read can run: `git status` refreshes the index (post-index-change); an
# automatic gc runs pre-auto-gc.
_READ_HOOKS = ("post-index-change", "pre-auto-gc")


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


def repository_asks(cwd: Path, root: Path, subcommand: str) -> str | None:
    """Why the read-only ``git subcommand`` run in ``cwd`` asks because of the
    repository: where it is, its own settings, hooks and submodules; or
    ``None`` when it stays in the workspace ``root`` and names no program."""
    found = _git(
        cwd,
        "rev-parse",
        "--show-toplevel",
        "--absolute-git-dir",
        "--git-common-dir",
        "--git-path",
        "hooks",
    )
    if found is None:
        if subcommand == "diff":
            # Outside a repository `git diff` compares files and walks directories
            # (the workspace root's .craft/ among them).
            return "git diff outside a repository compares files and directories"
        return None  # git refuses the others outside a repository
    lines = found.splitlines()
    if len(lines) != 4:
        return "git could not say where the repository is"
    top, git_dir, common_dir, hooks = (Path(os.path.realpath(cwd / line)) for line in lines)
    for place, what in ((top, "work tree"), (git_dir, "git directory"), (common_dir, "objects")):
        if not in_workspace(root, place):
            return f"the repository's {what} is outside the workspace ({place})"
    if (common_dir / "objects" / "info" / "alternates").exists():
        return "the repository borrows objects from elsewhere (objects/info/alternates)"
    if (top / ".gitmodules").exists() or (common_dir / "modules").exists():
        return "the repository has submodules, whose own config and hooks git reads"
    for hook in _READ_HOOKS:
        if os.access(hooks / hook, os.X_OK):
            return f"the repository has a {hook} hook, which a read may run"
    listed = _git(cwd, "config", "--list", "--show-scope", "--includes", "-z")
    if listed is None:
        return "git could not list the repository's config"
    fields = listed.split("\0")
    for scope, entry in zip(fields[::2], fields[1::2], strict=False):
        key = entry.partition("\n")[0]
        if scope in ("local", "worktree") and not _is_safe(key):
            return f"the repository's own config sets {key}, which may make git run a program"
    return None
