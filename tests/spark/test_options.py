"""The source's and sink's options as Spark's Kafka source takes them, checked before any job runs
(no Spark session, no cluster)."""

from __future__ import annotations

import pytest

from tidelog.spark.options import InvalidOptionError, read_options, write_options

BOOTSTRAP = {"tidelog.bootstrap.servers": "127.0.0.1:9092"}


def _read(streaming: bool = True, **options: str) -> object:
    return read_options({**BOOTSTRAP, "subscribe": "t", **options}, streaming=streaming)


@pytest.mark.parametrize(
    ("given", "ms"),
    [("15m", 900_000), ("30s", 30_000), ("500ms", 500), ("2h", 7_200_000), ("1d", 86_400_000), ("250", 250)],
)
def test_max_trigger_delay_takes_sparks_time_strings(given: str, ms: int) -> None:
    options = read_options({**BOOTSTRAP, "subscribe": "t", "maxtriggerdelay": given}, streaming=True)
    assert options.max_trigger_delay_ms == ms


def test_the_guides_defaults() -> None:
    options = read_options({**BOOTSTRAP, "subscribe": "t"}, streaming=True)
    assert (options.starting, options.max_trigger_delay_ms, options.poll_timeout_ms) == ("latest", 900_000, 120_000)
    assert (options.fetch_offset_retries, options.fetch_offset_retry_interval_ms) == (3, 10)
    assert read_options({**BOOTSTRAP, "subscribe": "t"}, streaming=False).starting == "earliest"


def test_options_of_the_guide_the_source_does_not_need_are_accepted() -> None:
    options = read_options(
        {**BOOTSTRAP, "subscribe": "t", "groupidprefix": "g", "kafka.group.id": "g-1", "minoffsetspertrigger": "5"},
        streaming=True,
    )
    assert options.min_offsets_per_trigger == 5 and "group_id" not in options.client


def test_trigger_options_in_a_batch_read_are_checked_and_ignored() -> None:
    options = read_options({**BOOTSTRAP, "subscribe": "t", "maxoffsetspertrigger": "5"}, streaming=False)
    assert options.max_offsets_per_trigger == 5  # the batch reader never looks at it
    with pytest.raises(InvalidOptionError, match="'maxOffsetsPerTrigger': must be positive"):
        read_options({**BOOTSTRAP, "subscribe": "t", "maxoffsetspertrigger": "0"}, streaming=False)


@pytest.mark.parametrize(
    ("options", "named", "streaming"),
    [
        ({"maxtriggerdelay": "soon"}, "maxTriggerDelay", True),
        ({"maxtriggerdelay": "5 parsecs"}, "maxTriggerDelay", True),
        ({"endingtimestamp": "5"}, "endingTimestamp", True),
        ({"kafkaconsumer.polltimeoutms": "0"}, "kafkaConsumer.pollTimeoutMs", False),
        ({"fetchoffset.numretries": "-1"}, "fetchOffset.numRetries", False),
        ({"maxrecordsperpartition": "0"}, "maxRecordsPerPartition", False),
    ],
)
def test_bad_values_are_refused_naming_the_option(options: dict[str, str], named: str, streaming: bool) -> None:
    with pytest.raises(InvalidOptionError, match=f"option '{named}'"):
        read_options({**BOOTSTRAP, "subscribe": "t", **options}, streaming=streaming)


def test_the_sinks_retry_marker_is_opt_in() -> None:
    assert write_options({**BOOTSTRAP, "topic": "t"}).idempotent_retries is False
    assert write_options({**BOOTSTRAP, "topic": "t", "idempotentretries": "true"}).idempotent_retries is True
    with pytest.raises(InvalidOptionError, match="option 'idempotentRetries'"):
        write_options({**BOOTSTRAP, "idempotentretries": "yes"})
