"""A failed log dir (KIP-112, issue 38 item 4) on a real 3-broker cluster under acks=all writers.

Every broker has two log dirs. One dir of the leader of partition 0 fails for real, as Kafka's own
LogDirFailureTest makes it fail: the directory is moved away and a file put in its place, so the
broker's next write there (a checkpoint, a new segment, a new log) meets an I/O error. Then:

- the broker keeps running and serving the partitions of its other dir (still registered, still
  in their ISRs);
- the partitions of the failed dir go offline on it: leadership moves to another replica of the
  ISR and the broker leaves their ISRs (the controller learned it through
  ``/log_dir_event_notification`` and the LeaderAndIsr answers' KAFKA_STORAGE_ERROR);
- DescribeLogDirs reports the dir with KAFKA_STORAGE_ERROR; a Fetch to the broker for one of its
  offline replicas answers KAFKA_STORAGE_ERROR;
- the writers never failed a record, and every record they saw acknowledged is in its partition,
  at its offset;
- restarted with the dir still broken, the broker serves its healthy dir again and does not create
  the failed dir's partitions afresh elsewhere; repaired and restarted, it is in every ISR again.
"""

from __future__ import annotations

import itertools
import os
import threading
from pathlib import Path

from confluent_kafka import Producer

from headwater.client import SyncAdmin
from headwater.protocol.apis import FETCH
from headwater.protocol.errors import ErrorCode
from headwater.testing.wire import request
from headwater.testing.zookeeper import ZooKeeperServer
from tests.cluster.harness import Cluster
from tests.cluster.util import create_topic, read_all

TOPIC = "dirs"
PARTITIONS = 6
_chroots = itertools.count()


class Writers:
    """acks=all producers to every partition until stopped; what was acknowledged, and failures."""

    def __init__(self, bootstrap: str) -> None:
        self.acked: dict[tuple[int, int], bytes] = {}
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "linger.ms": 5,
                "enable.idempotence": False,
                "message.timeout.ms": 120_000,
            }
        )
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _on_delivery(self, err: object, msg: object) -> None:
        with self._lock:
            if err is None:
                self.acked[(msg.partition(), msg.offset())] = msg.value()  # type: ignore[attr-defined]
            else:
                self.failed.append(str(err))

    def _run(self) -> None:
        for i in itertools.count():
            if self._stop.is_set():
                break
            for p in range(PARTITIONS):
                self._producer.produce(TOPIC, value=f"{p}-{i}".encode(), partition=p, on_delivery=self._on_delivery)
            self._producer.poll(0.02)
        self._producer.flush(150)

    def acked_per_partition(self) -> dict[int, int]:
        with self._lock:
            out = dict.fromkeys(range(PARTITIONS), 0)
            for p, _ in self.acked:
                out[p] += 1
            return out

    def __enter__(self) -> Writers:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(180)


def _fetch_error(port: int, topic: str, partition: int) -> int:
    """The partition's error code in a Fetch (v4) sent straight to the broker at ``port``."""
    body = {
        "replica_id": -1,
        "max_wait_ms": 0,
        "min_bytes": 0,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "topics": [
            {
                "topic": topic,
                "partitions": [{"partition": partition, "fetch_offset": 0, "partition_max_bytes": 1 << 20}],
            }
        ],
    }
    response = request("127.0.0.1", port, FETCH, 4, body, timeout=30, client_id="log-dir-test")
    return int(response["responses"][0]["partitions"][0]["error_code"])


def test_a_failed_log_dir_moves_leadership_and_loses_no_acknowledged_write(
    tmp_path: Path, zookeeper: ZooKeeperServer
) -> None:
    c = Cluster(
        tmp_path / "cluster",
        "127.0.0.1",
        zookeeper.port,
        f"/logdirs{next(_chroots)}",
        3,
        replica_high_watermark_checkpoint_interval_ms=300,
    )
    dirs: dict[int, list[Path]] = {}
    for b, broker in c.brokers.items():
        dirs[b] = [tmp_path / f"broker-{b}-dir-a", tmp_path / f"broker-{b}-dir-b"]
        broker.properties["log.dirs"] = ",".join(str(d) for d in dirs[b])
    try:
        c.start()
        create_topic(c, TOPIC, partitions=PARTITIONS, rf=3, min_isr=2)
        victim = int(c.state(TOPIC, 0)["leader"])
        (failed_dir,) = [d for d in dirs[victim] if (d / f"{TOPIC}-0").is_dir()]
        on_failed = {p for p in range(PARTITIONS) if (failed_dir / f"{TOPIC}-{p}").is_dir()}
        healthy = set(range(PARTITIONS)) - on_failed
        assert on_failed and healthy, (on_failed, healthy)

        with Writers(c.bootstrap) as writers:
            c.wait_for(lambda: min(writers.acked_per_partition().values()) >= 20, 60, "writes acknowledged everywhere")
            # the fault: the directory vanishes and a file takes its place (Kafka's LogDirFailureTest)
            os.rename(failed_dir, failed_dir.with_name(failed_dir.name + ".moved"))
            failed_dir.write_text("not a directory\n")
            before = writers.acked_per_partition()

            def moved() -> bool:
                states = {p: c.state(TOPIC, p) for p in on_failed}
                return all(s["leader"] not in (victim, -1) and victim not in s["isr"] for s in states.values())

            c.wait_for(moved, 90, f"leadership and ISR membership of {sorted(on_failed)} to leave broker {victim}")
            assert victim in c.live_ids(), "the broker with the failed log dir stopped"
            c.wait_for(
                lambda: all(victim in c.state(TOPIC, p)["isr"] for p in healthy),
                60,
                f"broker {victim} to stay in the ISRs of its healthy dir's partitions {sorted(healthy)}",
            )
            # the writers go on: every partition takes acks=all writes after the failure
            c.wait_for(
                lambda: all(n >= before[p] + 20 for p, n in writers.acked_per_partition().items()),
                90,
                "acks=all writes to every partition after the failure",
            )

        with SyncAdmin(c.bootstrap) as admin:
            described = admin.describe_log_dirs([victim])[victim]
        assert not isinstance(described, Exception), described
        errors = {Path(d.path): d.error.code if d.error else ErrorCode.NONE for d in described}
        other = next(d for d in dirs[victim] if d != failed_dir)
        assert errors == {failed_dir: ErrorCode.KAFKA_STORAGE_ERROR, other: ErrorCode.NONE}
        for p in sorted(on_failed):
            assert _fetch_error(c.brokers[victim].port, TOPIC, p) == ErrorCode.KAFKA_STORAGE_ERROR
        assert c.zk.get_children("/log_dir_event_notification") == []  # the controller consumed it

        assert writers.failed == [], writers.failed[:5]
        for p in range(PARTITIONS):
            stored = read_all(c, TOPIC, p)
            acked = {o: v for (q, o), v in writers.acked.items() if q == p}
            missing = {o: v for o, v in acked.items() if stored.get(o) != v}
            assert not missing, (
                f"partition {p}: {len(missing)} acknowledged record(s) lost or changed, e.g. {sorted(missing)[:5]}"
            )

        # restarted with the dir still broken: it starts on its healthy dir, rejoins those ISRs, and
        # does not create the failed dir's partitions afresh elsewhere (their data is in the failed dir)
        c.stop(victim)
        c.restart(victim)
        c.wait_for(
            lambda: all(victim in c.state(TOPIC, p)["isr"] for p in healthy),
            90,
            f"restarted broker {victim} back in the ISRs of {sorted(healthy)}",
        )
        assert all(victim not in c.state(TOPIC, p)["isr"] for p in on_failed)
        assert not any((other / f"{TOPIC}-{p}").exists() for p in on_failed)
        with SyncAdmin(c.bootstrap) as admin:
            described = admin.describe_log_dirs([victim])[victim]
        assert not isinstance(described, Exception), described
        assert {Path(d.path): d.error.code if d.error else ErrorCode.NONE for d in described} == errors

        # repaired (stopped, the dir put back) and started: in every ISR again, caught up from the leaders
        c.stop(victim)
        failed_dir.unlink()
        failed_dir.with_name(failed_dir.name + ".moved").rename(failed_dir)
        c.restart(victim)
        c.wait_for(
            lambda: all(victim in c.state(TOPIC, p)["isr"] for p in range(PARTITIONS)),
            90,
            f"repaired broker {victim} back in every ISR",
        )
    finally:
        c.close()
