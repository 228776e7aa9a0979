"""Scenario 3: end-to-end latency, produce -> consume, at a fixed moderate rate.

A consumer process positions itself at the end of a fresh one-partition topic and says READY;
a producer process then sends 100-byte records at ``plan.latency_rate`` per second for
``plan.latency_seconds``, each value starting with its send time (CLOCK_MONOTONIC, one clock for
every process of the machine). The consumer reports p50 / p99 / p99.9 of receive time minus send
time. The producer does not linger (librdkafka ``linger.ms=0``; ours ``linger_ms=0``).
"""

from __future__ import annotations

import json
import subprocess
import threading

from headwater.bench.context import Bench, GeneratorError, Target
from headwater.bench.generators import LATENCY, SHORT, why_not
from headwater.bench.report import Goal, Row

REFERENCE = "Kreps: p50 2 ms, p99 3 ms, p99.9 14 ms"
SIZE = 100


def measure_once(bench: Bench, target: Target, generator: str, topic: str) -> dict[str, float]:
    rate = bench.plan.latency_rate
    count = int(rate * bench.plan.latency_seconds)
    common = ["--bootstrap", target.bootstrap, "--topic", topic, "--count", str(count), "--size", str(SIZE)]
    wait = bench.plan.latency_seconds + 10  # records not received by then count as missing
    consumer = subprocess.Popen(
        Bench.loadgen(f"{generator}-latency-consumer", *common, "--seconds", str(wait)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    timer = threading.Timer(wait + 30, consumer.kill)
    timer.start()
    try:
        assert consumer.stdout is not None
        ready = consumer.stdout.readline()
        if not ready.startswith("READY"):
            raise GeneratorError(
                f"latency consumer did not start: {ready.strip()} {consumer.stderr.read()[-300:] if consumer.stderr else ''}"
            )
        bench.run_json(
            Bench.loadgen(f"{generator}-latency-producer", *common, "--rate", str(rate), "--acks", target.acks),
            wait + 30,
        )
        out, err = consumer.communicate(timeout=wait + 30)
    except subprocess.TimeoutExpired:
        raise GeneratorError("latency consumer did not finish") from None
    finally:
        timer.cancel()
        if consumer.poll() is None:
            consumer.kill()
            consumer.wait(10)
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    if not lines:
        raise GeneratorError(f"latency consumer failed: {err.strip()[-300:]}")
    result = dict(json.loads(lines[-1]))
    if not result.get("count"):
        raise GeneratorError("the latency consumer received no records")
    if result["count"] < count:
        result["missing"] = count - result["count"]
    return result


def measure(bench: Bench, target: Target, generator: str) -> Row:
    limit = 5.0 if target.acks == "1" else 10.0
    row = Row(
        "3",
        f"{bench.plan.latency_rate:,} rec/s of {SIZE} B for {bench.plan.latency_seconds:g} s, {target.name}",
        SHORT[generator],
        primary="p99",
        reference=REFERENCE,
        goal=Goal(f"p99 <= {limit:g} ms", limit, kind="at most"),
    )
    row.unavailable = target.unavailable or why_not(bench, generator)
    if row.unavailable:
        return row
    try:
        topic = bench.topic(f"latency-{generator}")
        bench.create_topic(target, topic, 1)
        missing = 0
        for _ in range(bench.plan.runs):
            got = measure_once(bench, target, generator, topic)
            row.figure("p99", "ms").add(got["p99_ms"])
            row.figure("p50", "ms").add(got["p50_ms"])
            row.figure("p99.9", "ms").add(got["p999_ms"])
            missing += int(got.get("missing", 0))
        if missing:
            row.note = f"{missing} records not received in time"
    except GeneratorError as e:
        row.unavailable = f"failed: {e}"
    return row


def run(bench: Bench) -> list[Row]:
    assert bench.main is not None
    return [bench.add(measure(bench, bench.main, generator)) for generator in LATENCY]
