"""Review finding 7: a definite "not appended" answer is retried at once, without the scan for an
unanswered produce; an error retrying cannot fix stops the partition loudly (unit tests: real
Mirror, Copier and Supervisor; fake group, source and target answers)."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

import headwater.mirror.copier as copier_module
from headwater.client.errors import KafkaTimeoutError
from headwater.client.raw import RawPartition
from headwater.mirror.mirror import FlowState, Mirror
from headwater.mirror.plan import TopicPlan
from headwater.protocol.errors import ErrorCode, KafkaError
from headwater.protocol.records.header import read_header
from headwater.protocol.records.record import RecordInput, encode_batch
from tests.mirror.fakes import FakeFetcher, FakeGroup, fake_mirror, wait_until

TP = ("orders", 0)


class FakeTarget:
    async def refresh(self, topics: list[str]) -> None:
        pass

    async def close(self) -> None:
        pass


def _one_batch_then_idle() -> FakeFetcher:
    batch = encode_batch([RecordInput(b"k", b"v", 1_700_000_000_000)], base_offset=10)
    h = read_header(batch)

    async def answer(tp: tuple[str, int], offset: int) -> RawPartition:
        if offset <= 10:
            return RawPartition([(h, memoryview(batch))], 11, 0)
        return await FakeFetcher.idle(tp, offset)

    return FakeFetcher(answer)


def _mirror() -> tuple[Mirror, FlowState]:
    group = FakeGroup("m1", {"orders": 1})
    group.offsets[TP] = 10
    m, f = fake_mirror(group, _one_batch_then_idle())
    m.target = FakeTarget()  # type: ignore[assignment]

    async def plan(f: FlowState, topic: str, n: int) -> TopicPlan:
        return TopicPlan(topic, n, n)

    m._plan_topic = plan  # type: ignore[method-assign]
    return m, f


def group_offsets(f: FlowState) -> dict[tuple[str, int], int]:
    assert isinstance(f.group, FakeGroup)
    return f.group.offsets


def test_not_leader_is_retried_at_once_without_a_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    scans: list[float] = []
    sent: list[float] = []
    answers: list[BaseException | int] = [
        KafkaTimeoutError("no answer"),  # unknown outcome: the target is scanned
        KafkaError(ErrorCode.NOT_LEADER_FOR_PARTITION),  # definitely not appended: no scan
        100,
    ]

    async def produce_raw(*args: object, **kwargs: object) -> int:
        sent.append(time.monotonic())
        a = answers.pop(0)
        if isinstance(a, BaseException):
            raise a
        return a

    async def scan_target(*args: object, **kwargs: object) -> tuple[dict[bytes, list[int]], int]:
        scans.append(time.monotonic())
        return {}, 50  # nothing of ours there, and the high watermark stands still

    monkeypatch.setattr(copier_module, "produce_raw", produce_raw)
    monkeypatch.setattr(copier_module, "scan_target", scan_target)

    async def main() -> None:
        m, f = _mirror()
        await m._rebalance(f)
        c = f.copiers[TP]
        c.target_end = 50  # known: the target offset after our last append
        await wait_until(lambda: c.next_offset == 11, "the batch to be acknowledged")
        assert c.target_end == 101
        assert len(sent) == 3
        assert len(scans) >= 3, "the timed-out produce was looked for (3 still rounds)"
        scans_before_not_leader = [t for t in scans if t < sent[1]]
        assert len(scans_before_not_leader) == len(scans), "no scan after NOT_LEADER_FOR_PARTITION"
        assert sent[2] - sent[1] < 2.0, f"retry after NOT_LEADER took {sent[2] - sent[1]:.2f}s"
        await m._shutdown()

    asyncio.run(main())


@pytest.mark.parametrize("wire_code", [10, 87], ids=["MESSAGE_TOO_LARGE", "INVALID_RECORD"])
def test_a_refusal_retrying_cannot_fix_stops_the_partition_loudly(
    wire_code: int, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    sent: list[float] = []
    code = ErrorCode.of(wire_code)

    async def produce_raw(*args: object, **kwargs: object) -> int:
        sent.append(time.monotonic())
        raise KafkaError(code, f"producing to orders-0: {code.name}")

    monkeypatch.setattr(copier_module, "produce_raw", produce_raw)

    async def main() -> None:
        m, f = _mirror()
        await m._rebalance(f)
        c = f.copiers[TP]
        unit = m.supervisor.unit(c.unit_name)
        assert unit is not None
        await wait_until(lambda: unit.state == "failed", "the copier to stop")
        await asyncio.sleep(0.3)
        assert len(sent) == 1, "not retried"
        assert c.next_offset == 10, "nothing acknowledged"
        ok, why = m.health()
        assert not ok and "dc1->agg orders-0: failed: the target refused orders-0 from source offset 10" in why
        assert code.name in why
        assert m.metrics.registry.get_sample_value("headwater_mirror_task_failures_total", {"flow": "dc1->agg"}) == 1.0
        assert any(r.levelno == logging.ERROR and "not restarted" in r.getMessage() for r in caplog.records)
        t0 = time.monotonic()
        await m._shutdown()
        assert time.monotonic() - t0 < 5, "a stopped copier does not hold up the shutdown"
        assert group_offsets(f)[TP] == 10

    asyncio.run(main())


def test_a_source_batch_that_cannot_be_decoded_stops_the_partition(monkeypatch: pytest.MonkeyPatch) -> None:
    """A compacted batch (re-encoded on the fast path) whose CRC does not match its bytes."""
    sent: list[float] = []

    async def produce_raw(*args: object, **kwargs: object) -> int:
        sent.append(time.monotonic())
        return 0

    monkeypatch.setattr(copier_module, "produce_raw", produce_raw)
    records = [RecordInput(b"a", b"1", 1_700_000_000_000), RecordInput(b"b", b"2", 1_700_000_000_001)]
    bad = bytearray(encode_batch(records, base_offset=10, offset_deltas=[0, 2], last_offset_delta=2))
    bad[-1] ^= 0xFF  # a flipped bit in the last record
    h = read_header(bad)

    async def answer(tp: tuple[str, int], offset: int) -> RawPartition:
        if offset <= 10:
            return RawPartition([(h, memoryview(bytes(bad)))], 13, 0)
        return await FakeFetcher.idle(tp, offset)

    async def main() -> None:
        m, f = _mirror()
        f.fetcher = FakeFetcher(answer)  # type: ignore[assignment]
        await m._rebalance(f)
        c = f.copiers[TP]
        unit = m.supervisor.unit(c.unit_name)
        assert unit is not None
        await wait_until(lambda: unit.state == "failed", "the copier to stop")
        assert sent == [] and c.next_offset == 10
        assert "cannot be decoded" in m.health()[1] and "between offsets 10 and 12" in m.health()[1]
        await m._shutdown()

    asyncio.run(main())


def test_a_source_refusing_the_mirrors_principal_is_loud_at_once(caplog: pytest.LogCaptureFixture) -> None:
    """A missing Read ACL is not retried quietly at INFO: the first refusal is an ERROR naming the
    ACLs, the supervisor counts it and /healthz says so, and it retries with backoff (so an
    operator's new ACL heals it without a restart)."""
    fetches: list[float] = []

    async def answer(tp: tuple[str, int], offset: int) -> RawPartition:
        fetches.append(time.monotonic())
        raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Not authorized to access topics: [orders]")

    async def main() -> None:
        group = FakeGroup("m1", {"orders": 1})
        group.offsets[TP] = 10
        m, f = fake_mirror(group, FakeFetcher(answer))
        m.target = FakeTarget()  # type: ignore[assignment]

        async def plan(f: FlowState, topic: str, n: int) -> TopicPlan:
            return TopicPlan(topic, n, n)

        m._plan_topic = plan  # type: ignore[method-assign]
        await m._rebalance(f)
        await wait_until(
            lambda: (
                (m.metrics.registry.get_sample_value("headwater_mirror_task_failures_total", {"flow": "dc1->agg"}) or 0)
                >= 1
            ),
            "the refusal to reach the supervisor",
        )
        assert len(fetches) == 1, "no quiet retries before the supervisor hears of it"
        ok, why = m.health()
        assert not ok and "TOPIC_AUTHORIZATION_FAILED" in why, why
        refused = [
            r
            for r in caplog.records
            if r.levelno == logging.ERROR and "refused the mirror's principal" in r.getMessage()
        ]
        assert refused, [r.getMessage() for r in caplog.records]
        assert not [r for r in caplog.records if r.levelno == logging.INFO and "retrying in" in r.getMessage()]
        await m._shutdown()
        assert group_offsets(f)[TP] == 10

    asyncio.run(main())
