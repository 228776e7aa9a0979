"""Two source clusters, one aggregate, two mirror processes, and kill -9 everywhere: nothing lost."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

from headwater.client.partitioner import murmur2, to_positive
from tests.cluster.harness import Cluster
from tests.cluster.util import create_topic
from tests.mirror.util import AckedWriter, MirrorProcess, read_topic, wait_for, zk_connect

TOPIC = "page-views"


class Writer(AckedWriter):
    """librdkafka writing keyed records with headers (acks=all) until stopped; remembers what was acked."""

    poll_s = 0.002
    flush_s = 120.0

    def __init__(self, bootstrap: str, dc: str) -> None:
        super().__init__(
            bootstrap,
            **{
                "partitioner": "murmur2_random",
                "enable.idempotence": False,
                "message.timeout.ms": 60000,
                "topic.metadata.refresh.interval.ms": 1000,
            },
        )
        self.dc = dc

    def write(self, i: int) -> None:
        self.producer.produce(
            TOPIC,
            key=f"member-{i % 50}".encode(),
            value=f"{self.dc}-{i}".encode(),
            headers=[("origin.dc", self.dc.encode()), ("seq", str(i).encode())],
            on_delivery=self._done,
        )


def test_kill9_of_source_leader_target_leader_and_a_mirror_loses_nothing(
    cluster_factory: Callable[..., Cluster], tmp_path: Path
) -> None:
    dc1, dc2, agg = cluster_factory(2), cluster_factory(2), cluster_factory(2)
    for c in (dc1, dc2):
        create_topic(c, TOPIC, partitions=2, rf=2, min_isr=1)
    props = {
        "clusters": "dc1, dc2, agg",
        "dc1.zookeeper.connect": zk_connect(dc1),
        "dc2.zookeeper.connect": zk_connect(dc2),  # bootstrap found through ZooKeeper
        "agg.bootstrap.servers": agg.bootstrap,
        "dc1->agg.enabled": "true",
        "dc2->agg.enabled": "true",
        "dc1->agg.topics": TOPIC,
        "dc2->agg.topics": TOPIC,
        "replication.factor": 2,
        "offset.commit.interval.ms": 1000,
        "fetch.max.wait.ms": 100,
    }
    mirrors = [MirrorProcess(tmp_path, f"mirror{i}", props).start() for i in (1, 2)]
    writers = [Writer(dc1.bootstrap, "dc1"), Writer(dc2.bootstrap, "dc2")]
    for w in writers:
        w.thread.start()
    report: list[str] = []

    def target_count() -> int:
        return len(read_topic(agg.bootstrap, TOPIC))

    def grows(what: str) -> None:
        seen = target_count()
        wait_for(lambda: target_count() >= seen + 200, 120, f"mirroring to go on after {what}", mirrors[0])
        report.append(f"{what}: target {seen} -> {target_count()} records")

    try:
        wait_for(lambda: target_count() >= 500, 120, "the first records in the target", mirrors[0])
        old = int(dc1.state(TOPIC, 0)["leader"])
        dc1.kill9(old)
        dc1.wait_for(lambda: int(dc1.state(TOPIC, 0)["leader"]) not in (old, -1), 60, "a new dc1 leader")
        dc1.restart(old)
        grows(f"kill -9 of dc1 broker {old} (leader of {TOPIC}-0)")
        old = int(agg.state(TOPIC, 0)["leader"])
        agg.kill9(old)
        agg.wait_for(lambda: int(agg.state(TOPIC, 0)["leader"]) not in (old, -1), 60, "a new aggregate leader")
        agg.restart(old)
        grows(f"kill -9 of aggregate broker {old} (leader of {TOPIC}-0)")
        mirrors[1].kill9()
        grows("kill -9 of mirror process 2")
        mirrors[1].start()
        grows("mirror process 2 restarted")
    finally:
        for w in writers:
            w.stop.set()
        for w in writers:
            w.thread.join(180)
    try:
        acked = writers[0].acked | writers[1].acked
        wait_for(
            lambda: acked <= {v for _, _, _, v, _, _ in read_topic(agg.bootstrap, TOPIC)},
            180,
            "every acknowledged source record in the target",
            mirrors[0],
        )
        rows = read_topic(agg.bootstrap, TOPIC)
        for p, _, k, v, headers, _ in rows:
            assert k is not None and v is not None
            assert p == to_positive(murmur2(k)) % 2  # the partition librdkafka chose in the source
            dc, _, seq = v.decode().partition("-")
            assert dict(headers) == {"origin.dc": dc.encode(), "seq": seq.encode()}
        source_total = len(read_topic(dc1.bootstrap, TOPIC)) + len(read_topic(dc2.bootstrap, TOPIC))
        duplicates = len(rows) - source_total
        copies = Counter(v for _, _, _, v, _, _ in rows)
        report.append(
            f"acked {len(acked)}, source holds {source_total}, target holds {len(rows)}: "
            f"{duplicates} duplicate(s) from the mirror crash, {sum(1 for n in copies.values() if n > 1)} value(s) seen twice"
        )
        print("\n".join(report))
        # The new owner of the killed mirror's partitions skips what it had copied past its last
        # commit, and a produce whose answer died with the target leader is looked for before it is
        # sent again: no duplicates, crashes or not.
        assert duplicates == 0, report
    finally:
        for m in mirrors:
            m.stop()
