"""acks=all with replication factor 3 on three local brokers: scenario 1 and scenario 3 rows.

Whether replication works is asked of the cluster, not assumed: a one-partition RF=3 topic is
created on three brokers and its ISR must grow beyond the leader within ``plan.probe_seconds``.
If it does not, every acks=all RF=3 row says so instead of carrying numbers.
"""

from __future__ import annotations

import time

from headwater.bench.context import Bench, GeneratorError, Target
from headwater.bench.generators import LATENCY, PRODUCERS, SHORT
from headwater.bench.report import Goal, Row
from headwater.bench.scenarios import latency, produce
from headwater.testing.cluster import LocalCluster

NAME = "acks=all RF=3"


def probe(bench: Bench, cluster: LocalCluster) -> Target:
    """Start ``cluster`` (3 brokers) and find out whether an RF=3 topic gets a full ISR."""
    try:
        cluster.start()
    except RuntimeError as e:
        return Target(NAME, "", [], 3, "all", f"failed: three brokers did not start: {str(e)[:300]}")
    target = Target(NAME, cluster.bootstrap, [b.pid for b in cluster.brokers], 3, "all")
    target.metrics_urls = [u for b in cluster.brokers if (u := b.metrics_url)]
    topic = bench.topic("rf3-probe")
    try:
        bench.create_topic(target, topic, 1)
    except Exception as e:  # the broker may refuse RF=3 outright
        target.unavailable = f"not available: creating an RF=3 topic failed ({e})"
        return target
    isr: list[list[int]] = []
    deadline = time.monotonic() + bench.plan.probe_seconds
    while time.monotonic() < deadline:
        isr = bench.isr(target, topic)
        if isr and all(len(i) >= 3 for i in isr):
            bench.log(f"replication is available: ISR {isr}")
            bench.warm_group_coordinator(target)
            return target
        time.sleep(0.5)
    target.unavailable = (
        f"not available: replication not implemented (the ISR of an RF=3 topic on 3 brokers "
        f"stayed {isr[0] if isr else '?'} for {bench.plan.probe_seconds:g} s)"
    )
    return target


def wanted(bench: Bench, case: str, partitions: int, generator: str) -> bool:
    """The acks=all matrix, smaller than acks=1's to keep the run short: no confluent-kafka
    (librdkafka from C shows the same library), six partitions for Kreps' case only, and in
    --quick a single row that shows the path works."""
    if bench.plan.quick:
        return (case, partitions, generator) == ("kreps", 1, "rdkafka-c")
    if generator == "confluent":
        return False
    return partitions == 1 or (case == "kreps" and generator == "rdkafka-c")


def run(bench: Bench, produce_rows: list[Row]) -> list[Row]:
    assert bench.main is not None
    cluster = LocalCluster(
        bench.workdir / "rf3", size=3, zk_connect=f"{bench.zk_connect}/bench-rf3", overrides={"prometheus.port": "auto"}
    )
    rows: list[Row] = []
    try:
        target = probe(bench, cluster)
        bench.rf3 = target
        bench.log(f"{NAME}: {target.unavailable or 'available'}")
        by_key = {(r.extra.get("case"), r.extra.get("partitions"), r.extra.get("generator")): r for r in produce_rows}
        for case in produce.CASES:
            for partitions in bench.plan.partitions:
                label = f"{case.label}, {partitions} partition{'s' if partitions > 1 else ''}, {NAME}"
                if target.unavailable:
                    unavailable = Row("1", label, "all", "records/s", reference=case.reference_all)
                    unavailable.unavailable = target.unavailable
                    rows.append(bench.add(unavailable))
                    continue
                for generator in PRODUCERS:
                    row = Row("1", label, SHORT[generator], "records/s", reference=case.reference_all)
                    if not wanted(bench, case.key, partitions, generator):
                        continue
                    row.extra.update({"case": case.key, "partitions": partitions, "generator": generator})
                    produce.measure(bench, target, case, partitions, generator, row)
                    single = by_key.get((case.key, partitions, generator))
                    if single is not None and not single.unavailable and not row.unavailable:
                        row.baseline = "same with acks=1 RF=1"
                        row.ratio_override = row.value / single.value
                        row.goal = Goal(">= 50 % of acks=1 RF=1", 0.5, on="ratio")
                    rows.append(bench.add(row))
        if target.unavailable or bench.plan.quick:
            row = latency.measure(bench, target, LATENCY[0])
            if target.unavailable:
                row.generator = "all"
            rows.append(bench.add(row))
        else:
            rows += [bench.add(latency.measure(bench, target, g)) for g in LATENCY]
    except GeneratorError as e:
        bench.log(f"{NAME}: failed: {e}")
    finally:
        cluster.stop()
    return rows
