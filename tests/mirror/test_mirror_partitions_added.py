"""A partition added to a source topic mirrored partition for partition: the mirror adds it to the
target topic (CreatePartitions, as MM2 does) and mirrors it like the others. While the target
refuses, nothing switches silently to re-partitioning: the existing partitions keep their numbers
and the fast path, the mismatch is an ERROR, a metric and a /healthz reason, and the next
rebalance tries again (unit test: real Mirror and Supervisor; fake group, source and target)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any, cast

import pytest

from headwater.mirror.mirror import FlowState
from headwater.mirror.plan import TopicPlan
from headwater.protocol.errors import ErrorCode, KafkaError
from tests.mirror.fakes import FakeFetcher, FakeGroup, fake_mirror


class FakeTargetAdmin:
    """The target cluster's CreatePartitions: refuses while ``refuse`` is set, else grows the topic."""

    def __init__(self, target_partitions: dict[str, int]) -> None:
        self.target_partitions = target_partitions
        self.refuse: KafkaError | None = None
        self.calls: list[dict[str, int]] = []

    async def create_partitions(self, new_counts: Mapping[str, int], **_: Any) -> dict[str, KafkaError | None]:
        self.calls.append(dict(new_counts))
        out: dict[str, KafkaError | None] = {}
        for topic, n in new_counts.items():
            if self.refuse is not None:
                out[topic] = self.refuse
            elif n <= self.target_partitions[topic]:
                out[topic] = KafkaError(ErrorCode.INVALID_PARTITIONS, "Topic already has that many partitions.")
            else:
                self.target_partitions[topic] = n
                out[topic] = None
        return out


def test_a_partition_added_at_the_source_is_added_to_the_target(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="headwater.mirror")

    async def main() -> None:
        group = FakeGroup("m1", {"clicks": 2})
        group.offsets.update({("clicks", p): 0 for p in range(4)})
        m, f = fake_mirror(group, FakeFetcher())
        target_partitions = {"clicks": 2}  # the target topic, as created by the mirror
        admin = FakeTargetAdmin(target_partitions)
        m.target_admin = cast(Any, admin)

        async def plan(f: FlowState, topic: str, n: int) -> TopicPlan:
            return TopicPlan(topic, n, target_partitions[topic])

        m._plan_topic = plan  # type: ignore[method-assign]
        await m._rebalance(f)
        assert set(f.copiers) == {("clicks", 0), ("clicks", 1)}
        assert m.health()[0]
        assert admin.calls == []

        # the target refuses (e.g. no CreatePartitions there, or not allowed): reported, mapping kept
        admin.refuse = KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "not allowed")
        group.topic_partitions["clicks"] = 3  # kafka-topics --alter --partitions 3 at the source
        await m._rebalance(f)
        assert admin.calls == [{"clicks": 3}]
        assert set(f.copiers) == {("clicks", 0), ("clicks", 1)}, "no copier for a partition the target lacks"
        assert all(c.fast_path() for c in f.copiers.values()), "still partition for partition"
        ok, why = m.health()
        assert not ok
        assert "topic clicks partitions: the source has 3 partition(s), the target topic clicks 2" in why
        assert "source partitions 2..2 are NOT mirrored" in why
        mismatch = {"flow": "dc1->agg", "topic": "clicks"}
        assert m.metrics.registry.get_sample_value("headwater_mirror_partition_count_mismatch", mismatch) == 1
        assert any(r.levelno == logging.ERROR and "could not add partitions" in r.getMessage() for r in caplog.records)
        assert not any("re-partitioned" in r.getMessage() for r in caplog.records)

        # the next rebalance tries again; the target accepts: partition 2 is mirrored like the others
        admin.refuse = None
        await m._rebalance(f)
        assert admin.calls[-1] == {"clicks": 3} and target_partitions["clicks"] == 3
        assert set(f.copiers) == {("clicks", p) for p in range(3)}
        assert all(c.fast_path() for c in f.copiers.values())
        assert m.health()[0], m.health()[1]
        assert m.metrics.registry.get_sample_value("headwater_mirror_partition_count_mismatch", mismatch) == 0

        # a further partition at the source is added to the target at once, without any operator
        group.topic_partitions["clicks"] = 4
        await m._rebalance(f)
        assert target_partitions["clicks"] == 4
        assert set(f.copiers) == {("clicks", p) for p in range(4)}
        assert all(c.fast_path() for c in f.copiers.values())
        assert m.health()[0], m.health()[1]
        assert any("added partitions 3..3 to clicks" in r.getMessage() for r in caplog.records)
        assert not any("re-partitioned" in r.getMessage() for r in caplog.records)
        await m._shutdown()

    asyncio.run(main())
