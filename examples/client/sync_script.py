"""The synchronous facade, for scripts and notebooks without asyncio.

python examples/client/sync_script.py [BOOTSTRAP]   (default: localhost:9292)
"""

import sys

from tidelog.client import TopicPartition
from tidelog.client.sync import SyncAdminClient, SyncConsumer, SyncProducer

BOOTSTRAP = (sys.argv[1] if len(sys.argv) > 1 else "localhost:9292").split(",")

admin = SyncAdminClient(BOOTSTRAP)
producer = SyncProducer(BOOTSTRAP, acks="all")
consumer = SyncConsumer(BOOTSTRAP)
try:
    if "notes" not in admin.list_topics():
        admin.create_topic("notes", 1, 1)
    future = producer.send("notes", b"written from a script")
    print(f"offset {future.result(timeout=30).offset}")
    partition = TopicPartition("notes", 0)
    consumer.assign([partition])
    consumer.seek_to_beginning([partition])
    end = consumer.end_offsets([partition])[partition]
    while consumer.position(partition) < end:
        for record in consumer.poll(1000):
            print(record.value)
finally:
    consumer.close()
    producer.close()
    admin.close()
