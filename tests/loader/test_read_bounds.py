"""One partition's read is bounded: retries with a limit, a timeout per fetch, a compacted tail is
the end of the range (fake cluster and fetch, no broker, no Spark)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from headwater.client import raw
from headwater.client.raw import RawPartition
from headwater.loader import source
from headwater.loader.offsets import OffsetRange
from headwater.loader.source import PartitionReadError, ReadBounds, read_range
from headwater.protocol.errors import ErrorCode
from headwater.protocol.records import header
from headwater.protocol.records.record import encode_batch

FAST = ReadBounds(poll_timeout_ms=300, retries=2, retry_interval_ms=10)


class FakeCluster:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    async def leader_for(self, topic: str, partition: int) -> int:
        return 0

    async def refresh(self, topics: list[str]) -> None:
        pass

    async def close(self) -> None:
        pass


def _batch(first: int, n: int) -> tuple[header.BatchHeader, memoryview]:
    data = encode_batch(
        [(None, f"v{o}".encode(), 1_700_000_000_000, ()) for o in range(first, first + n)], base_offset=first
    )
    return header.read_header(data), memoryview(data)


@pytest.fixture(autouse=True)
def fake_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    import headwater.client.cluster

    monkeypatch.setattr(headwater.client.cluster, "Cluster", FakeCluster)


def _read(r: OffsetRange, bounds: ReadBounds = FAST) -> list[int]:
    return [o for b in read_range("fake:9092", r, bounds=bounds) for o in b.column("offset").to_pylist()]


def test_a_partition_that_keeps_failing_fails_the_read_with_its_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    async def failing(cluster: Any, requests: Any, **kw: Any) -> Any:
        calls.append(requests)
        return {}, {("t", 4): ErrorCode.KAFKA_STORAGE_ERROR}

    monkeypatch.setattr(raw, "fetch_raw", failing)
    with pytest.raises(
        PartitionReadError,
        match=r"t-4: reading offset 5 of \[5, 10\) failed 3 time\(s\) in a row, last: error KAFKA_STORAGE_ERROR",
    ):
        _read(OffsetRange("t", 4, 5, 10))
    assert len(calls) == 3  # the first attempt and fetchOffset.numRetries=2 retries


def test_a_fetch_that_hangs_times_out(monkeypatch: pytest.MonkeyPatch) -> None:
    async def hanging(cluster: Any, requests: Any, **kw: Any) -> Any:
        await asyncio.sleep(3600)

    monkeypatch.setattr(raw, "fetch_raw", hanging)
    started = time.monotonic()
    with pytest.raises(PartitionReadError, match=r"t-0: .* last: fetch timed out after 300 ms"):
        _read(OffsetRange("t", 0, 0, 10))
    assert time.monotonic() - started < 30  # 3 x 300 ms plus retries; never the hour


def test_recovers_after_failures_within_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    answers: list[Any] = [
        ({}, {("t", 0): ErrorCode.NOT_LEADER_FOR_PARTITION}),
        ({}, {("t", 0): ErrorCode.NOT_LEADER_FOR_PARTITION}),
        ({("t", 0): RawPartition([_batch(0, 5)], high_watermark=5, log_start_offset=0)}, {}),
    ]

    async def flaky(cluster: Any, requests: Any, **kw: Any) -> Any:
        return answers.pop(0)

    monkeypatch.setattr(raw, "fetch_raw", flaky)
    assert _read(OffsetRange("t", 0, 0, 5)) == [0, 1, 2, 3, 4]


def test_a_compacted_tail_ends_the_range(monkeypatch: pytest.MonkeyPatch) -> None:
    # [0, 10) planned; the cleaner removed 5-9 (no records follow below the high watermark 10).
    async def compacted(cluster: Any, requests: Any, **kw: Any) -> Any:
        ((_, _, offset),) = requests
        batches = [_batch(0, 5)] if offset < 5 else []
        return {("t", 0): RawPartition(batches, high_watermark=10, log_start_offset=0)}, {}

    monkeypatch.setattr(raw, "fetch_raw", compacted)
    assert _read(OffsetRange("t", 0, 0, 10)) == [0, 1, 2, 3, 4]


def test_no_data_below_the_end_with_a_lower_high_watermark_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    async def behind(cluster: Any, requests: Any, **kw: Any) -> Any:
        return {("t", 0): RawPartition([], high_watermark=7, log_start_offset=0)}, {}

    monkeypatch.setattr(raw, "fetch_raw", behind)
    with pytest.raises(PartitionReadError, match=r"the high watermark 7 is below the range end 10"):
        _read(OffsetRange("t", 0, 0, 10))


def test_bounds_come_from_spark_option_names() -> None:
    opts = {"kafkaconsumer.polltimeoutms": "5000", "fetchoffset.numretries": "1", "fetchoffset.retryintervalms": "0"}
    assert source.ReadBounds.from_options(opts) == ReadBounds(5000, 1, 0)
    with pytest.raises(ValueError, match=r"fetchOffset\.numRetries: 'x' is not an integer"):
        source.ReadBounds.from_options({"fetchoffset.numretries": "x"})
