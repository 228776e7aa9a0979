"""The Java client's transactions against a 3-broker Headwater cluster: kafka-clients 2.3.1 and the
newest 4.x run a consume-transform-produce loop with ``sendOffsetsToTransaction``
(``tests/java/src/txn/TxnApp.java``, the loop of tests/compat/txn_app.py) through kill -9 of its
transaction coordinator; Kafka Streams 3.9.1 with ``processing.guarantee=exactly_once`` counts words
through kill -9 of its own JVM (restarted with a fresh state directory)."""

from __future__ import annotations

import collections
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from headwater.testing import java
from tests.cluster.harness import Cluster
from tests.compat.test_transactions import (
    _await_exit,
    _await_line,
    _coordinator,
    assert_transformed_once,
    create_topics,
    produce_inputs,
)
from tests.harness.records import read_partitions
from tests.java.conftest import CLIENTS, SRC, Member

CLUSTER_OVERRIDES = {
    "transaction_state_log_num_partitions": 3,
    "replica_lag_time_max_ms": 5000,
    "controlled_shutdown_max_retries": 1,
}


@pytest.fixture
def healthy(cluster: Cluster) -> Iterator[Cluster]:
    """The module's cluster with every broker running and every partition in sync, before and after."""
    _heal(cluster)
    yield cluster
    _heal(cluster)


def _heal(cluster: Cluster) -> None:
    for b, proc in cluster.brokers.items():
        if proc.proc is None or proc.proc.poll() is not None:
            cluster.restart(b)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})

    def in_sync() -> bool:
        topics = admin.list_topics(timeout=30).topics.values()
        return all(p.leader >= 0 and len(p.isrs) == 3 for t in topics for p in t.partitions.values())

    cluster.wait_for(in_sync, 120, "every partition back in sync")


def _start(cmd: list[str], out: Path) -> subprocess.Popen[bytes]:
    with open(out, "wb") as f:
        return subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)


@pytest.mark.parametrize("version", sorted(CLIENTS))
def test_java_consume_transform_produce_through_kill9_of_the_transaction_coordinator(
    healthy: Cluster, tmp_path: Path, version: str
) -> None:
    """The Java client's consume-transform-produce loop (round 2 aborted on purpose, round 3 held
    open with its records written while the broker coordinating its transactional id is killed -9):
    a read_committed consumer sees each input's output exactly once, the aborted records were
    written, and the group's committed offsets are the end of the input."""
    cluster = healthy
    name = f"java-{version}"
    src, dst, txn_id, group = f"{name}-in", f"{name}-out", f"{name}-app", f"{name}-group"
    create_topics(cluster.bootstrap, src, dst)
    n = 400
    produce_inputs(cluster.bootstrap, src, n)
    doomed = _coordinator(cluster.bootstrap, txn_id, 1)

    classes = java.compile_sources(sorted((SRC / "txn").glob("*.java")), CLIENTS[version])
    args = [cluster.bootstrap, txn_id, group, src, dst, str(n // 2), str(tmp_path), "3", "2", "150"]
    app = _start(java.java_command("TxnApp", args, CLIENTS[version], extra=[classes]), tmp_path / "app.out")
    try:
        _await_line(app, tmp_path / "app.out", "OPEN 3")
        cluster.kill9(doomed)
        (tmp_path / "go").touch()
        log = _await_exit(app, tmp_path / "app.out")
    finally:
        if app.poll() is None:
            app.kill()
            app.wait(10)
    assert "DONE" in log
    assert _coordinator(cluster.bootstrap, txn_id, 1) != doomed, "the killed coordinator's role moved"
    assert_transformed_once(cluster.bootstrap, src, dst, group, n, aborted_rounds=1)


WORDS = ["alpha", "beta", "gamma", "delta", "epsilon"]


def _lines(start: int, count: int) -> list[str]:
    """Line i names words i%5 .. (i%5 + i%3), so every word gets a different count."""
    return [" ".join(WORDS[(i + j) % 5] for j in range(1 + i % 3)) for i in range(start, start + count)]


def _counts_written(bootstrap: str, topic: str, isolation: str) -> dict[str, list[int]]:
    """Every count the output topic holds per word, in the order written (a word is one key: one
    partition), as a ``isolation`` consumer sees them."""
    out: dict[str, list[int]] = collections.defaultdict(list)
    for msg in read_partitions(bootstrap, topic, range(3), isolation, timeout=60):
        key, value = msg.key(), msg.value()
        assert key is not None and value is not None, f"a record without a key or value at offset {msg.offset()}"
        out[key.decode()].append(int.from_bytes(value, "big", signed=True))
    return dict(out)


def _produce_lines(bootstrap: str, topic: str, text: list[str]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i, line in enumerate(text):
        p.produce(topic, value=line.encode(), partition=i % 3)
    assert p.flush(30) == 0


def _start_streams(cluster: Cluster, state_dir: Path) -> Member:
    classes = java.compile_sources(sorted((SRC / "streams").glob("*.java")), "streams-mm2")
    cmd = java.java_command(
        "WordCount",
        [cluster.bootstrap, "eos-count", "eos-in", "eos-out", str(state_dir), "exactly_once"],
        "streams-mm2",
        extra=[classes],
        heap="512m",
    )
    m = Member(cmd)
    m.wait(lambda e: e.get("state") == "RUNNING", 120, "the streams app RUNNING")
    return m


def test_streams_exactly_once_word_count_through_kill9_of_its_jvm(healthy: Cluster, tmp_path: Path) -> None:
    """Kafka Streams 3.9.1, ``processing.guarantee=exactly_once`` (a producer per task; 3.9.1's
    ``exactly_once_v2`` needs a 2.5 broker), a word count through a repartition topic and a state
    store, every new count written (no record cache). Its JVM is killed -9 as soon as its first
    counts are committed, while it is still counting, and restarted with a fresh state directory
    (the store comes back from its changelog; the new producers fence the old ones and abort their
    open transactions). A read_committed consumer of the output sees every count of every word
    exactly once: 1, 2, ... N, no count repeated or skipped (at_least_once repeats or overshoots
    counts after such a kill)."""
    cluster = healthy
    create_topics(cluster.bootstrap, "eos-in", "eos-out", partitions=3)
    first, second = _lines(0, 1500), _lines(1500, 300)
    _produce_lines(cluster.bootstrap, "eos-in", first)
    app = _start_streams(cluster, tmp_path / "state-1")
    try:
        cluster.wait_for(
            lambda: _counts_written(cluster.bootstrap, "eos-out", "read_committed"), 90, "the first committed counts"
        )
        app.kill9()
        at_kill = _counts_written(cluster.bootstrap, "eos-out", "read_committed")
        app = _start_streams(cluster, tmp_path / "state-2")
        _produce_lines(cluster.bootstrap, "eos-in", second)
        want = collections.Counter(w for t in first + second for w in t.split())
        seen: list[dict[str, list[int]]] = []

        def counted() -> bool:
            seen.append(_counts_written(cluster.bootstrap, "eos-out", "read_committed"))
            return all(seen[-1].get(w, [0])[-1] >= n for w, n in want.items())

        try:
            cluster.wait_for(counted, 120, "every word counted after the kill -9")
        except AssertionError as e:
            last = {w: c[-3:] for s in seen[-1:] for w, c in s.items()}
            raise AssertionError(f"{e}: want {dict(want)}, last counts {last}") from None
    finally:
        app.close()
    final = seen[-1]
    mid = sum(len(v) for v in at_kill.values())
    words_first = sum(len(t.split()) for t in first)
    assert mid < words_first, f"killed mid-run: {mid} of the first {words_first} counts committed at the kill"
    for word, n in want.items():
        assert final[word] == list(range(1, n + 1)), f"{word}: each count once, 1..{n}: {final[word][:50]}..."
    uncommitted = _counts_written(cluster.bootstrap, "eos-out", "read_uncommitted")
    print(
        f"counts committed at the kill: {mid}; aborted counts in the log: "
        f"{sum(len(v) for v in uncommitted.values()) - sum(want.values())}"
    )
