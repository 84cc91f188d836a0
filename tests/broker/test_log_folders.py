"""A partition's log folder: opened when a restart's listing found it (no attempt to create it),
replaced when it belongs to a former topic of the same name, and made again when it went away
after the listing."""

from __future__ import annotations

import shutil
from pathlib import Path

from tidelog.broker.log_folders import PARTITION_METADATA_FILE, log_folder, open_partition_log
from tidelog.broker.storage import LogConfig
from tidelog.common.record.batch import encode_batch

TOPIC_ID = "0123456789abcdef0123456789abcdef"
FORMER_TOPIC_ID = "fedcba9876543210fedcba9876543210"


def _written(data_dir: Path, topic_id: str = TOPIC_ID) -> None:
    partition_log = open_partition_log(data_dir, "orders", 0, topic_id, LogConfig.from_configs({}))
    partition_log.append_as_leader(encode_batch([b"a", b"b", b"c"], timestamps=1000), leader_epoch=0)
    partition_log.close()


def test_a_found_folder_of_the_same_topic_opens_with_its_records(tmp_path: Path) -> None:
    _written(tmp_path)
    for clean in (False, True):
        opened = open_partition_log(
            tmp_path, "orders", 0, TOPIC_ID, LogConfig.from_configs({}), clean=clean, found=True
        )
        assert opened.log_end_offset == 3
        opened.close()


def test_a_found_folder_of_a_former_topic_is_replaced_by_an_empty_log(tmp_path: Path) -> None:
    _written(tmp_path, FORMER_TOPIC_ID)
    opened = open_partition_log(tmp_path, "orders", 0, TOPIC_ID, LogConfig.from_configs({}), clean=True, found=True)
    assert opened.log_end_offset == 0
    opened.close()
    marker = log_folder(tmp_path, "orders", 0) / PARTITION_METADATA_FILE
    assert marker.read_text() == f"topic_id: {TOPIC_ID}\n"


def test_a_found_folder_removed_since_the_listing_is_made_again(tmp_path: Path) -> None:
    _written(tmp_path)
    shutil.rmtree(log_folder(tmp_path, "orders", 0))
    opened = open_partition_log(tmp_path, "orders", 0, TOPIC_ID, LogConfig.from_configs({}), found=True)
    assert opened.log_end_offset == 0
    opened.append_as_leader(encode_batch([b"d"], timestamps=1000), leader_epoch=0)
    opened.close()
    again = open_partition_log(tmp_path, "orders", 0, TOPIC_ID, LogConfig.from_configs({}))
    assert again.log_end_offset == 1
    again.close()
