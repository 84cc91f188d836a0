"""Who a caller is, the parts clients and services share.

- `principal`: principals (`User:alice`) and `ssl.principal.mapping.rules` (KIP-371).
- `scram`: SCRAM-SHA-512 credentials and both sides of the exchange.
- `sasl_client`: the client's SASL/SCRAM login, a channel interceptor.
- `sasl_metadata`: the call metadata that names a SCRAM session.
"""
