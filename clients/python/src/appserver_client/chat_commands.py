"""The chat's settings commands, like Codex's TUI: ``/model`` (list the
provider's models, switch this thread's), ``/status`` (what the server works
on and with, and this thread's own settings), ``/grants`` (the approvals
remembered for good, from an ``[a]lways`` answer) and ``/revoke N``.

Each reads the server anew (``model/list``, ``workspace/status``,
``thread/read``, ``grant/list``) so what it prints is true now, and writes
through ``line``: server text is shown with hidden characters revealed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from appserver_client.chat_exact import reveal
from appserver_client.client import AppServerClient

Line = Callable[[str], None]


class SettingsCommands:
    """``/model``, ``/status``, ``/grants`` and ``/revoke`` for one chat."""

    def __init__(self, client: AppServerClient, line: Line) -> None:
        self.client = client
        self.line = line
        self.grants: list[dict[str, Any]] = []  # as /grants last listed them
        self.models: list[str] = []  # as /model last listed them

    async def thread_config(self, thread_id: str) -> dict[str, Any]:
        """The thread's own overrides (``thread/config/update`` replaces them all)."""
        thread = (await self.client.thread_read(thread_id=thread_id))["thread"]
        return dict(thread.get("configuration") or {})

    async def model(self, thread_id: str, choice: str) -> None:
        """List the models (``choice`` empty), or switch the thread to one: a
        number from the list or an id."""
        status = await self.client.workspace_status()
        config = await self.thread_config(thread_id)
        current = str(config.get("model") or status["model"])
        listing = await self.client.model_list()
        known = [str(item["id"]) for item in listing.get("models") or []]
        if not listing["success"]:
            reason = reveal(str(listing.get("errorMessage") or listing.get("errorCode") or "?"))
            self.line(f"Could not list the models of {reveal(status['provider'])}: {reason}")
        if not choice:
            self.models = known
            self.line(f"Models of {reveal(status['provider'])} (* this thread's):")
            for number, name in enumerate(known, 1):
                mark = "*" if name == current else " "
                self.line(f" {mark}{number:>2}) {reveal(name)}")
            if current not in known:
                self.line(f"  This thread uses {reveal(current)}.")
            self.line("Switch with /model N or /model NAME.")
            return
        # The numbers of the last listing; without one yet, of this one (as it would show).
        numbered = self.models or known
        if choice.isdigit() and 1 <= int(choice) <= len(numbered):
            choice = numbered[int(choice) - 1]
        if listing["success"] and choice not in known:
            self.line(f"No model {reveal(choice)!r} here; /model lists them.")
            return
        config["model"] = choice
        await self.client.thread_config_update(thread_id=thread_id, config=config)  # type: ignore[arg-type]
        self.line(f"This thread now uses {reveal(choice)} (was {reveal(current)}).")

    async def status(self, thread_id: str | None) -> None:
        """The workspace, provider, model, endpoint, approval policy and trust,
        with what this thread sets itself."""
        status = await self.client.workspace_status()
        config = await self.thread_config(thread_id) if thread_id else {}
        trust = "trusted" if status["trusted"] else "not trusted (its own files run no code)"

        def own(key: str, default: str) -> str:
            value = config.get(key)
            if value:
                return f"{reveal(str(value))} (this thread)"
            return f"{reveal(default)} (the workspace's default)"

        rows = [
            ("Workspace", f"{reveal(status['workspacePath'])}, {trust}"),
            ("Provider", reveal(status["provider"])),
            ("Model", own("model", status["model"])),
            ("Endpoint", reveal(str(status.get("endpoint") or "(none: it runs here)"))),
            ("Approvals", own("approvalPolicy", status["defaultApprovalPolicy"])),
            ("Thread", reveal(thread_id or "(none)")),
            ("Server", f"appserver {reveal(status['version'])}"),
        ]
        for name, value in rows:
            self.line(f"  {name + ':':<11}{value}")

    async def list_grants(self) -> None:
        """The approvals remembered for good, numbered for ``/revoke N``."""
        result = await self.client.grant_list()
        self.grants = [dict(grant) for grant in result["grants"]]
        if not self.grants:
            self.line("No approvals are remembered. An [a]lways answer remembers one.")
            return
        self.line("Remembered approvals (/revoke N forgets one):")
        for number, grant in enumerate(self.grants, 1):
            self.line(f" {number:>2}) {describe_grant(grant)}")
        if not result["honoured"]:
            self.line("  (not used while the workspace is not trusted: such calls ask again)")

    async def revoke(self, choice: str) -> None:
        """Forget grant ``choice`` (its number in ``/grants``)."""
        if not self.grants:
            self.grants = [dict(grant) for grant in (await self.client.grant_list())["grants"]]
        if not (choice.isdigit() and 1 <= int(choice) <= len(self.grants)):
            known = len(self.grants)
            self.line(
                f"Usage: /revoke N, with N from 1 to {known} (/grants)."
                if known
                else ("No approvals are remembered.")
            )
            return
        grant = self.grants[int(choice) - 1]
        result = await self.client.grant_revoke(
            kind=str(grant["kind"]), operation=str(grant["operation"]), target=str(grant["target"])
        )
        said = "Revoked" if result["revoked"] else "Already gone"
        self.line(f"{said}: {describe_grant(grant)}. Such calls ask again.")
        self.grants = []  # the numbers changed: /grants lists them anew


def describe_grant(grant: dict[str, Any]) -> str:
    """``shell `make test` in /w (since 2026-11-21 10:00)``."""
    kind = reveal(str(grant.get("kind", "?")))
    operation = reveal(str(grant.get("operation", "")))
    target = reveal(str(grant.get("target", "")))
    when = str(grant.get("createdAt", ""))[:16].replace("T", " ")
    what = (
        f"{kind} `{operation}` in {target}"
        if kind.startswith("shell")
        else (f"{kind} {operation} {target}")
    )
    return f"{what} (since {reveal(when)})" if when else what
