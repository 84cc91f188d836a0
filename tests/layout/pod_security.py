"""Kubernetes' Pod Security Standards, the `restricted` profile (latest), applied to a pod spec as
the Pod Security Admission controller applies it (the policy's documentation and
`k8s.io/pod-security-admission/policy`: the baseline checks and the restricted ones), plus what
this chart promises beyond it: a read-only root filesystem and memory limits on every container."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Final

__all__ = ["chart_promises", "restricted_violations"]

RESTRICTED_VOLUMES: Final = frozenset(
    {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}
)
SAFE_SYSCTLS: Final = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    }
)
SELINUX_TYPES: Final = frozenset({"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"})


def _containers(spec: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for field in ("initContainers", "containers", "ephemeralContainers"):
        for container in spec.get(field) or ():
            yield f"{field}[{container['name']}]", container


def restricted_violations(spec: Mapping[str, Any]) -> list[str]:
    """Why Pod Security Admission would refuse this pod spec at `restricted`; empty when it admits it."""
    found: list[str] = []
    pod = spec.get("securityContext") or {}
    for host in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(host):
            found.append(f"host namespaces: {host}=true")
    for volume in spec.get("volumes") or ():
        kinds = set(volume) - {"name"}
        if "hostPath" in kinds:
            found.append(f"hostPath volumes: {volume['name']}")
        if not kinds <= RESTRICTED_VOLUMES:
            found.append(f"restricted volume types: {volume['name']} uses {sorted(kinds - RESTRICTED_VOLUMES)}")
    for sysctl in pod.get("sysctls") or ():
        if sysctl.get("name") not in SAFE_SYSCTLS:
            found.append(f"sysctls: {sysctl.get('name')}")
    if pod.get("windowsOptions", {}).get("hostProcess"):
        found.append("hostProcess: pod")
    pod_non_root = pod.get("runAsNonRoot")
    pod_seccomp = (pod.get("seccompProfile") or {}).get("type")
    if pod.get("runAsUser") == 0:
        found.append("runAsUser=0: pod")
    if pod_seccomp not in (None, "RuntimeDefault", "Localhost"):
        found.append(f"seccompProfile: pod type {pod_seccomp}")
    if (pod.get("seLinuxOptions") or {}).get("type", "") not in SELINUX_TYPES:
        found.append("seLinuxOptions: pod type")
    for where, container in _containers(spec):
        context = container.get("securityContext") or {}
        if context.get("privileged"):
            found.append(f"privileged: {where}")
        if context.get("allowPrivilegeEscalation") is not False:
            found.append(f"allowPrivilegeEscalation != false: {where}")
        capabilities = context.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or ()):
            found.append(f"unrestricted capabilities: {where} must drop ALL")
        if set(capabilities.get("add") or ()) - {"NET_BIND_SERVICE"}:
            found.append(f"unrestricted capabilities: {where} adds {capabilities.get('add')}")
        non_root = context.get("runAsNonRoot", pod_non_root)
        if non_root is not True:
            found.append(f"runAsNonRoot != true: {where}")
        if context.get("runAsUser") == 0:
            found.append(f"runAsUser=0: {where}")
        seccomp = (context.get("seccompProfile") or {}).get("type", pod_seccomp)
        if seccomp not in ("RuntimeDefault", "Localhost"):
            found.append(f"seccompProfile: {where} must be RuntimeDefault or Localhost")
        if context.get("procMount", "Default") != "Default":
            found.append(f"procMount: {where}")
        if (context.get("seLinuxOptions") or {}).get("type", "") not in SELINUX_TYPES:
            found.append(f"seLinuxOptions: {where}")
        if (context.get("appArmorProfile") or {}).get("type") == "Unconfined":
            found.append(f"appArmorProfile: {where} is Unconfined")
        if any(port.get("hostPort") for port in container.get("ports") or ()):
            found.append(f"hostPort: {where}")
        if (context.get("windowsOptions") or {}).get("hostProcess"):
            found.append(f"hostProcess: {where}")
    return found


def chart_promises(spec: Mapping[str, Any]) -> list[str]:
    """What the chart promises beyond `restricted`: read-only root filesystems, and requests and a
    memory limit on every container."""
    found: list[str] = []
    for where, container in _containers(spec):
        if (container.get("securityContext") or {}).get("readOnlyRootFilesystem") is not True:
            found.append(f"readOnlyRootFilesystem != true: {where}")
        resources = container.get("resources") or {}
        if not resources.get("requests"):
            found.append(f"no resource requests: {where}")
        if "memory" not in (resources.get("limits") or {}):
            found.append(f"no memory limit: {where}")
    return found
