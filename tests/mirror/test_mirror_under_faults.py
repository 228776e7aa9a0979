"""Issue 29's fault test: a compacted topic and a plain topic mirrored by two mirror processes
while the source leader moves, the target leader moves, and one mirror is suspended (SIGSTOP)
past its ZooKeeper session: every record arrives, nothing is reordered within a partition, and
the suspended mirror's /healthz goes unhealthy and comes back (real clusters, real processes)."""

from __future__ import annotations

import asyncio
import re
import signal
import threading
import time
import urllib.error
import urllib.request
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from headwater.client.consumer import Consumer
from headwater.testing.zookeeper import free_port
from tests.cluster.harness import Cluster
from tests.cluster.util import create_topic
from tests.mirror.util import AckedWriter, MirrorProcess, read_topic, wait_for, zk_connect

EVENTS, KV = "events", "kv"
KEYS = 30


def _healthz(port: int, timeout: float = 3.0) -> int | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=timeout) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except OSError:
        return None


def _ends(bootstrap: str, topic: str) -> dict[int, int]:
    """Each partition's high watermark (cheap: no records read)."""

    async def main() -> dict[int, int]:
        async with Consumer(bootstrap) as c:
            return {p: await c.latest_offset(topic, p) for p in await c.partitions_for(topic)}

    return asyncio.run(main())


def _copied(port: int) -> float:
    """The records a mirror process has copied (its headwater_mirror_records_total, every topic)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        lines = r.read().decode().splitlines()
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith("headwater_mirror_records_total{"))


class Writer(AckedWriter):
    """librdkafka writing numbered records to both topics until stopped (acks=all).

    No retries and one request in flight per broker: each record lands in the source at most
    once and in the order written, so a key's values in the source rise strictly and the target
    is held to the same. (With retries, a produce the source leader held past librdkafka's
    request timeout -- while a restarted follower catches up on a loaded machine -- is sent
    again and lands twice: the source itself then holds a key's value twice.)"""

    flush_s = 180.0

    def __init__(self, bootstrap: str) -> None:
        super().__init__(
            bootstrap,
            **{
                "enable.idempotence": False,
                "retries": 0,
                "max.in.flight.requests.per.connection": 1,
                "batch.size": 4096,  # below kv's segment.bytes: a backlog sent as one batch is not refused
                "message.timeout.ms": 120000,
                "topic.metadata.refresh.interval.ms": 1000,
            },
        )

    def write(self, i: int) -> None:
        self.producer.produce(EVENTS, value=f"e{i}".encode(), partition=i % 2, on_delivery=self._done)
        self.producer.produce(KV, key=f"key-{i % KEYS}".encode(), value=f"{i}".encode(), on_delivery=self._done)


def _owned(m: MirrorProcess) -> int:
    """How many partitions the mirror's last rebalance gave it (0 before the first)."""
    found = re.findall(r"this process owns (\d+) partition", m.log())
    return int(found[-1]) if found else 0


def _by_partition(rows: list[tuple[int, int, bytes | None, bytes | None, object, int]]) -> dict[int, list[bytes]]:
    out: dict[int, list[bytes]] = defaultdict(list)
    for p, _, _, v, _, _ in sorted(rows, key=lambda r: (r[0], r[1])):
        assert v is not None
        out[p].append(v)
    return dict(out)


def _differences(source: dict[int, list[bytes]], target: dict[int, list[bytes]]) -> str:
    """Where each partition of the target departs from the source (for a failure's message)."""
    out = []
    for p in sorted(set(source) | set(target)):
        s, t = source.get(p, []), target.get(p, [])
        at = next((i for i, (a, b) in enumerate(zip(s, t, strict=False)) if a != b), min(len(s), len(t)))
        out.append(
            f"{EVENTS}-{p}: {len(s)} in the source, {len(t)} in the target; from index {at}: {s[at : at + 3]} / {t[at : at + 3]}"
        )
    return "\n".join(out)


def test_leader_moves_and_a_suspended_mirror_lose_and_reorder_nothing(
    cluster_factory: Callable[..., Cluster], tmp_path: Path
) -> None:
    src = cluster_factory(2, log_cleaner_backoff_ms=200)
    agg = cluster_factory(2)
    create_topic(src, EVENTS, partitions=2, rf=2, min_isr=1)
    compacted = {"cleanup.policy": "compact", "segment.bytes": "8192", "min.cleanable.dirty.ratio": "0.01"}
    create_topic(src, KV, partitions=1, rf=2, min_isr=1, configs=compacted)
    ports = [free_port(), free_port()]
    props = {
        "clusters": "dc1, agg",
        "dc1.zookeeper.connect": zk_connect(src),
        "agg.bootstrap.servers": agg.bootstrap,
        "dc1->agg.enabled": "true",
        "dc1->agg.topics": f"{EVENTS}, {KV}",
        "replication.factor": 2,
        "offset.commit.interval.ms": 500,
        "fetch.max.wait.ms": 200,
    }
    mirrors = [MirrorProcess(tmp_path, f"mirror{i}", {**props, "metrics.port": ports[i]}).start() for i in (0, 1)]
    writer = Writer(src.bootstrap)
    writer.thread.start()
    report: list[str] = []

    def target_count() -> int:  # records of EVENTS in the target (not compacted: offsets are records)
        return sum(_ends(agg.bootstrap, EVENTS).values())

    def grows(what: str) -> None:
        seen = target_count()
        wait_for(lambda: target_count() >= seen + 300, 120, f"mirroring to go on after {what}", mirrors[0])
        report.append(f"{what}: target {seen} -> {target_count()} records of {EVENTS}")

    try:
        wait_for(lambda: target_count() >= 500, 120, "the first records in the target", mirrors[0])
        for m, port in zip(mirrors, ports, strict=True):
            wait_for(lambda port=port: _healthz(port) == 200, 120, "both mirrors healthy", m)  # type: ignore[misc]

        old = int(src.state(EVENTS, 0)["leader"])
        src.kill9(old)
        src.wait_for(lambda: int(src.state(EVENTS, 0)["leader"]) not in (old, -1), 60, "a new source leader")
        src.restart(old)
        grows(f"source leader {old} of {EVENTS}-0 killed")

        old = int(agg.state(EVENTS, 0)["leader"])
        agg.kill9(old)
        agg.wait_for(lambda: int(agg.state(EVENTS, 0)["leader"]) not in (old, -1), 60, "a new target leader")
        agg.restart(old)
        grows(f"target leader {old} of {EVENTS}-0 killed")

        # The mirror that owns partitions (rendezvous hashing may give one of them none) pauses
        # longer than its ZooKeeper session (10 s): the other one takes its partitions over.
        z = next(i for i in (0, 1) if _owned(mirrors[i]) > 0)
        o = 1 - z
        statuses: list[int | None] = []
        watching = threading.Event()

        def watch() -> None:
            while not watching.is_set():
                statuses.append(_healthz(ports[z], timeout=2.0))
                time.sleep(0.1)

        zombie = mirrors[z].proc
        assert zombie is not None
        before = len(mirrors[o].log())
        zombie.send_signal(signal.SIGSTOP)
        try:
            wait_for(
                # events-0, events-1, kv-0 and heartbeats-0 (MM2-style heartbeats, mirrored like any topic)
                lambda: "among 1 member(s): this process owns 4 partition(s)" in mirrors[o].log()[before:],
                120,
                f"mirror {z}'s session to expire and mirror {o} to take every partition",
                mirrors[o],
            )
            grows(f"mirror {z} suspended past its session")  # the other one carries on with every partition
            watcher = threading.Thread(target=watch, daemon=True)
            watcher.start()
        finally:
            zombie.send_signal(signal.SIGCONT)
            resumed = time.monotonic()
        wait_for(lambda: 503 in statuses, 120, f"mirror {z} unhealthy after SIGCONT", mirrors[z])

        def restarted() -> bool:  # its session lost: every copier stopped, then a rebalance in the new session
            log = mirrors[z].log()
            lost = log.find("ZooKeeper session lost: stopping every copier")
            return lost >= 0 and "rebalanced among" in log[lost:]

        wait_for(restarted, 60, f"mirror {z} to stop its copiers and join again", mirrors[z])
        copied = _copied(ports[z])  # what its new copiers add from here on
        wait_for(lambda: statuses[-1] == 200, 120, f"mirror {z} healthy again", mirrors[z])
        watching.set()
        watcher.join(10)
        # it owns the same partitions again (same member id, same rendezvous hash): it copies again itself
        wait_for(lambda: _copied(ports[z]) > copied, 60, f"mirror {z} to copy again after SIGCONT", mirrors[z])
        report.append(f"mirror {z} copying again {time.monotonic() - resumed:.1f} s after SIGCONT")
        grows(f"mirror {z} resumed")
        report.append(f"mirror {z} /healthz after SIGCONT: {statuses.count(503)} x 503, then 200")
    except BaseException:
        for m in mirrors:  # a failure above: no mirror (a SIGSTOPped one included) outlives the test
            if m.proc is not None and m.proc.poll() is None:
                m.proc.send_signal(signal.SIGCONT)
            m.stop()
        raise
    finally:
        writer.stop.set()
        writer.thread.join(240)

    try:
        # The source is read afresh each time: a produce librdkafka gave up on (its request timed
        # out while the source leader waited for a slow follower) is still appended, and becomes
        # readable when the follower catches up -- after the writer's flush returned.
        compared: list[tuple[dict[int, list[bytes]], dict[int, list[bytes]]]] = []

        def events_copied() -> bool:
            if _ends(src.bootstrap, EVENTS) != _ends(agg.bootstrap, EVENTS):
                return False  # not there yet: no need to read every record
            source, target = (
                _by_partition(read_topic(src.bootstrap, EVENTS)),
                _by_partition(read_topic(agg.bootstrap, EVENTS)),
            )
            compared[:] = [(source, target)]
            return target == source

        try:
            wait_for(events_copied, 180, f"every {EVENTS} record in the target, in source order", mirrors[0])
        except AssertionError as e:
            last = (_by_partition(read_topic(src.bootstrap, EVENTS)), _by_partition(read_topic(agg.bootstrap, EVENTS)))
            raise AssertionError(f"{e}\n{_differences(*last)}") from None
        source_events = compared[-1][0]
        acked_events = {v for v in writer.acked if v.startswith(b"e")}
        assert acked_events <= {v for vs in source_events.values() for v in vs}

        def latest(rows: list[tuple[int, int, bytes | None, bytes | None, object, int]]) -> dict[bytes, bytes]:
            out: dict[bytes, bytes] = {}
            for _, _, k, v, _, _ in sorted(rows, key=lambda r: r[1]):
                assert k is not None and v is not None
                out[k] = v
            return out

        source_kv: dict[bytes, bytes] = {}

        def kv_copied() -> bool:  # the source read afresh too (see above)
            source_kv.clear()
            source_kv.update(latest(read_topic(src.bootstrap, KV)))
            return latest(read_topic(agg.bootstrap, KV)) == source_kv

        wait_for(kv_copied, 180, "every key's latest value", mirrors[1])
        assert len(source_kv) == KEYS
        per_key: dict[bytes, list[int]] = defaultdict(list)
        for _, _, k, v, _, _ in sorted(read_topic(agg.bootstrap, KV), key=lambda r: r[1]):
            assert k is not None and v is not None
            per_key[k].append(int(v))
        for k, values in per_key.items():
            assert values == sorted(set(values)), f"{k!r}: values out of order or twice in the target: {values}"
        report.append(
            f"{sum(map(len, source_events.values()))} {EVENTS} records identical in source and target, per partition "
            f"in order; {len(source_kv)} keys of {KV} at their latest value"
        )
        print("\n".join(report))
        assert "ZooKeeper session expired" in mirrors[z].log()  # the scenario happened as meant
    finally:
        for m in mirrors:
            m.stop()
