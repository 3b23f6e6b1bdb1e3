"""Automations over the wire (DotCraft parity 2, §3): every ``automation/*`` method
and its errors, the files they write as DotCraft keeps them, the gate. The runner
is tested in tests/cron/test_automations.py."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from appserver.protocol import errors as rpc_errors
from tests.support.client import RpcClient
from tests.support.cron_clock import epoch_ms
from tests.support.servers import ServerUnderTest, running_server
from tests.support.turns import new_thread

BUILTINS = [
    "scan-commits-for-bugs",
    "standup-digest",
    "skill-growth-suggestions",
    "weekly-report",
    "regression-alert",
    "ci-triage",
    "issue-triage",
    "watch-thread-replies",
    "classic-mini-game",
]
# Far enough ahead that the task never comes due while a test runs.
LATER = {"kind": "at", "atMs": epoch_ms("2100-01-01T00:00:00")}


def front_matter(path: Path) -> tuple[dict[str, Any], str]:
    """A Markdown file's YAML front matter and body."""
    text = path.read_text("utf-8")
    assert text.startswith("---\n"), text
    block, _, body = text[4:].partition("\n---\n")
    front = yaml.safe_load(block)
    assert isinstance(front, dict)
    return front, body


async def code_of(client: RpcClient, method: str, params: dict[str, Any]) -> tuple[int, str]:
    failure = await client.fail(method, params)
    return failure.code, f"{failure.message} {json.dumps(failure.data)}"


async def test_templates(server: ServerUnderTest) -> None:
    async with server.connect(initialize=False) as client:
        assert (await client.initialize())["capabilities"]["automations"] is True
        english = (await client.request("automation/template/list", {}))["templates"]
        assert [template["id"] for template in english] == BUILTINS
        for template in english:
            assert template["needsThreadBinding"] is (template["id"] == "watch-thread-replies")
            assert "isUser" not in template and "createdAt" not in template
            assert "{{ task.description }}" in template["workflowMarkdown"]
            assert template["defaultApprovalPolicy"] == "workspaceScope"
        assert english[0]["defaultSchedule"]["kind"] == "daily"
        assert english[0]["defaultSchedule"]["dailyHour"] == 9
        assert english[5]["defaultSchedule"] == {"kind": "every", "everyMs": 3_600_000}
        assert "defaultSchedule" not in english[8]
        assert english[8]["defaultWorkspaceMode"] == "isolated"
        chinese = (await client.request("automation/template/list", {"locale": "zh-CN"}))[
            "templates"
        ]
        assert [template["id"] for template in chinese] == BUILTINS
        assert chinese[3]["title"] != english[3]["title"] and "报告" in chinese[3]["title"]

        saved = (
            await client.request(
                "automation/template/save",
                {
                    "title": " Nightly check ",
                    "workflowMarkdown": "---\nmax_rounds: 2\n---\nCheck {{ task.title }}.",
                    "defaultSchedule": {"kind": "daily", "dailyHour": 3},
                    "needsThreadBinding": True,
                    "icon": "🌙",
                },
            )
        )["template"]
        assert re.fullmatch(r"user-[0-9a-f]{10}", saved["id"]), saved["id"]
        assert saved["isUser"] is True and saved["title"] == "Nightly check"
        assert saved["createdAt"] == saved["updatedAt"]
        listed = (await client.request("automation/template/list", {}))["templates"]
        assert listed[-1] == saved
        # As DotCraft keeps it: front matter, then the whole workflow.md.
        path = server.workspace / ".craft/automations/templates" / saved["id"] / "template.md"
        front, body = front_matter(path)
        assert front["id"] == saved["id"] and front["needs_thread_binding"] is True
        assert front["default_schedule"] == {"kind": "daily", "daily_hour": 3}
        assert body == "---\nmax_rounds: 2\n---\nCheck {{ task.title }}."
        # Saved again under its id: replaced, createdAt kept.
        again = (
            await client.request(
                "automation/template/save",
                {"id": saved["id"], "title": "Renamed", "workflowMarkdown": "Do it."},
            )
        )["template"]
        assert again["createdAt"] == saved["createdAt"] and again["title"] == "Renamed"

        for params, detail in [
            ({"title": " ", "workflowMarkdown": "x"}, "'title' is required."),
            ({"title": "t" * 201, "workflowMarkdown": "x"}, "200 characters or less"),
            ({"title": "t", "workflowMarkdown": " "}, "'workflowMarkdown' is required."),
            ({"id": "weekly-report", "title": "t", "workflowMarkdown": "x"}, "reserved"),
            ({"id": "../up", "title": "t", "workflowMarkdown": "x"}, "'id' must match"),
            (
                {"title": "t", "workflowMarkdown": "x", "defaultSchedule": {"kind": "weekly"}},
                "defaultSchedule.kind",
            ),
        ]:
            code, text = await code_of(client, "automation/template/save", params)
            assert code == rpc_errors.INVALID_PARAMS and detail in text, (params, text)
        for template_id, detail in [
            ("", "'id' is required."),
            ("ci-triage", "built-in"),
            ("x\n", "'id' must match"),
        ]:
            code, text = await code_of(client, "automation/template/delete", {"id": template_id})
            assert code == rpc_errors.INVALID_PARAMS and detail in text
        ok = {"ok": True}
        assert await client.request("automation/template/delete", {"id": saved["id"]}) == ok
        assert await client.request("automation/template/delete", {"id": "user-gone"}) == ok
        assert not path.parent.exists()


async def test_tasks(server: ServerUnderTest) -> None:
    async with server.connect() as client:
        created = await client.request(
            "automation/task/create",
            {
                "title": "Weekly report!",
                "description": "Summarise the week.",
                "schedule": LATER,
                "templateId": "weekly-report",
                "workspacePath": "/ignored",
            },
        )
        task_id = created["taskId"]
        assert re.fullmatch(r"weekly-report-\d{14}", task_id), task_id
        directory = server.workspace / ".craft" / "tasks" / task_id
        assert created["taskDirectory"] == str(directory)
        task = created["task"]
        assert task["id"] == task_id and task["title"] == "Weekly report!"
        assert task["status"] == "pending" and task["description"] == "Summarise the week."
        assert task["schedule"] == LATER and task["nextRunAt"].startswith("2100-01-01T00:00:00")
        assert task["approvalPolicy"] == "workspaceScope"

        # The files, as DotCraft keeps them; the workflow is the template's.
        front, body = front_matter(directory / "task.md")
        assert front["id"] == task_id and front["status"] == "pending"
        assert front["template_id"] == "weekly-report"
        assert front["schedule"] == {"kind": "at", "at_ms": LATER["atMs"]}
        assert front["approval_policy"] == "workspaceScope"
        assert body.strip() == "Summarise the week."
        workflow = (directory / "workflow.md").read_text("utf-8")
        assert workflow.startswith("---\nmax_rounds: 10\nworkspace: project\n---\n")
        assert "weekly report" in workflow and "{{ task.description }}" in workflow

        short = {key: value for key, value in task.items() if key != "description"}
        assert await client.request("automation/task/list", {}) == {"tasks": [short]}
        read = await client.request("automation/task/read", {"taskId": task_id})
        assert read == {**task, "task": task}

        # Bindings are checked (DotCraft's spec; its code took any id).
        thread_id = await new_thread(client)
        bound = await client.request(
            "automation/task/updateBinding",
            {"taskId": task_id, "threadBinding": {"threadId": thread_id}},
        )
        binding = {"threadId": thread_id, "mode": "run-in-thread"}
        assert bound["task"]["threadBinding"] == binding
        assert front_matter(directory / "task.md")[0]["thread_binding"] == {
            "thread_id": thread_id,
            "mode": "run-in-thread",
        }
        # Template id kept by the rewrite (DotCraft dropped it).
        assert front_matter(directory / "task.md")[0]["template_id"] == "weekly-report"
        unbound = await client.request(
            "automation/task/updateBinding", {"taskId": task_id, "threadBinding": None}
        )
        assert "threadBinding" not in unbound["task"]

        # A hand edit is seen at once: the files are the truth.
        text = (directory / "task.md").read_text("utf-8").replace("Weekly report!", "By hand")
        (directory / "task.md").write_text(text, "utf-8")
        assert (await client.request("automation/task/read", {"taskId": task_id}))[
            "title"
        ] == "By hand"

        await client.request("thread/archive", {"threadId": thread_id})
        unknown = {"threadId": "thread_19700101_zzzzzz"}
        cases: list[tuple[str, dict[str, Any], int, str]] = [
            ("automation/task/read", {"taskId": "nope"}, rpc_errors.TASK_NOT_FOUND, "nope"),
            ("automation/task/run", {"taskId": "nope"}, rpc_errors.TASK_NOT_FOUND, "nope"),
            ("automation/task/delete", {"taskId": "nope"}, rpc_errors.TASK_NOT_FOUND, "nope"),
            ("automation/task/run", {"taskId": " "}, rpc_errors.INVALID_PARAMS, "'taskId'"),
            ("automation/task/updateBinding", {}, rpc_errors.INVALID_PARAMS, "'taskId'"),
            ("automation/task/create", {"title": " "}, rpc_errors.INVALID_PARAMS, "required"),
            ("automation/task/create", {"title": "t" * 201}, rpc_errors.INVALID_PARAMS, "200"),
            (
                "automation/task/create",
                {"title": "t", "description": "d" * 10_001},
                rpc_errors.INVALID_PARAMS,
                "10000",
            ),
            (
                "automation/task/create",
                {"title": "t", "schedule": {"kind": "weekly"}},
                rpc_errors.INVALID_PARAMS,
                "'schedule.kind'",
            ),
            (
                "automation/task/create",
                {"title": "t", "schedule": {"kind": "every", "everyMs": 10}},
                rpc_errors.INVALID_PARAMS,
                "'schedule.everyMs'",
            ),
            (
                "automation/task/create",
                {"title": "t", "workspaceMode": "elsewhere"},
                rpc_errors.INVALID_PARAMS,
                "'workspaceMode'",
            ),
            (
                "automation/task/create",
                {"title": "t", "approvalPolicy": "sometimes"},
                rpc_errors.INVALID_PARAMS,
                "'approvalPolicy'",
            ),
            (
                "automation/task/create",
                {"title": "t", "threadBinding": unknown},
                rpc_errors.THREAD_BINDING_INVALID,
                "Thread not found",
            ),
            (
                "automation/task/updateBinding",
                {"taskId": task_id, "threadBinding": {"threadId": thread_id}},
                rpc_errors.THREAD_BINDING_INVALID,
                "archived",
            ),
            ("automation/task/create", [1], rpc_errors.INVALID_PARAMS, "params"),
        ]
        for method, params, code, detail in cases:
            got, text = await code_of(client, method, params)
            assert (got, detail in text) == (code, True), (method, params, text)
        assert len((await client.request("automation/task/list", {}))["tasks"]) == 1

        assert await client.request("automation/task/delete", {"taskId": task_id}) == {"ok": True}
        assert not directory.exists()
        assert await client.request("automation/task/list", {}) == {"tasks": []}


async def test_automations_can_be_switched_off(workspace: Path) -> None:
    (workspace / ".craft").mkdir()
    (workspace / ".craft" / "config.json").write_text('{"automations": {"enabled": false}}')
    async with running_server("memory", workspace) as sut, sut.connect(initialize=False) as client:
        assert "automations" not in (await client.initialize())["capabilities"]
        failure = await client.fail("automation/task/list", {})
        assert (failure.code, failure.message) == (
            rpc_errors.METHOD_NOT_FOUND,
            "Method not found: automation/*",
        )
        channels = (await client.request("channel/list"))["channels"]
        assert "automations" not in {channel["name"] for channel in channels}
