"""The built-in SubAgent profiles as plain data, and which of them the main
agent is offered in a workspace that defines no profiles of its own: what a
turn's prompt needs, without the profiles' wire models (a one-shot loads no
pydantic). :mod:`appserver.runtime.subagent_profiles` makes the models of
this data and answers everything else; ``tests/runtime/test_subagents.py``
holds :func:`built_in_offer` to its answer.
"""

from __future__ import annotations

import shutil
from collections.abc import Collection

DEFAULT_PROFILE = "native"
TEMPLATE_PROFILES = frozenset({"custom-cli-oneshot"})
NATIVE_RUNTIME = "native"
CLI_RUNTIME = "cli-oneshot"
KNOWN_RUNTIMES = frozenset({NATIVE_RUNTIME, CLI_RUNTIME})
DEFAULT_TIMEOUT = 300
DEFAULT_MAX_OUTPUT_BYTES = 1024 * 1024
# Codex prints `"thread_id":"..."`; group 1 (not a named group) works in .NET and Python alike.
_THREAD_ID_REGEX = r'"thread_id"\s*:\s*"([^"]+)"'


# Our own faces run with this server's provider settings and user directory (its
# settings and workspace trust), which they read from these variables.
_OUR_ENV = (
    "APPSERVER_HOME",
    "APPSERVER_PROVIDER",
    "APPSERVER_MODEL",
    "APPSERVER_BASE_URL",
    "APPSERVER_API_KEY",
    "APPSERVER_TIMEOUT",
    "APPSERVER_MAX_RETRIES",
)
# Our approval policy carries over: their own threads ask nobody, so `default`
# declines what would be asked, and `autoApprove` runs workspace operations.
_OUR_MODES = {
    "interactive": "--approval-policy default",
    "auto-approve": "--approval-policy autoApprove",
    "restricted": "--approval-policy default",
}


def _cli(**fields: object) -> dict[str, object]:
    base: dict[str, object] = {
        "runtime": CLI_RUNTIME,
        "working_directory_mode": "workspace",
        "input_mode": "arg",
        "output_format": "text",
        "supports_streaming": False,
        "supports_resume": False,
        "timeout": DEFAULT_TIMEOUT,
        "max_output_bytes": DEFAULT_MAX_OUTPUT_BYTES,
        "trust_level": "prompt",
    }
    return {**base, **fields}


#: The built-in profiles' fields (``SubAgentProfileWrite``'s, by Python name).
BUILT_IN_DATA: dict[str, dict[str, object]] = {
    "native": {
        "runtime": NATIVE_RUNTIME,
        "working_directory_mode": "workspace",
        "trust_level": "trusted",
    },
    "codex-cli": _cli(
        bin="codex",
        args=["exec"],
        output_file_arg_template="--skip-git-repo-check --json --output-last-message {path}",
        read_output_file=True,
        delete_output_file_after_read=True,
        supports_resume=True,
        resume_arg_template="resume {sessionId}",
        resume_session_id_regex=_THREAD_ID_REGEX,
        permission_mode_mapping={
            "interactive": "--sandbox read-only",
            "auto-approve": "--dangerously-bypass-approvals-and-sandbox",
            "restricted": "--sandbox read-only",
        },
    ),
    "cursor-cli": _cli(
        bin="cursor-agent",
        args=["-p", "--output-format", "json"],
        output_format="json",
        output_json_path="result",
        supports_resume=True,
        resume_arg_template="--resume {sessionId}",
        resume_session_id_json_path="session_id",
        permission_mode_mapping={
            "interactive": "--mode ask --trust --approve-mcps",
            "auto-approve": "--mode auto --trust --approve-mcps",
            "restricted": "--mode ask",
        },
    ),
    # A starting point for the user's own command line: no bin, never offered.
    "custom-cli-oneshot": _cli(timeout=120, trust_level="restricted"),
    # Our own Codex exec face: the task on stdin, the answer in the -o file, the
    # thread id from `thread.started` to continue it.
    "appserver-codex": _cli(
        bin="appserver-codex",
        args=["exec", "--experimental-json", "--skip-git-repo-check"],
        input_mode="stdin",
        output_file_arg_template="-o {path}",
        read_output_file=True,
        delete_output_file_after_read=True,
        supports_resume=True,
        resume_arg_template="resume {sessionId}",
        resume_session_id_regex=_THREAD_ID_REGEX,
        env_passthrough=list(_OUR_ENV),
        permission_mode_mapping=_OUR_MODES,
    ),
    # Our own Zene host face, one request per process. Its stdin is one Zene request
    # line, not bare text: inputFormat `zene-host-v1` tells the runner to wrap the task.
    "appserver-zene": _cli(
        bin="appserver",
        args=["host", "--protocol", "v1", "--single-request"],
        input_mode="stdin",
        input_format="zene-host-v1",
        output_format="json",
        output_json_path="text",
        output_input_tokens_json_path="usage.prompt_tokens",
        output_output_tokens_json_path="usage.completion_tokens",
        output_total_tokens_json_path="usage.total_tokens",
        env_passthrough=list(_OUR_ENV),
        permission_mode_mapping=_OUR_MODES,
    ),
}


def built_in_offer(disabled: Collection[str]) -> list[tuple[str, bool, bool]]:
    """(name, external, needs a working directory) of each built-in profile
    offered when the workspace defines none and disables ``disabled``: enabled
    (``native`` always), not a template, its ``bin`` (if a CLI) on PATH;
    ``native`` first, then by name. Built-ins have no validation warnings."""
    off = {name.lower() for name in disabled}
    offered = []
    for name, fields in BUILT_IN_DATA.items():
        if name in TEMPLATE_PROFILES or (name != DEFAULT_PROFILE and name.lower() in off):
            continue
        runtime = str(fields["runtime"])
        if runtime == CLI_RUNTIME and shutil.which(str(fields["bin"])) is None:
            continue
        needs_directory = fields.get("working_directory_mode") == "specified"
        offered.append((name, runtime != NATIVE_RUNTIME, needs_directory))
    return sorted(offered, key=lambda entry: (entry[0] != DEFAULT_PROFILE, entry[0].lower()))
