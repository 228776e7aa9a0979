"""Scenario 12: what client quotas cost the broker (issue 42).

The run's broker, a fresh one-partition topic per run, the paper's 200-byte records in batches of
50 (acks=1: thousands of small Produce requests, where a per-request cost shows) produced and then
consumed back by librdkafka. Quotas
*off*: no quota entity anywhere (the broker measures nothing). Quotas *on*: ``clients/<default>``
with ``producer_byte_rate`` and ``consumer_byte_rate`` of 1 TB/s and ``request_percentage`` of
10^9 (every request's own time clocked, KIP-124), so every request is measured and checked against
its quotas and none is throttled: the accounting's cost alone. Off and on
alternate within each run so the machine's noise hits them alike; the figure is the broker's CPU
per Produce request (its own request count) and per MiB consumed, CPU time being far less
disturbed by the other processes than wall time. Ratio: on / off, same run.

A second part measures what a quota buys a well-behaved client: a quiet producer (200-byte
records, one every 10 ms, acks=1, linger.ms=0; client.id ``quiet``, no quota) records each
record's latency (send to delivery report) for LATENCY_S seconds, alone and then beside a noisy
producer (client.id ``noisy``, quota NOISY_QUOTA bytes/s) offered 5x its quota, started 3 s before;
alone and beside alternate within each run. Its p99 beside the noisy one, over its p99 alone.

The issue's goals: broker CPU per request with quotas on <= 5 % more than off; the quiet client's
produce p99 within 2x of its own run without the noisy one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from headwater.bench.context import Bench, GeneratorError
from headwater.bench.generators import SHORT, Workload, consume_cmd, produce_cmd, why_not
from headwater.bench.report import Goal, Row

SIZE = 200
BATCH = 50
RECORDS = 1_000_000
QUICK_RECORDS = 50_000
UNLIMITED = 10**12  # bytes/s: measured and checked, never exceeded
UNLIMITED_PERCENT = 10**9  # request_percentage: every request clocked and checked, never exceeded
MIB = 1 << 20
LATENCY_S = 20.0
QUICK_LATENCY_S = 8.0
NOISY_QUOTA = 1 << 20  # bytes/s


def _quiet_p99(bootstrap: str, topic: str, seconds: float, noisy: bool) -> float:
    """The quiet producer's p99 latency (ms), optionally beside the noisy producer."""
    from confluent_kafka import Producer

    stop = threading.Event()

    def noisy_producer() -> None:
        p = Producer({"bootstrap.servers": bootstrap, "client.id": "noisy", "linger.ms": 5, "batch.size": 16384})
        payload = b"n" * 1000
        t0, sent = time.monotonic(), 0
        while not stop.is_set():
            while sent * 1000 < 5 * NOISY_QUOTA * (time.monotonic() - t0) and len(p) < 20000:
                p.produce(topic, payload)
                sent += 1
            p.poll(0.005)
        p.purge()
        p.flush(10)

    thread = threading.Thread(target=noisy_producer) if noisy else None
    if thread is not None:
        thread.start()
        time.sleep(3.0)
    latencies: list[float] = []
    q = Producer({"bootstrap.servers": bootstrap, "client.id": "quiet", "acks": 1, "linger.ms": 0})
    try:
        t0 = time.monotonic()
        n = 0

        def delivered_since(sent_at: float) -> Callable[[object, object], None]:
            return lambda _err, _msg: latencies.append(time.monotonic() - sent_at)

        while time.monotonic() - t0 < seconds:
            q.produce(topic, b"q" * SIZE, on_delivery=delivered_since(time.monotonic()))
            n += 1
            q.poll(max(0.0, t0 + n * 0.01 - time.monotonic()))
        q.flush(30)
    finally:
        stop.set()
        if thread is not None:
            thread.join(30)
    latencies.sort()
    return latencies[int(len(latencies) * 0.99)] * 1000 if latencies else float("nan")


def _latency(bench: Bench, rows: dict[str, Row]) -> None:
    from headwater.cli.main import main as cli_main

    target = bench.main
    assert target is not None
    args = ["configs", "--zookeeper", bench.zk_connect, "--alter", "--entity-type", "clients", "--entity-name", "noisy"]
    if cli_main([*args, "--add-config", f"producer_byte_rate={NOISY_QUOTA}"]) != 0:
        raise GeneratorError("could not set the noisy client's quota")
    seconds = QUICK_LATENCY_S if bench.plan.quick else LATENCY_S
    try:
        for run in range(bench.plan.runs):
            for noisy in (False, True) if run % 2 == 0 else (True, False):
                topic = bench.topic(f"quotas-latency-{run}-{int(noisy)}")
                bench.create_topic(target, topic, 1)
                p99 = _quiet_p99(target.bootstrap, topic, seconds, noisy)
                rows["beside" if noisy else "alone"].figure("p99 ms", "ms").add(p99)
                bench.log(
                    f"[12] run {run} quiet producer {'beside the noisy one' if noisy else 'alone'}: p99 {p99:.1f} ms"
                )
    finally:
        cli_main([*args, "--delete-config", "producer_byte_rate"])


def _quotas(bench: Bench, on: bool) -> None:
    from headwater.cli.main import main as cli_main

    change = (
        [
            "--add-config",
            f"producer_byte_rate={UNLIMITED},consumer_byte_rate={UNLIMITED},request_percentage={UNLIMITED_PERCENT}",
        ]
        if on
        else ["--delete-config", "producer_byte_rate,consumer_byte_rate,request_percentage"]
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
    latency = {
        "alone": Row(
            "12", "quiet producer alone: 200 B every 10 ms, acks=1, linger.ms=0", SHORT["confluent"], primary="p99 ms"
        ),
        "beside": Row(
            "12",
            f"quiet producer beside a noisy one offered 5x its {NOISY_QUOTA // 1024} KiB/s quota",
            SHORT["confluent"],
            primary="p99 ms",
            goal=Goal("p99 within 2x of alone", 2.0, kind="at most", on="ratio"),
        ),
    }
    try:
        _latency(bench, latency)
    except (GeneratorError, RuntimeError, OSError) as e:
        for r in latency.values():
            if not r.figures:
                r.unavailable = f"failed: {e}"
    if latency["alone"].figures and latency["beside"].figures and latency["alone"].value > 0:
        latency["beside"].ratio_override = latency["beside"].value / latency["alone"].value
        latency["beside"].ratio_style = "times"
        latency["beside"].baseline = "the quiet producer alone, same run"
    for r in latency.values():
        bench.add(r)
    for direction in ("produce", "consume"):
        base, row = rows[("off", direction)], rows[("on", direction)]
        if base.figures and row.figures and base.value > 0:
            row.ratio_override = row.value / base.value
            row.baseline = f"quotas off, {direction}, same run"
    for r in rows.values():
        bench.add(r)
    return list(rows.values())
