"""Markdown files with a YAML front matter block, as DotCraft writes them
(``task.md``, ``workflow.md``, ``template.md``)::

    ---
    id: weekly-report
    title: Weekly report
    ---
    The body.

YAML is read as DotCraft's YamlDotNet reads it: ``yes``/``no``/``on``/``off``
and timestamps stay strings (PyYAML's YAML 1.1 resolvers would turn them into
booleans and datetimes). Written front matter is plain block YAML with
``snake_case`` keys, so either program reads what the other wrote.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

# The block ends at the first line that is only `---`.
_FRONT_MATTER = re.compile(
    r"\A---[ \t]*\r?\n(?P<yaml>(?:.*?\r?\n)??)---[ \t]*(?:\r?\n|\Z)(?P<body>.*)\Z", re.S
)
_BOOL = "tag:yaml.org,2002:bool"
_TIMESTAMP = "tag:yaml.org,2002:timestamp"


class FrontMatterError(ValueError):
    """The text does not start with a front matter block, or its YAML is not a mapping."""


class _Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2's booleans only, and no timestamps."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, pattern) for tag, pattern in resolvers if tag not in (_BOOL, _TIMESTAMP)]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    _BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


def split(text: str) -> tuple[dict[str, Any], str] | None:
    """The front matter (parsed) and the body after it; ``None`` when the text
    has no front matter. Raises :class:`FrontMatterError` for YAML that is
    broken or not a mapping."""
    match = _FRONT_MATTER.match(text)
    if match is None:
        return None
    try:
        parsed = yaml.load(match.group("yaml"), Loader=_Loader)  # a SafeLoader
    except yaml.YAMLError as exc:
        raise FrontMatterError(f"the front matter is not valid YAML: {exc}") from None
    except RecursionError:  # PyYAML composes nested collections recursively
        raise FrontMatterError("the front matter is nested too deeply") from None
    if parsed is None:
        parsed = {}
    if not isinstance(parsed, dict):
        raise FrontMatterError("the front matter is not a mapping")
    return {str(key): value for key, value in parsed.items()}, match.group("body")


# Line breaks and characters only an escape can carry: such a string is written
# double-quoted on one line, so no line of a value can look like the closing `---`.
_NEEDS_ESCAPE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ufeff]")


class _Dumper(yaml.SafeDumper):
    """SafeDumper; strings with a line break or a control character are double-quoted."""

    quote_all = False


class _QuotingDumper(_Dumper):
    """Every string double-quoted."""

    quote_all = True


def _represent_text(dumper: _Dumper, text: str) -> yaml.ScalarNode:
    quoted = dumper.quote_all or _NEEDS_ESCAPE.search(text) is not None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style='"' if quoted else None)


_Dumper.add_representer(str, _represent_text)


def dump(front: dict[str, Any]) -> str:
    """``front`` as block YAML (ends with a newline; ``{}`` gives ``""``)."""
    if not front:
        return ""
    text = _dump(front, _Dumper)
    # A line ending in `---` would end DotCraft's block early (its pattern does
    # not anchor the closing line): quote every string then.
    if any(line.rstrip().endswith("---") for line in text.splitlines()):
        text = _dump(front, _QuotingDumper)
    return text


def _dump(front: dict[str, Any], dumper: type[_Dumper]) -> str:
    return yaml.dump(
        front,
        Dumper=dumper,
        sort_keys=False,
        allow_unicode=True,
        default_flow_style=False,
        width=2**30,  # one line per value: no folding of long titles
    )


def compose(front: dict[str, Any], body: str) -> str:
    """A whole file: the block, then ``body`` as given."""
    return f"---\n{dump(front)}---\n{body}"
