"""What tool commands can see of the server: no token, no API keys.

A real server process; the agent's shell command reads everything a
same-user child can read about its parent without ptrace.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from appserver.tools.environment import is_secret, tool_environment
from tests.support.processes import ws_client, ws_server
from tests.support.servers import child_env
from tests.support.turns import new_thread, one_item, run_turn

TOKEN = "tok-3f9a7c1e55d24b06"
API_KEY = "sk-test-9b1d4e7a"
PASSED = "ghp-passed-on-deliberately"

# What a command can read about the server (its parent): argv, the original
# environment, and its own environment.
SNOOP = (
    "!tr '\\0' '\\n' < /proc/$PPID/cmdline; tr '\\0' '\\n' < /proc/$PPID/environ; env;"
    # The server's process watchdog (tools/reaper.py) is a same-user process too.
    " for p in /proc/[0-9]*; do grep -qs reaper.py $p/cmdline && echo watchdog"
    " && tr '\\0' '\\n' < $p/environ; done; true"
)


async def snoop(url: str) -> str:
    async with ws_client(url, "snoop") as client:
        thread_id = await new_thread(client, approvalPolicy="autoApprove")
        mark = client.mark()
        turn_id, terminal = await run_turn(client, thread_id, SNOOP)
        assert terminal["method"] == "turn/completed"
        result = one_item(client, turn_id, "toolResult", mark)["payload"]
        assert result["success"] is True
        return str(result["result"])


@pytest.mark.parametrize("how", ["--token", "--token=", "environment", "--token-file"])
async def test_commands_cannot_read_the_token_or_api_keys(
    workspace: Path, tmp_path: Path, how: str
) -> None:
    env = {**child_env(), "OPENAI_API_KEY": API_KEY, "GITHUB_TOKEN": PASSED}
    extra = ["--tool-env", "GITHUB_TOKEN"]
    if how == "--token":
        extra += ["--token", TOKEN]
    elif how == "--token=":
        extra += [f"--token={TOKEN}"]
    elif how == "environment":
        env["APPSERVER_TOKEN"] = TOKEN
    else:
        token_file = tmp_path / "token"
        token_file.write_text(TOKEN + "\n")
        extra += ["--token-file", str(token_file)]
    with anyio.fail_after(30):
        async with ws_server(workspace, *extra, env=env) as (_, url):
            seen = await snoop(f"{url}?token={TOKEN}")
    assert "--tool-env" in seen, "the command did not read the server's argv"
    assert "watchdog" in seen, "the command did not find the process watchdog"
    assert "OPENAI_API_KEY=" in seen, "the command did not read the server's environment"
    assert TOKEN not in seen
    assert API_KEY not in seen
    assert f"GITHUB_TOKEN={PASSED}" in seen  # passed on deliberately


async def test_a_bad_token_file_exits_2(workspace: Path, tmp_path: Path) -> None:
    from tests.test_cli import run_cli

    empty = tmp_path / "empty"
    empty.write_text("\n")
    for path in (empty, tmp_path / "missing"):
        done = await run_cli("app-server", "--workspace", str(workspace), "--token-file", str(path))
        assert done.returncode == 2
        assert b"token file" in done.stderr


def test_secret_looking_variables_stay_out_of_tool_environments() -> None:
    environ = {
        "PATH": "/bin",
        "HOME": "/home/me",
        "APPSERVER_TOKEN": "t",
        "OPENAI_API_KEY": "k",
        "ANTHROPIC_AUTH_TOKEN": "a",
        "AWS_SECRET_ACCESS_KEY": "s",
        "PGPASSWORD": "p",
        "GOOGLE_APPLICATION_CREDENTIALS": "c",
        "GITHUB_TOKEN": "g",
    }
    assert tool_environment(environ=environ) == {"PATH": "/bin", "HOME": "/home/me"}
    passed = tool_environment(["GITHUB_TOKEN"], environ)
    assert passed == {"PATH": "/bin", "HOME": "/home/me", "GITHUB_TOKEN": "g"}
    assert is_secret("my_api_key") and not is_secret("EDITOR")
    for name in ("MYSQL_PWD", "DOCKER_AUTH_CONFIG", "SENTRY_DSN", "GITLAB_PAT", "SMTP_PASS"):
        assert is_secret(name), name
    for name in ("SSH_AUTH_SOCK", "PWD", "OLDPWD", "PATH", "GIT_AUTHOR_NAME"):
        assert not is_secret(name), name
