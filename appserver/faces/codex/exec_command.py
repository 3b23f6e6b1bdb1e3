"""``appserver-codex exec --experimental-json [flags] [resume ID] [PROMPT]``: the
command line OpenAI's TypeScript SDK (``@openai/codex-sdk``) runs once per turn.

Every flag the SDK 0.163 passes is accepted (argv built in its ``exec.ts``);
what means something here is applied by :mod:`~appserver.faces.codex.exec_run`
(which runs the turn), the rest is logged and ignored. Light at import.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from appserver.command_line import add_face_options

# Codex's words for the sandbox (reported to the runtime as an approval policy).
SANDBOX_MODES = ("read-only", "workspace-write", "danger-full-access")


def is_exec(argv: Sequence[str]) -> bool:
    """Whether ``appserver-codex`` was asked for ``exec`` (after leading ``-c`` pairs)."""
    index = 0
    while index < len(argv) and argv[index] in ("-c", "--config"):
        index += 2
    while index < len(argv) and argv[index].startswith("--config="):
        index += 1
    return index < len(argv) and argv[index] == "exec"


def build_parser() -> argparse.ArgumentParser:
    """The ``exec`` parser: the shared face flags plus Codex exec's."""
    parser = argparse.ArgumentParser(
        prog="appserver-codex exec",
        description=(
            "One turn of OpenAI Codex's `codex exec --experimental-json`: the prompt from "
            "stdin (or PROMPT), JSONL thread events on stdout. `resume ID` continues a thread."
        ),
    )
    add_face_options(parser)
    group = parser.add_argument_group("codex exec")
    group.add_argument("words", nargs="*", metavar="[resume ID] [PROMPT]")
    group.add_argument(
        "--experimental-json",
        "--json",
        dest="json",
        action="store_true",
        help="JSONL thread events on stdout (required: the only output served)",
    )
    group.add_argument(
        "-c",
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=(
            "a Codex setting (TOML value): model, model_provider, openai_base_url, "
            "approval_policy, sandbox_mode apply; others are ignored"
        ),
    )
    group.add_argument(
        "-C",
        "--cd",
        dest="workspace",
        type=Path,
        default=argparse.SUPPRESS,
        metavar="DIR",
        help="--workspace",
    )
    group.add_argument("-m", dest="model", default=argparse.SUPPRESS, help="--model")
    group.add_argument(
        "-s", "--sandbox", choices=SANDBOX_MODES, help="read-only: every gated call is declined"
    )
    group.add_argument("-i", "--image", action="append", default=[], metavar="PATH")
    group.add_argument("--add-dir", action="append", default=[], metavar="DIR", help="ignored")
    group.add_argument("--skip-git-repo-check", action="store_true", help="accepted (no check)")
    group.add_argument(
        "--output-schema",
        type=Path,
        metavar="FILE",
        help="a JSON Schema the final answer must match (asked of the model, then checked)",
    )
    group.add_argument(
        "-o",
        "--output-last-message",
        type=Path,
        metavar="FILE",
        help="write the last agent message to FILE when the turn ends",
    )
    group.add_argument("--thread-source", help="ignored")
    group.add_argument("--cyber-access-program", help="ignored")
    return parser


def parse_exec(argv: Sequence[str]) -> argparse.Namespace | int:
    """``[-c k=v]... exec ...`` as the face's arguments (``face`` names the module
    that runs the turn), or the exit code of a refused command line."""
    words = list(argv)
    leading: list[str] = []
    while words and words[0] != "exec":
        leading.append(words.pop(0))
    args, unknown = build_parser().parse_known_intermixed_args([*words[1:], *leading])
    if unknown:
        sys.stderr.write(f"appserver: ignoring unsupported options: {' '.join(unknown)}\n")
    if not args.json:
        sys.stderr.write("appserver: exec serves only --experimental-json (JSONL events) output\n")
        return 2
    args.face = "codex.exec_run"
    return args
