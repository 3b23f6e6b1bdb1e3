"""The editor proxy: the tools' files and terminals through a client's ``ext/acp/*``.

A client that advertised ``acpExtensions`` (an IDE) serves the built-in
tools' file reads and writes (``ext/acp/fs/readTextFile|writeTextFile``),
runs their shell commands in its terminals (``ext/acp/terminal/*``) and
answers the requests of the families it lists (``ext/acp/<family>/*``, sent
by ``runtime.turns.editor_families``): :class:`ClientEditor` implements
:class:`~appserver.tools.base.EditorFiles` and
:class:`~appserver.tools.base.EditorTerminals` with those requests, and
:class:`EditorProxy` sends them to the thread's bound client with the
approval machinery (:class:`PendingEditorRequest`: timeout, reconnect grace,
asked again of an editor that takes the seat). Any failure is a
:class:`~appserver.tools.base.ToolError`: the tool call fails, the turn goes on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio

from appserver.runtime.approvals import ApprovalBroker, PendingApproval
from appserver.runtime.events import (
    Participant,
    QuestionRefused,
    QuestionUnanswered,
    is_editor_client,
)
from appserver.runtime.turns.model import ActiveTurn
from appserver.tools.base import TerminalOutput, ToolError

if TYPE_CHECKING:
    from appserver.protocol.base import WireModel
    from appserver.protocol.editor_terminal import EditorTerminalParams

# The editor requests' wire models are imported at the first request: most
# processes never have an editor, and they were ~3 ms of every start.

log = logging.getLogger("appserver.turns")


class EditorTimeout(ToolError):
    """The editor did not answer an ``ext/acp/*`` request in time."""


class EditorGone(ToolError):
    """The editor left and none came back within the reconnect grace."""


class EditorRefused(ToolError):
    """The editor answered an ``ext/acp/*`` request with an error."""


@dataclass
class PendingEditorRequest(PendingApproval["WireModel"]):
    """An ``ext/acp/*`` request waiting for the editor's answer (asked once
    per participant, timeout, reconnect grace)."""

    method: str = ""
    answer: Mapping[str, object] | None = None
    error: str = ""

    async def _put(self, participant: Participant) -> object:
        assert is_editor_client(participant)
        return await participant.editor_request(self.method, self.params, self.timeout)

    def _refused(self, participant: Participant, message: str) -> None:
        self.error = message
        self.resolve("refused", participant)

    def _answered(self, participant: Participant, answer: object) -> None:
        self.answer = answer if isinstance(answer, Mapping) else {}
        self.resolve("answered", participant)


def serves(participant: Participant | None, method: str) -> bool:
    """``participant`` is a ready editor that advertised ``method``'s capability."""
    if participant is None or participant.closed or not is_editor_client(participant):
        return False
    if method.startswith("ext/acp/terminal/"):
        return participant.editor_terminal()
    if method.startswith("ext/acp/fs/"):
        can_read, can_write = participant.editor_fs()
        return can_read if method == "ext/acp/fs/readTextFile" else can_write
    family = method.removeprefix("ext/acp/").split("/", 1)[0]
    return family.casefold() in enabled_families(participant.editor_families(), None)


def enabled_families(advertised: tuple[str, ...], configured: object) -> set[str]:
    """The families a thread may use, case-folded: those its client advertised
    (``acpExtensions.extensions``), narrowed to the thread configuration's
    ``extensions`` when that is a list (DotCraft keeps that field without
    reading it; here it can switch a family off for one thread)."""
    families = {family.casefold() for family in advertised if isinstance(family, str)}
    if isinstance(configured, list):
        families &= {family.casefold() for family in configured if isinstance(family, str)}
    return families


# Beyond the command's own timeout, for the editor to answer waitForExit.
WAIT_MARGIN_S = 10.0
# kill and release after an interrupted turn or a failure: short, best effort.
CLEANUP_TIMEOUT_S = 5.0
# ACP's outputByteLimit asked of the editor: its answers stay well under a frame.
EDITOR_OUTPUT_BYTE_LIMIT = 1024 * 1024


class EditorProxy:
    """The ``ext/acp/*`` requests of the threads' turns, to each thread's editor.

    The editor is the thread's bound client (``bound_client``: the seat
    :class:`~appserver.runtime.turns.client_tools.ClientToolCalls` keeps), or
    while the seat is empty the client that started the turn. One request per
    thread waits at a time; an editor that takes the seat is asked it.
    """

    def __init__(
        self, approvals: ApprovalBroker, bound_client: Callable[[str], Participant | None]
    ) -> None:
        self.approvals = approvals
        self.bound_client = bound_client
        self.pending: dict[str, PendingEditorRequest] = {}  # ext/acp/* by thread

    def offer(self, thread_id: str, participant: Participant) -> None:
        """``participant`` took the thread's seat: it is asked the thread's
        pending request if nobody is being asked any more and it serves it."""
        asked = self.pending.get(thread_id)
        if asked is not None and not asked.live and serves(participant, asked.method):
            asked.ask(participant)

    def editor(self, active: ActiveTurn) -> ClientEditor | None:
        """The bound client's editor, when it serves the file system or
        terminals (``acpExtensions``): the owner, or while the seat is empty
        the client that started the turn. Its requests go through
        :meth:`ask`."""
        owner = self.owner(active)
        if not is_editor_client(owner):
            return None
        can_read, can_write = owner.editor_fs()
        can_run = owner.editor_terminal()
        if not (can_read or can_write or can_run):
            return None
        return ClientEditor(self, active, can_read, can_write, can_run)

    def families(self, active: ActiveTurn) -> set[str]:
        """The request families (case-folded) the turn's tools may use: those its
        editor lists, narrowed by the thread configuration's ``extensions``."""
        owner = self.owner(active)
        if not is_editor_client(owner):
            return set()
        configured = (active.thread.configuration or {}).get("extensions")
        return enabled_families(owner.editor_families(), configured)

    def owner(self, active: ActiveTurn) -> Participant | None:
        """The thread's bound client if it can be an editor (else the turn's
        origin while the seat is empty)."""
        owner = self.bound_client(active.thread_id)
        if owner is None or owner.closed:
            owner = active.origin
        editor = owner is not None and not owner.closed and is_editor_client(owner)
        return owner if editor else None

    async def ask(
        self, active: ActiveTurn, method: str, params: WireModel, timeout: float
    ) -> tuple[Mapping[str, object], Participant | None]:
        """Send one ``ext/acp/*`` request to the thread's editor with the
        approval machinery: an owner that leaves and comes back (or another
        editor that takes the seat) within the reconnect grace is asked again.
        Its answer and who gave it; a :class:`ToolError` if it refused, did not
        answer within ``timeout`` or did not come back."""
        assert active.tg is not None
        pending = PendingEditorRequest(
            params, active.tg, timeout, self.approvals.reconnect_grace, method=method
        )
        self.pending[active.thread_id] = pending
        try:
            owner = self.owner(active)
            if owner is not None and serves(owner, method):
                pending.ask(owner)
            decided, reason = await pending.wait()
        finally:
            if self.pending.get(active.thread_id) is pending:
                del self.pending[active.thread_id]
        if decided is None:
            if reason == "approval_timeout":
                raise EditorTimeout(f"the editor did not answer {method} within {timeout:g}s")
            raise EditorGone(
                f"the editor did not answer {method}: it disconnected and did not come back "
                f"within {self.approvals.reconnect_grace:g}s"
            )
        if decided == "refused":
            raise EditorRefused(f"the editor refused {method}: {pending.error}")
        return pending.answer or {}, pending.answered_by


class ClientEditor:
    """The tools' :class:`~appserver.tools.base.EditorFiles` and
    :class:`~appserver.tools.base.EditorTerminals` through a client's
    ``ext/acp/*`` (timeout: the approval timeout, or a command's own; any
    failure is a :class:`ToolError`, so the tool call fails and the turn goes on)."""

    def __init__(
        self,
        proxy: EditorProxy,
        active: ActiveTurn,
        can_read: bool,
        can_write: bool,
        can_run: bool,
    ) -> None:
        self.proxy = proxy
        self.active = active
        self.thread_id = active.thread_id
        self.timeout = proxy.approvals.timeout
        self.can_read = can_read
        self.can_write = can_write
        self.can_run = can_run
        # The editor that created each terminal: kill and release go to it.
        self._hosts: dict[str, Participant] = {}

    async def _request(
        self, method: str, params: WireModel, timeout: float | None = None
    ) -> Mapping[str, object]:
        answer, _ = await self._answered(method, params, timeout)
        return answer

    async def _answered(
        self, method: str, params: WireModel, timeout: float | None = None
    ) -> tuple[Mapping[str, object], Participant | None]:
        return await self.proxy.ask(
            self.active, method, params, self.timeout if timeout is None else timeout
        )

    # --- files -------------------------------------------------------------------------

    async def read_text_file(self, path: str, line: int | None, limit: int | None) -> str:
        from appserver.protocol.editor_fs import ReadTextFileParams

        params = ReadTextFileParams(
            thread_id=self.thread_id, path=path, line=line, offset=line, limit=limit
        )
        answer = await self._request("ext/acp/fs/readTextFile", params)
        content = answer.get("content")
        if not isinstance(content, str):
            raise ToolError("invalid answer to ext/acp/fs/readTextFile: `content` is required")
        return content

    async def write_text_file(self, path: str, content: str) -> None:
        from appserver.protocol.editor_fs import WriteTextFileParams

        params = WriteTextFileParams(thread_id=self.thread_id, path=path, content=content)
        await self._request("ext/acp/fs/writeTextFile", params)

    # --- terminals ---------------------------------------------------------------------

    def _terminal(self, terminal_id: str) -> EditorTerminalParams:
        from appserver.protocol.editor_terminal import EditorTerminalParams

        return EditorTerminalParams(thread_id=self.thread_id, terminal_id=terminal_id)

    async def create_terminal(self, command: str, cwd: str) -> str:
        from appserver.protocol.editor_terminal import EditorTerminalCreateParams

        params = EditorTerminalCreateParams(
            thread_id=self.thread_id,
            command=command,
            cwd=cwd,
            output_byte_limit=EDITOR_OUTPUT_BYTE_LIMIT,
        )
        answer, host = await self._answered("ext/acp/terminal/create", params)
        terminal_id = answer.get("terminalId")
        if not isinstance(terminal_id, str) or not terminal_id:
            raise ToolError("invalid answer to ext/acp/terminal/create: `terminalId` is required")
        if host is not None:
            self._hosts[terminal_id] = host
        return terminal_id

    async def wait_for_terminal_exit(self, terminal_id: str, timeout_s: float) -> TerminalOutput:
        from appserver.protocol.editor_terminal import EditorTerminalWaitParams

        params = EditorTerminalWaitParams(
            thread_id=self.thread_id, terminal_id=terminal_id, timeout=max(1, round(timeout_s))
        )
        method = "ext/acp/terminal/waitForExit"
        try:
            answer = await self._request(method, params, timeout_s + WAIT_MARGIN_S)
        except EditorTimeout:
            # The editor did not say in time: the command counts as still running.
            return TerminalOutput(output="", exited=False)
        return _terminal_output(answer, method)

    async def terminal_output(self, terminal_id: str) -> TerminalOutput:
        method = "ext/acp/terminal/getOutput"
        return _terminal_output(await self._request(method, self._terminal(terminal_id)), method)

    async def kill_terminal(self, terminal_id: str) -> None:
        await self._cleanup("ext/acp/terminal/kill", terminal_id)

    async def release_terminal(self, terminal_id: str) -> None:
        await self._cleanup("ext/acp/terminal/release", terminal_id)

    async def _cleanup(self, method: str, terminal_id: str) -> None:
        """Best effort, straight to the editor that created the terminal (else
        the thread's editor now), also from an interrupted turn, whose task
        group can no longer start the asking machinery."""
        owner = self._hosts.get(terminal_id)
        if owner is None or owner.closed:
            owner = self.proxy.owner(self.active)
        if not is_editor_client(owner) or not owner.editor_terminal():
            return
        with anyio.CancelScope(shield=True), anyio.move_on_after(CLEANUP_TIMEOUT_S):
            try:
                await owner.editor_request(method, self._terminal(terminal_id), CLEANUP_TIMEOUT_S)
            except (QuestionRefused, QuestionUnanswered) as exc:
                log.info("%s of %s on %s failed: %s", method, terminal_id, self.thread_id, exc)


def _terminal_output(answer: Mapping[str, object], method: str) -> TerminalOutput:
    """An answer to ``getOutput`` / ``waitForExit`` in DotCraft's shape
    (``{output, exitCode?}``) or ACP's (``exitStatus``, ``signal``, ``truncated``)."""
    from pydantic import ValidationError

    from appserver.protocol.base import first_error
    from appserver.protocol.editor_terminal import EditorTerminalOutputResult

    try:
        result = EditorTerminalOutputResult.model_validate(dict(answer))
    except ValidationError as exc:
        raise ToolError(f"invalid answer to {method}: {first_error(exc)}") from exc
    exit_code, signal = result.exit_code, result.signal
    if result.exit_status is not None:
        exit_code = result.exit_status.exit_code if exit_code is None else exit_code
        signal = result.exit_status.signal or signal
    exited = exit_code is not None or signal is not None or result.exit_status is not None
    return TerminalOutput(
        output=result.output or "",
        exited=exited,
        exit_code=exit_code,
        signal=signal,
        truncated=bool(result.truncated),
    )
