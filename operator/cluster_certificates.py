"""The cluster's certificates, made once and kept (`tidelog-cluster-certificates`, the chart's
pre-install and pre-upgrade hook when cert-manager does not issue them).

Helm's `genCA` in a template made a new CA on every render where `lookup` sees no cluster
(`helm template`, Argo CD): every sync replaced every certificate. This command runs in the
cluster instead and only fills what is missing or due: the cluster CA and etcd's own CA (made
once, ten years, ECDSA P-256), and each component's certificate signed by its CA (DNS names of its
Service and pods), issued again when absent, not signed by the current CA, or within
`RENEW_BEFORE` of expiry. Secrets are `kubernetes.io/tls` (`tls.crt`, `tls.key`, `ca.crt`), the
names the chart mounts. Rerunning it changes nothing that is still good.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import datetime
import sys
from collections.abc import Sequence
from typing import Final

import aiohttp
from cryptography import x509

from tidelog.common.security.tls.certificates import Pem, issue, new_ca
from tidelog.operator.kube_api import ConnectionInfo, connection, session
from tidelog.operator.kube_secrets import KubeSecrets

__all__ = ["ensure", "main"]

RENEW_BEFORE: Final = datetime.timedelta(days=30)  # Strimzi's renewal window


def _still_good(held: dict[str, bytes] | None, ca: Pem, now: datetime.datetime) -> bool:
    if held is None or "tls.crt" not in held or "tls.key" not in held:
        return False
    try:
        certificate = x509.load_pem_x509_certificate(held["tls.crt"])
    except ValueError:
        return False
    issuer = x509.load_pem_x509_certificate(ca.certificate).subject
    return (
        held.get("ca.crt") == ca.certificate
        and certificate.issuer == issuer
        and certificate.not_valid_after_utc - RENEW_BEFORE > now
    )


class _Secrets:
    def __init__(self, api: aiohttp.ClientSession, namespace: str, release: str) -> None:
        self.api, self.namespace, self.release = api, namespace, release

    async def get(self, name: str) -> dict[str, bytes] | None:
        return await KubeSecrets(self.api).get(self.namespace, name)

    async def put(self, name: str, pem: Pem, ca: bytes, *, exists: bool, keep: bool = False) -> None:
        annotations = {"helm.sh/resource-policy": "keep"} if keep else {}
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/tls",
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "labels": {"app.kubernetes.io/instance": self.release, "app.kubernetes.io/managed-by": "tidelog"},
                "annotations": annotations,
            },
            "data": {
                key: base64.b64encode(value).decode()
                for key, value in (("tls.crt", pem.certificate), ("tls.key", pem.key), ("ca.crt", ca))
            },
        }
        path = f"api/v1/namespaces/{self.namespace}/secrets"
        if exists:  # every key of `data` given again: a merge patch replaces them all
            merge = {"Content-Type": "application/merge-patch+json"}
            request = self.api.patch(f"{path}/{name}", json=secret, headers=merge)
        else:
            request = self.api.post(path, json=secret)
        async with request as answer:
            answer.raise_for_status()


async def _ca(secrets: _Secrets, name: str, now: datetime.datetime, done: list[str]) -> Pem:
    held = await secrets.get(name)
    if held is not None and "tls.crt" in held and "tls.key" in held:
        return Pem(held["tls.crt"], held["tls.key"])
    made = new_ca(name, now)
    await secrets.put(name, made, made.certificate, exists=held is not None, keep=True)
    done.append(name)
    return made


async def ensure(
    info: ConnectionInfo,
    namespace: str,
    release: str,
    components: Sequence[str],
    etcd_clients: Sequence[str],
    *,
    now: datetime.datetime | None = None,
) -> list[str]:
    """Make what is missing or due; the names of the Secrets written."""
    now = now or datetime.datetime.now(datetime.UTC)
    written: list[str] = []
    async with session(info) as api:
        secrets = _Secrets(api, namespace, release)
        for ca_name, suffix, wanted in (
            (f"{release}-cluster-ca", "tls", components),
            (f"{release}-etcd-ca", "etcd-tls", [*etcd_clients, "etcd"] if etcd_clients else []),
        ):
            if not wanted:
                continue
            ca = await _ca(secrets, ca_name, now, written)
            for component in wanted:
                name = f"{release}-{component}-{suffix}"
                held = await secrets.get(name)
                if _still_good(held, ca, now):
                    continue
                service = f"{release}-{component}"
                dns = [service, f"*.{service}", f"{service}.{namespace}.svc", f"*.{service}.{namespace}.svc"]
                await secrets.put(
                    name, issue(ca, f"tidelog-{component}", dns, now), ca.certificate, exists=held is not None
                )
                written.append(name)
    return written


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--namespace", required=True, help="where the release's Secrets live")
    parser.add_argument("--release", required=True, help="the Helm release (the Secrets' name prefix)")
    parser.add_argument("--components", default="", help="comma-separated: each gets <release>-<c>-tls")
    parser.add_argument("--etcd-clients", default="", help="comma-separated: each gets <release>-<c>-etcd-tls")
    args = parser.parse_args(argv)
    split = [c for c in args.components.split(",") if c]
    clients = [c for c in args.etcd_clients.split(",") if c]
    written = asyncio.run(ensure(connection(), args.namespace, args.release, split, clients))
    print(f"{len(written)} certificate secret(s) written: {', '.join(written) or 'all were good'}", file=sys.stderr)


if __name__ == "__main__":
    main()
