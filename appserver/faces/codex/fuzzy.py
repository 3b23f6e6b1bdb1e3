"""``fuzzyFileSearch``: file names under the client's roots that hold the query's
characters in order (case-insensitive), best first.

The walk is the ``find_files`` tool's (``.gitignore``/``.ignore`` respected,
hidden entries, ``.git`` and ``.craft`` skipped, symlinks not followed). Roots
outside the workspace are skipped, not refused: an editor sends every folder it
has open, and the ones inside the workspace still get their answer. A later
search with the same ``cancellationToken`` cancels an earlier one, which then
answers no files (as Codex does while the user types).
"""

from __future__ import annotations

import os
import threading
import weakref
from pathlib import Path
from typing import TYPE_CHECKING

import anyio.to_thread

from appserver.faces.codex.wire import CodexError, Message
from appserver.tools.search_walk import walk_files

if TYPE_CHECKING:
    from appserver.faces.codex.session import CodexSession

MAX_RESULTS = 50
MAX_FILES = 100_000  # walked per search, so a huge tree still answers
MAX_QUERY = 200
MATCH = 16  # every matched character
CONSECUTIVE = 16  # right after the previous matched character
BOUNDARY = 10  # at the start of the path, a word, or a camelCase hump
NAME_START = 10  # more at the start of the file name
GAP = 1  # per character skipped between two matches
SEPARATORS = frozenset("/\\_-. ")

# Per connection: cancellation token -> the search it names, still running.
_running: weakref.WeakKeyDictionary[CodexSession, dict[str, threading.Event]] = (
    weakref.WeakKeyDictionary()
)


def _bonus(text: str, index: int, name_start: int) -> int:
    if index == name_start:
        return BOUNDARY + NAME_START
    if index == 0 or text[index - 1] in SEPARATORS:
        return BOUNDARY
    if text[index - 1].islower() and text[index].isupper():
        return BOUNDARY
    return 0


def _is_subsequence(needle: str, hay: str) -> bool:
    at = 0
    for char in needle:
        at = hay.find(char, at) + 1
        if not at:
            return False
    return True


def fuzzy_match(query: str, path: str) -> tuple[int, list[int]] | None:
    """The best score of ``query`` as a subsequence of ``path`` and the matched
    positions in ``path``, or ``None`` if it is not one."""
    needle, hay = query.lower(), path.lower()
    if not needle or not _is_subsequence(needle, hay):
        return None
    name_start = path.rfind("/") + 1
    bonus = [_bonus(path, index, name_start) for index in range(len(path))]
    # best[i][j]: the best score of needle[: i + 1] with needle[i] at hay[j];
    # came[i][j]: where needle[i - 1] was then.
    best: list[list[int | None]] = []
    came: list[list[int]] = []
    for row, char in enumerate(needle):
        scores: list[int | None] = [None] * len(hay)
        origins = [-1] * len(hay)
        previous = best[row - 1] if row else None
        run: int | None = None  # best previous score before j, gaps charged
        run_at = -1
        for column, hay_char in enumerate(hay):
            if previous is not None and column:
                if run is not None:
                    run -= GAP
                left = previous[column - 1]
                if left is not None and (run is None or left >= run):
                    run, run_at = left, column - 1
            if hay_char != char:
                continue
            gain = MATCH + bonus[column]
            if previous is None:
                scores[column] = gain
                continue
            left = previous[column - 1] if column else None
            if left is not None and (run is None or left + CONSECUTIVE >= run):
                scores[column], origins[column] = left + CONSECUTIVE + gain, column - 1
            elif run is not None:
                scores[column], origins[column] = run + gain, run_at
        best.append(scores)
        came.append(origins)
    last = best[-1]
    end = max((j for j, score in enumerate(last) if score is not None), key=lambda j: last[j] or 0)
    indices = [end]
    for row in range(len(needle) - 1, 0, -1):
        indices.append(came[row][indices[-1]])
    indices.reverse()
    return max(last[end] or 0, 0), indices


def _search(
    roots: list[tuple[str, str]], query: str, workspace: Path, stop: threading.Event
) -> list[Message]:
    """Blocking: walk and score (run in a worker thread)."""
    found: list[tuple[int, str, str, list[int]]] = []
    walked = 0
    for given, start in roots:
        try:
            walk = walk_files(workspace, start, hidden=False)
            for relative, _info in walk:
                walked += 1
                if stop.is_set() or walked > MAX_FILES:
                    break
                path = relative[len(start) + 1 :] if start != "." else relative
                match = fuzzy_match(query, path)
                if match is not None:
                    found.append((match[0], given, path, match[1]))
        except OSError:
            continue  # a root that vanished or cannot be read: nothing from it
    if stop.is_set():
        return []
    found.sort(key=lambda hit: (-hit[0], len(hit[2]), hit[2]))
    from appserver.protocol.encoding import scrub_surrogates

    # A name that is not UTF-8 (its bytes came back as surrogates) is shown with
    # U+FFFD in their place, one for one (the indices still hold), as Codex's
    # lossy conversion shows it: strict JSON parsers refuse a lone surrogate.
    return [
        {
            "root": given,
            "path": scrub_surrogates(path),
            "file_name": scrub_surrogates(os.path.basename(path)),
            "match_type": "file",
            "score": score,
            "indices": indices,
        }
        for score, given, path, indices in found[:MAX_RESULTS]
    ]


def _roots(session: CodexSession, given: object) -> list[tuple[str, str]]:
    """(as given, from the workspace) of each root inside the workspace."""
    if not isinstance(given, list) or not all(isinstance(root, str) for root in given):
        raise CodexError("Invalid request: roots must be an array of paths")
    workspace = Path(session.workspace).resolve()
    inside = []
    for root in given:
        try:
            resolved = (workspace / root).resolve()
            usable = resolved.is_dir() and resolved.is_relative_to(workspace)
        except (OSError, ValueError):  # a NUL byte, a name too long: no such root
            continue
        if usable:
            inside.append((root, resolved.relative_to(workspace).as_posix()))
    return inside


async def fuzzy_file_search(session: CodexSession, params: Message) -> Message:
    query = params.get("query")
    if not isinstance(query, str):
        raise CodexError("Invalid request: missing field `query`")
    query = "".join(query.split())[:MAX_QUERY]
    roots = _roots(session, params.get("roots"))
    token = params.get("cancellationToken")
    stop = threading.Event()
    searches = _running.setdefault(session, {})
    if isinstance(token, str):
        if token in searches:
            searches[token].set()
        searches[token] = stop
    try:
        workspace = Path(session.workspace).resolve()
        files = await anyio.to_thread.run_sync(_search, roots, query, workspace, stop)
    finally:
        stop.set()  # a cancelled request stops its walk too
        if isinstance(token, str) and searches.get(token) is stop:
            del searches[token]
    return {"files": files}
