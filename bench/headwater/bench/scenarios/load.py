"""Scenario 8: the Spark loader (issue 12). ``headwater load`` with ``spark.master = local[*]``
reads a warm topic of the run's main broker into a Parquet warehouse under the work directory.

The source topic (several partitions, so Spark has parallel tasks) is filled with 1 KB records by
librdkafka; kcat consumes the same topic in the same run (the consume baseline, as in scenario 7).
Then one ``headwater load`` process loads it, timed two ways:

- from process start to exit: what a person running the nightly load waits for, JVM and Spark
  session start-up, the loader's read-back count and audit aggregation, and shutdown included;
- from its log line ``run 1: loading N record(s)`` (the Spark session is up and the end offsets are
  fixed) to ``run 1 published``: the load itself. Lines are timestamped as they arrive on the pipe.

The warehouse is then read with pyarrow (hive partitioning): it must hold every record written, each
(partition, offset) once. The issue's goal, 10 GB of 1 KB records in at most 10 minutes on two
cores, is 10 GiB / 600 s = 17.1 MiB/s of record values; both rows report their ratio to it, and the
start-up-included row also projects the time for 10 GiB (start-up once, plus the load's rate).
Each of ``--runs`` runs loads into a fresh warehouse (verified, then removed).

Spark's own Kafka source runs beside it in the same run (issue 39): ``spark.read.format("kafka")``
(spark-sql-kafka-0-10 from the pinned jars, ``make java-deps``) in a fresh PySpark process on
``local[*]``, reading the same topic (earliest to latest, headers included) and writing the loader's
Parquet layout (every column of the source plus ``date``, ``partitionBy("date")``), read back to check
every (partition, offset) once (:func:`headwater.bench.peers.spark_read`). Two rows, as for the
loader: process start to exit, and the read+write alone (timed inside the session; the loader's
interval also holds its read-back count and publish). Their ratio column is ``headwater load`` /
Spark's source (medians); the note holds the CPU ratio of the two process trees. The loader and
Spark alternate; without the jars the Spark rows say so in one line and the loader's still run.

Typed tables (issue 44): a second topic of the same count holds Avro records of about the same size
(an id, a name, a timestamp, a count and a 900-character text), written with confluent-kafka's
``AvroSerializer`` against Apicurio Registry (``make registry-deps``; started for the scenario, in
memory); ``headwater load`` with ``schema.registry.url`` loads it into ``<topic>@v1`` (typed columns)
right after each binary load. Its row's ratio is its records/s over the binary load's, the load
itself (``loading`` -> ``published``), medians of the same run; the goal is 0.7. Without the built
registry the row says so in one line.
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from headwater.bench import peers
from headwater.bench.context import MIB, Bench, GeneratorError, Target
from headwater.bench.generators import Workload, why_not
from headwater.bench.report import Goal, Row
from headwater.bench.scenarios.consume import fill
from headwater.bench.stream_read import stream_read

SIZE = 1024
FILL = 1_000_000  # records, full plan: ~1 GB of record values
QUICK_FILL = 20_000  # --quick: ~20 MB, enough to show the job runs and loads everything
PARTITIONS = 4
GOAL_BYTES = 10 * 2**30  # the issue: 10 GB of 1 KB records ...
GOAL_SECONDS = 600.0  # ... in at most 10 minutes on two cores
GOAL_MIB_S = GOAL_BYTES / MIB / GOAL_SECONDS
GOAL_TEXT = f">= 10 GiB in 10 min ({GOAL_MIB_S:.1f} MiB/s)"

LOADING = re.compile(r"run (\d+): loading (\d+) record\(s\)")
PUBLISHED = re.compile(r"run (\d+) published")


@dataclass
class LoadRun:
    """One ``headwater load`` process: wall time from start to exit, and the arrival times (on
    the same clock, relative to start) of its ``loading`` and ``published`` lines."""

    wall: float = 0.0
    loading_at: float | None = None
    published_at: float | None = None
    announced: int = 0  # N of "loading N record(s)"
    cpu: float = 0.0  # CPU seconds of the process tree (driver, JVM, Python workers), sampled
    lines: list[str] = field(default_factory=list)
    oom: str = ""  # the first "java.lang.OutOfMemoryError: ..." line: the cause a failed load's last line hides

    @property
    def interval(self) -> float:
        if self.loading_at is None or self.published_at is None:
            return 0.0
        return self.published_at - self.loading_at


def _follow(stream: IO[bytes], log: Path, run: LoadRun, started: float) -> None:
    """Copy the child's output to ``log``, timestamping the two lines that bound the load."""
    with open(log, "ab") as out:
        for raw in iter(stream.readline, b""):
            now = time.perf_counter() - started
            out.write(raw)
            line = raw.decode(errors="replace").rstrip()
            run.lines.append(line)
            del run.lines[:-20]  # keep the tail for error messages
            if not run.oom and "java.lang.OutOfMemoryError" in line:
                run.oom = line.strip()[:200]
            if run.loading_at is None and (m := LOADING.search(line)):
                run.loading_at, run.announced = now, int(m.group(2))
            elif run.published_at is None and PUBLISHED.search(line):
                run.published_at = now


def _load_once(bench: Bench, source: Target, topic: str, warehouse: Path, timeout: float, **extra: str) -> LoadRun:
    """One ``headwater load`` process (local[*]) of ``topic`` into ``warehouse`` (``extra``:
    more loader properties, ``_`` for ``.``)."""
    config = bench.workdir / "load.properties"
    props = {
        "bootstrap.servers": source.bootstrap,
        "topics": re.escape(topic),
        "warehouse.path": str(warehouse),
        "spark.master": "local[*]",
        "spark.ui.enabled": "false",  # no port 4040 taken on a shared machine
        **{k.replace("_", "."): v for k, v in extra.items()},
    }
    config.write_text("".join(f"{k} = {v}\n" for k, v in props.items()))
    log = bench.workdir / "load.log"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    run = LoadRun()
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "headwater.cli.main", "load", "-c", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,  # a Ctrl-C of the bench reaches the bench, which ends the tree below
    )
    assert proc.stdout is not None
    reader = threading.Thread(target=_follow, args=(proc.stdout, log, run, started), daemon=True)
    reader.start()
    cpu = peers.TreeCpu(proc.pid)
    try:
        with cpu:
            code = proc.wait(timeout)
        run.wall = time.perf_counter() - started
    except subprocess.TimeoutExpired:
        raise GeneratorError(f"headwater load did not finish in {timeout:.0f} s (log: {log})") from None
    finally:
        if proc.poll() is None:
            peers.kill_tree(proc.pid)  # the driver, its JVM and the JVM's Python workers
            proc.wait(30)
        reader.join(30)
        run.cpu = cpu.seconds
    if code != 0:
        tail = [ln for ln in run.lines if ln.strip()][-1:] or ["no output"]
        cause = f" (the JVM first: {run.oom})" if run.oom else ""
        raise GeneratorError(f"headwater load exited {code}: {tail[0][:300]}{cause}")
    if run.interval <= 0:
        raise GeneratorError(f"headwater load logged no 'loading' / 'published' lines (log: {log})")
    return run


def _verify(warehouse: Path, topic: str, count: int) -> None:
    """The warehouse holds ``count`` rows of ``topic``, each (partition, offset) once."""
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

    data = ds.dataset(str(warehouse / topic), format="parquet", partitioning="hive")
    table = data.to_table(columns=["partition", "offset"])
    if table.num_rows != count:
        raise GeneratorError(f"the warehouse holds {table.num_rows:,} rows of {topic}, {count:,} were written")
    keys = pc.add(pc.multiply(table["partition"].cast("int64"), 1 << 40), table["offset"].cast("int64"))
    distinct = pc.count_distinct(keys).as_py()
    if distinct != count:
        raise GeneratorError(f"the warehouse holds {count - distinct:,} duplicate (partition, offset) pairs of {topic}")


AVRO_SCHEMA = {
    "type": "record",
    "name": "BenchEvent",
    "namespace": "headwater.bench",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "name", "type": "string"},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "n", "type": "int"},
        {"name": "text", "type": "string"},
    ],
}


def _fill_avro(source: Target, topic: str, count: int, registry_url: str) -> int:
    """``count`` Avro records of about ``SIZE`` bytes into ``topic`` through confluent-kafka's
    ``AvroSerializer`` (the schema registered under ``<topic>-value``); returns their value bytes."""
    import datetime
    import json

    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    ser = AvroSerializer(SchemaRegistryClient({"url": registry_url}), json.dumps(AVRO_SCHEMA))
    ctx = SerializationContext(topic, MessageField.VALUE)
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789" * 30
    now = datetime.datetime.now(datetime.UTC)
    p = Producer({"bootstrap.servers": source.bootstrap, "linger.ms": 20, "batch.size": 1 << 20, "acks": "1"})
    total = 0
    for i in range(count):
        value = ser(
            {"id": i, "name": f"member-{i % 1000}", "at": now, "n": i % 97, "text": alphabet[i % 36 :][:900]}, ctx
        )
        total += len(value)
        while True:
            try:
                p.produce(topic, value=value, key=str(i % 1000).encode())
                break
            except BufferError:
                p.poll(0.05)
        if i % 10_000 == 0:
            p.poll(0)
    if p.flush(120) != 0:
        raise GeneratorError(f"{topic}: Avro records still unsent after 120 s")
    return total


def run(bench: Bench) -> list[Row]:
    assert bench.main is not None
    source = bench.main
    count = QUICK_FILL if bench.plan.quick else bench.plan.count(FILL)
    mib = count * SIZE / MIB
    kcat_row = Row(
        "8",
        f"1 KB, {count:,} records ({mib:,.0f} MiB), {PARTITIONS} partitions",
        "kcat (consume baseline)",
        primary="MiB/s",
    )
    whole = Row(
        "8",
        "headwater load, local[*] -> Parquet: process start to exit (JVM, Spark start-up included)",
        "headwater load (PySpark)",
        primary="MiB/s",
        reference="issue 12: 10 GB of 1 KB records in <= 10 min on two cores",
        goal=Goal(GOAL_TEXT, GOAL_MIB_S),
    )
    inner = Row(
        "8",
        "headwater load, local[*] -> Parquet: from 'loading' to 'published' (the load itself)",
        "headwater load (PySpark)",
        primary="MiB/s",
        goal=Goal(GOAL_TEXT, GOAL_MIB_S),
    )
    spark = f'Spark\'s format("kafka") (spark-sql-kafka-0-10 {peers.pinned("spark.version")})'
    spark_whole = Row(
        "8",
        "the same topic, the loader's Parquet layout (every column, partitionBy date), local[*]: process start to exit",
        spark,
        primary="MiB/s",
        ratio_style="times",
    )
    spark_inner = Row(
        "8",
        "the same, from the read's start to the Parquet written (the load itself)",
        spark,
        primary="MiB/s",
        ratio_style="times",
    )
    stream_row = Row(  # issue 44: the streaming reader, as a ratio to the batch load (inner) of this run
        "8",
        "readStream.format(headwater), AvailableNow in 4 micro-batches -> the loader's Parquet layout: the query alone",
        'readStream.format("headwater")',
        primary="MiB/s",
        goal=Goal(">= 0.7x the batch load ('loading' -> 'published')", 0.7, on="ratio"),
    )
    typed = Row(
        "8",
        "headwater load of Avro records (registry, typed columns), from 'loading' to 'published'",
        "headwater load (PySpark), schema.registry.url",
        primary="records/s",
        reference="issue 44: typed Avro loading, as a ratio to the binary load in the same run",
        goal=Goal(">= 0.7 x the binary load's records/s", 0.7, on="ratio"),
    )
    rows = [kcat_row, whole, inner, spark_whole, spark_inner, stream_row, typed]
    why = why_not(bench, "rdkafka-c") and why_not(bench, "confluent")
    try:
        import pyarrow.dataset  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError as e:
        why = why or f"needs the loader extra (pyspark, pyarrow): {e}"
    if why:
        for r in rows:
            r.unavailable = why
            bench.add(r)
        return rows
    no_jars = peers.jars_missing("Spark's Kafka source")
    from headwater.testing import registry as schema_registry

    no_registry = schema_registry.unavailable()
    registry: schema_registry.RegistryProcess | None = None
    try:
        topic = bench.topic("load")
        bench.create_topic(source, topic, PARTITIONS)
        bench.log(f"filling {topic}: {count:,} records of {SIZE} B in {PARTITIONS} partitions")
        fill(bench, source, topic, count, Workload(SIZE))
        kcat = bench.consume_kcat(source, topic, count, SIZE, 1 << 20)
        kcat_row.figure("MiB/s").add(kcat.mib_per_s)
        kcat_row.figure("records/s").add(kcat.records_per_s)
        bench.add(kcat_row)
        timeout = max(600.0, count * SIZE / MIB / 2 + 300)  # down to 2 MiB/s on a busy machine
        typed_topic = bench.topic("load-avro")
        if no_registry is None:
            registry = schema_registry.RegistryProcess(bench.workdir / "registry").start()
            bench.create_topic(source, typed_topic, PARTITIONS)
            bench.log(f"filling {typed_topic}: {count:,} Avro records (AvroSerializer, {registry.url})")
            typed_bytes = _fill_avro(source, typed_topic, count, registry.url)
        loads: list[LoadRun] = []
        sparks: list[peers.SparkRun] = []
        broker: list[float] = []
        stream_ratios: list[float] = []
        for i in range(bench.plan.runs):  # headwater load, then Spark's source, alternating
            warehouse = bench.workdir / f"warehouse-{i}"
            bench.log(f"headwater load (local[*]) of {count:,} records into {warehouse}")
            with bench.watch(source) as usage:
                got = _load_once(bench, source, topic, warehouse, timeout)
            if got.announced != count:
                raise GeneratorError(f"headwater load announced {got.announced:,} records, {count:,} were written")
            _verify(warehouse, topic, count)
            shutil.rmtree(warehouse, ignore_errors=True)
            loads.append(got)
            broker.append(usage.broker_cpu / got.wall if got.wall > 0 else 0.0)
            for row, seconds in ((whole, got.wall), (inner, got.interval)):
                row.figure("MiB/s").add(mib / seconds)
                row.figure("records/s").add(count / seconds)
            whole.figure("CPU s").add(got.cpu)
            bench.log(f"readStream.format(headwater) of {count:,} records (AvailableNow, 4 micro-batches)")
            try:  # a failure here fails this row only
                streamed = stream_read(source.bootstrap, topic, bench.workdir / f"stream-{i}", count, timeout=timeout)
                stream_row.figure("MiB/s").add(mib / streamed.seconds)
                stream_row.figure("records/s").add(count / streamed.seconds)
                stream_ratios.append((mib / streamed.seconds) / (mib / got.interval))
            except RuntimeError as e:
                stream_row.unavailable = f"failed: {str(e)[:300]}"
            shutil.rmtree(bench.workdir / f"stream-{i}", ignore_errors=True)
            if registry is not None and not typed.unavailable:
                bench.log(f"headwater load (local[*], typed) of {count:,} Avro records into {warehouse}-typed")
                try:  # a failure here fails this row only (and its later runs: a figure needs every run)
                    avro = _load_once(
                        bench,
                        source,
                        typed_topic,
                        Path(f"{warehouse}-typed"),
                        timeout,
                        schema_registry_url=registry.url,
                    )
                    _verify(Path(f"{warehouse}-typed"), f"{typed_topic}@v1", count)
                    typed.figure("records/s").add(count / avro.interval)
                    typed.figure("MiB/s").add(typed_bytes / MIB / avro.interval)
                    typed.figure("binary records/s").add(count / got.interval)
                except GeneratorError as e:
                    typed.unavailable = f"failed in run {i + 1}: {str(e)[:300]}"
                shutil.rmtree(f"{warehouse}-typed", ignore_errors=True)
            if no_jars is None:
                out = bench.workdir / f"spark-kafka-{i}"
                bench.log(f"Spark's format(kafka) (local[*]) of {count:,} records into {out}-0")
                ran = peers.spark_read(
                    source.bootstrap,
                    topic,
                    "kafka",
                    out,
                    count,
                    layout="loader",
                    master="local[*]",
                    reads=1,
                    timeout=timeout,
                )
                shutil.rmtree(f"{out}-0", ignore_errors=True)
                sparks.append(ran)
                for row, seconds in ((spark_whole, ran.wall), (spark_inner, ran.seconds[-1])):
                    row.figure("MiB/s").add(mib / seconds)
                    row.figure("records/s").add(count / seconds)
                spark_whole.figure("CPU s").add(ran.cpu)
        for row in (whole, inner):
            row.ratio_override = row.value / kcat.mib_per_s
            row.baseline = "kcat consuming the source"
        wall = statistics.median(r.wall for r in loads)
        interval = statistics.median(r.interval for r in loads)
        startup = wall - interval
        projected = startup + GOAL_BYTES / MIB / inner.value
        client = statistics.median(r.cpu / r.wall for r in loads if r.wall > 0)
        whole.note = (
            f"{wall:.1f} s, of which {startup:.1f} s outside the load; busy: broker {statistics.median(broker):.0%}, "
            f"load (driver, JVM, workers) {client:.0%} of a core; projected for 10 GiB: {projected / 60:.1f} min"
        )
        inner.note = f"{interval:.1f} s; warehouse verified with pyarrow: {count:,} rows, each offset once, every run"
        bench.add(whole)
        bench.add(inner)
        if not stream_row.unavailable:
            stream_row.ratio_override = stream_row.value / inner.value
            stream_row.baseline = "ratio: the streaming reader / the batch load ('loading' -> 'published'), medians"
        stream_row.note = (
            "run by run: "
            + ", ".join(f"{r:.2f}" for r in stream_ratios)
            + f"; read back: {count:,} rows, each offset once"
        )
        bench.add(stream_row)
        if no_jars is not None:
            spark_whole.unavailable = spark_inner.unavailable = no_jars
        else:
            # the ratio asked for: headwater load / Spark's source, medians of this run
            spark_whole.ratio_override = whole.value / spark_whole.value
            spark_inner.ratio_override = inner.value / spark_inner.value
            spark_whole.baseline = spark_inner.baseline = "ratio: headwater load / Spark's source"
            cpu = whole.figures["CPU s"].median / spark_whole.figures["CPU s"].median
            spark_whole.note = (
                f"{statistics.median(r.wall for r in sparks):.1f} s; headwater load / Spark's source: "
                f"{cpu:.2f}x the CPU (process trees, start to exit)"
            )
            spark_inner.note = (
                f"{statistics.median(r.seconds[-1] for r in sparks):.1f} s (one read in a fresh session, as "
                "headwater load's; its interval also holds the read-back count and the publish); "
                f"read back: {count:,} rows, each offset once, every run"
            )
        bench.add(spark_whole)
        bench.add(spark_inner)
        if registry is None:
            typed.unavailable = no_registry or "the registry did not start"
        elif not typed.unavailable:
            typed.ratio_override = typed.value / inner.figures["records/s"].median
            typed.baseline = "the binary load's records/s (the load itself), this run"
            ratios = [
                t / b for t, b in zip(typed.figures["records/s"].samples, typed.figures["binary records/s"].samples)
            ]
            typed.note = (
                f"Avro values {typed_bytes / count:.0f} B on average; typed / binary per run: "
                f"{min(ratios):.2f}-{max(ratios):.2f}; read back: {count:,} rows in {typed_topic}@v1, each offset once"
            )
        bench.add(typed)
    except (GeneratorError, RuntimeError, OSError) as e:
        for r in rows:
            if not r.figures and not r.unavailable:
                r.unavailable = f"failed: {e}"
            if not any(x is r for x in bench.report.rows):
                bench.add(r)
    finally:
        if registry is not None:
            registry.stop()
    return rows
