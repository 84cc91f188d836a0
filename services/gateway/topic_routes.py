"""v2 metadata: topics and partitions (leader, replicas, in-sync flags) and partition offsets."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path
from starlette.responses import Response

from tidelog.client import TopicPartition
from tidelog.common.errors import TidelogError
from tidelog.gateway.gateway_context import GatewayContext, context
from tidelog.gateway.responses import ERROR_RESPONSES, KafkaV2Response, json_response
from tidelog.gateway.rest_errors import PARTITION_NOT_FOUND, RestError, from_tidelog
from tidelog.gateway.rest_models import PartitionInfo, PartitionOffsets, TopicInfo
from tidelog.server_common.metadata import CONSUMER_OFFSETS_TOPIC
from tidelog.v1 import common_pb2

__all__ = ["router"]

router = APIRouter(tags=["topics (v2)"], default_response_class=KafkaV2Response, responses=ERROR_RESPONSES)

TopicName = Annotated[str, Path(pattern=r"^[A-Za-z0-9._-]{1,249}$")]
PartitionId = Annotated[int, Path(ge=0, le=1_000_000)]
Context = Annotated[GatewayContext, Depends(context)]


def _partition(state: common_pb2.PartitionState) -> dict[str, Any]:
    return {
        "partition": state.partition,
        "leader": state.leader,
        "replicas": [
            {"broker": broker, "leader": broker == state.leader, "in_sync": broker in state.isr}
            for broker in state.replicas
        ],
    }


async def _describe(ctx: GatewayContext, topic: str) -> tuple[list[common_pb2.PartitionState], dict[str, str]]:
    try:
        described = (await ctx.admin.describe_topics([topic]))[topic]
    except TidelogError as error:
        raise from_tidelog(error) from None
    if isinstance(described, TidelogError):
        raise from_tidelog(described)
    return described.partitions, described.configs


def _one(partitions: list[common_pb2.PartitionState], topic: str, partition: int) -> common_pb2.PartitionState:
    for state in partitions:
        if state.partition == partition:
            return state
    raise RestError(PARTITION_NOT_FOUND, f"topic {topic!r} has no partition {partition}")


@router.get("/topics", summary="Topic names", response_model=list[str])
async def list_topics(ctx: Context) -> Response:
    try:
        names = await ctx.admin.list_topics()
    except TidelogError as error:
        raise from_tidelog(error) from None
    return json_response([name for name in names if name != CONSUMER_OFFSETS_TOPIC])


@router.get("/topics/{topic}", summary="A topic: its configs and partitions", response_model=TopicInfo)
async def get_topic(topic: TopicName, ctx: Context) -> Response:
    partitions, configs = await _describe(ctx, topic)
    return json_response({"name": topic, "configs": configs, "partitions": [_partition(p) for p in partitions]})


@router.get("/topics/{topic}/partitions", summary="A topic's partitions", response_model=list[PartitionInfo])
async def list_partitions(topic: TopicName, ctx: Context) -> Response:
    partitions, _ = await _describe(ctx, topic)
    return json_response([_partition(p) for p in partitions])


@router.get(
    "/topics/{topic}/partitions/{partition}",
    summary="One partition: leader, replicas, in-sync flags",
    response_model=PartitionInfo,
)
async def get_partition(topic: TopicName, partition: PartitionId, ctx: Context) -> Response:
    partitions, _ = await _describe(ctx, topic)
    return json_response(_partition(_one(partitions, topic, partition)))


@router.get(
    "/topics/{topic}/partitions/{partition}/offsets",
    summary="A partition's first and end offsets",
    response_model=PartitionOffsets,
)
async def get_partition_offsets(topic: TopicName, partition: PartitionId, ctx: Context) -> Response:
    partitions, _ = await _describe(ctx, topic)
    _one(partitions, topic, partition)
    tp = TopicPartition(topic, partition)
    try:
        beginning = await ctx.offsets.list_offsets([tp], -2)
        end = await ctx.offsets.list_offsets([tp], -1)
    except TidelogError as error:
        raise from_tidelog(error) from None
    return json_response({"beginning_offset": beginning[tp], "end_offset": end[tp]})
