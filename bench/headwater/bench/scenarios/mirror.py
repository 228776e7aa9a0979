"""Scenario 7: the mirror (issue 10). One source broker (the run's main broker), one ``headwater
mirror`` process, one destination broker (a second one-broker cluster under a chroot of the run's
ZooKeeper).

The source topic is filled with 100-byte records by librdkafka with its default batching; kcat
consumes the same topic in the same run (the consume baseline). The mirror then copies the topic:
the clock runs from the first record seen in the destination (its high watermark, read with
librdkafka) to the last, so the mirror's start-up and first rebalance are left out, as kcat's first
fetch is. Rows: the fast path (same partition count: raw batches), Kafka's MirrorMaker 2 over the
same topic and destination, and the re-partitioning path (the destination topic created beforehand
with another partition count: records decoded and partitioned by key).

The fast path and MM2 alternate, ``--runs`` times each, over the one filled source topic: run ``i`` of
the mirror copies into ``run<i>.<topic>``, of MM2 into ``mm2run<i>.<topic>`` (both under
DefaultReplicationPolicy, MM2's naming). MM2 runs in dedicated mode from the pinned jars
(``connect-mirror-maker.sh``, the properties of :func:`headwater.bench.peers.mm2_properties`), heap
768 MiB. Both are timed the same way (:func:`headwater.bench.peers.copy_timed`): records/s from the
first destination record to the last; CPU is the copier's process tree from its start to the last
record (start-up included: a JVM's and Connect's, or Python's), per record and in cores; MM2's row
notes headwater mirror / MM2 for both. Without the jars the MM2 row says so in one line; ``--quick``
without ``--only`` leaves MM2 out (its Connect start-up alone takes ~30 s). The re-partitioning path
runs once.
"""

from __future__ import annotations

from headwater.bench import peers
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


def _mirror_once(
    bench: Bench, source: Target, dest: Target, dest_zk: str, topic: str, count: int, alias: str = ""
) -> peers.Copied:
    """Run one mirror process over ``topic`` until the destination holds ``count`` records (in
    ``<alias>.<topic>`` under DefaultReplicationPolicy when ``alias`` is given, else ``topic``)."""
    name = f"mirror-{alias or 'src'}-{topic}"
    src = alias or "src"
    props = {
        "clusters": f"{src}, dst",
        f"{src}.zookeeper.connect": bench.zk_connect,
        f"{src}.bootstrap.servers": source.bootstrap,
        "dst.bootstrap.servers": dest.bootstrap,
        "dst.zookeeper.connect": dest_zk,
        f"{src}->dst.enabled": "true",
        f"{src}->dst.topics": topic,
        "group.id": f"bench-{name}",
    }
    if alias:
        props["replication.policy.class"] = "DefaultReplicationPolicy"
    target = f"{alias}.{topic}" if alias else topic
    return mirror_copy(bench, name, props, dest, target, count, bench.plan.max_seconds * 4 + 120)


def _mm2_once(bench: Bench, source: Target, dest: Target, topic: str, count: int, alias: str) -> peers.Copied:
    """MirrorMaker 2 (dedicated mode, the pinned connect-mirror) copying ``topic`` into
    ``<alias>.<topic>`` of the destination: its Connect workers' start-up is in the end-to-end time and
    the CPU, not in the records/s (from the first record seen in the destination, as the mirror's)."""
    props = peers.mm2_properties(
        bench.workdir / f"mm2-{alias}.properties", source.bootstrap, dest.bootstrap, topic, alias=alias
    )
    deadline = max(bench.plan.max_seconds * 4 + 120, 120 + count / 2_000)
    return peers.copy_timed(
        peers.mm2_command(props),
        bench.workdir / f"mm2-{alias}.log",
        dest.bootstrap,
        f"{alias}.{topic}",
        count,
        deadline,
    )


def mirror_copy(
    bench: Bench, name: str, props: dict[str, str], dest: Target, target_topic: str, count: int, deadline_s: float
) -> peers.Copied:
    """Start ``headwater mirror`` with ``props`` and wait (at most ``deadline_s``) until ``target_topic``
    in the destination holds ``count`` records (:func:`headwater.bench.peers.copy_timed`)."""
    config = bench.workdir / f"{name}.properties"
    config.write_text("".join(f"{k} = {v}\n" for k, v in props.items()))
    return peers.copy_timed(
        peers.mirror_command(config), bench.workdir / f"{name}.log", dest.bootstrap, target_topic, count, deadline_s
    )


def mirror_rate(
    bench: Bench, name: str, props: dict[str, str], dest: Target, target_topic: str, count: int, deadline_s: float
) -> float:
    """records/s of :func:`mirror_copy`, from the first destination record to the last."""
    return mirror_copy(bench, name, props, dest, target_topic, count, deadline_s).rate


def _cpu(row: Row, got: peers.Copied, count: int) -> None:
    row.figure("records/s").add(got.rate)
    row.figure("CPU us/record", "us").add(got.cpu / count * 1e6)
    row.figure("cores").add(got.cores)
    row.figure("start to last record", "s").add(got.e2e)


def run(bench: Bench, mm2: bool = True) -> list[Row]:
    """The scenario's rows; MirrorMaker 2's only when ``mm2`` (``--quick`` without ``--only`` leaves it out)."""
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
    mm2_row = Row(
        "7",
        "the same topic, same destination: Kafka's MirrorMaker 2 (dedicated mode)",
        f"MirrorMaker 2 (connect-mirror {peers.pinned('kafka.streams.version')})",
        primary="records/s",
    )
    slow = Row(
        "7",
        f"re-partitioning path: 1 -> {REPARTITIONED} partitions, decoded",
        "headwater mirror",
        primary="records/s",
    )
    rows += [kcat_row, fast, mm2_row, slow]
    why = why_not(bench, "rdkafka-c") and why_not(bench, "confluent")
    if why or not bench.zk_connect:
        for r in rows:
            r.unavailable = why or "no ZooKeeper"
            bench.add(r)
        return rows
    no_jars = peers.jars_missing("MirrorMaker 2") if mm2 else "not run: --quick without --only 7 leaves MM2 out"
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
            # each run copies the same source topic again, the mirror into run<i>.<topic> (as MM2's
            # DefaultReplicationPolicy names it), MM2 into mm2run<i>.<topic>: mirror, MM2, mirror, ...
            for i in range(bench.plan.runs):
                _cpu(fast, _mirror_once(bench, source, dest, dest_zk, topic, count, alias=f"run{i}"), count)
                if no_jars is None:
                    _cpu(mm2_row, _mm2_once(bench, source, dest, topic, count, alias=f"mm2run{i}"), count)
            fast.ratio_override = fast.value / kcat.records_per_s
            fast.baseline = "kcat consuming the source"
            bench.add(fast)
            if no_jars is not None:
                mm2_row.unavailable = no_jars
            else:
                mm2_row.ratio_override = mm2_row.value / kcat.records_per_s
                mm2_row.baseline = "kcat consuming the source"
                mm2_row.note = _versus(fast, mm2_row)
            bench.add(mm2_row)
            other = bench.topic("mirror-repartition")
            bench.create_topic(source, other, SOURCE_PARTITIONS)
            bench.create_topic(dest, other, REPARTITIONED)
            fill(bench, source, other, count, Workload(SIZE))
            slow_rate = _mirror_once(bench, source, dest, dest_zk, other, count).rate
            slow.figure("records/s").add(slow_rate)
            slow.ratio_override = slow_rate / kcat.records_per_s
            slow.baseline = "kcat consuming the source"
            bench.add(slow)
    except (GeneratorError, RuntimeError) as e:
        for r in rows:
            if not r.figures and not r.unavailable:
                r.unavailable = f"failed: {e}"
            if not any(x is r for x in bench.report.rows):
                bench.add(r)
    return rows


def _versus(mirror: Row, mm2: Row) -> str:
    """headwater mirror / MM2, medians of the same run."""
    rate = mirror.value / mm2.value
    cpu = mirror.figures["CPU us/record"].median / mm2.figures["CPU us/record"].median
    return f"headwater mirror / MM2: {rate:.2f}x the records/s, {cpu:.2f}x the CPU per record (start-up included)"
