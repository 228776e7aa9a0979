"""Scenario 12: what client quotas cost the broker (issue 42).

The run's broker, a fresh one-partition topic per run, the paper's 200-byte records in batches of
50 (acks=1: thousands of small Produce requests, where a per-request cost shows) produced and then
consumed back by librdkafka. Quotas
*off*: no quota entity anywhere (the broker measures nothing). Quotas *on*: ``clients/<default>``
with ``producer_byte_rate`` and ``consumer_byte_rate`` of 1 TB/s, so every request is measured
and checked against its quota and none is throttled: the accounting's cost alone. Off and on
alternate within each run so the machine's noise hits them alike; the figure is the broker's CPU
per Produce request (its own request count) and per MiB consumed, CPU time being far less
disturbed by the other processes than wall time. Ratio: on / off, same run.

The issue's goal: broker CPU per request with quotas on <= 5 % more than off.
"""

from __future__ import annotations

import time

from headwater.bench.context import Bench, GeneratorError
from headwater.bench.generators import SHORT, Workload, consume_cmd, produce_cmd, why_not
from headwater.bench.report import Goal, Row

SIZE = 200
BATCH = 50
RECORDS = 200_000
QUICK_RECORDS = 50_000
UNLIMITED = 10**12  # bytes/s: measured and checked, never exceeded
MIB = 1 << 20


def _quotas(bench: Bench, on: bool) -> None:
    from headwater.cli.main import main as cli_main

    change = (
        ["--add-config", f"producer_byte_rate={UNLIMITED},consumer_byte_rate={UNLIMITED}"]
        if on
        else ["--delete-config", "producer_byte_rate,consumer_byte_rate"]
    )
    args = ["configs", "--zookeeper", bench.zk_connect, "--alter", "--entity-type", "clients", "--entity-default"]
    if cli_main([*args, *change]) != 0:
        raise GeneratorError("could not change the clients/<default> quota in ZooKeeper")
    time.sleep(2.0)  # the brokers apply the change notification (milliseconds on an idle machine)


def run(bench: Bench) -> list[Row]:
    count = QUICK_RECORDS if bench.plan.quick else bench.plan.count(RECORDS)
    case = f"paper: 200 B, batch 50, acks=1, 1 partition, {count:,} records"
    rows = {
        (mode, direction): Row(
            "12",
            f"{direction}, client quotas {mode}; {case}",
            SHORT["confluent"],
            primary="broker CPU us/request" if direction == "produce" else "broker CPU ms/MiB",
            goal=Goal("<= 5 % more broker CPU than off", 1.05, kind="at most", on="ratio")
            if mode == "on" and direction == "produce"
            else None,
        )
        for direction in ("produce", "consume")
        for mode in ("off", "on")
    }
    why = why_not(bench, "confluent") or ("" if bench.zk_connect and bench.main else "no ZooKeeper or broker")
    if why:
        for r in rows.values():
            r.unavailable = why
            bench.add(r)
        return list(rows.values())
    target = bench.main
    assert target is not None
    try:
        on = False
        for run in range(bench.plan.runs):
            for mode in ("off", "on") if run % 2 == 0 else ("on", "off"):
                if (mode == "on") != on:
                    _quotas(bench, mode == "on")
                    on = mode == "on"
                topic = bench.topic(f"quotas-{mode}-{run}")
                bench.create_topic(target, topic, 1)
                cmd = produce_cmd(bench, "confluent", target.bootstrap, topic, count, Workload(SIZE, batch=BATCH), "1")
                produced = bench.produce(target, cmd, SIZE, float("nan"))
                row = rows[(mode, "produce")]
                if produced.requests > 0:
                    row.figure("broker CPU us/request", "us").add(produced.broker_cpu * 1e6 / produced.requests)
                row.figure("records/s").add(produced.records_per_s)
                cmd = consume_cmd(bench, "confluent", target.bootstrap, topic, produced.records, 1 << 20)
                consumed = bench.consume_python(target, cmd)
                row = rows[(mode, "consume")]
                row.figure("broker CPU ms/MiB", "ms/MiB").add(
                    consumed.usage.broker_cpu * 1000 / (consumed.payload_bytes / MIB)
                )
                row.figure("records/s").add(consumed.records_per_s)
                bench.log(
                    f"[12] run {run} quotas {mode}: produce {produced.records_per_s:,.0f} rec/s, "
                    f"{produced.broker_cpu * 1e6 / max(produced.requests, 1):.0f} us CPU/request; "
                    f"consume {consumed.records_per_s:,.0f} rec/s"
                )
        if on:
            _quotas(bench, False)
    except (GeneratorError, RuntimeError, OSError) as e:
        for r in rows.values():
            if not r.figures:
                r.unavailable = f"failed: {e}"
    for direction in ("produce", "consume"):
        base, row = rows[("off", direction)], rows[("on", direction)]
        if base.figures and row.figures and base.value > 0:
            row.ratio_override = row.value / base.value
            row.baseline = f"quotas off, {direction}, same run"
    for r in rows.values():
        bench.add(r)
    return list(rows.values())
