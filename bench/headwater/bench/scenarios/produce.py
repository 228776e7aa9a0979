"""Scenario 1 (produce throughput) and scenario 5 (broker RSS and CPU per MiB during it).

Cases: the paper's (200-byte records, batches of 1 and of 50) and Kreps' (100-byte records, the
client's default batching), on 1 and 6 partitions, acks=1 RF=1 here (acks=all RF=3 in
:mod:`headwater.bench.scenarios.replicated`), with each producer generator. Every figure is
compared with baseline W at the generator's average Produce request size.

Then the blocking API (issue 24): ``SyncProducer``, ``SyncAuditingProducer`` (and the plain producer
with the same origin headers, to tell the headers' cost from the auditing's), and ``headwater
produce`` against kcat on the same file of lines; runs interleaved, each row a ratio of this run.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from headwater.bench.context import MIB, Bench, GeneratorError, Target, busy_note
from headwater.bench.generators import PRODUCERS, SHORT, Workload, estimate_request_size, produce_cmd, why_not
from headwater.bench.loadgen import _value
from headwater.bench.report import Goal, Row, fmt_bytes
from headwater.bench.stats import Figure


@dataclass(frozen=True)
class Case:
    key: str
    label: str
    workload: Workload
    counts: dict[str, int]  # records per run, full plan, per generator
    reference: str
    reference_all: str  # beside the acks=all RF=3 rows
    scale_all: float = 1.0  # acks=all RF=3 runs send this share of ``counts``


CASES = (
    Case(
        "paper-b1",
        "paper: 200 B, batch 1",
        Workload(200, batch=1),
        {"rdkafka-c": 8_000, "confluent": 8_000, "headwater": 3_000},
        "paper: 50,000 msg/s",
        "paper: 50,000 msg/s (no replication)",
        scale_all=0.1,
    ),
    Case(
        "paper-b50",
        "paper: 200 B, batch 50",
        Workload(200, batch=50),
        {"rdkafka-c": 300_000, "confluent": 200_000, "headwater": 40_000},
        "paper: 400,000 msg/s",
        "paper: 400,000 msg/s (no replication)",
        scale_all=0.1,
    ),
    Case(
        "kreps",
        "Kreps: 100 B, default batching",
        Workload(100),
        {"rdkafka-c": 2_000_000, "confluent": 500_000, "headwater": 100_000},
        "Kreps: 821,557 rec/s, 78.3 MB/s (no replication)",
        "Kreps: 421,823 rec/s, 40.2 MB/s (3x sync replication)",
        scale_all=0.25,
    ),
)


#: (case, generator) -> the goal for acks=1 RF=1 (issue 6; the paper's cases and our producer's
#: default batching from issue 15).
GOALS = {
    ("kreps", "rdkafka-c"): Goal(">= 1,000,000 rec/s", 1_000_000),
    ("paper-b1", "rdkafka-c"): Goal(">= 25,000 rec/s", 25_000),
    ("paper-b50", "rdkafka-c"): Goal(">= 400,000 rec/s", 400_000),
    ("paper-b50", "headwater"): Goal(">= 400,000 rec/s", 400_000),
    ("kreps", "headwater"): Goal(">= 800,000 rec/s", 800_000),
}


def goal_for(case: Case, generator: str, target: Target) -> Goal | None:
    return GOALS.get((case.key, generator)) if target.acks == "1" else None


def measure(bench: Bench, target: Target, case: Case, partitions: int, generator: str, row: Row) -> Row:
    """Fill ``row`` with the runs of one (case, partitions, generator) against ``target``."""
    why = why_not(bench, generator)
    if why:
        row.unavailable = why
        return row
    topic = bench.topic(f"{case.key}-p{partitions}-{generator}")
    count = bench.plan.count(int(case.counts[generator] * (case.scale_all if target.acks == "all" else 1)))
    cpu = Figure("ms/MiB")
    per_request = Figure("us/request")
    sizes: list[float] = []
    usages = []
    known = True
    try:
        bench.create_topic(target, topic, partitions)
        cmd = produce_cmd(bench, generator, target.bootstrap, topic, count, case.workload, target.acks)
        for _ in range(bench.plan.runs):
            run = bench.produce(target, cmd, case.workload.size, estimate_request_size(case.workload))
            row.figure("records/s").add(run.records_per_s)
            row.figure("MiB/s").add(run.mib_per_s)
            cpu.add(run.broker_cpu * 1000 / (run.payload_bytes / MIB))
            if run.requests > 0:
                per_request.add(run.broker_cpu * 1e6 / run.requests)
            sizes.append(run.request_size)
            usages.append(run.usage)
            known = known and run.request_size_known
            row.extra["broker_peak_rss_bytes"] = max(row.extra.get("broker_peak_rss_bytes", 0), run.broker_peak_rss)
            if run.errors:
                row.note = f"{run.errors} records failed: {run.first_error}"
    except GeneratorError as e:
        row.unavailable = f"failed: {e}"
        return row
    request_size = statistics.median(sizes)
    w_mib, w_cpu = bench.baseline_w(request_size)
    row.baseline = f"W @ {fmt_bytes(request_size)}{'' if known else ' (est.)'}"
    row.baseline_mib_s = w_mib.median
    row.extra.update(
        {
            "records_per_run": count,
            "request_size": request_size,
            "request_size_measured": known,
            "broker_cpu_ms_per_mib": cpu.to_json(),
            "broker_cpu_us_per_request": per_request.to_json(),
            "w_sink_cpu_ms_per_mib": w_cpu.median * 1000,
        }
    )
    extra_note = f"{count:,} records/run, requests {'' if known else '~'}{fmt_bytes(request_size)}; "
    extra_note += busy_note(usages, len(target.pids))
    row.note = f"{extra_note}; {row.note}" if row.note else extra_note
    return row


def run(bench: Bench) -> list[Row]:
    assert bench.main is not None
    rows: list[Row] = []
    for case in CASES:
        for partitions in bench.plan.partitions:
            for generator in PRODUCERS:
                if generator == "confluent" and partitions > 1:
                    continue  # the Python wrapper's limit shows on one partition already
                row = Row(
                    "1",
                    f"{case.label}, {partitions} partition{'s' if partitions > 1 else ''}, {bench.main.name}",
                    SHORT[generator],
                    primary="records/s",
                    reference=case.reference,
                    goal=goal_for(case, generator, bench.main),
                )
                row.extra.update({"case": case.key, "partitions": partitions, "generator": generator})
                rows.append(bench.add(measure(bench, bench.main, case, partitions, generator, row)))
    rows += run_blocking(bench)
    return rows


# -- the blocking API and the console producer (issue 24) -------------------------------------------

SYNC_RECORDS = 300_000  # records of 100 B per SyncProducer run (full plan)
CLI_LINES = 500_000  # lines of 100 B in the file kcat and headwater produce send (full plan)
SYNC_BATCH = 524288  # batch_size of the SyncProducer runs: librdkafka's batch.size is 1 MB, Java's 16 KiB
SYNC_MODES = {
    "plain": "headwater SyncProducer (Py)",
    "audit": "headwater SyncAuditingProducer (Py)",
    "headers": "headwater SyncProducer + origin headers (Py)",
}


def _sync_rate(bench: Bench, topic: str, count: int, mode: str) -> tuple[float, float, str]:
    """records/s of one headwater-sync-produce run, its CPU per record (us, both threads), a note on failures."""
    assert bench.main is not None
    cmd = Bench.loadgen(
        "headwater-sync-produce",
        *("--bootstrap", bench.main.bootstrap, "--topic", topic, "--count", str(count), "--size", "100"),
        *("--seconds", str(bench.plan.max_seconds), "--acks", "1", "--mode", mode),
        *("--batch-size", str(SYNC_BATCH), "--max-request-size", str(SYNC_BATCH + 65536)),
    )
    got = bench.run_json(cmd, bench.plan.max_seconds * 2 + 120)
    note = f"{got['errors']} records failed: {got['first_error']}" if got["errors"] else ""
    acked = int(got["acked"])
    cpu_us = float(got["cpu"]) * 1e6 / acked if acked else 0.0
    return (acked / float(got["seconds"]) if got["seconds"] else 0.0), cpu_us, note


def _high_watermark(bootstrap: str, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "headwater-bench"})
    try:
        return int(c.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)[1])
    finally:
        c.close()


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _timed(
    cmd: list[str], stdin: Path | None, timeout: float, env: dict[str, str] | None = None
) -> tuple[float, float]:
    """Wall seconds of one command, start-up included (what an operator waits for), and its CPU seconds."""
    started, cpu0 = time.perf_counter(), _children_cpu()
    with open(stdin, "rb") if stdin else open("/dev/null", "rb") as f:
        proc = subprocess.run(cmd, stdin=f, capture_output=True, timeout=timeout, check=False, env=env)
    if proc.returncode != 0:
        why = (proc.stderr.decode(errors="replace").strip().splitlines() or ["no output"])[-1]
        raise GeneratorError(f"{Path(cmd[0]).name} exited {proc.returncode}: {why}")
    return time.perf_counter() - started, _children_cpu() - cpu0


def run_blocking(bench: Bench) -> list[Row]:
    """SyncProducer, SyncAuditingProducer (and headers alone), headwater produce vs kcat: one run, ratios."""
    assert bench.main is not None
    target = bench.main
    count = bench.plan.count(SYNC_RECORDS)
    lines = bench.plan.count(CLI_LINES)
    sync_rows = {
        "plain": Row(
            "1",
            f"blocking send: SyncProducer, 100 B, 1 partition, {bench.main.name}",
            SYNC_MODES["plain"],
            primary="records/s",
            goal=Goal(">= 300,000 rec/s", 300_000),
        ),
        "audit": Row(
            "1",
            "blocking send: SyncAuditingProducer vs SyncProducer (same run)",
            SYNC_MODES["audit"],
            primary="records/s",
            baseline="SyncProducer's records/s",
            goal=Goal("<= 10% slower than SyncProducer", 0.9, on="ratio"),
        ),
        "headers": Row(
            "1",
            "blocking send: SyncProducer with the 3 origin headers, no auditing (what the headers cost)",
            SYNC_MODES["headers"],
            primary="records/s",
            baseline="SyncProducer's records/s",
        ),
    }
    cli = Row(
        "1",
        f"headwater produce vs kcat -P, the same file of {lines:,} lines of 100 B",
        "headwater produce (Py)",
        primary="records/s",
        baseline="kcat -P on the same file, same run",
        goal=Goal(">= 50% of kcat", 0.5, on="ratio"),
    )
    kcat_rates: list[float] = []
    kcat_cpu: list[float] = []
    notes: list[str] = []
    try:
        for _ in range(bench.plan.runs):
            for mode, row in sync_rows.items():
                topic = bench.topic(f"sync-{mode}")
                bench.create_topic(target, topic, 1)
                rate, cpu_us, note = _sync_rate(bench, topic, count, mode)
                row.figure("records/s").add(rate)
                row.figure("client CPU us/record").add(cpu_us)
                if note:
                    row.note = note
    except GeneratorError as e:
        for row in sync_rows.values():
            row.unavailable = row.unavailable or f"failed: {e}"
    plain = sync_rows["plain"].value
    for mode in ("audit", "headers"):
        row = sync_rows[mode]
        if not row.unavailable and plain:
            row.ratio_override = row.value / plain
    cpu_per_record = {m: r.figures["client CPU us/record"].median for m, r in sync_rows.items() if not r.unavailable}
    sync_rows["plain"].note = (
        f"{count:,} records/run, batch_size {SYNC_BATCH:,} (librdkafka's default batch.size is 1 MB); "
        "send() appends in the calling thread, the loop thread only sends batches"
    )
    sync_rows["audit"].note = "ratio = SyncAuditingProducer / SyncProducer records/s"
    sync_rows["headers"].note = "ratio = / SyncProducer records/s; each record 100 B + ~60 B of headers"
    for mode, row in sync_rows.items():
        if mode in cpu_per_record:
            row.note += f"; client CPU {cpu_per_record[mode]:.2f} us/record (both threads)"
    # the console producer and kcat, on the same file
    if bench.native.kcat is None:
        cli.unavailable = bench.native.kcat_why_not
    else:
        path = bench.workdir / "produce-lines.txt"
        line = _value(100) + b"\n"
        path.write_bytes(line * lines)
        # as installed (pip compiles the bytecode): a source tree run with PYTHONDONTWRITEBYTECODE would
        # compile every module at each start; a warm-up run fills a private bytecode cache
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = str(bench.workdir / "pycache")
        ours = [sys.executable, "-m", "headwater.cli.main", "produce", "--bootstrap-server", target.bootstrap]
        try:
            _timed([*ours, "--help"], None, 120, env)
            for _ in range(bench.plan.runs):
                topic = bench.topic("cli-kcat")
                bench.create_topic(target, topic, 1)
                kcat = [str(bench.native.kcat), "-P", "-b", target.bootstrap, "-t", topic, "-X", "acks=1", "-l"]
                seconds, cpu = _timed([*kcat, str(path)], None, bench.plan.max_seconds * 4 + 60)
                kcat_rates.append(lines / seconds)
                kcat_cpu.append(cpu)
                topic2 = bench.topic("cli-headwater")
                bench.create_topic(target, topic2, 1)
                timeout = bench.plan.max_seconds * 4 + 60
                seconds, cpu = _timed([*ours, "--topic", topic2, "--acks", "1"], path, timeout, env)
                cli.figure("records/s").add(lines / seconds)
                cli.figure("CPU s").add(cpu)
                for t in (topic, topic2):
                    written = _high_watermark(target.bootstrap, t)
                    if written != lines:
                        notes.append(f"{t} holds {written:,} records, not {lines:,}")
        except GeneratorError as e:
            cli.unavailable = f"failed: {e}"
        finally:
            path.unlink(missing_ok=True)
        if kcat_rates and not cli.unavailable:
            kcat_rate = statistics.median(kcat_rates)
            cli.ratio_override = cli.value / kcat_rate
            cli.extra["kcat_records_per_s"] = kcat_rates
            cli.extra["kcat_cpu_s"] = kcat_cpu
            ours_cpu = cli.figures["CPU s"].median
            cli.note = "; ".join(
                [
                    f"kcat {kcat_rate:,.0f} rec/s; wall time of each process, start-up included (bytecode cached, "
                    "as installed); acks=1 both",
                    f"CPU: headwater produce {ours_cpu:.2f} s, kcat {statistics.median(kcat_cpu):.2f} s",
                    *notes,
                ]
            )
    return [bench.add(r) for r in (*sync_rows.values(), cli)]


def resources(bench: Bench, produce_rows: list[Row]) -> None:
    """Scenario 5 from the scenario 1 runs: peak RSS, and CPU per MiB beside the W sink's."""
    peak = Row(
        "5",
        "broker peak RSS over all of scenario 1",
        "all",
        primary="MiB",
        goal=Goal("<= 150 MiB", 150, kind="at most"),
    )
    if bench.peak_rss:
        peak.figure("MiB").add(bench.peak_rss / MIB)
    else:
        peak.unavailable = "no scenario 1 run completed"
    bench.add(peak)
    for row in produce_rows:
        if row.unavailable or row.extra.get("partitions") != 1 or row.extra.get("generator") == "confluent":
            continue
        cpu = row.extra["broker_cpu_ms_per_mib"]
        sink = row.extra["w_sink_cpu_ms_per_mib"]
        per_request = row.extra["broker_cpu_us_per_request"]["median"]
        per_request_note = f"; {per_request:,.0f} us of broker CPU per request" if per_request else ""
        r = Row(
            "5",
            f"broker CPU per MiB: {row.case}",
            row.generator,
            primary="ms/MiB",
            baseline=f"W sink CPU @ {fmt_bytes(row.extra['request_size'])} = {sink:.2f} ms/MiB",
            ratio_override=cpu["median"] / sink if sink else None,
            ratio_style="times",
            note="ratio = broker CPU / W sink CPU per MiB (lower is better); "
            f"peak RSS {row.extra['broker_peak_rss_bytes'] / MIB:.0f} MiB{per_request_note}",
        )
        f = r.figure("ms/MiB")
        for s in cpu["samples"]:
            f.add(s)
        bench.add(r)
        if row.extra.get("case") == "paper-b1" and per_request_samples(row):
            # Issue 15's goal for a small request's cost: one record per Produce request.
            small = Row(
                "5",
                f"broker CPU per small Produce request: {row.case}",
                row.generator,
                primary="us/request",
                goal=Goal("<= 40 us", 40, kind="at most"),
                note="broker CPU time over the run / Produce requests it answered",
            )
            g = small.figure("us/request")
            for s in per_request_samples(row):
                g.add(s)
            bench.add(small)


def per_request_samples(row: Row) -> list[float]:
    samples: list[float] = row.extra.get("broker_cpu_us_per_request", {}).get("samples", [])
    return samples
