"""The consume-transform-produce application of test_transactions, one per stock client, run as its
own process so a test can kill -9 it: it reads ``IN`` (2 partitions, read_committed, the group's
committed offsets), writes ``T:<value>`` of each record to the same partition of ``OUT`` and commits
the input offsets with ``send_offsets_to_transaction``, one transaction per batch, until its
position is ``END`` on both input partitions.

It tells the test where it is on stdout, one line each: ``READY`` (init_transactions returned),
``OPEN <round>`` (at ``--hold-round``, the transaction open with its records flushed and, with
``--hold-after offsets``, its offsets sent: it then waits until the file ``<control>/go`` exists),
``ABORTED <round> <why>``, ``DONE <records> <aborted rounds>``. Round ``--abort-round`` is aborted
on purpose. After any abort the input is read again from the group's committed offsets (a new
consumer). Usage::

    python -m tests.compat.txn_app CLIENT BOOTSTRAP TXN_ID GROUP IN OUT END CONTROL_DIR
        [--hold-round N] [--hold-after records|offsets] [--abort-round N] [--deadline S]
"""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import inspect
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

BATCH = 40
DEADLINE_S = 150.0


def say(line: str) -> None:
    print(line, flush=True)


class Plan:
    def __init__(self, args: argparse.Namespace) -> None:
        self.a = args
        self.go = Path(args.control) / "go"
        self.deadline = time.monotonic() + args.deadline

    def hold(self, rnd: int, point: str) -> None:
        if rnd == self.a.hold_round and point == self.a.hold_after:
            say(f"OPEN {rnd}")
            while not self.go.exists():
                assert time.monotonic() < self.deadline, "never told to go on"
                time.sleep(0.05)

    def expired(self) -> bool:
        return time.monotonic() > self.deadline


def run_confluent(plan: Plan) -> None:
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

    a = plan.a
    p = Producer({"bootstrap.servers": a.bootstrap, "transactional.id": a.txn_id, "linger.ms": 5})
    p.init_transactions(60)
    say("READY")

    def consumer() -> Consumer:
        c = Consumer(
            {
                "bootstrap.servers": a.bootstrap,
                "group.id": a.group,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
            }
        )
        c.assign([TopicPartition(a.input, 0), TopicPartition(a.input, 1)])
        return c

    def commit() -> None:  # retried while librdkafka calls the error retriable
        while True:
            try:
                p.commit_transaction(60)
                return
            except KafkaException as e:
                if not e.args[0].retriable() or plan.expired():
                    raise
                time.sleep(0.5)

    c = consumer()
    pos = {0: -1, 1: -1}
    done = rnd = aborts = 0
    while min(pos.values()) < a.end:
        assert not plan.expired(), f"transformed {done} records in {rnd} rounds ({aborts} aborted) by the deadline"
        msgs = [m for m in c.consume(BATCH, 1.0) if not m.error()]
        if not msgs:
            continue
        rnd += 1
        try:
            p.begin_transaction()
            for m in msgs:
                p.produce(a.output, value=b"T:" + m.value(), partition=m.partition())
            p.flush(60)
            plan.hold(rnd, "records")
            offsets = [tp for tp in c.position(c.assignment()) if tp.offset >= 0]
            p.send_offsets_to_transaction(offsets, c.consumer_group_metadata(), 60)
            plan.hold(rnd, "offsets")
            if rnd == a.abort_round:
                raise _Deliberate
            commit()
            done += len(msgs)
            pos.update({tp.partition: tp.offset for tp in offsets})
        except (KafkaException, _Deliberate) as e:
            if isinstance(e, KafkaException):
                err = e.args[0]
                assert not err.fatal(), f"a fatal error: {err}"
                assert err.txn_requires_abort() or err.retriable(), f"neither abortable nor retriable: {err}"
            p.abort_transaction(60)
            aborts += 1
            say(f"ABORTED {rnd} {e!r}")
            c.close()
            c = consumer()
    c.close()
    say(f"DONE {done} {aborts}")


class _Deliberate(Exception):
    """The round the application aborts on purpose."""


def run_kafka_python(plan: Plan) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.errors import KafkaError
    from kafka.structs import OffsetAndMetadata

    a = plan.a
    tps = [TopicPartition(a.input, 0), TopicPartition(a.input, 1)]
    p = KafkaProducer(bootstrap_servers=a.bootstrap, transactional_id=a.txn_id, linger_ms=5)
    p.init_transactions()
    say("READY")

    def consumer() -> Any:
        c = KafkaConsumer(
            bootstrap_servers=a.bootstrap,
            group_id=a.group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
        )
        c.assign(tps)
        return c

    c = consumer()
    pos = {0: -1, 1: -1}
    done = rnd = aborts = 0
    while min(pos.values()) < a.end:
        assert not plan.expired(), f"transformed {done} records in {rnd} rounds ({aborts} aborted) by the deadline"
        polled = c.poll(timeout_ms=1000, max_records=BATCH)
        records = [r for rs in polled.values() for r in rs]
        if not records:
            continue
        rnd += 1
        try:
            p.begin_transaction()
            for r in records:
                p.send(a.output, value=b"T:" + r.value, partition=r.partition)
            p.flush()
            plan.hold(rnd, "records")
            offsets = {tp: OffsetAndMetadata(c.position(tp), "", -1) for tp in tps}
            p.send_offsets_to_transaction(offsets, a.group)
            plan.hold(rnd, "offsets")
            if rnd == a.abort_round:
                raise _Deliberate
            p.commit_transaction()
            done += len(records)
            pos.update({tp.partition: o.offset for tp, o in offsets.items()})
        except (KafkaError, _Deliberate) as e:
            p.abort_transaction()
            aborts += 1
            say(f"ABORTED {rnd} {e!r}")
            c.close()
            c = consumer()
    c.close()
    p.close()
    say(f"DONE {done} {aborts}")


async def _aio_loop(plan: Plan, p: Any, errors: tuple[type[BaseException], ...]) -> tuple[int, int]:
    """The loop of the apps whose transactional producer ``p`` speaks asyncio (aiokafka's, Headwater's:
    the same method names), the input read by aiokafka's read_committed consumer; ``errors``: the
    client's errors that abort a round. Returns (records transformed, rounds aborted)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    a = plan.a
    tps = [TopicPartition(a.input, 0), TopicPartition(a.input, 1)]

    async def consumer() -> AIOKafkaConsumer:
        c = AIOKafkaConsumer(
            bootstrap_servers=a.bootstrap,
            group_id=a.group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
        )
        await c.start()
        c.assign(tps)
        return c

    async def stop(c: AIOKafkaConsumer) -> None:
        # aiokafka 0.14's Fetcher.close() cancels its pending fetch tasks and awaits them unguarded: a
        # fetch to a killed broker sleeping in its retry backoff lets its CancelledError escape
        # stop() (fetcher.py, close(): `x.cancel(); await x`). Nothing here cancels this task, so the
        # error is that task's, and the consumer is closed by then.
        try:
            await c.stop()
        except asyncio.CancelledError:
            say("NOTE aiokafka's consumer stop() raised a fetch task's CancelledError")

    c = await consumer()
    pos = {0: -1, 1: -1}
    done = rnd = aborts = 0
    while min(pos.values()) < a.end:
        assert not plan.expired(), f"transformed {done} records in {rnd} rounds ({aborts} aborted) by the deadline"
        batches = await c.getmany(timeout_ms=1000, max_records=BATCH)
        records = [r for rs in batches.values() for r in rs]
        if not records:
            continue
        rnd += 1
        try:
            begun = p.begin_transaction()  # aiokafka's is a coroutine, Headwater's a plain call
            if inspect.isawaitable(begun):
                await begun
            for r in records:
                await p.send(a.output, value=b"T:" + r.value, partition=r.partition)
            await p.flush()
            await asyncio.to_thread(plan.hold, rnd, "records")
            # aiokafka's TopicPartition is a (topic, partition) named tuple: Headwater's keys too
            offsets = {tp: await c.position(tp) for tp in tps}
            await p.send_offsets_to_transaction(offsets, a.group)
            await asyncio.to_thread(plan.hold, rnd, "offsets")
            if rnd == a.abort_round:
                raise _Deliberate
            await p.commit_transaction()
            done += len(records)
            pos.update({tp.partition: o for tp, o in offsets.items()})
        except (*errors, _Deliberate) as e:
            await p.abort_transaction()
            aborts += 1
            say(f"ABORTED {rnd} {e!r}")
            await stop(c)
            c = await consumer()
    await stop(c)
    return done, aborts


def run_aiokafka(plan: Plan) -> None:
    asyncio.run(_aiokafka(plan))


async def _aiokafka(plan: Plan) -> None:
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaError

    a = plan.a
    p = AIOKafkaProducer(bootstrap_servers=a.bootstrap, transactional_id=a.txn_id, linger_ms=5)
    await p.start()  # init_transactions
    say("READY")
    done, aborts = await _aio_loop(plan, p, (KafkaError,))
    await p.stop()
    say(f"DONE {done} {aborts}")


def run_headwater(plan: Plan) -> None:
    asyncio.run(_headwater(plan))


async def _headwater(plan: Plan) -> None:
    """Headwater's own transactional producer (lib/headwater/client/transactions.py); the input is
    read by aiokafka's read_committed consumer, as in the aiokafka app."""
    from headwater.client import Producer
    from headwater.client.errors import KafkaConnectionError, KafkaTimeoutError
    from headwater.protocol.errors import KafkaError

    a = plan.a
    p = Producer(a.bootstrap, transactional_id=a.txn_id, linger_ms=5)
    await p.init_transactions()
    say("READY")
    done, aborts = await _aio_loop(plan, p, (KafkaError, KafkaTimeoutError, KafkaConnectionError))
    await p.close()
    say(f"DONE {done} {aborts}")


CLIENTS = {
    "confluent": run_confluent,
    "kafka-python": run_kafka_python,
    "aiokafka": run_aiokafka,
    "headwater": run_headwater,
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="txn_app")
    ap.add_argument("client", choices=sorted(CLIENTS))
    for name in ("bootstrap", "txn_id", "group", "input", "output"):
        ap.add_argument(name)
    ap.add_argument("end", type=int)
    ap.add_argument("control")
    ap.add_argument("--hold-round", type=int, default=0)
    ap.add_argument("--hold-after", choices=["records", "offsets"], default="records")
    ap.add_argument("--abort-round", type=int, default=0)
    ap.add_argument("--deadline", type=float, default=DEADLINE_S, help="seconds for the whole run")
    args = ap.parse_args(argv)
    # the clients' own log to stderr (the test's output file): WARNING, DEBUG with TXN_APP_DEBUG=1
    logging.basicConfig(level=logging.DEBUG if os.environ.get("TXN_APP_DEBUG") else logging.WARNING)
    # a client stuck inside a call: its threads' stacks, and an exit the test sees
    faulthandler.dump_traceback_later(args.deadline + 10, exit=True)
    CLIENTS[args.client](Plan(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
