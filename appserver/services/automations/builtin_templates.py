# ruff: noqa: RUF001 (Chinese text is written with its own full-width punctuation)
"""The nine built-in automation templates (DotCraft's ids, icons, categories and
schedules; the words are ours), in English and in Chinese.

A template's ``workflowMarkdown`` is the whole ``workflow.md`` a task made from
it gets. Daily schedules are in the server's own time zone, as DotCraft's are.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from appserver.storage.automation_tasks import ScheduleRecord
from appserver.storage.automation_templates import TemplateRecord

_CHINESE = ("zh", "zh-cn", "zh-hans")
_DAY_MS = 24 * 60 * 60 * 1000


@dataclass(frozen=True)
class _Words:
    title: str
    description: str
    default_title: str
    default_description: str
    role: str  # the workflow's opening line: what the agent is there for


@dataclass(frozen=True)
class _Builtin:
    id: str
    icon: str
    category: str
    mode: str  # project | isolated
    schedule: tuple[str, int, int] | None  # ("daily", hour, minute) or ("every", ms, 0)
    english: _Words
    chinese: _Words
    needs_thread_binding: bool = False


_BUILTINS = (
    _Builtin(
        "scan-commits-for-bugs",
        "🐛",
        "review",
        "project",
        ("daily", 9, 0),
        _Words(
            "Look for bugs in recent commits",
            "Each morning, read the commits since the last run and point out changes that "
            "look wrong, with the smallest fix.",
            "Look for bugs in recent commits",
            "Read the commits made since this task last ran (the last 24 hours the first "
            "time). For each one that looks risky, say what could break and propose the "
            "smallest fix.",
            "You review recent commits for bugs: report what looks wrong and how to fix it "
            "with the least change.",
        ),
        _Words(
            "检查近期提交中的缺陷",
            "每天早上阅读上次运行以来的提交，指出看起来有问题的改动，并给出最小的修复。",
            "检查近期提交中的缺陷",
            "阅读自本任务上次运行以来的提交（首次运行时为最近 24 小时）。对每个有风险的提交，"
            "说明可能出什么问题，并提出最小的修复。",
            "你负责检查近期提交中的缺陷：报告看起来有问题的地方，以及改动最小的修复方法。",
        ),
    ),
    _Builtin(
        "standup-digest",
        "📝",
        "digest",
        "project",
        ("daily", 9, 0),
        _Words(
            "Standup notes from yesterday's git",
            "Turn yesterday's branches, commits and pull requests into a few lines for the "
            "standup.",
            "Standup notes",
            "Look at yesterday's git activity (branches, commits, pull requests). Write a "
            "short paragraph for the standup, then list what is still open.",
            "You write standup notes from the repository's history of the previous day.",
        ),
        _Words(
            "根据昨天的 Git 记录写站会笔记",
            "把昨天的分支、提交和拉取请求整理成几句站会发言。",
            "站会笔记",
            "查看昨天的 Git 活动（分支、提交、拉取请求）。"
            "写一段简短的站会发言，再列出仍未完成的事项。",
            "你根据仓库前一天的历史记录撰写站会笔记。",
        ),
    ),
    _Builtin(
        "skill-growth-suggestions",
        "📈",
        "insight",
        "project",
        ("every", 7 * _DAY_MS, 0),
        _Words(
            "What to get better at, from recent reviews",
            "Once a week, read recent pull requests and review comments and suggest one or "
            "two things to practise.",
            "What should I practise next?",
            "Go through my recent pull requests and the review comments on them. Name one or "
            "two concrete skills to work on this week, and say what in the reviews points to "
            "them.",
            "You coach the user from their own recent pull requests and reviews.",
        ),
        _Words(
            "从近期评审中找出可提升之处",
            "每周一次，阅读近期的拉取请求和评审意见，建议一两项值得练习的内容。",
            "接下来该练习什么？",
            "浏览我近期的拉取请求及其评审意见。指出本周值得提升的一两项具体技能，"
            "并说明评审中的哪些内容指向它们。",
            "你根据用户近期的拉取请求和评审意见给出成长建议。",
        ),
    ),
    _Builtin(
        "weekly-report",
        "📅",
        "digest",
        "project",
        ("every", 7 * _DAY_MS, 0),
        _Words(
            "Weekly report",
            "Once a week, gather merged pull requests, releases and incidents into one short "
            "report.",
            "Weekly report",
            "Write this week's report: pull requests merged, releases shipped, incidents "
            "handled. Group it by area and keep it under 300 words.",
            "You write a concise weekly report of the project's changes, releases and incidents.",
        ),
        _Words(
            "每周报告",
            "每周一次，把合并的拉取请求、发布和事故汇总成一份简短报告。",
            "每周报告",
            "撰写本周报告：合并的拉取请求、完成的发布、处理的事故。按领域分组，控制在 300 字以内。",
            "你为项目撰写简明的周报，涵盖变更、发布和事故。",
        ),
    ),
    _Builtin(
        "regression-alert",
        "📉",
        "review",
        "project",
        ("daily", 10, 0),
        _Words(
            "Catch regressions early",
            "Each day, compare recent changes with benchmarks and traces and warn before a "
            "regression ships.",
            "Regression watch",
            "Check the changes since the last run against the benchmarks, traces or tests the "
            "repository has. Report anything that got slower or broke, with the change that "
            "likely caused it.",
            "You watch for performance and behaviour regressions in recent changes.",
        ),
        _Words(
            "及早发现回归",
            "每天把近期改动与基准测试和追踪数据对照，在回归发布之前发出警告。",
            "回归监测",
            "将上次运行以来的改动与仓库中的基准测试、追踪数据或测试对照。报告任何变慢或出错的地方，"
            "以及可能导致问题的改动。",
            "你负责发现近期改动中的性能与行为回归。",
        ),
    ),
    _Builtin(
        "ci-triage",
        "🛠️",
        "review",
        "project",
        ("every", _DAY_MS // 24, 0),
        _Words(
            "Sort out CI failures",
            "Every hour, group recent CI failures by cause and suggest the smallest fix for each.",
            "CI failure triage",
            "Collect the recent CI failures, group them by root cause and propose the "
            "smallest fix for each group. Leave out one-off flaky failures.",
            "You triage CI failures: cluster them by cause and propose fixes; flaky one-offs "
            "are ignored.",
        ),
        _Words(
            "梳理 CI 失败",
            "每小时把近期的 CI 失败按原因分组，并为每组建议最小的修复。",
            "CI 失败分诊",
            "收集近期的 CI 失败，按根本原因分组，并为每组提出最小的修复。忽略偶发的不稳定失败。",
            "你负责分诊 CI 失败：按原因归类并提出修复；忽略偶发的不稳定失败。",
        ),
    ),
    _Builtin(
        "issue-triage",
        "🎯",
        "review",
        "project",
        ("every", _DAY_MS // 24, 0),
        _Words(
            "Triage new issues",
            "Every hour, read newly opened issues and suggest an owner, a priority and labels.",
            "Issue triage",
            "For each issue opened since the last run, suggest who should own it, how urgent "
            "it is and which labels fit. Quote the lines of the issue that support each "
            "suggestion.",
            "You triage new issues and back every suggestion with a quote from the issue.",
        ),
        _Words(
            "分诊新问题",
            "每小时阅读新提交的问题，建议负责人、优先级和标签。",
            "问题分诊",
            "对上次运行以来新开的每个问题，建议由谁负责、紧急程度如何以及适合哪些标签。"
            "引用问题中支持每条建议的原文。",
            "你负责分诊新问题，并用问题中的原文支撑每条建议。",
        ),
    ),
    _Builtin(
        "watch-thread-replies",
        "💬",
        "watch",
        "project",
        ("every", 5 * 60 * 1000, 0),
        _Words(
            "Answer new replies in a thread",
            "Every few minutes, look for new messages from the user in the bound thread and "
            "answer them.",
            "Thread watcher",
            "See whether the user wrote anything in this thread since the last check. If so, "
            "answer it; if not, say nothing.",
            "You keep an eye on this thread and answer the user's new messages; when there "
            "are none you stay quiet.",
        ),
        _Words(
            "回复会话中的新消息",
            "每隔几分钟查看绑定会话中用户的新消息并作出回应。",
            "会话值守",
            "查看自上次检查以来用户是否在本会话中写了新内容。如果有，就回应；如果没有，就什么都不说。",
            "你值守本会话，回应用户的新消息；没有新消息时保持安静。",
        ),
        needs_thread_binding=True,
    ),
    _Builtin(
        "classic-mini-game",
        "🎮",
        "creative",
        "isolated",
        None,
        _Words(
            "Make a small classic game",
            "A one-off creative task: build a tiny classic game such as Pong, Snake or Breakout.",
            "Build a mini-game",
            "Pick a classic arcade game (Pong, Snake or Breakout), write a small playable "
            "version and explain in a paragraph how to run it.",
            "You build a small, playable classic game and explain how to run it.",
        ),
        _Words(
            "做一个经典小游戏",
            "一次性的创意任务：做一个小小的经典游戏，比如乒乓、贪吃蛇或打砖块。",
            "做一个小游戏",
            "选一个经典街机游戏（乒乓、贪吃蛇或打砖块），写出一个可玩的小版本，并用一段话说明如何运行。",
            "你制作一个可以玩的经典小游戏，并说明如何运行它。",
        ),
    ),
)

BUILTIN_IDS = frozenset(builtin.id for builtin in _BUILTINS)

_BODY = {
    "en": (
        "## Task\n\n- **ID**: {{ task.id }}\n- **Title**: {{ task.title }}\n\n"
        "## What to do\n\n{{ task.description }}\n\n"
        "When you are done, call the **`CompleteLocalTask`** tool with a one-line summary.\n"
    ),
    "zh": (
        "## 任务\n\n- **ID**: {{ task.id }}\n- **标题**: {{ task.title }}\n\n"
        "## 要做的事\n\n{{ task.description }}\n\n"
        "完成后，调用 **`CompleteLocalTask`** 工具并附上一句话总结。\n"
    ),
}


def local_zone() -> str:
    """The server's IANA time zone (``TZ``, else ``/etc/localtime``), else ``UTC``."""
    candidates = [os.environ.get("TZ", "").strip().lstrip(":")]
    with contextlib.suppress(OSError):
        candidates.append(os.readlink("/etc/localtime").partition("zoneinfo/")[2])
    for name in candidates:
        if name:
            try:
                ZoneInfo(name)
            except (ZoneInfoNotFoundError, ValueError):
                continue
            return name
    return "UTC"


def _schedule(spec: tuple[str, int, int] | None) -> ScheduleRecord | None:
    if spec is None:
        return None
    kind, first, second = spec
    if kind == "daily":
        return ScheduleRecord("daily", daily_hour=first, daily_minute=second, tz=local_zone())
    return ScheduleRecord("every", every_ms=first)


def builtin_templates(locale: str | None) -> list[TemplateRecord]:
    """The built-ins in ``locale``'s language (``zh``, ``zh-CN``, ``zh-Hans``: Chinese)."""
    language = "zh" if (locale or "").strip().lower() in _CHINESE else "en"
    templates = []
    for builtin in _BUILTINS:
        words = builtin.chinese if language == "zh" else builtin.english
        workflow = (
            f"---\nmax_rounds: 10\nworkspace: {builtin.mode}\n---\n\n{words.role}\n\n"
            + _BODY[language]
        )
        templates.append(
            TemplateRecord(
                id=builtin.id,
                title=words.title,
                workflow_markdown=workflow,
                description=words.description,
                icon=builtin.icon,
                category=builtin.category,
                default_schedule=_schedule(builtin.schedule),
                default_workspace_mode=builtin.mode,
                default_approval_policy="workspaceScope",
                needs_thread_binding=builtin.needs_thread_binding,
                default_title=words.default_title,
                default_description=words.default_description,
            )
        )
    return templates
