"""Kafka's messages as compiled from Kafka's own definitions: every message at every version
round-trips, the encoding agrees byte for byte with kafka-python's hand-written structs (an
independent implementation), and bad bytes raise MalformedFrameError, never anything else."""

from __future__ import annotations

import uuid
from importlib import resources

import pytest
from kafka.protocol.old.fetch import FetchRequest_v4
from kafka.protocol.old.metadata import MetadataResponse_v1

from tidelog.common.kafka_wire.message_codec import codec, valid_versions
from tidelog.common.kafka_wire.primitives import ZERO_UUID, MalformedFrameError, Reader
from tidelog.common.kafka_wire.request_frames import UnsupportedVersionError, frame_response, parse_request

MESSAGES = sorted(
    path.name.removesuffix(".json")
    for path in resources.files("tidelog.common.kafka_wire").joinpath("messages").iterdir()
    if path.name.endswith(".json") and not path.name.endswith("Header.json")
)


def _every_version() -> list[tuple[str, int]]:
    cases = []
    for name in MESSAGES:
        low, high = valid_versions(name)
        cases += [(name, version) for version in range(low, high + 1)]
    return cases


@pytest.mark.parametrize(("name", "version"), _every_version())
def test_every_message_at_every_version_reads_back_what_it_wrote(name: str, version: int) -> None:
    message_codec = codec(name, version)
    default = message_codec.default()
    assert message_codec.decode(message_codec.encode(default)) == default


def test_a_populated_metadata_response_round_trips_at_the_first_flexible_and_the_newest_version() -> None:
    topic_id = uuid.uuid4()
    body = {
        "ThrottleTimeMs": 5,
        "Brokers": [
            {"NodeId": 1, "Host": "h1", "Port": 9092, "Rack": None},
            {"NodeId": 2, "Host": "h2", "Port": 9093, "Rack": "r"},
        ],
        "ClusterId": "c",
        "ControllerId": 1,
        "Topics": [
            {
                "ErrorCode": 0,
                "Name": "t",
                "TopicId": topic_id,
                "IsInternal": False,
                "Partitions": [
                    {
                        "ErrorCode": 0,
                        "PartitionIndex": 0,
                        "LeaderId": 2,
                        "LeaderEpoch": 7,
                        "ReplicaNodes": [2, 1],
                        "IsrNodes": [2],
                        "OfflineReplicas": [1],
                    }
                ],
                "TopicAuthorizedOperations": -(2**31),
            }
        ],
    }
    for version in (9, 12):
        metadata = codec("MetadataResponse", version)
        decoded = metadata.decode(metadata.encode(body))
        assert decoded["Topics"][0]["TopicId"] == (topic_id if version >= 10 else ZERO_UUID)  # ids: v10+
        assert decoded["Brokers"][1]["Rack"] == "r"
        assert decoded["Topics"][0]["Partitions"][0]["OfflineReplicas"] == [1]


def test_a_metadata_response_is_encoded_as_kafka_pythons_hand_written_struct_encodes_it() -> None:
    body = {
        "Brokers": [{"NodeId": 1, "Host": "localhost", "Port": 9092, "Rack": "r1"}],
        "ControllerId": 1,
        "Topics": [
            {
                "ErrorCode": 0,
                "Name": "t",
                "IsInternal": False,
                "Partitions": [
                    {"ErrorCode": 0, "PartitionIndex": 0, "LeaderId": 1, "ReplicaNodes": [1], "IsrNodes": [1]}
                ],
            }
        ],
    }
    theirs = MetadataResponse_v1(
        brokers=[(1, "localhost", 9092, "r1")], controller_id=1, topics=[(0, "t", False, [(0, 0, 1, [1], [1])])]
    ).encode()
    assert codec("MetadataResponse", 1).encode(body) == theirs


def test_a_fetch_request_from_kafka_pythons_struct_decodes_field_for_field() -> None:
    encoded = FetchRequest_v4(
        replica_id=-1,
        max_wait_time=500,
        min_bytes=1,
        max_bytes=1024,
        isolation_level=1,
        topics=[("t", [(3, 42, 4096)])],
    ).encode()
    decoded = codec("FetchRequest", 4).decode(encoded)
    assert decoded["MaxWaitMs"] == 500 and decoded["IsolationLevel"] == 1 and decoded["MaxBytes"] == 1024
    partition = decoded["Topics"][0]["Partitions"][0]
    assert (decoded["Topics"][0]["Topic"], partition["Partition"], partition["FetchOffset"]) == ("t", 3, 42)
    assert partition["PartitionMaxBytes"] == 4096
    assert decoded["SessionEpoch"] == -1  # a field v4 lacks reads as Kafka's default


def test_unknown_tagged_fields_are_skipped_and_known_ones_read() -> None:
    fetch = codec("FetchRequest", 12)
    body = fetch.default()
    body["ClusterId"] = "abc"  # tag 0 in v12+
    encoded = bytearray(fetch.encode(body))
    assert fetch.decode(bytes(encoded))["ClusterId"] == "abc"
    # The top level's tag section is last: replace it with one unknown tag (99) of 3 bytes.
    plain = bytearray(fetch.encode(fetch.default()))
    assert plain[-1] == 0  # no tagged fields
    plain[-1:] = bytes([1, 99, 3, 1, 2, 3])
    assert fetch.decode(bytes(plain)) == fetch.default()


@pytest.mark.parametrize(
    "mutilate",
    [
        lambda data: data[:-1],  # truncated
        lambda data: data + b"\x00",  # a byte too many
        lambda data: data[:8] + b"\x7f\xff\xff\xff" + data[12:],  # an array claiming 2**31 - 1 elements
    ],
)
def test_bytes_that_do_not_parse_raise_malformed_frame(mutilate: object) -> None:
    produce = codec("ProduceRequest", 3)
    body = {"TransactionalId": None, "Acks": -1, "TimeoutMs": 1000, "TopicData": [{"Name": "t", "PartitionData": []}]}
    data = produce.encode(body)
    with pytest.raises(MalformedFrameError):
        produce.decode(mutilate(data))  # type: ignore[operator]


def test_a_string_that_is_not_utf8_and_a_runaway_varint_are_malformed() -> None:
    with pytest.raises(MalformedFrameError, match="UTF-8"):
        Reader(b"\x00\x02\xff\xfe").string(compact=False, nullable=False)
    with pytest.raises(MalformedFrameError, match="longer than 5"):
        Reader(b"\xff\xff\xff\xff\xff\xff").uvarint()
    with pytest.raises(MalformedFrameError):
        Reader(b"\xff\xff").string(compact=False, nullable=False)  # -1 where null is not allowed


SERVED = {18: ("ApiVersions", 0, 3), 3: ("Metadata", 0, 12)}


def test_a_request_frame_parses_its_header_by_the_versions_flexibility() -> None:
    flexible = codec("ApiVersionsRequest", 3)
    body = {"ClientSoftwareName": "kcat", "ClientSoftwareVersion": "1.7"}
    # Header v2: api key, version, correlation id, client id (int16-prefixed), no tagged fields.
    frame = b"\x00\x12\x00\x03\x00\x00\x00\x07" + b"\x00\x02id" + b"\x00" + flexible.encode(body)
    parsed = parse_request(frame, SERVED)
    assert (parsed.api_key, parsed.version, parsed.correlation_id, parsed.client_id) == (18, 3, 7, "id")
    assert parsed.body == body
    old = b"\x00\x03\x00\x01\x00\x00\x00\x08\xff\xff" + codec("MetadataRequest", 1).encode({"Topics": None})
    assert parse_request(old, SERVED).body["Topics"] is None


def test_unknown_api_keys_and_versions_are_refused_and_api_versions_says_which() -> None:
    with pytest.raises(MalformedFrameError, match="unknown API key"):
        parse_request(b"\x00\x63\x00\x00\x00\x00\x00\x01\xff\xff", SERVED)
    with pytest.raises(UnsupportedVersionError) as refused:
        parse_request(b"\x00\x12\x00\x09\x00\x00\x00\x05\xff\xff", SERVED)
    assert (refused.value.api_key, refused.value.correlation_id) == (18, 5)


def test_api_versions_answers_with_response_header_v0_even_at_a_flexible_version() -> None:
    body = {"ErrorCode": 0, "ApiKeys": [{"ApiKey": 18, "MinVersion": 0, "MaxVersion": 3}], "ThrottleTimeMs": 0}
    framed = frame_response("ApiVersions", 18, 3, 11, body)
    assert framed[4:8] == b"\x00\x00\x00\x0b"
    assert codec("ApiVersionsResponse", 3).decode(framed[8:])["ApiKeys"][0]["MaxVersion"] == 3
    metadata = frame_response("Metadata", 3, 12, 11, codec("MetadataResponse", 12).default())
    assert metadata[8] == 0  # flexible response header v1: an empty tagged-field section


def test_bytes_after_a_body_are_ignored_as_kafka_ignores_them() -> None:
    # librdkafka 2.x's Metadata v12 for every topic, byte for byte: its compact array count is
    # written into a four-byte placeholder, so three zero bytes follow what the body holds.
    frame = bytes.fromhex("0003000c00000003000772646b61666b610000000000010000")
    parsed = parse_request(frame, SERVED)
    assert parsed.body["Topics"] is None and parsed.correlation_id == 3
