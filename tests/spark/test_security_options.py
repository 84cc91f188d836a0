"""The Spark source's client security settings: Kafka's names under the `tidelog.` (or `kafka.`)
prefix become the clients' SecuritySettings, checked by the registry, and travel to executors."""

from __future__ import annotations

import pickle

import pytest

from tidelog.common.settings import SecuritySettings
from tidelog.spark.options import InvalidOptionError, read_options, write_options

BASE = {"tidelog.bootstrap.servers": "broker-0:9092", "subscribe": "orders"}


def test_security_options_reach_the_clients_and_survive_pickling() -> None:
    options = read_options(
        {
            **BASE,
            "tidelog.security.protocol": "SASL_SSL",
            "kafka.sasl.username": "spark",
            "tidelog.sasl.password": "secret-password",
            "tidelog.ssl.ca.location": "/etc/tidelog/ca.crt",
        },
        streaming=False,
    )
    security = options.client["security"]
    assert isinstance(security, SecuritySettings)
    assert (security.security_protocol, security.sasl_username, security.ssl_ca_location) == (
        "SASL_SSL",
        "spark",
        "/etc/tidelog/ca.crt",
    )
    assert pickle.loads(pickle.dumps(options)).client["security"] == security  # what executors get
    assert "secret-password" not in repr(security)
    written = write_options({"tidelog.bootstrap.servers": "b:9092", "topic": "t", "tidelog.security.protocol": "SSL"})
    assert written.client["security"].security_protocol == "SSL"


def test_a_bad_security_option_is_refused_naming_it() -> None:
    with pytest.raises(InvalidOptionError, match=r"security\.protocol"):
        read_options({**BASE, "tidelog.security.protocol": "KERBEROS"}, streaming=False)
