"""The Tidelog operator: `python -m tidelog.operator.main --bootstrap host:port [...]`.

A kopf operator that reconciles `Topic` resources (group `tidelog.io`, `v1beta1`) into a Tidelog
cluster through the client library, as `topic_reconciler.py` describes. kopf supplies the watch,
the finalizer, retries and Kubernetes Events; this module turns a reconcile's `Outcome` into the
resource's status (a `Ready` condition with a reason, `observedGeneration`, the topic's figures)
and its Events:
- create, update (spec changes) and resume (the operator restarted) reconcile at once;
- a timer reconciles every `operator.reconcile.interval.ms` too, so what was changed outside
  Kubernetes is put back (reported as `DriftReverted`);
- an outcome that is not Ready yet (replicas moving, the cluster unreachable) is retried after the
  delay it names; an invalid spec is not retried until the spec changes;
- deletion deletes the topic (or lets it go with `deletionPolicy: Retain`), then kopf drops its
  finalizer;
- two resources naming the same topic: the older one owns it, the other is `ResourceConflict` and
  changes nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import kopf
import structlog

from tidelog.client import AdminClient
from tidelog.client.group_admin import GroupAdmin
from tidelog.common.settings import OperatorSettings, parse_process_args
from tidelog.operator import kube_api
from tidelog.operator.client_certificates import ClientCertificateIssuer
from tidelog.operator.crds import GROUP, VERSION
from tidelog.operator.group_reconciler import GroupReconciler, GroupSpec
from tidelog.operator.kube_secrets import KubeSecrets, owner_reference
from tidelog.operator.topic_reconciler import Outcome, TopicReconciler, TopicSpec
from tidelog.operator.user_reconciler import UserReconciler, UserSpec
from tidelog.server_common import metrics_catalog
from tidelog.server_common.runtime import configure_logging, start_metrics

__all__ = ["OperatorMemo", "handlers", "main", "retry_delay"]

log = structlog.get_logger(__name__)

TOPICS: Final = (GROUP, VERSION, "topics")
GROUPS: Final = (GROUP, VERSION, "consumergroups")
USERS: Final = (GROUP, VERSION, "tidelogusers")
LEGACY_USERS: Final = (GROUP, VERSION, "users")  # the kind's deprecated first name (crds.USER_CRD)
RECONCILES = metrics_catalog.counter("tidelog_operator_reconciles_total")
RECONCILE_SECONDS = metrics_catalog.histogram(
    "tidelog_operator_reconcile_seconds", buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
)
ERRORS = metrics_catalog.counter("tidelog_operator_errors_total")

DELETE_RETRY_S: Final = 5.0  # a deletion not done yet, whose outcome names no pace of its own


@dataclasses.dataclass(frozen=True)
class OperatorMemo:
    """What every handler gets as kopf's `memo`: the settings and the reconcilers, made once by
    serve() before kopf starts (kopf copies the memo per resource; these are shared)."""

    settings: OperatorSettings
    topics: TopicReconciler
    groups: GroupReconciler
    users: UserReconciler


def _conflict(name: str, namespace: str | None, spec: Mapping[str, Any], index: kopf.Index[str, Any]) -> str | None:
    """Another, older resource names the same topic: who, or None."""
    topic = spec.get("topicName") or name
    owners = sorted(index.get(topic, []))
    if not owners or owners[0][1:] == (namespace, name):
        return None
    return f"{owners[0][1]}/{owners[0][2]}"


# Outcomes the cluster's silence caused: retried with a growing delay, not at the outcome's pace.
BACKOFF_REASONS: Final = frozenset({"ClusterUnavailable", "DeleteFailed"})


def retry_delay(outcome: Outcome, retry: int, settings: OperatorSettings) -> float:
    """Seconds until kopf runs the handler again: the outcome's own pace (a topic being created or
    reassigned is looked at every 2 s), or, while the cluster does not answer, operator.retry.backoff.ms
    doubled for each failure in a row (kopf's `retry`) up to operator.retry.backoff.max.ms."""
    if outcome.reason not in BACKOFF_REASONS:
        return outcome.retry_after_s if outcome.retry_after_s is not None else 0.0
    delay_ms: int = min(settings.operator_retry_backoff_ms << min(retry, 30), settings.operator_retry_backoff_max_ms)
    return delay_ms / 1000


def _retry_unless_done(outcome: Outcome, retry: int, memo: OperatorMemo, *, deleting: bool = False) -> None:
    """The one way a handler asks kopf to run it again: an outcome not ready that names a pace
    (a topic being created, replicas moving, the cluster unreachable) — or, when deleting, any
    outcome not done — raises kopf.TemporaryError with `retry_delay`'s delay."""
    if outcome.ready or (outcome.retry_after_s is None and not deleting):
        return
    delay = retry_delay(outcome, retry, memo.settings)
    raise kopf.TemporaryError(outcome.message, delay=delay or (DELETE_RETRY_S if deleting else 0.0))


def _condition(outcome: Outcome, generation: int | None) -> dict[str, Any]:
    return {
        "type": "Ready",
        "status": "True" if outcome.ready else "False",
        "reason": outcome.reason,
        "message": outcome.message,
        "lastTransitionTime": datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        **({"observedGeneration": generation} if generation is not None else {}),
    }


def _record(outcome: Outcome, body: kopf.Body, patch: kopf.Patch, meta: Mapping[str, Any], kind: str = "Topic") -> None:
    """The outcome as the resource's status and Events."""
    generation = meta.get("generation")
    for key, value in outcome.status.items():
        patch.status[key] = value
    if "reassignment" not in outcome.status and (body.get("status") or {}).get("reassignment"):
        patch.status["reassignment"] = None
    if generation is not None:
        patch.status["observedGeneration"] = generation
    patch.status["conditions"] = [_condition(outcome, generation)]
    for event_type, reason, message in outcome.events:
        kopf.event(body, type=event_type, reason=reason, message=message)
    RECONCILES.labels(kind, outcome.reason).inc()


async def _reconcile_topic(
    *,
    body: kopf.Body,
    spec: Mapping[str, Any],
    meta: Mapping[str, Any],
    name: str,
    namespace: str | None,
    patch: kopf.Patch,
    topics_by_name: kopf.Index[str, Any],
    retry: int,
    memo: OperatorMemo,
    drift: bool,
) -> None:
    owner = _conflict(name, namespace, spec, topics_by_name)
    if owner is not None:
        outcome = Outcome(False, "ResourceConflict", f"topic {spec.get('topicName') or name!r} is managed by {owner}")
        _record(outcome, body, patch, meta)
        return
    with RECONCILE_SECONDS.labels("Topic").time():
        try:
            outcome = await memo.topics.reconcile(TopicSpec.from_resource(name, spec), drift=drift)
        except Exception:
            ERRORS.labels("Topic").inc()
            raise
    _record(outcome, body, patch, meta)
    log.info("topic_reconciled", resource=f"{namespace}/{name}", ready=outcome.ready, reason=outcome.reason)
    _retry_unless_done(outcome, retry, memo)


async def topic_changed(**kwargs: Any) -> None:
    await _reconcile_topic(**_topic_arguments(kwargs), drift=False)


async def topic_drift(**kwargs: Any) -> None:
    """Every operator.reconcile.interval.ms: what was changed outside Kubernetes is put back."""
    await _reconcile_topic(**_topic_arguments(kwargs), drift=True)


async def topic_deleted(
    *, spec: Mapping[str, Any], name: str, namespace: str | None, retry: int, memo: OperatorMemo, **kwargs: Any
) -> None:
    index: kopf.Index[str, Any] = kwargs["topics_by_name"]  # kopf passes each index by its name
    if _conflict(name, namespace, spec, index) is not None:
        return  # never owned the topic: nothing to delete
    outcome = await memo.topics.delete(TopicSpec.from_resource(name, spec))
    RECONCILES.labels("Topic", outcome.reason).inc()
    _retry_unless_done(outcome, retry, memo, deleting=True)
    log.info("topic_released", resource=f"{namespace}/{name}", reason=outcome.reason)


async def group_changed(
    *,
    body: kopf.Body,
    spec: Mapping[str, Any],
    meta: Mapping[str, Any],
    name: str,
    patch: kopf.Patch,
    memo: OperatorMemo,
    retry: int = 0,  # kopf's count of failures in a row
    **_: Any,
) -> None:
    """ConsumerGroup: status from the coordinators; a reset applied once per id, when empty."""
    last_reset = (body.get("status") or {}).get("lastReset")
    with RECONCILE_SECONDS.labels("ConsumerGroup").time():
        outcome = await memo.groups.reconcile(GroupSpec.from_resource(name, spec), last_reset=last_reset)
    _record(outcome, body, patch, meta, kind="ConsumerGroup")
    _retry_unless_done(outcome, retry, memo)


async def group_deleted(*, spec: Mapping[str, Any], name: str, retry: int, memo: OperatorMemo, **_: Any) -> None:
    outcome = await memo.groups.delete(GroupSpec.from_resource(name, spec))
    RECONCILES.labels("ConsumerGroup", outcome.reason).inc()
    _retry_unless_done(outcome, retry, memo, deleting=True)


async def user_changed(
    *,
    body: kopf.Body,
    spec: Mapping[str, Any],
    meta: Mapping[str, Any],
    name: str,
    namespace: str | None,
    patch: kopf.Patch,
    memo: OperatorMemo,
    retry: int = 0,
    **_: Any,
) -> None:
    """User: credentials (a Secret), ACLs and quotas of `User:<name>`, as the spec says."""
    with RECONCILE_SECONDS.labels("User").time():
        try:
            outcome = await memo.users.reconcile(
                UserSpec.from_resource(name, spec), namespace=namespace or "default", owner=owner_reference(body)
            )
        except Exception:
            ERRORS.labels("User").inc()
            raise
    _record(outcome, body, patch, meta, kind="User")
    _retry_unless_done(outcome, retry, memo)


async def user_deleted(*, spec: Mapping[str, Any], name: str, retry: int, memo: OperatorMemo, **_: Any) -> None:
    outcome = await memo.users.delete(UserSpec.from_resource(name, spec))
    RECONCILES.labels("User", outcome.reason).inc()
    _retry_unless_done(outcome, retry, memo, deleting=True)


def _topic_arguments(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    keys = ("body", "spec", "meta", "name", "namespace", "patch", "topics_by_name", "retry", "memo")
    return {key: kwargs[key] for key in keys}


def handlers(settings: OperatorSettings) -> kopf.OperatorRegistry:
    """Every handler of the operator, registered in one place and one way (kopf's decorators on a
    registry of its own, given to kopf.operator): the timers' interval is a setting, known only
    once the arguments are parsed."""
    registry = kopf.OperatorRegistry()
    interval = settings.operator_reconcile_interval_ms / 1000
    # The logins kopf's default registry would bring: in a pod, its service account; elsewhere
    # (tests, a laptop), $KUBECONFIG. Each gives nothing where it does not apply.
    kopf.on.login(registry=registry)(kopf.login_with_service_account)
    kopf.on.login(registry=registry)(kopf.login_with_kubeconfig)
    peering_lifetime = max(1, settings.operator_peering_lifetime_ms // 1000)

    @kopf.on.startup(registry=registry)
    async def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.posting.level = logging.INFO  # Events for what the operator did, not only for failures
        settings.persistence.finalizer = f"{GROUP}/finalizer"
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
        settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=GROUP)
        settings.watching.server_timeout = 60
        settings.peering.lifetime = peering_lifetime

    @kopf.index(*TOPICS, id="topics_by_name", registry=registry)  # passed to handlers by this name
    def topics_by_name(
        *, name: str, namespace: str | None, spec: Mapping[str, Any], meta: Mapping[str, Any], **_: Any
    ) -> dict[str, Any]:
        """Which resources name each topic, for the conflict check."""
        return {spec.get("topicName") or name: (meta.get("creationTimestamp") or "", namespace, name)}

    for changed in (kopf.on.create, kopf.on.resume):
        changed(*TOPICS, registry=registry)(topic_changed)
        changed(*GROUPS, registry=registry)(group_changed)
    kopf.on.update(*TOPICS, field="spec", registry=registry)(topic_changed)
    kopf.on.update(*GROUPS, field="spec", registry=registry)(group_changed)
    kopf.timer(*TOPICS, interval=interval, initial_delay=interval, idle=None, registry=registry)(topic_drift)
    kopf.timer(*GROUPS, interval=interval, idle=None, registry=registry)(group_changed)
    kopf.on.delete(*TOPICS, registry=registry)(topic_deleted)
    kopf.on.delete(*GROUPS, registry=registry)(group_deleted)
    for users in (USERS, LEGACY_USERS):
        kopf.on.create(*users, registry=registry)(user_changed)
        kopf.on.resume(*users, registry=registry)(user_changed)
        kopf.on.update(*users, field="spec", registry=registry)(user_changed)
        kopf.timer(*users, interval=interval, initial_delay=interval, idle=None, registry=registry)(user_changed)
        kopf.on.delete(*users, registry=registry)(user_deleted)
    return registry


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Tidelog operator (Topic resources)")
    parser.add_argument("--bootstrap", required=True, action="append", help="a broker host:port (repeatable)")
    parser.add_argument("--controller", action="append", default=[], help="a controller host:port (repeatable)")
    parser.add_argument("--namespace", action="append", default=[], help="watch only these (default: all)")
    parser.add_argument("--metrics-port", type=int, default=0)
    parser.add_argument("--health-port", type=int, default=0, help="kopf's liveness endpoint (0: off)")
    parser.add_argument("--standalone", action="store_true", help="no peering: the only replica")
    parser.add_argument("--peering", default="tidelog", help="the ClusterKopfPeering/KopfPeering replicas meet in")
    parser.add_argument("--priority", type=int, default=0, help="among replicas the highest acts; equal ones freeze")
    parser.add_argument("--clients-ca-cert", type=Path, help="the clients CA's certificate (User tls authentication)")
    parser.add_argument("--clients-ca-key", type=Path, help="that CA's private key")
    return parse_process_args(parser, OperatorSettings, argv)


async def serve(args: argparse.Namespace) -> None:
    settings: OperatorSettings = args.settings
    configure_logging("operator")
    if args.metrics_port:
        start_metrics(args.metrics_port, host="0.0.0.0", security=args.security)
    timeout_ms = settings.operator_request_timeout_ms
    async with (
        AdminClient(
            args.bootstrap, controllers=args.controller, request_timeout_ms=timeout_ms, security=args.security
        ) as admin,
        GroupAdmin(args.bootstrap, request_timeout_ms=timeout_ms, security=args.security) as groups,
    ):
        issuer = (
            ClientCertificateIssuer.from_files(args.clients_ca_cert, args.clients_ca_key)
            if args.clients_ca_cert and args.clients_ca_key
            else None
        )
        kube = kube_api.session(kube_api.connection())
        memo = OperatorMemo(
            settings=settings,
            topics=TopicReconciler(admin),
            groups=GroupReconciler(groups, admin),
            users=UserReconciler(admin, KubeSecrets(kube), issuer),
        )
        await kopf.operator(
            registry=handlers(settings),
            memo=memo,
            standalone=args.standalone,
            peering_name=None if args.standalone else args.peering,
            priority=None if args.standalone else args.priority,
            clusterwide=not args.namespace,
            namespaces=args.namespace,
            liveness_endpoint=f"http://0.0.0.0:{args.health_port}/healthz" if args.health_port else None,
        )
        await kube.close()


def main(argv: list[str] | None = None) -> None:
    asyncio.run(serve(parse_args(argv)))


if __name__ == "__main__":
    main()
