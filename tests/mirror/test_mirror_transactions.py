"""Transactions stop at the first hop (issue 41): the mirror reads its source read_committed.

A transactional producer (confluent-kafka) writes committed and aborted transactions into a
source topic, interleaved with a plain producer's records; the target must hold exactly the
committed and plain records, in source order, and the mirror's committed offsets must pass the
aborted ranges and the markers. A transaction still open holds the copy at its first offset (the
last stable offset) -- the plain records written after it wait too -- until it commits.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from kazoo.client import KazooClient

from headwater.client.admin import Admin
from headwater.client.raw import READ_COMMITTED, READ_UNCOMMITTED
from headwater.mirror.gaps import reporter_for
from headwater.mirror.metrics import MirrorMetrics
from headwater.mirror.writer import SourceWriter
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


def test_read_uncommitted_copies_every_record_and_the_gap_reporter_resumes_at_the_flows_end(
    cluster_factory: Callable[..., Cluster], tmp_path: Path
) -> None:
    """``isolation.level = read_uncommitted`` (the mirror's default is read_committed): every data
    record of the source is copied -- aborted and still-open transactions' too -- in source order,
    markers left out, and the committed offsets reach the log end while a transaction is open.
    The gap reporter, asked to resume ``latest`` after an offset beyond the log end, resumes at the
    end the flow reads to: the last stable offset under read_committed (the high watermark would
    skip the open transaction's records, copied once it commits), the high watermark under
    read_uncommitted."""
    src = cluster_factory(1, transaction_state_log_num_partitions=3)
    dst = cluster_factory(1)
    create_topic(src, TOPIC, partitions=PARTITIONS, rf=1, min_isr=1)
    plain, txn = write_transactions(src.bootstrap, TOPIC, PARTITIONS)
    stored = {p: stored_log(src.bootstrap, TOPIC, p) for p in range(PARTITIONS)}
    lso = {p: next(o for o, v in stored[p][0] if v.startswith(b"open-")) for p in stored}
    hw = {p: stored[p][0][-1][0] + 1 for p in stored}  # the open transaction's records, and plain ones after it

    async def resumes(isolation: int) -> list[int]:
        async with Admin(src.bootstrap) as admin:
            writer = SourceWriter(admin.cluster, admin)
            try:
                reporter = reporter_for(
                    "dc1",
                    "agg",
                    admin.cluster,
                    writer,
                    MirrorMetrics(),
                    on_data_loss="report",
                    reset_to_latest=True,
                    isolation_level=isolation,
                )
                return [await reporter.out_of_range(TOPIC, p, hw[p] + 1000) for p in range(PARTITIONS)]
            finally:
                await writer.close()

    assert asyncio.run(resumes(READ_COMMITTED)) == [lso[p] for p in range(PARTITIONS)]
    assert asyncio.run(resumes(READ_UNCOMMITTED)) == [hw[p] for p in range(PARTITIONS)]

    zk = KazooClient(hosts=zk_connect(src))
    zk.start()

    def committed(p: int, group: str = "headwater-mirror") -> int:
        path = f"/consumers/{group}/offsets/{TOPIC}/{p}"
        return int(zk.get(path)[0]) if zk.exists(path) else -1

    props = _props(src, dst, **{"dc1->agg.topics": TOPIC, "isolation.level": "read_uncommitted"})
    m = MirrorProcess(tmp_path, "mirror", props).start()
    try:
        wait_for(lambda: all(committed(p) == hw[p] for p in hw), 120, "offsets committed to the high watermark", m)
        got: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
        for p, _, _, v, _, _ in read_topic(dst.bootstrap, TOPIC):
            got[p].append(v or b"")
        assert got == {p: [v for _, v in stored[p][0]] for p in stored}  # every record, aborted and open too
        assert all(
            any(v.startswith(b"abort-") for v in vs) and any(v.startswith(b"open-") for v in vs) for vs in got.values()
        )
        rc = m.stop()
        assert rc == 0, m.log()[-3000:]
        # read_committed with auto.offset.reset = latest starts at the LSO (the open transaction's first
        # offset), not the high watermark: its records are copied once it commits
        latest = {"group.id": "latest-mirror", "auto.offset.reset": "latest"}
        m = MirrorProcess(tmp_path, "latest", _props(src, dst, **{"dc1->agg.topics": TOPIC, **latest})).start()
        wait_for(lambda: all(committed(p, "latest-mirror") >= 0 for p in lso), 120, "the latest mirror's offsets", m)
        assert {p: committed(p, "latest-mirror") for p in lso} == lso
    finally:
        zk.stop()
        zk.close()
        rc = m.stop()
        txn.abort_transaction(60)
        plain.flush(10)
    assert rc == 0, m.log()[-3000:]
