"""Review finding 5: a partition added to a source topic mirrored partition for partition does not
switch the topic silently to re-partitioning: the existing partitions keep their numbers and the
fast path, the mismatch is an ERROR, a metric and a /healthz reason, and growing the target topic
resolves it (unit test: real Mirror and Supervisor, fake group, source and target metadata)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from headwater.mirror.mirror import FlowState
from headwater.mirror.plan import TopicPlan
from tests.mirror.fakes import FakeFetcher, FakeGroup, fake_mirror


def test_a_partition_added_at_the_source_is_reported_and_the_mapping_kept(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        group = FakeGroup("m1", {"clicks": 2})
        group.offsets.update({("clicks", p): 0 for p in range(3)})
        m, f = fake_mirror(group, FakeFetcher())
        target_partitions = {"clicks": 2}  # the target topic, as created by the mirror

        async def plan(f: FlowState, topic: str, n: int) -> TopicPlan:
            return TopicPlan(topic, n, target_partitions[topic])

        m._plan_topic = plan  # type: ignore[method-assign]
        await m._rebalance(f)
        assert set(f.copiers) == {("clicks", 0), ("clicks", 1)}
        assert m.health()[0]

        group.topic_partitions["clicks"] = 3  # kafka-topics --alter --partitions 3 at the source
        await m._rebalance(f)
        assert set(f.copiers) == {("clicks", 0), ("clicks", 1)}, "no copier for a partition the target lacks"
        assert all(c.fast_path() for c in f.copiers.values()), "still partition for partition"
        ok, why = m.health()
        assert not ok
        assert "topic clicks partitions: the source has 3 partition(s), the target topic clicks 2" in why
        assert "source partitions 2..2 are NOT mirrored" in why
        mismatch = {"flow": "dc1->agg", "topic": "clicks"}
        assert m.metrics.registry.get_sample_value("headwater_mirror_partition_count_mismatch", mismatch) == 1
        assert any(r.levelno == logging.ERROR and "NOT mirrored" in r.getMessage() for r in caplog.records)
        assert not any("re-partitioned" in r.getMessage() for r in caplog.records)

        target_partitions["clicks"] = 3  # the operator grows the target topic
        await m._rebalance(f)
        assert set(f.copiers) == {("clicks", p) for p in range(3)}
        assert all(c.fast_path() for c in f.copiers.values())
        assert m.health()[0], m.health()[1]
        assert m.metrics.registry.get_sample_value("headwater_mirror_partition_count_mismatch", mismatch) == 0
        await m._shutdown()

    asyncio.run(main())
