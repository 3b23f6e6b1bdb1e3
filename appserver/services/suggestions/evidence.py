"""What the welcome suggestions are made from, and what of the model's answer is kept.

DotCraft's rules (parity 2 §4), in pure functions:

* **Snippets**: the user messages of the workspace's 12 most recent threads
  (not archived, not internal, not SubAgent children), whitespace collapsed,
  15 to 300 characters, not a short slash command, not an acknowledgement
  ("ok", "thanks", "继续"); ranked by :func:`specificity` (file names, paths,
  backticks, identifiers, ``@``/``#`` references), duplicates dropped ignoring
  case, at most 20. There is no memory file here (``MEMORY.md``): the evidence is
  sufficient with at least 2 snippets.
* **Fingerprint**: SHA-256 (lower-case hex) over the workspace path, the item
  count, each thread's ``id|lastActiveAt`` and the snippets.
* **Kept items**: each field on one line and cut (title 80, prompt 500, reason
  200); an item without title or prompt, or with no specificity signal at all,
  is dropped; exactly the number asked for must survive, or the refresh fails.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from appserver.protocol.suggestions import WelcomeSuggestion

RECENT_THREADS = 12
TURNS_PER_THREAD = 8  # the newest turns of each thread are read
MAX_SNIPPETS = 20
MIN_SNIPPET, MAX_SNIPPET = 15, 300
MIN_SNIPPETS = 2
TITLE_CHARS, PROMPT_CHARS, REASON_CHARS = 80, 500, 200

ACKNOWLEDGEMENTS = frozenset(
    {
        "ok", "okay", "k", "yes", "no", "yep", "nope", "sure", "thanks", "thank you",
        "thanks a lot", "thank you very much", "thx", "ty", "great", "good", "nice", "cool",
        "lgtm", "looks good", "looks good to me", "go on", "go ahead", "continue", "done",
        "继续", "好的", "好", "谢谢", "可以", "行",
    }
)  # fmt: skip

_SIGNALS = (
    re.compile(r"\b[\w-]+\.[A-Za-z][A-Za-z0-9]{0,7}\b"),  # a file name: parser.py, README.md
    re.compile(r"\w/\w|\\\w"),  # a path: src/app, C:\\x
    re.compile(r"`[^`]+`"),  # code in backticks
    re.compile(r"\b[a-z]+[A-Z]\w*\b"),  # camelCase
    re.compile(r"\b[A-Z][a-z]+[A-Z]\w*\b"),  # PascalCase with two words
    re.compile(r"\b[A-Za-z]+_[A-Za-z0-9_]+\b"),  # snake_case
    re.compile(r"\b[a-z]+-[a-z]+-[a-z-]+\b|\b[a-z]+-[a-z]+\(\)"),  # kebab-case-names
    re.compile(r"(?:^|\s)[@#][\w./-]+"),  # @file, #123
)


def one_line(text: str) -> str:
    """``text`` with every run of whitespace one space, trimmed."""
    return " ".join(text.split())


def specificity(text: str) -> int:
    """How many kinds of concrete reference ``text`` makes (0: none)."""
    return sum(1 for signal in _SIGNALS if signal.search(text))


def snippet_of(text: str) -> str | None:
    """The user message ``text`` as evidence, or ``None`` when it says too little."""
    line = one_line(text)
    if not MIN_SNIPPET <= len(line) <= MAX_SNIPPET:
        return None
    if line.startswith("/") and len(line.split()) <= 3:
        return None  # a slash command, perhaps with an argument
    bare = re.sub(r"[\s\W_]+$", "", line.lower()).strip()
    if bare in ACKNOWLEDGEMENTS:
        return None
    return line


@dataclass
class Evidence:
    """What one refresh is made from."""

    workspace: str
    threads: list[tuple[str, str]] = field(default_factory=list)  # (id, lastActiveAt)
    snippets: list[str] = field(default_factory=list)

    @property
    def sufficient(self) -> bool:
        return len(self.snippets) >= MIN_SNIPPETS

    def fingerprint(self, max_items: int) -> str:
        digest = hashlib.sha256()
        for part in (self.workspace, f"maxItems:{max_items}"):
            digest.update(part.encode() + b"\n")
        for thread_id, last_active in self.threads:
            digest.update(f"{thread_id}|{last_active}\n".encode())
        for snippet in self.snippets:
            digest.update(snippet.encode() + b"\n")
        return digest.hexdigest()


def rank_snippets(messages: Iterable[str]) -> list[str]:
    """The best :data:`MAX_SNIPPETS` snippets of ``messages`` (newest first in,
    most specific first out; ties keep their order), duplicates dropped."""
    seen: set[str] = set()
    found: list[str] = []
    for message in messages:
        snippet = snippet_of(message)
        if snippet is None or snippet.casefold() in seen:
            continue
        seen.add(snippet.casefold())
        found.append(snippet)
    found.sort(key=specificity, reverse=True)  # stable: recency breaks ties
    return found[:MAX_SNIPPETS]


def _cut(value: Any, limit: int) -> str:
    text = one_line(value) if isinstance(value, str) else ""
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def kept_items(arguments: Mapping[str, Any], max_items: int) -> list[WelcomeSuggestion] | None:
    """The usable items of one ``EmitWelcomeSuggestions`` call, or ``None`` when
    fewer than ``max_items`` are usable (more are cut to ``max_items``)."""
    raw = arguments.get("items")
    items: list[WelcomeSuggestion] = []
    for entry in raw if isinstance(raw, list) else []:
        if not isinstance(entry, dict):
            continue
        title = _cut(entry.get("title"), TITLE_CHARS)
        prompt = _cut(entry.get("prompt"), PROMPT_CHARS)
        reason = _cut(entry.get("reason"), REASON_CHARS)
        if not title or not prompt or not specificity(f"{title} {prompt} {reason}"):
            continue
        items.append(WelcomeSuggestion(title=title, prompt=prompt, reason=reason))
    return items[:max_items] if len(items) >= max_items else None


def best_answer(
    calls: Sequence[Mapping[str, Any]], max_items: int
) -> list[WelcomeSuggestion] | None:
    """The last call whose items are usable (a model may correct itself)."""
    for arguments in reversed(calls):
        items = kept_items(arguments, max_items)
        if items is not None:
            return items
    return None


INSTRUCTIONS = """\
You write the suggestions a coding assistant shows when its user opens a new, empty \
conversation in this workspace: {count} short, concrete next steps the user is likely \
to want, grounded in what they recently asked for. Each names the files, functions, \
commands or issues it is about (a suggestion that could fit any project is useless). \
Hand them over by calling the EmitWelcomeSuggestions tool exactly once with exactly \
{count} items: a title (a few words), the prompt (what the user would send, written \
as the user) and the reason (one short sentence). Do not answer in text."""

PROMPT_HEAD = """\
Suggest exactly {count} next steps for a new conversation in the workspace {workspace}.
What the user recently asked for in this workspace, most specific first:
"""


def instructions(count: int) -> str:
    """The helper thread's instructions."""
    return INSTRUCTIONS.format(count=count)


def prompt(evidence: Evidence, count: int) -> str:
    """The helper turn's message: the request and the evidence, one ``- `` line each."""
    head = PROMPT_HEAD.format(count=count, workspace=evidence.workspace)
    return head + "".join(f"- {snippet}\n" for snippet in evidence.snippets)
