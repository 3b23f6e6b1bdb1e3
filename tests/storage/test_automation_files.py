"""Automation files as DotCraft writes them are read here, and what is written here
DotCraft's reader reads: ``task.md`` from its ``create`` (quoted strings, ``null``s)
and from its later rewrites (YamlDotNet, 7-digit fractions, offsets), and
``template.md``."""

from __future__ import annotations

from pathlib import Path

import yaml

from appserver.storage.automation_tasks import TaskFiles, iso_from_ms
from appserver.storage.automation_templates import TemplateFiles

# What DotCraft's automation/task/create writes (by hand).
CREATED = """---
id: "weekly-report-20260505100000"
title: "Weekly \\"report\\""
status: pending
created_at: "2026-05-05T10:00:00.0000000+00:00"
updated_at: "2026-05-05T10:00:00.0000000+00:00"
thread_id: null
agent_summary: null
approval_policy: "workspaceScope"
template_id: "weekly-report"
schedule:
  kind: "daily"
  daily_hour: 9
  daily_minute: 0
  tz: "Asia/Shanghai"
thread_binding:
  thread_id: "thread_20260505_abcdef"
  mode: "run-in-thread"
---

Summarise the week.
Line two."""

# What its file store writes after a run (YamlDotNet, nulls left out).
REWRITTEN = """---
id: hourly
title: yes
status: Running
created_at: 2026-05-05T10:00:00.0000000+00:00
updated_at: 2026-05-05T18:05:00.1234567+08:00
thread_id: thread_20260505_abcdef
agent_summary: Checked 3 builds.
approval_policy: autoApprove
schedule:
  kind: every
  every_ms: 3600000
  hour: 4
next_run_at: 2026-05-05T11:00:00.0000000+00:00
---
Check the builds.
"""

TEMPLATE = """---
id: nightly
title: Nightly
needs_thread_binding: true
default_schedule:
  kind: daily
  hour: 3
  minute: 30
created_at: 2026-05-05T10:00:00.0000000+00:00
---
---
max_rounds: 2
---
Check {{ task.title }}."""


async def test_dotcraft_task_files_are_read_and_rewritten_for_it(tmp_path: Path) -> None:
    craft = tmp_path / ".craft"
    for name, text in (("weekly", CREATED), ("hourly", REWRITTEN)):
        (craft / "tasks" / name).mkdir(parents=True)
        (craft / "tasks" / name / "task.md").write_text(text)
    files = TaskFiles(craft, now_ms=lambda: 1_780_000_000_000)
    hourly, weekly = await files.read_all()  # by directory name

    assert weekly.id == "weekly-report-20260505100000" and weekly.title == 'Weekly "report"'
    assert (weekly.status, weekly.thread_id, weekly.agent_summary) == ("pending", None, None)
    assert weekly.created_at == "2026-05-05T10:00:00.000Z"
    assert weekly.description == "Summarise the week.\nLine two."
    assert weekly.schedule is not None and weekly.schedule.kind == "daily"
    assert (weekly.schedule.daily_hour, weekly.schedule.tz) == (9, "Asia/Shanghai")
    assert weekly.thread_binding is not None
    assert weekly.thread_binding.thread_id == "thread_20260505_abcdef"

    assert (hourly.title, hourly.status) == ("yes", "running")  # YAML 1.2: `yes` is text
    assert hourly.updated_at == "2026-05-05T10:05:00.123Z"
    assert hourly.next_run_at_ms is not None
    assert iso_from_ms(hourly.next_run_at_ms) == "2026-05-05T11:00:00.000Z"
    assert hourly.schedule is not None and hourly.schedule.every_ms == 3_600_000
    assert hourly.agent_summary == "Checked 3 builds."

    # Rewritten: DotCraft's keys in its order, the kept template_id, the body as it was.
    weekly.status = "completed"
    weekly.agent_summary = "Two lines\n---\nof summary"
    assert await files.save(weekly)
    text = (craft / "tasks" / "weekly" / "task.md").read_text()
    block, _, body = text[4:].partition("\n---\n")
    front = yaml.safe_load(block)
    assert list(front) == [
        "id",
        "title",
        "status",
        "created_at",
        "updated_at",
        "agent_summary",
        "approval_policy",
        "schedule",
        "thread_binding",
        "template_id",
    ]
    assert front["agent_summary"] == "Two lines\n---\nof summary"
    assert front["template_id"] == "weekly-report"
    assert front["updated_at"] == iso_from_ms(1_780_000_000_000)
    # No line of the block may end in `---`: DotCraft's pattern would end it there.
    assert not any(line.rstrip().endswith("---") for line in block.splitlines())
    assert body == "\nSummarise the week.\nLine two.\n"
    again = await files.find(weekly.id)
    assert again is not None and again.description == weekly.description


async def test_dotcraft_template_files_are_read(tmp_path: Path) -> None:
    craft = tmp_path / ".craft"
    (craft / "automations" / "templates" / "nightly").mkdir(parents=True)
    (craft / "automations" / "templates" / "nightly" / "template.md").write_text(TEMPLATE)
    (craft / "automations" / "templates" / "bad id").mkdir()
    (craft / "automations" / "templates" / "bad id" / "template.md").write_text("---\n---\nx")
    [template] = await TemplateFiles(craft).read_all()
    assert (template.id, template.title, template.needs_thread_binding) == (
        "nightly",
        "Nightly",
        True,
    )
    assert template.default_schedule is not None
    assert (template.default_schedule.daily_hour, template.default_schedule.daily_minute) == (3, 30)
    assert template.workflow_markdown == "---\nmax_rounds: 2\n---\nCheck {{ task.title }}."
    assert template.created_at == "2026-05-05T10:00:00.000Z" and template.is_user
