"""What only the services share (Kafka's server-common): the process runtime, etcd, the metadata
layout, metrics and the listener's side of security. No client, CLI, Spark source or operator
imports it (import contracts in pyproject.toml); what they share with the services is
`tidelog.common`.

- `runtime`: one service process's start/stop sequence (gRPC server, health, metrics, SIGTERM).
- `runtime_metrics`: the Python runtime's own metrics (GC pauses, threads, event-loop lag).
- `unary_interceptor`, `request_decoding`: the gRPC server's interceptor base and request limits.
- `metrics_catalog`, `metrics_http`: every metric's definition, and the scrape endpoint.
- `metadata`: the key layout and records of Tidelog's metadata in etcd.
- `etcd`: the etcd client, sessions, elections and watched prefixes.
- `security`: authentication, SASL sessions and access control on a listener.
"""
