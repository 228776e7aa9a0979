"""No silent loss: what the mirror does when the source no longer holds the offset it needs.

A copier's next offset can fall below the source partition's log start offset when retention
outran an outage (a cut link, a stopped mirror). The source then answers ``OFFSET_OUT_OF_RANGE``.
MirrorMaker (1 and 2) resets and moves on, and the loss is silent. Here the copier hands the
error to :meth:`GapReporter.out_of_range`, which

1. reads the partition's log start and log end offsets (ListOffsets);
2. when the needed offset is below the log start, records the exact range lost,
   ``[needed, log start)`` — offsets are dense in a non-compacted topic, so ``records`` is the
   difference — logs it at ERROR, counts it in ``headwater_mirror_records_lost_total{flow,topic}``
   and publishes a ``gap`` event (the format in docs/pipeline.md, "Gap events") on the SOURCE
   cluster's ``__audit`` topic, so the audit service attributes the loss to the mirror hop;
3. then follows ``mirror.on.data.loss``: ``report`` (default) resumes at the log start, ``stop``
   raises :class:`DataLossError` (a :class:`~headwater.service.supervisor.FatalError`): that
   partition stops, loudly, and the others keep going.

A needed offset *above* the log end (the topic was deleted and re-created, or an unclean leader
election truncated the log) loses nothing the mirror can name: it is logged at ERROR and the copier
resumes per ``auto.offset.reset``; ``latest`` is where the flow's ``isolation.level`` reads up to:
the last stable offset under ``read_committed`` (the default: resuming at the high watermark would
skip the records of a transaction still open there, copied once it commits), the high watermark
under ``read_uncommitted``. An offset back in range (the error came from a leader that
changed meanwhile) is fetched again as it is.

A gap's guid is derived from the hop, the partition and the range, so a mirror that crashes after
publishing and before committing, and finds the same gap again, publishes the same guid (the audit
stores each guid once).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from headwater.client.audit import AUDIT_TOPIC, HEADER_SIGNATURE, sign_event
from headwater.client.cluster import Cluster
from headwater.client.consumer import EARLIEST, LATEST, Consumer
from headwater.client.raw import READ_COMMITTED
from headwater.mirror.metrics import MirrorMetrics
from headwater.mirror.writer import SourceWriter
from headwater.service.supervisor import FatalError

__all__ = ["ON_DATA_LOSS", "DataLossError", "Gap", "GapReporter", "reporter_for"]

log = logging.getLogger("headwater.mirror")

ON_DATA_LOSS = ("report", "stop")
_GUIDS = uuid.UUID("6a0f3c1e-8f0b-4a53-9d55-2f1f8f3c9a10")  # namespace of gap guids


@dataclass(frozen=True)
class Gap:
    """Records of one source partition the mirror can no longer copy: ``[from_offset, to_offset)``."""

    source: str
    target: str
    topic: str
    partition: int
    from_offset: int  # first offset lost
    to_offset: int  # first offset not lost: the log start the mirror resumes from
    reason: str
    detected_ms: int

    @property
    def hop(self) -> str:
        return f"{self.source}->{self.target}"

    @property
    def records(self) -> int:
        return self.to_offset - self.from_offset

    @property
    def guid(self) -> str:
        name = f"{self.hop}/{self.topic}/{self.partition}/{self.from_offset}-{self.to_offset}"
        return uuid.uuid5(_GUIDS, name).hex

    def event(self) -> dict[str, Any]:
        """The ``gap`` event as the audit service reads it from ``__audit``."""
        return {
            "type": "gap",
            "guid": self.guid,
            "tier": self.target,
            "hop": self.hop,
            "datacenter": self.source,
            "topic": self.topic,
            "partition": self.partition,
            "from_offset": self.from_offset,
            "to_offset": self.to_offset,
            "records": self.records,
            "reason": self.reason,
            "detected_ms": self.detected_ms,
        }

    def describe(self) -> str:
        return (
            f"lost at mirror {self.hop}: {self.reason}, {self.records} records of {self.topic}-{self.partition}, "
            f"offsets {self.from_offset}-{self.to_offset - 1}"
        )


class DataLossError(FatalError):
    """``mirror.on.data.loss = stop``: the partition stops after its gap was reported."""


Offsets = Callable[[str, int], Awaitable[tuple[int, int]]]  # (topic, partition) -> (log start, log end)
Publish = Callable[[str, bytes, bytes], Awaitable[None]]  # (topic, key, value), acknowledged when it returns
Lost = Callable[[str, int], None]  # (topic, records): the records-lost counter
Latest = Callable[[str, int], Awaitable[int]]  # (topic, partition) -> the end at the flow's isolation level


class GapReporter:
    """One flow's answer to ``OFFSET_OUT_OF_RANGE`` (see the module docstring)."""

    def __init__(
        self,
        source: str,
        target: str,
        *,
        on_data_loss: str,
        offsets: Offsets,
        publish: Publish,
        lost: Lost,
        reset_to_latest: bool = False,
        clock: Callable[[], float] = time.time,
        latest: Latest | None = None,
    ) -> None:
        if on_data_loss not in ON_DATA_LOSS:
            raise ValueError(f"mirror.on.data.loss: {on_data_loss!r} is not report or stop")
        self.source, self.target = source, target
        self.on_data_loss = on_data_loss
        self.offsets = offsets
        self.publish = publish
        self.lost = lost
        self.reset_to_latest = reset_to_latest
        self.clock = clock
        self.latest = latest  # None: the log end of ``offsets``
        self.reported: list[Gap] = []

    async def out_of_range(self, topic: str, partition: int, needed: int) -> int:
        """The offset to fetch next after the source refused ``needed``; raises DataLossError (stop)."""
        log_start, log_end = await self.offsets(topic, partition)
        flow = f"{self.source}->{self.target}"
        if needed < log_start:
            gap = Gap(
                self.source,
                self.target,
                topic,
                partition,
                needed,
                log_start,
                "source retention",
                int(self.clock() * 1000),
            )
            log.error(
                "%s: %s-%d: offset %d is below the source's log start %d: %s (gap %s)",
                flow,
                topic,
                partition,
                needed,
                log_start,
                gap.describe(),
                gap.guid,
            )
            self.lost(topic, gap.records)
            await self.publish(AUDIT_TOPIC, gap.guid.encode(), json.dumps(gap.event()).encode())
            self.reported.append(gap)
            if self.on_data_loss == "stop":
                raise DataLossError(f"{gap.describe()}; mirror.on.data.loss = stop: {topic}-{partition} stopped")
            return log_start
        if needed > log_end:
            if not self.reset_to_latest:
                resume = log_start
            elif self.latest is not None:
                resume = await self.latest(topic, partition)
            else:
                resume = log_end
            log.error(
                "%s: %s-%d: offset %d is beyond the source's log end %d (topic re-created, or the log truncated): "
                "nothing the mirror can name is lost; resuming at %d",
                flow,
                topic,
                partition,
                needed,
                log_end,
                resume,
            )
            if self.on_data_loss == "stop":
                raise DataLossError(
                    f"{topic}-{partition}: offset {needed} beyond the log end {log_end}; mirror.on.data.loss = stop"
                )
            return resume
        log.info(
            "%s: %s-%d: offset %d is in range again (%d-%d): fetching it again",
            flow,
            topic,
            partition,
            needed,
            log_start,
            log_end,
        )
        return needed


def reporter_for(
    source: str,
    target: str,
    cluster: Cluster,
    writer: SourceWriter,
    metrics: MirrorMetrics,
    *,
    on_data_loss: str,
    reset_to_latest: bool,
    signing_key: bytes | None = None,
    isolation_level: int = READ_COMMITTED,
) -> GapReporter:
    """A flow's reporter wired to its source cluster (ListOffsets, ``__audit``) and the mirror's
    metrics. The log end it compares with is the high watermark (a source answers
    OFFSET_OUT_OF_RANGE only above it); it resumes ``latest`` at the end for ``isolation_level``
    (the last stable offset under read_committed)."""
    flow = f"{source}->{target}"

    async def offsets(topic: str, partition: int) -> tuple[int, int]:
        consumer = Consumer("", cluster=cluster)
        start = (await consumer.offsets_before(topic, partition, EARLIEST, 1))[0]
        end = (await consumer.offsets_before(topic, partition, LATEST, 1))[0]
        return start, end

    async def latest(topic: str, partition: int) -> int:
        # ListOffsets v2+ (v0, offsets_before, has no isolation level: it answers the high watermark)
        consumer = Consumer("", cluster=cluster, isolation_level=isolation_level)
        return await consumer.latest_offset(topic, partition)

    async def publish(topic: str, key: bytes, value: bytes) -> None:
        # signed as audited producers sign their count events, when the audit service checks them
        headers = ((HEADER_SIGNATURE, sign_event(value, signing_key)),) if signing_key else ()
        await writer.send(topic, key, value, headers=headers)

    def lost(topic: str, records: int) -> None:
        metrics.records_lost.labels(flow, topic).inc(records)

    return GapReporter(
        source,
        target,
        on_data_loss=on_data_loss,
        offsets=offsets,
        publish=publish,
        lost=lost,
        reset_to_latest=reset_to_latest,
        latest=latest,
    )
