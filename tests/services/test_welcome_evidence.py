"""What the welcome suggestions are made from, and which of the model's items are
kept (services/suggestions/evidence.py; docs/suggestions.md): pure functions."""

from __future__ import annotations

from appserver.services.suggestions.evidence import Evidence, best_answer, rank_snippets


def test_noise_is_dropped_and_the_specific_come_first() -> None:
    messages = [
        "thanks!",  # too short, and an acknowledgement
        "Thank you very much!!",  # an acknowledgement
        "/compact now",  # a slash command
        "please make everything better somehow",  # kept, nothing specific
        "Rename   fetchUser in\nsrc/api/client.ts",  # whitespace collapsed
        "rename fetchuser in src/api/client.ts",  # the same, ignoring case
        "x" * 301,  # too long
    ]
    assert rank_snippets(messages) == [
        "Rename fetchUser in src/api/client.ts",
        "please make everything better somehow",
    ]
    evidence = Evidence("/w", [("thread_1", "t")], rank_snippets(messages))
    assert evidence.sufficient
    assert evidence.fingerprint(4) != Evidence("/w", [("thread_1", "t2")], []).fingerprint(4)


def test_generic_items_are_dropped_and_four_must_remain() -> None:
    specific = [{"title": f"Fix #{n}", "prompt": f"Fix issue #{n} in app.py"} for n in range(4)]
    generic = {"title": "Improve code", "prompt": "Make the code better", "reason": "Always good"}
    long = {"title": "T " * 100, "prompt": "Update\n\nREADME.md " + "x" * 600, "reason": "r"}
    kept = best_answer([{"items": [generic, long, *specific[:3]]}], 4)
    assert kept is not None  # generic dropped, the long one cut to one line
    assert [item.title for item in kept][1:] == ["Fix #0", "Fix #1", "Fix #2"]
    assert len(kept[0].title) == 80 and len(kept[0].prompt) == 500
    assert "\n" not in kept[0].prompt
    assert best_answer([{"items": [generic, *specific[:3]]}], 4) is None  # three are left
    # The last call with four usable items wins (a model that corrected itself).
    calls = [{"items": specific}, {"items": [generic]}, {"items": specific[::-1]}]
    corrected = best_answer(calls, 4)
    assert corrected is not None and corrected[0].title == "Fix #3"
