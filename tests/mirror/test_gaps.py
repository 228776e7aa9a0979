"""No silent loss, without processes: the gap reporter's decisions and event, heartbeat ages, and the
settings that drive them (the mirror with real clusters: tests/mirror/test_wan.py)."""

from __future__ import annotations

import asyncio
import json

import pytest

from headwater.audit.counter import BadEvent, parse_heartbeat
from headwater.client.audit import AUDIT_TOPIC
from headwater.mirror.config import MirrorConfigError, parse
from headwater.mirror.gaps import DataLossError, Gap, GapReporter
from headwater.mirror.heartbeats import Heartbeat, Heartbeats, decode_heartbeat, heartbeat_record
from headwater.mirror.metrics import MirrorMetrics
from headwater.service.supervisor import FatalError

BASE = {
    "clusters": "dc2, agg",
    "dc2.zookeeper.connect": "zk2:2181",
    "agg.bootstrap.servers": "agg-b1:9092",
    "dc2->agg.enabled": "true",
    "dc2->agg.topics": "orders",
}


class _Source:
    """A source partition's log start and end, and what was published to it."""

    def __init__(self, start: int, end: int) -> None:
        self.start, self.end = start, end
        self.published: list[tuple[str, bytes, bytes]] = []
        self.lost: list[tuple[str, int]] = []

    def reporter(self, on_data_loss: str = "report", reset_to_latest: bool = False) -> GapReporter:
        async def offsets(topic: str, partition: int) -> tuple[int, int]:
            return self.start, self.end

        async def publish(topic: str, key: bytes, value: bytes) -> None:
            self.published.append((topic, key, value))

        return GapReporter(
            "dc2",
            "agg",
            on_data_loss=on_data_loss,
            offsets=offsets,
            publish=publish,
            lost=lambda topic, n: self.lost.append((topic, n)),
            reset_to_latest=reset_to_latest,
            clock=lambda: 1764000000.5,
        )


def test_a_gap_below_the_log_start_is_reported_exactly_and_the_copier_resumes_there(
    caplog: pytest.LogCaptureFixture,
) -> None:
    src = _Source(1500, 1800)
    resume = asyncio.run(src.reporter().out_of_range("orders", 3, 1200))
    assert resume == 1500
    assert src.lost == [("orders", 300)]
    [(topic, key, value)] = src.published
    event = json.loads(value)
    assert topic == AUDIT_TOPIC and key == event["guid"].encode()
    assert event == {
        "type": "gap",
        "guid": event["guid"],
        "tier": "agg",
        "hop": "dc2->agg",
        "datacenter": "dc2",
        "topic": "orders",
        "partition": 3,
        "from_offset": 1200,
        "to_offset": 1500,
        "records": 300,
        "reason": "source retention",
        "detected_ms": 1764000000500,
    }
    assert len(event["guid"]) == 32 and int(event["guid"], 16) >= 0
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert errors and "lost at mirror dc2->agg: source retention, 300 records of orders-3, offsets 1200-1499" in (
        errors[0].getMessage()
    )


def test_the_same_gap_found_again_has_the_same_guid() -> None:
    a = Gap("dc2", "agg", "orders", 3, 1200, 1500, "source retention", 1)
    b = Gap("dc2", "agg", "orders", 3, 1200, 1500, "source retention", 2)
    c = Gap("dc2", "agg", "orders", 3, 1200, 1501, "source retention", 1)
    assert a.guid == b.guid != c.guid


def test_stop_reports_then_stops_the_partition_loudly() -> None:
    src = _Source(1500, 1800)
    with pytest.raises(DataLossError, match="300 records of orders-3") as info:
        asyncio.run(src.reporter("stop").out_of_range("orders", 3, 1200))
    assert isinstance(info.value, FatalError)  # the supervisor does not restart it
    assert len(src.published) == 1 and src.lost == [("orders", 300)]


def test_beyond_the_log_end_or_back_in_range_loses_nothing_nameable() -> None:
    src = _Source(0, 40)  # the topic was re-created: the mirror wanted 500
    assert asyncio.run(src.reporter().out_of_range("orders", 0, 500)) == 0
    assert asyncio.run(src.reporter(reset_to_latest=True).out_of_range("orders", 0, 500)) == 40
    assert asyncio.run(src.reporter().out_of_range("orders", 0, 20)) == 20  # a leader change: same offset again
    assert src.published == [] and src.lost == []


def test_heartbeat_age_is_computed_when_scraped() -> None:
    now = [1000.0]
    metrics = MirrorMetrics()
    hb = Heartbeats(metrics, 1.0, clock=lambda: now[0])
    assert metrics.registry.get_sample_value("headwater_mirror_heartbeat_age_seconds", {"flow": "dc2->agg"}) is None
    hb.acked("dc2->agg", 999_500)
    hb.acked("dc2->agg", 998_000)  # an older batch never moves it back
    assert metrics.registry.get_sample_value("headwater_mirror_heartbeat_age_seconds", {"flow": "dc2->agg"}) == 0.5
    now[0] = 1042.0  # a dead link: nothing acked, the age grows by itself
    assert metrics.registry.get_sample_value("headwater_mirror_heartbeat_age_seconds", {"flow": "dc2->agg"}) == 42.5
    # MM2's Heartbeat: key = two protocol STRINGs, value = INT16 version 0 + INT64 timestamp
    key, value = heartbeat_record("dc2", "agg", 5)
    assert key == b"\x00\x03dc2\x00\x03agg" and value == b"\x00\x00" + (5).to_bytes(8, "big")
    assert decode_heartbeat(key, value) == Heartbeat("dc2", "agg", 5)
    assert parse_heartbeat(value, key) == ("dc2", 5)  # the audit reads it


def test_settings_for_loss_and_heartbeats() -> None:
    c = parse(BASE)
    assert c.on_data_loss == "report" and c.heartbeats_interval_s == 1.0
    assert c.isolation_level == "read_committed" and c.isolation == 1
    c = parse({**BASE, "isolation.level": "read_uncommitted"})
    assert c.isolation_level == "read_uncommitted" and c.isolation == 0 and "isolation.level" not in c.unknown
    assert c.flows[0].matches("heartbeats") and not c.flows[0].matches("clicks")  # mirrored whatever the list says
    c = parse({**BASE, "mirror.on.data.loss": "stop", "emit.heartbeats.interval.seconds": "0.5"})
    assert c.on_data_loss == "stop" and c.heartbeats_interval_s == 0.5
    c = parse({**BASE, "emit.heartbeats.enabled": "false"})
    assert c.heartbeats_interval_s is None and not c.flows[0].matches("heartbeats")
    for change, message in [
        ({"mirror.on.data.loss": "ignore"}, "mirror.on.data.loss: 'ignore' is not report or stop"),
        ({"isolation.level": "committed"}, "isolation.level: 'committed' is not read_committed or read_uncommitted"),
        ({"emit.heartbeats.interval.seconds": "soon"}, "emit.heartbeats.interval.seconds: 'soon' is not a number"),
        ({"emit.heartbeats.interval.seconds": "0"}, "is not between 0.1 and 3600"),
    ]:
        with pytest.raises(MirrorConfigError, match=message):
            parse({**BASE, **change})


def test_stop_fails_only_that_partition_under_the_supervisor_and_report_goes_on() -> None:
    """The real Mirror, Copier and Supervisor (fake group and source): with ``stop`` the partition
    whose offset fell below the log start is failed (not restarted, /healthz 503 with the gap), the
    other partition keeps copying; with ``report`` the copier resumes at the log start."""
    from headwater.client.errors import OffsetOutOfRangeError
    from headwater.client.raw import RawPartition
    from headwater.mirror.mirror import FlowState
    from headwater.mirror.plan import TopicPlan
    from tests.mirror.fakes import FakeFetcher, FakeGroup, fake_mirror, wait_until

    async def answer(tp: tuple[str, int], offset: int) -> RawPartition:
        if tp[1] == 0 and offset < 1500:
            raise OffsetOutOfRangeError(tp[0], tp[1], offset)
        return await FakeFetcher.idle(tp, offset)

    async def main(policy: str) -> tuple[_Source, FakeFetcher, str, str, str]:
        group = FakeGroup("mirror-a", {"orders": 2})
        group.offsets[("orders", 0)] = 1200
        group.offsets[("orders", 1)] = 50
        fetcher = FakeFetcher(answer)
        m, f = fake_mirror(group, fetcher, **{"mirror.on.data.loss": policy})
        src = _Source(1500, 1800)
        f.gaps = src.reporter(policy)

        async def plan(f: FlowState, topic: str, n: int) -> TopicPlan:
            return TopicPlan(topic, n, n)

        m._plan_topic = plan  # type: ignore[method-assign]
        await m._rebalance(f)
        units = [m.supervisor.unit(f.copiers[("orders", p)].unit_name) for p in (0, 1)]
        assert units[0] is not None and units[1] is not None
        if policy == "stop":
            await wait_until(lambda: units[0].state == "failed", "the partition to stop")
        else:
            await wait_until(lambda: (("orders", 0), 1500) in fetcher.calls, "the copier to resume at the log start")
        calls = len(fetcher.calls)
        await wait_until(lambda: len(fetcher.calls) > calls + 3, "the other partition to keep fetching")
        ok, why = m.health()
        state = units[0].state
        for tp in list(f.copiers):
            await m._stop_copier(f, tp, release=True)
        return src, fetcher, state, why, "ok" if ok else "unhealthy"

    src, fetcher, state, why, health = asyncio.run(main("stop"))
    assert state == "failed" and health == "unhealthy"
    assert "orders-0: failed: lost at mirror dc2->agg: source retention, 300 records of orders-0" in why
    assert "mirror.on.data.loss = stop" in why
    assert len(src.published) == 1  # reported once, then stopped: never restarted into a second report
    assert (("orders", 0), 1500) not in fetcher.calls

    src, fetcher, state, why, health = asyncio.run(main("report"))
    assert state == "running" and len(src.published) == 1


def test_the_audit_reads_mm2_heartbeats_and_the_json_of_earlier_mirrors() -> None:

    key, value = heartbeat_record("dc1", "agg", 1_700_000_000_000)
    assert parse_heartbeat(value, key) == ("dc1", 1_700_000_000_000)
    old = json.dumps({"sourceClusterAlias": "dc2", "targetClusterAlias": "agg", "timestamp": 7}).encode()
    assert parse_heartbeat(old, b"dc2->agg") == ("dc2", 7)
    for bad_key, bad_value in (
        (key[:-1], value),  # truncated key
        (key + b"x", value),  # trailing bytes
        (key, b"\xff\xff" + value[2:]),  # negative version
        (key, b"\x00\x00" + (-5).to_bytes(8, "big", signed=True)),  # negative timestamp
    ):
        with pytest.raises(BadEvent):
            parse_heartbeat(bad_value, bad_key)
    with pytest.raises(ValueError):
        decode_heartbeat(key[:-1], value)
