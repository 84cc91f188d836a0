"""TLS, shared by listeners and channels.

- `credentials`: gRPC server and channel credentials from `SecuritySettings`.
- `pem_files`: one TLS identity's PEM files, re-read when they change on disk.
- `certificates`: a certificate authority and the server and client certificates it signs.
"""
