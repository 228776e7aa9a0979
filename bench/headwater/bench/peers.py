"""Kafka's own tools as the peers of Headwater's in the bench: MirrorMaker 2 beside ``headwater
mirror`` (scenario 7 and ``--versus kafka --only mm2``) and Spark's ``format("kafka")`` source beside
``headwater load`` / ``format("headwater")`` (scenario 8 and ``--versus kafka --only spark``).

One copy of what those places share:

- :func:`copy_timed`: start a copying process (MM2 or ``headwater mirror``) and time it from the first
  record seen in the destination topic (its high watermarks, polled every 50 ms with librdkafka) to the
  last, the CPU of its whole process tree sampled beside;
- :func:`mm2_properties` / :func:`mm2_command`: MM2 in dedicated mode (``connect-mirror-maker.sh
  mm2.properties``) from the pinned jars (tests/java/pom.xml, ``make java-deps``);
- :func:`spark_read`: Spark's ``spark.read.format(fmt)`` in a child process (its JVM gets the
  connector's jars at start), writing either a flat Parquet (partition, offset, key, value) or the
  loader's own layout (every column of the source, ``partitionBy("date")``, as ``headwater load``);
- :class:`TreeCpu`: the CPU seconds of a process and its descendants (a JVM's, PySpark's workers).

:func:`jars_missing` says in one line why a row of Kafka's tools cannot run (the jars not fetched).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from headwater.bench.procmon import cpu_seconds
from headwater.testing import java


def jars_missing(name: str) -> str | None:
    """One line saying why the pinned jar set ``name`` cannot be used, or None when it can."""
    why = java.unavailable()
    if why is None:
        return None
    return f"{name}: not run, the pinned Java jars are missing ({why})"


def pinned(prop: str) -> str:
    """A version pinned in tests/java/pom.xml (``kafka.streams.version``: MM2's; ``spark.version``),
    "?" when the project is not there."""
    try:
        m = re.search(rf"<{re.escape(prop)}>([^<]+)</", (java.JAVA_PROJECT / "pom.xml").read_text())
    except OSError:
        return "?"
    return m.group(1) if m else "?"


# --- CPU of a process tree ---------------------------------------------------------------------


def tree(root: int) -> list[int]:
    """``root`` and its descendants, from /proc. A JVM is its launcher's child; Spark's Python
    worker daemons are the JVM's children but each in its own process group (PySpark's daemon
    calls setpgid), so neither getrusage(RUSAGE_CHILDREN) nor the process group finds them all."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            ppid = int(stat[stat.rindex(b")") + 2 :].split()[1])
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += children.get(pid, [])
    return out


def kill_tree(root: int) -> None:
    """SIGKILL to ``root`` and each of its descendants."""
    for pid in tree(root):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


class TreeCpu:
    """Samples the CPU seconds of ``root``'s tree every half second while in use; a process that
    exits keeps its last sample, so up to half a second of each is missed (Spark reuses its Python
    workers; MM2 and the mirror are one process). ``seconds`` is the sum after the block."""

    def __init__(self, root: int) -> None:
        self.root = root
        self._last: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while True:
            for pid in tree(self.root):
                try:
                    self._last[pid] = cpu_seconds(pid)
                except OSError:
                    continue
            if self._stop.wait(0.5):
                return

    def sample_now(self) -> None:
        """One more look (call before the process ends, to catch its last half second)."""
        for pid in tree(self.root):
            try:
                self._last[pid] = cpu_seconds(pid)
            except OSError:
                continue

    @property
    def seconds(self) -> float:
        return sum(self._last.values())

    def __enter__(self) -> TreeCpu:
        self._thread.start()
        return self

    def __exit__(self, *exc: object | TracebackType) -> None:
        self._stop.set()
        self._thread.join(30)


# --- a copying process, timed at the destination --------------------------------------------------


@dataclass
class Copied:
    """One copy: records/s from the first record seen in the destination to the last (from the
    process start when all of them arrived between two looks), seconds from the process start to the
    last record, and the CPU seconds of the copier's process tree over that time."""

    rate: float
    e2e: float
    cpu: float

    @property
    def cores(self) -> float:
        """CPU of the copier over its life (start-up included), in cores."""
        return self.cpu / self.e2e if self.e2e > 0 else 0.0


def high_watermark_total(consumer: Any, topic: str, timeout: float) -> int:
    """Sum of ``topic``'s partitions' high watermarks (0 while the topic does not exist)."""
    from confluent_kafka import TopicPartition

    md = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
    if md is None or md.error is not None or not md.partitions:
        return 0
    return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)[1] for p in md.partitions)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after 60 s (a copier commits its offsets on SIGTERM)."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)


def copy_timed(cmd: list[str], log_path: Path, dest: str, topic: str, count: int, deadline_s: float) -> Copied:
    """Start ``cmd`` and wait (at most ``deadline_s``) until ``topic`` in ``dest`` holds ``count``
    records; the process is stopped after. Raises RuntimeError when it exits early or runs late."""
    from confluent_kafka import Consumer

    with open(log_path, "ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    started = time.perf_counter()
    watch = Consumer({"bootstrap.servers": dest, "group.id": "headwater-bench-watch"})
    try:
        with TreeCpu(proc.pid) as cpu:
            first = 0.0
            first_count = 0
            seen = 0
            deadline = time.monotonic() + deadline_s
            while time.monotonic() < deadline:
                if proc.poll() is not None:
                    tail = log_path.read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
                    raise RuntimeError(f"{Path(cmd[0]).name} exited {proc.returncode}: {tail[0][:300]}")
                try:
                    seen = high_watermark_total(watch, topic, 10)
                except Exception:  # the topic is being created: not yet
                    seen = 0
                now = time.perf_counter()
                if seen and not first:
                    first, first_count = now, seen
                if seen >= count:
                    cpu.sample_now()
                    e2e = now - started
                    if seen <= first_count or now <= first:
                        return Copied(seen / e2e, e2e, cpu.seconds)
                    return Copied((seen - first_count) / (now - first), e2e, cpu.seconds)
                time.sleep(0.05)
            raise RuntimeError(f"{topic} in {dest} holds {seen:,} of {count:,} after {deadline_s:.0f}s ({log_path})")
    finally:
        watch.close()
        stop(proc)


def mirror_command(config: Path) -> list[str]:
    """``headwater mirror -c config``."""
    return [sys.executable, "-m", "headwater.cli.main", "mirror", "-c", str(config)]


# --- MirrorMaker 2 -----------------------------------------------------------------------------


def mm2_properties(path: Path, src: str, dst: str, topic: str, replication_factor: int = 1, alias: str = "dc1") -> Path:
    """MirrorMaker 2 dedicated mode copying ``topic`` from ``alias`` (``src``, dc1 by default) to agg
    (``dst``), into ``<alias>.<topic>``; its own internal topics with one replica, the mirrored ones
    with ``replication_factor``."""
    rf1 = [
        f"{p}.replication.factor = 1"
        for p in (
            "offset.storage",
            "config.storage",
            "status.storage",
            "heartbeats.topic",
            "checkpoints.topic",
            "offset-syncs.topic",
        )
    ]
    path.write_text(
        "\n".join(
            [
                f"clusters = {alias}, agg",
                f"{alias}.bootstrap.servers = {src}",
                f"agg.bootstrap.servers = {dst}",
                f"{alias}->agg.enabled = true",
                f"{alias}->agg.topics = {topic}",
                f"{alias}->agg.groups = .*",
                f"agg->{alias}.enabled = false",
                f"replication.factor = {replication_factor}",
                "sync.topic.acls.enabled = false",
                "emit.heartbeats.interval.seconds = 1",
                "emit.checkpoints.interval.seconds = 1",
                "refresh.topics.interval.seconds = 5",
                "refresh.groups.interval.seconds = 5",
                "tasks.max = 2",
                *rf1,
                "",
            ]
        )
    )
    return path


def mm2_command(props: Path) -> list[str]:
    """``connect-mirror-maker.sh props`` from the pinned jars (agg's driver only), heap 768 MiB."""
    return java.java_command(
        "org.apache.kafka.connect.mirror.MirrorMaker",
        [str(props), "--clusters", "agg"],
        "streams-mm2",
        heap="768m",
        quick_start=False,
    )


# --- Spark: format("kafka") and format("headwater") --------------------------------------------

SPARK = textwrap.dedent(
    """
    import json, sys, time
    from pyspark.sql import SparkSession, functions as F
    bootstrap, topic, jars, out, fmt, layout, master, reads = sys.argv[1:9]
    spark = (SparkSession.builder.master(master).appName("bench-spark-" + fmt)
             .config("spark.jars", jars).config("spark.ui.enabled", "false").getOrCreate())
    if fmt == "headwater":
        from headwater.loader.source import HeadwaterDataSource
        spark.dataSource.register(HeadwaterDataSource)
    times = []
    for i in range(int(reads)):
        t = time.perf_counter()
        df = (spark.read.format(fmt).option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
              .option("startingOffsets", "earliest").option("endingOffsets", "latest"))
        if layout == "loader":  # headwater load's columns and partitioning
            df = df.option("includeHeaders", "true").load()
            df.withColumn("date", F.date_format(F.col("timestamp"), "yyyy-MM-dd")).write.mode(
                "overwrite").partitionBy("date").parquet(f"{out}-{i}")
        else:
            df.load().select("partition", "offset", "key", "value").write.mode("overwrite").parquet(f"{out}-{i}")
        times.append(time.perf_counter() - t)
    got = spark.read.parquet(f"{out}-{int(reads) - 1}")
    rows = got.count()
    distinct = got.select("partition", "offset").distinct().count()
    print(json.dumps({"seconds": times, "rows": rows, "distinct": distinct}))
    spark.stop()
    """
)


@dataclass
class SparkRun:
    """One Spark child process: the in-session seconds of each read+write, the process's wall time
    (JVM and session start-up, the read-back check and shutdown included) and its tree's CPU."""

    seconds: list[float]
    wall: float
    cpu: float


def spark_read(
    bootstrap: str,
    topic: str,
    fmt: str,
    out: Path,
    count: int,
    *,
    layout: str = "flat",
    master: str = "local[2]",
    reads: int = 2,
    timeout: float = 900,
) -> SparkRun:
    """Spark's ``spark.read.format(fmt)`` of ``topic`` (earliest to latest) written to Parquet under
    ``out-<i>``, ``reads`` times in one session; the last write must hold ``count`` rows, each
    (partition, offset) once. Raises RuntimeError otherwise."""
    jars = java.classpath("spark-kafka").replace(os.pathsep, ",")
    env = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    args = [sys.executable, "-c", SPARK, bootstrap, topic, jars, str(out), fmt, layout, master, str(reads)]
    started = time.perf_counter()
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    with TreeCpu(proc.pid) as cpu:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_tree(proc.pid)
            proc.communicate()
            raise RuntimeError(f"Spark format({fmt}) did not finish in {timeout:.0f}s") from None
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"Spark format({fmt}) exited {proc.returncode}: {stderr[-2000:]}")
    res = json.loads(stdout.strip().splitlines()[-1])
    if res["rows"] != count or res["distinct"] != count:
        raise RuntimeError(f"Spark format({fmt}) wrote {res['rows']} rows ({res['distinct']} offsets) of {count}")
    return SparkRun([float(s) for s in res["seconds"]], wall, cpu.seconds)
