"""What a principal may do, the parts clients and services share.

- `acl`: Kafka's ACL model (bindings, filters, the authorizer's decision).
- `acl_proto`: ACL bindings and filters to and from their protobuf messages.
"""
