"""When the active segment rolls besides segment.bytes / segment.ms: segment.jitter.ms (earlier by a
random amount below it) and segment.index.bytes (a full index), as Kafka's LogSegment.shouldRoll."""

from __future__ import annotations

from pathlib import Path

from headwater.broker.storage.clock import ManualClock
from headwater.broker.storage.log import LogConfig
from tests.unit.storage.storage_helpers import batch, open_log


def test_segment_jitter_rolls_each_segment_up_to_the_jitter_before_segment_ms(tmp_path: Path) -> None:
    clock = ManualClock()
    lg = open_log(tmp_path, LogConfig(segment_ms=1000, segment_jitter_ms=800), clock=clock)
    ages = []
    for _ in range(20):
        lg.append(batch(1), 0)
        start, rolled = clock.time_ms(), len(lg.segments)
        while len(lg.segments) == rolled:
            clock.advance(50)
            lg.roll_if_idle()
        ages.append(clock.time_ms() - start)
    assert all(200 <= a <= 1050 for a in ages), ages  # never later than segment.ms, never earlier than less the jitter
    assert len(set(ages)) > 1, ages  # drawn per segment
    # Without jitter every segment lives exactly segment.ms (to the 50 ms step).
    plain = open_log(tmp_path / "plain", LogConfig(segment_ms=1000), clock=clock)
    plain.append(batch(1), 0)
    clock.advance(1000)
    assert not plain.roll_if_idle()
    clock.advance(1)
    assert plain.roll_if_idle()


def test_a_full_index_rolls_the_segment(tmp_path: Path) -> None:
    # 24 bytes: 3 offset-index entries or 2 time-index entries; one entry per batch (interval 0).
    lg = open_log(tmp_path, LogConfig(segment_index_bytes=24, index_interval_bytes=0), clock=ManualClock())
    for i in range(9):
        lg.append(batch(1, ts=1_700_000_000_000 + i), 0)
    sizes = [s.next_offset - s.base_offset for s in lg.segments]
    assert len(sizes) > 1 and all(n <= 3 for n in sizes), sizes
    big = open_log(tmp_path / "big", LogConfig(index_interval_bytes=0), clock=ManualClock())
    for i in range(9):
        big.append(batch(1, ts=1_700_000_000_000 + i), 0)
    assert len(big.segments) == 1
