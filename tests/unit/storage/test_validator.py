"""What the leader's append does to a producer's batches beyond offsets (storage/validator.py):
LogAppendTime stamping, message.timestamp.difference.max.ms, compression.type recompression, and
a compacted log's roll by max.compaction.lag.ms. Real log directories, injected clock."""

from __future__ import annotations

from pathlib import Path

import pytest

from headwater.broker.storage.clock import ManualClock
from headwater.broker.storage.log import LogConfig
from headwater.protocol.errors import ErrorCode, KafkaError
from headwater.protocol.records.compression import Codec
from headwater.protocol.records.header import TIMESTAMP_TYPE_BIT, crc_matches, read_header
from headwater.protocol.records.record import decode_batch, encode_batch
from tests.unit.storage.storage_helpers import T0, batch, open_log, read_all, region_bytes

NOW = T0 + 3_600_000


def test_log_append_time_stamps_each_batch_and_the_time_index_and_followers_see_it(tmp_path: Path) -> None:
    clock = ManualClock(NOW)
    lg = open_log(tmp_path / "leader", LogConfig(message_timestamp_type="LogAppendTime"), clock=clock)
    info = lg.append(batch(3, ts=T0, ts_step=5), leader_epoch=1)
    assert info.log_append_time == NOW and info.max_timestamp == NOW
    clock.advance(1000)
    lg.append(batch(2, ts=T0), leader_epoch=1)
    data = region_bytes(lg.read(0, 1 << 20).region)
    h = read_header(data)
    assert h.attributes & TIMESTAMP_TYPE_BIT and h.max_timestamp == NOW
    assert crc_matches(data, 0, h)  # the CRC was recomputed over the new attributes and max timestamp
    assert [r.timestamp for r in read_all(lg)] == [NOW] * 3 + [NOW + 1000] * 2
    # ListOffsets by time answers by append time, not the producer's timestamps.
    assert lg.offset_for_timestamp(T0) == (0, NOW)
    assert lg.offset_for_timestamp(NOW + 1) == (3, NOW + 1000)
    assert lg.offset_for_timestamp(NOW + 1001) is None

    # A follower keeps the leader's stamped bytes (its own clock is not used).
    follower = open_log(
        tmp_path / "follower", LogConfig(message_timestamp_type="LogAppendTime"), clock=ManualClock(NOW + 99_999)
    )
    follower.append_as_follower(data)
    assert region_bytes(follower.read(0, 1 << 20).region) == data
    assert follower.offset_for_timestamp(NOW + 1) == (3, NOW + 1000)


def test_create_time_keeps_the_producer_timestamps(tmp_path: Path) -> None:
    lg = open_log(tmp_path, LogConfig(), clock=ManualClock(NOW))
    info = lg.append(batch(2, ts=T0, ts_step=7), leader_epoch=0)
    assert info.log_append_time == -1 and info.max_timestamp == T0 + 7
    assert [r.timestamp for r in read_all(lg)] == [T0, T0 + 7]


@pytest.mark.parametrize(
    ("timestamps", "accepted"),
    [
        ((NOW - 1000, NOW + 1000), True),  # both ends of the window
        ((NOW - 1001,), False),
        ((NOW, NOW + 1001), False),  # one record outside refuses the batch
        ((-1,), True),  # no timestamp (an up-converted magic 0 message): not checked, as in Kafka
    ],
)
def test_timestamps_outside_the_difference_window_are_invalid(
    tmp_path: Path, timestamps: tuple[int, ...], accepted: bool
) -> None:
    lg = open_log(tmp_path, LogConfig(message_timestamp_difference_max_ms=1000), clock=ManualClock(NOW))
    records = encode_batch([(b"k", b"v", ts, ()) for ts in timestamps])
    if accepted:
        assert lg.append(records, 0).records_count == len(timestamps)
        return
    with pytest.raises(KafkaError) as e:
        lg.append(records, 0)
    assert e.value.code == ErrorCode.INVALID_TIMESTAMP
    assert lg.log_end_offset == 0


def test_log_append_time_topics_do_not_check_the_difference(tmp_path: Path) -> None:
    cfg = LogConfig(message_timestamp_type="LogAppendTime", message_timestamp_difference_max_ms=1)
    lg = open_log(tmp_path, cfg, clock=ManualClock(NOW))
    assert lg.append(batch(1, ts=T0), 0).log_append_time == NOW


@pytest.mark.parametrize(
    ("compression_type", "sent", "stored"),
    [
        ("zstd", Codec.NONE, Codec.ZSTD),
        ("zstd", Codec.GZIP, Codec.ZSTD),
        ("uncompressed", Codec.LZ4, Codec.NONE),
        ("gzip", Codec.GZIP, Codec.GZIP),
        ("producer", Codec.SNAPPY, Codec.SNAPPY),
    ],
)
def test_compression_type_recompresses_keeping_records_offsets_and_producer_fields(
    tmp_path: Path, compression_type: str, sent: Codec, stored: Codec
) -> None:
    lg = open_log(tmp_path, LogConfig(compression_type=compression_type), clock=ManualClock(NOW))
    lg.append(batch(1), 0)
    records = [(b"k%d" % i, b"value-%d" % i * 20, T0 + i, (("h", b"x"),)) for i in range(5)]
    sent_batch = encode_batch(records, compression=sent, producer_id=7, producer_epoch=2, base_sequence=0)
    info = lg.append(sent_batch, 3)
    assert (info.first_offset, info.last_offset) == (1, 5)
    data = region_bytes(lg.read(1, 1 << 20).region)
    h, decoded = decode_batch(data)
    assert h.codec == stored
    assert (h.base_offset, h.producer_id, h.producer_epoch, h.base_sequence) == (1, 7, 2, 0)
    assert h.partition_leader_epoch == 3
    assert [(r.offset, r.key, r.value, r.timestamp, r.headers) for r in decoded] == [
        (1 + i, k, v, ts, hd) for i, (k, v, ts, hd) in enumerate(records)
    ]
    if sent == stored:
        assert data[21:] == sent_batch[21:]  # kept byte for byte (in-place assignment)


def test_a_compacted_log_rolls_its_active_segment_by_max_compaction_lag(tmp_path: Path) -> None:
    clock = ManualClock(NOW)
    cfg = LogConfig(cleanup_policy="compact", max_compaction_lag_ms=60_000)
    lg = open_log(tmp_path, cfg, clock=clock)
    lg.append(batch(1), 0)
    clock.advance(60_001)
    assert lg.roll_if_idle()
    assert len(lg.segments) == 2
    # segment.ms alone rules a log that is not compacted
    other = open_log(tmp_path / "d", LogConfig(max_compaction_lag_ms=60_000), clock=clock)
    other.append(batch(1), 0)
    clock.advance(60_001)
    assert not other.roll_if_idle()


def test_log_config_refuses_min_lag_above_max_lag() -> None:
    with pytest.raises(ValueError, match=r"min\.compaction\.lag\.ms"):
        LogConfig(min_compaction_lag_ms=10, max_compaction_lag_ms=5)
    with pytest.raises(ValueError):
        LogConfig(message_timestamp_type="WallClock")
    with pytest.raises(ValueError):
        LogConfig(compression_type="brotli")
