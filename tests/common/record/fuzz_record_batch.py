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
from typing import Any

import atheris

with atheris.instrument_imports(include=["tidelog"]):  # only ours: instrumenting every library took 10 s a start
    from tidelog.common.errors import TidelogError
    from tidelog.common.record import batch as record_batch
    from tidelog.common.record import batch_decoding

LIMIT = 1 << 20  # as max.message.bytes would bound it


def _either(decode: Any, data: bytes) -> object:
    try:
        return decode(data, 0, record_batch.validate_batch(data, max_bytes=LIMIT, verify_crc=False))
    except TidelogError as error:
        return type(error), error.message


def fuzz_one(data: bytes) -> None:
    """Every decoder entry point on `data`; only TidelogError may come out."""
    with contextlib.suppress(TidelogError):
        record_batch.validate_batch(data, max_bytes=LIMIT)
    with contextlib.suppress(TidelogError):
        record_batch.decode_batch(data, verify_crc=False)  # past the CRC, into the records
    # The two decoders decode_batch picks between (by record count) agree on everything.
    assert _either(batch_decoding._decode_small, data) == _either(batch_decoding._decode_columnar, data)
    with contextlib.suppress(TidelogError):
        for _ in record_batch.iter_headers(data):
            pass
        record_batch.decode_batches(data)


def main() -> None:
    atheris.Setup(sys.argv, fuzz_one)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
