"""Scenario ``txn``: transactional produce (KIP-98) at 100 records per transaction, as a ratio to
idempotent produce in the same run (issue 41's goal: >= 0.8).

One broker of its own (``transaction.state.log.replication.factor`` 1: the main broker of the run
has no settings for a one-broker ``__transaction_state``), one partition, 100-byte records,
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

from headwater.bench.context import Bench, GeneratorError, Target, busy_note
from headwater.bench.generators import SHORT, Workload, estimate_request_size, produce_cmd, why_not
from headwater.bench.report import Goal, Row
from headwater.testing.cluster import LocalBroker

PER_TXN = 100
WORKLOAD = Workload(100)
COUNT = 60_000  # records per run, full plan
GENERATOR = "rdkafka-c"


def run(bench: Bench) -> list[Row]:
    label = f"100 B records, 1 partition, acks=all, 1 broker; {PER_TXN} records per transaction"
    idem = Row("txn", f"idempotent produce: {label}", SHORT[GENERATOR], primary="records/s")
    txn = Row(
        "txn",
        f"transactional produce: {label}",
        SHORT[GENERATOR],
        primary="records/s",
        ratio_of="records/s",
        goal=Goal(">= 80 % of idempotent", 0.80, on="ratio"),
    )
    why = why_not(bench, GENERATOR) or ("" if bench.zk_connect else "not available: no ZooKeeper")
    if why:
        idem.unavailable = txn.unavailable = why
        return [bench.add(idem), bench.add(txn)]
    overrides = {
        "transaction.state.log.replication.factor": 1,
        "transaction.state.log.min.isr": 1,
        "transaction.state.log.num.partitions": 3,
        "offsets.topic.replication.factor": 1,
        "prometheus.port": "auto",
    }
    broker = LocalBroker(bench.workdir / "txn", 0, f"{bench.zk_connect}/bench-txn-{time.time_ns()}", overrides)
    count = bench.plan.count(COUNT)
    ratios: list[float] = []
    usages = {"idem": [], "txn": []}  # type: ignore[var-annotated]
    try:
        broker.start()
        target = Target("txn broker", broker.bootstrap, [broker.pid], 1, "all")
        target.metrics_urls = [u for u in [broker.metrics_url] if u]
        topic = bench.topic("txn")
        bench.create_topic(target, topic, 1)
        base = produce_cmd(bench, GENERATOR, target.bootstrap, topic, count, WORKLOAD, "all")
        estimate = estimate_request_size(WORKLOAD)
        for i in range(bench.plan.runs):
            a = bench.produce(target, [*base, "-X", "enable.idempotence=true"], WORKLOAD.size, estimate)
            b_cmd = [*base, "-X", f"transactional.id=bench-txn-{i}", "-T", str(PER_TXN)]
            b = bench.produce(target, b_cmd, WORKLOAD.size, estimate)
            for row, got, key in ((idem, a, "idem"), (txn, b, "txn")):
                if got.errors:
                    raise GeneratorError(f"{got.errors} records failed: {got.first_error}")
                row.figure("records/s").add(got.records_per_s)
                row.figure("MiB/s").add(got.mib_per_s)
                usages[key].append(got.usage)
            ratios.append(b.records_per_s / a.records_per_s)
            bench.log(f"txn run {i + 1}: idempotent {a.records_per_s:,.0f} rec/s, transactional {b.records_per_s:,.0f}")
    except (GeneratorError, RuntimeError) as e:
        idem.unavailable = txn.unavailable = f"failed: {e}"
        return [bench.add(idem), bench.add(txn)]
    finally:
        broker.stop()
    idem.note = f"{count:,} records/run; {busy_note(usages['idem'])}"
    txn.baseline = "idempotent, same run"
    txn.baseline_mib_s = idem.figure("records/s").median
    txn.ratio_override = statistics.median(ratios)
    txn.note = (
        f"{count:,} records/run; ratio per pair of runs: median {statistics.median(ratios):.2f} "
        f"[{min(ratios):.2f}-{max(ratios):.2f}]; {busy_note(usages['txn'])}"
    )
    txn.extra["ratios"] = ratios
    return [bench.add(idem), bench.add(txn)]
