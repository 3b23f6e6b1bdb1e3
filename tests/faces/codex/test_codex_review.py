"""``review/start`` through OpenAI's Python SDK: the changes git reports reach the
model in the review turn's prompt (the offline model echoes it), the turn is
bracketed by ``enteredReviewMode``/``exitedReviewMode`` items whose last carries
the answer, bad requests are refused as Codex refuses them, and every frame of
the session validates against Codex 0.169's own schema."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from openai_codex import CodexConfig
from openai_codex.client import CodexClient
from openai_codex.generated.v2_all import ReviewStartResponse

pytestmark = [
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
    pytest.mark.usefixtures("every_frame_checked"),
]


def git(workspace: Path, *args: str) -> str:
    identity = ("-c", "user.name=Reviewer", "-c", "user.email=reviewer@example.com")
    done = subprocess.run(
        ["git", *identity, *args], cwd=workspace, check=True, capture_output=True, text=True
    )
    return done.stdout.strip()


@pytest.fixture
def repository(workspace: Path) -> Path:
    """A repository on ``main`` with one commit, one file changed and one untracked."""
    git(workspace, "init", "-q", "-b", "main")
    (workspace / "calc.py").write_text("def answer():\n    return 41\n")
    git(workspace, "add", "calc.py")
    git(workspace, "commit", "-q", "-m", "first")
    (workspace / "calc.py").write_text("def answer():\n    return 42  # uncommittedmarker\n")
    (workspace / "notes_untracked.txt").write_text("draft\n")
    return workspace


@pytest.fixture
def codex_cwd(repository: Path) -> Path:
    return repository


def review(client: CodexClient, thread_id: str, target: dict[str, Any]) -> list[Any]:
    """Run a review; its turn's notifications, in order, to ``turn/completed``.
    Subscribed as the SDK's own ``turn_start`` does, so none is missed."""
    router = client._router
    with router.pending_turn(thread_id) as cursors:
        params = {"threadId": thread_id, "target": target}
        started = client.request("review/start", params, response_model=ReviewStartResponse)
        router.prepare_turn(started.turn.id, thread_id, cursors, for_handle=False)
    assert started.review_thread_id == thread_id
    seen = [client.next_turn_notification(started.turn.id)]
    while seen[-1].method != "turn/completed":
        seen.append(client.next_turn_notification(started.turn.id))
    return seen


def items(seen: list[Any], method: str) -> list[dict[str, Any]]:
    return [n.payload.item.root.model_dump(mode="json") for n in seen if n.method == method]


def test_a_review_of_uncommitted_changes_sends_the_diff_and_brackets_the_turn(
    config: CodexConfig,
) -> None:
    with CodexClient(config) as client:
        client.initialize()
        thread_id = client.thread_start({}).thread.id
        seen = review(client, thread_id, {"type": "uncommittedChanges"})
    methods = [n.method for n in seen]
    assert methods[:3] == ["turn/started", "item/started", "item/completed"]
    assert methods[-3:] == ["item/started", "item/completed", "turn/completed"]
    assert seen[-1].payload.turn.status.value == "completed"
    opened, *_, closed = items(seen, "item/completed")
    assert opened["type"] == "enteredReviewMode" and opened["review"] == "current changes"
    assert closed["type"] == "exitedReviewMode"
    (answer,) = [item for item in items(seen, "item/completed") if item["type"] == "agentMessage"]
    assert closed["review"] == answer["text"]
    # The model saw the change and the untracked file's name (the echo).
    assert answer["text"].startswith("You said: Act as a code reviewer")
    assert "+    return 42  # uncommittedmarker" in answer["text"]
    assert "-    return 41" in answer["text"]
    assert "notes_untracked.txt" in answer["text"]
    assert "git diff HEAD" in answer["text"]


def test_a_base_branch_and_a_commit_are_reviewed_from_git(
    repository: Path, config: CodexConfig
) -> None:
    git(repository, "checkout", "-q", "-b", "feature")
    (repository / "feature.py").write_text("FEATURE = 'committedmarker'\n")
    git(repository, "add", "feature.py")
    git(repository, "commit", "-q", "-m", "add the feature")
    sha = git(repository, "rev-parse", "HEAD")
    with CodexClient(config) as client:
        client.initialize()
        thread_id = client.thread_start({}).thread.id
        against = review(client, thread_id, {"type": "baseBranch", "branch": "main"})
        target = {"type": "commit", "sha": sha, "title": "add the feature"}
        of_commit = review(client, thread_id, target)
    entered = items(against, "item/completed")[0]
    assert entered["review"] == "changes against 'main'"
    said = items(against, "item/completed")[-1]["review"]
    # Commits since the merge base and the uncommitted change.
    assert "committedmarker" in said and "uncommittedmarker" in said
    assert items(of_commit, "item/completed")[0]["review"] == f"commit {sha[:7]}: add the feature"
    said = items(of_commit, "item/completed")[-1]["review"]
    assert "committedmarker" in said and "add the feature" in said
    assert "uncommittedmarker" not in said


def test_a_long_diff_is_cut_with_a_marker(repository: Path, config: CodexConfig) -> None:
    (repository / "calc.py").write_text(
        "".join(f"line {n} of a long change\n" for n in range(20000))
    )
    with CodexClient(config) as client:
        client.initialize()
        thread_id = client.thread_start({}).thread.id
        said = items(review(client, thread_id, {"type": "uncommittedChanges"}), "item/completed")
    assert "the diff is cut here: it is longer than 200 KiB" in said[-1]["review"]
    assert len(said[-1]["review"]) < 220 * 1024


def test_bad_requests_are_refused_as_codex_refuses_them(config: CodexConfig) -> None:
    refusals = [
        ({"type": "everything"}, None, "unknown variant `everything`"),
        ({"type": "custom", "instructions": "\n\n"}, None, "instructions must not be empty"),
        ({"type": "baseBranch", "branch": "  "}, None, "branch must not be empty"),
        ({"type": "commit", "sha": "\t"}, None, "sha must not be empty"),
        ({"type": "commit", "sha": "--output=/tmp/x"}, None, "is not a git revision"),
        ({"type": "commit", "sha": " --output=/tmp/x"}, None, "is not a git revision"),
        ({"type": "baseBranch", "branch": "\t-x"}, None, "is not a git revision"),
        ({"type": "commit", "sha": "a" * 200_000}, None, "longer than 1024 characters"),
        ({"type": "commit", "sha": "0badc0ffee"}, None, "git show failed"),
        ({"type": "baseBranch", "branch": "nowhere"}, None, "git merge-base failed"),
        ("uncommittedChanges", None, "missing field `target`"),
        ({"type": "uncommittedChanges"}, "detached", "unknown variant `detached`"),
    ]
    with CodexClient(config) as client:
        client.initialize()
        thread_id = client.thread_start({}).thread.id
        for target, delivery, words in refusals:
            params: dict[str, Any] = {"threadId": thread_id, "target": target}
            if delivery is not None:
                params["delivery"] = delivery
            with pytest.raises(Exception) as refused:
                client._request_raw("review/start", params)
            assert getattr(refused.value, "code", None) == -32600, target
            assert words in str(refused.value), (target, str(refused.value))
        with pytest.raises(Exception) as unknown:
            client._request_raw("review/start", {"threadId": "nope", "target": target})
        assert getattr(unknown.value, "code", None) == -32600


def test_an_untrusted_workspace_gets_no_git_run_but_custom_reviews(
    repository: Path, config: CodexConfig
) -> None:
    # A .craft the server did not make: the workspace is not trusted.
    (repository / ".craft").mkdir()
    (repository / ".craft" / "config.json").write_text("{}")
    with CodexClient(config) as client:
        client.initialize()
        thread_id = client.thread_start({}).thread.id
        with pytest.raises(Exception) as refused:
            client._request_raw(
                "review/start", {"threadId": thread_id, "target": {"type": "uncommittedChanges"}}
            )
        assert getattr(refused.value, "code", None) == -32600
        assert "trust the workspace" in str(refused.value)
        target = {"type": "custom", "instructions": "check the error handling"}
        said = items(review(client, thread_id, target), "item/completed")
    assert said[0]["review"] == "check the error handling"
    assert "check the error handling" in said[-1]["review"]
    assert "uncommittedmarker" not in said[-1]["review"]


def test_a_failed_review_turn_still_exits_review_mode(config: CodexConfig) -> None:
    with CodexClient(config) as client:
        client.initialize()
        thread_id = client.thread_start({}).thread.id
        target = {"type": "custom", "instructions": "?fail other the reviewer broke"}
        seen = review(client, thread_id, target)
    assert seen[-1].payload.turn.status.value == "failed"
    methods = [n.method for n in seen]
    # exitedReviewMode, then Codex's error, then the end of the turn.
    assert methods[-4:] == ["item/started", "item/completed", "error", "turn/completed"]
    closed = items(seen, "item/completed")[-1]
    assert closed == {"type": "exitedReviewMode", "id": closed["id"], "review": ""}
