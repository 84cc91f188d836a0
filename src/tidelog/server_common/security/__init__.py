"""A listener's side of security, by concern; what clients share with it is
`tidelog.common.security`.

- `service_security`: one service process's security as a part of its start/stop sequence.
- `authentication`: the interceptor that gives every call its principal, the SASL/SCRAM login
  service and its sessions, and the SCRAM credentials in etcd.
- `authorization`: access control (service roles and the ACL authorizer) and ACLs in etcd.
"""
