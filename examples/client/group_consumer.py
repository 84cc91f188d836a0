"""Consume as a member of a group, committing what was processed.

    python examples/client/group_consumer.py [BOOTSTRAP]   (default: localhost:9292)

Run it twice at once: the group splits the partitions between the two (a rebalance).
"""

import asyncio
import sys

from tidelog.client import AdminClient, GroupConsumer, Producer

BOOTSTRAP = (sys.argv[1] if len(sys.argv) > 1 else "localhost:9292").split(",")


async def main() -> None:
    async with AdminClient(BOOTSTRAP) as admin:
        if "orders" not in await admin.list_topics():
            await admin.create_topic("orders", num_partitions=3, replication_factor=1)
    async with Producer(BOOTSTRAP) as producer:
        await (await producer.send_batch("orders", [b"order %d" % n for n in range(30)]))

    consumer = GroupConsumer(BOOTSTRAP, "billing", auto_offset_reset="earliest", enable_auto_commit=False)
    consumer.subscribe(["orders"])
    try:
        processed = 0
        while processed < 30:
            records = await consumer.poll(1000)
            processed += len(records)  # ... process them here ...
            await consumer.commit()  # what poll returned so far is done
        print(f"processed {processed} records")
    finally:
        await consumer.close()  # leaves the group at once: the others take its partitions


asyncio.run(main())
