"""``headwater load --continuous``: the warehouse load as a Spark streaming query, exactly once.

    headwater load -c loader.properties --continuous                 # a run every stream.trigger.interval
    headwater load -c loader.properties --continuous --trigger hourly
    headwater load -c loader.properties --available-now              # catch up in bounded runs, then stop

A ``readStream.format("headwater")`` query (read_committed, every topic matching ``topics``) whose
micro-batches are warehouse runs: each batch's records are staged, checked, claimed and published by
the nightly load's own code (:func:`headwater.loader.job._stage_and_publish`), so a batch is one
``run=`` directory per topic and one committed manifest, and the audit events follow as after a
nightly run. The nightly job (``headwater load`` without these flags) is unchanged and the two can
take turns on one warehouse: both take the warehouse's lock, both resume from the manifests.

Two logs hold offsets: Spark's checkpoint (``stream.checkpoint.location``, default
``<warehouse>/_headwater/checkpoint``: ``offsets/<batch>`` is written before a batch runs,
``commits/<batch>`` after) and the warehouse's manifests (the commit point of the data). The
manifests decide. A batch's ranges run from the newest committed manifest's end (for a partition
it never loaded: the batch's start in the checkpoint) to the batch's end in ``offsets/<batch>``:

- killed before the manifest's commit: the run never happened; Spark re-runs the batch from its
  checkpoint on restart (the same ends) and the run publishes then;
- killed after the commit, before Spark's ``commits/<batch>``: Spark re-runs the batch; its ranges
  from the manifest's end are empty, so nothing is written twice;
- the warehouse ahead of the checkpoint (a nightly run in between): the batch's records below the
  manifest's end are left out; behind it (a checkpoint of another warehouse, or manifests deleted):
  offsets would never be loaded, so the query fails and says so.

Properties (beside the nightly's): ``stream.checkpoint.location``, ``stream.trigger.interval``
(Spark's processing-time interval, default ``1 minute``; ``--trigger`` overrides it, ``hourly`` is
``1 hour``), ``maxOffsetsPerTrigger`` (caps a run, Spark's admission control).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from headwater.loader.job import (
    LoaderConfig,
    _recover,
    _resume,
    _stage_and_publish,
    spark_session,
)
from headwater.loader.lock import LockGuard
from headwater.loader.offsets import OffsetRange
from headwater.loader.options import SourceOptions, current, offsets_json
from headwater.loader.warehouse import Warehouse

log = logging.getLogger("headwater.loader.continuous")

CHECKPOINT = "_headwater/checkpoint"
TRIGGERS = {"hourly": "1 hour", "minutely": "1 minute"}
PLANNER_ATTEMPTS = 3


class CheckpointAheadError(RuntimeError):
    """Spark's checkpoint starts a batch past what the warehouse committed: offsets would be lost."""


@dataclass(frozen=True)
class StreamSettings:
    checkpoint: str | None = None  # default: <warehouse>/_headwater/checkpoint
    interval: str = "1 minute"
    available_now: bool = False
    max_offsets_per_trigger: int | None = None

    @classmethod
    def from_properties(cls, props: dict[str, str], trigger: str | None, available_now: bool) -> StreamSettings:
        raw = (props.get("maxOffsetsPerTrigger") or "").strip()
        try:
            cap = int(raw) if raw else None
        except ValueError:
            raise ValueError(f"maxOffsetsPerTrigger: {raw!r} is not an integer") from None
        if cap is not None and cap < 1:
            raise ValueError(f"maxOffsetsPerTrigger: {cap} must be >= 1")
        interval = (trigger or props.get("stream.trigger.interval") or "1 minute").strip()
        return cls(
            checkpoint=(props.get("stream.checkpoint.location") or "").strip() or None,
            interval=TRIGGERS.get(interval.lower(), interval),
            available_now=available_now,
            max_offsets_per_trigger=cap,
        )


def _read_text(spark: Any, path: str) -> str | None:
    jvm = spark._jvm
    p = jvm.org.apache.hadoop.fs.Path(path)
    fs = p.getFileSystem(spark._jsc.hadoopConfiguration())
    if not fs.exists(p):
        return None
    stream = fs.open(p)
    try:
        return bytes(jvm.org.apache.commons.io.IOUtils.toByteArray(stream)).decode()
    finally:
        stream.close()


def batch_offsets(spark: Any, checkpoint: str, batch: int) -> dict[tuple[str, int], int] | None:
    """The source offsets Spark logged for ``batch`` (``offsets/<batch>``: a version line, the
    batch's metadata, then one line per source; this query has one), or None when absent."""
    text = _read_text(spark, f"{checkpoint.rstrip('/')}/offsets/{batch}")
    if text is None:
        return None
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) < 3 or not lines[0].startswith("v"):
        raise RuntimeError(f"{checkpoint}/offsets/{batch}: not a Spark offset log entry as expected: {text[:200]!r}")
    data = json.loads(lines[2])
    return {(str(t), int(p)): int(o) for t, parts in data.items() for p, o in parts.items()}


def plan_batch_ranges(
    reached: dict[str, dict[int, int]],
    start: dict[tuple[str, int], int],
    end: dict[tuple[str, int], int],
) -> list[OffsetRange]:
    """The run's ranges for a micro-batch ``[start, end)``: from the warehouse's end where it has one."""
    ranges = []
    for (t, p), e in sorted(end.items()):
        s = start.get((t, p))
        w = reached.get(t, {}).get(p)
        if w is not None and s is not None and s > w:
            raise CheckpointAheadError(
                f"{t}-{p}: the checkpoint's batch starts at offset {s} but the warehouse's newest run ends at {w}: "
                f"offsets [{w}, {s}) would never be loaded. Is stream.checkpoint.location another warehouse's? "
                "Delete the checkpoint to resume from the warehouse's manifests."
            )
        first = w if w is not None else s if s is not None else e
        ranges.append(OffsetRange(t, p, min(first, e), e))
    return ranges


def run_continuous(config: LoaderConfig, settings: StreamSettings, guard: LockGuard | None = None) -> None:
    """Run the streaming load until it fails, is stopped (SIGTERM), or (``available_now``) caught up."""
    from pyspark.sql import functions as F

    spark = spark_session(config)
    try:
        wh = Warehouse(spark, config.warehouse)
        _recover(wh, config, guard)
        _, reached = _resume(wh)
        checkpoint = settings.checkpoint or wh.path(CHECKPOINT)
        pattern = "|".join(f"(?:{p.pattern})" for p in config.topics)
        options = {
            "kafka.bootstrap.servers": config.bootstrap,
            "subscribePattern": pattern,
            "kafka.isolation.level": "read_committed",  # as the nightly: an open transaction waits whole
            "failOnDataLoss": "true" if config.fail_on_data_loss else "false",
            "minPartitions": str(config.min_partitions),
            "headwater.test.read.delay.ms": str(config.read_delay_ms),
            **config.read_options,
            **{f"kafka.{k}": v for k, v in config.security_properties.items()},
        }
        # The initial offsets (used when the checkpoint is new): where the warehouse's runs ended,
        # a partition never loaded from its log start, as the nightly load does.
        parts = current(SourceOptions.parse({**options, "startingOffsets": "earliest"}, stream=True))
        starting = {tp: reached.get(tp[0], {}).get(tp[1], state.earliest) for tp, state in parts.items()}
        reader = (
            spark.readStream.format("headwater")
            .options(**options)
            .option("startingOffsets", json.dumps(offsets_json(starting)))
        )
        if settings.max_offsets_per_trigger:
            reader = reader.option("maxOffsetsPerTrigger", str(settings.max_offsets_per_trigger))

        def publish(df: Any, batch: int) -> None:
            if guard:
                guard.check()
            end = batch_offsets(spark, checkpoint, batch)
            if end is None:
                raise RuntimeError(f"{checkpoint}/offsets/{batch} is missing: the checkpoint is not this query's")
            before = batch_offsets(spark, checkpoint, batch - 1) if batch > 0 else None
            start = dict(before if before is not None else starting)
            new = [tp for tp in end if tp not in start]
            if new:  # partitions that appeared during the query: the stream read them from their log start
                now = current(SourceOptions.parse({**options, "startingOffsets": "earliest"}, stream=True))
                start.update({tp: now[tp].earliest if tp in now else 0 for tp in new})
            run, now_reached = _resume(wh)
            planned = plan_batch_ranges(now_reached, start, end)
            if not any(r.size for r in planned):
                log.info("batch %d: nothing new for the warehouse (published already): nothing written", batch)
                return
            lo = {(r.topic, r.partition): r.start for r in planned}
            cached = df.persist()
            try:

                def read(topic: str, mine: list[OffsetRange]) -> Any:
                    rows = cached.where(F.col("topic") == topic)
                    skip = [r for r in mine if start.get((r.topic, r.partition), r.start) < r.start]
                    for r in skip:  # the warehouse has these already (a run published before a restart)
                        rows = rows.where(
                            (F.col("partition") != r.partition) | (F.col("offset") >= lo[(topic, r.partition)])
                        )
                    return rows

                log.info(
                    "batch %d: run %d: %d record(s) of %d partition(s)",
                    batch,
                    run,
                    sum(r.size for r in planned),
                    sum(1 for r in planned if r.size),
                )
                _stage_and_publish(spark, wh, config, run, planned, now_reached, [], guard, read_topic=read)
            finally:
                cached.unpersist()

        writer = reader.load().writeStream.foreachBatch(publish).option("checkpointLocation", checkpoint)
        writer = (
            writer.trigger(availableNow=True)
            if settings.available_now
            else writer.trigger(processingTime=settings.interval)
        )
        for attempt in range(1, PLANNER_ATTEMPTS + 1):
            query = writer.queryName("headwater-load").start()
            log.info(
                "streaming load of %s into %s: checkpoint %s, %s",
                pattern,
                config.warehouse,
                checkpoint,
                "until caught up (Trigger.AvailableNow)"
                if settings.available_now
                else f"a run every {settings.interval}",
            )
            try:
                query.awaitTermination()
                return
            except Exception as e:
                # Spark gives the query's Python planner process a fixed 10 s to start and connect
                # back (PythonWorkerFactory); a loaded machine can miss it. The query resumes from
                # its checkpoint, so starting it again is safe; any other failure ends the load.
                if "failed to connect back" not in str(e) or attempt == PLANNER_ATTEMPTS:
                    raise
                log.warning("the query's planner process did not start in time (attempt %d): restarting it", attempt)
    finally:
        spark.stop()
