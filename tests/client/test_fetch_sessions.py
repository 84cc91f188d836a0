"""A consumer's incremental fetch session bookkeeping (fetch_sessions.py), without a broker."""

from __future__ import annotations

from tidelog.client import TopicPartition
from tidelog.client.fetch_sessions import ClientFetchSession
from tidelog.common.errors import ErrorCode
from tidelog.v1 import broker_pb2

A, B, C = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("u", 0)


def _answer(session_id: int, *errors: TopicPartition) -> broker_pb2.FetchResponse:
    return broker_pb2.FetchResponse(
        session_id=session_id,
        partitions=[
            broker_pb2.FetchPartitionResult(
                topic=tp.topic, partition=tp.partition, error_code=int(ErrorCode.NOT_LEADER_OR_FOLLOWER)
            )
            for tp in errors
        ],
    )


def test_a_session_lists_everything_once_then_only_what_moved_and_what_to_drop() -> None:
    session = ClientFetchSession()
    assert session.changes({A: 0, B: 5}) == ([A, B], [])  # opening: the whole list
    session.answered(_answer(77), {A: 0, B: 5}, [])
    assert (session.session_id, session.epoch) == (77, 1)
    assert session.changes({A: 0, B: 5}) == ([], [])  # nothing moved: an empty request, answered by news
    assert session.changes({A: 3, C: 0}) == ([A, C], [B])  # A moved, C is new, B was dropped
    session.answered(_answer(77), {A: 3, C: 0}, [B])
    assert session.epoch == 2 and session.held == {A: 3, C: 0}


def test_a_partition_answered_with_an_error_is_listed_again() -> None:
    session = ClientFetchSession()
    session.answered(_answer(9), {A: 0, B: 0}, [])
    session.answered(_answer(9, B), {}, [])
    assert session.changes({A: 0, B: 0}) == ([B], [])


def test_a_partition_answered_with_records_is_listed_again_even_at_the_same_offset() -> None:
    # A consumer that sought back to where those records were read from (a REST consumer that
    # could not decode one) must get them again: listed, the broker reads them again.
    session = ClientFetchSession()
    with_records = broker_pb2.FetchResponse(
        session_id=4, partitions=[broker_pb2.FetchPartitionResult(topic="t", partition=0, record_batches=b"x")]
    )
    session.answered(with_records, {A: 0, B: 0}, [])
    assert session.changes({A: 0, B: 0}) == ([A], [])


def test_no_session_from_the_broker_or_a_reset_lists_everything_again() -> None:
    session = ClientFetchSession()
    session.answered(_answer(0), {A: 0}, [])  # the broker had no room for one
    assert session.changes({A: 0}) == ([A], [])
    session.answered(_answer(5), {A: 0}, [])
    session.reset()  # a cancelled or failed request: what the broker took is unknown
    assert (session.session_id, session.epoch, session.held) == (0, 0, {})
    assert session.changes({A: 0}) == ([A], [])
