"""Log compaction in a real broker, through stock clients: keyed updates and tombstones, the cleaner
runs, a consumer reading from the start sees the latest value of every key and the tombstones until
delete.retention.ms; then a kill -9 while the cleaner works, and the log still reads correctly."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.harness.broker import BrokerProcess
from tests.harness.records import latest_by_key, read_from_start

KEYS = 20
DELETE_RETENTION_MS = 3000
TIMEOUT_S = 60.0


def _create(bootstrap: str, topic: str) -> None:
    configs = {
        "cleanup.policy": "compact",
        "segment.bytes": "4096",  # many small segments: only the active one is never cleaned
        "min.cleanable.dirty.ratio": "0.01",
        "delete.retention.ms": str(DELETE_RETENTION_MS),
    }
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config=configs)])[topic].result(30)


def _produce(bootstrap: str, topic: str, records: list[tuple[str, str | None]]) -> None:
    # small batches: a produced record set may not exceed the topic's segment.bytes
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 2000, "enable.idempotence": False})
    failed: list[object] = []
    for key, value in records:
        value_bytes = None if value is None else value.encode()
        p.produce(topic, key=key.encode(), value=value_bytes, on_delivery=lambda e, _m: e and failed.append(e))
        p.poll(0)
    assert p.flush(30) == 0 and not failed, failed


def _wait_for_log(b: BrokerProcess, text: str, after: int) -> int:
    """Until the broker's output has ``text`` more than ``after`` times; returns the new count."""
    deadline = time.monotonic() + TIMEOUT_S
    while (n := b.output.read_text().count(text)) <= after:
        assert time.monotonic() < deadline, f"the broker never logged {text!r}"
        time.sleep(0.05)
    return n


def test_compaction_keeps_latest_values_and_tombstones_for_delete_retention(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    b = broker_factory(0, log_cleaner_backoff_ms=200, prometheus_port="auto")
    topic = "profiles"
    _create(b.bootstrap, topic)
    updates = [(f"user-{k}", f"v{r}-{k}") for r in range(10) for k in range(KEYS)]
    deleted = [f"user-{k}" for k in range(5)]
    filler = [(f"filler-{i}", "x" * 40) for i in range(120)]  # rolls the tombstones out of the active segment
    _produce(b.bootstrap, topic, updates + [(k, None) for k in deleted] + filler)
    produced = len(updates) + len(deleted) + len(filler)
    cleanings = _wait_for_log(b, f"cleaned {topic}-0", 0)

    records = read_from_start(b.bootstrap, topic)
    latest = latest_by_key(records)
    assert len(records) < produced  # superseded values are gone
    assert all(latest[f"user-{k}"] == f"v9-{k}" for k in range(5, KEYS))
    assert all(latest[k] is None for k in deleted)  # the deletions are still visible
    offsets = [o for o, _, _ in records]
    assert offsets == sorted(set(offsets))
    assert b.metric("kafka_log_logcleaner_cleanings_total") >= 1
    assert b.metric("kafka_log_logcleaner_recordsremoved_total") >= produced - len(records)

    # past delete.retention.ms, the next cleaning (new writes make the log dirty again) drops the
    # tombstones that already went through a cleaning
    time.sleep(DELETE_RETENTION_MS / 1000)  # the retention itself, not a wait for a condition
    _produce(b.bootstrap, topic, [(f"later-{i}", "y" * 40) for i in range(120)])
    deadline = time.monotonic() + TIMEOUT_S
    while any(k in deleted for _, k, _ in read_from_start(b.bootstrap, topic)):
        assert time.monotonic() < deadline, "tombstones outlived delete.retention.ms"
        cleanings = _wait_for_log(b, f"cleaned {topic}-0", cleanings)
    latest = latest_by_key(read_from_start(b.bootstrap, topic))
    assert all(latest[f"user-{k}"] == f"v9-{k}" for k in range(5, KEYS))


def test_kill9_while_cleaning_leaves_a_log_that_reads_correctly(broker_factory: Callable[..., BrokerProcess]) -> None:
    # the cleaner throttled to 20 KB/s (Kafka's log.cleaner.io.max.bytes.per.second): cleaning the
    # ~130 KB below takes seconds, so a kill -9 right after it starts lands in the middle of it
    b = broker_factory(0, log_cleaner_backoff_ms=200, log_cleaner_enable="false")
    topic = "accounts"
    _create(b.bootstrap, topic)
    _produce(b.bootstrap, topic, [(f"acct-{k}", f"r{r}-{k}") for r in range(150) for k in range(KEYS)])
    _produce(b.bootstrap, topic, [(f"tail-{i}", "z" * 40) for i in range(120)])
    expected = latest_by_key(read_from_start(b.bootstrap, topic))
    b.stop()
    b.properties["log.cleaner.enable"] = "true"
    b.properties["log.cleaner.io.max.bytes.per.second"] = 20000
    b.start()
    _wait_for_log(b, f"cleaning {topic}-0", 0)
    partition_dir = b.log_dir / f"{topic}-0"
    deadline = time.monotonic() + TIMEOUT_S
    while not any(n.endswith(".cleaned") for n in os.listdir(partition_dir)):  # a group being written
        assert time.monotonic() < deadline, "the cleaner never wrote a cleaned segment"
        time.sleep(0.02)
    b.kill9()
    assert b.output.read_text().count(f"cleaned {topic}-0") == 0, "the kill came after the cleaning"
    b.start()
    assert "left by an interrupted cleaning" in b.output.read_text()  # the restart found its files
    records = read_from_start(b.bootstrap, topic)
    assert latest_by_key(records) == expected
    offsets = [o for o, _, _ in records]
    assert offsets == sorted(set(offsets))
    # the cleaner runs again after the restart and finishes
    _wait_for_log(b, f"cleaned {topic}-0", 0)
    records = read_from_start(b.bootstrap, topic)
    assert latest_by_key(records) == expected and len(records) < 150 * KEYS


def test_transactional_compacted_topic_loses_markers_and_aborted_records_and_reads_to_its_end(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    """A compacted topic with transactions, through librdkafka: the first cleaning removes the
    aborted records and the committed ones overwritten by plain records; past delete.retention.ms a
    later cleaning drops the markers of those transactions (Kafka 2.3's rule: no batch of theirs
    left). The producer's newest batch, aborted, stays as an empty header (its sequence) with its
    marker. A read_committed and a read_uncommitted consumer both read to the end through the empty
    header and see the committed and plain records only."""
    from tests.compat.test_transactions import read_all
    from tests.mirror.util import raw_batches

    b = broker_factory(
        0,
        log_cleaner_backoff_ms=200,
        transaction_state_log_num_partitions=1,
        transaction_state_log_replication_factor=1,
        transaction_state_log_min_isr=1,
    )
    topic = "ledger"
    _create(b.bootstrap, topic)
    txn = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "ledger-app", "linger.ms": 0})
    txn.init_transactions(60)

    def transaction(values: list[tuple[str, str]], commit: bool) -> None:
        txn.begin_transaction()
        for k, v in values:
            txn.produce(topic, key=k.encode(), value=v.encode(), partition=0)
        assert txn.flush(30) == 0
        (txn.commit_transaction if commit else txn.abort_transaction)(30)

    transaction([(f"a-{i}", "aborted") for i in range(5)], commit=False)
    transaction([(f"c-{i}", "committed") for i in range(5)], commit=True)
    _produce(b.bootstrap, topic, [(f"c-{i}", "plain") for i in range(5)])  # supersedes the committed ones
    transaction([("last", "aborted")], commit=False)  # the producer's newest batch
    _produce(b.bootstrap, topic, [(f"filler-{i}", "x" * 40) for i in range(120)])  # rolls past the markers

    def markers() -> list[int]:
        return [h.base_offset for h, _ in raw_batches(b.bootstrap, topic, 0) if h.is_control]

    before = markers()
    assert len(before) == 3
    cleanings = _wait_for_log(b, f"cleaned {topic}-0", 0)
    time.sleep(DELETE_RETENTION_MS / 1000)  # the retention itself, not a wait for a condition
    _produce(b.bootstrap, topic, [(f"later-{i}", "y" * 40) for i in range(120)])
    deadline = time.monotonic() + TIMEOUT_S
    while markers() != before[2:]:
        assert time.monotonic() < deadline, f"markers {markers()} of {before} outlived delete.retention.ms"
        cleanings = _wait_for_log(b, f"cleaned {topic}-0", cleanings)
    empty = [h for h, _ in raw_batches(b.bootstrap, topic, 0) if h.records_count == 0]
    assert len(empty) == 1 and empty[0].producer_id >= 0 and empty[0].is_transactional
    want = sorted(["plain"] * 5 + ["x" * 40] * 120 + ["y" * 40] * 120)
    for isolation in ("read_committed", "read_uncommitted"):
        got = sorted(v.decode() for v in read_all(b.bootstrap, topic, 1, isolation))
        assert got == want, isolation
