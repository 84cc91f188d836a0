"""Coverage-guided fuzzing (atheris, libFuzzer) of the record batch decoder: any bytes a client or a
disk could hand it must decode or fail with a TidelogError (CorruptRecordError, InvalidRecordError,
RecordTooLargeError) — never another exception, a hang or a crash.

    .venv/bin/python tests/common/record/fuzz_record_batch.py -runs=200000 CORPUS_DIR

`test_batch_fuzz.py` replays the committed corpus (fuzz_corpus/) in every run and fuzzes for a
bounded number of runs; each crash found becomes a file of the corpus and a regression test.
"""

from __future__ import annotations

import contextlib
import sys

import atheris

with atheris.instrument_imports():
    from tidelog.common.errors import TidelogError
    from tidelog.common.record import batch as record_batch

LIMIT = 1 << 20  # as max.message.bytes would bound it


def fuzz_one(data: bytes) -> None:
    """Every decoder entry point on `data`; only TidelogError may come out."""
    with contextlib.suppress(TidelogError):
        record_batch.validate_batch(data, max_bytes=LIMIT)
    with contextlib.suppress(TidelogError):
        record_batch.decode_batch(data, verify_crc=False)  # past the CRC, into the records
    with contextlib.suppress(TidelogError):
        for _ in record_batch.iter_headers(data):
            pass
        record_batch.decode_batches(data)


def main() -> None:
    atheris.Setup(sys.argv, fuzz_one)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
