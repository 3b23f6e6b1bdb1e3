"""Codex's patch format: a table of valid and invalid patches, and how hunks apply."""

from __future__ import annotations

import pytest

from appserver.tools.patch_format import (
    AddFile,
    DeleteFile,
    Hunk,
    PatchError,
    UpdateFile,
    apply_hunks,
    parse_patch,
)


def patch(*lines: str) -> str:
    return "\n".join(["*** Begin Patch", *lines, "*** End Patch"])


# --- parsing: valid patches ----------------------------------------------------

VALID = [
    pytest.param(patch(), [], id="empty-patch-parses-to-nothing"),
    pytest.param(
        patch("*** Add File: a.txt", "+one", "+", "+two"),
        [AddFile("a.txt", "one\n\ntwo\n")],
        id="add",
    ),
    pytest.param(patch("*** Add File: empty.txt"), [AddFile("empty.txt", "")], id="add-empty"),
    pytest.param(patch("*** Delete File: gone.txt"), [DeleteFile("gone.txt")], id="delete"),
    pytest.param(
        patch(
            "*** Update File: m.py",
            "*** Move to: n.py",
            "@@ def f():",
            "-    pass",
            "+    return 1",
        ),
        [UpdateFile("m.py", "n.py", (Hunk(("def f():",), ("    pass",), ("    return 1",)),))],
        id="update-with-move-and-anchor",
    ),
    pytest.param(
        patch("*** Update File: f.py", " import foo", "+bar"),
        [UpdateFile("f.py", None, (Hunk((), ("import foo",), ("import foo", "bar")),))],
        id="first-hunk-without-@@",
    ),
    pytest.param(
        patch("*** Update File: f", "@@", " a", "", "-b", "+c", "@@", "-x", "*** End of File"),
        [
            UpdateFile(
                "f",
                None,
                (
                    Hunk((), ("a", "", "b"), ("a", "", "c")),
                    Hunk((), ("x",), (), end_of_file=True),
                ),
            )
        ],
        id="two-hunks-empty-context-line-end-of-file",
    ),
    pytest.param(
        patch("*** Update File: f", "@@ class A", "@@     def m(self):", "-  x", "+  y"),
        [UpdateFile("f", None, (Hunk(("class A", "    def m(self):"), ("  x",), ("  y",)),))],
        id="several-@@-lines-narrow-step-by-step",
    ),
    pytest.param(
        "  *** Begin Patch  \n  *** Add File: a  \n+x\n *** End Patch \n",
        [AddFile("a", "x\n")],
        id="markers-padded-with-whitespace",
    ),
    pytest.param(
        "*** Begin Patch\r\n*** Add File: a\r\n+x\r\n*** End Patch\r\n",
        [AddFile("a", "x\n")],
        id="crlf-patch",
    ),
    pytest.param(
        "<<'EOF'\n" + patch("*** Delete File: a") + "\nEOF\n",
        [DeleteFile("a")],
        id="heredoc-single-quoted",
    ),
    pytest.param(
        '<<"EOF"\n' + patch("*** Delete File: a") + "\nEOF", [DeleteFile("a")], id="heredoc-double"
    ),
    pytest.param(
        "apply_patch <<EOF\n" + patch("*** Delete File: a") + "\nEOF",
        [DeleteFile("a")],
        id="heredoc-after-apply_patch",
    ),
    pytest.param(
        patch("*** Update File: f", "@@", "+line", "*** Add File: g", "+content"),
        [UpdateFile("f", None, (Hunk((), (), ("line",)),)), AddFile("g", "content\n")],
        id="update-followed-by-add",
    ),
]


@pytest.mark.parametrize(("text", "expected"), VALID)
def test_valid_patches_parse(text: str, expected: list[object]) -> None:
    assert parse_patch(text) == expected


# --- parsing: invalid patches -------------------------------------------------------

INVALID = [
    pytest.param("", "first line of the patch must be '*** Begin Patch'", id="empty-text"),
    pytest.param("bad", "first line of the patch must be '*** Begin Patch'", id="no-begin"),
    pytest.param(
        "*** Begin Patch\nbad", "last line of the patch must be '*** End Patch'", id="no-end"
    ),
    pytest.param(
        "<<\"EOF'\n" + patch("*** Delete File: a") + "\nEOF",
        "first line of the patch must be",
        id="heredoc-mismatched-quotes",
    ),
    pytest.param(
        "<<EOF\n*** Begin Patch\n*** Update File: f\nEOF\n",
        "last line of the patch must be '*** End Patch'",
        id="heredoc-without-end-patch",
    ),
    pytest.param(patch("*** Frobnicate File: a"), "is not a valid file header", id="bad-header"),
    pytest.param(patch("*** Update File: t.py"), "has no hunks", id="update-without-hunks"),
    pytest.param(patch("*** Update File: t", "@@"), "the hunk contains no lines", id="@@-alone"),
    pytest.param(
        patch("*** Update File: t", "@@", "*** End of File"),
        "the hunk contains no lines",
        id="end-of-file-without-lines",
    ),
    pytest.param(
        patch("*** Update File: t", "@@", "bad"), "unexpected line 'bad'", id="unprefixed-line"
    ),
    pytest.param(
        patch("*** Update File: t", "-a", "+b", "junk"),
        "expected a hunk to start with '@@'",
        id="second-hunk-without-@@",
    ),
]


@pytest.mark.parametrize(("text", "message"), INVALID)
def test_invalid_patches_are_refused(text: str, message: str) -> None:
    with pytest.raises(PatchError, match="invalid patch") as caught:
        parse_patch(text)
    assert message in str(caught.value)


def test_errors_name_the_line() -> None:
    with pytest.raises(PatchError, match="at line 3"):
        parse_patch(patch("*** Add File: a", "*** Nonsense"))


# --- applying --------------------------------------------------------------------


def update(text: str) -> tuple[Hunk, ...]:
    operation = parse_patch(text)[0]
    assert isinstance(operation, UpdateFile)
    return operation.hunks


APPLIES = [
    pytest.param(
        "a\nb\nc\n",
        update(patch("*** Update File: f", "@@", " a", "-b", "+B", " c")),
        "a\nB\nc\n",
        id="exact",
    ),
    pytest.param(
        "a  \nb\t\n",
        update(patch("*** Update File: f", "@@", " a", "-b", "+B")),
        "a  \nB\n",
        id="trailing-whitespace-ignored",
    ),
    pytest.param(
        "    a\n  b\n",
        update(patch("*** Update File: f", "@@", " a", "-b", "+B")),
        "    a\nB\n",
        id="surrounding-whitespace-ignored",
    ),
    pytest.param(
        "say \u201chi\u201d \u2014 ok\u00a0now\n",
        update(patch("*** Update File: f", "@@", '-say "hi" - ok now', "+said")),
        "said\n",
        id="unicode-punctuation-normalised",
    ),
    pytest.param(
        "a\r\nb\r\nc\r\n",
        update(patch("*** Update File: f", "@@", " a", "-b", "+B", "+B2")),
        "a\r\nB\r\nB2\r\nc\r\n",
        id="crlf-kept-and-given-to-new-lines",
    ),
    pytest.param(
        "m1\nm2\r\nm3\r\nm4\r\n",
        update(patch("*** Update File: f", "@@", " m2", "-m3", "+M3", " m4")),
        "m1\nm2\r\nM3\r\nm4\r\n",
        id="mixed-endings-context-keeps-its-own",
    ),
    pytest.param(
        "a\r\nb\nc\n",
        update(patch("*** Update File: f", "@@", " b", "+b2", " c")),
        "a\r\nb\nb2\nc\n",
        id="mixed-endings-new-line-takes-its-neighbours",
    ),
    pytest.param(
        "a\nb",
        update(patch("*** Update File: f", "@@", " a", "-b", "+c")),
        "a\nc",
        id="missing-trailing-newline-kept",
    ),
    pytest.param(
        "a\nb",
        update(patch("*** Update File: f", "@@", "+c")),
        "a\nb\nc",
        id="addition-after-unterminated-last-line",
    ),
    pytest.param(
        "x\nend\nx\nend\n",
        update(patch("*** Update File: f", "@@", "-end", "+END", "*** End of File")),
        "x\nend\nx\nEND\n",
        id="end-of-file-matches-at-the-end",
    ),
    pytest.param(
        "def f():\n    pass\ndef g():\n    pass\n",
        update(patch("*** Update File: f", "@@ def g():", "-    pass", "+    return 2")),
        "def f():\n    pass\ndef g():\n    return 2\n",
        id="@@-anchor-disambiguates",
    ),
    pytest.param(
        "a\nb\nc\nd\n",
        update(patch("*** Update File: f", "@@", "-a", "+A", "@@", "-c", "+C")),
        "A\nb\nC\nd\n",
        id="two-hunks-in-order",
    ),
    pytest.param(
        "keep\n",
        update(patch("*** Update File: f", "@@", "+more")),
        "keep\nmore\n",
        id="pure-addition-goes-at-the-end",
    ),
    pytest.param(
        "a\nb\n",
        update(patch("*** Update File: f", "@@", " a", "-b", "")),
        "a\n",
        id="trailing-empty-context-stands-for-final-newline",
    ),
]


@pytest.mark.parametrize(("before", "hunks", "after"), APPLIES)
def test_hunks_apply(before: str, hunks: tuple[Hunk, ...], after: str) -> None:
    assert apply_hunks(before, hunks, "f") == after


DOES_NOT_APPLY = [
    pytest.param(
        "a\nb\n",
        update(patch("*** Update File: f", "@@", "-nope", "+x")),
        "f: hunk 1: the lines to change were not found in the file",
        id="context-not-found",
    ),
    pytest.param(
        "a\nb\n",
        update(patch("*** Update File: f", "@@ def missing():", "-a", "+x")),
        "f: hunk 1: the line '@@ def missing():' was not found",
        id="anchor-not-found",
    ),
    pytest.param(
        "x\ny\nx\ny\n",
        update(patch("*** Update File: f", "@@", " x", "-y", "+z")),
        "f: hunk 1 is ambiguous: its lines match 2 places (lines 1, 3)",
        id="ambiguous-hunk",
    ),
    pytest.param(
        "end\nmore\n",
        update(patch("*** Update File: f", "@@", "-end", "*** End of File")),
        "not found at the end of the file",
        id="end-of-file-elsewhere",
    ),
    pytest.param(
        "a\nb\n",
        update(patch("*** Update File: f", "@@", "-b", "+B", "@@", "-a", "+A")),
        "f: hunk 2: the lines to change were not found in the file after line 2",
        id="hunks-out-of-order",
    ),
]


@pytest.mark.parametrize(("before", "hunks", "message"), DOES_NOT_APPLY)
def test_hunks_that_do_not_apply_are_named(
    before: str, hunks: tuple[Hunk, ...], message: str
) -> None:
    with pytest.raises(PatchError) as caught:
        apply_hunks(before, hunks, "f")
    assert message in str(caught.value)


def test_an_exact_match_wins_over_lenient_ones() -> None:
    """Leniency is a fallback: the exact place is unique though a trimmed one is not."""
    hunks = update(patch("*** Update File: f", "@@", "-x", "+y"))
    assert apply_hunks("  x\nx\n", hunks, "f") == "  x\ny\n"
