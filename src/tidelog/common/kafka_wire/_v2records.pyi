# The compiled Kafka v2 records transcoder (_v2records.c, built by setup.py).
from typing_extensions import Buffer

def records_to_section(records: Buffer, count: int, first_timestamp: int, /) -> tuple[bytes, int, int]: ...
