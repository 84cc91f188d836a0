"""`tidelog-operator-release-finalizers` (the chart's pre-delete hook) against kmock's emulator: our
finalizer leaves every Topic, ConsumerGroup and User in every namespace (every kind the operator
finalizes), anyone else's stays, and a resource already being deleted is let go."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import kmock
import kopf
import pytest

from tidelog.common.settings import OperatorSettings
from tidelog.dev.kube_emulator import Emulator, serve_crds, write_kubeconfig
from tidelog.operator.crds import CONSUMER_GROUP_CRD, TIDELOG_USER_CRD, TOPIC_CRD, USER_CRD
from tidelog.operator.finalizers import FINALIZER, PLURALS
from tidelog.operator.main import handlers

BASE = "/apis/tidelog.io/v1beta1"


@pytest.fixture
async def kubernetes(tmp_path: Path) -> AsyncIterator[tuple[str, Path]]:
    async with Emulator() as emulator, kmock.Server(emulator) as server:
        serve_crds(emulator, [TOPIC_CRD, CONSUMER_GROUP_CRD, TIDELOG_USER_CRD, USER_CRD])
        url = str(server.url).rstrip("/")
        kubeconfig = write_kubeconfig(url, tmp_path / "kubeconfig")
        yield url, kubeconfig


async def _create(
    session: aiohttp.ClientSession, url: str, plural: str, namespace: str, name: str, *, finalizers: list[str]
) -> None:
    kind = {"topics": "Topic", "consumergroups": "ConsumerGroup", "tidelogusers": "TidelogUser", "users": "User"}[
        plural
    ]
    spec = {
        "topics": {"partitions": 1, "replicas": 1},
        "consumergroups": {},
        "tidelogusers": {"authentication": {"type": "scram-sha-512"}},
        "users": {"authentication": {"type": "scram-sha-512"}},
    }[plural]
    body: dict[str, Any] = {
        "apiVersion": "tidelog.io/v1beta1",
        "kind": kind,
        "metadata": {"name": name, "namespace": namespace, "finalizers": finalizers},
        "spec": spec,
    }
    async with session.post(f"{url}{BASE}/namespaces/{namespace}/{plural}", json=body) as answer:
        assert answer.status in (200, 201), await answer.text()


async def _finalizers(session: aiohttp.ClientSession, url: str, plural: str, namespace: str, name: str) -> list[str]:
    async with session.get(f"{url}{BASE}/namespaces/{namespace}/{plural}/{name}") as answer:
        assert answer.status == 200, await answer.text()
        found: list[str] = (await answer.json())["metadata"].get("finalizers") or []
        return found


async def _run_hook(kubeconfig: Path, *, expect: str, namespaces: tuple[str, ...] = ()) -> None:
    """As the chart's hook Job runs it; a process of its own (the emulator lives in this loop)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tidelog.operator.finalizers",
        *(argument for namespace in namespaces for argument in ("--namespace", namespace)),
        env={**os.environ, "KUBECONFIG": str(kubeconfig)},
        stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode == 0, stderr.decode()
    assert expect in stderr.decode()


async def test_the_hook_releases_our_finalizer_everywhere_and_keeps_others(kubernetes: tuple[str, Path]) -> None:
    url, kubeconfig = kubernetes
    resources = [
        ("topics", "team-a", "orders", [FINALIZER]),
        ("topics", "team-b", "payments", ["example.com/keep", FINALIZER]),
        ("topics", "team-b", "unmanaged", ["example.com/keep"]),
        ("consumergroups", "team-a", "billing", [FINALIZER]),
        ("tidelogusers", "team-a", "orders-app", [FINALIZER]),
        ("tidelogusers", "team-b", "reports", ["example.com/keep", FINALIZER]),
        ("users", "team-b", "legacy", [FINALIZER]),
    ]
    async with aiohttp.ClientSession() as session:
        for plural, namespace, name, finalizers in resources:
            await _create(session, url, plural, namespace, name, finalizers=finalizers)
        await _run_hook(kubeconfig, expect="2 topics, 1 consumergroups, 2 tidelogusers, 1 users released")
        assert await _finalizers(session, url, "topics", "team-a", "orders") == []
        assert await _finalizers(session, url, "topics", "team-b", "payments") == ["example.com/keep"]
        assert await _finalizers(session, url, "topics", "team-b", "unmanaged") == ["example.com/keep"]
        assert await _finalizers(session, url, "consumergroups", "team-a", "billing") == []
        assert await _finalizers(session, url, "tidelogusers", "team-a", "orders-app") == []
        assert await _finalizers(session, url, "tidelogusers", "team-b", "reports") == ["example.com/keep"]
        assert await _finalizers(session, url, "users", "team-b", "legacy") == []


async def test_the_hook_releases_only_in_the_namespaces_it_is_given(kubernetes: tuple[str, Path]) -> None:
    """With watchNamespaces the operator's Roles cover only those namespaces, and so does the hook."""
    url, kubeconfig = kubernetes
    async with aiohttp.ClientSession() as session:
        await _create(session, url, "topics", "team-a", "orders", finalizers=[FINALIZER])
        await _create(session, url, "tidelogusers", "team-a", "orders-app", finalizers=[FINALIZER])
        await _create(session, url, "topics", "elsewhere", "theirs", finalizers=[FINALIZER])
        await _run_hook(
            kubeconfig, expect="1 topics, 0 consumergroups, 1 tidelogusers, 0 users released", namespaces=("team-a",)
        )
        assert await _finalizers(session, url, "topics", "team-a", "orders") == []
        assert await _finalizers(session, url, "tidelogusers", "team-a", "orders-app") == []
        assert await _finalizers(session, url, "topics", "elsewhere", "theirs") == [FINALIZER]


async def test_without_the_crds_there_is_nothing_to_release(tmp_path: Path) -> None:
    async with Emulator() as emulator, kmock.Server(emulator) as server:
        emulator.resources.load_bundled()
        kubeconfig = write_kubeconfig(str(server.url), tmp_path / "kubeconfig")
        await _run_hook(kubeconfig, expect="0 topics, 0 consumergroups, 0 tidelogusers, 0 users released")


def test_every_kind_with_a_delete_handler_is_released() -> None:
    """kopf finalizes each kind the operator has a delete handler for: the release hook knows them all."""
    registry = handlers(OperatorSettings.from_configs())
    deleted = {
        handler.selector.any_name
        for handler in registry._changing.get_all_handlers()
        if handler.reason == kopf.Reason.DELETE and handler.selector is not None
    }
    assert deleted == set(PLURALS) == {"topics", "consumergroups", "tidelogusers", "users"}
