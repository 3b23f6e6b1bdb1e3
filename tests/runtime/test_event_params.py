"""``Event.params`` of an event known only by its JSON (deltas, events read back)."""

from __future__ import annotations

import subprocess
import sys

from appserver.faces.common import turn_id_of
from appserver.protocol.methods import NOTIFICATIONS
from appserver.protocol.turns import DeltaNotification
from appserver.runtime.events import DELTA_KINDS, Event, params_model


def test_the_delta_kinds_are_exactly_the_tables_delta_notifications() -> None:
    table = {kind for kind, spec in NOTIFICATIONS.items() if spec.params is DeltaNotification}
    assert table == DELTA_KINDS
    for kind, spec in NOTIFICATIONS.items():
        assert params_model(kind) is spec.params


def test_a_deltas_params_are_parsed_from_its_json() -> None:
    event = Event(
        "item/agentMessage/delta",
        None,
        params_json='{"threadId":"t","turnId":"u","itemId":"i","delta":"hi","deltaKind":"x"}',
    )
    params = event.params
    assert isinstance(params, DeltaNotification)
    assert (params.item_id, params.delta) == ("i", "hi")


def test_reading_a_delta_does_not_load_the_method_table() -> None:
    code = (
        "import sys\n"
        "from appserver.runtime.events import Event\n"
        "event = Event('item/reasoning/delta', None, params_json="
        '\'{"threadId":"t","turnId":"u","itemId":"i","delta":"d"}\')\n'
        "assert event.params.delta == 'd'\n"
        "print('appserver.protocol.methods' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_a_streamed_delta_gives_its_item_and_text_without_parsing() -> None:
    # JSON that cannot be parsed: reading it would raise.
    event = Event(
        "item/agentMessage/delta",
        None,
        stream="item_002",
        params_json="{",
        text="pi\u00e8ce",
        turn_id="turn_001",
    )
    assert event.delta() == ("item_002", "pi\u00e8ce")
    assert turn_id_of(event) == "turn_001"  # what every face asks of each event
    assert event._params is None  # never parsed


def test_a_delta_read_back_gives_its_item_and_text_from_its_params() -> None:
    event = Event(
        "item/agentMessage/delta",
        None,
        stream="item_002",
        params_json='{"threadId":"t","turnId":"u","itemId":"item_002","delta":"old"}',
    )
    assert event.delta() == ("item_002", "old")
    assert turn_id_of(event) == "u"
