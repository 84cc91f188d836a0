"""Incremental fetch sessions, the leader's side (KIP-227): opening, epochs, news, eviction."""

from __future__ import annotations

import asyncio

import pytest

from tests.fake_clock import FakeClock
from tidelog.broker.fetch_session import CONSUMER_SESSION_IDLE_S, FetchSession, FetchSessionCache, SessionError
from tidelog.common.errors import ErrorCode
from tidelog.v1 import broker_pb2


def _request(replica: int, session_id: int = 0, epoch: int = 0) -> broker_pb2.FetchRequest:
    return broker_pb2.FetchRequest(replica_id=replica, incremental=True, session_id=session_id, session_epoch=epoch)


def _fetch(partition: int, offset: int = 0) -> broker_pb2.FetchPartition:
    return broker_pb2.FetchPartition(topic="t", partition=partition, fetch_offset=offset)


async def test_a_session_is_opened_then_followed_epoch_by_epoch() -> None:
    cache = FetchSessionCache({})
    session = cache.resolve(_request(2))
    assert session.id > 0
    assert cache.resolve(_request(2, session.id, 1)) is session
    assert cache.resolve(_request(2, session.id, 2)) is session
    with pytest.raises(SessionError) as stale:
        cache.resolve(_request(2, session.id, 1))  # two behind: out of step
    assert stale.value.code is ErrorCode.INVALID_FETCH_SESSION_EPOCH
    with pytest.raises(SessionError):
        cache.resolve(_request(2, session.id, 4))  # ahead
    with pytest.raises(SessionError) as unknown:
        cache.resolve(_request(2, session.id + 100, 1))
    assert unknown.value.code is ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    with pytest.raises(SessionError):
        cache.resolve(_request(3, session.id, 3))  # another replica's id is not ours


async def test_a_followers_fetch_whose_answer_it_never_got_comes_again_at_its_epoch_and_gets_it_again() -> None:
    # A follower cuts a fetch short as the leader answers it (replica_fetcher's interrupt): the
    # answer is lost and the follower sends the same epoch again. Refused, it opened a new session
    # (a full fetch of thousands of partitions); the partitions that answer carried were no longer
    # news, and a record acks=all waited for would not have been fetched until the next write.
    cache = FetchSessionCache({})
    session = cache.resolve(_request(2))
    assert session is not None
    session.update([_fetch(0), _fetch(1), _fetch(2)], [])
    assert cache.resolve(_request(2, session.id, 1)) is session and session.epoch == 2
    session.answered = frozenset({("t", 0), ("t", 1)})  # what the answer to epoch 1 carried
    assert cache.resolve(_request(2, session.id, 1)) is session  # never got it: the same again
    assert session.epoch == 2 and session.take_dirty() == {("t", 0), ("t", 1)}
    assert cache.resolve(_request(2, session.id, 2)) is session and session.epoch == 3  # got that one
    consumer = cache.resolve(_request(-1), "User:alice")
    assert consumer is not None and cache.resolve(_request(-1, consumer.id, 1), "User:alice") is consumer
    with pytest.raises(SessionError):
        cache.resolve(_request(-1, consumer.id, 1), "User:alice")  # a consumer's repeat stays refused (Kafka's)


async def test_a_replica_holds_one_session_and_the_least_recently_used_goes_first() -> None:
    watchers: dict[tuple[str, int], set[FetchSession]] = {}
    cache = FetchSessionCache(watchers, slots=2)
    first = cache.resolve(_request(2))
    first.update([_fetch(0)], [])
    again = cache.resolve(_request(2))  # the follower restarted its fetcher
    assert first.closed and not again.closed
    assert watchers == {}, "a closed session watches nothing"
    other = cache.resolve(_request(3))
    cache.resolve(_request(2, again.id, 1))  # used: now the most recent
    fourth = cache.resolve(_request(4))
    assert other.closed, "the least recently used was evicted"
    assert set(cache.sessions) == {again.id, fourth.id}


async def test_news_wakes_the_waiting_fetch_and_is_taken_once() -> None:
    watchers: dict[tuple[str, int], set[FetchSession]] = {}
    session = FetchSessionCache(watchers).resolve(_request(2))
    assert session.update([_fetch(0), _fetch(1)], []) == [("t", 0), ("t", 1)]
    assert watchers[("t", 1)] == {session}
    waiting = asyncio.create_task(session.wait(10))
    await asyncio.sleep(0)
    for holder in watchers[("t", 1)]:
        holder.mark(("t", 1))
    await asyncio.wait_for(waiting, 1)
    assert session.take_dirty() == {("t", 1)}
    assert session.take_dirty() == set()
    session.update([], [("t", 1)])
    assert ("t", 1) not in watchers and not session.holds(("t", 1))
    assert session.holds(("t", 0))


async def test_consumers_hold_sessions_of_their_own_owned_by_their_principal() -> None:
    cache = FetchSessionCache({}, slots=3)
    first = cache.resolve(_request(-1), "User:alice")
    second = cache.resolve(_request(-1), "User:alice")  # a second consumer: its earlier one stays
    assert first is not None and second is not None and not first.closed and first.id != second.id
    assert cache.resolve(_request(-1, first.id, 1), "User:alice") is first
    with pytest.raises(SessionError) as taken:
        cache.resolve(_request(-1, second.id, 1), "User:mallory")  # another principal's session
    assert taken.value.code is ErrorCode.FETCH_SESSION_ID_NOT_FOUND


async def test_a_consumers_new_session_takes_only_a_consumers_place() -> None:
    cache = FetchSessionCache({}, slots=2)
    follower = cache.resolve(_request(2))
    consumer = cache.resolve(_request(-1), "User:alice")
    newer = cache.resolve(_request(-1), "User:bob")  # full: the consumer's older one goes
    assert consumer is not None and consumer.closed and newer is not None
    assert follower is not None and not follower.closed
    cache.resolve(_request(2, follower.id, 1))  # used: the consumer's is now the least recently used
    cache.resolve(_request(3))  # a follower's new one takes the least recently used of any
    assert newer.closed and not follower.closed
    assert cache.resolve(_request(-1), "User:carol") is None, "only followers' sessions: fetch without one"


async def test_a_consumers_session_idle_past_its_time_is_closed_when_another_opens() -> None:
    clock = FakeClock()
    watchers: dict[tuple[str, int], set[FetchSession]] = {}
    cache = FetchSessionCache(watchers, clock=clock)
    gone = cache.resolve(_request(-1), "User:alice")  # its consumer closed: no fetch any more
    live = cache.resolve(_request(-1), "User:bob")
    follower = cache.resolve(_request(2))
    assert gone is not None and live is not None and follower is not None
    gone.update([_fetch(0)], [])
    clock.advance(CONSUMER_SESSION_IDLE_S - 1)
    live.fetched()
    clock.advance(2)
    cache.resolve(_request(-1), "User:carol")
    assert gone.closed and ("t", 0) not in watchers, "appends no longer mark it"
    assert not live.closed and not follower.closed  # a follower's session is not a consumer's
