"""The chat shows a file tool's change as the server's diff, not its raw arguments."""

from __future__ import annotations

import json
from pathlib import Path

from tests.clients.test_chat import APPROVAL, chat, finish


def test_an_overwrite_prints_the_applied_diff_with_the_removed_lines(workspace: Path) -> None:
    (workspace / "notes.txt").write_text("old one\nold two\n")
    write = {"path": "notes.txt", "content": "new text\n"}
    with chat(cwd=workspace) as child:
        child.expect_exact("you> ")
        child.sendline(f"?tool write_file {json.dumps(write)}")
        # The call is its name and path, not the content; the approval shows the
        # proposed diff, the result the diff of what was applied.
        child.expect_exact("[tool] write_file notes.txt\r\n")
        child.expect_exact("Approval needed (file)")
        child.expect_exact("-old two")
        child.expect(APPROVAL)
        assert '"content"' not in child.before
        child.sendline("y")
        child.expect_exact("[approval] accept\r")
        child.expect_exact("[result] Wrote 9 bytes to notes.txt\r\n")
        child.expect_exact("[update notes.txt]\r\n")
        expected = ["--- a/notes.txt", "+++ b/notes.txt", "@@ -1,2 +1 @@", "-old one"]
        for line in [*expected, "-old two", "+new text"]:
            child.expect_exact(f"  {line}\r\n")
        child.expect_exact("you> ")
        # A long diff is cut like a long result; /show N prints it whole.
        long_text = "".join(f"row {n}\n" for n in range(1, 31))
        long_write = {"path": "notes.txt", "content": long_text}
        child.sendline(f"?tool write_file {json.dumps(long_write)}")
        child.expect(APPROVAL)
        child.sendline("y")
        child.expect(r"\[#(\d+) update notes\.txt\]\r\n")
        number = child.match.group(1)
        child.expect_exact(f"  … 14 more line(s): /show {number}\r\n")
        child.expect_exact("you> ")
        child.sendline(f"/show {number}")
        child.expect_exact("+row 29\r\n+row 30")
        child.expect_exact("you> ")
        child.sendline("/quit")
        assert finish(child) == 0
    assert (workspace / "notes.txt").read_text() == long_text
