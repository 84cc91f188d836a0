"""The record batch decoder under coverage-guided fuzzing (atheris): the committed corpus replayed,
a bounded fuzzing run, and a regression test per crash the fuzzer found."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fuzzing import bounded_run, replay_corpus
from tidelog.common.errors import CorruptRecordError
from tidelog.common.record.batch import decode_batch, encode_batch, restamp

HERE = Path(__file__).parent
CORPUS = HERE / "fuzz_corpus"
TARGET = HERE / "fuzz_record_batch.py"
RUNS = 30_000  # a few seconds here; `-runs=1000000` by hand for a longer search

atheris = pytest.importorskip("atheris", reason="atheris not installed (the test extra)")


def test_the_corpus_replays_without_an_unexpected_exception() -> None:
    replay_corpus(TARGET, CORPUS, at_least=9)


def test_a_bounded_fuzzing_run_finds_nothing(tmp_path: Path) -> None:
    bounded_run(TARGET, CORPUS, tmp_path, runs=RUNS)


# ---- regressions: one per crash the fuzzer found -------------------------------------------


def test_an_empty_buffer_is_corrupt_even_without_the_crc_check() -> None:
    # was: struct.error from reading a header out of nothing (decode_batch(verify_crc=False))
    with pytest.raises(CorruptRecordError, match="cannot hold"):
        decode_batch(b"", verify_crc=False)


@pytest.mark.parametrize(
    ("name_length", "message"),
    [(0xFFFF, "header name overruns"), (5, "header name overruns")],
)
def test_header_lengths_that_overrun_are_corrupt_with_a_valid_crc(name_length: int, message: str) -> None:
    # was: struct.error reading a header value length past the records section. A hostile batch
    # can carry a correct CRC32C, so the CRC check alone does not keep it out.
    batch = bytearray(encode_batch([b"v"], headers=[(("h", b"1"),)]))
    marker = b"\x01\x00h\x01\x00\x00\x001"  # name length 1, "h", value length 1, "1"
    at = bytes(batch).index(marker)
    batch[at : at + 2] = name_length.to_bytes(2, "little")
    restamp(batch, base_offset=0, partition_leader_epoch=0)  # a correct checksum over the bad bytes
    with pytest.raises(CorruptRecordError, match=message):
        decode_batch(bytes(batch))


def test_a_header_name_that_is_not_utf8_is_corrupt() -> None:
    batch = bytearray(encode_batch([b"v"], headers=[(("h", b"1"),)]))
    at = bytes(batch).index(b"\x01\x00h")
    batch[at + 2] = 0xFF  # not UTF-8
    restamp(batch, base_offset=0, partition_leader_epoch=0)
    with pytest.raises(CorruptRecordError, match="not UTF-8"):
        decode_batch(bytes(batch))
