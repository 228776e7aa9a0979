"""``headwater load``: the nightly load of the aggregate cluster into the Parquet warehouse.

As the paper's offline load and Camus do it: the offsets of every topic-partition are resolved once,
at job start, and read exactly; each run reads from where the last committed run ended; each
topic's data appears with one rename and the run's offsets with the commit of its manifest, and a
publish a crash interrupted is rolled forward at the next start (see
:mod:`headwater.loader.warehouse`), so a failed or repeated run neither loses nor duplicates.
Offsets the cluster no longer holds fail the run unless ``failOnDataLoss = false`` (then the gap
is recorded and audited). After publishing, the run's warehouse-tier count events (and gap
events) go to ``__audit`` (guids derived from the run, so a re-sent event is de-duplicated); an
audit outage only delays them. Loads of one warehouse take turns (:mod:`headwater.loader.lock`).

Configuration (``loader.properties``)::

    bootstrap.servers = agg-broker1:9092      # or zookeeper.connect
    topics = page-views, clicks.*             # regexes
    warehouse.path = /data/warehouse          # a local path or any URI Spark writes to
    spark.master = local[*]                   # or spark://host:7077, yarn, k8s://...
    audit.bootstrap.servers = agg-broker1:9092
    audit.window.ms = 60000                   # the producers' window
    min.partitions = 0                        # split ranges for parallelism (Spark's minPartitions)
    kafkaConsumer.pollTimeoutMs = 120000      # bounds each fetch of a partition's read
    fetchOffset.numRetries = 3                # failures in a row before the partition fails the run
    fetchOffset.retryIntervalMs = 1000
    audit.send.timeout.ms = 30000             # the audit events' send; a failure only delays them
    loader.lock.zookeeper.connect = zk1:2181  # one load of the warehouse at a time, across hosts
    loader.lock.timeout.ms = 3600000          # how long to wait for another load's lock
    loader.run.timeout.ms = 21600000          # --schedule stops a run that takes longer
    failOnDataLoss = true                     # as Spark's Kafka source: offsets gone fail the run
    output.partition.granularity = day        # or hour (headwater.loader.partitioning)
    output.timezone = UTC                     # the zone of the date= and hour= directories
    output.partition.time.field = timestamp   # or header:origin.created, value:$.created
    max.records.per.run = 0                   # bounded catch-up (headwater.loader.bounds); 0: none
    max.duration.per.run = 0                  # e.g. 4h: no new round after that, publish what was read
    max.records.per.round = 10000000          # how often a duration-bounded run looks at the clock
    audit.cluster.alias = agg                 # the loaded cluster's alias in gap events (hop agg->warehouse)
    security.protocol = SASL_SSL              # Kafka's client security names for the loaded cluster
    ssl.ca.location = /etc/headwater/ca.pem   # (or ssl.truststore.location, a PEM file)
    sasl.mechanism = SCRAM-SHA-512
    sasl.username = loader
    sasl.password = file:/etc/headwater/loader.password   # or env:NAME; never logged
    audit.sasl.username = loader              # audit.<name> for audit.bootstrap.servers (default: the same)
    schema.registry.url = http://registry:8080/apis/ccompat/v6   # typed tables (headwater.loader.schemas)

Any ``spark.*`` property is passed to the Spark session.

Transactions: the load reads read_committed (KIP-98). Each run's ranges end at the last stable
offsets, so a transaction still open when the run starts is loaded by a later run, whole, once it
committed; an aborted transaction's records and the transaction markers are never loaded (their
offsets are read past, so the next run starts after them).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import os
import re
import signal
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from headwater.client.raw import READ_COMMITTED
from headwater.client.security import ClientSecurity, SecurityConfigError, cluster_properties, cluster_security
from headwater.loader import schemas
from headwater.loader.bounds import Deadline, RunBounds, parse_bounds, rounds, share
from headwater.loader.lock import LockGuard
from headwater.loader.offsets import EARLIEST, DataLoss, OffsetRange, resolve, to_json
from headwater.loader.partitioning import PartitionSpec, dashboard_link, parse_partitioning, touched
from headwater.loader.warehouse import LEGACY_STAGING, STAGING_PREFIX, Warehouse, run_name

log = logging.getLogger("headwater.loader")


#: the data source's per-partition bounds (Spark's names), taken from loader.properties as they are
READ_OPTIONS = ("kafkaConsumer.pollTimeoutMs", "fetchOffset.numRetries", "fetchOffset.retryIntervalMs")


class LoaderConfigError(ValueError):
    """One line naming the property."""


@dataclass
class LoaderConfig:
    bootstrap: str
    topics: list[re.Pattern[str]]
    warehouse: str
    master: str = "local[*]"
    audit_bootstrap: str | None = None
    audit_window_ms: int = 60000
    min_partitions: int = 0
    spark: dict[str, str] = field(default_factory=dict)
    read_delay_ms: int = 0  # headwater.test.read.delay.ms (tests only)
    test_kill_after: str = ""  # headwater.test.kill.after (tests only): "rename:<n>" or "commit"
    audit_timeout_ms: int = 30000
    lock_zookeeper: str | None = None  # loader.lock.zookeeper.connect: one load at a time across hosts
    lock_timeout_ms: int = 3_600_000
    run_timeout_ms: int = 6 * 3_600_000  # --schedule stops a run that takes longer
    read_options: dict[str, str] = field(default_factory=dict)  # the data source's bounds, passed on
    fail_on_data_loss: bool = True
    cluster_alias: str = "agg"
    #: the loaded cluster's client security; its properties as written (``file:``/``env:`` references
    #: unresolved) go to the data source as ``kafka.<name>`` options
    security: ClientSecurity = field(default_factory=ClientSecurity)
    security_properties: dict[str, str] = field(default_factory=dict, repr=False)
    audit_security: ClientSecurity = field(default_factory=ClientSecurity)  # audit.<name> over <name>
    #: signs the warehouse tier's count and gap events (the audit service's audit.signing.key)
    audit_signing_key: bytes | None = field(default=None, repr=False)
    partitioning: PartitionSpec = field(default_factory=PartitionSpec)  # output.partition.*, output.timezone
    bounds: RunBounds = field(default_factory=RunBounds)  # max.records.per.run, max.duration.per.run
    dashboard_url: str | None = None  # audit.dashboard.url: logged links to the newest partition loaded
    #: schema.registry.url: topics with a registered value schema land typed (headwater.loader.schemas)
    schema_registry: str | None = None


def parse_config(props: dict[str, str]) -> LoaderConfig:
    bootstrap = props.get("bootstrap.servers") or (
        f"zk://{props['zookeeper.connect']}" if props.get("zookeeper.connect") else ""
    )
    if not bootstrap:
        raise LoaderConfigError("bootstrap.servers: required (or zookeeper.connect)")
    topics = []
    for item in (t.strip() for t in props.get("topics", "").split(",")):
        if item:
            try:
                topics.append(re.compile(item))
            except re.error as e:
                raise LoaderConfigError(f"topics: {item!r} is not a valid regex ({e})") from None
    if not topics:
        raise LoaderConfigError("topics: at least one regex is required")
    warehouse = props.get("warehouse.path", "")
    if not warehouse:
        raise LoaderConfigError("warehouse.path: required")

    def integer(key: str, default: int) -> int:
        raw = props.get(key, "")
        if not raw:
            return default
        try:
            return int(raw)
        except ValueError:
            raise LoaderConfigError(f"{key}: {raw!r} is not an integer") from None

    fail_on_data_loss = props.get("failOnDataLoss", "true").strip().lower()
    if fail_on_data_loss not in ("true", "false"):
        raise LoaderConfigError(f"failOnDataLoss: {fail_on_data_loss!r} is not true or false")
    for key in READ_OPTIONS:
        if integer(key, 0) < 0:
            raise LoaderConfigError(f"{key}: must not be negative")
    try:
        security = cluster_security(props)
        audit_security = cluster_security(props, "audit.")
    except SecurityConfigError as e:
        raise LoaderConfigError(str(e)) from None
    from headwater.client.audit import SigningKeyError, signing_key

    try:
        audit_signing_key = signing_key(props.get("audit.signing.key") or None)
    except SigningKeyError as e:
        raise LoaderConfigError(str(e)) from None
    try:
        partitioning, bounds = parse_partitioning(props), parse_bounds(props)
    except ValueError as e:
        raise LoaderConfigError(str(e)) from None
    window = integer("audit.window.ms", 60000)
    if window <= 0:
        raise LoaderConfigError(f"audit.window.ms: {window} must be positive")
    return LoaderConfig(
        bootstrap=bootstrap,
        topics=topics,
        warehouse=warehouse if "://" in warehouse else os.path.abspath(warehouse),
        master=props.get("spark.master", "local[*]"),
        audit_bootstrap=props.get("audit.bootstrap.servers") or None,
        audit_window_ms=window,
        min_partitions=integer("min.partitions", 0),
        spark={k: v for k, v in props.items() if k.startswith("spark.") and k != "spark.master"},
        read_delay_ms=integer("headwater.test.read.delay.ms", 0),
        test_kill_after=props.get("headwater.test.kill.after", "").strip(),
        fail_on_data_loss=fail_on_data_loss == "true",
        audit_timeout_ms=integer("audit.send.timeout.ms", 30000),
        lock_zookeeper=props.get("loader.lock.zookeeper.connect", "").strip() or None,
        lock_timeout_ms=integer("loader.lock.timeout.ms", 3_600_000),
        run_timeout_ms=integer("loader.run.timeout.ms", 6 * 3_600_000),
        read_options={k: props[k] for k in READ_OPTIONS if props.get(k)},
        cluster_alias=props.get("audit.cluster.alias", "agg").strip() or "agg",
        security=security,
        security_properties=cluster_properties(props),
        audit_security=audit_security,
        audit_signing_key=audit_signing_key,
        partitioning=partitioning,
        bounds=bounds,
        dashboard_url=props.get("audit.dashboard.url", "").strip() or None,
        schema_registry=props.get("schema.registry.url", "").strip() or None,
    )


def spark_session(config: LoaderConfig) -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from headwater.loader.source import HeadwaterDataSource

    builder = SparkSession.builder.appName("headwater-load").config("spark.sql.session.timeZone", "UTC")
    if not os.environ.get("SPARK_SUBMITTED"):  # under spark-submit the master comes from the command line
        builder = builder.master(config.master)
    for k, v in config.spark.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.dataSource.register(HeadwaterDataSource)
    return spark


def run(config: LoaderConfig, guard: LockGuard | None = None) -> dict[str, Any] | None:
    """One load; returns the published manifest, or None when there was nothing new."""
    spark = spark_session(config)
    try:
        return _load(spark, config, guard)
    finally:
        spark.stop()


def _load(
    spark: Any, config: LoaderConfig, guard: LockGuard | None = None, clock: Callable[[], float] = time.monotonic
) -> dict[str, Any] | None:
    """One run, under the warehouse's lock (``guard`` is checked before each publishing step);
    ``clock`` (seconds) measures ``max.duration.per.run``."""
    wh = Warehouse(spark, config.warehouse)
    _recover(wh, config, guard)
    run, reached = _resume(wh)

    from headwater.client.admin import Admin

    async def topics() -> list[str]:
        async with Admin(config.bootstrap, security=config.security) as admin:
            return await admin.list_topics(include_internal=False)

    import asyncio

    wanted = sorted(t for t in asyncio.run(topics()) if any(p.fullmatch(t) for p in config.topics))
    if not wanted:
        log.info("no topic matches %s: nothing to load", ", ".join(p.pattern for p in config.topics))
        return None
    # The one offset resolution of this run: the manifest records these ranges and the reads are
    # given exactly these offsets (every partition of each topic, empty ranges too), which the data
    # source honours or fails on.
    plan = resolve(
        config.bootstrap,
        subscribe=wanted,
        starting=reached or "earliest",
        ending="latest",
        missing_start=EARLIEST,
        fail_on_data_loss=config.fail_on_data_loss,
        security=config.security,
        isolation=READ_COMMITTED,  # ends at the LSO: an open transaction is loaded by a later run
    )
    planned = plan.ranges
    for loss in plan.losses:
        log.error(
            "failOnDataLoss=false: %s; loading on from offset %d, the gap goes to the audit",
            loss.describe(),
            loss.log_start,
        )
    ranges = [r for r in planned if r.size > 0]
    if not ranges and not plan.losses:
        log.info("nothing new since run %s: nothing written", run - 1 if run > 1 else "(none)")
        return None
    return _stage_and_publish(spark, wh, config, run, planned, reached, plan.losses, guard, clock)


def _stage_and_publish(
    spark: Any,
    wh: Warehouse,
    config: LoaderConfig,
    run: int,
    planned: list[OffsetRange],
    reached: dict[str, dict[int, int]],
    lost: list[DataLoss],
    guard: LockGuard | None = None,
    clock: Callable[[], float] = time.monotonic,
    read_topic: Callable[[str, list[OffsetRange]], Any] | None = None,
) -> dict[str, Any] | None:
    """Read, stage, check, claim and publish run ``run`` of ``planned``: the one commit path of the
    nightly load and of ``--continuous`` (:mod:`headwater.loader.continuous`), whose ``read_topic``
    gives a topic's records of a micro-batch (partition columns added here); a micro-batch is bounded
    by ``maxOffsetsPerTrigger``, not by max.records.per.run / max.duration.per.run."""
    ranges = [r for r in planned if r.size > 0]
    # Bounded catch-up (headwater.loader.bounds): the plan cut to max.records.per.run, read in
    # rounds when max.duration.per.run is set; `read` holds where each partition's read got to.
    bounds = config.bounds
    streamed = read_topic is not None
    capped = planned if streamed else share(planned, bounds.max_records)
    steps = rounds(capped, bounds.round_records if bounds.max_duration_ms and not streamed else 0)
    deadline = Deadline(bounds.max_duration_ms, clock)
    log.info(
        "run %d: loading %d record(s) from %d partition(s) of %d topic(s) into %s (end offsets fixed now)%s",
        run,
        sum(r.size for r in capped),
        len(ranges),
        len({r.topic for r in ranges}),
        config.warehouse,
        f"; {sum(r.size for r in planned)} are waiting, max.records.per.run={bounds.max_records}"
        if bounds.max_records and sum(r.size for r in planned) > bounds.max_records
        else "",
    )
    token = uuid.uuid4().hex[:12]  # this process's staging: no other loader's is ever touched by this run
    read = {(r.topic, r.partition): r.start for r in planned}
    registry = schemas.Registry(config.schema_registry) if config.schema_registry else None
    typed: dict[str, schemas.TopicSchemas | None] = {}  # per topic, asked once a run
    tables: dict[str, dict[str, int]] = {}  # typed topics: rows per table version and dead letters
    for i, step in enumerate(steps):
        if i and deadline.passed():
            log.warning(
                "run %d: max.duration.per.run (%d ms) reached after %d of %d round(s) (%.0f s): publishing "
                "what was read, the next run continues from there",
                run,
                bounds.max_duration_ms,
                i,
                len(steps),
                deadline.elapsed(),
            )
            break
        for topic in sorted({r.topic for r in step if r.size > 0}):
            started = time.monotonic()
            mine = [r for r in step if r.topic == topic]
            if topic not in typed:
                typed[topic] = schemas.plan_topic(registry, topic) if registry else None
            plan_of = typed[topic]
            df = read_topic(topic, mine) if read_topic else _read_topic(spark, config, topic, mine, plan_of)
            if plan_of is None:  # no registered value schema: binary key and value, as ever
                df = config.partitioning.add_columns(df)
                df.write.mode("append").partitionBy(*config.partitioning.columns).parquet(
                    wh.path(_staging_of(run, topic, token))
                )
            else:
                wrote = schemas.write_typed(
                    df,
                    plan_of,
                    lambda t: wh.path(_staging_of(run, t, token)),
                    config.partitioning,
                    decoded=not read_topic,  # the batch source decodes as it reads; a micro-batch is raw
                )
                for name, n in wrote.items():
                    tables.setdefault(topic, {})[name] = tables.get(topic, {}).get(name, 0) + n
            read.update({(r.topic, r.partition): r.end for r in mine})
            log.info(
                "run %d: %s: offsets %s -> %s written (round %d of %d, %.1fs)",
                run,
                topic,
                to_json(mine, "start"),
                to_json(mine, "end"),
                i + 1,
                len(steps),
                time.monotonic() - started,
            )
    done = [dataclasses.replace(r, end=read[(r.topic, r.partition)]) for r in planned]
    left = sum(r.size for r in planned) - sum(r.size for r in done)

    files: list[list[str]] = []
    records: dict[str, int] = {}
    by_partition: dict[str, dict[str, int]] = {}
    sizes: dict[str, int] = {}
    partitions: dict[str, list[str]] = {}
    table_partitions: dict[str, list[str]] = {}  # typed topics: each table's partition directories
    staged_dirs: list[str] = []
    for topic in sorted({r.topic for r in done if r.size > 0}):
        mine = [r for r in done if r.topic == topic]
        names = sorted(tables[topic]) if topic in tables else [topic]  # a typed topic's tables
        outs = [_staging_of(run, t, token) for t in names]
        staged = [f for out in outs for f in wh.files_under(out)]
        files.extend(m for t in names for m in _moves(run, t, token))
        staged_dirs.extend(out for out in outs if wh.files_under(out))
        # No data file at all: every record of the ranges was compacted away (nothing to check or count).
        counts = (
            _check_read(_offsets_of(spark, wh, outs), mine) if staged else {r.partition: 0 for r in mine if r.size > 0}
        )
        records[topic] = sum(counts.values())
        by_partition[topic] = {str(p): n for p, n in sorted(counts.items())}
        sizes[topic] = sum(int(wh.fs.getFileStatus(wh._p(rel)).getLen()) for rel in staged)
        by_table = {t: touched(wh.files_under(out), out) for t, out in zip(names, outs)}
        partitions[topic] = sorted({p for dirs in by_table.values() for p in dirs})
        if topic in tables:
            table_partitions.update({t: dirs for t, dirs in by_table.items() if dirs})
        log.info(
            "run %d: %s: %d record(s), %d byte(s) of Parquet in %s, offsets %s -> %s",
            run,
            topic,
            records[topic],
            sizes[topic],
            ", ".join(partitions[topic]) or "no file",
            to_json(mine, "start"),
            to_json(mine, "end"),
        )
    audit = _audit_counts(spark, wh, staged_dirs, run, config)
    losses = [_gap_event(loss, run, config) for loss in lost]
    manifest: dict[str, Any] = {
        "run": run,
        "created": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "ranges": _ranges_json(done),
        "reached": {t: {str(p): o for p, o in parts.items()} for t, parts in reached.items()},
        "files": files,
        "staging": token,
        "records": records,
        "partition_records": by_partition,
        "bytes": sizes,
        "partitioning": config.partitioning.describe(),
        "partitions": partitions,
        "bounded": _bounded(bounds, planned, capped, done) if left else None,
        "losses": losses,
        "audit": audit + losses,
    }
    if tables:
        manifest["tables"] = tables
        manifest["table_partitions"] = table_partitions
    if guard:
        guard.check()
    wh.claim(run, manifest)
    _publish(wh, run, manifest, config, guard)
    return manifest


def _read_topic(
    spark: Any, config: LoaderConfig, topic: str, mine: list[OffsetRange], plan: schemas.TopicSchemas | None = None
) -> Any:
    """One topic's ranges (every partition, empty ones too) as a DataFrame of the source's columns;
    with a typed topic's ``plan``, decoded by the source as it reads (:func:`schemas.extra_fields`).
    The caller adds the partition columns (a typed payload's event time is read once decoded)."""
    typed = {schemas.DECODE_OPTION: schemas.decode_option(plan)} if plan is not None else {}
    return (
        spark.read.format("headwater")
        .option("kafka.bootstrap.servers", config.bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", to_json(mine, "start"))
        .option("endingOffsets", to_json(mine, "end"))
        .option("minPartitions", config.min_partitions)
        .option("failOnDataLoss", "true")  # the plan above is final: offsets gone since then fail the run
        .option("kafka.isolation.level", "read_committed")  # the plan's ends are LSOs too
        .option("headwater.test.read.delay.ms", config.read_delay_ms)
        .options(**config.read_options)
        .options(**{f"kafka.{k}": v for k, v in config.security_properties.items()})
        .options(**typed)
        .load()
    )


def _bounded(
    bounds: RunBounds, planned: list[OffsetRange], capped: list[OffsetRange], done: list[OffsetRange]
) -> dict[str, Any]:
    """The manifest's ``bounded``: which bound cut the run, and the offsets left for the next runs."""
    by = "max.duration.per.run" if sum(r.size for r in done) < sum(r.size for r in capped) else "max.records.per.run"
    return {
        "by": by,
        "max_records": bounds.max_records,
        "max_duration_ms": bounds.max_duration_ms,
        "planned": sum(r.size for r in planned),
        "left": sum(r.size for r in planned) - sum(r.size for r in done),
    }


def _resume(wh: Warehouse) -> tuple[int, dict[str, dict[int, int]]]:
    """The next run's number and where each topic-partition resumes: the newest committed run's ends."""
    done = wh.manifests()
    if not done:
        return 1, {}
    last = wh.read_manifest(done[-1])
    reached: dict[str, dict[int, int]] = {}
    for topic, parts in last["ranges"].items():
        reached[topic] = {int(p): int(r[1]) for p, r in parts.items()}
    for t, parts in last.get("reached", {}).items():  # topics whose ranges were empty in that run
        for p, o in parts.items():
            reached.setdefault(t, {}).setdefault(int(p), int(o))
    return done[-1] + 1, reached


def _staging_of(run: int, topic: str, token: str) -> str:
    """Where Spark writes one topic's part of a run: inside the topic's directory (so publishing is
    one rename on the same file system), under a name Spark and pyarrow skip (leading ``_``, no
    ``=``), with the run and the writing process's token (so no other run's staging is mistaken
    for it)."""
    return f"{topic}/{STAGING_PREFIX}{run_name(run)}-{token}"


def _moves(run: int, topic: str, token: str) -> list[list[str]]:
    """The one rename that publishes a topic's part of a run: its staging directory becomes
    ``<topic>/run=<run>`` (hive partitioning: readers see the run whole or not at all)."""
    return [[_staging_of(run, topic, token), f"{topic}/run={run_name(run)}"]]


class ReadCheckError(RuntimeError):
    """The staged data does not match the ranges the run planned (nothing is published)."""


def _check_read(df: Any, ranges: list[OffsetRange]) -> dict[int, int]:
    """Records per partition in the staged data, checked against the planned ranges.

    Every record must lie in its partition's ``[start, end)`` with no offset twice, and no partition
    outside the plan. Fewer records than offsets is allowed (a compacted topic, or transaction
    markers) and logged; the reader itself fails when it cannot reach a range's end.
    """
    from pyspark.sql import functions as F

    rows = (
        df.groupBy("partition")
        .agg(
            F.count("*").alias("n"),
            F.countDistinct("offset").alias("distinct"),
            F.min("offset").alias("lo"),
            F.max("offset").alias("hi"),
        )
        .collect()
    )
    planned = {r.partition: r for r in ranges}
    counts = {r.partition: 0 for r in ranges if r.size > 0}
    for row in rows:
        r = planned.get(int(row.partition))
        where = f"{r.topic if r else '?'}-{row.partition}"
        if r is None or row.lo < r.start or row.hi >= r.end or row.n != row["distinct"]:
            raise ReadCheckError(
                f"{where}: read {row.n} record(s) ({row['distinct']} distinct offsets) in [{row.lo}, {row.hi}], "
                f"the plan was {f'[{r.start}, {r.end})' if r else 'nothing'}: not publishing this run"
            )
        counts[r.partition] = int(row.n)
        if row.n < r.size:
            log.info("%s: %d of %d offsets hold records (compacted or transaction markers)", where, row.n, r.size)
    return counts


def _offsets_of(spark: Any, wh: Warehouse, outs: list[str]) -> Any:
    """The partition and offset of every row staged for one topic (its tables and dead letters)."""
    df = None
    for out in outs:
        if wh.files_under(out):
            part = spark.read.parquet(wh.path(out)).select("partition", "offset")
            df = part if df is None else df.unionByName(part)
    return df


def _ranges_json(ranges: list[OffsetRange]) -> dict[str, dict[str, list[int]]]:
    out: dict[str, dict[str, list[int]]] = {}
    for r in ranges:
        out.setdefault(r.topic, {})[str(r.partition)] = [r.start, r.end]
    return out


def _audit_counts(spark: Any, wh: Warehouse, staged: list[str], run: int, config: LoaderConfig) -> list[dict[str, Any]]:
    """Warehouse-tier count events: records per topic, window of ``origin.created`` (the record
    timestamp when absent) and ``origin.dc`` ("unknown" when absent), from the staged Parquet."""
    from pyspark.sql import functions as F

    from headwater.client.audit import count_event

    df = None
    for out in staged:
        dead = F.lit(int(schemas.is_deadletter(out.split("/", 1)[0]))).alias("dead")
        part = spark.read.parquet(wh.path(out)).select("topic", "timestamp", "headers", dead)
        df = part if df is None else df.unionByName(part)
    if df is None:
        return []
    hdr = F.map_from_entries(F.col("headers"))
    created = F.coalesce(
        F.expr("try_cast(decode(map_from_entries(headers)['origin.created'], 'UTF-8') AS BIGINT)"),
        (F.col("timestamp").cast("double") * 1000).cast("bigint"),
    )
    dc = F.coalesce(F.decode(hdr["origin.dc"], "UTF-8"), F.lit("unknown"))
    window = (F.floor(created / config.audit_window_ms) * config.audit_window_ms).cast("bigint")
    rows = (
        df.groupBy("topic", dc.alias("dc"), window.alias("w"))
        .agg(F.count("*").alias("count"), F.sum("dead").alias("dead"))
        .collect()
    )
    events = []
    for r in rows:
        guid = uuid.uuid5(uuid.NAMESPACE_URL, f"headwater-load/{config.warehouse}/{run}/{r.topic}/{r.dc}/{r.w}").hex
        events.append(
            count_event(
                topic=r.topic,
                window_start=int(r.w),
                window_ms=config.audit_window_ms,
                count=int(r["count"]),
                datacenter=r.dc,
                host=os.uname().nodename,
                application="headwater-load",
                tier="warehouse",
                guid=guid,
            )
        )
        if r.dead:  # of the count, how many landed in <topic>@deadletter (headwater.loader.schemas)
            events[-1]["dead_lettered"] = int(r.dead)
    return sorted(events, key=lambda e: (e["topic"], e["window_start"], e["datacenter"]))


def _gap_event(loss: DataLoss, run: int, config: LoaderConfig) -> dict[str, Any]:
    """A loss at the warehouse tier as the mirror's gap event (its shared format): exact offsets."""
    return {
        "type": "gap",
        "guid": uuid.uuid5(
            uuid.NAMESPACE_URL, f"headwater-load/{config.warehouse}/{run}/{loss.topic}/{loss.partition}/gap"
        ).hex,
        "tier": "warehouse",
        "hop": f"{config.cluster_alias}->warehouse",
        "datacenter": config.cluster_alias,
        "topic": loss.topic,
        "partition": loss.partition,
        "from_offset": loss.from_offset,
        "to_offset": loss.to_offset,
        "records": loss.records,
        "reason": loss.reason,
        "detected_ms": int(time.time() * 1000),
    }


def _publish(
    wh: Warehouse, run: int, manifest: dict[str, Any], config: LoaderConfig, guard: LockGuard | None = None
) -> None:
    if guard:
        guard.check()
    for i, (src, dst) in enumerate(manifest["files"], 1):
        wh.move(src, dst)
        _test_kill(config, f"rename:{i}")
    if guard:
        guard.check()
    wh.commit(run)
    _test_kill(config, "commit")
    log.info("run %d published: %d rename(s); next run starts at its end offsets", run, len(manifest["files"]))
    _log_newest(run, manifest, config)
    _drop_staging(wh, run)
    _publish_audit(wh, run, manifest, config)


def _log_newest(run: int, manifest: dict[str, Any], config: LoaderConfig) -> None:
    """One line per topic: the newest partition directory the run wrote (``date=.../hour=...``),
    with the audit dashboard's page of that hour or day when ``audit.dashboard.url`` is set."""
    zone = manifest.get("partitioning", {}).get("timezone", "UTC")
    by_table = manifest.get("table_partitions", {})
    for topic, dirs in sorted(manifest.get("partitions", {}).items()):
        if not dirs:
            continue
        # a typed topic's rows are in its table versions' directories (<topic>@v<n>), newest dir first
        where = max(
            (
                (d, t)
                for t, ds in by_table.items()
                if t.startswith(f"{topic}{schemas.TABLE_SEP}") and not schemas.is_deadletter(t)
                for d in ds
            ),
            default=(max(dirs), topic),
        )
        newest = f"{where[1]}/run={run_name(run)}/{where[0]}"
        link = (
            f" (audit dashboard: {dashboard_link(config.dashboard_url, topic, max(dirs), zone)})"
            if config.dashboard_url
            else ""
        )
        log.info("run %d: newest partition loaded: %s%s", run, newest, link)


def _test_kill(config: LoaderConfig, step: str) -> None:
    """``headwater.test.kill.after`` (tests only): SIGKILL this process right after ``step``."""
    if config.test_kill_after == step:
        log.warning("headwater.test.kill.after=%s: killing this process (SIGKILL)", step)
        for handler in logging.getLogger().handlers:
            handler.flush()
        os.kill(os.getpid(), signal.SIGKILL)


def _publish_audit(wh: Warehouse, run: int, manifest: dict[str, Any], config: LoaderConfig) -> None:
    """Send a committed run's audit events, once (``<run>.audited``).

    The audit is secondary to the load: a failure (the audit cluster down) is logged at ERROR and
    the run stays unaudited; every later start sends what is still unsent, and loads meanwhile.
    """
    if not config.audit_bootstrap or wh.audited(run):
        return
    if not manifest.get("audit_published"):  # manifests before the .audited marker kept a flag inside
        try:
            _send_audit_events(
                config.audit_bootstrap,
                manifest["audit"],
                config.audit_timeout_ms / 1000.0,
                config.audit_security,
                config.audit_signing_key,
            )
        except Exception as e:
            log.error(
                "run %d: its %d audit event(s) were not sent to %s (%s: %s); the load goes on, the next run sends them",
                run,
                len(manifest["audit"]),
                config.audit_bootstrap,
                type(e).__name__,
                e,
            )
            return
        log.info("run %d: %d warehouse-tier audit event(s) published to __audit", run, len(manifest["audit"]))
    wh.mark_audited(run)


def _send_audit_events(
    bootstrap: str,
    events: list[dict[str, Any]],
    timeout: float = 30.0,
    security: ClientSecurity | None = None,
    signing_key: bytes | None = None,
) -> None:
    """Every event to ``__audit``, acknowledged by all in-sync replicas within ``timeout`` seconds
    (raises otherwise); each signed with ``signing_key`` when one is set."""
    from headwater.client.audit import AUDIT_TOPIC, HEADER_SIGNATURE, sign_event
    from headwater.client.sync import SyncProducer

    def headers(value: bytes) -> tuple[tuple[str, bytes], ...]:
        return ((HEADER_SIGNATURE, sign_event(value, signing_key)),) if signing_key else ()

    deadline = time.monotonic() + timeout
    with SyncProducer(bootstrap, acks="all", security=security) as producer:
        producer.start(timeout)
        futures = [
            producer.send(
                AUDIT_TOPIC,
                value,
                key=(e["guid"] if e.get("type") == "gap" else e["topic"]).encode(),
                headers=headers(value),
            )
            for e, value in ((e, json.dumps(e).encode()) for e in events)
        ]
        for f in futures:
            f.result(max(deadline - time.monotonic(), 0.001))


def _recover(wh: Warehouse, config: LoaderConfig, guard: LockGuard | None = None) -> None:
    """Roll forward a publish a crash interrupted; drop the staging of runs that never published."""
    for name in wh.drop_partial_manifests():
        log.warning("dropped %s, a manifest a crash left half-written (never read)", name)
    for run in wh.manifests(".pending"):
        log.warning("run %d was interrupted while publishing: finishing it", run)
        _publish(wh, run, wh.read_manifest(run, ".pending"), config, guard)
    if config.audit_bootstrap:
        for run in wh.manifests():
            if not wh.audited(run):
                _publish_audit(wh, run, wh.read_manifest(run), config)
    done = wh.manifests()
    if done:
        _drop_staging(wh, done[-1])


def _drop_staging(wh: Warehouse, committed: int) -> None:
    """Delete the staging of runs that can never publish: those numbered at most ``committed``
    (that run number is taken: publishing it again fails on its existing ``.json``).

    Staging of a later run number is left alone: it may belong to a load running elsewhere.
    """
    for rel, run in wh.staging_dirs():
        if run <= committed:
            log.warning("dropping the staging of run %d (%s), which never published (a failed or killed run)", run, rel)
            wh.delete(rel)
            parent = rel.rsplit("/", 1)[0]  # a directory only that staging made (a typed load's
            if not wh.children(parent):  # <topic>@decoded scratch, a table version never published)
                wh.delete(parent)
    for name in wh.children(LEGACY_STAGING):  # written by loaders before the per-topic staging
        log.warning("dropping the staging of run %s, which never published (a failed or killed run)", name)
        wh.delete(f"{LEGACY_STAGING}/{name}")
