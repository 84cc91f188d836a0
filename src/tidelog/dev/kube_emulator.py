"""kmock's KubernetesEmulator with the bookkeeping kopf relies on (for the operator's tests and
benchmark, as `local_cluster` is for the cluster's; kmock is a test dependency).

kmock 0.8 stores objects as plain JSON: it assigns no `resourceVersion` (kopf's JSON patches test
it), bumps no `generation`, sets no `uid`, `creationTimestamp` or (from the URL) `namespace`, and
ignores `generateName`
(every kopf Event would get one name). This
subclass puts them into each create and update before kmock applies it, so the stored object, the
watch event and the response all carry them: a version that grows with every write, a generation
that grows with every change of `spec`. A JSON patch whose `test` fails is answered 422, as the API
server does (kmock answers 500), so kopf retries on the next event with a fresh version instead of
resending a stale one.

Custom resources are admitted as the API server admits them (kube_admission.py): pruned,
defaulted, validated against the CRD's schema and CEL rules (422 Invalid otherwise), status split
from the rest by the status subresource; each update is computed here and stored whole.

kmock also records every request it has served, for a test's assertions, and matches each new
request against that whole history: the cost of a request grows with the number served before it
(200 GETs took 7 s after 200 creates). Nothing here asserts on the history, so it is trimmed to the
requests still in flight (watches, and requests being served), which keeps a request's cost flat.
"""

from __future__ import annotations

import copy
import itertools
import time
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import attrs
import jsonpatch
import kmock
from kmock._internal.dicts import patch_dict

from tidelog.dev.kube_admission import Admission, RefusedError


@attrs.frozen
class InvalidError(kmock.KubernetesError):
    status: int = 422
    reason: str = "Invalid"


class Emulator(kmock.KubernetesEmulator):
    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self._versions = itertools.count(1)
        self._in_flight: dict[int, Any] = {}  # by identity: kmock's requests compare equal by value
        self.admissions: dict[tuple[str, str, str], Admission] = {}  # (group, version, plural): serve_crds

    async def _handle(self, request: Any) -> aiohttp.web.StreamResponse:
        self._in_flight[id(request)] = request
        self._requests[:] = self._in_flight.values()  # kmock matches each request against this history
        try:
            return await self._handle_stamped(request)
        finally:
            del self._in_flight[id(request)]

    def _admission(self, request: Any) -> Admission | None:
        resource = request.resource
        return self.admissions.get((resource.group or "", resource.version or "", resource.plural or ""))

    def _admit(self, request: Any, admission: Admission, version: str) -> bool:
        """Make the request's body (mutated in place: kmock's requests are frozen) give the object
        the API server would store, stamped; 422 if refused. True for an update it stamped."""
        key = (request.resource, request.namespace, request.name)
        if request.action != kmock.action.UPDATE:
            try:
                admitted = admission.admit(copy.deepcopy(request.data), None, None)
            except RefusedError as refused:
                raise InvalidError(message=f"{request.resource.plural} is invalid: {refused}") from None
            request.data.clear()
            request.data.update(admitted)
            return False
        if key not in self.objects:
            return False  # kmock answers 404 itself
        old = copy.deepcopy(dict(self.objects[key].raw))
        new = dict(patch_dict(copy.deepcopy(old), request.data))  # a failed JSON patch test: 422
        try:
            admitted = admission.admit(new, old, request.subresource)
        except RefusedError as refused:
            raise InvalidError(message=f"{request.resource.plural} is invalid: {refused}") from None
        metadata = admitted.setdefault("metadata", {})
        metadata["resourceVersion"] = version
        generation = int(old.get("metadata", {}).get("generation", 1))
        metadata["generation"] = generation + 1 if admitted.get("spec") != old.get("spec") else generation
        if isinstance(request.data, dict):
            request.data.clear()
            request.data.update(_merge_patch(old, admitted))
        else:
            request.data[:] = jsonpatch.make_patch(old, admitted).patch
        return True

    async def _handle_stamped(self, request: Any) -> aiohttp.web.StreamResponse:
        if request.resource is not None and request.action in (kmock.action.CREATE, kmock.action.UPDATE):
            version = str(next(self._versions))
            admission = self._admission(request)
            if admission is not None and isinstance(request.data, dict | list):
                try:
                    if self._admit(request, admission, version):
                        return await super()._handle(request)  # an update, admitted and stamped
                except jsonpatch.JsonPatchTestFailed as failed:
                    return await self._render_error(failed)
                except kmock.KubernetesError as refused:
                    return await self._render_error(refused)
            if request.action == kmock.action.CREATE and isinstance(request.data, dict):
                metadata = request.data.setdefault("metadata", {})
                metadata["resourceVersion"], metadata["generation"] = version, 1
                metadata.setdefault("uid", str(uuid.uuid4()))
                if request.namespace and not metadata.get("namespace"):  # as the API server: from the URL
                    metadata["namespace"] = request.namespace
                metadata.setdefault("creationTimestamp", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
                if not metadata.get("name") and metadata.get("generateName"):  # kopf's Events are named so
                    metadata["name"] = f"{metadata['generateName']}{version}"
            elif request.name is not None:
                self._stamp_update(request, version)
        return await super()._handle(request)

    async def _render_error(self, exc: Exception) -> aiohttp.web.StreamResponse:
        if isinstance(exc, jsonpatch.JsonPatchTestFailed):
            exc = InvalidError(message=str(exc))
        return await super()._render_error(exc)

    def _stamp_update(self, request: Any, version: str) -> None:
        key = (request.resource, request.namespace, request.name)
        if key not in self.objects:
            return  # kmock answers 404 itself
        generation = int(self.objects[key].get("metadata", {}).get("generation", 1))
        if isinstance(request.data, dict):  # a merge patch
            touches_spec = request.subresource is None and "spec" in request.data
            metadata = request.data.setdefault("metadata", {})
            metadata["resourceVersion"] = version
            if touches_spec:
                metadata["generation"] = generation + 1
        elif isinstance(request.data, list):  # a JSON patch: its own tests run first, on the old version
            touches_spec = request.subresource is None and any(
                str(op.get("path", "")).startswith("/spec") for op in request.data
            )
            request.data.append({"op": "add", "path": "/metadata/resourceVersion", "value": version})
            if touches_spec:
                request.data.append({"op": "add", "path": "/metadata/generation", "value": generation + 1})


def _merge_patch(old: Any, new: Any) -> Any:
    """The merge patch (RFC 7386) that turns `old` into `new` (None removes a key)."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return new
    patch = {key: None for key in old if key not in new}
    for key, value in new.items():
        if key not in old:
            patch[key] = value
        elif old[key] != value:
            patch[key] = _merge_patch(old[key], value)
    return patch


def write_kubeconfig(server_url: str, path: Path) -> Path:
    """A kubeconfig for the emulator at `server_url` (a token, namespace `default`), as kopf reads one."""
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: k, cluster: {{server: '{server_url.rstrip('/')}'}}}}]\n"
        "users: [{name: u, user: {token: test}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u, namespace: default}}]\n"
        "current-context: c\n"
    )
    return path


VERBS = frozenset({"get", "list", "watch", "create", "update", "patch", "delete"})


def serve_crds(emulator: Emulator, crds: Iterable[Mapping[str, Any]]) -> None:
    """Make the emulator serve these CRDs' resources, as the API server does once they are applied
    (the built-in resources too: without them kopf never starts watching)."""
    emulator.resources.load_bundled()
    for crd in crds:
        spec, names = crd["spec"], crd["spec"]["names"]
        for version in spec["versions"]:
            has_status = "status" in (version.get("subresources") or {})
            emulator.admissions[(spec["group"], version["name"], names["plural"])] = Admission(
                version["schema"]["openAPIV3Schema"], status_subresource=has_status
            )
            emulator.resources[f"{spec['group']}/{version['name']}/{names['plural']}"] = kmock.ResourceInfo(
                namespaced=spec["scope"] == "Namespaced",
                kind=names["kind"],
                singular=names["singular"],
                verbs=set(VERBS),
                shortnames=set(names.get("shortNames", ())),
                subresources={"status"} if has_status else set(),
            )


async def _serve() -> None:
    """Serve an emulator with Tidelog's CRDs until stdin closes; print its URL first."""
    import asyncio  # noqa: PLC0415 - only this entry point needs them
    import sys  # noqa: PLC0415

    from tidelog.operator.crds import CRD_FILES  # noqa: PLC0415

    async with Emulator() as emulator, kmock.Server(emulator) as server:
        serve_crds(emulator, CRD_FILES.values())
        print(str(server.url).rstrip("/"), flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)


if __name__ == "__main__":  # `python -m tidelog.dev.kube_emulator`: the emulator in a process of its own
    import asyncio

    asyncio.run(_serve())
