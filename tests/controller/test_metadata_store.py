"""The controller's fenced writes of partition states, against a real etcd (tests/conftest.py)."""

from __future__ import annotations

import uuid

import pytest
from etcd3aio import Etcd3Client

from tidelog.controller.controller_role import ControllerRole, Role
from tidelog.controller.metadata_store import STATES_PER_TXN, ConflictError, MetadataStore
from tidelog.server_common.etcd.election import Election
from tidelog.server_common.etcd.session import Session
from tidelog.server_common.metadata import PartitionStateRecord, partition_state_key


async def _leading_store(etcd: Etcd3Client) -> tuple[MetadataStore, Session]:
    role = ControllerRole(97_101)
    role.move(Role.LOADING, reason="test")
    session = await Session(etcd, ttl_s=60).start()
    election = Election(session, f"/tidelog-test/election-{uuid.uuid4().hex}")
    await election.campaign(b"97101")
    store = MetadataStore(etcd, role)
    store.election = election
    return store, session


def _states(topic: str, count: int, epoch: int = 0) -> dict[tuple[str, int], PartitionStateRecord]:
    return {(topic, p): PartitionStateRecord(1, [1, 2], epoch, epoch, 1) for p in range(count)}


async def test_a_write_of_many_chunks_lands_whole_and_each_state_carries_its_revision(
    etcd_client: Etcd3Client,
) -> None:
    store, session = await _leading_store(etcd_client)
    topic = f"ms-{uuid.uuid4().hex[:8]}"
    try:
        count = STATES_PER_TXN * 7 + 3  # chunks sent side by side
        await store.write_states(_states(topic, count))
        assert etcd_client.kv is not None
        for partition in (0, STATES_PER_TXN, count - 1):
            stored = (await etcd_client.kv.get(partition_state_key(topic, partition))).kvs[0]
            held = store.state.partitions[(topic, partition)]
            assert PartitionStateRecord.from_json(stored.value) == held.value
            assert held.mod_revision == stored.mod_revision  # the next write compares against it
        await store.write_states(
            {key: state.changed(controller_epoch=1, isr=[1]) for key, state in _states(topic, count).items()}
        )
        assert store.state.partitions[(topic, count - 1)].value.isr == [1]
    finally:
        await session.close(revoke=True)


async def test_a_chunk_etcd_refuses_deposes_the_controller_and_fails_the_write(etcd_client: Etcd3Client) -> None:
    store, session = await _leading_store(etcd_client)
    topic = f"ms-{uuid.uuid4().hex[:8]}"
    try:
        count = STATES_PER_TXN * 5
        await store.write_states(_states(topic, count))
        assert etcd_client.kv is not None
        # Someone else wrote one state of the fourth chunk: our copy is stale there.
        await etcd_client.kv.put(partition_state_key(topic, STATES_PER_TXN * 3 + 1), b"{}")
        changed = {key: state.changed(controller_epoch=1, isr=[1]) for key, state in _states(topic, count).items()}
        with pytest.raises(ConflictError):
            await store.write_states(changed)
        assert store.role.current is Role.DEPOSED
        stored = (await etcd_client.kv.get(partition_state_key(topic, STATES_PER_TXN * 3 + 1))).kvs[0]
        assert stored.value == b"{}"  # the refused chunk wrote nothing
    finally:
        await session.close(revoke=True)
