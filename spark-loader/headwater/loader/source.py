"""The ``headwater`` Spark data source: a Kafka cluster read by fixed offset ranges.

    # no register call needed: pyspark_headwater.DefaultSource is found by Spark 4 itself
    df = (spark.read.format("headwater")
          .option("kafka.bootstrap.servers", "agg-broker1:9092")
          .option("subscribe", "page-views,clicks")          # or subscribePattern, assign
          .option("startingOffsets", "earliest")             # latest, or {"t": {"0": 23}}
          .option("endingOffsets", "latest")
          .option("minPartitions", 8)
          .option("failOnDataLoss", "true")                  # default; false: skip what is gone
          .option("kafka.isolation.level", "read_committed") # default read_uncommitted, as Kafka's
          .load())

``kafka.isolation.level`` as a Kafka consumer's ``isolation.level``: read_committed resolves
``latest`` to each partition's last stable offset (an open transaction holds the range there) and
leaves out the records of aborted transactions (the Fetch's ``aborted_transactions``, see
:func:`headwater.client.raw.committed_batches`); the transaction markers are never rows at either
level. Their offsets are skipped, so a range holds fewer rows than offsets.

A secured cluster takes Kafka's client security properties with Spark's ``kafka.`` prefix
(``kafka.security.protocol``, ``kafka.ssl.ca.location`` / ``kafka.ssl.truststore.location``,
``kafka.sasl.mechanism``, ``kafka.sasl.username``, ``kafka.sasl.password`` or
``kafka.sasl.jaas.config``); a secret may be ``file:/path`` or ``env:NAME`` (resolved where it is
read; Spark redacts option values that mention a password in plans and logs).

Every option as Spark's Kafka source spells it (``startingTimestamp``, ``startingOffsetsByTimestamp``,
``endingOffsetsByTimestamp``, ``includeHeaders``, ...) is parsed and checked in
:mod:`headwater.loader.options`; streaming reads are :mod:`headwater.loader.stream`, writes
:mod:`headwater.loader.sink`.

Columns as Spark's Kafka source: ``key`` and ``value`` (binary), ``topic``, ``partition``,
``offset``, ``timestamp``, ``timestampType`` (0 CreateTime, 1 LogAppendTime) and ``headers``
(array of key / value structs). Offsets are resolved once, when the DataFrame is planned. Explicit
offsets are used as given: an end beyond the log end offset fails the read (it is never cut short
quietly); a start the log no longer holds (retention, or a re-created topic) is data loss, which
fails the read unless ``failOnDataLoss`` is false (then it reads from the log start and logs the
gap), as Spark's Kafka source does. JSON offsets must name every partition. Each input partition reads one topic-partition range (split further for ``minPartitions``) and hands Spark
Arrow record batches built column by column, one per fetch.

``headwater.test.read.delay.ms`` (tests only) sleeps that long after each fetch, so a test can
kill a job while its tasks run.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.types import StructType

from headwater.client.security import ClientSecurity
from headwater.loader.offsets import DataLoss, DataLossError, OffsetRange, split
from headwater.loader.schemas import DECODE_OPTION

if TYPE_CHECKING:
    from headwater.loader.options import SourceOptions
    from headwater.loader.schemas import TopicSchemas

log = logging.getLogger("headwater.loader.source")

SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
    "timestampType int, headers array<struct<key: string, value: binary>>"
)
#: ``includeHeaders=false``: Spark's Kafka columns without ``headers``
SCHEMA_NO_HEADERS = SCHEMA.rsplit(", headers", 1)[0]
ARROW_SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("timestampType", pa.int32()),
        ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
    ]
)


class RangePartition(InputPartition):
    def __init__(self, r: OffsetRange) -> None:
        super().__init__(r)
        self.range = r


class HeadwaterDataSource(DataSource):
    """``format("headwater")``: batch and streaming reads, batch and streaming writes.

    Found by name without ``spark.dataSource.register``: the ``pyspark_headwater`` module exposes
    it as ``DefaultSource`` (Spark 4 imports every ``pyspark_*`` module on the Python path).
    """

    @classmethod
    def name(cls) -> str:
        return "headwater"

    def schema(self) -> str | StructType:
        from headwater.loader.options import boolean

        include = boolean({k.lower(): v for k, v in self.options.items()}, "includeHeaders", True)
        plan = _decode_plan(self.options)
        if plan is None:
            return SCHEMA if include else SCHEMA_NO_HEADERS
        from pyspark.sql.pandas.types import from_arrow_schema

        from headwater.loader.schemas import extra_fields

        base = ARROW_SCHEMA if include else ARROW_SCHEMA.remove(ARROW_SCHEMA.get_field_index("headers"))
        return from_arrow_schema(pa.schema([*base, *extra_fields(plan)]))

    def reader(self, schema: StructType) -> DataSourceReader:
        return HeadwaterReader(dict(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from headwater.loader.stream import HeadwaterStreamReader

        return HeadwaterStreamReader(dict(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from headwater.loader.sink import HeadwaterWriter

        return HeadwaterWriter(dict(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from headwater.loader.sink import HeadwaterStreamWriter

        return HeadwaterStreamWriter(dict(self.options), schema)


class HeadwaterReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        from headwater.loader.options import SourceOptions, plan_batch

        self.options = o = SourceOptions.parse(options)
        ranges, losses = plan_batch(o)
        for loss in losses:
            log.warning("failOnDataLoss=false: %s; reading on from offset %d", loss.describe(), loss.log_start)
        self.ranges = ranges
        self.bounds = ReadBounds.from_options({k.lower(): v for k, v in options.items()})
        self.plan = _decode_plan(options)

    def partitions(self) -> list[InputPartition]:
        return [RangePartition(r) for r in split(self.ranges, self.options.min_partitions)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        batches = read_partition(partition, self.options, self.bounds)
        if self.plan is None:
            return batches
        from headwater.loader.schemas import decoder

        return decoder(self.plan)(batches)


def _option(options: Mapping[str, str], name: str) -> str | None:
    """An option by name, in any case (Spark may hand the source its options lower-cased)."""
    return next((v for k, v in options.items() if k.lower() == name.lower()), None)


def _decode_plan(options: Mapping[str, str]) -> TopicSchemas | None:
    """The typed tables' plan the loader passed (:data:`headwater.loader.schemas.DECODE_OPTION`):
    the reader decodes each value as it reads it (typed tables, one pass)."""
    text = _option(options, DECODE_OPTION)
    if text is None:
        return None
    from headwater.loader.schemas import plan_of_option

    return plan_of_option(text)


def read_partition(partition: InputPartition, o: SourceOptions, bounds: ReadBounds) -> Iterator[pa.RecordBatch]:
    """One task's read, batch or streaming: its :class:`RangePartition`'s records as Arrow batches,
    without the ``headers`` column unless ``includeHeaders``."""
    if not isinstance(partition, RangePartition):  # Spark's one empty partition of a read with no ranges
        return
    batches = read_range(
        o.bootstrap, partition.range, o.max_bytes, o.delay_ms, o.fail_on_data_loss, bounds, o.security, o.isolation
    )
    yield from (batches if o.include_headers else (b.drop_columns(["headers"]) for b in batches))


class PartitionReadError(RuntimeError):
    """A topic-partition could not be read within its bounds (the message says why, where)."""


@dataclass(frozen=True)
class ReadBounds:
    """How long one topic-partition's read may wait, and how often it retries (Spark's names).

    ``poll_timeout_ms`` (``kafkaConsumer.pollTimeoutMs``) bounds each leader look-up and fetch;
    ``retries`` (``fetchOffset.numRetries``) consecutive failures, ``retry_interval_ms``
    (``fetchOffset.retryIntervalMs``) apart, fail the partition's task with the last reason. A
    partition therefore gives up after at most ``(retries + 1) * (poll_timeout + retry_interval)``
    without progress, never hangs.
    """

    poll_timeout_ms: int = 120_000
    retries: int = 3
    retry_interval_ms: int = 1_000

    @classmethod
    def from_options(cls, opts: dict[str, str]) -> ReadBounds:
        def number(key: str, default: int, least: int) -> int:
            raw = opts.get(key.lower(), "")
            try:
                value = int(raw) if raw else default
            except ValueError:
                raise ValueError(f"option {key}: {raw!r} is not an integer") from None
            if value < least:
                raise ValueError(f"option {key}: {value} must be >= {least}")
            return value

        return cls(
            number("kafkaConsumer.pollTimeoutMs", cls.poll_timeout_ms, 1),
            number("fetchOffset.numRetries", cls.retries, 0),
            number("fetchOffset.retryIntervalMs", cls.retry_interval_ms, 0),
        )


def read_range(
    bootstrap: str,
    r: OffsetRange,
    max_bytes: int = 4 << 20,
    delay_ms: int = 0,
    fail_on_data_loss: bool = True,
    bounds: ReadBounds = ReadBounds(),
    security: ClientSecurity | None = None,
    isolation: int = 0,
) -> Iterator[pa.RecordBatch]:
    """Arrow record batches of every record in ``r`` (one per fetch); with ``isolation``
    read_committed (1), the records of aborted transactions are left out.

    Offsets that retention removes while the range is read are a :class:`DataLossError` (or, with
    ``fail_on_data_loss`` false, skipped with a warning naming them), as in Spark's Kafka source.
    A fetch that returns nothing below ``r.end`` while the high watermark is at or past it means
    the cleaner removed the rest of the range (a compacted tail): the range is done. Errors and
    timeouts are retried within ``bounds``, then raise :class:`PartitionReadError`.
    """
    from headwater.client import raw
    from headwater.client.cluster import Cluster
    from headwater.client.errors import OffsetOutOfRangeError
    from headwater.protocol.records.record import iter_batches

    tp = f"{r.topic}-{r.partition}"
    timeout = bounds.poll_timeout_ms / 1000.0
    loop = asyncio.new_event_loop()
    cluster = Cluster(bootstrap, client_id="headwater-loader", allow_auto_create_topics=False, security=security)

    def bounded(coro: Any, what: str) -> Any:
        try:
            return loop.run_until_complete(asyncio.wait_for(coro, timeout))
        except TimeoutError:
            raise _Retriable(f"{what} timed out after {bounds.poll_timeout_ms} ms") from None

    try:
        offset = r.start
        failures = 0
        while offset < r.end:
            try:
                try:
                    bounded(cluster.leader_for(r.topic, r.partition), "leader look-up")
                    got, failed = bounded(
                        raw.fetch_raw(
                            cluster,
                            [(r.topic, r.partition, offset)],
                            max_bytes=max_bytes,
                            max_wait_ms=0,
                            timeout=timeout,
                            isolation_level=isolation,
                        ),
                        "fetch",
                    )
                except OffsetOutOfRangeError:
                    start = bounded(_log_start(cluster, r), "log start look-up")
                    if start <= offset:
                        raise _Retriable(f"OFFSET_OUT_OF_RANGE with the log start at {start}") from None
                    loss = DataLoss(r.topic, r.partition, offset, min(start, r.end), "source retention", start, -1)
                    if fail_on_data_loss:
                        raise DataLossError([loss]) from None
                    log.warning("failOnDataLoss=false: %s; reading on from offset %d", loss.describe(), start)
                    offset = min(start, r.end)
                    continue
                except _Retriable:
                    raise
                except Exception as e:  # a connection error below the client's own handling
                    if not _retriable(e):
                        raise
                    raise _Retriable(f"{type(e).__name__}: {e}") from None
                if (r.topic, r.partition) in failed:
                    raise _Retriable(f"error {failed[(r.topic, r.partition)].name}")
                part = got[(r.topic, r.partition)]
                if not part.batches:
                    if part.end_offset >= r.end:
                        log.info(
                            "%s: no records in [%d, %d) below the end %d: the cleaner removed them "
                            "(a compacted tail); the range is done",
                            tp,
                            offset,
                            r.end,
                            part.end_offset,
                        )
                        break
                    end_name = "last stable offset" if part.last_stable_offset >= 0 else "high watermark"
                    raise _Retriable(
                        f"no data at offset {offset} and the {end_name} {part.end_offset} is below the range end "
                        f"{r.end} (a leader behind the one the range was planned on?)"
                    )
            except _Retriable as e:
                failures += 1
                if failures > bounds.retries:
                    raise PartitionReadError(
                        f"{tp}: reading offset {offset} of [{r.start}, {r.end}) failed {failures} time(s) in a row, "
                        f"last: {e} (kafkaConsumer.pollTimeoutMs={bounds.poll_timeout_ms}, "
                        f"fetchOffset.numRetries={bounds.retries})"
                    ) from None
                log.warning("%s: offset %d: %s; retry %d of %d", tp, offset, e, failures, bounds.retries)
                time.sleep(bounds.retry_interval_ms / 1000.0)
                try:
                    bounded(cluster.refresh([r.topic]), "metadata refresh")
                except _Retriable:
                    pass  # the next attempt's leader look-up is bounded and counted
                continue
            failures = 0
            cols: dict[str, list[Any]] = {name: [] for name in ARROW_SCHEMA.names}
            for _, b in part.committed():  # no marker, no aborted transaction's records
                for h, records in iter_batches(b):
                    ts_type = 1 if h.attributes & 0x08 else 0
                    for rec in records:
                        if rec.offset < offset or rec.offset >= r.end:
                            continue
                        cols["key"].append(rec.key)
                        cols["value"].append(rec.value)
                        cols["offset"].append(rec.offset)
                        cols["timestamp"].append(rec.timestamp * 1000)
                        cols["timestampType"].append(ts_type)
                        cols["headers"].append([{"key": k, "value": v} for k, v in rec.headers])
            offset = max(offset, min(part.batches[-1][0].next_offset, r.end))
            n = len(cols["offset"])
            if n:
                cols["topic"] = [r.topic] * n
                cols["partition"] = [r.partition] * n
                yield pa.RecordBatch.from_pydict(cols, schema=ARROW_SCHEMA)
            if delay_ms:
                time.sleep(delay_ms / 1000.0)
    finally:
        try:
            loop.run_until_complete(asyncio.wait_for(cluster.close(), timeout))
        finally:
            loop.close()


class _Retriable(Exception):
    """One failed attempt of a partition's read (counted against fetchOffset.numRetries)."""


def _retriable(e: BaseException) -> bool:
    from headwater.client.errors import KafkaConnectionError, KafkaTimeoutError
    from headwater.protocol.errors import KafkaError

    if isinstance(e, KafkaConnectionError | KafkaTimeoutError | OSError):
        return True
    return isinstance(e, KafkaError) and bool(getattr(e.code, "retriable", False))


async def _log_start(cluster: Any, r: OffsetRange) -> int:
    from headwater.client.consumer import Consumer

    return await Consumer("", cluster=cluster).earliest_offset(r.topic, r.partition)
