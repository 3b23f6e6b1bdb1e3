"""Wire models and method-table entries of ``welcome/suggestions`` and
``workspace/commitMessage/suggest`` (DotCraft parity 2, §4 and §5).

Both are answered with the help of a *helper turn*: an internal thread the
server makes, runs one turn on (its model calls a tool that hands over the
answer) and deletes (docs/suggestions.md). Where this server differs from
DotCraft on purpose:

* ``welcome/suggestions`` is gated by ``capabilities.extensions.welcomeSuggestions``
  as DotCraft's; ``welcome/suggestionsUpdated`` (ours) tells clients a refresh
  produced new suggestions, so a page showing them needs no polling.
* ``workspace/commitMessage/suggest`` takes ``timeoutMs`` (ours, default 120 s);
  when it passes, the answer is ``-32603`` with ``data.reason: "timeout"``
  (DotCraft sends no answer at all). A path outside the workspace is ``-32602``
  (DotCraft: ``-32600``).
"""

from typing import Literal

from pydantic import ConfigDict, Field

from appserver.protocol import errors as rpc_errors
from appserver.protocol.base import Int, PathText, WireModel
from appserver.protocol.limits import INT64_MAX, INT64_MIN
from appserver.protocol.spec import MethodSpec, NotificationSpec, ServerRequestSpec

MAX_WELCOME_ITEMS = 4
DEFAULT_COMMIT_TIMEOUT_MS = 120_000
MAX_COMMIT_TIMEOUT_MS = 600_000
MAX_COMMIT_PATHS = 1_000

# --- welcome/suggestions --------------------------------------------------------------------


class WorkspaceOfIdentity(WireModel):
    """A `SessionIdentity` of which only the workspace is read: its other fields
    may be absent (DotCraft reads none of them here)."""

    channel_name: str | None = None
    """Ignored here."""
    user_id: str | None = None
    """Ignored here."""
    channel_context: str | None = None
    """Ignored here."""
    workspace_path: PathText | None = None
    """The workspace asked about; absent or empty: this server's."""


class WelcomeSuggestionsParams(WireModel):
    """``welcome/suggestions``: the suggestions for a new thread in this workspace."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"identity": {"channelName": "web", "userId": "local"}, "maxItems": 4}]
        }
    )

    identity: WorkspaceOfIdentity | None = None
    """Whose new thread; only its `workspacePath` is used (absent or empty: this server's)."""
    max_items: Int | None = Field(default=None, ge=INT64_MIN, le=INT64_MAX)
    """At most this many items (absent or not positive: 4; never more than 4)."""


class WelcomeSuggestion(WireModel):
    """One suggestion: a button that fills the message box."""

    title: str
    """A short label (at most 80 characters, one line)."""
    prompt: str
    """The message it puts in the box (at most 500 characters)."""
    reason: str
    """Why it is suggested (at most 200 characters; may be empty)."""


class WelcomeSuggestionsResult(WireModel):
    """The cached suggestions; never generated on request."""

    items: list[WelcomeSuggestion]
    """The suggestions (empty with `source: none`)."""
    source: Literal["dynamic", "none"]
    """`dynamic`: made by the model from the workspace's recent threads; `none`: nothing yet,
    or suggestions are switched off (`workspace/config/update {welcomeSuggestionsEnabled}`)."""
    generated_at: str
    """When they were made (ISO 8601; now, for `none`)."""
    fingerprint: str
    """A digest of the evidence they were made from (`""` for `none`)."""


class WelcomeSuggestionsUpdatedNotification(WelcomeSuggestionsResult):
    """``welcome/suggestionsUpdated``: a background refresh made new suggestions (ours)."""


# --- workspace/commitMessage/suggest --------------------------------------------------------


class CommitMessageSuggestParams(WireModel):
    """``workspace/commitMessage/suggest``: a commit message for the changes to ``paths``."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"threadId": "thr_1", "paths": ["src/app.py"]}]}
    )

    thread_id: str = ""
    """The thread whose conversation explains the change (its messages are the context)."""
    paths: list[PathText] = Field(default_factory=list, max_length=MAX_COMMIT_PATHS)
    """Workspace-relative paths of the changed files (tracked or untracked)."""
    max_diff_chars: Int | None = Field(default=None, ge=INT64_MIN, le=INT64_MAX)
    """Cut the diff the model reads to this many characters (absent or not positive: 100000)."""
    timeout_ms: Int | None = Field(default=None, ge=1, le=MAX_COMMIT_TIMEOUT_MS)
    """Ours: give up after this many milliseconds (default 120000) with `-32603`, reason
    `timeout`, so a client with its own deadline gets an answer before it."""


class CommitMessageSuggestResult(WireModel):
    """The suggested message."""

    message: str
    """The summary line, then a blank line and the body when there is one."""


METHOD_SPECS: list[MethodSpec] = [
    MethodSpec(
        "welcome/suggestions",
        WelcomeSuggestionsParams,
        WelcomeSuggestionsResult,
        None,  # gated by capabilities.extensions.welcomeSuggestions
        "Suggestions for a new thread, from the cache a background refresh fills after turns "
        "complete (never made on request). Gate: `capabilities.extensions.welcomeSuggestions`. "
        "Another workspace than this server's is `-32600`.",
        (rpc_errors.INVALID_PARAMS, rpc_errors.INVALID_REQUEST),
        access="read",
    ),
    MethodSpec(
        "workspace/commitMessage/suggest",
        CommitMessageSuggestParams,
        CommitMessageSuggestResult,
        None,
        "A commit message for the changes to `paths` (`git diff HEAD`, untracked files as new "
        "files), written by a helper turn that reads the diff and the thread's conversation. "
        "`-32602`: no thread id, no paths, a path outside the workspace; `-32010`: no such "
        "thread; `-32600`: an untrusted workspace, not a git repository, no diff, or no "
        "message from the model; `-32603` with `data.reason: timeout` after `timeoutMs`.",
        (
            rpc_errors.INVALID_PARAMS,
            rpc_errors.THREAD_NOT_FOUND,
            rpc_errors.INVALID_REQUEST,
            rpc_errors.INTERNAL_ERROR,
        ),
        access="detached",
    ),
]
NOTIFICATION_SPECS: list[NotificationSpec] = [
    NotificationSpec(
        "welcome/suggestionsUpdated",
        WelcomeSuggestionsUpdatedNotification,
        "all connections (not with it in optOutNotificationMethods)",
        "Ours: a background refresh stored new welcome suggestions (what `welcome/suggestions` "
        "now answers).",
    ),
]
SERVER_REQUEST_SPECS: list[ServerRequestSpec] = []
