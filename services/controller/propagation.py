"""Getting the controller's state to the brokers (the pushing half of Kafka's channel manager).

A push brings a broker up to the state as it is when the push starts: whole the first time in a
controller term (and after the broker registered again, or a push did not reach it), afterwards
only what changed since the push it acknowledged last (`state_delta`). Pushes to one broker run
one at a time, so a broker never receives an older state after a newer one (a full LeaderAndIsr
stops replicas it does not list, so an old one arriving late would stop a new partition), and each
delta is computed against what the broker really acknowledged. Each broker has its own queue, so a
stalled broker delays only its own updates; a broker a push did not reach is pushed again (whole)
every RESYNC_INTERVAL_S.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Collection, Coroutine, Iterable
from typing import Any, Final

from tidelog.controller.broker_requests import BrokerRequests
from tidelog.controller.controller_role import ControllerRole
from tidelog.controller.metadata_store import MetadataStore
from tidelog.controller.state_delta import BrokerView, WholeState, build_push
from tidelog.v1 import broker_pb2, common_pb2

__all__ = ["Propagation"]

RESYNC_INTERVAL_S: Final = 1.0


class Propagation:
    def __init__(
        self,
        broker_requests: BrokerRequests,
        store: MetadataStore,
        role: ControllerRole,
        *,
        controller_id: int,
        endpoint: str,
        leader_balance: broker_pb2.LeaderBalance | None = None,
        shutting_down: Collection[int] = (),
        on_first_push: Callable[[int], None] | None = None,
    ) -> None:
        self.broker_requests = broker_requests
        self.store = store
        self.role = role
        self.controller_id = controller_id
        self.endpoint = endpoint
        self.leader_balance = leader_balance  # told to every broker: its readiness waits for the hand-back
        self.shutting_down = shutting_down  # (the leadership's live set) told to every broker: KIP-841
        self._push_locks: dict[int, asyncio.Lock] = {}
        self._queued_push: dict[int, asyncio.Future[None]] = {}
        self._background: set[asyncio.Task[Any]] = set()
        self._unsynced: set[int] = set()  # live brokers the last push did not reach
        self._views: dict[int, BrokerView] = {}  # what each broker acknowledged in this term
        self._whole: WholeState | None = None  # shared by the whole pushes of one propagation
        # Brokers that applied a push since they registered (a life's first push is whole: 10,000
        # partitions take seconds), and whom to tell when one does (the leader rebalance).
        self._applied: set[int] = set()
        self._on_first_push = on_first_push

    def forget(self, broker_id: int) -> None:
        """The next push to `broker_id` is whole: it registered (again) and may hold anything. (A
        new controller term needs no call: its state is loaded anew, with a journal of its own, and
        a view from another journal is no view — `build_push`.)"""
        self._views.pop(broker_id, None)
        self._applied.discard(broker_id)

    def applied_since_registering(self, broker_id: int) -> bool:
        """Whether the broker applied a push of this term since it (re-)registered: until then it
        holds no partition state from us, and leadership handed to it waits for that push."""
        return broker_id in self._applied

    def _acknowledged(self, broker_id: int, view: BrokerView) -> None:
        """The broker's life that a push was built for holds it now."""
        self._views[broker_id] = view
        if broker_id not in self._applied:
            self._applied.add(broker_id)
            if self._on_first_push is not None:
                self._on_first_push(broker_id)

    async def propagate(self, brokers: Iterable[int]) -> None:
        """Bring `brokers` up to the current state (LeaderAndIsr, then UpdateMetadata; see above)."""
        try:
            await asyncio.gather(*(self._push(broker_id) for broker_id in set(brokers)))
        finally:
            self._whole = None  # (megabytes at 10,000 partitions: not kept for the whole term)

    def propagate_soon(self, brokers: Iterable[int]) -> None:
        """`propagate` in the background: for callers that must not wait on a slow broker."""
        self._in_background(self.propagate(list(brokers)))

    def stop_replicas_soon(self, stopped: list[common_pb2.PartitionState]) -> None:
        """Tell the brokers to stop and delete these replicas, in the background."""
        state = self.store.state
        self._in_background(
            self.broker_requests.stop_replicas(stopped, self.controller_id, self.role.epoch, state.brokers, delete=True)
        )

    async def stop_replicas(self, stopped: list[common_pb2.PartitionState]) -> None:
        state = self.store.state
        await self.broker_requests.stop_replicas(
            stopped, self.controller_id, self.role.epoch, state.brokers, delete=True
        )

    def _in_background(self, work: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def cancel_background(self) -> None:
        """At the end of a term: what this term started in the background stops."""
        for task in list(self._background):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _push(self, broker_id: int) -> None:
        queued = self._queued_push.get(broker_id)
        if queued is not None:
            # A push not yet started will carry the state as of its start: newer than ours.
            await asyncio.shield(queued)
            return
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queued_push[broker_id] = done
        try:
            async with self._push_locks.setdefault(broker_id, asyncio.Lock()):
                if self._queued_push.get(broker_id) is done:
                    del self._queued_push[broker_id]  # later changes need a push of their own
                reached = await self._push_now(broker_id)
                if reached:
                    self._unsynced.discard(broker_id)
                else:
                    self._unsynced.add(broker_id)
        finally:
            if self._queued_push.get(broker_id) is done:
                del self._queued_push[broker_id]
            done.set_result(None)

    async def _push_now(self, broker_id: int) -> bool:
        """One push (under the broker's lock); False when the broker was not reached."""
        state = self.store.state
        broker = state.brokers.get(broker_id)
        if broker is None:
            self._views.pop(broker_id, None)
            return True  # gone: it gets everything when it registers again
        push = build_push(
            state,
            broker_id=broker_id,
            controller_id=self.controller_id,
            controller_epoch=self.role.epoch,
            controller_endpoint=self.endpoint,
            view=self._views.pop(broker_id, None),  # until acknowledged, what it holds is unknown
            leader_balance=self.leader_balance,
            shutting_down=self.shutting_down,
            whole=self._whole,
        )
        if push.whole is not None:
            self._whole = push.whole
        if push.empty:
            self._acknowledged(broker_id, push.view)
            return True
        refused = await self.broker_requests.send_push(broker, push)
        if refused is None:
            return False
        push.view.retry = refused  # sent again with the next push
        if self.store.state.brokers.get(broker_id) is broker:  # (not when it registered again meanwhile: `forget`)
            self._acknowledged(broker_id, push.view)
        return True

    async def resync(self) -> None:
        """Push whole state again, every second, to live brokers a push did not reach."""
        while True:
            await asyncio.sleep(RESYNC_INTERVAL_S)
            stale = {broker for broker in self._unsynced if broker in self.store.state.brokers}
            self._unsynced &= stale
            if stale and self.role.is_active:
                await self.propagate(stale)
