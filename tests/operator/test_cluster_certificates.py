"""`tidelog-cluster-certificates` (the chart's pre-install/pre-upgrade hook) against the emulator:
it makes the CAs and every certificate once, changes nothing on a second run (a re-render or sync
never replaces a CA), and issues again only what is due — near expiry, or not of the current CA."""

from __future__ import annotations

import asyncio
import base64
import datetime
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import kmock
import pytest
from cryptography import x509

from tidelog.common.security.tls.certificates import VALIDITY
from tidelog.dev.kube_emulator import Emulator, serve_crds, write_kubeconfig
from tidelog.operator.cluster_certificates import RENEW_BEFORE, ensure
from tidelog.operator.kube_api import ConnectionInfo

SECRETS = "/api/v1/namespaces/streaming/secrets"
COMPONENTS = ["controller", "broker", "operator"]
ETCD_CLIENTS = ["controller", "broker"]


@pytest.fixture
async def kubernetes(tmp_path: Path) -> AsyncIterator[tuple[str, Path]]:
    async with Emulator() as emulator, kmock.Server(emulator) as server:
        serve_crds(emulator, [])
        url = str(server.url).rstrip("/")
        yield url, write_kubeconfig(url, tmp_path / "kubeconfig")


async def _secret(session: aiohttp.ClientSession, url: str, name: str) -> dict[str, bytes] | None:
    async with session.get(f"{url}{SECRETS}/{name}") as answer:
        if answer.status == 404:
            return None
        body: dict[str, Any] = await answer.json()
    return {key: base64.b64decode(value) for key, value in body["data"].items()}


def _info(url: str) -> ConnectionInfo:
    return ConnectionInfo(server=url, token="test", insecure=True)


async def test_certificates_are_made_once_and_kept(kubernetes: tuple[str, Path]) -> None:
    url, kubeconfig = kubernetes
    process = await asyncio.create_subprocess_exec(  # as the hook Job runs it
        sys.executable,
        "-m",
        "tidelog.operator.cluster_certificates",
        "--namespace",
        "streaming",
        "--release",
        "demo",
        "--components",
        ",".join(COMPONENTS),
        "--etcd-clients",
        ",".join(ETCD_CLIENTS),
        env={**os.environ, "KUBECONFIG": str(kubeconfig)},
        stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode == 0, stderr.decode()
    assert "8 certificate secret(s) written" in stderr.decode()  # 2 CAs, 3 components, 3 etcd (with etcd's)
    async with aiohttp.ClientSession() as session:
        cluster_ca = await _secret(session, url, "demo-cluster-ca")
        etcd_ca = await _secret(session, url, "demo-etcd-ca")
        assert cluster_ca is not None and etcd_ca is not None and cluster_ca["ca.crt"] != etcd_ca["ca.crt"]
        broker = await _secret(session, url, "demo-broker-tls")
        assert broker is not None and broker["ca.crt"] == cluster_ca["tls.crt"]
        certificate = x509.load_pem_x509_certificate(broker["tls.crt"])
        assert certificate.subject.rfc4514_string() == "CN=tidelog-broker"
        assert certificate.issuer == x509.load_pem_x509_certificate(cluster_ca["tls.crt"]).subject
        names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert "*.demo-broker.streaming.svc" in names.get_values_for_type(x509.DNSName)
        etcd_server = await _secret(session, url, "demo-etcd-etcd-tls")
        assert etcd_server is not None and etcd_server["ca.crt"] == etcd_ca["tls.crt"]
        assert await _secret(session, url, "demo-operator-etcd-tls") is None  # it never talks to etcd

        # A second run (the next upgrade, or any number of re-renders): nothing changes.
        assert await ensure(_info(url), "streaming", "demo", COMPONENTS, ETCD_CLIENTS) == []
        assert await _secret(session, url, "demo-cluster-ca") == cluster_ca
        assert await _secret(session, url, "demo-broker-tls") == broker

        # Close to expiry: the component's certificate is issued again, by the same CA.
        later = datetime.datetime.now(datetime.UTC) + VALIDITY - RENEW_BEFORE + datetime.timedelta(days=1)
        renewed = await ensure(_info(url), "streaming", "demo", COMPONENTS, ETCD_CLIENTS, now=later)
        assert "demo-broker-tls" in renewed and "demo-cluster-ca" not in renewed
        again = await _secret(session, url, "demo-broker-tls")
        assert again is not None and again["tls.crt"] != broker["tls.crt"] and again["ca.crt"] == broker["ca.crt"]
