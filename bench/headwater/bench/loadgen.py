"""Python load generators, each run as its own process: ``python -m headwater.bench.loadgen ...``.

Two clients: confluent-kafka (the Python wrapper of librdkafka) and Headwater's own
(:mod:`headwater.client`). Each command stops by itself (a record count and a time limit) and
prints one JSON line on stdout as its last line:

- ``*-produce``: ``{"sent", "acked", "errors", "first_error", "bytes", "seconds", "cpu", "tx_requests", "tx_bytes"}``
  (``seconds`` from the first send to the last acknowledgement; ``tx_*`` are -1 when unknown);
- ``*-consume``: ``{"records", "bytes", "seconds", "cpu"}`` (from the start of fetching to the last record);
  ``cpu`` is the generator's own CPU seconds over the measured interval;
- ``*-latency-consumer``: prints ``READY`` once positioned at the end of the log, then
  ``{"count", "p50_ms", "p99_ms", "p999_ms", "max_ms"}``; ``*-latency-producer`` sends at a fixed
  rate, each value starting with the send time (``CLOCK_MONOTONIC``, shared by processes on Linux).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import struct
import sys
import time
from collections.abc import Sequence
from typing import Any

#: the group id of the confluent consumers here (they assign partitions, but librdkafka wants one)
BENCH_GROUP = "headwater-bench"

MIB = 1 << 20
_STAMP = struct.Struct(">q")


def _conf(pairs: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"-X expects key=value, got {pair!r}")
        out[key] = value
    return out


def _value(size: int) -> bytes:
    return (bytes(range(97, 123)) * (size // 26 + 1))[:size]


def _latencies(samples_ns: list[int]) -> dict[str, Any]:
    from headwater.bench.stats import percentile

    ms = sorted(s / 1e6 for s in samples_ns)
    return {
        "count": len(ms),
        "p50_ms": percentile(ms, 0.50),
        "p99_ms": percentile(ms, 0.99),
        "p999_ms": percentile(ms, 0.999),
        "max_ms": ms[-1] if ms else None,
    }


def _cpu() -> float:
    """CPU seconds of this process so far, all its threads (librdkafka's included)."""
    t = os.times()
    return t.user + t.system


class _Clock:
    """Consumer throughput: the clock starts when the consumer starts fetching (:meth:`start`)
    and stops at the last record; ``cpu`` is this process' CPU over the same interval;
    ``to_first`` the seconds until the first records arrived (connection, offsets, first fetch)."""

    def __init__(self) -> None:
        self.records = self.nbytes = 0
        self.first = self.last = 0.0
        self.cpu0 = self.cpu1 = 0.0
        self.to_first = 0.0

    def start(self) -> None:
        self.first = self.last = time.perf_counter()
        self.cpu0 = self.cpu1 = _cpu()

    def got(self, records: int, nbytes: int) -> None:
        self.last = time.perf_counter()
        self.cpu1 = _cpu()
        if not self.records:
            self.to_first = self.last - self.first
        self.records += records
        self.nbytes += nbytes

    def result(self) -> dict[str, Any]:
        return {
            "records": self.records,
            "bytes": self.nbytes,
            "seconds": self.last - self.first,
            "cpu": self.cpu1 - self.cpu0,
            "to_first": self.to_first,
        }


# -- confluent-kafka ----------------------------------------------------------------------------


def _sum_broker_stats(stats_json: str) -> tuple[int, int]:
    """(Produce requests, bytes sent) summed over the real brokers of librdkafka's statistics."""
    stats = json.loads(stats_json)
    requests = sent = 0
    for broker in stats.get("brokers", {}).values():
        if int(broker.get("nodeid", -1)) >= 0:
            requests += int(broker.get("req", {}).get("Produce", 0))
            sent += int(broker.get("txbytes", 0))
    return requests, sent


def confluent_produce(args: argparse.Namespace) -> dict[str, Any]:
    from confluent_kafka import KafkaError, KafkaException, Producer

    stats: list[tuple[int, int]] = []
    errors: list[str] = []
    purged = [0]

    def on_error(err: Any, msg: Any) -> None:
        if err is None:
            return
        if err.code() == KafkaError._PURGE_QUEUE:
            purged[0] += 1
        else:
            errors.append(str(err))

    conf: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap,
        "acks": args.acks,
        "delivery.report.only.error": True,
        "statistics.interval.ms": 500,
        "stats_cb": lambda s: stats.append(_sum_broker_stats(s)),
        "on_delivery": on_error,
    }
    conf.update(_conf(args.X))
    producer = Producer(conf)
    producer.list_topics(args.topic, timeout=30)  # metadata before the clock starts
    value = _value(args.size)
    topic = args.topic
    produce, poll = producer.produce, producer.poll
    sent = 0
    start, cpu0 = time.perf_counter(), _cpu()
    deadline = start + args.seconds
    try:
        while sent < args.count:
            try:
                produce(topic, value)
            except BufferError:
                poll(0.001)
                if time.perf_counter() > deadline:
                    break
                continue
            sent += 1
            if not sent & 1023:
                poll(0)
                if time.perf_counter() > deadline:
                    break
        # until the deadline, wait; then drop what was never sent, and what is in flight gets a grace
        left = producer.flush(max(0.0, deadline - time.perf_counter()))
        if left:
            producer.purge(in_queue=True, in_flight=False, blocking=False)
            left = producer.flush(args.seconds)
    except KafkaException as e:
        errors.append(str(e))
        left = len(producer)
    seconds, cpu = time.perf_counter() - start, _cpu() - cpu0
    sent -= purged[0]
    seen = len(stats)
    until = time.perf_counter() + 2
    while len(stats) == seen and time.perf_counter() < until:  # a statistics snapshot after the run
        producer.poll(0.05)
    tx_requests, tx_bytes = stats[-1] if stats else (-1, -1)
    failed = len(errors) + left
    return {
        "sent": sent,
        "acked": sent - failed,
        "errors": failed,
        "first_error": errors[0] if errors else ("" if not left else f"{left} records never acknowledged"),
        "bytes": (sent - failed) * args.size,
        "seconds": seconds,
        "cpu": cpu,
        "tx_requests": tx_requests,
        "tx_bytes": tx_bytes,
    }


def _confluent_consumer(bootstrap: str, extra: dict[str, str]) -> Any:
    from confluent_kafka import Consumer

    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": BENCH_GROUP,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
    }
    conf.update(extra)
    return Consumer(conf)


def _partitions(consumer: Any, topic: str) -> list[int]:
    md = consumer.list_topics(topic, timeout=30)
    return sorted(md.topics[topic].partitions)


def confluent_consume(args: argparse.Namespace) -> dict[str, Any]:
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition

    consumer = _confluent_consumer(args.bootstrap, _conf(args.X))
    try:
        partitions = _partitions(consumer, args.topic)
        clock = _Clock()
        clock.start()  # assign() starts the fetching
        consumer.assign([TopicPartition(args.topic, p, OFFSET_BEGINNING) for p in partitions])
        deadline = time.perf_counter() + args.seconds
        while clock.records < args.count and time.perf_counter() < deadline:
            # consume(n, t) returns when it has n records or t passed: ask for no more than are left
            batch = consumer.consume(min(1000, args.count - clock.records), 0.5)
            values = [len(m.value()) for m in batch if m.error() is None]
            if values:
                clock.got(len(values), sum(values))
    finally:
        consumer.close()
    return clock.result()


def confluent_latency_consumer(args: argparse.Namespace) -> dict[str, Any]:
    from confluent_kafka import TopicPartition

    consumer = _confluent_consumer(args.bootstrap, {"fetch.wait.max.ms": "100", **_conf(args.X)})
    try:
        starts = []
        for p in _partitions(consumer, args.topic):
            _, high = consumer.get_watermark_offsets(TopicPartition(args.topic, p), timeout=30)
            starts.append(TopicPartition(args.topic, p, high))
        consumer.assign(starts)
        print("READY", flush=True)
        samples: list[int] = []
        deadline = time.perf_counter() + args.seconds
        poll = consumer.poll  # not consume(n, timeout): that waits for n records or the timeout
        while len(samples) < args.count and time.perf_counter() < deadline:
            m = poll(0.1)
            if m is not None and m.error() is None:
                samples.append(time.monotonic_ns() - _STAMP.unpack_from(m.value())[0])
    finally:
        consumer.close()
    return _latencies(samples)


def confluent_latency_producer(args: argparse.Namespace) -> dict[str, Any]:
    from confluent_kafka import Producer

    # no lingering; max.in.flight 5 as in the throughput runs (the Java producer's default)
    conf: dict[str, Any] = {"bootstrap.servers": args.bootstrap, "acks": args.acks, "linger.ms": 0, "max.in.flight": 5}
    conf.update(_conf(args.X))
    producer = Producer(conf)
    producer.list_topics(args.topic, timeout=30)
    pad = _value(max(0, args.size - _STAMP.size))
    sent = 0
    start = time.perf_counter()
    while sent < args.count:
        now = time.perf_counter()
        due = min(args.count, int((now - start) * args.rate) + 1)
        while sent < due:
            producer.produce(args.topic, _STAMP.pack(time.monotonic_ns()) + pad)
            sent += 1
        producer.poll(0)
        time.sleep(0.0005)
    left = producer.flush(30)
    return {"sent": sent, "errors": left, "seconds": time.perf_counter() - start}


# -- headwater.client ---------------------------------------------------------------------------


def _headwater() -> Any:
    try:
        import headwater.client as client
    except ImportError as e:  # the client library is written alongside the benchmark
        raise SystemExit(f"not available: headwater.client cannot be imported ({e})") from None
    for name in ("Producer", "Consumer"):
        if not hasattr(client, name):
            raise SystemExit(f"not available: headwater.client has no {name} yet")
    return client


async def _headwater_produce(args: argparse.Namespace) -> dict[str, Any]:
    client = _headwater()
    errors: list[str] = []
    kwargs: dict[str, Any] = {"acks": args.acks, "linger_ms": args.linger_ms, "max_request_size": args.max_request_size}
    if args.batch_size is not None:
        kwargs["batch_size"] = args.batch_size
    value = _value(args.size)
    producer = client.Producer(args.bootstrap, **kwargs)
    await producer.start()
    acked = dropped = 0
    last_ack = 0.0
    closing = False

    def done(fut: asyncio.Future[Any]) -> None:
        nonlocal acked, last_ack, dropped
        if not fut.cancelled() and fut.exception() is None:
            acked += 1
            last_ack = time.perf_counter()
        elif closing:
            dropped += 1  # not delivered by the deadline and its grace
        else:
            errors.append("cancelled" if fut.cancelled() else repr(fut.exception()))

    try:
        await producer.cluster.topic_metadata(args.topic)
        send = producer.send
        topic = args.topic
        sent = 0
        start = last_ack = time.perf_counter()
        cpu0 = _cpu()
        deadline = start + args.seconds
        while sent < args.count:
            fut = await send(topic, value)
            fut.add_done_callback(done)
            sent += 1
            if not sent & 255 and time.perf_counter() > deadline:
                break
        # wait until the deadline and then as long again; what is still not delivered is dropped
        with contextlib.suppress(client.KafkaTimeoutError):
            await producer.flush(max(0.0, deadline - time.perf_counter()) + args.seconds)
        cpu = _cpu() - cpu0
    finally:
        closing = True
        await producer.close(timeout=0)
    await asyncio.sleep(0)  # let the last callbacks run
    return {
        "sent": sent,
        "acked": acked,
        "errors": len(errors) + dropped,
        "first_error": errors[0] if errors else (f"{dropped} records not acknowledged in time" if dropped else ""),
        "bytes": acked * args.size,
        "seconds": last_ack - start,
        "cpu": cpu,
        "tx_requests": -1,
        "tx_bytes": -1,
    }


def headwater_sync_produce(args: argparse.Namespace) -> dict[str, Any]:
    """A blocking application's loop: ``SyncProducer.send`` per record, then ``flush``.

    ``--mode audit`` uses SyncAuditingProducer (origin headers, counts per window); ``--mode headers``
    the plain SyncProducer with the same three origin headers on every record and no auditing (what
    the headers alone cost).
    """
    import socket

    _headwater()
    from headwater.client.audit import HEADER_CREATED, HEADER_DC, HEADER_HOST, SyncAuditingProducer
    from headwater.client.sync import SyncProducer

    kwargs: dict[str, Any] = {"acks": args.acks, "linger_ms": args.linger_ms, "max_request_size": args.max_request_size}
    if args.batch_size is not None:
        kwargs["batch_size"] = args.batch_size
    if args.mode == "audit":
        producer: SyncProducer = SyncAuditingProducer(args.bootstrap, datacenter="dc1", **kwargs)
    else:
        producer = SyncProducer(args.bootstrap, **kwargs)
    host = socket.gethostname().encode()
    value = _value(args.size)
    topic = args.topic
    errors: list[str] = []
    try:
        producer.start(30)
        producer.send_and_wait(topic, value, timeout=30)  # metadata and a connection before the clock starts
        send = producer.send
        sent = 0
        start, cpu0 = time.perf_counter(), _cpu()
        deadline = start + args.seconds
        futures = []
        if args.mode == "headers":
            ms = -1
            headers: tuple[tuple[str, bytes], ...] = ()
            while sent < args.count:
                now = int(time.time() * 1000)
                if now != ms:  # built once a millisecond, as SyncAuditingProducer does
                    ms, headers = now, ((HEADER_HOST, host), (HEADER_DC, b"dc1"), (HEADER_CREATED, b"%d" % now))
                futures.append(send(topic, value, None, headers))
                sent += 1
                if not sent & 1023 and time.perf_counter() > deadline:
                    break
        else:
            while sent < args.count:
                futures.append(send(topic, value))
                sent += 1
                if not sent & 1023 and time.perf_counter() > deadline:
                    break
        producer.flush(max(0.0, deadline - time.perf_counter()) + args.seconds)
        seconds, cpu = time.perf_counter() - start, _cpu() - cpu0
        failed = [f.exception(0) for f in futures if f.exception(0) is not None]
        errors.extend(repr(e) for e in failed[:1])
    finally:
        producer.close(5)
    acked = sent - len(failed)
    return {
        "sent": sent,
        "acked": acked,
        "errors": len(failed),
        "first_error": errors[0] if errors else "",
        "bytes": acked * args.size,
        "seconds": seconds,
        "cpu": cpu,
        "tx_requests": -1,
        "tx_bytes": -1,
    }


async def _headwater_consume(args: argparse.Namespace) -> dict[str, Any]:
    client = _headwater()
    async with client.Consumer(args.bootstrap) as consumer:
        # follow(): what an application uses; it fetches the next round while this one is counted
        sub = consumer.follow(args.topic, start="earliest", max_wait_ms=100, max_bytes=args.fetch_bytes)
        await sub.resolve()  # start positions known (ListOffsets): not part of the measured interval
        clock = _Clock()
        clock.start()
        deadline = time.perf_counter() + args.seconds
        while clock.records < args.count and time.perf_counter() < deadline:
            records = await sub.poll()
            if records:
                clock.got(len(records), sum(len(r.value or b"") for r in records))
        sub.close()
    return clock.result()


async def _headwater_latency_consumer(args: argparse.Namespace) -> dict[str, Any]:
    client = _headwater()
    async with client.Consumer(args.bootstrap) as consumer:
        positions = {p: await consumer.latest_offset(args.topic, p) for p in await consumer.partitions_for(args.topic)}
        print("READY", flush=True)
        samples: list[int] = []
        deadline = time.perf_counter() + args.seconds
        while len(samples) < args.count and time.perf_counter() < deadline:
            got = await consumer.fetch_many([(args.topic, p, o) for p, o in positions.items()], max_wait_ms=100)
            for (_, p), result in got.items():
                now = time.monotonic_ns()
                for r in result.records:
                    samples.append(now - _STAMP.unpack_from(r.value or bytes(8))[0])
                if result.records:
                    positions[p] = result.records[-1].offset + 1
    return _latencies(samples)


async def _headwater_latency_producer(args: argparse.Namespace) -> dict[str, Any]:
    client = _headwater()
    pad = _value(max(0, args.size - _STAMP.size))
    async with client.Producer(args.bootstrap, acks=args.acks, linger_ms=0) as producer:
        await producer.cluster.topic_metadata(args.topic)
        sent = 0
        start = time.perf_counter()
        while sent < args.count:
            due = min(args.count, int((time.perf_counter() - start) * args.rate) + 1)
            while sent < due:
                await producer.send(args.topic, _STAMP.pack(time.monotonic_ns()) + pad)
                sent += 1
            # uvloop's timers count whole milliseconds: a 0.5 ms sleep returns at once, and the
            # generator spun a core that the broker and the consumer need (its tail latency was
            # ours, not the client's). 1 ms: ~10 records per wake-up at 10,000/s.
            await asyncio.sleep(0.001)
        await producer.flush(30)
    return {"sent": sent, "errors": 0, "seconds": time.perf_counter() - start}


def _run_async(coro_fn: Any) -> Any:
    def run(args: argparse.Namespace) -> dict[str, Any]:
        import uvloop

        return dict(uvloop.run(coro_fn(args)))

    return run


COMMANDS = {
    "confluent-produce": confluent_produce,
    "confluent-consume": confluent_consume,
    "confluent-latency-consumer": confluent_latency_consumer,
    "confluent-latency-producer": confluent_latency_producer,
    "headwater-produce": _run_async(_headwater_produce),
    "headwater-sync-produce": headwater_sync_produce,
    "headwater-consume": _run_async(_headwater_consume),
    "headwater-latency-consumer": _run_async(_headwater_latency_consumer),
    "headwater-latency-producer": _run_async(_headwater_latency_producer),
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m headwater.bench.loadgen")
    parser.add_argument("command", choices=sorted(COMMANDS))
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--count", type=int, required=True, help="records to send or receive")
    parser.add_argument("--seconds", type=float, default=60.0, help="stop after this long")
    parser.add_argument("--size", type=int, default=100, help="record value bytes")
    parser.add_argument("--acks", default="1")
    parser.add_argument("--rate", type=float, default=10_000, help="records/s (latency producer)")
    parser.add_argument("--batch-size", type=int, default=None, help="headwater producer batch_size")
    parser.add_argument("--linger-ms", type=float, default=0.0, help="headwater producer linger_ms")
    parser.add_argument("--max-request-size", type=int, default=1048576, help="headwater producer")
    parser.add_argument("--mode", choices=["plain", "audit", "headers"], default="plain", help="headwater-sync-produce")
    parser.add_argument("--fetch-bytes", type=int, default=1048576, help="headwater consumer, per partition")
    parser.add_argument("-X", action="append", default=[], metavar="KEY=VALUE", help="librdkafka property")
    args = parser.parse_args(argv)
    result = COMMANDS[args.command](args)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
