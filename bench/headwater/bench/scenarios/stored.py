"""Scenario 4: throughput with nothing and with several GiB already stored in the partition.

The seeds promise O(1) cost in the size of the log. Two one-partition topics on the same broker:
``empty`` and ``full``, into which ``plan.stored_bytes`` of 10 KB records are appended first.
Then each run (five at least in the full plan) measures both, back to back (produce: Kreps'
workload with the fastest producer; consume: kcat reading the newest records, ``-o -N``), so
that the load of a shared machine, which drifts over minutes, hits both alike. The ratio is the
median of the per-run ratios full / empty; the goal is 1.0 +- 10 %.
"""

from __future__ import annotations

import statistics

from headwater.bench.context import Bench, GeneratorError, Target
from headwater.bench.generators import SHORT, Workload, estimate_request_size, produce_cmd, why_not
from headwater.bench.report import Goal, Row, fmt_bytes
from headwater.bench.scenarios.consume import fill

KREPS = Workload(100)
FILL = Workload(10 * 1024)
PRODUCE_COUNT = 2_000_000
CONSUME_COUNT = 2_000_000
PAIRS = 5  # at least, in the full plan: single runs on a shared machine vary by +-30 %
FETCH = 1 << 20


def run(bench: Bench) -> list[Row]:
    assert bench.main is not None
    target: Target = bench.main
    producer = "rdkafka-c" if not why_not(bench, "rdkafka-c") else "confluent"
    gib = bench.plan.stored_bytes / 2**30
    produced = {
        phase: Row("4", f"produce, Kreps: 100 B, {label}", SHORT[producer], primary="records/s")
        for phase, label in (("empty", "empty log"), ("full", f"{gib:g} GiB stored"))
    }
    consumed = {
        phase: Row("4", f"consume the newest records, 100 B, {label}", SHORT["kcat"], primary="records/s")
        for phase, label in (("empty", "empty log"), ("full", f"{gib:g} GiB stored"))
    }
    rows = [produced["empty"], produced["full"], consumed["empty"], consumed["full"]]
    try:
        topics = {phase: bench.topic(f"stored-{phase}") for phase in ("empty", "full")}
        for topic in topics.values():
            bench.create_topic(target, topic, 1)
        written = bench.plan.stored_bytes // FILL.size
        bench.log(f"[4] appending {gib:g} GiB to {topics['full']}")
        fill(bench, target, topics["full"], written, FILL)
        produced["full"].note = f"{topics['full']} holds {written:,} records of 10 KB first"
    except GeneratorError as e:
        for r in rows:
            r.unavailable = f"failed: {e}"
        return [bench.add(r) for r in rows]

    count = bench.plan.count(PRODUCE_COUNT)
    cmd = {p: produce_cmd(bench, producer, target.bootstrap, t, count, KREPS, target.acks) for p, t in topics.items()}
    n = bench.plan.count(CONSUME_COUNT)
    kcat_missing = why_not(bench, "kcat")
    produce_ratios: list[float] = []
    consume_ratios: list[float] = []
    sizes: list[float] = []
    try:
        for _ in range(bench.plan.runs if bench.plan.quick else max(PAIRS, bench.plan.runs)):
            rate = {}
            for phase in ("empty", "full"):
                got = bench.produce(target, cmd[phase], KREPS.size, estimate_request_size(KREPS))
                produced[phase].figure("records/s").add(got.records_per_s)
                produced[phase].figure("MiB/s").add(got.mib_per_s)
                rate[phase] = got.records_per_s
                sizes.append(got.request_size)
            produce_ratios.append(rate["full"] / rate["empty"])
            if kcat_missing:
                continue
            for phase in ("empty", "full"):
                got_c = bench.consume_kcat(target, topics[phase], n, KREPS.size, FETCH, offset=f"-{n}")
                consumed[phase].figure("records/s").add(got_c.records_per_s)
                consumed[phase].figure("MiB/s").add(got_c.mib_per_s)
                rate[phase] = got_c.records_per_s
            consume_ratios.append(rate["full"] / rate["empty"])
    except GeneratorError as e:
        for r in rows:
            r.unavailable = r.unavailable or f"failed: {e}"
        return [bench.add(r) for r in rows]

    size = statistics.median(sizes)
    produced["empty"].baseline = f"W @ {fmt_bytes(size)}"
    produced["empty"].baseline_mib_s = bench.baseline_w(size)[0].median
    produced["empty"].note = f"{count:,} records/run"
    for phase in ("empty", "full"):
        consumed[phase].unavailable = kcat_missing
        consumed[phase].note = f"the newest {n:,} records/run"
    if not kcat_missing:
        consumed["empty"].baseline = f"R @ {fmt_bytes(FETCH)}"
        consumed["empty"].baseline_mib_s = bench.baseline_r(FETCH).median
    for full, ratios in ((produced["full"], produce_ratios), (consumed["full"], consume_ratios)):
        full.goal = Goal("within +-10 % of the empty log", 0.10, kind="within", on="ratio")
        full.baseline = "same, empty log, measured alternately"
        full.ratio_override = statistics.median(ratios) if ratios else None
        full.extra["paired_ratios"] = ratios
        if ratios:
            pairs = ", ".join(f"{r:.2f}" for r in ratios)
            full.note = f"{full.note}; " if full.note else ""
            full.note += f"full / empty per pair: {pairs}"
    for r in rows:
        r.extra["stored_bytes"] = bench.plan.stored_bytes
    return [bench.add(r) for r in rows]
