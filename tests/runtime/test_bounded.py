"""A per-thread map past its limit drops its oldest tenth at once, never a key
it is told to keep (runtime/bounded.py)."""

from __future__ import annotations

from appserver.runtime.bounded import make_room


def test_under_the_limit_nothing_goes() -> None:
    entries = dict.fromkeys("abc")
    make_room(entries, 4)
    assert list(entries) == ["a", "b", "c"]


def test_at_the_limit_the_oldest_tenth_goes() -> None:
    entries = {f"t{index}": index for index in range(20)}
    make_room(entries, 20)
    assert list(entries) == [f"t{index}" for index in range(3, 20)]  # 20 // 10 + 1


def test_keys_kept_are_passed_over() -> None:
    entries = dict.fromkeys("abcd")
    make_room(entries, 4, keep={"a"})
    assert list(entries) == ["a", "c", "d"]
