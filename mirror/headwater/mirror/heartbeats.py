"""Heartbeats: a dead link shows in seconds, even when no producer writes (MirrorMaker 2's idea).

Every ``emit.heartbeats.interval.seconds`` each mirror process writes, per flow, one small record
into the ``heartbeats`` topic of the flow's SOURCE cluster (one partition, created when missing)::

    key   = "dc2->agg"
    value = {"sourceClusterAlias": "dc2", "targetClusterAlias": "agg", "timestamp": 1764000000000}
    CreateTime = timestamp

The flow mirrors ``heartbeats`` like any other topic (:meth:`Flow.matches` takes it whatever the
topic lists say), through the same fetch and produce path, the same link. When the target
acknowledges a batch of it, :meth:`Heartbeats.acked` keeps the newest timestamp, and
``headwater_mirror_heartbeat_age_seconds{flow}`` is ``now - newest`` computed when Prometheus
scrapes: the end-to-end replication latency of the flow, which grows by one per second while the
flow is cut off, whatever the producers do. The gauge appears once this process copied a heartbeat
(the process that owns the ``heartbeats`` partition; the others have no sample for the flow).

An emitter that cannot write (the source or the link is down) logs one WARNING when it starts
failing and one when it recovers, and keeps trying every interval.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable

from headwater.mirror.config import HEARTBEATS_TOPIC
from headwater.mirror.metrics import MirrorMetrics
from headwater.mirror.writer import SourceWriter

__all__ = ["HEARTBEATS_TOPIC", "Heartbeats", "heartbeat_record"]

log = logging.getLogger("headwater.mirror")

# Heartbeats are only useful while fresh; a day is plenty to look back on an outage.
_TOPIC_CONFIGS = {"retention.ms": str(24 * 3600 * 1000)}


def heartbeat_record(source: str, target: str, timestamp_ms: int) -> tuple[bytes, bytes]:
    """(key, value) of one heartbeat."""
    value = {"sourceClusterAlias": source, "targetClusterAlias": target, "timestamp": timestamp_ms}
    return f"{source}->{target}".encode(), json.dumps(value).encode()


class Heartbeats:
    """The emitters (one task per flow) and the newest heartbeat each flow got acknowledged in the target."""

    def __init__(self, metrics: MirrorMetrics, interval_s: float, clock: Callable[[], float] = time.time) -> None:
        self.metrics = metrics
        self.interval_s = interval_s
        self.clock = clock
        self.newest_ms: dict[str, int] = {}

    def acked(self, flow: str, newest_ms: int) -> None:
        """The target acknowledged heartbeats of ``flow`` up to ``newest_ms`` (a batch's max timestamp)."""
        first = flow not in self.newest_ms
        if newest_ms > self.newest_ms.get(flow, -1):
            self.newest_ms[flow] = newest_ms
        if first:
            self.metrics.heartbeat_age.labels(flow).set_function(lambda: self.age(flow))

    def age(self, flow: str) -> float:
        """Seconds since the newest heartbeat of ``flow`` the target acknowledged (nan: none yet)."""
        newest = self.newest_ms.get(flow)
        return float("nan") if newest is None else max(self.clock() - newest / 1000.0, 0.0)

    async def emit(self, source: str, target: str, writer: SourceWriter, stop: asyncio.Event) -> None:
        """Write one heartbeat per interval into the source until ``stop``."""
        flow = f"{source}->{target}"
        failing = False
        timeout = max(10.0, 5 * self.interval_s)
        while not stop.is_set():
            now_ms = int(self.clock() * 1000)
            key, value = heartbeat_record(source, target, now_ms)
            try:
                await writer.ensure_topic(HEARTBEATS_TOPIC, 1, _TOPIC_CONFIGS)
                await asyncio.wait_for(
                    writer.producer.send_and_wait(HEARTBEATS_TOPIC, value, key, timestamp_ms=now_ms),
                    timeout,
                )
                if failing:
                    log.warning("%s: heartbeats written into the source again", flow)
                failing = False
            except asyncio.CancelledError:
                raise
            except Exception as e:
                if not failing:
                    why = f"{type(e).__name__}: {e}" if str(e) else f"no acknowledgement within {timeout:.0f} s"
                    log.warning(
                        "%s: cannot write heartbeats into the source (%s); retrying every %.1f s "
                        "(headwater_mirror_heartbeat_age_seconds grows meanwhile)",
                        flow,
                        why,
                        self.interval_s,
                    )
                failing = True
            try:
                await asyncio.wait_for(stop.wait(), self.interval_s)
            except TimeoutError:
                pass
