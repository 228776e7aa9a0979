"""Transactional data for the pipeline tests (issue 41): committed and aborted transactions of a
stock transactional producer (confluent-kafka) interleaved with a plain producer's records, and
the partition's log read back as stored, without the isolation logic under test."""

from __future__ import annotations

import asyncio

from confluent_kafka import Producer

from headwater.protocol.records.record import decode_batch
from tests.mirror.util import raw_batches


def write_transactions(
    bootstrap: str, topic: str, partitions: int, rounds: int = 4, txn_id: str = "orders-app"
) -> tuple[Producer, Producer]:
    """``rounds`` transactions over every partition, alternately committed (``commit-*``) and aborted
    (``abort-*``), each with plain records before it and between its records and its marker; then
    one transaction left open (``open-*``) with plain records after it (``plain-after-open-*``).
    Returns (plain producer, transactional producer): the caller commits or aborts the open one."""
    plain = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    # the open transaction may wait minutes on a loaded machine: not aborted by its timeout meanwhile
    txn = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 0, "transaction.timeout.ms": 600000}
    )
    txn.init_transactions(60)

    def send(p: Producer, value: str) -> None:
        for partition in range(partitions):
            p.produce(topic, value=f"{value}-p{partition}".encode(), partition=partition)
        assert p.flush(60) == 0

    for r in range(rounds):
        kind = "commit" if r % 2 == 0 else "abort"
        send(plain, f"plain-{r}-before")
        txn.begin_transaction()
        for i in range(3):
            send(txn, f"{kind}-{r}-{i}")
        send(plain, f"plain-{r}-inside")  # between the transaction's records and its marker
        send(txn, f"{kind}-{r}-last")
        if kind == "commit":
            txn.commit_transaction(60)
        else:
            txn.abort_transaction(60)
    txn.begin_transaction()
    send(txn, "open-0")
    send(plain, "plain-after-open")
    return plain, txn


def stored_log(bootstrap: str, topic: str, partition: int) -> tuple[list[tuple[int, bytes]], int]:
    """(offset, value) of every data record of the partition as stored -- markers left out,
    aborted records kept (a read_uncommitted fetch, decoded batch by batch) -- and the log end
    offset (past the last marker)."""

    batches = raw_batches(bootstrap, topic, partition)
    out = [(r.offset, bytes(r.value or b"")) for h, b in batches if not h.is_control for r in decode_batch(b)[1]]
    return out, batches[-1][0].next_offset if batches else 0


def committed_view(log: list[tuple[int, bytes]], below: int | None = None) -> list[bytes]:
    """The values a read_committed reader must see, in log order: all but the ``abort-*`` ones
    (below offset ``below`` when given: the last stable offset)."""
    return [v for o, v in log if not v.startswith(b"abort-") and (below is None or o < below)]


def consumer_view(bootstrap: str, topic: str, partition: int, end: int) -> list[bytes]:
    """The values Headwater's own Consumer reads read_committed from the start to ``end``."""
    from headwater.client.consumer import Consumer
    from headwater.client.raw import READ_COMMITTED

    async def main() -> list[bytes]:
        async with Consumer(bootstrap, isolation_level=READ_COMMITTED) as c:
            sub = c.follow(topic, partition, 0, max_wait_ms=100)
            out: list[bytes] = []
            for _ in range(200):
                out.extend(bytes(r.value or b"") for r in await sub.poll())
                if sub.positions[partition] >= end:
                    break
            sub.close()
            return out

    return asyncio.run(main())
