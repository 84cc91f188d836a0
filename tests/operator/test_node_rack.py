"""`tidelog-node-rack` (the broker pod's init container) against kmock's emulator holding Nodes: the
zone label becomes the rack file, a node without it gives an empty rack, and a missing node, a bad
label value or an unreachable API server fail with a clear message and no file."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import kmock
import pytest

from tidelog.dev.kube_emulator import Emulator, write_kubeconfig


@pytest.fixture
async def kubeconfig(tmp_path: Path) -> AsyncIterator[Path]:
    async with Emulator() as emulator, kmock.Server(emulator) as server, aiohttp.ClientSession() as session:
        emulator.resources.load_bundled()
        url = str(server.url).rstrip("/")
        nodes = {
            "zoned": {"topology.kubernetes.io/zone": "eu-west-1b", "kubernetes.io/hostname": "zoned"},
            "plain": {"kubernetes.io/hostname": "plain"},
            "odd": {"topology.kubernetes.io/zone": "not a zone!"},
        }
        for name, labels in nodes.items():
            body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}
            async with session.post(f"{url}/api/v1/nodes", json=body) as answer:
                assert answer.status in (200, 201), await answer.text()
        yield write_kubeconfig(url, tmp_path / "kubeconfig")


async def _run(kubeconfig: Path, *arguments: str) -> tuple[int, str]:
    """As the init container runs it: a process of its own (the emulator lives in this loop)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tidelog.operator.node_rack",
        *arguments,
        env={**env, "KUBECONFIG": str(kubeconfig)},
        stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode is not None
    return process.returncode, stderr.decode()


async def test_the_zone_label_becomes_the_rack(kubeconfig: Path, tmp_path: Path) -> None:
    output = tmp_path / "rack" / "rack"
    code, stderr = await _run(kubeconfig, "--node", "zoned", "--output", str(output))
    assert code == 0, stderr
    assert output.read_text() == "eu-west-1b"


async def test_another_label_can_be_named(kubeconfig: Path, tmp_path: Path) -> None:
    output = tmp_path / "rack"
    code, stderr = await _run(
        kubeconfig, "--node", "plain", "--label", "kubernetes.io/hostname", "--output", str(output)
    )
    assert code == 0, stderr
    assert output.read_text() == "plain"


async def test_a_node_without_the_label_gives_no_rack(kubeconfig: Path, tmp_path: Path) -> None:
    output = tmp_path / "rack"
    code, stderr = await _run(kubeconfig, "--node", "plain", "--output", str(output))
    assert code == 0, stderr
    assert output.read_text() == ""
    assert "has no label topology.kubernetes.io/zone" in stderr


@pytest.mark.parametrize(
    ("node", "message"), [("missing", "node 'missing' not found"), ("odd", "is not a valid rack name")]
)
async def test_a_missing_node_or_a_bad_value_fails_and_writes_nothing(
    kubeconfig: Path, tmp_path: Path, node: str, message: str
) -> None:
    output = tmp_path / "rack"
    code, stderr = await _run(kubeconfig, "--node", node, "--output", str(output))
    assert code != 0 and message in stderr
    assert not output.exists()


async def test_an_unreachable_api_server_fails_after_the_timeout(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    kubeconfig = write_kubeconfig(f"http://127.0.0.1:{port}", tmp_path / "kubeconfig")
    output = tmp_path / "rack"
    code, stderr = await _run(kubeconfig, "--node", "zoned", "--output", str(output), "--timeout-s", "2")
    assert code != 0 and "Kubernetes API not reachable in 2 s" in stderr
    assert stderr.count("retrying") >= 1
    assert not output.exists()
