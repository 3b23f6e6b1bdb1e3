"""Which profile a SubAgent child runs with, and the turns of external-CLI children.

:func:`choose_profile` answers ``SpawnAgent {profile, workingDirectory}``: the
profile among the workspace's (built-in ones and ``.craft/config.json``'s,
names in any case), refused when unknown, disabled, of an unknown runtime,
misconfigured, or (``cli-oneshot``) when its ``bin`` is not found; and the
child's working directory: the workspace root (``workingDirectoryMode``
``workspace``) or the ``workingDirectory`` given (``specified``), which must
be an existing directory. It is resolved as the ``shell`` tool resolves its
``workdir`` (relative to the workspace root, links followed); one outside the
workspace is allowed, and is then asked as an operation outside the workspace.

An external child's turn is a real turn of the child thread run by the turn
engine (:class:`ExternalRuns` gives it its work): its ``userMessage`` is the
task, then the launch is settled as a ``shell`` command would be (policy,
grants, else the parent's client is asked; an untrusted workspace runs none:
the profile's command line comes from the workspace's own files), the command
runs (:func:`~appserver.runtime.subagent_cli_run.run_profile`), and the turn
ends with an ``agentMessage`` of its answer (``turn/completed``) or an
``error`` item, code ``subagent_error`` (``turn/failed``); cancelled, it ends
``turn/cancelled`` and the command's process group is killed.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import anyio.to_thread

from appserver.protocol.subagent_profiles import SubAgentProfileWrite
from appserver.providers.base import Usage
from appserver.runtime.subagent_builtins import (
    CLI_RUNTIME,
    DEFAULT_PROFILE,
    KNOWN_RUNTIMES,
    NATIVE_RUNTIME,
)
from appserver.runtime.subagent_cli import InvocationError, input_mode, split_arguments
from appserver.runtime.subagent_cli_run import resolve_binary, run_profile
from appserver.runtime.subagent_profiles import view_profile
from appserver.runtime.subagent_resume import ResumeSessions
from appserver.runtime.threads import Threads
from appserver.runtime.turns.engine import Work
from appserver.runtime.turns.model import ActiveTurn, TurnFailure, UserInput
from appserver.storage.subagent_config import read_subagent_config
from appserver.storage.workspace_config import load_workspace_config
from appserver.tools.base import ApprovalNeed, ToolError
from appserver.tools.sandbox import STATE_DIR, ResolvedPath, Sandbox

ERROR_CODE = "subagent_error"
# The thread's approval policy -> the profile's permissionModeMapping key.
PERMISSION_MODES = {"autoApprove": "auto-approve", "default": "interactive"}
RESTRICTED = "restricted"  # interrupt, and anything else
UNTRUSTED = (
    "This workspace is not trusted, so its SubAgent profile '{name}' (a command line from "
    "its own files) is not run. Trust it (workspace/trust or --trust-workspace) first."
)


@dataclass(frozen=True)
class ProfileChoice:
    """The profile a child runs with, and where."""

    name: str  # as the profile spells it
    definition: SubAgentProfileWrite
    directory: ResolvedPath  # the working directory
    specified: bool  # workingDirectoryMode specified (else the workspace root)
    resume_enabled: bool  # the workspace's SubAgent.EnableExternalCliSessionResume

    @property
    def runtime(self) -> str:
        return self.definition.runtime.strip().lower()

    @property
    def external(self) -> bool:
        return self.runtime != NATIVE_RUNTIME

    @property
    def resumable(self) -> bool:
        """Whether the child may get more input (``SendInput``) and be continued:
        always for a native child; for an external one only when the workspace
        allows resuming external sessions and the profile ``supportsResume``."""
        if not self.external:
            return True
        return self.resume_enabled and bool(self.definition.supports_resume)

    def thread_metadata(self) -> dict[str, str]:
        """The child thread's metadata (an external child's runtime and profile)."""
        if not self.external:
            return {}
        return {"subagent.syntheticRuntime": self.runtime, "subagent.profileName": self.name}


def choose_profile(workspace: Path, requested: str, working_directory: str | None) -> ProfileChoice:
    """The profile ``requested`` (blank: ``native``) of ``workspace``; ``ToolError``
    (DotCraft's words) when it cannot be used. Reads files: off the event loop."""
    config = read_subagent_config(load_workspace_config(workspace / STATE_DIR))
    view = view_profile(requested.strip() or DEFAULT_PROFILE, config)
    if view is None:
        raise ToolError(f"Unknown subagent profile '{requested.strip()}'.")
    name, definition = view.name, view.definition
    if not view.enabled:
        raise ToolError(f"Subagent profile '{name}' is disabled.")
    runtime = definition.runtime.strip().lower()
    if runtime not in KNOWN_RUNTIMES:
        raise ToolError(
            f"Subagent profile '{name}' references unknown runtime '{definition.runtime}'."
        )
    if view.warnings:
        raise ToolError(" ".join(view.warnings))
    if runtime == CLI_RUNTIME:
        if not (definition.bin or "").strip():
            raise ToolError(f"Subagent profile '{name}' is missing required field 'bin'.")
        try:
            resolve_binary(definition.bin or "")
        except InvocationError as exc:
            raise ToolError(str(exc)) from None
    sandbox = Sandbox(workspace)
    mode = (definition.working_directory_mode or "").strip().lower() or "workspace"
    if mode == "workspace":
        directory = ResolvedPath(sandbox.root, inside=True)
    elif mode == "specified":
        wanted = (working_directory or "").strip()
        if not wanted:
            raise ToolError(f"Subagent profile '{name}' requires a specified working directory.")
        try:
            directory = sandbox.resolve(wanted, must_exist=True)
        except ToolError:
            raise ToolError(f"Subagent working directory '{wanted}' does not exist.") from None
        if not directory.path.is_dir():
            raise ToolError(f"Subagent working directory '{directory.path}' is not a directory.")
    else:
        raise ToolError(
            f"Subagent profile '{name}' has unsupported workingDirectoryMode "
            f"'{definition.working_directory_mode}'."
        )
    return ProfileChoice(
        name=name,
        definition=definition,
        directory=directory,
        specified=mode == "specified",
        resume_enabled=config.external_cli_session_resume,
    )


def role_task(role_name: str, instructions: str | None, prompt: str) -> str:
    """What an external child is given: the task, after its role's instructions."""
    if not (instructions or "").strip():
        return prompt
    return f"## SubAgent Role: {role_name}\n\n{(instructions or '').strip()}\n\n## Task\n\n{prompt}"


def permission_args(definition: SubAgentProfileWrite, policy: str) -> list[str]:
    """The ``permissionModeMapping`` arguments for a turn under ``policy``."""
    mode = PERMISSION_MODES.get(policy, RESTRICTED)
    mapping = definition.permission_mode_mapping or {}
    value = next((v for key, v in mapping.items() if key.strip().lower() == mode), None)
    return split_arguments(value) if isinstance(value, str) else []


def launch_need(choice: ProfileChoice, arguments: list[str], workspace: Path) -> ApprovalNeed:
    """The approval of launching the command, as a ``shell`` command's.

    The operation is the command line without what changes from run to run
    (session, output file, the task), so a grant covers the next run too."""
    definition = choice.definition
    command = shlex.join([(definition.bin or "").strip(), *(definition.args or []), *arguments])
    mode = input_mode(definition)
    delivery = {
        "arg": "as its last argument",
        "stdin": "on its stdin",
        "arg-template": "in its arguments",
        "env": f"in ${(definition.input_env_key or '').strip()}",
    }.get(mode, "")
    outside = "" if choice.directory.inside else " (outside the workspace)"
    where = Sandbox(workspace).display(choice.directory)
    return ApprovalNeed(
        kind="shell",
        operation=command,
        target=str(choice.directory.path),
        reason=(
            f"Run SubAgent profile '{choice.name}' in {where}{outside}, the task {delivery} — "
            "an external agent command acts with this command's permissions"
        ),
        outside_workspace=not choice.directory.inside,
    )


@dataclass(frozen=True)
class ExternalTask:
    """One run of an external child: its profile, what it is given, under which label."""

    choice: ProfileChoice
    task: str
    label: str  # the child's nickname (the resume key)


#: Sets an external child's stage (``ChildRun.stage``) for its running turn.
StageSetter = Callable[[ActiveTurn, str], None]


class ExternalRuns:
    """The work of external children's turns, on one workspace's runtime."""

    def __init__(self, threads: Threads) -> None:
        self.threads = threads
        self.sessions = ResumeSessions(threads.repo)

    @property
    def workspace(self) -> Path:
        return Path(self.threads.workspace)

    async def choose(self, requested: str, working_directory: str | None) -> ProfileChoice:
        """:func:`choose_profile`; an external profile of an untrusted workspace is refused."""
        choice = await anyio.to_thread.run_sync(
            choose_profile, self.workspace, requested, working_directory
        )
        if choice.external and not self.threads.engine.asking.workspace_trusted():
            raise ToolError(UNTRUSTED.format(name=choice.name))
        return choice

    async def again(
        self, profile_name: str, child_directory: str, message: str, label: str
    ) -> ExternalTask:
        """Another run of an external child (``SendInput``); ``ToolError`` unless
        its profile may be continued."""
        choice = await self.choose(profile_name, child_directory)
        if not choice.resumable:
            raise ToolError(
                f"Subagent profile '{choice.name}' does not support SendInput. Enable external "
                "CLI session resume and use a resumable profile."
            )
        return ExternalTask(choice, message, label)

    def work(
        self,
        task: ExternalTask,
        parent_id: str,
        parent_turn: ActiveTurn | None,
        stage: StageSetter,
    ) -> Work:
        """The child turn's work: launch the command and record its answer."""

        async def run(active: ActiveTurn, user: UserInput) -> None:
            await self._run(active, task, parent_id, parent_turn, stage)

        return run

    async def _run(
        self,
        active: ActiveTurn,
        task: ExternalTask,
        parent_id: str,
        parent_turn: ActiveTurn | None,
        stage: StageSetter,
    ) -> None:
        engine = self.threads.engine
        choice, definition = task.choice, task.choice.definition
        if not engine.asking.workspace_trusted():
            raise TurnFailure(UNTRUSTED.format(name=choice.name), ERROR_CODE)
        policy = engine.asking.effective_policy(active.thread.configuration or {})
        arguments = permission_args(definition, policy)
        stage(active, f"Asking to run {Path((definition.bin or '').strip()).name}.")
        verdict = await engine.asking.settle(active, launch_need(choice, arguments, self.workspace))
        if verdict.decision == "cancel":
            active.cancel("approvalCancelled")
            await anyio.lowlevel.checkpoint()  # the cancelled scope raises here
        if not verdict.approved:
            raise TurnFailure(f"Declined: {verdict.fallback or 'the user declined'}.", ERROR_CODE)
        directory = str(choice.directory.path)
        resume = None
        if choice.resumable:
            resume = await self.sessions.find(parent_id, choice.name, task.label, directory)
        result = await run_profile(
            definition,
            choice.name,
            task.task,
            choice.directory.path,
            resume_session_id=resume,
            permission_args=arguments,
            session=f"subagent-{active.thread_id}",
            on_stage=lambda text: stage(active, text),
        )
        if result.input_tokens or result.output_tokens:
            engine.items.usage(active, Usage(result.input_tokens, result.output_tokens))
            await engine.items.flush(active)
            if parent_turn is not None and parent_turn.record.completed_at is None:
                # The parent turn that started it still runs: it counts them too.
                parent_turn.input_tokens += result.input_tokens
                parent_turn.output_tokens += result.output_tokens
        if result.is_error:
            raise TurnFailure(result.text, ERROR_CODE)
        await engine.items.instant(active, "agentMessage", {"text": result.text})
        if choice.resumable and result.session_id:
            await self.sessions.record(
                parent_id, choice.name, task.label, directory, result.session_id
            )


def native_instructions(configuration: dict[str, Any], choice: ProfileChoice) -> dict[str, Any]:
    """A native child working in a specified directory is told so in its
    ``agentInstructions`` (its tools stay rooted at the workspace)."""
    if choice.external or not choice.specified:
        return configuration
    note = (
        f"Your working directory is {choice.directory.path}: run commands there (the shell "
        "tool's workdir) and keep your work inside it."
    )
    existing = str(configuration.get("agentInstructions") or "").strip()
    return {**configuration, "agentInstructions": f"{existing}\n\n{note}" if existing else note}


def thread_workspace(choice: ProfileChoice, parent_workspace: str) -> str:
    """The child thread's ``workspacePath``: its specified directory, else its parent's."""
    return str(choice.directory.path) if choice.specified else parent_workspace
