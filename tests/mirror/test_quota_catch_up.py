"""Issue 42, item 4's "done when": a DC cut off and healed with a produce quota on the mirror's client
id at the aggregate cluster. Real brokers (a source DC the mirror reaches through a WAN link,
headwater.lab.link, and the aggregate cluster), a real ``headwater mirror`` process, the quota written
with ``headwater configs``, a local producer (librdkafka, acks=all) writing into agg all along.

A ~2.3 MB backlog written into the DC during a blackhole cut is caught up after the heal at the
quota: the rate read from agg's own high watermark over time, over whole periods of Kafka's Rate
sawtooth (a burst of ``quota.window.num - 1`` windows' worth, a trickle until that burst's sample
expires, again), and at no moment more than the quota times the time plus one burst; every record
arrives exactly once; the local producer's produce p99 during the catch-up stays within 2x of its
p99 with the mirror idle in the same run (the larger of the two idle baselines, during the cut and
after the catch-up: the load of a shared machine drifts within a minute). The audit service (an
auditing producer wrote the backlog; ``grace.ms`` 5 s, a quarter of the catch-up) shows the cut's
windows at agg ``late`` while the quota holds the catch-up, never ``loss``, and every tier's count
equal to the producers' once it is over.

Without the quota the same backlog is copied in ~0.8 s (measured): the rate check fails. At this
size an unthrottled catch-up is too short to move the local p99 much (its worst latencies were
35-50 ms against a 15-20 ms p99): the p99 check guards that the quota's bursts do not hurt the
local producer, it does not show what an unbounded catch-up of the lab's size does.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from headwater.client.audit import SyncAuditingProducer
from headwater.client.sync import SyncConsumer
from headwater.lab.link import LinkSettings, LinkThread
from headwater.testing.cluster import LocalCluster
from headwater.testing.zookeeper import ZooKeeperServer, free_port
from tests.mirror.test_wan import _completeness, _healthy_audit
from tests.mirror.util import MirrorProcess, raw_batches, read_topic, wait_for

pytestmark = pytest.mark.timeout(300)

QUOTA = 100_000  # producer_byte_rate of clients/headwater-mirror on agg, bytes/s
WINDOWS = 6  # agg's quota.window.num (1-s windows): a burst of about (WINDOWS - 1) s of QUOTA after the heal
VALUE = 1000  # bytes per record of the backlog
BACKLOG = 2300  # records: ~2.3 MB, ~0.5 MB of burst then ~18 s held at the quota
FETCH = 32 * 1024  # the mirror's fetch.max.bytes: a produce request of at most ~32 kB (~1/3 s of quota)
LOCAL_INTERVAL_S = 0.01  # the local producer: one 100-byte record every 10 ms, acks=all
AUDIT_WINDOW_MS = 2000
AUDIT_GRACE_MS = 5000  # well under the ~20-s catch-up, above its longest pause (~2.5 s between trickles)

_chroots = itertools.count()


@pytest.fixture
def clusters(tmp_path: Path, zookeeper: ZooKeeperServer) -> Iterator[tuple[LocalCluster, LocalCluster, LinkThread]]:
    n = next(_chroots)
    link = LinkThread("dc1", LinkSettings(delay_ms=2, jitter_ms=0)).start()
    made: list[LocalCluster] = []
    try:
        made.append(
            LocalCluster(
                tmp_path / "dc1",
                1,
                zk_connect=f"{zookeeper.connect}/qcatch{n}-dc1",
                overrides={"num.partitions": 1},
                wan=lambda port: link.add_route("127.0.0.1", port),
            ).start()
        )
        made.append(
            LocalCluster(
                tmp_path / "agg",
                1,
                zk_connect=f"{zookeeper.connect}/qcatch{n}-agg",
                overrides={"num.partitions": 1, "quota.window.num": WINDOWS, "quota.window.size.seconds": 1},
            ).start()
        )
        yield made[0], made[1], link
    finally:
        link.heal()
        for c in made:
            c.stop()
        link.stop()


class LocalProducer:
    """librdkafka writing one small record every LOCAL_INTERVAL_S into agg (acks=all, no linger) on a
    thread; each record's latency (send to acknowledgement) with the time it was sent."""

    def __init__(self, bootstrap: str) -> None:
        self.producer = Producer(
            {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, "client.id": "local-app"}
        )
        self.samples: list[tuple[float, float]] = []  # (sent at, latency s)
        self.errors: list[object] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        i = 0
        next_at = time.monotonic()
        while not self.stop.is_set():
            now = time.monotonic()
            if now >= next_at:
                sent = now

                def done(err: object, _msg: object, sent: float = sent) -> None:
                    if err is not None:
                        self.errors.append(err)
                    else:
                        self.samples.append((sent, time.monotonic() - sent))

                self.producer.produce("local", value=b"%08d" % i + b"." * 92, on_delivery=done)
                i += 1
                next_at += LOCAL_INTERVAL_S
                if next_at < now:  # the thread was held up: do not send a catch-up burst
                    next_at = now + LOCAL_INTERVAL_S
            self.producer.poll(min(0.002, max(0.0, next_at - time.monotonic())))
        self.producer.flush(30)

    def p99(self, start: float, end: float) -> tuple[float, int]:
        lat = sorted(latency for sent, latency in self.samples if start <= sent < end)
        assert len(lat) >= 100, f"only {len(lat)} local records between {start:.1f} and {end:.1f}"
        return lat[min(len(lat) - 1, int(len(lat) * 0.99))], len(lat)


def _create(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)


def _produce_backlog(bootstrap: str, start: int, n: int) -> None:
    """n records of VALUE bytes through an auditing producer of dc1 (its count events on dc1's
    __audit), in batches of at most 16 kB (the mirror copies batches as they are: 1-MB batches would
    make 1-MB produce requests, each throttled for seconds)."""
    with SyncAuditingProducer(
        bootstrap,
        datacenter="dc1",
        host="web-dc1",
        application="shop",
        window_ms=AUDIT_WINDOW_MS,
        acks="all",
        linger_ms=20,
        batch_size=16384,
    ) as p:
        futures = [p.send("clicks", b"%08d" % i + os.urandom(VALUE - 8)) for i in range(start, start + n)]
        for f in futures:
            f.result(60)


def _audit_statuses(port: int, seen: dict[int, set[str]]) -> None:
    """Add what the audit shows now for dc1's windows at the agg tier to ``seen`` (window -> statuses)."""
    for r in _completeness(port, "clicks"):
        if r["tier"] == "agg" and r["datacenter"] == "dc1":
            seen.setdefault(int(r["window_start"]), set()).add(r["status"])


def _held_rate(samples: list[tuple[float, int]], per_record: float) -> tuple[float, list[float]]:
    """The catch-up's rate in bytes/s over whole periods of the quota's sawtooth, and when each
    period began. Kafka's Rate lets a client that was idle send about ``WINDOWS - 1`` windows' worth at
    once; once throttled it trickles until that burst's sample expires, ``WINDOWS`` windows later, and
    bursts again: the rate between two burst starts is the quota (between arbitrary points it is
    not). A burst starts before the largest step of a second that brings more than 1.5x the quota."""
    starts: list[int] = []
    for i, (t, e) in enumerate(samples):
        later = next((e2 for t2, e2 in samples[i:] if t2 >= t + 1.0), None)
        if later is None:
            break
        if (later - e) * per_record > 1.5 * QUOTA and (not starts or t - samples[starts[-1]][0] >= 2.0):
            # the sample just before the largest step within that second
            steps = [j for j in range(i, len(samples) - 1) if samples[j][0] < t + 1.0]
            starts.append(max(steps, key=lambda j: samples[j + 1][1] - samples[j][1]))
    assert len(starts) >= 2 and samples[starts[-1]][0] - samples[starts[0]][0] >= 8, (starts, samples)
    (t0, e0), (t1, e1) = samples[starts[0]], samples[starts[-1]]
    return (e1 - e0) * per_record / (t1 - t0), [samples[i][0] for i in starts]


def test_a_healed_cut_catches_up_at_the_mirrors_quota_and_agg_local_producer_keeps_its_p99(
    clusters: tuple[LocalCluster, LocalCluster, LinkThread], tmp_path: Path
) -> None:
    dc1, agg, link = clusters
    _create(dc1.bootstrap, "clicks")
    _create(agg.bootstrap, "local")
    subprocess.run(
        [
            *(sys.executable, "-m", "headwater.cli.main", "configs", "--zookeeper", agg.zk_connect, "--alter"),
            *("--entity-type", "clients", "--entity-name", "headwater-mirror"),
            *("--add-config", f"producer_byte_rate={QUOTA}"),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    mirror = MirrorProcess(
        tmp_path,
        "mirror",
        {
            "clusters": "dc1, agg",
            "dc1.zookeeper.connect": dc1.zk_connect,
            "dc1.bootstrap.servers": dc1.wan_bootstrap,  # through the link
            "agg.bootstrap.servers": agg.bootstrap,
            "dc1->agg.enabled": "true",
            "dc1->agg.topics": "clicks",
            "replication.factor": 1,
            "offset.commit.interval.ms": 500,
            "fetch.max.wait.ms": 100,
            "fetch.max.bytes": FETCH,
            "metrics.port": free_port(),
            "metrics.host": "127.0.0.1",
            "emit.heartbeats.interval.seconds": 1,
        },
    ).start()
    audit_port = free_port()
    audit = MirrorProcess(
        tmp_path,
        "audit",
        {
            "clusters": "dc1, agg",
            "aggregate.clusters": "agg",
            "dc1.bootstrap.servers": dc1.bootstrap,  # direct: only the mirror crosses the link
            "agg.bootstrap.servers": agg.bootstrap,
            "audit.topics": "clicks",
            "window.ms": AUDIT_WINDOW_MS,
            "grace.ms": AUDIT_GRACE_MS,
            "store": f"sqlite:///{tmp_path / 'audit.db'}",
            "http.host": "127.0.0.1",
            "http.port": audit_port,
            "fetch.max.wait.ms": 100,
        },
        command=("audit", "serve"),
    ).start()
    seen: dict[int, set[str]] = {}  # dc1's windows at agg -> every status the audit showed
    during: dict[int, set[str]] = {}  # the same, polled during the catch-up
    final: list[dict[str, Any]] = []  # the audit's rows once every window closed
    local = LocalProducer(agg.bootstrap)
    report: list[str] = []
    with SyncConsumer(agg.bootstrap, client_id="test-watermarks") as watcher:

        def agg_end() -> int:
            try:
                return int(watcher.offsets_before("clicks", 0, -1, 1)[0])
            except Exception:
                return 0

        try:
            wait_for(lambda: _healthy_audit(audit_port), 90, "the audit service to answer /healthz", audit)
            _produce_backlog(dc1.bootstrap, 0, 20)  # the flow is up before the cut

            def a_complete_window() -> bool:
                _audit_statuses(audit_port, seen)
                return any("complete" in st for st in seen.values())

            wait_for(lambda: agg_end() == 20, 90, "the first 20 records in agg", mirror)
            wait_for(a_complete_window, 90, "a complete window of dc1 at agg (heartbeats flowing)", audit)
            local.thread.start()
            link.cut("blackhole")
            cut_ms = int(time.time() * 1000)
            _produce_backlog(dc1.bootstrap, 20, BACKLOG)
            # the mirror idle (cut off): the local producer's baseline, once the backlog's writing is over
            base_from = time.monotonic()
            wait_for(
                lambda: sum(1 for sent, _ in local.samples if sent >= base_from) >= 600,
                60,
                "600 local records acknowledged with the mirror idle",
            )
            base_p99, base_n = local.p99(base_from, time.monotonic())
            assert agg_end() == 20, "records crossed the cut link"
            link.heal()
            healed = time.monotonic()
            samples: list[tuple[float, int]] = []  # (time, agg's high watermark)
            deadline = healed + 120
            next_audit = healed
            while (end := agg_end()) < 20 + BACKLOG:
                samples.append((time.monotonic(), end))
                assert time.monotonic() < deadline, f"catch-up not done 120 s after the heal: {end}"
                if time.monotonic() >= next_audit:  # what the audit shows during the catch-up
                    _audit_statuses(audit_port, during)
                    next_audit += 1.0
                time.sleep(0.25)
            samples.append((time.monotonic(), end))
            caught_up = time.monotonic()
            # the mirror idle again: the local producer's second baseline (the machine's load drifts)
            after_from = caught_up + 0.5
            wait_for(
                lambda: sum(1 for sent, _ in local.samples if sent >= after_from) >= 600,
                60,
                "600 local records acknowledged after the catch-up",
            )
            after_to = time.monotonic()

            def settled() -> bool:
                _audit_statuses(audit_port, seen)
                rows = _completeness(audit_port, "clicks")
                final[:] = rows
                return sum(r["count"] for r in rows if r["tier"] == "producer") == 20 + BACKLOG and not any(
                    r["status"] in ("open", "late") and r["pending"] for r in rows
                )

            wait_for(settled, 90, "every window of the cut closed with the producers' full count", audit)
        finally:
            link.heal()
            local.stop.set()
            local.thread.join(60)
            audit_log = audit.log()
            audit.stop()
    try:
        assert not local.errors, local.errors[:3]
        # exactly what the DC holds, once each
        values = [v for _, _, _, v, _, _ in read_topic(agg.bootstrap, "clicks")]
        source = [v for _, _, _, v, _, _ in read_topic(dc1.bootstrap, "clicks")]
        assert len(values) == len(set(values)) == len(source) == 20 + BACKLOG
        assert sorted(values) == sorted(source)  # type: ignore[type-var]
        # bytes per record as produced (the batches the mirror copies as they are)
        batches = raw_batches(dc1.bootstrap, "clicks", 0)
        per_record = sum(len(b) for _, b in batches) / sum(h.next_offset - h.base_offset for h, _ in batches)
        first = next(t for t, e in samples if e > 20)
        rate, starts = _held_rate(samples, per_record)
        ahead = max(
            (e - 20) * per_record - (QUOTA * (t - first + WINDOWS - 1) + FETCH) for t, e in samples if t >= first
        )
        held_p99, held_n = local.p99(first, caught_up)
        after_p99, after_n = local.p99(after_from, after_to)
        idle_p99 = max(base_p99, after_p99)
        report.append(
            f"backlog {BACKLOG} records ({per_record:.0f} B each as stored), caught up {caught_up - healed:.1f} s"
            f" after the heal (first record {first - healed:.1f} s); bursts at"
            f" {[round(t - healed, 1) for t in starts]} s; held at {rate / 1000:.1f} kB/s between the first and"
            f" the last (quota {QUOTA / 1000:.0f} kB/s: {rate / QUOTA:.2f}x); most ahead of quota x time +"
            f" burst: {ahead / 1000:.0f} kB; local p99 with the mirror idle {base_p99 * 1000:.1f} ms ({base_n})"
            f" before, {after_p99 * 1000:.1f} ms ({after_n}) after; during the catch-up"
            f" {held_p99 * 1000:.1f} ms ({held_n}): {held_p99 / idle_p99:.2f}x"
        )
        # the audit: the cut's windows late during the catch-up the quota held, never loss; then balanced
        cut = {w: st for w, st in during.items() if w >= cut_ms - AUDIT_WINDOW_MS}
        closed = {(r["tier"], r["status"]) for r in final}
        report.append(
            f"audit during the catch-up: {len(cut)} window(s) of the cut at agg, statuses"
            f" {sorted(set().union(*cut.values())) if cut else []}; closed {sorted(closed)}"
        )
        print("\n".join(report))
        if os.environ.get("HEADWATER_QUOTA_TIMELINE"):
            print([(round(t - healed, 2), e) for t, e in samples])
        assert 0.8 * QUOTA <= rate <= 1.2 * QUOTA, report
        assert ahead <= 0.15 * QUOTA * (caught_up - first + WINDOWS - 1), report
        assert held_p99 <= 2 * idle_p99, report
        assert cut and any("late" in st for st in cut.values()), during
        assert not any(st & {"loss", "duplicates"} for st in (*seen.values(), *during.values())), (seen, during)
        assert "AUDIT LOSS" not in audit_log
        assert {s for _, s in closed} <= {"complete", "late"}, final  # late: balanced after its grace
        for tier in ("producer", "dc1", "agg"):
            assert sum(r["count"] for r in final if r["tier"] == tier) == 20 + BACKLOG, (tier, final)
    finally:
        assert mirror.stop() == 0, mirror.log()[-3000:]
