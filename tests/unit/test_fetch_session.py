"""Fetch sessions (KIP-227): the leader's session cache, the follower's session handler, and the ISR
check that counts a session's reads for the partitions an idle follower no longer lists."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from headwater.broker.fetch_session import EVICTION_MS, FetchSessionCache
from headwater.broker.partition import Partition
from headwater.broker.replica_fetcher import SessionHandler
from headwater.protocol.errors import ErrorCode, KafkaError


def _p(partition: int, fetch_offset: int = 0, leader_epoch: int = 0) -> dict[str, int]:
    return {
        "partition": partition,
        "fetch_offset": fetch_offset,
        "log_start_offset": 0,
        "partition_max_bytes": 1 << 20,
        "current_leader_epoch": leader_epoch,
    }


def _code(exc: pytest.ExceptionInfo[KafkaError]) -> int:
    return exc.value.code


def test_create_then_incremental_epochs_and_errors() -> None:
    cache = FetchSessionCache(10)
    s = cache.create(replica_id=1, size=2, now_ms=0)
    assert s is not None and s.id != 0 and s.epoch == 1
    s.upsert("t", _p(0))
    s.upsert("t", _p(1))
    assert cache.get(s.id, 1, 1) is s
    s.next_epoch()
    with pytest.raises(KafkaError) as e:
        cache.get(s.id, 1, 1)  # a replayed epoch
    assert _code(e) == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    assert cache.get(s.id, 2, 1) is s
    with pytest.raises(KafkaError) as e:
        cache.get(s.id + 1 if s.id < 0x7FFFFFFF else 1, 2, 1)
    assert _code(e) == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    with pytest.raises(KafkaError) as e:
        cache.get(s.id, 2, -1)  # another client naming the follower's session
    assert _code(e) == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    # an incremental change keeps the entry (its answered state) and updates what the client sent
    entry = s.partitions[("t", 0)]
    entry.high_watermark = 7
    s.upsert("t", _p(0, fetch_offset=5))
    assert s.partitions[("t", 0)] is entry and entry.fetch_offset == 5 and entry.high_watermark == 7
    s.forget([("t", 1)])
    assert list(s.partitions) == [("t", 0)]
    cache.remove(s.id)
    assert s.closed and not entry.live() and len(cache) == 0
    with pytest.raises(KafkaError) as e:
        cache.get(s.id, 2, 1)
    assert _code(e) == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def test_eviction_prefers_stale_then_weaker_sessions() -> None:
    cache = FetchSessionCache(2)
    consumer = cache.create(replica_id=-1, size=5, now_ms=0)
    follower = cache.create(replica_id=1, size=3, now_ms=0)
    assert consumer is not None and follower is not None
    for i in range(5):
        consumer.upsert("c", _p(i))
    for i in range(3):
        follower.upsert("f", _p(i))
    # a consumer with fewer partitions does not displace anyone: answered sessionless
    assert cache.create(replica_id=-1, size=2, now_ms=10) is None
    # a follower (privileged) takes the consumer's slot
    f2 = cache.create(replica_id=2, size=1, now_ms=10)
    assert f2 is not None and consumer.closed and not follower.closed and cache.evictions == 1
    # among followers a larger session wins over a smaller one ...
    f3 = cache.create(replica_id=3, size=2, now_ms=20)
    assert f3 is not None and f2.closed and not follower.closed
    # ... and any session unused for the eviction time gives way to anyone
    follower.last_used_ms = 20
    for i in range(2):
        f3.upsert("g", _p(i))
    f3.last_used_ms = 20 + EVICTION_MS
    late = cache.create(replica_id=-1, size=1, now_ms=21 + EVICTION_MS)
    assert late is not None and follower.closed and not f3.closed


def test_no_slots_means_sessionless() -> None:
    assert FetchSessionCache(0).create(replica_id=1, size=1, now_ms=0) is None
    with pytest.raises(ValueError):
        FetchSessionCache(-1)


def test_follower_session_handler_lists_only_changes() -> None:
    h = SessionHandler()
    wanted = {("t", 0): (10, 0, 3, 100), ("t", 1): (20, 0, 3, 100)}
    sid, epoch, listed, forgotten = h.build(wanted)
    assert (sid, epoch, sorted(listed), forgotten) == (0, 0, [("t", 0), ("t", 1)], [])
    h.on_response(ErrorCode.NONE, 42)
    sid, epoch, listed, forgotten = h.build(dict(wanted))
    assert (sid, epoch, listed, forgotten) == (42, 1, [], [])  # idle: nothing listed
    h.on_response(ErrorCode.NONE, 42)
    changed = {("t", 0): (11, 0, 3, 100), ("t", 2): (0, 0, 3, 100)}  # t-0 moved, t-1 parked, t-2 new
    sid, epoch, listed, forgotten = h.build(changed)
    assert (sid, epoch, sorted(listed), forgotten) == (42, 2, [("t", 0), ("t", 2)], [("t", 1)])
    h.on_response(ErrorCode.INVALID_FETCH_SESSION_EPOCH, 0)
    sid, epoch, listed, forgotten = h.build(changed)
    assert (sid, epoch, sorted(listed), forgotten) == (0, 0, [("t", 0), ("t", 2)], [])  # full again
    h.on_response(ErrorCode.NONE, 0)  # a leader without session slots: stay sessionless
    assert h.build(changed)[:2] == (0, 0)
    h.on_response(ErrorCode.NONE, 7)
    h.build(changed)
    h.reset()  # a lost connection: full, replacing session 7
    assert h.build(changed)[:2] == (7, 0)


@dataclass
class FakeLog:
    log_end_offset: int = 10
    log_start_offset: int = 0

    def maybe_assign_epoch_start_offset(self, epoch: int, offset: int) -> None:
        pass

    def on_high_watermark(self, high_watermark: int) -> None:
        pass  # no transactions here

    def last_stable_offset(self, high_watermark: int) -> int:
        return high_watermark


def _leader(now_ms: int) -> Partition:
    part = Partition("t", 0, broker_id=0)
    part.make_leader(FakeLog(), 1, [0, 1], [0, 1], 0, 1, now_ms)  # type: ignore[arg-type]
    return part


def test_isr_check_counts_session_reads_for_unlisted_caught_up_partitions() -> None:
    lag = 10_000
    cache = FetchSessionCache(10)
    s = cache.create(replica_id=1, size=1, now_ms=0)
    assert s is not None
    s.upsert("t", _p(0, fetch_offset=10))
    entry = s.partitions[("t", 0)]
    part = _leader(0)
    s.mark_read(1_000)
    part.update_follower(1, 10, 1_000, 0, entry)  # listed once, caught up
    assert part.followers[1].session_entry is entry
    # the follower goes on fetching in its session without listing t-0: only the session's clock moves
    for t in range(2_000, 60_000, 500):
        s.mark_read(t)
    assert part.out_of_sync(60_000, lag) == []
    # a session that stops reading (SIGSTOP, crash) stops the clock: shrunk after the lag time
    assert part.out_of_sync(59_500 + lag + 1, lag) == [1]
    # forgotten (or session closed): its reads no longer count
    s.mark_read(70_000)
    assert part.out_of_sync(70_001, lag) == []
    s.forget([("t", 0)])
    assert part.out_of_sync(70_001, lag) == [1]  # caught up last at 1,000 as far as anyone knows
    s.upsert("t", _p(0, fetch_offset=10))  # listed again: a new entry, not the one the follower state saw
    assert part.out_of_sync(70_001, lag) == [1]
    part.update_follower(1, 10, 70_000, 0, s.partitions[("t", 0)])
    s.mark_read(90_000)
    assert part.out_of_sync(90_001, lag) == []
    cache.remove(s.id)
    assert part.out_of_sync(90_001, lag) == [1]


def test_follower_behind_in_a_session_is_not_covered_by_it() -> None:
    lag = 10_000
    cache = FetchSessionCache(10)
    s = cache.create(replica_id=1, size=1, now_ms=0)
    assert s is not None
    s.upsert("t", _p(0, fetch_offset=4))
    entry = s.partitions[("t", 0)]
    part = _leader(0)
    part.log.log_end_offset = 10  # type: ignore[union-attr]
    s.mark_read(1_000)
    part.update_follower(1, 4, 1_000, 0, entry)  # behind the log end: not caught up
    assert part.followers[1].session_entry is None
    for t in range(2_000, 30_000, 500):
        s.mark_read(t)
        part.update_follower(1, 4, t, 0, entry)  # read each time (the handler never skips it), still behind
    assert part.out_of_sync(30_000, lag) == [1]


def test_update_after_skipped_reads_counts_the_previous_read() -> None:
    """A caught-up partition skipped by session reads, then appended to: Kafka's rule (caught up as of
    the previous fetch when this fetch starts where the leader ended then) sees the session's last read."""
    cache = FetchSessionCache(10)
    s = cache.create(replica_id=1, size=1, now_ms=0)
    assert s is not None
    s.upsert("t", _p(0, fetch_offset=10))
    entry = s.partitions[("t", 0)]
    part = _leader(0)
    s.mark_read(1_000)
    part.update_follower(1, 10, 1_000, 0, entry)
    for t in range(1_500, 50_000, 500):
        s.mark_read(t)  # skipped reads
    part.log.log_end_offset = 15  # type: ignore[union-attr]
    s.mark_read(50_000)
    part.update_follower(1, 10, 50_000, 0, entry)  # new data: read, the follower is 5 behind
    st = part.followers[1]
    assert st.session_entry is None and st.last_caught_up_ms == 49_500
    assert part.out_of_sync(50_000 + 5_000, 10_000) == []
