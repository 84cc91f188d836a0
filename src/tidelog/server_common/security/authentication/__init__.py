"""Who is calling, on a listener.

- `interceptor`: the server-side interceptor that gives every call its principal.
- `sasl_server`: the SASL/SCRAM-SHA-512 Authentication service and the sessions its logins open.
- `credential_store`: SCRAM credentials in etcd, and seeding a new cluster's first users.
"""
