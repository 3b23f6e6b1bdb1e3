"""The wire models' modules keep their annotations evaluated (see the
package's docstring: string annotations cost every start a compile each)."""

from __future__ import annotations

from pathlib import Path

import appserver.protocol

PACKAGE = Path(appserver.protocol.__file__).parent


def test_no_protocol_module_postpones_its_annotations() -> None:
    postponing = [
        path.name
        for path in sorted(PACKAGE.glob("*.py"))
        if "\nfrom __future__ import annotations\n" in f"\n{path.read_text()}"
    ]
    assert postponing == []
