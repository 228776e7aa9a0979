"""``spark.readStream.format("headwater")``: a Kafka cluster read as a stream of offset ranges.

    q = (spark.readStream.format("headwater")
         .option("kafka.bootstrap.servers", "agg-broker1:9092")
         .option("subscribePattern", "page-.*")           # or subscribe, assign
         .option("startingOffsets", "earliest")           # default latest, as Spark's
         .option("maxOffsetsPerTrigger", 100000)
         .load()
         .writeStream.option("checkpointLocation", "/data/ck/views")
         .trigger(availableNow=True)
         .parquet("/data/views"))

A PySpark :class:`DataSourceStreamReader`, the offsets being Spark's Kafka source's: one JSON object
``{"topic": {"partition": next offset to read}}``, which Spark writes to the query's checkpoint
(``offsets/<batch>``) before the batch runs and hands back on restart, so a query killed at any
point re-reads exactly the batch it had planned and goes on from there. The reader keeps no
position of its own: :meth:`latestOffset` plans a batch's end from its start, :meth:`partitions`
turns ``[start, end)`` into one input partition per topic-partition (split further for
``minPartitions``), and :meth:`read` runs on the executors with the batch reader's
:func:`~headwater.loader.source.read_range` (the same fetches, Arrow batches and read bounds).

The initial offsets (``startingOffsets``, ``startingOffsetsByTimestamp``, ``startingTimestamp``) are
resolved to numbers when the query first starts. Partitions that appear later (a new topic matching
``subscribePattern``, partitions added to a topic) are read from their log start, as Spark does.

Admission control (PySpark 4.2+'s ``ReadLimit``): ``maxOffsetsPerTrigger`` caps the offsets a batch
spans, shared among the partitions in proportion to what each has waiting (every offset counts,
transaction markers too, as in Spark); ``minOffsetsPerTrigger`` holds a batch back until that many
offsets wait or ``maxTriggerDelay`` (default 15m) passed since the last batch. PySpark's
``ReadLimit`` has no composite, so :meth:`getDefaultReadLimit` reports the cap (or the minimum) and
the reader applies both from its options unless Spark asks for everything (``ReadAllAvailable``:
``Trigger.Once``). ``Trigger.AvailableNow`` (:class:`SupportsTriggerAvailableNow`): the offsets at
the query's start are its target; batches (capped as above) run up to it and the query stops.

``kafka.isolation.level`` works as in the batch reader: read_committed ends each batch at the last
stable offsets and leaves out aborted transactions. The default is read_uncommitted, as in Spark's
Kafka source and Kafka's consumer; the warehouse's streaming load (``headwater load --continuous``)
reads read_committed.

Offsets the cluster no longer holds (retention passed the batch's start, or a topic re-created below
it) fail the query unless ``failOnDataLoss`` is false (then they are skipped with a warning).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from headwater.loader.offsets import DataLoss, DataLossError, OffsetRange, split
from headwater.loader.options import (
    SourceOptions,
    TopicPartition,
    current,
    offsets_json,
    offsets_of,
    starting_offsets,
)
from headwater.loader.source import RangePartition, ReadBounds, read_partition

log = logging.getLogger("headwater.loader.stream")


def rate_limit(
    start: dict[TopicPartition, int], latest: dict[TopicPartition, int], limit: int
) -> dict[TopicPartition, int]:
    """Ends that span at most ``limit`` offsets in all, shared in proportion to what each partition
    has waiting (largest remainders first, so the total is exactly ``limit`` when more waits)."""
    waiting = {tp: max(latest[tp] - start.get(tp, latest[tp]), 0) for tp in latest}
    total = sum(waiting.values())
    if total <= limit:
        return dict(latest)
    shares = {tp: limit * n / total for tp, n in waiting.items()}
    taken = {tp: int(s) for tp, s in shares.items()}
    left = limit - sum(taken.values())
    for tp in sorted(shares, key=lambda tp: (taken[tp] - shares[tp], tp))[:left]:
        taken[tp] += 1
    return {tp: min(start.get(tp, latest[tp]) + taken[tp], latest[tp]) for tp in latest}


class HeadwaterStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Lives in the driver's Python planner process for the life of the query (Spark calls
    :meth:`initialOffset`, :meth:`latestOffset`, :meth:`partitions` and :meth:`commit` on one
    instance); a copy runs :meth:`read` in each task."""

    def __init__(self, options: dict[str, str], clock: Any = time.monotonic) -> None:
        self.options = SourceOptions.parse(options, stream=True)
        self.bounds = ReadBounds.from_options({k.lower(): v for k, v in options.items()})
        self._clock = clock
        self._target: dict[TopicPartition, int] | None = None  # Trigger.AvailableNow's end
        self._last_batch = clock()  # for maxTriggerDelay
        self._latest: dict[str, dict[str, int]] | None = None

    # -- planning (driver) -----------------------------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:
        offsets, losses = starting_offsets(self.options)
        for loss in losses:
            log.warning("failOnDataLoss=false: %s; starting at offset %d", loss.describe(), loss.log_start)
        log.info("initial offsets: %s", offsets_json(offsets))
        return offsets_json(offsets)

    def getDefaultReadLimit(self) -> ReadLimit:
        o = self.options
        if o.max_offsets_per_trigger is not None:
            return ReadMaxRows(o.max_offsets_per_trigger)
        if o.min_offsets_per_trigger is not None:
            return ReadMinRows(o.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = {tp: s.latest for tp, s in current(self.options).items()}
        log.info("Trigger.AvailableNow: reading up to %s", offsets_json(self._target))

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = offsets_of(start)
        state = current(self.options)
        if self._target is not None:  # AvailableNow: never past the offsets at the query's start
            latest = {tp: min(s.latest, self._target.get(tp, s.earliest)) for tp, s in state.items()}
        else:
            latest = {tp: s.latest for tp, s in state.items()}
        for tp, s in state.items():  # a new partition starts at its log start
            begin.setdefault(tp, s.earliest)
        # A log end below the start (a topic re-created) is kept: partitions() reports that loss.
        self._latest = offsets_json(latest)
        o = self.options
        if isinstance(limit, ReadAllAvailable):
            end = latest
        else:
            max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else o.max_offsets_per_trigger
            min_rows = limit.min_rows if isinstance(limit, ReadMinRows) else o.min_offsets_per_trigger
            waiting = sum(max(latest[tp] - begin[tp], 0) for tp in latest)
            if (
                min_rows is not None
                and self._target is None  # AvailableNow must reach its target: no waiting for more
                and waiting < min_rows
                and self._clock() - self._last_batch < o.max_trigger_delay_ms / 1000.0
            ):
                log.debug("%d offset(s) wait, below minOffsetsPerTrigger %d: no batch yet", waiting, min_rows)
                end = {tp: begin[tp] for tp in latest}
            else:
                end = rate_limit(begin, latest, max_rows) if max_rows is not None else latest
        # Partitions the start names that are gone from the cluster (a topic deleted) keep their offset.
        out = {**offsets_of(start), **end}
        if out != offsets_of(start):
            self._last_batch = self._clock()
        return offsets_json(out)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return self._latest

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin, stop = offsets_of(start), offsets_of(end)
        o = self.options
        new = [tp for tp in stop if tp not in begin]
        if new:  # the batch's end names a partition its start does not: read it from its log start
            state = current(o)
            for tp in new:
                begin[tp] = state[tp].earliest if tp in state else stop[tp]
        ranges: list[OffsetRange] = []
        losses: list[DataLoss] = []
        for tp, e in sorted(stop.items()):
            s = begin[tp]
            if s > e:  # the log is shorter than where the query was: re-created or truncated
                losses.append(DataLoss(tp[0], tp[1], s, s, "topic re-created", -1, e))
                continue
            ranges.append(OffsetRange(tp[0], tp[1], s, e))
        if losses:
            if o.fail_on_data_loss:
                raise DataLossError(losses)
            for loss in losses:
                log.warning("failOnDataLoss=false: %s", loss.describe())
        return [RangePartition(r) for r in split(ranges, o.min_partitions)]

    def commit(self, end: dict[str, Any]) -> None:
        log.debug("batch done up to %s", end)

    # -- reading (executors) ---------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition, self.options, self.bounds)
