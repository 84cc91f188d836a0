"""Coverage-guided fuzzing (atheris, libFuzzer) of what the Kafka listener reads from a socket: any
bytes must parse as a request of some API and version, or fail with MalformedFrameError; any bytes
in a Produce request's records must transcode or fail with a TidelogError — never another
exception, a hang or a crash (aiokafka's Cython codec included).

    .venv/bin/python tests/common/kafka_wire/fuzz_kafka_requests.py -runs=200000 CORPUS_DIR

`test_kafka_requests_fuzz.py` replays the committed corpus (fuzz_corpus/) in every run and fuzzes
for a bounded number of runs.
"""

from __future__ import annotations

import contextlib
import sys
from importlib import resources

import atheris

with atheris.instrument_imports():
    from tidelog.common.errors import TidelogError
    from tidelog.common.kafka_wire import message_codec
    from tidelog.common.kafka_wire.primitives import MalformedFrameError
    from tidelog.common.kafka_wire.record_batches import from_kafka_batches, to_kafka_batches
    from tidelog.common.kafka_wire.request_frames import parse_request

# Every request definition at every version it has: the fuzzer reaches all of them.
SERVED = {}
for entry in resources.files("tidelog.common.kafka_wire").joinpath("messages").iterdir():
    if entry.name.endswith("Request.json") and entry.name != "RequestHeader.json":
        name = entry.name.removesuffix("Request.json")
        definition = message_codec._definition(name + "Request")
        SERVED[int(definition["apiKey"])] = (name, *message_codec.valid_versions(name + "Request"))
RECORDS = 0x7F  # a first byte that makes the rest a Produce request's records


def fuzz_one(data: bytes) -> None:
    if data[:1] == bytes([RECORDS]):
        with contextlib.suppress(TidelogError):
            stored = from_kafka_batches(data[1:])
            to_kafka_batches(stored)  # what was accepted goes back out
        return
    with contextlib.suppress(MalformedFrameError):
        parse_request(data, SERVED)


def main() -> None:
    atheris.Setup(sys.argv, fuzz_one)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
