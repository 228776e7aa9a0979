"""The Fetch handler's session reads (KIP-227): an incremental read looks only at the session's dirty
partitions and a waiting session Fetch waits on the session, yet every event that can give a
partition something to answer (an append, a log start move, a role change, another fetch of the
same follower) brings it back into the next read. Real handler, real Partition and Purgatory; the
log and the replica manager are small fakes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from types import SimpleNamespace
from typing import Any

from headwater.broker.fetch_session import FetchSession, FetchSessionCache
from headwater.broker.handlers import fetch
from headwater.broker.partition import Partition
from headwater.broker.purgatory import Purgatory
from headwater.protocol.errors import ErrorCode, KafkaError
from headwater.protocol.primitives import FileRegion

FOLLOWER = 1
LAG_MS = 10_000

CTX: Any = SimpleNamespace(principal="User:ANONYMOUS", peer="127.0.0.1:1")  # the request context fetch reads


@dataclass
class FakeLog:
    log_end_offset: int = 10
    log_start_offset: int = 0
    on_offsets_moved: Callable[[], None] | None = None

    def maybe_assign_epoch_start_offset(self, epoch: int, offset: int) -> None:
        pass

    def on_high_watermark(self, high_watermark: int) -> None:
        pass  # no transactions here

    def last_stable_offset(self, high_watermark: int) -> int:
        return high_watermark

    def append(self, n: int) -> None:
        self.log_end_offset += n
        assert self.on_offsets_moved is not None
        self.on_offsets_moved()

    def advance_log_start_offset(self, offset: int) -> None:
        self.log_start_offset = offset
        assert self.on_offsets_moved is not None
        self.on_offsets_moved()

    def read(self, offset: int, max_bytes: int, *, max_offset: int | None = None, min_one_batch: bool = True) -> Any:
        end = self.log_end_offset if max_offset is None else min(max_offset, self.log_end_offset)
        return SimpleNamespace(region=FileRegion(None, offset, end - offset) if end > offset else None)  # type: ignore[arg-type]


class CountingDict(dict[tuple[str, int], Partition]):
    """The replica manager's partitions, counting lookups: what a read looked at."""

    def __init__(self) -> None:
        super().__init__()
        self.looked: list[tuple[str, int]] = []

    def get(self, key: Any, default: Any = None) -> Any:
        self.looked.append(key)
        return super().get(key, default)


class FakeReplicas:
    def __init__(self, purgatory: Purgatory) -> None:
        self.purgatory = purgatory
        self.fetch_sessions = FetchSessionCache(10, purgatory)
        self.partitions = CountingDict()
        self.clock_ms = 0

    def now_ms(self) -> int:
        return self.clock_ms

    def leader_partition(self, topic: str, index: int, leader_epoch: int = -1) -> tuple[Partition, Any]:
        part = self.partitions[(topic, index)]
        if not part.is_leader:
            raise KafkaError(ErrorCode.NOT_LEADER_FOR_PARTITION, f"{topic}-{index}")
        return part, part.log

    def record_follower_fetch(
        self, part: Partition, replica_id: int, fetch_offset: int, log_start_offset: int = -1, session_entry: Any = None
    ) -> None:  # the replica manager's, less the ISR expansion
        part.update_follower(replica_id, fetch_offset, self.now_ms(), log_start_offset, session_entry)
        if part.maybe_increment_high_watermark():
            self.purgatory.notify(part.key)


def _broker(n: int) -> Any:
    purgatory = Purgatory()
    replicas = FakeReplicas(purgatory)
    for i in range(n):
        part = Partition("t", i, broker_id=0)
        lg = FakeLog()
        lg.on_offsets_moved = partial(purgatory.notify, part.key)
        part.make_leader(lg, 1, [0, FOLLOWER], [0, FOLLOWER], 0, 1, 0)  # type: ignore[arg-type]
        dict.__setitem__(replicas.partitions, part.key, part)
    quota = SimpleNamespace(is_throttled=lambda tp: False, is_quota_exceeded=lambda: False)
    metrics = SimpleNamespace(topic_out_child=lambda t: SimpleNamespace(inc=lambda n: None))
    return SimpleNamespace(replicas=replicas, purgatory=purgatory, leader_quota=quota, metrics=metrics, authorizer=None)


def _request(
    session_id: int,
    epoch: int,
    listed: dict[int, int],
    forgotten: tuple[int, ...] = (),
    wait_ms: int = 0,
    log_start: int = 0,
) -> dict[str, Any]:
    """A follower's Fetch listing ``listed`` (partition: fetch offset)."""
    return {
        "replica_id": FOLLOWER,
        "max_wait_ms": wait_ms,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "session_id": session_id,
        "session_epoch": epoch,
        "topics": [
            {
                "topic": "t",
                "partitions": [
                    {
                        "partition": p,
                        "fetch_offset": off,
                        "log_start_offset": log_start,
                        "partition_max_bytes": 1 << 20,
                        "current_leader_epoch": 1,
                    }
                    for p, off in listed.items()
                ],
            }
        ]
        if listed
        else [],
        "forgotten_topics_data": [{"topic": "t", "partitions": list(forgotten)}] if forgotten else [],
    }


def _answered(resp: dict[str, Any]) -> dict[int, tuple[int, int, int]]:
    """partition -> (high watermark, log start offset, record bytes)"""
    return {
        p["partition_index"]: (p["high_watermark"], p["log_start_offset"], p["records"].size if p["records"] else 0)
        for t in resp["responses"]
        for p in t["partitions"]
    }


def _assert_invariant(broker: Any, s: FetchSession) -> None:
    """Every entry a read would skip is idle: skipping it is what the full walk would do."""
    looked = broker.replicas.partitions.looked
    n = len(looked)
    for key, e in s.partitions.items():
        if key not in s.dirty:
            assert fetch._idle(broker, e, FOLLOWER), key
    del looked[n:]  # the check's own lookups are not the handler's


def test_idle_partitions_are_not_looked_at_and_every_event_brings_them_back() -> None:
    async def main() -> None:
        broker = _broker(4)
        replicas, purgatory = broker.replicas, broker.purgatory
        parts = replicas.partitions
        epoch = 1

        async def incremental(listed: dict[int, int] | None = None, wait_ms: int = 0, **kw: Any) -> dict[str, Any]:
            nonlocal epoch
            resp = await fetch.handle(broker, CTX, _request(sid, epoch, listed or {}, wait_ms=wait_ms, **kw))
            epoch += 1
            _assert_invariant(broker, session)
            return resp

        resp = await fetch.handle(broker, CTX, _request(0, 0, dict.fromkeys(range(4), 10)))  # full: opens it
        sid = resp["session_id"]
        session = replicas.fetch_sessions.sessions[sid]
        assert _answered(resp) == dict.fromkeys(range(4), (10, 0, 0))  # the follower's fetch moved the HWs
        assert purgatory.listening() == 4  # one registration per partition for the session's life
        assert _answered(await incremental()) == {}  # looks at each once more: all idle now
        assert session.dirty == {}

        parts.looked.clear()
        for _ in range(5):
            replicas.clock_ms += 500
            assert _answered(await incremental()) == {}
        assert parts.looked == []  # idle rounds look at no partition...
        part0 = parts[("t", 0)]
        assert part0.out_of_sync(replicas.clock_ms + 1, LAG_MS) == []  # ...and keep the follower in sync
        assert part0.followers[FOLLOWER].last_caught_up_ms == 0  # by the session's clock alone

        # an append while the follower's Fetch waits: one registration (the session), woken at once
        waiting = asyncio.ensure_future(incremental(wait_ms=60_000))
        for _ in range(3):
            await asyncio.sleep(0)
        assert not waiting.done() and purgatory.watched() == 0
        parts[("t", 2)].log.append(5)  # type: ignore[union-attr]
        resp = await asyncio.wait_for(waiting, 5)
        assert _answered(resp) == {2: (10, 0, 5)}
        assert set(parts.looked) == {("t", 2)}
        # the follower appends and says so; the HW moves, it is answered once, then idle again
        assert _answered(await incremental({2: 15})) == {2: (15, 0, 0)}
        assert _answered(await incremental()) == {}
        assert session.dirty == {}

        # DeleteRecords (or retention) on the leader: the new log start reaches the follower
        parts[("t", 1)].log.advance_log_start_offset(4)  # type: ignore[union-attr]
        assert _answered(await incremental()) == {1: (10, 4, 0)}
        assert _answered(await incremental({1: 10}, log_start=4)) == {}  # followed: listed, then idle
        assert parts[("t", 1)].low_watermark() == 4  # what a DeleteRecords waits for
        assert _answered(await incremental()) == {} and session.dirty == {}  # looked at once more: idle
        # a role change (LeaderAndIsr to follower): an error for that partition
        p3 = parts[("t", 3)]
        p3.make_follower(p3.log, 2, 2, [2, 0], [2, 0], 1, 1)  # type: ignore[arg-type]
        purgatory.notify(p3.key)
        resp = await incremental()
        assert [(p["partition_index"], p["error_code"]) for t in resp["responses"] for p in t["partitions"]] == [
            (3, ErrorCode.NOT_LEADER_FOR_PARTITION)
        ]
        await incremental(forgotten=(3,))
        assert purgatory.listening() == 3

        # another fetch of the same follower (sessionless) replaces the state the session relied on
        sessionless = _request(0, -1, {0: 10})
        await fetch.handle(broker, CTX, sessionless)
        assert ("t", 0) in session.dirty
        parts.looked.clear()
        assert _answered(await incremental()) == {}
        assert parts.looked == [("t", 0)]  # looked at again, and read: the follower state is the session's again
        assert _answered(await incremental()) == {} and session.dirty == {}

        replicas.fetch_sessions.remove(sid)
        assert purgatory.listening() == 0 and session.dirty == {}

    asyncio.run(main())


def test_session_wait_is_woken_by_its_partitions_and_by_closing() -> None:
    async def main() -> None:
        purgatory = Purgatory()
        cache = FetchSessionCache(10, purgatory)
        s = cache.create(replica_id=FOLLOWER, size=2, now_ms=0)
        assert s is not None
        for i in range(2):
            s.upsert(
                "t",
                {
                    "partition": i,
                    "fetch_offset": 0,
                    "log_start_offset": 0,
                    "partition_max_bytes": 1,
                    "current_leader_epoch": 0,
                },
            )
        assert list(s.dirty) == [("t", 0), ("t", 1)]
        for e in list(s.dirty.values()):
            s.clean(e)
        assert await s.wait(0.001) is False  # nothing notified: times out
        w = asyncio.ensure_future(s.wait(60))
        await asyncio.sleep(0)
        purgatory.notify(("t", 5))  # not one of its partitions
        await asyncio.sleep(0)
        assert not w.done()
        purgatory.notify(("t", 1))
        assert await w is True and list(s.dirty) == [("t", 1)]
        s.rounds = 1
        s.mark_dirty(s.partitions[("t", 0)])
        assert [e.key for e in s.candidates()] == [("t", 0), ("t", 1)]  # rotated one along
        s.forget([("t", 1)])
        purgatory.notify(("t", 1))
        assert list(s.dirty) == [("t", 0)] and purgatory.listening() == 1
        w = asyncio.ensure_future(s.wait(60))
        await asyncio.sleep(0)
        cache.remove(s.id)  # evicted or replaced: the waiting read wakes and finds it closed
        assert await w is True and s.closed and purgatory.listening() == 0
        assert await s.wait(60) is False

    asyncio.run(main())
