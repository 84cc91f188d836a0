"""Request and response bodies of the v2 API (REST Proxy's shapes), defined once: the routes
validate with these and the OpenAPI document is generated from them."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "ConsumerCreated",
    "CreateConsumer",
    "OffsetsBody",
    "PartitionOffset",
    "PartitionsBody",
    "ProduceBody",
    "ProduceRecord",
    "ProduceResponse",
    "RecordHeader",
    "RestErrorBody",
    "SubscriptionBody",
    "TopicPartitionBody",
    "TopicPartitionOffsetBody",
]

_NAME = r"^[A-Za-z0-9._-]{1,249}$"


class RestErrorBody(BaseModel):
    error_code: int
    message: str


class RecordHeader(BaseModel):
    """A record header (an extension of v2, as v3 has them): name, value in base64 or null."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=32_767)
    value: str | None = None


class ProduceRecord(BaseModel):
    model_config = ConfigDict(extra="ignore")
    key: Any = None
    value: Any = None
    partition: int | None = Field(default=None, ge=0)
    headers: list[RecordHeader] | None = None
    timestamp: int | None = Field(default=None, ge=0, description="milliseconds since the epoch (extension)")


class ProduceBody(BaseModel):
    model_config = ConfigDict(extra="ignore")  # key_schema / value_schema of other formats are ignored
    records: list[ProduceRecord] = Field(min_length=1)


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
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    name: str | None = Field(default=None, pattern=_NAME)
    format: str = "binary"
    auto_offset_reset: str | None = Field(default=None, alias="auto.offset.reset")
    auto_commit_enable: str | bool | None = Field(default=None, alias="auto.commit.enable")
    fetch_min_bytes: int | str | None = Field(default=None, alias="fetch.min.bytes")
    consumer_request_timeout_ms: int | str | None = Field(default=None, alias="consumer.request.timeout.ms")


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
