"""Reaching the Kubernetes API from our small commands (the chart's hooks and init containers) the
way kopf logs in: the pod's service account, or else the kubeconfig — one HTTP session, no client
library beyond what kopf brings."""

from __future__ import annotations

import ssl

import aiohttp
import kopf

__all__ = ["ConnectionInfo", "connection", "session"]

ConnectionInfo = kopf.ConnectionInfo


def connection() -> kopf.ConnectionInfo:
    """In a pod the service account's; elsewhere the kubeconfig's (as kopf logs in)."""
    settings = kopf.OperatorSettings()
    info = kopf.login_with_service_account(settings=settings) or kopf.login_with_kubeconfig(settings=settings)
    if info is None:
        raise RuntimeError("no Kubernetes credentials: neither a service account nor a kubeconfig")
    return info


def session(info: kopf.ConnectionInfo) -> aiohttp.ClientSession:
    """A session whose relative paths are the API server's, authenticated and verified as `info` says."""
    context: ssl.SSLContext | bool = False if info.insecure else ssl.create_default_context()
    if isinstance(context, ssl.SSLContext):
        if info.ca_path or info.ca_data:
            ca_data = info.ca_data.decode() if isinstance(info.ca_data, bytes) else info.ca_data
            context.load_verify_locations(cafile=info.ca_path, cadata=ca_data)
        if info.certificate_path and info.private_key_path:
            context.load_cert_chain(info.certificate_path, info.private_key_path)
    headers = {"Authorization": f"Bearer {info.token}"} if info.token else {}
    return aiohttp.ClientSession(
        base_url=info.server.rstrip("/") + "/",
        headers=headers,
        connector=aiohttp.TCPConnector(ssl=context),
        timeout=aiohttp.ClientTimeout(total=30),
    )
