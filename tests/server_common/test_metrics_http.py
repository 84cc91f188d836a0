"""/metrics: the registry's families and the text-written ones in one valid exposition."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from tidelog.dev.etcd_server import free_port
from tidelog.server_common import metrics_http


def test_text_families_join_the_registry_in_one_valid_exposition() -> None:
    samples = [('{topic="a",partition="0"}', 5), ('{topic="a",partition="1"}', 7)]
    metrics_http.add_text_source(lambda: metrics_http.family_text("kafka_topic_partition_current_offset", samples))
    server = metrics_http.serve(free_port())
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/metrics", timeout=5) as answer:
            assert answer.headers["Content-Type"].startswith("text/plain")
            text = answer.read().decode()
    finally:
        server.shutdown()
        server.server_close()
        metrics_http._TEXT_SOURCES.clear()
    families = {family.name: family for family in text_string_to_metric_families(text)}
    offsets = families["kafka_topic_partition_current_offset"]
    assert offsets.type == "gauge" and offsets.documentation.startswith("The partition's log end offset")
    assert [(s.labels, s.value) for s in offsets.samples] == [
        ({"topic": "a", "partition": "0"}, 5),
        ({"topic": "a", "partition": "1"}, 7),
    ]
    assert "process_cpu_seconds" in families or "python_info" in families  # the registry's part is there
