"""The lab's demo producers (``headwater lab activity``) and pipeline check (``headwater lab check``)
over a real pipeline: two source clusters, a mirror process, the aggregate cluster, the audit service."""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from headwater.client.admin import Admin
from headwater.client.errors import KafkaTimeoutError
from headwater.client.producer import Producer
from headwater.lab.activity import click, member_id, page_view
from headwater.lab.check import CHECK_TOPIC, DatacenterResult, PipelineReport, ensure_check_topic, percentile
from headwater.lab.outage import OutageReport, flow_partitions, owned_partitions
from headwater.testing.cluster import metadata_broker_ids
from headwater.testing.zookeeper import free_port
from tests.cluster.harness import Cluster
from tests.mirror.util import MirrorProcess, wait_for, zk_connect

WINDOW_MS = 2000


def test_demo_events_look_like_activity_data() -> None:
    rng = random.Random(7)
    members = [member_id(rng, 100_000) for _ in range(20_000)]
    assert min(members) >= 1 and max(members) <= 100_000
    # skewed: the 1 % most active ids get far more than 1 % of the events
    assert sum(1 for m in members if m <= 1000) > 0.5 * len(members)
    views = [page_view(rng, m, "dc1", i, 1_700_000_000_000) for i, m in enumerate(members[:500])]
    clicks = [click(rng, m, "dc1", i, 1_700_000_000_000) for i, m in enumerate(members[:500])]
    assert min(map(len, views)) >= 250 and max(map(len, views)) <= 500, (min(map(len, views)), max(map(len, views)))
    assert min(map(len, clicks)) >= 150 and max(map(len, clicks)) <= 300
    event = json.loads(views[0])
    assert event["sent_ms"] == 1_700_000_000_000 and event["datacenter"] == "dc1" and event["member_id"] == members[0]


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile(values, 100) == 100.0
    assert percentile([3.0], 99) == 3.0


def test_the_check_fails_when_a_datacenters_p99_is_above_the_goal() -> None:
    """``make lab-check`` passes ``--p99-goal-ms 1000`` (issue 22's mirror-latency goal): a complete
    pipeline whose p99 is above it is not ok; without a goal the latency judges nothing."""

    def dc(name: str, slowest_ms: float) -> DatacenterResult:
        d = DatacenterResult(name, sent=100, acked=100, arrived=100)
        d.latencies_ms = [100.0] * 98 + [slowest_ms] * 2  # p99: the 99th of 100
        return d

    fast, slow = dc("dc1", 900.0), dc("dc2", 1200.0)
    assert PipelineReport("r", [fast, slow], []).ok  # no goal
    assert PipelineReport("r", [fast], [], p99_goal_ms=1000).ok
    report = PipelineReport("r", [fast, slow], [], p99_goal_ms=1000)
    assert not report.ok
    assert [d["p99_goal_met"] for d in report.as_dict()["datacenters"]] == [True, False]
    assert "p99 1200.0 ms, max 1200.0 ms (goal p99 <= 1000 ms: MISSED)" in report.text(), report.text()
    assert not PipelineReport("r", [DatacenterResult("dc1")], [], p99_goal_ms=1000).ok  # nothing arrived


def test_bad_arguments_get_one_line_and_exit_code_2() -> None:
    for argv in (
        ["check", "--source", "dc1"],
        ["check", "--records", "0"],
        ["check", "--p99-goal-ms", "-1"],
        ["activity", "--datacenter", "dc1", "--bootstrap-server", "x:1", "--rate", "-1"],
        ["outage", "dc3"],
        ["outage", "dc2", "--seconds", "0"],
        ["outage", "dc2", "--source", "dc2"],
        ["outage", "dc2", "--mirror-quota", "0"],
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "headwater.cli.main", "lab", *argv], capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 2, (argv, proc.stderr)
        assert proc.stderr.startswith("headwater lab "), proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_the_outage_drill_reads_the_cut_flows_committed_partitions() -> None:
    samples = [
        ("headwater_mirror_committed_offset", {"flow": "dc2->agg", "topic": "clicks", "partition": "0"}, 41.0),
        ("headwater_mirror_committed_offset", {"flow": "dc2->agg", "topic": "clicks", "partition": "1"}, 7.0),
        ("headwater_mirror_committed_offset", {"flow": "dc1->agg", "topic": "clicks", "partition": "0"}, 99.0),
        ("headwater_mirror_committed_offset", {"flow": "dc22->agg", "topic": "clicks", "partition": "0"}, 5.0),
        ("headwater_mirror_partition_lag", {"flow": "dc2->agg", "topic": "clicks", "partition": "2"}, 3.0),
    ]
    assert flow_partitions(samples, "dc2") == {("clicks", 0): 41, ("clicks", 1): 7}
    assert owned_partitions(samples, "dc2") == {("clicks", 2)}  # a copier not yet committed: waited for
    report = OutageReport("dc2", "blackhole", cut_seconds=60.0, backlog_records=6000, catch_up_seconds=4.0)
    report.caught_up = True
    assert report.production_rate == 100.0 and report.catch_up_rate == 1500.0 and report.catch_up_ratio == 15.0
    assert report.ok and report.as_dict()["catch_up_ratio"] == 15.0
    assert "NOT caught up" not in report.text() and "produce quota" not in report.text()
    report.catch_up_seconds = 30.0  # 2x the production rate: below the goal of 5x
    assert not report.ok and "2.0x the production rate" in report.text()
    report.catch_up_seconds, report.audit_during_cut = 4.0, {"late": 3, "loss": 1}
    assert not report.ok


def test_the_outage_drill_estimates_and_judges_the_catch_up_by_the_mirrors_quota() -> None:
    """A 600-s cut at 200 records/s of 500 B (100 kB/s: a 60 MB backlog) under a 50 kB/s quota on
    each of 3 agg brokers (150 kB/s): by t seconds after the heal the quota lets about 150 kB/s x
    (t + 10 s of burst) through, so the backlog is copied after 390 s; the goal is 80 % of the ratio
    that gives (1.23x), not 5x. A quota at or below the production rate fails the drill whatever the
    catch-up measured: the mirror falls behind again after it."""
    report = OutageReport(
        "dc2",
        "blackhole",
        cut_seconds=600.0,
        backlog_records=120_000,
        mirror_quota=50_000,
        quota_brokers=3,
        record_bytes=500.0,
    )
    assert report.expected_catch_up_seconds == 390.0 and not report.quota_below_production
    assert round(report.goal_ratio, 2) == 1.23
    report.caught_up, report.catch_up_seconds = True, 420.0  # 1.43x the production rate: the quota's pace
    assert report.ok, report.as_dict()
    d = report.as_dict()
    assert d["expected_catch_up_seconds"] == 390.0 and d["catch_up_goal_ratio"] == 1.23 and d["quota_brokers"] == 3
    assert "expected catch-up 390.0 s" in report.text() and "NOT caught up" not in report.text()
    report.catch_up_seconds = 1900.0  # well below what the quota allows: something else held it
    assert not report.ok
    report.quota_brokers, report.catch_up_seconds = 2, 600.0  # 100 kB/s: no faster than production
    assert report.quota_below_production and not report.ok and report.as_dict()["quota_below_production_rate"]
    assert "the quota is at or below the production rate" in report.text()
    unbounded = OutageReport("dc2", "blackhole", cut_seconds=600.0, backlog_records=120_000, record_bytes=500.0)
    assert unbounded.expected_catch_up_seconds is None and unbounded.goal_ratio == 5.0


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def test_activity_and_check_over_two_dcs_a_mirror_and_the_audit(
    cluster_factory: Callable[..., Cluster], tmp_path: Path
) -> None:
    dc1, dc2, agg = cluster_factory(1), cluster_factory(1), cluster_factory(1)
    audit_port = free_port()
    mirror = MirrorProcess(
        tmp_path,
        "mirror",
        {
            "clusters": "dc1, dc2, agg",
            "dc1.zookeeper.connect": zk_connect(dc1),
            "dc2.zookeeper.connect": zk_connect(dc2),
            "agg.bootstrap.servers": agg.bootstrap,
            "dc1->agg.enabled": "true",
            "dc2->agg.enabled": "true",
            "fetch.max.wait.ms": 100,
            "offset.commit.interval.ms": 500,
        },
    ).start()
    audit = MirrorProcess(
        tmp_path,
        "audit",
        {
            "clusters": "dc1, dc2, agg",
            "dc1.bootstrap.servers": dc1.bootstrap,
            "dc2.bootstrap.servers": dc2.bootstrap,
            "agg.bootstrap.servers": agg.bootstrap,
            "audit.topics": "page-views, clicks",
            "window.ms": WINDOW_MS,
            "grace.ms": 8000,
            "store": f"sqlite:///{tmp_path / 'audit.db'}",
            "http.host": "127.0.0.1",
            "http.port": audit_port,
            "fetch.max.wait.ms": 100,
        },
        command=("audit", "serve"),
    ).start()
    activity = {
        dc: subprocess.Popen(
            [
                sys.executable,
                "-m",
                "headwater.cli.main",
                "lab",
                "activity",
                "--datacenter",
                dc,
                "--bootstrap-server",
                c.bootstrap,
                "--rate",
                "40",
                "--window-ms",
                str(WINDOW_MS),
                "--report-every",
                "2",
                "--health-file",
                str(tmp_path / f"{dc}.ok"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for dc, c in (("dc1", dc1), ("dc2", dc2))
    }
    try:
        for dc in activity:
            wait_for(lambda dc=dc: (tmp_path / f"{dc}.ok").exists(), 90, f"{dc}'s activity to be acknowledged")
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "headwater.cli.main",
                "lab",
                "check",
                "--json",
                "--source",
                f"dc1={dc1.bootstrap}",
                "--source",
                f"dc2={dc2.bootstrap}",
                "--aggregate",
                agg.bootstrap,
                "--audit-url",
                "",
                "--records",
                "100",
                "--rate",
                "50",
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr + mirror.log()[-3000:]
        report = json.loads(proc.stdout)
        assert report["ok"]
        for d in report["datacenters"]:
            assert (d["sent"], d["acknowledged"], d["arrived"], d["duplicates"]) == (100, 100, 100, 0), d
            lat = d["latency_ms"]
            assert 0 < lat["p50"] <= lat["p99"] <= lat["max"], lat
        assert "making sure lab-check exists" in proc.stderr  # progress goes to stderr

        # The audit service balances the demo traffic: every closed window 100 % at every tier.
        def balanced() -> bool:
            rows = [
                r
                for t in ("page-views", "clicks")
                for r in _get(f"http://127.0.0.1:{audit_port}/api/v1/completeness?topic={t}")["rows"]
            ]
            closed = [r for r in rows if r["status"] != "open" and not r.get("pending")]
            tiers = {(r["topic"], r["tier"]) for r in closed}
            return {("page-views", t) for t in ("producer", "dc1", "dc2", "agg")} <= tiers and all(
                r["status"] in ("complete", "late") for r in closed
            )

        wait_for(balanced, 120, "closed windows of the demo traffic, balanced", audit)
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "headwater.cli.main",
                "lab",
                "check",
                "--source",
                f"dc1={dc1.bootstrap}",
                "--source",
                f"dc2={dc2.bootstrap}",
                "--aggregate",
                agg.bootstrap,
                "--audit-url",
                f"http://127.0.0.1:{audit_port}",
                "--records",
                "20",
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "dc1 -> aggregate: 20/20" in proc.stdout and "dc2 -> aggregate: 20/20" in proc.stdout, proc.stdout
        assert "audit page-views window" in proc.stdout and "complete" in proc.stdout, proc.stdout
    finally:
        for p in activity.values():
            p.terminate()
        outputs = {dc: p.communicate(timeout=60)[0] for dc, p in activity.items()}
        mirror.stop()
        audit.stop()
    for dc, p in activity.items():
        assert p.returncode == 0, outputs[dc]
        assert "acknowledged" in outputs[dc] and f"{dc}: stopped after" in outputs[dc], outputs[dc]


def test_the_check_topic_gets_the_replicas_its_acks_all_writes_need(cluster_factory: Callable[..., Cluster]) -> None:
    """Issue 40: a lab started while one broker of three was registered got a lab-check of one
    replica from the check (it took as many replicas as it saw brokers); with min.insync.replicas 2
    the leader refused every acks=all check record with NOT_ENOUGH_REPLICAS, in every later lab that
    kept the volumes. The check waits for enough brokers instead, and remakes such a topic."""
    c = cluster_factory(3, min_insync_replicas=2)
    c.stop(2)
    c.stop(3)
    c.wait_for(lambda: metadata_broker_ids("127.0.0.1", c.brokers[1].port) == {1}, 60, "broker 1 to list itself alone")
    messages: list[str] = []
    with pytest.raises(KafkaTimeoutError, match="fewer than the 2 replicas"):
        asyncio.run(ensure_check_topic(c.brokers[1].bootstrap, timeout=3, progress=messages.append))
    assert any("waiting for 2 brokers" in m for m in messages), messages

    async def topic_replicas() -> list[tuple[int, ...]]:
        async with Admin(c.brokers[1].bootstrap) as admin:
            if CHECK_TOPIC not in await admin.list_topics():
                return []
            (d,) = await admin.describe_topics([CHECK_TOPIC])
            return [p.replicas for p in d.partitions]

    assert asyncio.run(topic_replicas()) == []  # none made with too few replicas

    async def make_it_as_the_old_check_did() -> None:
        async with Admin(c.brokers[1].bootstrap) as admin:
            await admin.create_topic(CHECK_TOPIC, 3, 1)

    asyncio.run(make_it_as_the_old_check_did())
    c.restart(2)
    c.restart(3)
    c.wait_for(lambda: c.live_ids() == [1, 2, 3], 60, "all three brokers registered")
    messages.clear()
    asyncio.run(ensure_check_topic(c.bootstrap, timeout=120, progress=messages.append))
    assert any("deleting it and making it again" in m for m in messages), messages
    assert [len(r) for r in asyncio.run(topic_replicas())] == [3, 3, 3]

    async def write_acks_all() -> None:
        async with Producer(c.bootstrap, acks="all", linger_ms=0) as producer:
            for p in range(3):
                await producer.send_and_wait(CHECK_TOPIC, b"check", partition=p)

    asyncio.run(write_acks_all())


def test_activity_writes_avro_searches_that_confluents_deserializer_reads(
    cluster_factory: Callable[..., Cluster], tmp_path: Path
) -> None:
    """Issue 44: with the lab's schema registry, dc1's activity writes one record in ten to
    `searches` as Avro in Confluent's wire format, its schema registered under searches-value:
    confluent-kafka's AvroDeserializer, asking the same real Apicurio Registry, reads them back."""
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition
    from confluent_kafka import Consumer as CKConsumer
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from headwater.lab.activity import SEARCHES, run_activity
    from headwater.testing import registry as reg

    why = reg.unavailable()
    if why:
        pytest.skip(why)
    c = cluster_factory(1, auto_create_topics_enable="true")
    with reg.RegistryProcess(tmp_path / "registry") as registry:

        async def run() -> Any:
            stop = asyncio.Event()
            asyncio.get_running_loop().call_later(3.0, stop.set)
            return await run_activity(c.bootstrap, "dc1", 200, stop, seed=44, schema_registry_url=registry.url)

        stats = asyncio.run(run())
        assert stats.failed == 0 and stats.acked[SEARCHES] == stats.sent[SEARCHES] > 0, stats
        client = SchemaRegistryClient({"url": registry.url})
        assert (client.get_latest_version("searches-value").schema_id or 0) >= 1
        deserialize = AvroDeserializer(client)
        # assigned, no group (a one-broker cluster has no offsets topic of RF 3)
        consumer = CKConsumer({"bootstrap.servers": c.bootstrap, "group.id": "t", "enable.auto.commit": False})
        partitions = consumer.list_topics(SEARCHES, timeout=30).topics[SEARCHES].partitions
        consumer.assign([TopicPartition(SEARCHES, p, OFFSET_BEGINNING) for p in partitions])
        got: list[dict[str, Any]] = []
        try:
            deadline = time.monotonic() + 60
            while len(got) < stats.acked[SEARCHES] and time.monotonic() < deadline:
                m = consumer.poll(1.0)
                if m is None or m.error():
                    continue
                value = deserialize(m.value(), SerializationContext(SEARCHES, MessageField.VALUE))
                assert value is not None
                assert str(value["member"]).encode() == m.key(), (value, m.key())
                got.append(value)
        finally:
            consumer.close()
    assert len(got) == stats.acked[SEARCHES]
    assert {v["datacenter"] for v in got} == {"dc1"}
    assert all(isinstance(v["query"], str) and 0 <= v["results"] < 500 for v in got), got[:3]
