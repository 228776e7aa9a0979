"""The lag's end offsets (mirror/headwater/mirror/lag.py), read from a real source cluster: one
ListOffsets per broker for all the partitions, the values handed to their copiers; a broker down
keeps its partitions' last values and is logged once, not every round, and once when it is back.
The lag's growth behind a stalled target is tests/mirror/test_mirror_lag.py."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from headwater.client.consumer import Consumer
from headwater.mirror.lag import EndOffsets
from tests.cluster.harness import Cluster
from tests.cluster.util import create_topic
from tests.mirror.util import produce_keyed

TOPIC = "clicks"
PARTITIONS = 4


def test_end_offsets_follow_the_source_and_a_broker_down_keeps_the_last_value_logged_once(
    cluster_factory: Callable[..., Cluster], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    src = cluster_factory(2)
    create_topic(src, TOPIC, partitions=PARTITIONS, rf=1, min_isr=1)
    leaders = {p: int(src.state(TOPIC, p)["leader"]) for p in range(PARTITIONS)}
    down = leaders[0]
    assert set(leaders.values()) == {1, 2}, leaders  # both brokers lead some
    assert produce_keyed(src.bootstrap, TOPIC, 200, prefix="a") == 200
    tps = [(TOPIC, p) for p in range(PARTITIONS)]
    seen: dict[tuple[str, int], int] = {}

    async def main() -> None:
        consumer = Consumer(src.bootstrap, isolation_level=1, request_timeout_ms=5000, connect_timeout_ms=2000)
        refresh = EndOffsets("dc1->agg", consumer, lambda: {tp: _setter(seen, tp) for tp in tps}, 0.1)
        try:
            await refresh.refresh()
            first = dict(seen)
            assert sum(first.values()) == 200 and len(first) == PARTITIONS, first
            requests = _list_offsets_requests(src)
            await refresh.refresh()
            assert _list_offsets_requests(src) - requests == 2, "one ListOffsets per source broker"

            await asyncio.to_thread(src.stop, down)
            for _ in range(5):  # several rounds while the broker is down
                await refresh.refresh()
            assert {tp for tp in refresh.failing} == {(TOPIC, p) for p, b in leaders.items() if b == down}
            for tp in refresh.failing:
                assert seen[tp] == first[tp], "the last value is kept"
            warnings = [r for r in caplog.records if r.levelno == logging.WARNING and "end offset" in r.message]
            assert len(warnings) == 1, [r.message for r in warnings]
            assert f"{TOPIC}-0" in warnings[0].message and "logged once" in warnings[0].message

            await asyncio.to_thread(src.restart, down)
            deadline = asyncio.get_running_loop().time() + 90
            while refresh.failing:
                assert asyncio.get_running_loop().time() < deadline, f"still failing: {refresh.failing}"
                await asyncio.sleep(0.2)
                await refresh.refresh()
            again = [r for r in caplog.records if "again" in r.message and "end offset" in r.message]
            assert len(again) == 1, [r.message for r in again]
            assert sum(seen.values()) == 200
        finally:
            await consumer.close()

    with caplog.at_level(logging.INFO, logger="headwater.mirror"):
        asyncio.run(main())


def _setter(seen: dict[tuple[str, int], int], tp: tuple[str, int]) -> Callable[[int], None]:
    def set_end(offset: int) -> None:
        seen[tp] = offset

    return set_end


def _list_offsets_requests(src: Cluster) -> float:
    total = 0.0
    for b in src.live_ids():
        total += src.metric(b, "kafka_network_requestmetrics_requests_total", request="ListOffsets") or 0.0
    return total
