"""``review/start``: a code review as a turn of the thread (Codex's inline delivery).

The changes to review are gathered here by running git in the workspace
(``uncommittedChanges``: ``git diff HEAD`` and the untracked files' names;
``baseBranch``: ``git diff`` from the merge base with the branch to the working
tree; ``commit``: ``git show``), capped at :data:`DIFF_CAP` bytes, and put in
the turn's prompt, so the model reviews them without asking for a command.
Git runs only in a trusted workspace: a repository's config can name programs
git runs even to read (``core.fsmonitor``, diff drivers; docs/security.md).

The Codex client sees the turn opened by an ``enteredReviewMode`` item (what
is reviewed, in a few words) and closed by ``exitedReviewMode`` whose
``review`` is the final agent message, both before ``turn/completed``
(a :class:`~appserver.faces.codex.streams.Bracket` on that turn only).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio

from appserver.faces.codex.shapes import turn_key, turn_shape
from appserver.faces.codex.wire import CodexError, Message, text_param

if TYPE_CHECKING:
    from appserver.faces.codex.session import CodexSession

DIFF_CAP = 200 * 1024  # bytes of git output put in the prompt
GIT_SECONDS = 30.0
TRUNCATED = "\n[... the diff is cut here: it is longer than 200 KiB ...]\n"
# Read-only, no pager, no programs a diff could name, no prompt for credentials.
GIT = ("git", "--no-pager", "-c", "core.quotePath=false")
DIFF_FLAGS = ("--no-ext-diff", "--no-textconv", "--no-color")
GIT_ENV = {"GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0", "GIT_PAGER": "cat"}

REVIEWER = (
    "Act as a code reviewer of the changes below ({hint}). Report problems the changes "
    "introduce: bugs, security holes, data loss, performance, missing tests, unclear code. "
    "For each, name the file and line range and say briefly why it matters, the most "
    "severe first; skip nits. End with a verdict (is the change correct?) and how sure you "
    "are. Only report: change no files."
)


class ReviewMode:
    """The two Codex items that bracket a review turn."""

    def __init__(self, key: str, hint: str) -> None:
        self.key = key
        self.hint = hint

    def opening(self) -> list[Message]:
        return [{"type": "enteredReviewMode", "id": f"{self.key}:review", "review": self.hint}]

    def closing(self, finished: list[Message]) -> list[Message]:
        answers = [item for item in finished if item.get("type") == "agentMessage"]
        review = str(answers[-1].get("text", "")) if answers else ""
        return [{"type": "exitedReviewMode", "id": f"{self.key}:reviewed", "review": review}]


_MAX_REVISION = 1024  # a revision or branch name; far longer ones overflow git's argv


def _field(target: Message, name: str, what: str) -> str:
    value = target.get(name)
    if not isinstance(value, str):
        raise CodexError(f"Invalid request: missing field `{name}`")
    value = value.strip()  # what git is given: judged as given (" --output=x" is an option)
    if not value:
        raise CodexError(f"{what} must not be empty")
    if value.startswith("-"):  # never an option of git's
        raise CodexError(f"Invalid request: {what} {value!r} is not a git revision")
    if len(value) > _MAX_REVISION:
        raise CodexError(f"Invalid request: {what} is longer than {_MAX_REVISION} characters")
    return value


def hint_of(target: Any) -> str:
    """What ``target`` reviews, in Codex's few words; ``CodexError`` if it is not one."""
    if not isinstance(target, dict):
        raise CodexError("Invalid request: missing field `target`")
    kind = target.get("type")
    if kind == "uncommittedChanges":
        return "current changes"
    if kind == "baseBranch":
        return f"changes against '{_field(target, 'branch', 'branch')}'"
    if kind == "commit":
        sha = _field(target, "sha", "sha")
        title = target.get("title")
        short = f"commit {sha[:7]}"
        return f"{short}: {title}" if isinstance(title, str) and title else short
    if kind == "custom":
        instructions = target.get("instructions")
        if not isinstance(instructions, str):
            raise CodexError("Invalid request: missing field `instructions`")
        if not instructions.strip():
            raise CodexError("instructions must not be empty")
        return instructions.strip()
    expected = "`uncommittedChanges`, `baseBranch`, `commit`, `custom`"
    raise CodexError(f"Invalid request: unknown variant `{kind}`, expected one of {expected}")


async def git(workspace: str, *args: str, budget: int = DIFF_CAP) -> tuple[str, bool]:
    """``git args`` run in ``workspace``: its output, at most ``budget`` bytes
    (read no further), and whether it was cut. ``CodexError`` if git fails."""
    from subprocess import DEVNULL, PIPE

    from appserver.tools.environment import tool_environment
    from appserver.tools.groups import open_group_process

    env = {**tool_environment(), **GIT_ENV}
    output = bytearray()
    errors = bytearray()
    code = -1
    with anyio.move_on_after(GIT_SECONDS) as timer:
        process = await open_group_process(
            [*GIT, *args], cwd=workspace, env=env, stdin=DEVNULL, stdout=PIPE, stderr=PIPE
        )
        stdout, stderr = process.stdout, process.stderr
        assert stdout is not None and stderr is not None

        async def read_errors() -> None:
            # Beside stdout: git writing much to stderr must not stall on a full pipe.
            async for chunk in stderr:
                errors.extend(chunk[: max(0, 2000 - len(errors))])

        try:
            async with anyio.create_task_group() as readers:
                readers.start_soon(read_errors)
                async for chunk in stdout:
                    output += chunk
                    if len(output) > budget:
                        process.kill()  # enough: read no further
                        break
            code = await process.wait()
        finally:
            with anyio.CancelScope(shield=True):
                if process.returncode is None:
                    process.kill()
                await process.aclose()
    if timer.cancelled_caught:
        raise CodexError(f"git {args[0]} took longer than {GIT_SECONDS:g} s")
    cut = len(output) > budget
    if code != 0 and not cut:
        said = errors.decode(errors="replace").strip().splitlines()
        raise CodexError(f"git {args[0]} failed: {said[-1] if said else f'exit {code}'}")
    return bytes(output[:budget]).decode(errors="replace"), cut


async def gather(workspace: str, target: Message) -> tuple[str, str]:
    """The changes ``target`` names as text for the prompt, and how they were got."""
    kind = target["type"]
    parts: list[str] = []
    left = DIFF_CAP
    cut = False

    async def run(*args: str) -> str:
        nonlocal left, cut
        text, was_cut = await git(workspace, *args, budget=max(left, 0))
        left -= len(text.encode())
        cut = cut or was_cut
        return text

    if kind == "commit":
        how = f"git show {target['sha'].strip()}"
        parts.append(await run("show", *DIFF_FLAGS, target["sha"].strip(), "--"))
    else:
        base = "HEAD"
        if kind == "baseBranch":
            branch = target["branch"].strip()
            base = (await run("merge-base", "HEAD", branch)).strip()
            how = f"git diff $(git merge-base HEAD {branch}) (commits and uncommitted changes)"
        else:
            how = "git diff HEAD"
        parts.append(await run("diff", *DIFF_FLAGS, base, "--"))
        untracked = await run("ls-files", "--others", "--exclude-standard")
        if untracked.strip():
            parts.append(f"\nUntracked files (not in the diff):\n{untracked}")
    text = "".join(parts) if any(p.strip() for p in parts) else "(no changes)\n"
    return (text + TRUNCATED if cut else text), how


async def prompt_for(session: CodexSession, target: Message, hint: str) -> str:
    """The review turn's prompt: the reviewer's brief and the changes (or instructions)."""
    brief = REVIEWER.format(hint=hint)
    if target["type"] == "custom":
        return f"{brief}\n\nWhat to review:\n{hint}"
    if not session.runtime.workspace_trusted():
        raise CodexError(
            "review/start runs git, which runs programs a repository's config names: "
            "trust the workspace first (--trust-workspace or workspace/trust)"
        )
    changes, how = await gather(session.workspace, target)
    return f"{brief}\n\nThe changes (`{how}`):\n```diff\n{changes}```"


async def review_start(session: CodexSession, params: Message) -> Message:
    """``review/start {threadId, target, delivery?}`` -> ``{turn, reviewThreadId}``."""
    from appserver.protocol.turns import TextPart

    thread_id = text_param(params, "threadId", required=True)
    assert thread_id is not None
    delivery = params.get("delivery")
    if delivery not in (None, "inline"):  # Codex 0.169 knows no other delivery
        raise CodexError(f"Invalid request: unknown variant `{delivery}`, expected `inline`")
    target = params.get("target")
    hint = hint_of(target)
    assert isinstance(target, dict)
    await session.streams.watch(thread_id)  # an unknown thread is refused before git runs
    prompt = await prompt_for(session, target, hint)
    brackets = session.streams.brackets
    opened: list[tuple[str, str]] = []

    def bracket(active: Any, _user: Any) -> None:
        # Before the turn is stored, so before its turn/started is streamed.
        key = (thread_id, active.record.id)
        brackets[key] = ReviewMode(turn_key(*key), hint)
        opened.append(key)

    try:
        active = await session.runtime.turns.start(
            thread_id, [TextPart(type="text", text=prompt)], origin=session.seat, prepare=bracket
        )
    except BaseException:
        for key in opened:
            brackets.pop(key, None)
        raise
    return {"turn": turn_shape(thread_id, active.record.id, "running"), "reviewThreadId": thread_id}
