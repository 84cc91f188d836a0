"""Security shared by clients and services, by concern. Nothing here runs only in a service: the
listener's side is `tidelog.server_common.security`.

- `protocol`: `security.protocol`'s values (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL).
- `tls`: TLS credentials for listeners and channels, re-read when their files change, and the
  certificate authority the chart's hook and `tidelog dev up --secure` issue certificates from.
- `authentication`: principals and Kafka's certificate-subject mapping, SCRAM-SHA-512, and the
  client's SASL login.
- `authorization`: Kafka's ACL model and its protobuf form.
- `quotas`: Kafka's client quotas, their precedence and rate measurement, and their protobuf form.
"""
