"""Incremental fetch sessions, the leader's side (KIP-227): what a follower or a consumer fetches is
remembered here, so its requests list only what changed and an idle fetch costs the same whatever
the number of partitions.

A session holds, per partition, the follower's last fetch (offset, leader epoch, byte limit) and a
`dirty` set: the partitions with news since the last response (an append, a moved high watermark,
a change of role). Partitions mark their sessions as things happen (`Partition.notify_appended`, `notify_changed`),
so a fetch with nothing new waits on the session's one event instead of one per partition, and
answers only the dirty and the changed partitions. What a follower's silence means for the ISR
(it fetched again at the same offset) is read from the session's last fetch time
(`Partition.fetched_s`, `caught_up_s`).

Bounded by `max.incremental.fetch.session.cache.slots`; a follower holds one session per leader,
so a new session of a replica closes its older one, and the least recently used goes first when
the cache is full — for a consumer's new session, the least recently used consumer's only (with
none, the consumer fetches without a session). A consumer's session belongs to the principal that
opened it, and its id is random.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Callable, Iterable
from typing import Final

from tidelog.common.clock import Monotonic, monotonic
from tidelog.common.errors import ErrorCode
from tidelog.v1 import broker_pb2

__all__ = ["FetchSession", "FetchSessionCache", "SessionError"]

Key = tuple[str, int]
SESSION_ID_MAX: Final = 2**31 - 1
CONSUMER_SESSION_IDLE_S: Final = 120.0  # as Kafka's min.incremental.fetch.session.eviction.ms


class SessionError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class FetchSession:
    def __init__(
        self,
        session_id: int,
        replica_id: int,
        watchers: dict[Key, set[FetchSession]],
        clock: Monotonic = monotonic,
        *,
        owner: str = "",
    ) -> None:
        self.id = session_id
        self.replica_id = replica_id  # -1: a consumer's
        self.owner = owner  # the principal that opened it: no other may use it
        self.epoch = 1  # the epoch the next incremental request must carry
        self.partitions: dict[Key, broker_pb2.FetchPartition] = {}
        self.dirty: set[Key] = set()
        self.woken = asyncio.Event()
        self.clock = clock
        self.last_fetch_s = clock()
        self.quiet = False  # flagged by the ISR check for no fetch in a while; cleared by the next fetch
        # Partitions fetched before this leader knew the replica as one of theirs (a reassignment's
        # LeaderAndIsr reaching the follower first): their position is recorded at the next fetch
        # from what the session holds, as an unchanged position is never sent again.
        self.unrecorded: set[Key] = set()
        self.closed = False
        # The partitions the last answer carried: news again if its follower says it never got it
        # (`FetchSessionCache.resolve`).
        self.answered: frozenset[Key] = frozenset()
        # The fetch being served, the latest to arrive: one its follower cut short may still be in
        # its long poll here when the next arrives, and must not take the news meant for it.
        self.serving: object | None = None
        self._watchers = watchers  # the replica manager's: key → sessions holding it

    def fetched(self) -> None:
        """A fetch through this session: the followers it holds are alive as of now."""
        self.last_fetch_s = self.clock()
        self.quiet = False

    def holds(self, key: Key) -> bool:
        return not self.closed and key in self.partitions

    def mark(self, key: Key) -> None:
        """News for `key` (called by the partition): answer it, and wake a waiting fetch."""
        self.dirty.add(key)
        self.woken.set()

    def update(self, fetches: Iterable[broker_pb2.FetchPartition], forgotten: Iterable[Key]) -> list[Key]:
        """Take a request's changed partitions and dropped ones; the changed keys, in order."""
        changed = []
        for fetch in fetches:
            key = (fetch.topic, fetch.partition)
            if key not in self.partitions:
                self._watchers.setdefault(key, set()).add(self)
            self.partitions[key] = fetch
            changed.append(key)
        for key in forgotten:
            if self.partitions.pop(key, None) is not None:
                self._unwatch(key)
            self.dirty.discard(key)
            self.unrecorded.discard(key)
        return changed

    def take_dirty(self) -> set[Key]:
        """The partitions with news, emptied; the event cleared first so no news is missed."""
        self.woken.clear()
        dirty, self.dirty = self.dirty, set()
        return dirty

    def mark_all(self, keys: Iterable[Key]) -> None:
        """News for these (what a fetch took and will not answer)."""
        self.dirty.update(key for key in keys if key in self.partitions)
        if self.dirty:
            self.woken.set()

    def answer_lost(self) -> None:
        """The follower never got the last answer (it cancelled the fetch as the answer left): what
        it carried is news again, for the same request sent again."""
        self.mark_all(self.answered)

    def taken_back(self, epoch: int, unanswered: set[Key]) -> None:
        """The incremental fetch that moved this session to `epoch` was cancelled by its sender
        before it was answered (a follower cuts a long poll short to list a partition newly ready):
        its epoch is expected again, and the news it took is news still. What it added, moved or
        dropped stays: the sender lists (or drops) each of those again, as they are then
        (replica_fetcher's UNKNOWN_POSITION)."""
        if self.epoch == epoch:
            self.epoch -= 1
        self.mark_all(unanswered)

    async def wait(self, timeout_s: float) -> None:
        if timeout_s > 0 and not self.woken.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.woken.wait(), timeout_s)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for key in self.partitions:
            self._unwatch(key)
        self.woken.set()  # a fetch waiting on it answers now

    def _unwatch(self, key: Key) -> None:
        holders = self._watchers.get(key)
        if holders is not None:
            holders.discard(self)
            if not holders:
                del self._watchers[key]


class FetchSessionCache:
    def __init__(
        self,
        watchers: dict[Key, set[FetchSession]],
        *,
        slots: int = 1000,
        on_close: Callable[[FetchSession], None] = lambda session: None,
        clock: Monotonic = monotonic,
    ) -> None:
        assert slots >= 1
        self.slots = slots  # max.incremental.fetch.session.cache.slots
        self.watchers = watchers
        self.on_close = on_close  # the ISR check looks at its partitions again
        self.clock = clock
        self.sessions: dict[int, FetchSession] = {}  # in least recently used order

    def resolve(self, request: broker_pb2.FetchRequest, owner: str = "") -> FetchSession | None:
        """The session an incremental request belongs to (a new one for session id 0), its epoch
        checked and advanced; SessionError when it is unknown or out of step. None: no room for a
        consumer's new session (followers' sessions are not evicted for one), so the fetch is
        answered whole, without a session, as Kafka's broker does."""
        if request.session_id == 0:
            return self._open(request.replica_id, owner)
        session = self.sessions.get(request.session_id)
        if session is None or session.replica_id != request.replica_id or session.owner != owner:
            raise SessionError(ErrorCode.FETCH_SESSION_ID_NOT_FOUND, f"no fetch session {request.session_id}")
        if request.session_epoch == session.epoch:
            session.epoch += 1
        elif session.replica_id >= 0 and request.session_epoch == session.epoch - 1:
            # A follower sends the epoch before only for a fetch it cut short just as we answered
            # it (replica_fetcher's _interrupt): that answer never arrived, so this request takes
            # its place at the same epoch and what it carried is news again. (Refused, the
            # follower opened a new session: a full fetch of thousands of partitions.)
            session.answer_lost()
        else:
            raise SessionError(
                ErrorCode.INVALID_FETCH_SESSION_EPOCH,
                f"fetch session {session.id} expects epoch {session.epoch}, not {request.session_epoch}",
            )
        self.sessions[session.id] = self.sessions.pop(session.id)  # most recently used last
        return session

    def _open(self, replica_id: int, owner: str) -> FetchSession | None:
        if replica_id >= 0:
            for older in [s for s in self.sessions.values() if s.replica_id == replica_id]:
                self._close(older)  # one fetcher per leader: its earlier session is dead
        else:
            self._close_idle_consumers()
        while self.sessions and len(self.sessions) >= self.slots:
            # The least recently used goes; a consumer's new session takes only a consumer's place.
            evicted = next((s for s in self.sessions.values() if replica_id >= 0 or s.replica_id < 0), None)
            if evicted is None:
                return None
            self._close(evicted)
        session_id = self._new_id()
        session = FetchSession(session_id, replica_id, self.watchers, self.clock, owner=owner)
        self.sessions[session_id] = session
        return session

    def _close_idle_consumers(self) -> None:
        """Consumers' sessions with no fetch for CONSUMER_SESSION_IDLE_S: their consumers closed or
        died (a live one fetches at least every fetch.max.wait.ms). Closed as new ones open, so
        short-lived consumers (a Spark task's, a REST instance's) leave no sessions that every
        append to their partitions would still mark; one that comes back opens another."""
        horizon = self.clock() - CONSUMER_SESSION_IDLE_S
        for session in [s for s in self.sessions.values() if s.replica_id < 0 and s.last_fetch_s < horizon]:
            self._close(session)

    def _new_id(self) -> int:
        """A random id in use by no session: another client cannot guess its way into one."""
        while True:
            session_id = secrets.randbelow(SESSION_ID_MAX) + 1
            if session_id not in self.sessions:
                return session_id

    def close(self, session: FetchSession) -> None:
        """End a session now (its caller lost the right to read what it holds)."""
        self._close(session)

    def _close(self, session: FetchSession) -> None:
        self.sessions.pop(session.id, None)
        session.close()
        self.on_close(session)

    def close_all(self) -> None:
        for session in list(self.sessions.values()):
            self._close(session)
