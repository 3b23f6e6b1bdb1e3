"""``workspace/commitMessage/suggest``: a commit message for some files' changes.

DotCraft's steps (parity 2 §5), with its silences turned into answers:

1. ``threadId`` blank or ``paths`` empty: ``-32602``.
2. Each path must lie in the workspace (the tools' sandbox rule: symlinks
   followed, ``.craft`` outside, no ``..``): ``-32602`` otherwise (DotCraft:
   ``-32600``; a wrong parameter is what ``-32602`` says).
3. The thread must exist (``-32010``) and belong to this workspace (``-32600``).
4. Git runs only in a trusted workspace (``-32600`` otherwise; docs/security.md),
   and only in a git work tree (``-32600`` naming it; DotCraft folds it into "no
   diff"). The diff: tools/git_diff.py, cut to ``maxDiffChars`` (default
   100,000). None: ``-32600``.
5. The thread's user and agent messages are the helper turn's history (oldest
   dropped past 60,000 characters); its message: the request, the paths and the
   diff under a ``--- unified diff ---`` line; its one tool ``CommitSuggest``.
6. The first successful ``CommitSuggest`` call with a summary is the message
   (``summary``, a blank line, ``body``); none: ``-32600`` saying how the turn ended.
7. The whole (diff and helper turn) has ``timeoutMs`` (default 120 s); past it the
   turn is cancelled, the helper thread deleted, and the answer is ``-32603``
   ``Internal error`` with ``data: {detail, reason: "timeout"}``. DotCraft sends no
   answer at all (its §6 item 20). ``-32603`` rather than ``-32600``: the request
   was fine, the server did not finish it in time, and asking again may work;
   every ``-32600`` above is final for the same files and thread.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import anyio
from pydantic import BaseModel

from appserver.protocol import errors as rpc_errors
from appserver.protocol.errors import RpcError
from appserver.protocol.suggestions import (
    DEFAULT_COMMIT_TIMEOUT_MS,
    CommitMessageSuggestParams,
    CommitMessageSuggestResult,
)
from appserver.providers.base import Message
from appserver.rpc.connection import RequestContext
from appserver.runtime.helper_threads import HelperRequest, HelperThreads
from appserver.storage.records import ThreadRecord
from appserver.tools.base import ToolError
from appserver.tools.git_diff import GitFailure, NotARepository, changes_diff
from appserver.tools.profiles import COMMIT_PROFILE, COMMIT_SUGGEST
from appserver.tools.sandbox import Sandbox

if TYPE_CHECKING:
    from appserver.services.context import FamilyContext

DEFAULT_MAX_DIFF_CHARS = 100_000
CONTEXT_CHARS = 60_000
NO_CONVERSATION = "(This thread has no messages yet.)"
DIFF_MARK = "--- unified diff ---"

INSTRUCTIONS = """\
You write git commit messages. Read the conversation that led to the change and the \
diff, then call the CommitSuggest tool exactly once: `summary` is one line in the \
imperative mood ("Fix ...", "Add ..."), at most about 72 characters, saying what the \
change does; `body` (optional) says why, or what a reader of the history needs to \
know, in a few short lines. Describe only what the diff shows. Do not answer in text."""


def commit_prompt(paths: list[str], diff: str) -> str:
    """The helper turn's message."""
    listed = "".join(f"- {path}\n" for path in paths)
    return (
        "Produce a git commit message for the changes to these files, and hand it over "
        f"with CommitSuggest.\nFiles:\n{listed}{DIFF_MARK}\n{diff}"
    )


def conversation(items: list[tuple[str, str]]) -> list[Message]:
    """``(role, text)`` pairs as the helper's history: the newest that fit in
    :data:`CONTEXT_CHARS` (oldest dropped), or one placeholder message."""
    kept: list[Message] = []
    used = 0
    for role, text in reversed(items):
        used += len(text)
        if used > CONTEXT_CHARS:
            break
        kept.append(Message("user" if role == "user" else "assistant", text))
    kept.reverse()
    return kept or [Message("user", NO_CONVERSATION)]


class CommitMessages:
    """The ``workspace/commitMessage/suggest`` handler."""

    def __init__(self, server: FamilyContext, helpers: HelperThreads) -> None:
        self.server = server
        self.helpers = helpers

    async def suggest(self, ctx: RequestContext, params: CommitMessageSuggestParams) -> BaseModel:
        thread_id = params.thread_id.strip()
        if not thread_id:
            raise rpc_errors.invalid_params("'threadId' is required.")
        if not params.paths:
            raise rpc_errors.invalid_params("'paths' must name at least one file.")
        paths = list(dict.fromkeys(self._inside(path) for path in params.paths))
        thread = await self.server.threads.get(thread_id)
        threads = self.server.threads
        if os.path.normpath(thread.workspace_path) != os.path.normpath(threads.workspace):
            raise rpc_errors.invalid_request(f"Thread {thread.id} is not in this workspace.")
        if not self.server.trust.trusted:
            raise rpc_errors.invalid_request(
                "A commit message is made from git's diff, and git runs programs a "
                "repository's config names: trust the workspace first (workspace/trust)."
            )
        max_chars = params.max_diff_chars
        if max_chars is None or max_chars <= 0:
            max_chars = DEFAULT_MAX_DIFF_CHARS
        timeout_ms = params.timeout_ms or DEFAULT_COMMIT_TIMEOUT_MS
        with anyio.move_on_after(timeout_ms / 1000):
            return await self._suggest(thread, paths, max_chars)
        raise RpcError(
            rpc_errors.INTERNAL_ERROR,
            "Internal error",
            {
                "detail": f"timeout: no commit message within {timeout_ms} ms",
                "reason": "timeout",
            },
        )

    def _inside(self, path: str) -> str:
        """``path`` as a workspace-relative path, or ``-32602`` when it is not one."""
        if not path.strip():
            raise rpc_errors.invalid_params("A path is empty.")
        if ".." in path.replace("\\", "/").split("/"):
            raise rpc_errors.invalid_params(f"Path escapes workspace: {path}")
        sandbox = Sandbox(self.server.workspace)
        try:
            resolved = sandbox.resolve(path)
        except ToolError as exc:
            raise rpc_errors.invalid_params(f"{exc}: {path!r}") from None
        if not resolved.inside:
            raise rpc_errors.invalid_params(f"Path is outside the workspace: {path}")
        if os.path.isabs(path):
            return sandbox.display(resolved)
        return os.path.normpath(path).replace(os.sep, "/")

    async def _suggest(self, thread: ThreadRecord, paths: list[str], max_chars: int) -> BaseModel:
        try:
            diff = await changes_diff(self.server.workspace, paths, max_chars)
        except NotARepository:
            raise rpc_errors.invalid_request(
                f"The workspace is not a git repository: {self.server.workspace}"
            ) from None
        except GitFailure as exc:
            raise rpc_errors.invalid_request(str(exc)) from None
        if not diff.strip():
            raise rpc_errors.invalid_request(
                "No diff for the given paths (nothing to commit or not a git repository)."
            )
        request = HelperRequest(
            profile=COMMIT_PROFILE,
            channel_context=f"{COMMIT_PROFILE}:{thread.id}",
            display_name="[internal] Commit suggestion",
            instructions=INSTRUCTIONS,
            prompt=commit_prompt(paths, diff),
            tool=COMMIT_SUGGEST,
            history=conversation(await self._messages(thread.id)),
        )
        outcome = await self.helpers.run(request)
        for arguments in outcome.calls:
            summary = str(arguments.get("summary") or "").strip()
            if summary:
                body = str(arguments.get("body") or "").strip()
                return CommitMessageSuggestResult(
                    message=f"{summary}\n\n{body}" if body else summary
                )
        ending = f" (the turn {outcome.status}: {outcome.error})" if outcome.error else ""
        raise rpc_errors.invalid_request(
            f"The model did not call CommitSuggest with a summary{ending}."
        )

    async def _messages(self, thread_id: str) -> list[tuple[str, str]]:
        repo = self.server.threads.repo
        turns, _ = await repo.turns(thread_id)
        items = await repo.items(thread_id, [turn.id for turn in turns])
        roles = {"userMessage": "user", "agentMessage": "assistant"}
        return [
            (roles[item.type], str(item.payload.get("text") or ""))
            for turn in turns
            for item in items[turn.id]
            if item.type in roles and item.payload.get("text")
        ]
