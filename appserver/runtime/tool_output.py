"""The one rule for how much of a tool's output the model reads.

Every tool result (built-in tools, client tools, channel tools) becomes a
model message here, live (``turns.tooling``) and when the conversation is
rebuilt from stored items (``runtime.history``). An output longer than the
limit keeps its head and its tail, about half the limit each, cut at line
ends where one is near, with one marker line between them counting what was
left out, in bytes (of UTF-8) and lines:

    [... 48213 bytes (1021 lines) of output omitted ...]

The stored item keeps the whole output; only the model's copy is cut.
``EngineConfig.tool_output_max_bytes`` sets the limit (0: no limit).
"""

from __future__ import annotations

from appserver.providers.base import ImagePart, Message

# Codex cuts a tool's output to the model at about 10 KB (head and tail kept).
DEFAULT_TOOL_OUTPUT_MAX_BYTES = 10 * 1024


def truncate_for_model(text: str, max_bytes: int = DEFAULT_TOOL_OUTPUT_MAX_BYTES) -> str:
    """``text`` if it fits in ``max_bytes`` (UTF-8), else its head and tail
    around a marker line that counts the bytes and lines omitted."""
    data = text.encode("utf-8", errors="surrogatepass")
    if max_bytes <= 0 or len(data) <= max_bytes:
        return text
    head_budget = max_bytes // 2
    tail_budget = max_bytes - head_budget
    head = data[:head_budget]
    newline = head.rfind(b"\n")
    if newline >= head_budget // 2:  # a line end in the head's second half: cut there
        head = head[: newline + 1]
    tail = data[len(data) - tail_budget :]
    newline = tail.find(b"\n")
    if 0 <= newline < tail_budget // 2:  # a line end in the tail's first half: start after it
        tail = tail[newline + 1 :]
    omitted = data[len(head) : len(data) - len(tail)]
    lines = omitted.count(b"\n") + (0 if omitted.endswith(b"\n") else 1)
    marker = f"[... {len(omitted)} bytes ({lines} lines) of output omitted ...]"
    # A multibyte character cut at either edge is dropped, not garbled.
    head_text = head.decode("utf-8", errors="ignore")
    tail_text = tail.decode("utf-8", errors="ignore")
    separator = "" if head_text.endswith("\n") or not head_text else "\n"
    return f"{head_text}{separator}{marker}\n{tail_text}"


def tool_message(
    call_id: str,
    tool_name: str,
    output: str,
    max_bytes: int,
    images: list[ImagePart] | None = None,
) -> Message:
    """The model's message for one tool result: the output under the rule
    above, and the images the tool returned (``view_image``)."""
    return Message(
        "tool",
        truncate_for_model(output, max_bytes),
        tool_call_id=call_id,
        tool_name=tool_name,
        images=list(images or []),
    )
