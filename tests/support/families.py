"""A method family whose install fails, for the paths that must survive it."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from appserver.services import families
from appserver.services.context import FamilyContext


def fail_install(
    monkeypatch: pytest.MonkeyPatch,
    module: str,
    message: str,
    *,
    times: int | None = None,
    first: Callable[[FamilyContext], None] | None = None,
) -> list[int]:
    """Make installing the family in ``module`` raise ``RuntimeError(message)``:
    ``times`` times, then install as usual (``None``: always). ``first(server)``
    runs before each failure (what an install registers before it fails).
    Returns ``[failures still to come]``."""
    install = families.install_family
    left = [-1 if times is None else times]

    def failing(family: families.Family, server: FamilyContext) -> None:
        if family.module == module and left[0] != 0:
            if left[0] > 0:
                left[0] -= 1
            if first is not None:
                first(server)
            raise RuntimeError(message)
        install(family, server)

    monkeypatch.setattr(families, "install_family", failing)
    return left
