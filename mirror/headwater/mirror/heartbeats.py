"""Heartbeats: a dead link shows in seconds, even when no producer writes (MirrorMaker 2's idea),
in MirrorMaker 2's record format.

Every ``emit.heartbeats.interval.seconds`` each mirror process writes, per flow, one record into
the ``heartbeats`` topic of the flow's SOURCE cluster (one partition, created when missing), in
MM2's ``Heartbeat`` format (``org.apache.kafka.connect.mirror.Heartbeat``, the Struct encoding of
``checkpoints.py``: protocol STRINGs and big-endian integers)::

    key   = sourceClusterAlias: STRING, targetClusterAlias: STRING      ("dc2", "agg")
    value = version: INT16 (0), timestamp: INT64                        (HEADER_SCHEMA, VALUE_SCHEMA_V0)
    CreateTime = timestamp

The flow mirrors ``heartbeats`` like any other topic (:meth:`Flow.matches` takes it whatever the
topic lists say), through the same fetch and produce path, the same link: under
IdentityReplicationPolicy into the target's ``heartbeats`` -- where MM2's heartbeat connector for
``dc2->agg`` writes exactly these records -- and under DefaultReplicationPolicy into
``dc2.heartbeats`` (MM2's name: ``RemoteClusterUtils.replicationHops(agg, "dc2")`` is 1), upstream
``<alias>.heartbeats`` topics too (two hops: ``dc0.heartbeats`` in dc2 becomes ``dc2.dc0.heartbeats``).
Under DefaultReplicationPolicy the mirror also writes each flow's record straight into the
target's ``heartbeats`` (MM2's ``MirrorHeartbeatConnector``); that one proves nothing about the link,
which is why the audit never reads it (it reads the mirrored ones, ``heartbeats.topic``).

MM2 itself writes, into dc2, the heartbeats of the reverse pair (key ``("agg", "dc2")``); the
mirror's source record carries its own flow's key ``("dc2", "agg")``, so that what lands in the
target is MM2's record for the flow, and the audit reads the datacenter from it.

Under IdentityReplicationPolicy the copier drops a heartbeat whose ``sourceClusterAlias`` is the
flow's target: it was written in the target, and mirroring it back would loop it between two
clusters mirrored both ways (the names say nothing there; DefaultReplicationPolicy's cycle
detection stops ``<target>.heartbeats``).

When the target acknowledges a batch of the source's ``heartbeats``, :meth:`Heartbeats.acked` keeps
the newest timestamp, and ``headwater_mirror_heartbeat_age_seconds{flow}`` is ``now - newest``
computed when Prometheus scrapes: the end-to-end replication latency of the flow, which grows by
one per second while the flow is cut off, whatever the producers do. The gauge appears once this
process copied a heartbeat (the process that owns the ``heartbeats`` partition; the others have no
sample for the flow).

An emitter that cannot write (the source or the link is down) logs one WARNING when it starts
failing and one when it recovers, and keeps trying every interval.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass

from headwater.mirror.checkpoints import _read_string, _string
from headwater.mirror.config import HEARTBEATS_TOPIC
from headwater.mirror.metrics import MirrorMetrics
from headwater.mirror.writer import SourceWriter
from headwater.service.supervisor import wait_or_stop

__all__ = ["HEARTBEATS_TOPIC", "Heartbeat", "Heartbeats", "decode_heartbeat", "heartbeat_record"]

log = logging.getLogger("headwater.mirror")

# Heartbeats are only useful while fresh; a day is plenty to look back on an outage.
_TOPIC_CONFIGS = {"retention.ms": str(24 * 3600 * 1000)}


HEARTBEAT_VERSION = 0


@dataclass(frozen=True)
class Heartbeat:
    source: str
    target: str
    timestamp_ms: int


def heartbeat_record(source: str, target: str, timestamp_ms: int) -> tuple[bytes, bytes]:
    """(key, value) of one heartbeat, as MM2's ``Heartbeat.recordKey()/recordValue()`` (version 0)."""
    return _string(source) + _string(target), struct.pack(">hq", HEARTBEAT_VERSION, timestamp_ms)


def decode_heartbeat(key: bytes | None, value: bytes | None) -> Heartbeat:
    """Raises ValueError for anything that is not an MM2 heartbeat (MM2 reads any version >= 0 as V0)."""
    if key is None or value is None:
        raise ValueError("a heartbeat has a key and a value")
    try:
        source, at = _read_string(key, 0)
        target, at = _read_string(key, at)
        version, timestamp = struct.unpack_from(">hq", value, 0)
    except struct.error as e:
        raise ValueError(f"not a heartbeat: {e}") from None
    if at != len(key) or version < 0:
        raise ValueError("not a heartbeat")
    return Heartbeat(source, target, timestamp)


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

    async def emit(
        self,
        source: str,
        target: str,
        writer: SourceWriter,
        stop: asyncio.Event,
        target_writer: SourceWriter | None = None,
    ) -> None:
        """Write one heartbeat per interval into the source (and, with ``target_writer``, straight
        into the target: DefaultReplicationPolicy) until ``stop``."""
        flow = f"{source}->{target}"
        failing = {"source": False, "target": False}
        timeout = max(10.0, 5 * self.interval_s)
        while not stop.is_set():
            now_ms = int(self.clock() * 1000)
            key, value = heartbeat_record(source, target, now_ms)
            for where, w in (("source", writer), ("target", target_writer)):
                if w is None:
                    continue
                try:
                    await w.ensure_topic(HEARTBEATS_TOPIC, 1, _TOPIC_CONFIGS)
                    await asyncio.wait_for(
                        w.producer.send_and_wait(HEARTBEATS_TOPIC, value, key, timestamp_ms=now_ms), timeout
                    )
                    if failing[where]:
                        log.warning("%s: heartbeats written into the %s again", flow, where)
                    failing[where] = False
                except asyncio.CancelledError:
                    raise
                except Exception as e:
                    if not failing[where]:
                        why = f"{type(e).__name__}: {e}" if str(e) else f"no acknowledgement within {timeout:.0f} s"
                        log.warning(
                            "%s: cannot write heartbeats into the %s (%s); retrying every %.1f s%s",
                            flow,
                            where,
                            why,
                            self.interval_s,
                            " (headwater_mirror_heartbeat_age_seconds grows meanwhile)" if where == "source" else "",
                        )
                    failing[where] = True
            await wait_or_stop(stop, self.interval_s)
