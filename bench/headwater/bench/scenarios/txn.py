"""Scenario ``txn``: transactional produce (KIP-98) at 100 records per transaction, as a ratio to
idempotent produce in the same run (issue 41's goal: >= 0.8).

One broker of its own (``transaction.state.log.replication.factor`` 1: the main broker of the run
has no settings for a one-broker ``__transaction_state``), then the same with one Apache Kafka
2.3.1 broker when its jars are cached (``make java-deps``), one partition, 100-byte records,
acks=all (idempotence needs it), our C producer (``bench/native/rdkafka_produce.c``) on Debian's
librdkafka: ``-X enable.idempotence=true`` against ``-X transactional.id=... -T 100``, which
commits every 100 records and begins the next transaction, each commit waiting for its records and
the coordinator's answer, as Kafka's ``ProducerPerformance --transaction-duration-ms`` does. The
runs alternate (idempotent, transactional, ...) so load on the shared machine falls on both; the
ratio is the median of the per-pair ratios, with their range.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from headwater.bench.context import Bench, GeneratorError, Target, Usage, busy_note
from headwater.bench.generators import SHORT, Workload, estimate_request_size, produce_cmd, why_not
from headwater.bench.report import Goal, Row
from headwater.testing.cluster import LocalBroker

PER_TXN = 100
WORKLOAD = Workload(100)
#: records per run, full plan: idempotent produce is ~30x faster, so it gets 10x the records (a
#: run of well over 0.1 s; with 60,000 records it took ~40 ms, too short to time)
COUNTS = {"idem": 600_000, "txn": 60_000}
GENERATOR = "rdkafka-c"


def run(bench: Bench) -> list[Row]:
    """The Headwater pair of rows, then the same on Apache Kafka 2.3.1 when its jars are cached
    (``make java-deps``)."""
    rows = _pair(bench, "Headwater")
    try:
        from headwater.testing import kafka

        kafka.version()
    except Exception as e:  # no jars: say so in the Kafka rows
        why = f"not available: Apache Kafka's jars ({e})"
        return [*rows, bench.add(_row("transactional vs idempotent produce on Apache Kafka", True, why))]
    return rows + _pair(bench, f"Kafka {kafka.version()}")


def _row(case: str, transactional: bool, unavailable: str = "") -> Row:
    row = Row(
        "txn",
        case,
        SHORT[GENERATOR],
        primary="records/s",
        ratio_of="records/s",
        goal=Goal(">= 80 % of idempotent", 0.80, on="ratio") if transactional else None,
    )
    row.unavailable = unavailable
    return row


def _pair(bench: Bench, server: str) -> list[Row]:
    label = f"100 B records, 1 partition, acks=all, 1 {server} broker"
    idem = _row(f"idempotent produce: {label}", False)
    txn = _row(f"transactional produce, {PER_TXN} records per transaction: {label}", True)
    why = why_not(bench, GENERATOR) or ("" if bench.zk_connect else "not available: no ZooKeeper")
    if why:
        idem.unavailable = txn.unavailable = why
        return [bench.add(idem), bench.add(txn)]
    overrides = {
        "transaction.state.log.replication.factor": 1,
        "transaction.state.log.min.isr": 1,
        "transaction.state.log.num.partitions": 3,
        "offsets.topic.replication.factor": 1,
    }
    zk = f"{bench.zk_connect}/bench-txn-{time.time_ns()}"
    broker: Any
    if server == "Headwater":
        broker = LocalBroker(bench.workdir / "txn", 0, zk, {**overrides, "prometheus.port": "auto"})
    else:
        from headwater.testing.kafka import KafkaBroker

        broker = KafkaBroker(bench.workdir / "txn-kafka", 0, zk, overrides)
    counts = {k: bench.plan.count(v) for k, v in COUNTS.items()}
    ratios: list[float] = []
    usages: dict[str, list[Usage]] = {"idem": [], "txn": []}
    try:
        broker.start()
        target = Target(f"txn {server}", broker.bootstrap, [broker.pid], 1, "all")
        url = getattr(broker, "metrics_url", None)
        target.metrics_urls = [url] if url else []
        topic = bench.topic("txn")
        bench.create_topic(target, topic, 1)
        idem_cmd = produce_cmd(bench, GENERATOR, target.bootstrap, topic, counts["idem"], WORKLOAD, "all")
        base = produce_cmd(bench, GENERATOR, target.bootstrap, topic, counts["txn"], WORKLOAD, "all")
        estimate = estimate_request_size(WORKLOAD)
        for i in range(bench.plan.runs):
            a = bench.produce(target, [*idem_cmd, "-X", "enable.idempotence=true"], WORKLOAD.size, estimate)
            b_cmd = [*base, "-X", f"transactional.id=bench-txn-{i}", "-T", str(PER_TXN)]
            b = bench.produce(target, b_cmd, WORKLOAD.size, estimate)
            for row, got, key in ((idem, a, "idem"), (txn, b, "txn")):
                if got.errors:
                    raise GeneratorError(f"{got.errors} records failed: {got.first_error}")
                row.figure("records/s").add(got.records_per_s)
                row.figure("MiB/s").add(got.mib_per_s)
                usages[key].append(got.usage)
            ratios.append(b.records_per_s / a.records_per_s)
            bench.log(
                f"txn {server} run {i + 1}: idempotent {a.records_per_s:,.0f} rec/s, "
                f"transactional {b.records_per_s:,.0f}"
            )
    except (GeneratorError, RuntimeError, OSError) as e:
        idem.unavailable = txn.unavailable = f"failed: {e}"
        return [bench.add(idem), bench.add(txn)]
    finally:
        broker.stop()
    idem.note = f"{counts['idem']:,} records/run; {busy_note(usages['idem'])}"
    txn.baseline = "idempotent, same run"
    txn.baseline_mib_s = idem.figure("records/s").median
    txn.ratio_override = statistics.median(ratios)
    txn.note = (
        f"{counts['txn']:,} records/run; ratio per pair of runs: median {statistics.median(ratios):.3f} "
        f"[{min(ratios):.3f}-{max(ratios):.3f}]; {busy_note(usages['txn'])}"
    )
    txn.extra["ratios"] = ratios
    return [bench.add(idem), bench.add(txn)]
