"""The options every gRPC channel and server of Tidelog is made with.

A module of its own so that the client's channels take them without importing the services'
runtime (its metrics, health service and server-side security: with the SASL server's etcd client,
about 5,000 of the 33,000 objects `import tidelog.client` left, each one walked by every full
collection of the garbage collector).
"""

from __future__ import annotations

from typing import Final

__all__ = ["GRPC_MESSAGE_BYTES_MAX", "GRPC_OPTIONS", "RECONNECT_BACKOFF_MAX_MS", "RECONNECT_BACKOFF_MS"]

# socket.request.max.bytes's default (a broker takes it from its settings): the largest message a
# service accepts or sends, and the bound of every client channel.
GRPC_MESSAGE_BYTES_MAX: Final = 100 * 1024 * 1024
# reconnect.backoff.ms / reconnect.backoff.max.ms (Kafka's defaults): how soon a channel tries a
# peer again after failing to connect. gRPC's own default grows to 120 s, so a peer that was
# restarted a few times in a row (failover, a rolling restart) could stay unreachable for a minute
# or two after it was back: the nemesis saw a partition get no acknowledgement for 90 s that way.
RECONNECT_BACKOFF_MS: Final = 50
RECONNECT_BACKOFF_MAX_MS: Final = 1000
GRPC_OPTIONS: Final = [
    ("grpc.max_receive_message_length", GRPC_MESSAGE_BYTES_MAX),
    ("grpc.max_send_message_length", GRPC_MESSAGE_BYTES_MAX),
    ("grpc.http2.lookahead_bytes", 16 * 1024 * 1024),
    ("grpc.initial_reconnect_backoff_ms", RECONNECT_BACKOFF_MS),
    ("grpc.min_reconnect_backoff_ms", RECONNECT_BACKOFF_MS),
    ("grpc.max_reconnect_backoff_ms", RECONNECT_BACKOFF_MAX_MS),
    # Each channel its own connections: gRPC otherwise shares them between channels to one
    # address, and a new channel (ChannelPool.forget_failed) took over the old one's failed
    # connection with its reconnect backoff.
    ("grpc.use_local_subchannel_pool", 1),
]
