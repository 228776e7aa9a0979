"""``df.write.format("headwater")`` and ``writeStream.format("headwater")``: rows into Kafka topics.

    (df.selectExpr("CAST(member AS STRING) AS key", "to_json(struct(*)) AS value")
       .write.format("headwater")
       .option("kafka.bootstrap.servers", "agg-broker1:9092")
       .option("topic", "page-views")            # or a topic column in each row
       .mode("append").save())

Columns as Spark's Kafka sink takes them: ``value`` (binary or string, required; null writes a
tombstone), ``key`` (binary or string, optional), ``topic`` (string; the ``topic`` option, when set,
wins over it, as in Spark), ``partition`` (int, optional: the producer's partitioner picks one
otherwise) and ``headers`` (array of ``struct<key: string, value: binary>``, optional). Any other
column is refused by name, so a typo is not silently dropped.

Each task sends its rows through Headwater's idempotent producer (``enable_idempotence``,
``acks=all``, Kafka's ``enable.idempotence``): a batch the producer retries after a lost response is
written once. A task fails with the first record that could not be written, after waiting for every
send of the task. As with Spark's own Kafka sink the write as a whole is at least once: a task Spark
retries, or a streaming batch it re-runs after a restart, sends its rows again (give the rows a key
and de-duplicate downstream, or read the topic with the records' offsets, when that matters).

Options: ``kafka.bootstrap.servers`` (required), ``topic``, ``kafka.compression.type``
(none, gzip, snappy, lz4, zstd), ``kafka.linger.ms``, ``kafka.batch.size``,
``kafka.delivery.timeout.ms``, and the client security options with the ``kafka.`` prefix as for the
reader. ``kafka.acks`` may only be ``all`` (or -1); ``kafka.enable.idempotence`` only true.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType

from headwater.client.security import ClientSecurity, cluster_security
from headwater.loader.options import OptionError, integer

log = logging.getLogger("headwater.loader.sink")

COLUMNS = ("key", "value", "topic", "partition", "headers")


@dataclass(frozen=True)
class Written(WriterCommitMessage):
    records: int


def _check_schema(schema: StructType, topic: str | None) -> None:
    names = [f.name for f in schema.fields]
    extra = [n for n in names if n not in COLUMNS]
    if extra:
        raise OptionError(
            f"the headwater sink writes the columns {', '.join(COLUMNS)}; {', '.join(extra)} "
            "is not one of them (select or drop it first)"
        )
    if "value" not in names:
        raise OptionError("the headwater sink needs a value column (binary or string)")
    if topic is None and "topic" not in names:
        raise OptionError("the headwater sink needs the topic option or a topic column")
    types = {f.name: f.dataType for f in schema.fields}
    for name in ("key", "value"):
        if name in types and not isinstance(types[name], BinaryType | StringType):
            raise OptionError(f"column {name}: {types[name].simpleString()} must be binary or string")
    if "topic" in types and not isinstance(types["topic"], StringType):
        raise OptionError(f"column topic: {types['topic'].simpleString()} must be string")
    if "partition" in types and not isinstance(types["partition"], IntegerType):
        raise OptionError(f"column partition: {types['partition'].simpleString()} must be int")
    if "headers" in types:
        h = types["headers"]
        ok = (
            isinstance(h, ArrayType)
            and isinstance(h.elementType, StructType)
            and [f.name for f in h.elementType.fields] == ["key", "value"]
            and isinstance(h.elementType.fields[0].dataType, StringType)
            and isinstance(h.elementType.fields[1].dataType, BinaryType | StringType)
        )
        if not ok:
            raise OptionError(f"column headers: {h.simpleString()} must be array<struct<key: string, value: binary>>")


@dataclass(frozen=True)
class SinkOptions:
    bootstrap: str
    topic: str | None
    compression: str
    linger_ms: int
    batch_size: int
    delivery_timeout_ms: int
    security: ClientSecurity

    @classmethod
    def parse(cls, options: dict[str, str]) -> SinkOptions:
        opts = {k.lower(): v for k, v in options.items()}
        bootstrap = (opts.get("kafka.bootstrap.servers") or "").strip()
        if not bootstrap:
            raise OptionError("option kafka.bootstrap.servers is required")
        acks = (opts.get("kafka.acks") or "all").strip().lower()
        if acks not in ("all", "-1"):
            raise OptionError(
                f"option kafka.acks: {acks!r}: the headwater sink's idempotent producer writes with acks=all"
            )
        idem = (opts.get("kafka.enable.idempotence") or "true").strip().lower()
        if idem != "true":
            raise OptionError(f"option kafka.enable.idempotence: {idem!r}: the headwater sink's producer is idempotent")
        compression = (opts.get("kafka.compression.type") or "none").strip().lower()
        if compression not in ("none", "gzip", "snappy", "lz4", "zstd"):
            raise OptionError(f"option kafka.compression.type: {compression!r} is not none, gzip, snappy, lz4 or zstd")
        topic = (opts.get("topic") or "").strip() or None
        return cls(
            bootstrap=bootstrap,
            topic=topic,
            compression=compression,
            linger_ms=integer(opts, "kafka.linger.ms", 5) or 0,
            batch_size=integer(opts, "kafka.batch.size", 256 * 1024, 1) or 256 * 1024,
            delivery_timeout_ms=integer(opts, "kafka.delivery.timeout.ms", 120_000, 1) or 120_000,
            security=cluster_security(opts, "kafka.", inherit=False),
        )


def _as_bytes(v: Any) -> bytes | None:
    if v is None or isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode()
    return bytes(v)


def write_batches(o: SinkOptions, batches: Iterator[pa.RecordBatch]) -> int:
    """Send every row of ``batches``; returns how many, once all are acknowledged (raises the
    first failure otherwise)."""
    from headwater.client.sync import SyncProducer

    n = 0
    futures: list[Any] = []
    with SyncProducer(
        o.bootstrap,
        enable_idempotence=True,
        acks="all",
        compression=o.compression,
        linger_ms=o.linger_ms,
        batch_size=o.batch_size,
        delivery_timeout_ms=o.delivery_timeout_ms,
        client_id="headwater-spark-sink",
        security=o.security,
    ) as producer:
        for batch in batches:
            cols = {name: batch.column(name).to_pylist() for name in batch.schema.names}
            rows = batch.num_rows
            topics = cols.get("topic")
            for i in range(rows):
                topic = o.topic or (topics[i] if topics else None)
                if not topic:
                    raise OptionError(f"row {n + i}: no topic (a null topic column and no topic option)")
                part = cols["partition"][i] if "partition" in cols else None
                headers = cols["headers"][i] if "headers" in cols else None
                futures.append(
                    producer.send(
                        topic,
                        _as_bytes(cols["value"][i]),
                        key=_as_bytes(cols["key"][i]) if "key" in cols else None,
                        headers=[(h["key"], _as_bytes(h["value"])) for h in headers or ()],
                        partition=part,
                    )
                )
            n += rows
            if len(futures) > 10_000:  # bound what waits in memory; errors surface early
                for f in futures:
                    f.result(o.delivery_timeout_ms / 1000.0)
                futures.clear()
        for f in futures:
            f.result(o.delivery_timeout_ms / 1000.0)
    return n


class HeadwaterWriter(DataSourceArrowWriter):
    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.options = SinkOptions.parse(options)
        _check_schema(schema, self.options.topic)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return Written(write_batches(self.options, iterator))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        log.info("wrote %d record(s)", sum(m.records for m in messages if isinstance(m, Written)))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        done = sum(m.records for m in messages if isinstance(m, Written))
        log.error("write aborted: %d record(s) of the finished tasks are in Kafka (at least once)", done)


class HeadwaterStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        self.options = SinkOptions.parse(options)
        _check_schema(schema, self.options.topic)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return Written(write_batches(self.options, iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.info("batch %d: wrote %d record(s)", batchId, sum(m.records for m in messages if isinstance(m, Written)))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.error("batch %d aborted: it is written again when Spark re-runs it (at least once)", batchId)
