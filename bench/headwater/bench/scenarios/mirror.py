"""Scenario 7: the mirror (issue 10). One source broker (the run's main broker), one ``headwater
mirror`` process, one destination broker (a second one-broker cluster under a chroot of the run's
ZooKeeper).

The source topic is filled with 100-byte records by librdkafka with its default batching; kcat
consumes the same topic in the same run (the consume baseline). The mirror then copies the topic:
the clock runs from the first record seen in the destination (its high watermark, read with
librdkafka) to the last, so the mirror's start-up and first rebalance are left out, as kcat's first
fetch is. Two rows: the fast path (same partition count: raw batches) and the re-partitioning
path (the destination topic created beforehand with another partition count: records decoded and
partitioned by key).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from headwater.bench.context import Bench, GeneratorError, Target
from headwater.bench.generators import Workload, why_not
from headwater.bench.report import Goal, Row
from headwater.bench.scenarios.consume import fill
from headwater.testing.cluster import LocalCluster

SIZE = 100
FILL = 2_000_000  # records, full plan
QUICK_FILL = 20_000  # --quick: enough to show both paths work
SOURCE_PARTITIONS = 1
REPARTITIONED = 2  # destination partitions on the re-partitioning path


def _high_watermark_total(consumer: Any, topic: str, timeout: float) -> int:
    """Sum of the destination partitions' high watermarks (0 while the topic does not exist)."""
    from confluent_kafka import TopicPartition

    md = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
    if md is None or md.error is not None or not md.partitions:
        return 0
    return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)[1] for p in md.partitions)


def _mirror_once(bench: Bench, source: Target, dest: Target, dest_zk: str, topic: str, count: int) -> float:
    """Run one mirror process over ``topic`` until the destination holds ``count`` records;
    records/s from the first destination record to the last."""
    name = f"mirror-{topic}"
    props = {
        "clusters": "src, dst",
        "src.zookeeper.connect": bench.zk_connect,
        "src.bootstrap.servers": source.bootstrap,
        "dst.bootstrap.servers": dest.bootstrap,
        "dst.zookeeper.connect": dest_zk,
        "src->dst.enabled": "true",
        "src->dst.topics": topic,
        "group.id": f"bench-{name}",
    }
    return mirror_rate(bench, name, props, dest, topic, count, bench.plan.max_seconds * 4 + 120)


def mirror_rate(
    bench: Bench, name: str, props: dict[str, str], dest: Target, target_topic: str, count: int, deadline_s: float
) -> float:
    """Start ``headwater mirror`` with ``props`` and wait (at most ``deadline_s``) until ``target_topic``
    in the destination holds ``count`` records; records/s from the first destination record to the
    last (from the start when all of them arrived between two looks). The process is stopped after."""
    config = bench.workdir / f"{name}.properties"
    config.write_text("".join(f"{k} = {v}\n" for k, v in props.items()))
    log = Path(bench.workdir / f"{name}.log")
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "headwater.cli.main", "mirror", "-c", str(config)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    from confluent_kafka import Consumer

    watch = Consumer({"bootstrap.servers": dest.bootstrap, "group.id": "headwater-bench-watch"})
    started = time.perf_counter()
    try:
        deadline = time.monotonic() + deadline_s
        first = 0.0
        first_count = 0
        seen = 0
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                tail = log.read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
                raise GeneratorError(f"the mirror exited {proc.returncode}: {tail[0][:300]}")
            seen = _high_watermark_total(watch, target_topic, 10)
            now = time.perf_counter()
            if seen and not first:
                first, first_count = now, seen
            if seen >= count:
                if seen <= first_count or now <= first:  # all of it between two looks: time from the start
                    return seen / (now - started)
                return (seen - first_count) / (now - first)
            time.sleep(0.05)
        raise GeneratorError(f"the destination holds {seen:,} of {count:,} records after the deadline")
    finally:
        watch.close()
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(30)


def run(bench: Bench) -> list[Row]:
    assert bench.main is not None
    source = bench.main
    rows: list[Row] = []
    count = QUICK_FILL if bench.plan.quick else bench.plan.count(FILL)
    kcat_row = Row("7", f"100 B, {count:,} records, 1 partition", "kcat (consume baseline)", primary="records/s")
    fast = Row(
        "7",
        "fast path: raw batches, same partition",
        "headwater mirror",
        primary="records/s",
        reference="issue 10: >= 1,000,000 rec/s",
        goal=Goal(">= 50 % of kcat", 0.50, on="ratio"),
    )
    slow = Row(
        "7",
        f"re-partitioning path: 1 -> {REPARTITIONED} partitions, decoded",
        "headwater mirror",
        primary="records/s",
    )
    rows += [kcat_row, fast, slow]
    why = why_not(bench, "rdkafka-c") and why_not(bench, "confluent")
    if why or not bench.zk_connect:
        for r in rows:
            r.unavailable = why or "no ZooKeeper"
            bench.add(r)
        return rows
    dest_zk = f"{bench.zk_connect}/bench-mirror-dst"
    try:
        with LocalCluster(bench.workdir / "mirror-dst", size=1, zk_connect=dest_zk) as cluster:
            dest = Target("mirror destination", cluster.bootstrap, [b.pid for b in cluster.brokers], 1, "all")
            bench.log(f"mirror destination broker up at {cluster.bootstrap}")
            topic = bench.topic("mirror")
            bench.create_topic(source, topic, SOURCE_PARTITIONS)
            fill(bench, source, topic, count, Workload(SIZE))
            kcat = bench.consume_kcat(source, topic, count, SIZE, 1 << 20)
            kcat_row.figure("records/s").add(kcat.records_per_s)
            bench.add(kcat_row)
            fast_rate = _mirror_once(bench, source, dest, dest_zk, topic, count)
            fast.figure("records/s").add(fast_rate)
            fast.ratio_override = fast_rate / kcat.records_per_s
            fast.baseline = "kcat consuming the source"
            bench.add(fast)
            other = bench.topic("mirror-repartition")
            bench.create_topic(source, other, SOURCE_PARTITIONS)
            bench.create_topic(dest, other, REPARTITIONED)
            fill(bench, source, other, count, Workload(SIZE))
            slow_rate = _mirror_once(bench, source, dest, dest_zk, other, count)
            slow.figure("records/s").add(slow_rate)
            slow.ratio_override = slow_rate / kcat.records_per_s
            slow.baseline = "kcat consuming the source"
            bench.add(slow)
    except (GeneratorError, RuntimeError) as e:
        for r in rows:
            if not r.figures:
                r.unavailable = f"failed: {e}"
                bench.add(r)
    return rows
