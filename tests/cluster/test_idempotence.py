"""librdkafka's idempotent producer through leader kills: every record exactly once, in send order.

The first test does deterministically what the second leaves to timing: a batch acknowledged by
the leader (acks=all, so every follower has it) is sent again, as a retry after a lost answer
would be, to the new leader after the old one was killed: the new leader's producer state, built
as a follower, must recognise it.

A confluent_kafka.Producer with ``enable.idempotence=true`` (acks=all) writes N records, each
value unique, to a 3-partition topic (replication factor 3, min.insync.replicas 2) on a 3-broker
cluster. While each quarter of them is in flight the test kill -9s the leader of one partition
(a different one each time), waits for a new leader, restarts the killed broker and waits for the
full ISR. Retries of batches the dead leader had written and replicated, but not answered, reach
the new leader, which must recognise them from the producer state its follower log built. Then
the whole topic is read back: per partition, the values are exactly the ones sent there, each
once, in the order sent.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import KafkaError, Producer

from headwater.protocol.apis import INIT_PRODUCER_ID
from headwater.protocol.errors import ErrorCode
from tests.broker.test_bad_input import _latest
from tests.broker.test_idempotence import _pbatch, _produce
from tests.broker.wire import Wire
from tests.cluster.harness import Cluster
from tests.cluster.util import create_topic, read_all

N = 20_000
PARTITIONS = 3
KILLS = 6  # two per partition: each kill has some chance to catch a batch replicated but not yet answered
DEADLINE_S = 240  # the whole test stops by itself within this


def test_a_new_leader_recognises_a_retry_of_a_batch_its_predecessor_wrote(
    cluster_factory: Callable[..., Cluster],
) -> None:
    c = cluster_factory(3)
    topic = "idem-failover"
    create_topic(c, topic, partitions=1, rf=3, min_isr=2)
    leader = int(c.state(topic, 0)["leader"])
    w = Wire(c.brokers[leader].bootstrap)
    pid = w.request(INIT_PRODUCER_ID, 1, {"transactional_id": None, "transaction_timeout_ms": 60000})["producer_id"]
    batches = [_pbatch(pid, seq, 3) for seq in range(0, 30, 3)]
    for i, b in enumerate(batches):
        got = _produce(w, topic, b, acks=-1)
        assert got["error_code"] == ErrorCode.NONE and got["base_offset"] == 3 * i, got
    w.close()
    c.kill9(leader)
    c.wait_for(lambda: int(c.state(topic, 0)["leader"]) not in (leader, -1), 60, "a new leader")
    new_leader = int(c.state(topic, 0)["leader"])
    c.wait_for(lambda: c.leader_isr_size(new_leader, topic, 0) is not None, 60, "the new leader to lead")
    w = Wire(c.brokers[new_leader].bootstrap)
    for i in (9, 6):  # the last batch, and an earlier one of the last five
        again = _produce(w, topic, batches[i], acks=-1)
        assert again["error_code"] == ErrorCode.NONE and again["base_offset"] == 3 * i, again
    assert _latest(w, topic) == 30, "a retry was written again"
    nxt = _produce(w, topic, _pbatch(pid, 30), acks=-1)
    assert nxt["error_code"] == ErrorCode.NONE and nxt["base_offset"] == 30
    c.restart(leader)


def test_idempotent_producer_writes_each_record_once_in_order_through_leader_kills(
    cluster_factory: Callable[..., Cluster],
) -> None:
    started = time.monotonic()

    def remaining() -> float:
        left = DEADLINE_S - (time.monotonic() - started)
        assert left > 0, f"the test ran out of its {DEADLINE_S}s"
        return left

    c = cluster_factory(3)
    topic = "idem"
    create_topic(c, topic, partitions=PARTITIONS, rf=3, min_isr=2)

    delivered: list[tuple[int, int, bytes]] = []  # (partition, offset, value) in delivery order
    errors: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, msg: object) -> None:
        if err is not None:
            errors.append(err)
        else:
            delivered.append((msg.partition(), msg.offset(), msg.value()))  # type: ignore[attr-defined]

    p = Producer(
        {
            "bootstrap.servers": c.bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "batch.num.messages": 200,
            "message.timeout.ms": 180_000,
            "topic.metadata.refresh.interval.ms": 1000,
            "retry.backoff.ms": 100,
        }
    )

    def wait_polling(cond: Callable[[], bool], what: str, timeout: float = 90) -> None:
        """Serve the producer's callbacks until ``cond`` holds."""
        deadline = time.monotonic() + min(timeout, remaining())
        while not cond():
            assert not errors, f"delivery failed while waiting for {what}: {errors[:3]}"
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            p.poll(0.05)

    def produce_range(lo: int, hi: int) -> None:
        for i in range(lo, hi):
            while True:
                try:
                    p.produce(topic, value=f"{i:08d}".encode(), partition=i % PARTITIONS, on_delivery=on_delivery)
                    break
                except BufferError:
                    p.poll(0.05)
                    remaining()
            p.poll(0)

    chunk = N // (KILLS + 1)
    for k in range(KILLS + 1):
        lo, hi = k * chunk, N if k == KILLS else (k + 1) * chunk
        already = len(delivered)
        produce_range(lo, hi)
        if k == KILLS:
            break
        # kill the leader of one partition while this chunk is being written to it
        wait_polling(lambda already=already: len(delivered) > already + 50, "the chunk's first deliveries")
        part = k % PARTITIONS
        leader = int(c.state(topic, part)["leader"])
        c.kill9(leader)
        print(f"kill -9 of broker {leader}, leader of {topic}-{part}: {hi - len(delivered)} records in flight")
        wait_polling(
            lambda part=part, leader=leader: int(c.state(topic, part)["leader"]) not in (leader, -1),
            f"a new leader of {topic}-{part}",
        )
        c.restart(leader)
        for q in range(PARTITIONS):
            wait_polling(lambda q=q: len(c.state(topic, q)["isr"]) == 3, f"the full ISR of {topic}-{q}")

    assert p.flush(remaining()) == 0, "records still undelivered at the deadline"
    assert not errors, f"{len(errors)} records failed: {errors[:3]}"
    assert len(delivered) == N

    for q in range(PARTITIONS):
        sent = [f"{i:08d}".encode() for i in range(q, N, PARTITIONS)]
        stored = read_all(c, topic, q, timeout=min(60, remaining()))
        values = [stored[o] for o in sorted(stored)]
        dupes = len(values) - len(set(values))
        assert dupes == 0, f"{topic}-{q}: {dupes} records stored twice"
        missing = set(sent) - set(values)
        assert not missing, f"{topic}-{q}: {len(missing)} records missing, e.g. {sorted(missing)[:3]}"
        assert values == sent, f"{topic}-{q}: records out of send order"
        acked = {o: v for part, o, v in delivered if part == q}
        assert all(stored.get(o) == v for o, v in acked.items()), f"{topic}-{q}: an acknowledged offset differs"
