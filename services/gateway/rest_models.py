"""Request and response bodies of the v2 API (REST Proxy's shapes), defined once: the routes
validate with these and the OpenAPI document is generated from them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "BinaryProduceBody",
    "BinaryProduceRecord",
    "Cluster",
    "ClusterList",
    "CommittedOffset",
    "CommittedOffsets",
    "ConsumerCreated",
    "CreateConsumer",
    "OffsetsBody",
    "PartitionInfo",
    "PartitionOffset",
    "PartitionOffsets",
    "PartitionsBody",
    "ProduceBody",
    "ProduceRecord",
    "ProduceResponse",
    "RecordHeader",
    "RecordReport",
    "Replica",
    "RestErrorBody",
    "Subscription",
    "SubscriptionBody",
    "TopicInfo",
    "TopicPartitionBody",
    "TopicPartitionOffsetBody",
    "V3Data",
    "V3Header",
    "V3Record",
]

_NAME = r"^[A-Za-z0-9._-]{1,249}$"
BASE64 = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"


class RestErrorBody(BaseModel):
    error_code: int
    message: str


class RecordHeader(BaseModel):
    """A record header (an extension of v2, as v3 has them): name, value in base64 or null."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=32_767)
    value: str | None = Field(default=None, pattern=BASE64)


class ProduceRecord(BaseModel):
    model_config = ConfigDict(extra="ignore")
    key: Any = None
    value: Any = None
    partition: int | None = Field(default=None, ge=0)
    headers: list[RecordHeader] | None = None
    timestamp: int | None = Field(default=None, ge=0, description="milliseconds since the epoch (extension)")


class ProduceBody(BaseModel):
    """A produce request in the json format (keys and values any JSON)."""

    model_config = ConfigDict(extra="ignore")  # key_schema / value_schema of other formats are ignored
    records: list[ProduceRecord] = Field(min_length=1)


class BinaryProduceRecord(ProduceRecord):
    key: str | None = Field(default=None, pattern=BASE64)
    value: str | None = Field(default=None, pattern=BASE64)


class BinaryProduceBody(ProduceBody):
    """A produce request in the binary format (keys and values base64)."""

    records: list[BinaryProduceRecord] = Field(min_length=1)  # type: ignore[assignment]


class PartitionOffset(BaseModel):
    partition: int | None
    offset: int | None
    error_code: int | None = None
    error: str | None = None


class ProduceResponse(BaseModel):
    key_schema_id: int | None = None
    value_schema_id: int | None = None
    offsets: list[PartitionOffset]


class CreateConsumer(BaseModel):
    """A new consumer instance. Numbers and booleans may come as strings, as REST Proxy's do."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    name: str | None = Field(default=None, pattern=_NAME)
    format: Literal["binary", "json"] = "binary"
    auto_offset_reset: Literal["earliest", "latest", "none"] = Field(default="latest", alias="auto.offset.reset")
    auto_commit_enable: bool = Field(default=True, alias="auto.commit.enable")
    # KIP-98: read_committed reads below the last stable offset and skips aborted transactions.
    isolation_level: Literal["read_uncommitted", "read_committed"] = Field(
        default="read_uncommitted", alias="isolation.level"
    )
    fetch_min_bytes: int = Field(default=1, ge=1, le=2**30, alias="fetch.min.bytes")
    consumer_request_timeout_ms: int | None = Field(default=None, ge=0, le=300_000, alias="consumer.request.timeout.ms")


class ConsumerCreated(BaseModel):
    instance_id: str
    base_uri: str


class SubscriptionBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    topics: list[str] | None = None
    topic_pattern: str | None = Field(default=None, max_length=4096)


class TopicPartitionBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    topic: str = Field(pattern=_NAME)
    partition: int = Field(ge=0)


class PartitionsBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    partitions: list[TopicPartitionBody]


class TopicPartitionOffsetBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    topic: str = Field(pattern=_NAME)
    partition: int = Field(ge=0)
    offset: int = Field(ge=0)
    metadata: str | None = None


class OffsetsBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    offsets: list[TopicPartitionOffsetBody]


class Replica(BaseModel):
    broker: int
    leader: bool
    in_sync: bool


class PartitionInfo(BaseModel):
    partition: int
    leader: int
    replicas: list[Replica]


class TopicInfo(BaseModel):
    name: str
    configs: dict[str, str]
    partitions: list[PartitionInfo]


class PartitionOffsets(BaseModel):
    beginning_offset: int
    end_offset: int


class Subscription(BaseModel):
    topics: list[str]


class CommittedOffset(BaseModel):
    topic: str
    partition: int
    offset: int
    metadata: str


class CommittedOffsets(BaseModel):
    offsets: list[CommittedOffset]


class Cluster(BaseModel):
    kind: str
    cluster_id: str


class ClusterList(BaseModel):
    kind: str
    data: list[Cluster]


class RecordReport(BaseModel):
    """One delivery report of a v3 produce: error_code 200 and where the record went, or an error."""

    error_code: int
    message: str | None = None
    cluster_id: str | None = None
    topic_name: str | None = None
    partition_id: int | None = None
    offset: int | None = None
    timestamp: str | None = None
    key: dict[str, Any] | None = None
    value: dict[str, Any] | None = None


class V3Data(BaseModel):
    type: Literal["BINARY", "JSON", "STRING"] = "JSON"
    data: Any = None


class V3Header(BaseModel):
    name: str
    value: str | None = Field(default=None, pattern=BASE64)


class V3Record(BaseModel):
    """One record of a v3 produce; a streaming produce sends many, one after another."""

    partition_id: int | None = Field(default=None, ge=0)
    headers: list[V3Header] | None = None
    key: V3Data | None = None
    value: V3Data | None = None
    timestamp: str | int | None = Field(default=None, description="ISO 8601, or milliseconds since the epoch")
