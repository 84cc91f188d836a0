"""Client quotas (KIP-13, KIP-55, KIP-124), the parts clients and services share.

- `quota`: quota entities, which quota applies to a request, and the rate sensors.
- `quota_proto`: quota entities to and from their protobuf parts.
"""
