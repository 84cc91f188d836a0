"""/metrics protected (issue 38, 8): they name every topic and consumer group, including those a
caller may not describe. With metrics.* a service serves them over HTTPS, to a scraper that shows
the bearer token (Prometheus' `authorization: credentials_file`) and, when asked, a client
certificate (its `tls_config`); nothing without them."""

from __future__ import annotations

import ssl
import uuid
from collections.abc import Iterator

import httpx
import pytest

from tests.cluster.conftest import running_cluster
from tests.security.conftest import Pki, authorising
from tidelog.client import AdminClient
from tidelog.dev.local_cluster import LocalCluster

pytestmark = pytest.mark.timeout(180)

TOKEN = "a-scrapers-token-" + uuid.uuid4().hex


@pytest.fixture(scope="module")
def guarded_cluster(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    folder = tmp_path_factory.mktemp("metrics-guarded")
    token_file = folder / "metrics-token"
    token_file.write_text(TOKEN + "\n")
    services = authorising(pki)

    def settings(name: str) -> dict[str, str]:
        certificate, key = pki.issue(f"{name}-metrics")
        guarded = {
            "metrics.host": "127.0.0.1",
            "metrics.ssl.certificate.location": str(certificate),
            "metrics.ssl.key.location": str(key),
            "metrics.bearer.token.file": str(token_file),
        }
        if name.startswith("controller"):  # the controller's also wants the scraper's certificate
            guarded["metrics.ssl.ca.location"] = str(pki.ca_file)
        return {**services(name), **guarded}

    with running_cluster(
        folder / "cluster",
        brokers=1,
        controllers=1,
        metrics=True,
        service_security=settings,
        client_security=pki.client("admin"),
    ) as local:
        yield local


def _https(url: str) -> str:
    return url.replace("http://", "https://")


async def test_metrics_need_https_and_the_token(guarded_cluster: LocalCluster, pki: Pki) -> None:
    secret_topic = f"secret-{uuid.uuid4().hex[:6]}"
    async with AdminClient(
        guarded_cluster.bootstrap, controllers=guarded_cluster.controller_endpoints, security=pki.client("admin")
    ) as admin:
        await admin.create_topic(secret_topic, 1, 1)
    url = _https(guarded_cluster.metrics_endpoint("broker-1"))
    verify = ssl.create_default_context(cafile=str(pki.ca_file))
    with pytest.raises(httpx.HTTPError):  # plain HTTP to the HTTPS listener
        httpx.get(guarded_cluster.metrics_endpoint("broker-1"), timeout=5)
    assert httpx.get(url, verify=verify, timeout=5).status_code == 401
    wrong = httpx.get(url, verify=verify, headers={"Authorization": "Bearer not-it"}, timeout=5)
    assert wrong.status_code == 401 and wrong.headers["www-authenticate"].startswith("Bearer")
    assert secret_topic not in wrong.text

    def scraped() -> str:
        answer = httpx.get(url, verify=verify, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=5)
        assert answer.status_code == 200
        return answer.text

    assert "kafka_server_brokertopicmetrics" in scraped()


def test_a_metrics_listener_that_asks_for_a_certificate_refuses_a_scraper_without_one(
    guarded_cluster: LocalCluster, pki: Pki
) -> None:
    url = _https(guarded_cluster.metrics_endpoint("controller-1"))
    verify = ssl.create_default_context(cafile=str(pki.ca_file))
    with pytest.raises(httpx.HTTPError):
        httpx.get(url, verify=verify, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=5)
    certificate, key = pki.issue("prometheus")
    verify.load_cert_chain(str(certificate), str(key))
    answer = httpx.get(url, verify=verify, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=5)
    assert answer.status_code == 200 and "kafka_controller" in answer.text
