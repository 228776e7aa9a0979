"""Crash safety: kill -9 while producing loses no acknowledged record; garbage is truncated at start-up."""

from __future__ import annotations

import os
import threading
import time

from confluent_kafka import Producer

from tests.compat.test_stock_clients import consume_confluent, create_topic
from tests.harness.broker import BrokerProcess


def test_kill9_while_producing_loses_no_acknowledged_record(broker_factory: object) -> None:
    assert callable(broker_factory)
    broker: BrokerProcess = broker_factory(0, log_flush_interval_messages=1)
    create_topic(broker.bootstrap, "crash")
    acked: dict[int, bytes] = {}
    stop = threading.Event()

    def on_delivery(err: object, msg: object) -> None:
        if err is None:
            acked[msg.offset()] = msg.value()  # type: ignore[attr-defined]

    def produce() -> None:
        p = Producer(
            {
                "bootstrap.servers": broker.bootstrap,
                "acks": "all",
                "linger.ms": 1,
                "message.timeout.ms": 3000,
                "retries": 0,
            }
        )
        i = 0
        while not stop.is_set():
            try:
                p.produce("crash", value=f"record-{i}".encode(), on_delivery=on_delivery)
            except BufferError:
                pass
            p.poll(0.001)
            i += 1
        p.flush(5)

    t = threading.Thread(target=produce)
    t.start()
    deadline = time.monotonic() + 30
    while len(acked) < 2000 and time.monotonic() < deadline:
        time.sleep(0.05)
    broker.kill9()
    stop.set()
    t.join(30)
    assert len(acked) >= 2000, f"only {len(acked)} records acknowledged before the kill"

    broker.start()
    got = consume_confluent(broker.bootstrap, "crash", 0, max(acked) + 1)
    by_offset = {m.offset(): m.value() for m in got}  # type: ignore[attr-defined]
    missing = [o for o in acked if by_offset.get(o) != acked[o]]
    assert not missing, f"{len(missing)} acknowledged records lost or changed, e.g. offsets {missing[:5]}"


def test_garbage_after_the_last_batch_is_truncated_at_startup(broker_factory: object) -> None:
    from tests.compat.test_stock_clients import produce_confluent

    assert callable(broker_factory)
    broker: BrokerProcess = broker_factory(0)
    create_topic(broker.bootstrap, "garbage")
    produce_confluent(broker.bootstrap, "garbage", [{"value": f"v{i}".encode()} for i in range(100)])
    broker.kill9()
    segment = sorted((broker.log_dir / "garbage-0").glob("*.log"))[-1]
    good_size = segment.stat().st_size
    with open(segment, "ab") as f:
        f.write(os.urandom(777))
    broker.start()
    assert segment.stat().st_size == good_size
    got = consume_confluent(broker.bootstrap, "garbage", 0, 100)
    assert [m.value() for m in got] == [f"v{i}".encode() for i in range(100)]  # type: ignore[attr-defined]
    delivered = produce_confluent(broker.bootstrap, "garbage", [{"value": b"after"}])
    assert delivered == [(0, 100)]
    assert "truncat" in broker.tail(50000).lower()
