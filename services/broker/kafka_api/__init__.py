"""The broker's Kafka-protocol listener (docs/kafka-protocol.md): Kafka's own clients and tools
(librdkafka, kcat, kafka-python, aiokafka, Kafka's scripts) talk to Tidelog unchanged.

Each Kafka request becomes the broker's gRPC request message and is served by the very same
`BrokerService` methods, so authorisation, quotas, limits and errors are the gRPC listener's;
record batches are transcoded between Kafka's v2 format and the stored one
(tidelog.common.kafka_wire.record_batches).
"""
