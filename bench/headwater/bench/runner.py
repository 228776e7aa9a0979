"""The benchmark run: a ZooKeeper and one broker (three more for acks=all RF=3), the scenarios in
order, then the report (``results.md`` and ``results.json``).

Order: scenario 1 (and 5 from its runs), 2, 3, 6, then 4 (it appends GiBs to the log), then the
acks=all RF=3 rows (a separate three-broker cluster on the same ZooKeeper, started only to probe
for replication and to measure it), then ``--profile``. Everything started is stopped by pid.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from headwater.bench import generators, profile
from headwater.bench.context import Bench, Plan, Target
from headwater.bench.native import discover
from headwater.bench.report import SCENARIOS, Report, machine
from headwater.bench.scenarios import (
    audit,
    consume,
    large,
    latency,
    load,
    mirror,
    preauth,
    produce,
    quotas,
    replicated,
    scale,
    security,
    stored,
    txn,
    wan,
    zk_outage,
)
from headwater.testing.cluster import LocalCluster

ALL = tuple(SCENARIOS)
#: ``--quick`` without ``--only``: scenario 8 is left out (the Spark loader's JVM and session
#: start-up alone take ~30 s, the scenario ~60 s on this machine; CI runs ``--quick``), and so is 9
#: (two more clusters, a link process and one mirror per delay), 11 (a broker of its own with four
#: listeners), 12 (quotas on vs off: a ratio of CPU figures wants full-size runs), ``preauth`` (a broker of its own per run, 1,100 attacking connections), ``scale``
#: (thousands of partitions, minutes), ``zk-outage`` (a 7-minute ZooKeeper outage) and ``txn`` (a broker
#: of its own; by hand: ``headwater bench --only txn``); tests/bench
#: runs each on its own
QUICK = tuple(s for s in ALL if s not in ("8", "9", "11", "12", "scale", "zk-outage", "preauth", "txn"))


@dataclass
class Options:
    quick: bool = False
    runs: int | None = None
    only: tuple[str, ...] = ALL
    out: Path = Path("bench-results")
    workdir: Path | None = None
    keep: bool = False
    stored_gib: float | None = None
    scale_partitions: tuple[int, ...] = ()
    profile: bool = False
    verbose: bool = True
    command: str = "headwater bench"


FIXED_NOTES = [
    "Record counts are scaled to this 2-core machine (the paper sent 10 million records, Kreps 50 million); "
    "each run stops after a fixed count or time limit. Clients, broker and ZooKeeper share the same two cores, "
    "where the paper and Kreps ran clients and brokers on separate machines over 1 GbE.",
    "The paper's and Kreps' figures are quoted as published: 2011, two 8-core machines (one broker); 2014, three "
    "6-core brokers, 6 partitions. They are context, not baselines; the ratios use W and R from this run.",
]


def run(options: Options) -> tuple[Report, Path, Path]:
    started = time.monotonic()
    plan = Plan.make(options.quick, options.runs, options.stored_gib, options.scale_partitions)
    own_workdir = options.workdir is None
    workdir = Path(tempfile.mkdtemp(prefix="headwater-bench-")) if own_workdir else Path(str(options.workdir))
    workdir.mkdir(parents=True, exist_ok=True)
    report = Report(
        mode="quick" if options.quick else "full",
        command=options.command,
        started=time.strftime("%Y-%m-%d %H:%M %Z"),
        machine=machine(),
    )
    native, built = discover(workdir / "native")
    bench = Bench(plan, workdir, native, report, verbose=options.verbose)
    for cmd in built:
        bench.log(f"ran: {cmd}")
    report.generators = generators.describe(bench)
    only = set(options.only)
    try:
        with LocalCluster(workdir / "cluster", size=1, overrides={"prometheus.port": "auto"}) as cluster:
            bench.zk_connect = cluster.zk_connect
            bench.main = Target("acks=1 RF=1", cluster.bootstrap, [cluster.brokers[0].pid], 1, "1")
            bench.main.metrics_urls = [u for b in cluster.brokers if (u := b.metrics_url)]
            bench.log(f"broker up at {cluster.bootstrap} (pid {cluster.brokers[0].pid}), workdir {workdir}")
            bench.warm_group_coordinator(bench.main)
            produce_rows = produce.run(bench) if only & {"1", "5"} else []
            if "5" in only:
                produce.resources(bench, produce_rows)
            if "2" in only:
                consume.run(bench)
            if "3" in only:
                latency.run(bench)
            if "6" in only:
                large.run(bench)
            if "4" in only:
                stored.run(bench)
            if only & {"1", "3"}:
                replicated.run(bench, produce_rows)
            if "7" in only:
                # --quick's default set leaves MirrorMaker 2 out (its Connect start-up alone ~30 s)
                mirror.run(bench, mm2=not options.quick or options.only != QUICK)
            if "8" in only:
                load.run(bench)
            if "9" in only:
                wan.run(bench)
            if "10" in only:
                audit.run(bench)
            if "11" in only:
                security.run(bench)
            if "12" in only:
                quotas.run(bench)
            if "scale" in only:
                scale.run(bench)
            if "zk-outage" in only:
                zk_outage.run(bench)
            if "preauth" in only:
                preauth.run(bench)
            if "txn" in only:
                txn.run(bench)
            if options.profile:
                profile.run(bench)
    finally:
        report.rows.sort(key=lambda r: (len(r.scenario), r.scenario))  # 1..9, 10, 11, scale; stable within a scenario
        for row in report.rows:
            row.smoke = options.quick  # a smoke run judges no goal
        report.notes = FIXED_NOTES + goal_notes(report)
        report.elapsed_s = time.monotonic() - started
        report.machine["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
        md, js = report.write(options.out)
        if own_workdir and not options.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    return report, md, js


def goal_notes(report: Report) -> list[str]:
    notes = []
    for r in report.rows:
        status = r.goal_status()
        if "missed" in status or "not measured" in status:
            notes.append(f"Scenario {r.scenario}, {r.case} ({r.generator}): {status.replace('**', '')}.")
    return notes
