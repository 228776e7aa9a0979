"""Scenario 6: large records (10 KB, about 1 MB per Produce request and per fetch).

With large records the clients do little work per byte, so MiB/s shows how close the broker gets
to the machine: produce against baseline W at the same request size, consume against baseline R
in 1 MiB chunks. The goals (produce >= 60 % of W, consume >= 70 % of R) are judged on the C
generators, which are not the limit here.
"""

from __future__ import annotations

from headwater.bench.context import Bench, GeneratorError, busy_note
from headwater.bench.generators import CONSUMERS, PRODUCERS, SHORT, Workload, why_not
from headwater.bench.report import Goal, Row, fmt_bytes
from headwater.bench.scenarios import produce as produce_scenario
from headwater.bench.scenarios.consume import consume_once, fill

LARGE = Workload(10 * 1024, batch_bytes=1_000_000)
FETCH = 1 << 20
PRODUCE_COUNTS = {"rdkafka-c": 60_000, "confluent": 40_000, "headwater": 20_000}
FILL = 60_000
CONSUME_COUNTS = {"kcat": 60_000, "confluent": 60_000, "headwater": 30_000}


def run(bench: Bench) -> list[Row]:
    assert bench.main is not None
    target = bench.main
    rows: list[Row] = []
    case = produce_scenario.Case("large", "10 KB records, ~1 MB requests", LARGE, PRODUCE_COUNTS, "", "")
    for generator in PRODUCERS:
        row = Row(
            "6",
            f"produce 10 KB records, ~1 MB requests, 1 partition, {target.name}",
            SHORT[generator],
            primary="MiB/s",
            goal=Goal(">= 60 % of W", 0.60, on="ratio") if generator == "rdkafka-c" else None,
        )
        rows.append(bench.add(produce_scenario.measure(bench, target, case, 1, generator, row)))
    topic = bench.topic("large-read")
    count = bench.plan.count(FILL)
    fill_error = ""
    try:
        bench.create_topic(target, topic, 1)
        fill(bench, target, topic, count, LARGE)
        baseline = bench.baseline_r(FETCH)
    except GeneratorError as e:
        fill_error = f"failed: {e}"
    for generator in CONSUMERS:
        row = Row(
            "6",
            f"consume 10 KB records, 1 MiB fetches, {count:,} records in the log",
            SHORT[generator],
            primary="MiB/s",
            goal=Goal(">= 70 % of R", 0.70, on="ratio") if generator == "kcat" else None,
        )
        rows.append(row)
        row.unavailable = fill_error or why_not(bench, generator)
        if row.unavailable:
            bench.add(row)
            continue
        n = min(count, bench.plan.count(CONSUME_COUNTS[generator]))
        usages = []
        try:
            for _ in range(bench.plan.runs):
                got = consume_once(bench, target, generator, topic, n, LARGE.size, FETCH)
                row.figure("MiB/s").add(got.mib_per_s)
                row.figure("records/s").add(got.records_per_s)
                usages.append(got.usage)
            row.baseline, row.baseline_mib_s = f"R @ {fmt_bytes(FETCH)}", baseline.median
            row.note = f"{n:,} records/run; {busy_note(usages)}"
        except GeneratorError as e:
            row.unavailable = f"failed: {e}"
        bench.add(row)
    return rows
