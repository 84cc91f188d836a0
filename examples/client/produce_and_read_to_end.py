"""Produce records with acks=all, then read the partition from its beginning to its end.

python examples/client/produce_and_read_to_end.py [BOOTSTRAP]   (default: localhost:9292)
"""

import asyncio
import sys

from tidelog.client import AdminClient, Consumer, Producer, TopicPartition

BOOTSTRAP = (sys.argv[1] if len(sys.argv) > 1 else "localhost:9292").split(",")


async def main() -> None:
    async with AdminClient(BOOTSTRAP) as admin:
        if "greetings" not in await admin.list_topics():
            await admin.create_topic("greetings", num_partitions=1, replication_factor=1)

    async with Producer(BOOTSTRAP, acks="all") as producer:
        # send() returns once the record is queued; awaiting the delivery waits for the acknowledgement.
        deliveries = [await producer.send("greetings", f"hello {n}".encode(), key=b"k") for n in range(3)]
        for delivery in deliveries:
            metadata = await delivery
            print(f"acknowledged at offset {metadata.offset}")

    partition = TopicPartition("greetings", 0)
    async with Consumer(BOOTSTRAP) as consumer:
        consumer.assign([partition])
        await consumer.seek_to_beginning([partition])
        end = (await consumer.end_offsets([partition]))[partition]
        while await consumer.position(partition) < end:
            for record in await consumer.poll(1000):
                print(f"{record.offset}: {record.value!r}")
    print(f"read to the end ({end})")


asyncio.run(main())
