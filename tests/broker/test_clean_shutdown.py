"""The data directory's clean-shutdown list: the logs a stop closed cleanly open without recovery,
once; the list is gone (durably) before any log of the next life opens; a list that does not
parse vouches for nothing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tidelog.broker.clean_shutdown import CLEAN_SHUTDOWN_LIST_FILE, CleanShutdown
from tidelog.broker.log_folders import open_partition_log
from tidelog.broker.storage import LogConfig
from tidelog.broker.storage.log_files import CLEAN_SHUTDOWN_FILE
from tidelog.broker.storage.segment import LogSegment
from tidelog.common.record.batch import encode_batch

TOPIC_ID = "0123456789abcdef0123456789abcdef"


def test_a_listed_folder_is_clean_once_and_the_list_is_gone_after_it_is_read(tmp_path: Path) -> None:
    CleanShutdown(tmp_path).write(["orders-0", "orders-1"])
    assert (tmp_path / CLEAN_SHUTDOWN_LIST_FILE).exists()
    taken = CleanShutdown(tmp_path)
    assert taken.take() == 2
    assert not (tmp_path / CLEAN_SHUTDOWN_LIST_FILE).exists()  # a crash of this life leaves no list
    assert taken.consume("orders-0") and not taken.consume("orders-0")  # open once: written from then on
    assert not taken.consume("payments-0")


def test_folders_this_life_never_opened_stay_listed_at_the_next_stop(tmp_path: Path) -> None:
    CleanShutdown(tmp_path).write(["orders-0", "orders-1"])
    life = CleanShutdown(tmp_path)
    life.take()
    assert life.consume("orders-0")  # opened in this life (and written to, maybe)
    life.write(["payments-0"])  # the stop closed this one
    after = CleanShutdown(tmp_path)
    assert after.take() == 2
    assert after.consume("orders-1") and after.consume("payments-0")
    assert not after.consume("orders-0")  # opened by the life before, and not closed by its stop


@pytest.mark.parametrize("content", [b"", b"0\n5\norders-0\n", b"7\n1\norders-0\n", b"\xff\xfe", b"zero\n"])
def test_a_list_that_does_not_parse_vouches_for_nothing(tmp_path: Path, content: bytes) -> None:
    (tmp_path / CLEAN_SHUTDOWN_LIST_FILE).write_bytes(content)
    taken = CleanShutdown(tmp_path)
    assert taken.take() == 0
    assert not taken.consume("orders-0")
    assert not (tmp_path / CLEAN_SHUTDOWN_LIST_FILE).exists()


def _written_log(data_dir: Path) -> None:
    partition_log = open_partition_log(data_dir, "orders", 0, TOPIC_ID, LogConfig.from_configs({}))
    partition_log.append_as_leader(encode_batch([b"a", b"b", b"c"], timestamps=1000), leader_epoch=0)
    partition_log.close(sync=False)
    partition_log.finish_close(marker=False)  # as a broker's stop: named in the list instead


def test_a_log_the_list_names_opens_without_recovery_and_one_it_does_not_is_recovered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _written_log(tmp_path)
    assert not (tmp_path / "orders-0" / CLEAN_SHUTDOWN_FILE).exists()
    recovered: list[int] = []
    real_recover = LogSegment.recover
    monkeypatch.setattr(
        LogSegment, "recover", lambda self, limit: (recovered.append(self.base_offset), real_recover(self, limit))[1]
    )
    listed = open_partition_log(tmp_path, "orders", 0, TOPIC_ID, LogConfig.from_configs({}), clean=True)
    assert recovered == [] and listed.log_end_offset == 3
    listed.close_without_flush()  # a crash: the next open is not clean
    again = open_partition_log(tmp_path, "orders", 0, TOPIC_ID, LogConfig.from_configs({}))
    assert recovered == [0] and again.log_end_offset == 3
    again.close_without_flush()


def test_the_list_is_removed_durably(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    CleanShutdown(tmp_path).write(["orders-0"])
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda descriptor: (synced.append(descriptor), real_fsync(descriptor))[1])
    CleanShutdown(tmp_path).take()
    assert synced  # the folder: the removal reaches the disk before any log of this life changes
