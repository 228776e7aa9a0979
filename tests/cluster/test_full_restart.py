"""A cluster stopped entirely and started again heals by itself (issue 38, item 0).

Three brokers, ``min.insync.replicas=2``, 50 partitions of replication factor 3, some traffic; then
every broker stops (SIGTERM to all at once, as ``docker compose down`` does) and they start again
in each order: all at once, the former controller first, the former controller last. Within
:data:`HEAL_S` of the last broker's start every ISR is full, in ZooKeeper's partition state and
in the Metadata every broker answers, and an acks=all write to every partition succeeds.

Before the fix a follower told of a leader that had not registered yet logged "leader N has no
known endpoint" and never fetched: partitions stayed below ``min.insync.replicas`` for good.

The suite runs each order twice (``HEADWATER_RESTART_ROUNDS``, default 2); the issue's 5 rounds of
each order are ``HEADWATER_RESTART_ROUNDS=5 pytest tests/cluster/test_full_restart.py``.
"""

from __future__ import annotations

import logging
import os
import socket
import struct
import threading
import time
from collections.abc import Callable

import pytest
from confluent_kafka import KafkaError, Producer

from headwater.protocol.apis import METADATA
from headwater.protocol.errors import ErrorCode
from headwater.protocol.frames import decode_response, encode_request
from tests.cluster.harness import Cluster
from tests.cluster.util import create_topic

log = logging.getLogger(__name__)

TOPIC = "heal"
PARTITIONS = 50
BROKERS = (1, 2, 3)
HEAL_S = 30.0
ROUNDS = int(os.environ.get("HEADWATER_RESTART_ROUNDS", "2"))
ORDERS = ("all_at_once", "controller_first", "controller_last")


def metadata_isrs(port: int) -> dict[int, tuple[int, int, list[int]]]:
    """partition -> (error code, leader, ISR) of TOPIC in the Metadata broker ``port`` answers."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(encode_request(METADATA, 1, 1, "restart-test", {"topics": [{"name": TOPIC}]}))
        head = sock.recv(4, socket.MSG_WAITALL)
        (size,) = struct.unpack(">i", head)
        frame = b""
        while len(frame) < size:
            chunk = sock.recv(size - len(frame))
            if not chunk:
                raise ConnectionError("closed")
            frame += chunk
    _, body = decode_response(METADATA, 1, memoryview(frame))
    (topic,) = body["topics"]
    return {
        p["partition_index"]: (p["error_code"], p["leader_id"], sorted(p["isr_nodes"])) for p in topic["partitions"]
    }


def not_healed(c: Cluster) -> str | None:
    """What is still short (None: every ISR is full in ZooKeeper and in every broker's Metadata)."""
    for p in range(PARTITIONS):
        isr = sorted(c.state(TOPIC, p)["isr"])
        if isr != list(BROKERS):
            return f"ZooKeeper: {TOPIC}-{p} ISR {isr}"
    for b, broker in c.brokers.items():
        seen = metadata_isrs(broker.port)
        if len(seen) != PARTITIONS:
            return f"broker {b}'s Metadata lists {len(seen)} partitions"
        for p, (code, leader, isr) in sorted(seen.items()):
            if code != ErrorCode.NONE or leader not in BROKERS or isr != list(BROKERS):
                return f"broker {b}'s Metadata: {TOPIC}-{p} error {code} leader {leader} ISR {isr}"
    return None


def produce_everywhere(c: Cluster, tag: str, per_partition: int, timeout_s: float) -> list[str]:
    """acks=all writes to every partition; the errors (empty: every write acknowledged)."""
    errors: list[str] = []
    acked = 0

    def on_delivery(err: KafkaError | None, msg: object) -> None:
        nonlocal acked
        if err is None:
            acked += 1
        else:
            errors.append(f"{msg.partition()}: {err}")  # type: ignore[attr-defined]

    producer = Producer(
        {
            "bootstrap.servers": c.bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "enable.idempotence": False,
            "message.timeout.ms": max(1000, int(timeout_s * 1000)),
        }
    )
    for p in range(PARTITIONS):
        for i in range(per_partition):
            producer.produce(TOPIC, value=f"{tag}-{p}-{i}".encode(), partition=p, on_delivery=on_delivery)
    left = producer.flush(timeout_s + 5)
    if left:
        errors.append(f"{left} record(s) still unanswered")
    if acked != PARTITIONS * per_partition and not errors:
        errors.append(f"only {acked} of {PARTITIONS * per_partition} acknowledged")
    return errors


def stop_all(c: Cluster) -> None:
    """SIGTERM to every broker at once (controlled shutdowns race, as with ``docker compose down``)."""
    threads = [threading.Thread(target=c.stop, args=(b,)) for b in BROKERS]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def start_in_order(c: Cluster, order: str, controller: int) -> float:
    """Start every broker in ``order``; returns the monotonic time the last one was started."""
    others = [b for b in BROKERS if b != controller]
    if order == "all_at_once":
        first: list[int] = []
        last = list(BROKERS)
    elif order == "controller_first":
        first, last = [controller], others
    else:
        first, last = others, [controller]
    for b in first:
        c.brokers[b].start(wait=False)
    for b in first:
        c.brokers[b].wait_ready(60)
    for b in last:
        c.brokers[b].start(wait=False)
    started = time.monotonic()
    for b in last:
        c.brokers[b].wait_ready(60)
    return started


@pytest.mark.slow
def test_a_fully_restarted_cluster_heals_in_every_order(cluster_factory: Callable[..., Cluster]) -> None:
    c = cluster_factory(3, min_insync_replicas=2)
    create_topic(c, TOPIC, partitions=PARTITIONS, rf=3, min_isr=2)
    timings: list[tuple[str, float]] = []
    for r in range(ROUNDS):
        for order in ORDERS:
            assert produce_everywhere(c, f"before-{r}-{order}", 5, 30) == []
            controller = c.controller()
            assert controller in BROKERS
            stop_all(c)
            started = start_in_order(c, order, controller)
            deadline = started + HEAL_S
            short: str | None = "not checked"
            while time.monotonic() < deadline:
                try:
                    short = not_healed(c)
                except Exception as e:  # a broker not answering yet
                    short = repr(e)
                if short is None:
                    break
                time.sleep(0.2)
            assert short is None, f"round {r}, {order}: not healed {HEAL_S:.0f} s after the last start: {short}"
            errors = produce_everywhere(c, f"after-{r}-{order}", 1, max(1.0, deadline - time.monotonic()))
            assert errors == [], f"round {r}, {order}: acks=all writes failed: {errors[:5]}"
            healed = time.monotonic() - started
            assert healed <= HEAL_S, f"round {r}, {order}: healed only after {healed:.1f} s"
            timings.append((order, healed))
            log.warning("restart round %d, %s: healed %.1f s after the last start", r, order, healed)
    print("time to heal after the last start:", ", ".join(f"{o} {s:.1f} s" for o, s in timings))
