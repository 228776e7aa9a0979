"""Replication throttles (KIP-73): which replicas a config throttles, and the measured rate."""

from __future__ import annotations

from headwater.broker.replication_quota import (
    MAX_LONG,
    ReplicationQuota,
    throttled_partitions,
    validate_throttled_replicas,
)


def test_throttled_replicas_lists_name_partition_and_broker() -> None:
    assert throttled_partitions("0:1,0:2,1:2,2:3", 2) == frozenset({0, 1})
    assert throttled_partitions("0:1", 2) == frozenset()
    assert throttled_partitions("*", 7) is True
    assert throttled_partitions(None, 1) == frozenset()
    assert validate_throttled_replicas("0:1,1:2") is None
    assert validate_throttled_replicas("*") is None
    assert validate_throttled_replicas("0-1") is not None
    assert validate_throttled_replicas("a:1") is not None


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_rate_over_sampled_windows_and_the_limit() -> None:
    clock = Clock()
    limit = [1000]
    configs = {"t": {"follower.replication.throttled.replicas": "0:5"}}
    q = ReplicationQuota(
        5, "follower", lambda: limit[0], lambda t: configs.get(t, {}), samples=3, window_s=1.0, clock=clock
    )
    assert q.is_throttled(("t", 0)) and not q.is_throttled(("t", 1)) and not q.is_throttled(("u", 0))
    assert not q.is_quota_exceeded()
    q.record(1500)  # at the start the rate covers at least (samples - 1) windows: 750 B/s
    assert q.rate() == 750.0 and not q.is_quota_exceeded()
    q.record(1000)
    assert q.is_quota_exceeded()  # 2500 B over 2 s
    clock.now += 2.5
    assert q.rate() == 2500 / 2.5 and not q.is_quota_exceeded()
    clock.now += 5  # the old samples expire
    assert q.rate() == 0.0
    limit[0] = MAX_LONG
    q.record(10**9)
    assert not q.is_quota_exceeded()  # unset rate: never throttled
    configs["t"] = {"follower.replication.throttled.replicas": "*"}
    assert q.is_throttled(("t", 3))  # the topic config is re-read when it changes
