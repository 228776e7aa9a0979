"""The broker's pure replication rules: leader election (controller/election.py) and a Partition's
high watermark and ISR bookkeeping (partition.py), over a real log on disk."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from headwater.broker.controller.election import LeaderAndIsr, offline_leader, preferred_leader, shutdown_leader
from headwater.broker.partition import Partition
from headwater.protocol.errors import ErrorCode, KafkaError
from tests.unit.storage.storage_helpers import batch, open_log

STATE = LeaderAndIsr(leader=1, leader_epoch=4, isr=(1, 2, 3), controller_epoch=2, zk_version=7)


# -- election ------------------------------------------------------------------------------------


def test_offline_partition_takes_the_first_live_isr_replica_in_assignment_order() -> None:
    assert offline_leader([1, 2, 3], STATE, live={2, 3}, unclean=False) == (2, (2, 3))
    assert offline_leader([3, 2, 1], STATE, live={2, 3}, unclean=False) == (3, (2, 3))


def test_without_unclean_election_an_isr_with_no_live_member_stays_offline() -> None:
    only_1 = LeaderAndIsr(1, 4, (1,), 2, 7)
    assert offline_leader([1, 2, 3], only_1, live={2, 3}, unclean=False) is None
    # unclean: a live replica outside the ISR, whose ISR becomes itself alone
    assert offline_leader([1, 2, 3], only_1, live={2, 3}, unclean=True) == (2, (2,))
    assert offline_leader([1, 2, 3], only_1, live=set(), unclean=True) is None


def test_preferred_leader_only_when_alive_in_the_isr_and_not_leading_already() -> None:
    led_by_2 = LeaderAndIsr(2, 5, (1, 2), 2, 8)
    assert preferred_leader([1, 2], led_by_2, live={1, 2}) == 1
    assert preferred_leader([1, 2], led_by_2, live={2}) is None
    assert preferred_leader([1, 2], LeaderAndIsr(2, 5, (2,), 2, 8), live={1, 2}) is None  # 1 not in the ISR
    assert preferred_leader([1, 2, 3], STATE, live={1, 2, 3}) is None  # already the leader


def test_controlled_shutdown_skips_brokers_shutting_down() -> None:
    assert shutdown_leader([1, 2, 3], STATE, live={1, 2, 3}, shutting_down={1}) == 2
    assert shutdown_leader([1, 2, 3], STATE, live={1, 3}, shutting_down={1}) == 3
    assert shutdown_leader([1, 2, 3], STATE, live={1, 2, 3}, shutting_down={1, 2, 3}) is None


def test_a_new_leader_bumps_the_epoch_and_keeps_the_zk_version_for_the_conditional_write() -> None:
    moved = STATE.new_leader(2, (2, 3), controller_epoch=3)
    assert (moved.leader, moved.leader_epoch, moved.isr, moved.controller_epoch, moved.zk_version) == (
        2,
        5,
        (2, 3),
        3,
        7,
    )
    assert json.loads(moved.to_znode()) == {
        "controller_epoch": 3,
        "leader": 2,
        "version": 1,
        "leader_epoch": 5,
        "isr": [2, 3],
    }


# -- Partition -----------------------------------------------------------------------------------


def leader(tmp_path: Path, isr: list[int], now: int = 1_000) -> Partition:
    part = Partition("t", 0, broker_id=1)
    part.make_leader(open_log(tmp_path), 3, isr, [1, 2, 3], zk_version=0, controller_epoch=1, now_ms=now)
    return part


def test_high_watermark_is_the_minimum_over_the_isr_and_never_moves_back(tmp_path: Path) -> None:
    part = leader(tmp_path, [1, 2, 3])
    part.append_as_leader(memoryview(batch(5)), acks=1, min_insync_replicas=1)
    assert part.high_watermark == 0  # followers' log end offsets unknown yet
    part.update_follower(2, 5, now_ms=1_100)
    assert not part.maybe_increment_high_watermark()  # 3 still unknown
    part.update_follower(3, 3, now_ms=1_100)
    assert part.maybe_increment_high_watermark() and part.high_watermark == 3
    part.update_follower(3, 5, now_ms=1_200)
    part.maybe_increment_high_watermark()
    assert part.high_watermark == 5
    part.update_follower(2, 2, now_ms=1_300)  # a follower that truncated: the HW stays
    part.maybe_increment_high_watermark()
    assert part.high_watermark == 5


def test_leader_alone_in_the_isr_moves_the_high_watermark_on_append(tmp_path: Path) -> None:
    part = leader(tmp_path, [1])
    part.append_as_leader(memoryview(batch(4)), acks=-1, min_insync_replicas=1)
    assert part.high_watermark == 4


def test_acks_all_below_min_insync_replicas_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    part = leader(tmp_path, [1])
    with pytest.raises(KafkaError) as e:
        part.append_as_leader(memoryview(batch(2)), acks=-1, min_insync_replicas=2)
    assert e.value.code == ErrorCode.NOT_ENOUGH_REPLICAS
    assert part.log is not None and part.log.log_end_offset == 0
    part.append_as_leader(memoryview(batch(2)), acks=1, min_insync_replicas=2)  # acks=1 is not held to it
    assert part.log.log_end_offset == 2


def test_followers_leave_the_isr_after_the_lag_time_and_rejoin_at_the_high_watermark(tmp_path: Path) -> None:
    part = leader(tmp_path, [1, 2, 3], now=1_000)
    part.append_as_leader(memoryview(batch(10)), acks=1, min_insync_replicas=1)
    part.update_follower(2, 10, now_ms=5_000)  # caught up at 5 s
    part.update_follower(3, 4, now_ms=5_000)  # behind since the start (caught up at 1 s)
    assert part.out_of_sync(now_ms=12_000, max_lag_ms=10_000) == [3]
    part.isr = [1, 2]  # the replica manager wrote the shrink
    part.maybe_increment_high_watermark()
    assert part.high_watermark == 10
    assert not part.follower_to_add(3)  # still below the high watermark
    part.update_follower(3, 10, now_ms=13_000)
    assert part.follower_to_add(3)


def test_a_joiner_being_written_to_the_isr_caps_the_high_watermark(tmp_path: Path) -> None:
    """While the leader writes an ISR expansion to ZooKeeper, the joiner counts for the high
    watermark: a controller reading the written ISR may elect it, so nothing above its log end may
    be acknowledged (found in a reassignment under load: the new replica joined at 1,360 while the
    old ISR moved the high watermark to 1,362, was elected, and the acked records were truncated)."""
    part = leader(tmp_path, [1, 2])
    part.append_as_leader(memoryview(batch(10)), acks=1, min_insync_replicas=1)
    part.update_follower(2, 10, now_ms=1_100)
    part.update_follower(3, 4, now_ms=1_100)
    part.maybe_increment_high_watermark()
    assert part.high_watermark == 10
    part.append_as_leader(memoryview(batch(5)), acks=1, min_insync_replicas=1)
    part.update_follower(3, 10, now_ms=1_200)
    assert part.follower_to_add(3)
    part.pending_isr = (1, 2, 3)  # the replica manager's expansion write, in flight
    part.update_follower(2, 15, now_ms=1_300)
    part.maybe_increment_high_watermark()
    assert part.high_watermark == 10  # not 15: broker 3 has only 10
    part.update_follower(3, 15, now_ms=1_400)
    part.maybe_increment_high_watermark()
    assert part.high_watermark == 15
    part.pending_isr = ()  # the write failed (BadVersion): the old ISR alone again
    part.append_as_leader(memoryview(batch(1)), acks=1, min_insync_replicas=1)
    part.update_follower(2, 16, now_ms=1_500)
    part.maybe_increment_high_watermark()
    assert part.high_watermark == 16


def test_a_follower_caps_the_leaders_high_watermark_at_its_own_log_end(tmp_path: Path) -> None:
    part = Partition("t", 0, broker_id=2)
    log_ = open_log(tmp_path)
    log_.append(batch(3), 0)
    part.make_follower(log_, 1, 3, [1, 2], [1, 2], zk_version=0, controller_epoch=1)
    part.update_follower_high_watermark(10)
    assert part.high_watermark == 3
    with pytest.raises(KafkaError) as e:
        part.require_leader()
    assert e.value.code == ErrorCode.NOT_LEADER_FOR_PARTITION


def test_leader_epoch_fencing(tmp_path: Path) -> None:
    part = leader(tmp_path, [1])
    part.check_leader_epoch(3)
    part.check_leader_epoch(-1)  # the client does not say
    for epoch, code in ((2, ErrorCode.FENCED_LEADER_EPOCH), (4, ErrorCode.UNKNOWN_LEADER_EPOCH)):
        with pytest.raises(KafkaError) as e:
            part.check_leader_epoch(epoch)
        assert e.value.code == code


def test_leadership_counts_only_becoming_leader_again(tmp_path: Path) -> None:
    part = leader(tmp_path, [1, 2])
    first = part.leadership
    assert part.log is not None
    part.make_leader(part.log, 4, [1], [1, 2], zk_version=1, controller_epoch=1, now_ms=2_000)  # ISR shrink
    assert part.leadership == first
    part.make_follower(part.log, 2, 5, [2], [1, 2], zk_version=2, controller_epoch=1)
    part.make_leader(part.log, 6, [1, 2], [1, 2], zk_version=3, controller_epoch=1, now_ms=3_000)
    assert part.leadership == first + 1
