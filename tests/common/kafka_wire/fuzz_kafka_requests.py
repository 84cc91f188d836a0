"""Coverage-guided fuzzing (atheris, libFuzzer) of what the Kafka listener reads from a socket: any
bytes must parse as a request of some API and version, or fail with MalformedFrameError; any bytes
in a Produce request's records must transcode or fail with a TidelogError — never another
exception, a hang or a crash (aiokafka's Cython codec and our compiled transcoder included). Bytes
after RECORDS_CRC_MADE_RIGHT have each batch's CRC written right first, so that the fuzzer reaches
the records themselves (_v2records.c) and not only the CRC check.

    .venv/bin/python tests/common/kafka_wire/fuzz_kafka_requests.py -runs=200000 CORPUS_DIR

`test_kafka_requests_fuzz.py` replays the committed corpus (fuzz_corpus/) in every run and fuzzes
for a bounded number of runs.
"""

from __future__ import annotations

import contextlib
import struct
import sys
from importlib import resources

import atheris
import crc32c

with atheris.instrument_imports(include=["tidelog"]):  # only ours: instrumenting every library took 10 s a start
    from tidelog.common.errors import TidelogError
    from tidelog.common.kafka_wire import message_codec
    from tidelog.common.kafka_wire.primitives import MalformedFrameError
    from tidelog.common.kafka_wire.record_batches import from_kafka_batches, kafka_batch_spans, to_kafka_batches
    from tidelog.common.kafka_wire.request_frames import parse_request

# Every request definition at every version it has: the fuzzer reaches all of them.
SERVED = {}
for entry in resources.files("tidelog.common.kafka_wire").joinpath("messages").iterdir():
    if entry.name.endswith("Request.json") and entry.name != "RequestHeader.json":
        name = entry.name.removesuffix("Request.json")
        definition = message_codec._definition(name + "Request")
        SERVED[int(definition["apiKey"])] = (name, *message_codec.valid_versions(name + "Request"))
RECORDS = 0x7F  # a first byte that makes the rest a Produce request's records
RECORDS_CRC_MADE_RIGHT = 0x7E  # the same, each batch's CRC written right first


def _crc_made_right(data: bytes) -> bytes:
    out = bytearray(data)
    with contextlib.suppress(TidelogError):
        for start, size in kafka_batch_spans(out):
            struct.pack_into(">I", out, start + 17, crc32c.crc32c(bytes(out[start + 21 : start + size])))
    return bytes(out)


def fuzz_one(data: bytes) -> None:
    if data[:1] in (bytes([RECORDS]), bytes([RECORDS_CRC_MADE_RIGHT])):
        records = data[1:] if data[0] == RECORDS else _crc_made_right(data[1:])
        with contextlib.suppress(TidelogError):
            stored = from_kafka_batches(records)
            to_kafka_batches(stored)  # what was accepted goes back out
        return
    with contextlib.suppress(MalformedFrameError):
        parse_request(data, SERVED)


def main() -> None:
    atheris.Setup(sys.argv, fuzz_one)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
