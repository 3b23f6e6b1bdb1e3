"""External-CLI SubAgents (``cli-oneshot``): the command line a profile makes of
a task, and the answer it makes of what the command printed (DotCraft's
``CliOneshotRuntime``; running it is :mod:`appserver.runtime.subagent_cli_run`).

The command line, in this order: ``bin``, ``args``, the resume arguments
(``resumeArgTemplate`` with ``{sessionId}``, when a session is continued), the
permission-mode arguments (``permissionModeMapping``), the output-file
arguments (``outputFileArgTemplate`` with ``{path}``, when ``readOutputFile``),
then the task by ``inputMode``: ``arg`` (the last argument, the default),
``stdin``, ``arg-template`` (``inputArgTemplate`` with ``{task}``) or ``env``
(the variable ``inputEnvKey``). A template is split into words on whitespace,
double quotes grouping (DotCraft's rule), then each word's placeholders are
replaced, so a task or path with spaces stays one word. ``inputFormat:
zene-host-v1`` sends the task as one Zene Host Protocol request line instead
of bare text (our ``appserver-zene`` profile) and reads its response's ``ok``.

The environment is rebuilt, not inherited: :data:`MINIMAL_ENV` (what agent CLIs
need, their API keys included), then ``envPassthrough``, the task (``env``
mode), then ``env`` (last: it overrides everything).

The answer: the output file when ``readOutputFile`` (falling back to stdout with
a warning when it is empty), else the value at ``outputJsonPath`` of stdout's
JSON (``json``), else stdout; cut to ``maxOutputBytes`` (default 1 MiB, ``<= 0``
no limit) with ``"\\n... (output truncated)"``. Token counts come from the
``output*TokensJsonPath`` of the same JSON (the total counts as output when the
other two are 0); the session id from ``resumeSessionIdJsonPath`` of stdout,
else ``resumeSessionIdRegex`` (group ``sessionId``, else group 1).
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appserver.protocol.subagent_profiles import SubAgentProfileWrite

# DotCraft's Unix allow-list: what an agent CLI needs to start and reach its model.
MINIMAL_ENV = (
    "PATH",
    "HOME",
    "SHELL",
    "TMPDIR",
    "LANG",
    "LC_ALL",
    "TERM",
    "CURSOR_API_KEY",
    "ANTHROPIC_API_KEY",
    "CODEX_API_KEY",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "NO_COLOR",
    "FORCE_COLOR",
)
DEFAULT_TIMEOUT_S = 300
DEFAULT_MAX_OUTPUT_BYTES = 1024 * 1024
TRUNCATION_SUFFIX = "\n... (output truncated)"
ZENE_HOST_V1 = "zene-host-v1"
INPUT_MODES = ("arg", "stdin", "arg-template", "env")
NO_OUTPUT = "(no output)"


class InvocationError(Exception):
    """The profile cannot make a command line (the message says why)."""


@dataclass(frozen=True)
class Invocation:
    """One run's command line, environment and input."""

    argv: list[str]  # argv[0]: the resolved binary
    env: dict[str, str]
    stdin: bytes | None  # None: stdin is closed at once
    input_mode: str


@dataclass
class CliAnswer:
    """What a run answered."""

    text: str
    is_error: bool = False
    input_tokens: int = 0
    output_tokens: int = 0
    session_id: str | None = None


def error(message: str) -> CliAnswer:
    """A failed run's answer (its text starts with ``Error:``, as DotCraft's)."""
    text = message if message.lower().startswith("error:") else f"Error: {message}"
    return CliAnswer(text, is_error=True)


def _mode(value: str | None) -> str:
    return (value or "").strip().lower()


def input_mode(profile: SubAgentProfileWrite) -> str:
    """The profile's ``inputMode`` (``arg`` when blank)."""
    return _mode(profile.input_mode) or "arg"


def split_arguments(text: str) -> list[str]:
    """Words of ``text``: split on whitespace, double quotes group (and are dropped)."""
    words: list[str] = []
    current: list[str] = []
    quoted = started = False
    for char in text:
        if char == '"':
            quoted = not quoted
            started = True
        elif char.isspace() and not quoted:
            if started:
                words.append("".join(current))
                current, started = [], False
        else:
            current.append(char)
            started = True
    if started:
        words.append("".join(current))
    return words


def expand(template: str, name: str, value: str) -> list[str]:
    """The words of ``template`` with ``{name}`` replaced in each (any case)."""
    placeholder = re.compile(re.escape("{" + name + "}"), re.IGNORECASE)
    return [placeholder.sub(lambda _: value, word) for word in split_arguments(template)]


def zene_request(task: str, session_id: str, timeout_s: float | None) -> str:
    """One Zene Host Protocol v1 ``run`` request line carrying ``task``."""
    request = {
        "protocol_version": 1,
        "type": "run",
        "request_id": f"subagent-{secrets.token_hex(6)}",
        "session_id": session_id,
        "prompt": task,
        # No limit of ours: a day, as the protocol needs a positive one.
        "timeout_ms": int((timeout_s or 86_400) * 1000),
    }
    return json.dumps(request, ensure_ascii=False) + "\n"


def build_invocation(
    profile: SubAgentProfileWrite,
    name: str,
    binary: str,
    task: str,
    *,
    resume_session_id: str | None = None,
    permission_args: Sequence[str] = (),
    output_file: Path | None = None,
    environ: Mapping[str, str],
    session: str = "subagent",
) -> Invocation:
    """The command line of one run of ``profile`` (see the module docstring).

    ``binary``: the resolved ``bin``. ``output_file``: the temporary file the
    command writes its answer to (required with ``readOutputFile``).
    ``session``: the Zene session id of a ``zene-host-v1`` request.
    """
    argv = [binary, *(profile.args or [])]
    if resume_session_id:
        if not (profile.resume_arg_template or "").strip():
            raise InvocationError(
                f"Subagent profile '{name}' requested resume but does not define resumeArgTemplate."
            )
        argv += expand(profile.resume_arg_template or "", "sessionId", resume_session_id.strip())
    argv += permission_args
    if profile.read_output_file:
        if not (profile.output_file_arg_template or "").strip():
            raise InvocationError(
                f"Subagent profile '{name}' enables output file capture but does not define "
                "outputFileArgTemplate."
            )
        if output_file is None:
            raise InvocationError(f"Subagent profile '{name}' has no output file to write to.")
        argv += expand(profile.output_file_arg_template or "", "path", str(output_file))
    mode = input_mode(profile)
    stdin: bytes | None = None
    payload = task
    if _mode(profile.input_format) == ZENE_HOST_V1:
        payload = zene_request(task, session, timeout_seconds(profile))
    if mode == "stdin":
        stdin = payload.encode("utf-8")
    elif mode == "arg":
        argv.append(payload)
    elif mode == "arg-template":
        if not (profile.input_arg_template or "").strip():
            raise InvocationError(
                f"Subagent profile '{name}' uses inputMode 'arg-template' but does not define "
                "inputArgTemplate."
            )
        argv += expand(profile.input_arg_template or "", "task", payload)
    elif mode == "env":
        if not (profile.input_env_key or "").strip():
            raise InvocationError(
                f"Subagent profile '{name}' uses inputMode 'env' but does not define inputEnvKey."
            )
    else:
        raise InvocationError(
            f"Subagent profile '{name}' has unsupported inputMode '{profile.input_mode}'."
        )
    env = environment(profile, payload if mode == "env" else None, environ)
    return Invocation(argv=argv, env=env, stdin=stdin, input_mode=mode)


def environment(
    profile: SubAgentProfileWrite, task: str | None, environ: Mapping[str, str]
) -> dict[str, str]:
    """The command's environment: allow-list, passthrough, the ``env``-mode task, ``env``."""
    env: dict[str, str] = {}
    for key in (*MINIMAL_ENV, *(profile.env_passthrough or [])):
        value = environ.get(key.strip()) if key.strip() else None
        if value:
            env[key.strip()] = value
    if task is not None and profile.input_env_key:
        env[profile.input_env_key.strip()] = task
    for key, value in (profile.env or {}).items():
        if key.strip():
            env[key.strip()] = value
    return env


def timeout_seconds(profile: SubAgentProfileWrite) -> float | None:
    """The run's time limit (default 300 s; ``None``: none)."""
    timeout = DEFAULT_TIMEOUT_S if profile.timeout is None else profile.timeout
    return float(timeout) if timeout > 0 else None


# --- the answer ------------------------------------------------------------------


_MISSING = object()
_DOTNET_GROUP = re.compile(r"\(\?<(?![=!])")


def _at_path(document: Any, path: str | None) -> Any:
    """The value at the dotted ``path`` of ``document`` (``_MISSING`` if absent)."""
    if not (path or "").strip():
        return _MISSING
    current = document
    for segment in (part.strip() for part in (path or "").split(".")):
        if not segment:
            continue
        if not isinstance(current, dict) or segment not in current:
            return _MISSING
        current = current[segment]
    return current


def _parse(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return _MISSING


def _warning(message: str, fallback: str) -> str:
    return f"Warning: {message}\n{fallback.rstrip() or NO_OUTPUT}"


def json_text(output: str, path: str | None) -> str:
    """The value at ``path`` of the JSON ``output`` as text (raw JSON unless a
    string); the raw output after a warning when it cannot be read."""
    if not output.strip():
        return NO_OUTPUT
    if not (path or "").strip():
        return _warning(
            "JSON output parsing was requested, but outputJsonPath was not configured.", output
        )
    document = _parse(output)
    if document is _MISSING:
        return _warning("Failed to parse JSON output. Falling back to raw stdout.", output)
    value = _at_path(document, path)
    if value is _MISSING:
        why = f"Failed to extract JSON path '{path}'. Falling back to raw stdout."
        return _warning(why, output)
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _count(value: Any) -> int:
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return 0


def tokens(output: str, profile: SubAgentProfileWrite) -> tuple[int, int]:
    """``(input, output)`` tokens from the JSON ``output`` (the total counts as
    output when the other two are 0); ``(0, 0)`` when there are none."""
    paths = (
        profile.output_input_tokens_json_path,
        profile.output_output_tokens_json_path,
        profile.output_total_tokens_json_path,
    )
    if not any((path or "").strip() for path in paths) or not output.strip():
        return 0, 0
    document = _parse(output)
    if document is _MISSING:
        return 0, 0
    used_in, used_out, total = (_count(_at_path(document, path)) for path in paths)
    if used_in == 0 and used_out == 0:
        used_out = total
    return max(0, used_in), max(0, used_out)


def session_id(output: str, profile: SubAgentProfileWrite) -> str | None:
    """The CLI's session id in ``output``: its JSON path, else its regex."""
    if not output.strip():
        return None
    if (profile.resume_session_id_json_path or "").strip():
        value = _at_path(_parse(output), profile.resume_session_id_json_path)
        if isinstance(value, str) and value.strip():
            return value.strip()
        if isinstance(value, int | float) and not isinstance(value, bool):
            return json.dumps(value)
    if not (profile.resume_session_id_regex or "").strip():
        return None
    # .NET names a group (?<name>...); Python (?P<name>...).
    pattern = _DOTNET_GROUP.sub("(?P<", profile.resume_session_id_regex or "")
    try:
        match = re.search(pattern, output, re.MULTILINE)
    except re.error:
        return None
    if match is None:
        return None
    if "sessionId" in match.re.groupindex and match.group("sessionId"):
        return match.group("sessionId")
    return match.group(1) if match.re.groups >= 1 and match.group(1) else None


def truncate(text: str, max_bytes: int | None) -> str:
    """``text`` cut to ``max_bytes`` UTF-8 bytes, suffix included (default 1 MiB;
    ``<= 0``: no limit)."""
    limit = DEFAULT_MAX_OUTPUT_BYTES if max_bytes is None else max_bytes
    encoded = text.encode("utf-8")
    if limit <= 0 or len(encoded) <= limit:
        return text
    room = max(0, limit - len(TRUNCATION_SUFFIX.encode("utf-8")))
    return encoded[:room].decode("utf-8", errors="ignore") + TRUNCATION_SUFFIX


def exit_error(
    code: int, stdout: str, stderr: str, name: str, binary: str, max_bytes: int | None
) -> CliAnswer:
    """The answer of a command that exited with ``code`` (not 0)."""
    text = f"Error: External subagent exited with code {code}. Profile='{name}', Binary='{binary}'."
    for title, stream in (("STDOUT", stdout), ("STDERR", stderr)):
        if stream.strip():
            text += f"\n\n{title}:\n{stream.rstrip()}"
    return CliAnswer(truncate(text, max_bytes), is_error=True)


def answer(
    profile: SubAgentProfileWrite,
    stdout: str,
    *,
    output_file: Path | None = None,
    file_text: str | None = None,
    resume_session_id: str | None = None,
) -> CliAnswer:
    """The answer of a command that exited 0: ``file_text`` is what the output
    file held (``None``: it was not there)."""
    found_session = session_id(stdout, profile) or resume_session_id
    if _mode(profile.input_format) == ZENE_HOST_V1:
        refused = _zene_failure(stdout)
        if refused is not None:
            return error(refused)
    text, token_source = _text(profile, stdout, output_file, file_text)
    used_in, used_out = tokens(token_source, profile)
    return CliAnswer(
        truncate(text, profile.max_output_bytes),
        input_tokens=used_in,
        output_tokens=used_out,
        session_id=found_session,
    )


def _text(
    profile: SubAgentProfileWrite, stdout: str, output_file: Path | None, file_text: str | None
) -> tuple[str, str]:
    """The answer's text, and the text its token counts are read from."""
    is_json = _mode(profile.output_format) == "json"
    if profile.read_output_file:
        if output_file is None:
            why = "Configured output file capture was enabled, but no output file path was made."
            return _warning(why, stdout), stdout
        if file_text is None:
            why = f"Expected output file '{output_file}' was not created. Falling back to stdout."
            return _warning(why, stdout), stdout
        if not file_text.strip():
            why = f"Output file '{output_file}' was empty. Falling back to stdout."
            return _warning(why, stdout), stdout
        if is_json:
            return json_text(file_text, profile.output_json_path), file_text
        return file_text.rstrip(), file_text
    if is_json:
        return json_text(stdout, profile.output_json_path), stdout
    return stdout.rstrip() or NO_OUTPUT, stdout


def _zene_failure(stdout: str) -> str | None:
    """Why a Zene host response says ``ok: false`` (``None`` when it does not)."""
    response = _parse(stdout)
    if not isinstance(response, dict) or response.get("ok") is not False:
        return None
    code = response.get("error_code") or "INTERNAL"
    return f"{code}: {response.get('error_message') or 'the Zene host failed'}"
