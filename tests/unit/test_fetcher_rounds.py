"""The follower's fetch rounds (KIP-227): an idle round builds and compares no partition, yet the
fetch state it sends is always what a full rebuild would send (appends, log start moves,
parking, removal, throttling)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from types import SimpleNamespace
from typing import Any

from headwater.broker.partition import Partition
from headwater.broker.purgatory import Purgatory
from headwater.broker.replica_fetcher import ReplicaFetcher
from headwater.protocol.errors import ErrorCode

MAX_BYTES = 1 << 20


@dataclass
class FakeLog:
    log_end_offset: int = 10
    log_start_offset: int = 0
    on_offsets_moved: Callable[[], None] | None = None

    def moved(self, end: int, start: int) -> None:
        self.log_end_offset, self.log_start_offset = end, start
        assert self.on_offsets_moved is not None
        self.on_offsets_moved()

    def on_high_watermark(self, high_watermark: int) -> None:
        pass  # no transactions here

    def last_stable_offset(self, high_watermark: int) -> int:
        return high_watermark


def _from_scratch(f: ReplicaFetcher, over: bool) -> dict[tuple[str, int], tuple[int, int, int, int]]:
    """What the fetcher sent before it kept its state: every ready partition, built again."""
    out = {}
    for tp, st in f.partitions.items():
        if st.parked_until > 0 or not st.truncated:
            continue
        if over and 0 not in st.partition.isr and tp == ("t", 1):
            continue
        assert st.partition.log is not None
        out[tp] = (st.partition.log.log_end_offset, st.partition.log.log_start_offset, st.leader_epoch, MAX_BYTES)
    return out


def test_idle_rounds_build_nothing_and_match_a_full_rebuild() -> None:
    async def main() -> None:
        purgatory = Purgatory()
        over = False
        quota = SimpleNamespace(is_quota_exceeded=lambda: over, is_throttled=lambda tp: tp == ("t", 1))
        cfg = SimpleNamespace(
            inter_broker_security=None,
            replica_fetch_wait_max_ms=500,
            replica_fetch_backoff_ms=1000,
            replica_fetch_max_bytes=MAX_BYTES,
        )
        broker: Any = SimpleNamespace(broker_id=0, config=cfg, purgatory=purgatory, follower_quota=quota)
        f = ReplicaFetcher(broker, 1, ("127.0.0.1", 1))
        f.closed = True
        f.task.cancel()  # the rounds are driven by hand below
        await asyncio.gather(f.task, return_exceptions=True)
        logs = {}
        for i in range(3):
            part = Partition("t", i, broker_id=0)
            lg = logs[i] = FakeLog()
            lg.on_offsets_moved = partial(purgatory.notify, part.key)
            part.make_follower(lg, 1, 5, [1, 0], [1, 0], 0, 1)  # type: ignore[arg-type]
            f.add(part)
        assert purgatory.listening() == 3

        def round_() -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
            f._unpark(float("inf") if unpark else 0.0)
            changed = f._build_wanted()
            assert f._wanted == _from_scratch(f, over)
            _, _, listed, forgotten = f.session.build(f._wanted, changed)
            f.session.on_response(ErrorCode.NONE, 42)
            return sorted(listed), sorted(forgotten)

        unpark = False
        assert round_() == ([], [])  # nothing truncated yet: nothing to fetch
        for tp, st in f.partitions.items():
            f._set_truncated(tp, st, True)
        assert round_() == ([("t", 0), ("t", 1), ("t", 2)], [])  # full: opens the session
        assert round_() == ([], []) and not f._dirty  # idle: nothing built, nothing compared
        logs[1].moved(12, 0)  # an append from the last answer
        assert round_() == ([("t", 1)], [])
        logs[2].moved(10, 3)  # this replica's retention (or the leader's log start, followed)
        assert round_() == ([("t", 2)], [])
        f._park(("t", 0), f.partitions[("t", 0)], "NOT_LEADER_FOR_PARTITION")
        assert round_() == ([], [("t", 0)])
        unpark = True
        f.partitions[("t", 0)].parked_until = 0.0
        assert round_() == ([("t", 0)], [])
        unpark = False
        over = True  # the follower throttle: t-1 (out of sync, throttled) is left out, all rebuilt
        f.partitions[("t", 1)].partition.isr = [1]
        assert round_() == ([], [("t", 1)])
        over = False
        assert round_() == ([("t", 1)], [])  # back, by one more full rebuild
        assert round_() == ([], []) and not f._throttling
        f.remove(("t", 2))
        assert round_() == ([], [("t", 2)]) and purgatory.listening() == 2
        f.session.reset()  # a lost connection: full again, from the state kept
        assert round_() == ([("t", 0), ("t", 1)], [])
        await f.stop()
        assert purgatory.listening() == 0

    asyncio.run(main())
