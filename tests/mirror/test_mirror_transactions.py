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

from kazoo.client import KazooClient

from tests.cluster.harness import Cluster
from tests.cluster.util import create_topic
from tests.harness.transactions import committed_view, consumer_view, stored_log, write_transactions
from tests.mirror.test_mirror import _props
from tests.mirror.util import MirrorProcess, read_topic, wait_for, zk_connect

TOPIC = "orders"
PARTITIONS = 2


def test_mirror_copies_committed_and_plain_records_only_and_holds_at_an_open_transaction(
    cluster_factory: Callable[..., Cluster], tmp_path: Path
) -> None:
    src = cluster_factory(1, transaction_state_log_num_partitions=3)
    dst = cluster_factory(1)
    create_topic(src, TOPIC, partitions=PARTITIONS, rf=1, min_isr=1)
    plain, txn = write_transactions(src.bootstrap, TOPIC, PARTITIONS)
    logs = {p: stored_log(src.bootstrap, TOPIC, p)[0] for p in range(PARTITIONS)}
    assert all(any(v.startswith(b"abort-") for _, v in logs[p]) for p in logs)  # aborted data is in the source
    # the open transaction's first offset is the last stable offset: the copy stops there
    lso = {p: next(o for o, v in logs[p] if v.startswith(b"open-")) for p in logs}
    held = {p: committed_view(logs[p], below=lso[p]) for p in logs}

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
        stored = {p: stored_log(src.bootstrap, TOPIC, p) for p in range(PARTITIONS)}
        full = {p: committed_view(stored[p][0]) for p in stored}
        assert all(f"plain-after-open-p{p}".encode() in full[p] for p in full)
        ends = {p: stored[p][1] for p in stored}  # past the last COMMIT marker
        wait_for(lambda: all(committed(p) == ends[p] for p in ends), 120, "offsets committed past every marker", m)
        got = target()
        assert got == full  # exactly the committed and plain records, in source order, once each
        assert not any(v.startswith(b"abort-") for vs in got.values() for v in vs)
        # Headwater's own Consumer at read_committed reads the source the same way (it returned
        # aborted records before: the same rule, headwater.client.raw.committed_batches)
        assert {p: consumer_view(src.bootstrap, TOPIC, p, ends[p]) for p in ends} == full
    finally:
        zk.stop()
        zk.close()
        rc = m.stop()
        plain.flush(10)
    assert rc == 0, m.log()[-3000:]
