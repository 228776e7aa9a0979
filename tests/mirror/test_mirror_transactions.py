"""Transactions stop at the first hop (issue 41): the mirror reads its source read_committed.

A transactional producer (confluent-kafka) writes committed and aborted transactions into a
source topic, interleaved with a plain producer's records; the target must hold exactly the
committed and plain records, in source order, and the mirror's committed offsets must pass the
aborted ranges and the markers. A transaction still open holds the copy at its first offset (the
last stable offset) -- the plain records written after it wait too -- until it commits.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Producer
from kazoo.client import KazooClient

from headwater.protocol.records.record import decode_batch
from tests.cluster.harness import Cluster
from tests.cluster.util import create_topic
from tests.mirror.test_mirror import _props
from tests.mirror.util import MirrorProcess, raw_batches, read_topic, wait_for, zk_connect

TOPIC = "orders"
PARTITIONS = 2
ROUNDS = 4  # commit, abort, commit, abort


def source_log(bootstrap: str, partition: int) -> list[tuple[int, bytes]]:
    """(offset, value) of every data record of the partition as stored, markers left out, aborted
    records kept: the log itself, read without the isolation logic under test."""
    out: list[tuple[int, bytes]] = []
    for h, b in raw_batches(bootstrap, TOPIC, partition):
        if not h.is_control:
            out.extend((r.offset, bytes(r.value or b"")) for r in decode_batch(b)[1])
    return out


def log_end(bootstrap: str, partition: int) -> int:
    batches = raw_batches(bootstrap, TOPIC, partition)
    return batches[-1][0].next_offset if batches else 0


def write_transactions(src: Cluster) -> tuple[Producer, Producer]:
    """ROUNDS transactions over both partitions, alternately committed and aborted, each with plain
    records before it and inside it; then one transaction left open with plain records after it."""
    plain = Producer({"bootstrap.servers": src.bootstrap, "acks": "all", "linger.ms": 0})
    txn = Producer({"bootstrap.servers": src.bootstrap, "transactional.id": "orders-app", "linger.ms": 0})
    txn.init_transactions(60)

    def send(p: Producer, value: str) -> None:
        for partition in range(PARTITIONS):
            p.produce(TOPIC, value=f"{value}-p{partition}".encode(), partition=partition)
        assert p.flush(60) == 0

    for r in range(ROUNDS):
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


def test_mirror_copies_committed_and_plain_records_only_and_holds_at_an_open_transaction(
    cluster_factory: Callable[..., Cluster], tmp_path: Path
) -> None:
    src = cluster_factory(1, transaction_state_log_num_partitions=3)
    dst = cluster_factory(1)
    create_topic(src, TOPIC, partitions=PARTITIONS, rf=1, min_isr=1)
    plain, txn = write_transactions(src)
    logs = {p: source_log(src.bootstrap, p) for p in range(PARTITIONS)}
    assert all(any(v.startswith(b"abort-") for _, v in logs[p]) for p in logs)  # aborted data is in the source
    # the open transaction's first offset is the last stable offset: the copy stops there
    lso = {p: next(o for o, v in logs[p] if v.startswith(b"open-")) for p in logs}
    held = {p: [v for o, v in logs[p] if o < lso[p] and not v.startswith(b"abort-")] for p in logs}

    zk = KazooClient(hosts=zk_connect(src))
    zk.start()

    def committed(p: int) -> int:
        path = f"/consumers/headwater-mirror/offsets/{TOPIC}/{p}"
        return int(zk.get(path)[0]) if zk.exists(path) else -1

    def target() -> dict[int, list[bytes]]:
        out: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
        for p, _, _, v, _, _ in read_topic(dst.bootstrap, TOPIC):
            out[p].append(v or b"")
        return out

    m = MirrorProcess(tmp_path, "mirror", _props(src, dst, **{"dc1->agg.topics": TOPIC})).start()
    try:
        # held at the LSO: everything before the open transaction, nothing of it or after it
        wait_for(lambda: all(committed(p) >= lso[p] for p in held), 120, "offsets committed up to the LSO", m)
        assert target() == held
        assert all(committed(p) == lso[p] for p in held)
        txn.commit_transaction(60)
        full = {p: [v for _, v in source_log(src.bootstrap, p) if not v.startswith(b"abort-")] for p in logs}
        assert all(any(v == f"plain-after-open-p{p}".encode() for v in full[p]) for p in full)
        ends = {p: log_end(src.bootstrap, p) for p in range(PARTITIONS)}  # past the last COMMIT marker
        wait_for(lambda: all(committed(p) == ends[p] for p in ends), 120, "offsets committed past every marker", m)
        got = target()
        assert got == full  # exactly the committed and plain records, in source order, once each
        assert not any(v.startswith(b"abort-") for vs in got.values() for v in vs)
    finally:
        zk.stop()
        zk.close()
        rc = m.stop()
        plain.flush(10)
    assert rc == 0, m.log()[-3000:]
