"""How a Kafka config alteration becomes the controller's change: AlterConfigs replaces a topic's
own configs whole; IncrementalAlterConfigs sets, deletes, appends to and subtracts from lists."""

from __future__ import annotations

import pytest

from tidelog.broker.kafka_api.admin_apis import APPEND, DELETE, SET, SUBTRACT, _change


def test_alter_configs_sets_what_it_names_and_deletes_the_topics_other_own_configs() -> None:
    own = {"retention.ms": "100000", "segment.ms": "600000"}
    change = _change("t", own, [{"Name": "retention.ms", "Value": "5000"}], incremental=False)
    assert dict(change.set) == {"retention.ms": "5000"} and list(change.delete) == ["segment.ms"]


def test_incremental_operations_change_only_what_they_name_and_lists_item_by_item() -> None:
    own = {"cleanup.policy": "delete", "retention.ms": "1000"}
    change = _change(
        "t",
        own,
        [
            {"Name": "cleanup.policy", "ConfigOperation": APPEND, "Value": "compact,delete"},
            {"Name": "retention.ms", "ConfigOperation": DELETE, "Value": None},
            {"Name": "segment.ms", "ConfigOperation": SET, "Value": "60000"},
        ],
        incremental=True,
    )
    assert dict(change.set) == {"cleanup.policy": "delete,compact", "segment.ms": "60000"}
    assert list(change.delete) == ["retention.ms"]
    removed = _change(
        "t",
        {"cleanup.policy": "delete,compact"},
        [{"Name": "cleanup.policy", "ConfigOperation": SUBTRACT, "Value": "delete"}],
        incremental=True,
    )
    assert dict(removed.set) == {"cleanup.policy": "compact"}
    with pytest.raises(ValueError, match="operation 7"):
        _change("t", {}, [{"Name": "x", "ConfigOperation": 7, "Value": "1"}], incremental=True)
