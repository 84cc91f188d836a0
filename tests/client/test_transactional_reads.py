"""What a consumer keeps of fetched batches: never markers; under read_committed, not the aborted
transactions' batches (the broker's aborted list says which producers from which offset)."""

from __future__ import annotations

from tidelog.client.transactional_reads import committed_batches
from tidelog.common.record.batch import decode_batches, encode_batch
from tidelog.common.record.control import ControlType, Marker, encode_marker


def _log(*batches: tuple[str, int]) -> bytes:
    """Batches at consecutive offsets from 0: ("data" | "txn" | "commit" | "abort", producer id)."""
    parts = []
    for offset, (kind, producer_id) in enumerate(batches):
        if kind in ("commit", "abort"):
            control = ControlType.COMMIT if kind == "commit" else ControlType.ABORT
            part = encode_marker(producer_id, 0, Marker(control, 0), timestamp=1, base_offset=offset)
        else:
            part = encode_batch(
                [b"%s%d@%d" % (kind.encode(), producer_id, offset)],
                base_offset=offset,
                producer_id=producer_id,
                producer_epoch=0,
                base_sequence=0,
                transactional=kind == "txn",
            )
        parts.append(part)
    return b"".join(parts)


def _values(data: bytes) -> list[bytes | None]:
    return [value for batch in decode_batches(data) for value in batch.values]


def test_markers_are_never_returned_and_nothing_else_is_dropped_read_uncommitted() -> None:
    data = _log(("txn", 1), ("abort", 1), ("data", 2))
    assert _values(committed_batches(data, [(1, 0)], read_committed=False)) == [b"txn1@0", b"data2@2"]
    plain = _log(("data", 2), ("txn", 1))
    assert committed_batches(plain, [], read_committed=False) is plain  # nothing copied


def test_an_aborted_producer_is_dropped_from_its_first_offset_until_its_abort_marker() -> None:
    data = _log(
        ("txn", 1),  # 0 producer 1, committed
        ("commit", 1),  # 1
        ("txn", 1),  # 2 producer 1 again, aborted
        ("txn", 2),  # 3 producer 2, committed
        ("data", 3),  # 4 not transactional: always kept
        ("txn", 1),  # 5 producer 1, still the aborted transaction
        ("abort", 1),  # 6
        ("txn", 1),  # 7 producer 1's next transaction: not aborted
        ("commit", 2),  # 8
    )
    kept = committed_batches(data, [(1, 2)], read_committed=True)
    assert _values(kept) == [b"txn1@0", b"txn2@3", b"data3@4", b"txn1@7"]


def test_an_abort_begun_before_the_fetch_offset_still_drops_what_follows() -> None:
    """The broker lists an aborted transaction that overlaps the fetch even if it began earlier."""
    data = _log(("txn", 1), ("txn", 2), ("abort", 1), ("commit", 2))
    fetched_from_1 = data[len(_log(("txn", 1))) :]  # the fetch starts at offset 1
    aborted_before = committed_batches(fetched_from_1, [(1, 0)], read_committed=True)
    assert _values(aborted_before) == [b"txn2@1"]
