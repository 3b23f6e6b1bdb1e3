"""``appserver schema --ts``: the protocol's TypeScript types, one generator for everyone.

The written module is what clients/node/src/generated.ts is (so the Node client and a
client in another repository get the same types), and it compiles under strict tsc.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from appserver.cli import schema_command
from appserver.protocol.typescript import TS_FILE, method_name, render_typescript

REPO = Path(__file__).resolve().parents[2]
NODE_DIR = REPO / "clients" / "node"
TSC = NODE_DIR / "node_modules" / "typescript" / "bin" / "tsc"


def test_writes_the_types_the_node_client_uses(tmp_path: Path) -> None:
    out = tmp_path / "types.ts"
    assert schema_command(None, False, None, ts=out) == 0
    text = out.read_text("utf-8")
    assert text == (NODE_DIR / "src" / "generated.ts").read_text("utf-8"), "run `make schema`"
    for needle in (
        "export interface SessionIdentity {",
        "export interface Methods {",
        '"thread/start": { params: ThreadStartParams; result: ThreadResult };',
        "export abstract class GeneratedMethods {",
    ):
        assert needle in text


def test_a_directory_gets_protocol_ts_and_check_reports_staleness(tmp_path: Path) -> None:
    assert schema_command(None, True, None, ts=tmp_path) == 1  # nothing there yet
    assert schema_command(None, False, None, ts=tmp_path) == 0
    assert (tmp_path / TS_FILE).read_text("utf-8") == render_typescript()
    assert schema_command(None, True, None, ts=tmp_path) == 0
    (tmp_path / TS_FILE).write_text("// old\n", "utf-8")
    assert schema_command(None, True, None, ts=tmp_path) == 1


def test_schema_needs_an_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert schema_command(None, False, None) == 2
    assert "--ts" in capsys.readouterr().err


def test_module_entry_point_writes_the_same(tmp_path: Path) -> None:
    out = tmp_path / "p.ts"
    subprocess.run(
        [sys.executable, "-m", "appserver.protocol.typescript", str(out)], check=True, cwd=REPO
    )
    assert out.read_text("utf-8") == render_typescript()


def test_method_names() -> None:
    assert method_name("thread/mode/set") == "threadModeSet"
    assert method_name("skills/restoreOriginal") == "skillsRestoreOriginal"
    assert method_name("ext/channel-x/send") == "extChannelXSend"


def test_written_types_compile_with_strict_tsc(tmp_path: Path) -> None:
    node = shutil.which("node")
    if node is None or not TSC.is_file():
        pytest.skip("needs node and clients/node's typescript (npm ci in clients/node)")
    assert schema_command(None, False, None, ts=tmp_path / "protocol.ts") == 0
    (tmp_path / "use.ts").write_text(
        "import { METHODS, type ParamsOf, type SessionIdentity, type Thread }"
        ' from "./protocol.js";\n'
        'const identity: SessionIdentity = { channelName: "cli", userId: "me" };\n'
        'const params: ParamsOf<"thread/start"> = { identity };\n'
        "const threads: Thread[] = [];\n"
        "export const used = [METHODS.length, params, threads];\n",
        "utf-8",
    )
    done = subprocess.run(
        [
            node,
            str(TSC),
            "--noEmit",
            "--strict",
            "--target",
            "es2022",
            "--module",
            "nodenext",
            "--moduleResolution",
            "nodenext",
            "--types",
            "node",
            "--typeRoots",
            str(NODE_DIR / "node_modules" / "@types"),
            str(tmp_path / "use.ts"),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
