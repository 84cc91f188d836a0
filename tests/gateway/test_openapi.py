"""schemathesis against the gateway's own OpenAPI document, served by a live gateway on a real
cluster: every operation, with generated input, must answer as documented and never with a server
error. (schemathesis' pytest plugin does not load under this pytest, so the operations are driven
from one test with hypothesis directly.) SCHEMATHESIS_EXAMPLES=150 runs more examples per operation."""

from __future__ import annotations

import os

import schemathesis
from hypothesis import HealthCheck, given, settings

from tidelog.dev.local_cluster import LocalCluster

EXAMPLES_PER_OPERATION = int(os.environ.get("SCHEMATHESIS_EXAMPLES", "20"))


def test_every_operation_answers_as_documented(gateway_cluster: LocalCluster) -> None:
    schema = schemathesis.openapi.from_url(f"{gateway_cluster.gateway_urls[0]}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 20  # the v2 and v3 routes are all documented
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, suppress_health_check=list(HealthCheck))
        def answers(case: schemathesis.Case) -> None:
            case.call_and_validate(timeout=30)

        answers()
