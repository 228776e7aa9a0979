"""Scenario 2: consume throughput from a warm log (written just before, so it is page-cached).

Cases: Kreps' (100-byte records, the client's default fetch size, 1 MiB per partition) and the
paper's (200-byte records, ~200 KB per fetch: "up to 1,000 messages, about 200 KB"). Each consumer
reads from the start of the log; the clock runs from its first record to its last. Compared with
baseline R (``sendfile`` in chunks of the fetch size).
"""

from __future__ import annotations

from dataclasses import dataclass

from headwater.bench.context import Bench, ConsumeRun, GeneratorError, Target, busy_note
from headwater.bench.generators import CONSUMERS, SHORT, Workload, consume_cmd, produce_cmd, why_not
from headwater.bench.report import Goal, Row, fmt_bytes


@dataclass(frozen=True)
class ConsumeCase:
    key: str
    label: str
    size: int
    fetch_bytes: int
    fill: int  # records written before reading, full plan
    counts: dict[str, int]  # records read per run, full plan
    reference: str


CASES = (
    ConsumeCase(
        "kreps",
        "Kreps: 100 B, 1 MiB fetches",
        100,
        1 << 20,
        3_000_000,
        {"kcat": 3_000_000, "confluent": 500_000, "headwater": 300_000},
        "Kreps: 940,521 rec/s, 89.7 MB/s",
    ),
    ConsumeCase(
        "paper",
        "paper: 200 B, 200 KB fetches",
        200,
        200 * 1024,
        2_000_000,
        {"kcat": 2_000_000, "confluent": 500_000, "headwater": 300_000},
        "paper: 22,000 msg/s",
    ),
)


def goal_for(case: ConsumeCase, generator: str) -> Goal | None:
    if case.key != "kreps":
        return None
    if generator == "kcat":
        return Goal(">= 2,000,000 rec/s", 2_000_000)
    if generator == "headwater":
        return Goal(">= 1,000,000 rec/s", 1_000_000)
    return None


def fill(bench: Bench, target: Target, topic: str, records: int, w: Workload) -> None:
    """Write ``records`` records with the fastest producer available (not measured)."""
    generator = "rdkafka-c" if not why_not(bench, "rdkafka-c") else "confluent"
    seconds = bench.plan.max_seconds * 8  # a fill may take longer than a measured run
    cmd = produce_cmd(bench, generator, target.bootstrap, topic, records, w, "1", max_seconds=seconds)
    got = bench.run_json(cmd, seconds + 120)
    if int(got["acked"]) < records:
        raise GeneratorError(f"filling {topic}: {got['acked']} of {records} records written ({got.get('first_error')})")


def consume_once(
    bench: Bench, target: Target, generator: str, topic: str, count: int, case_size: int, fetch: int
) -> ConsumeRun:
    if generator == "kcat":
        return bench.consume_kcat(target, topic, count, case_size, fetch)
    return bench.consume_python(target, consume_cmd(bench, generator, target.bootstrap, topic, count, fetch))


def run(bench: Bench) -> list[Row]:
    assert bench.main is not None
    target = bench.main
    rows: list[Row] = []
    for case in CASES:
        topic = bench.topic(f"consume-{case.key}")
        fill_count = bench.plan.count(case.fill)
        fill_error = ""
        try:
            bench.create_topic(target, topic, 1)
            fill(bench, target, topic, fill_count, Workload(case.size))
            baseline = bench.baseline_r(case.fetch_bytes)
        except GeneratorError as e:
            fill_error = f"failed: {e}"
        for generator in CONSUMERS:
            row = Row(
                "2",
                f"{case.label}, 1 partition, {fill_count:,} records in the log",
                SHORT[generator],
                primary="records/s",
                reference=case.reference,
                goal=goal_for(case, generator),
            )
            rows.append(row)
            row.unavailable = fill_error or why_not(bench, generator)
            if row.unavailable:
                bench.add(row)
                continue
            count = min(fill_count, bench.plan.count(case.counts[generator]))
            usages = []
            try:
                for _ in range(bench.plan.runs):
                    got = consume_once(bench, target, generator, topic, count, case.size, case.fetch_bytes)
                    row.figure("records/s").add(got.records_per_s)
                    row.figure("MiB/s").add(got.mib_per_s)
                    usages.append(got.usage)
            except GeneratorError as e:
                row.unavailable = f"failed: {e}"
                bench.add(row)
                continue
            row.baseline = f"R @ {fmt_bytes(case.fetch_bytes)}"
            row.baseline_mib_s = baseline.median
            row.note = f"{count:,} records/run; {busy_note(usages)}"
            bench.add(row)
    return rows
