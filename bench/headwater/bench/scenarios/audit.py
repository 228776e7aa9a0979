"""Scenario 10: audit counting (issue 25). How many records one audit process counts per second on
its per-batch path: :func:`headwater.audit.counter.count_batch`, what a tier counter runs on every
fetched batch — decode the batch (the compiled record codec), read each record's ``origin.dc`` and
``origin.created`` headers, add it to its (topic, window, datacenter, tier) count.

The batches are built in memory as an auditing producer writes them (``headwater.client.audit``):
100 B values, a 16-byte key, the three origin headers, 100 records per batch (~20 KB), creation times
spread over two windows and two datacenters. No broker, no store: the figure is the counting CPU of
one core, the upper bound of a tier counter (a fetch round adds the fetch and one store transaction
per round, not per record). Two rows: ``count_batch`` against issue 25's goal (>= 2,000,000 records/s
per audit process), and ``decode_batch`` alone, the codec's share of it. When the goal is missed the
row's note names where the time goes (cProfile of one pass, top functions by own time).
"""

from __future__ import annotations

import cProfile
import pstats
import time
from collections import defaultdict

from headwater.audit.counter import count_batch
from headwater.bench.context import Bench
from headwater.bench.report import Goal, Row
from headwater.protocol.records.header import BatchHeader, read_header
from headwater.protocol.records.record import EXTENSION, RecordInput, decode_batch, encode_batch

SIZE = 100
PER_BATCH = 100
BATCHES = 200  # 20,000 records, counted over and over for the measured interval
WINDOW_MS = 60_000
GOAL = 2_000_000
GOAL_TEXT = ">= 2,000,000 records/s per audit process"


def batches(start_ms: int = 1_764_000_000_000) -> list[tuple[BatchHeader, memoryview]]:
    out = []
    value = b"x" * SIZE
    for b in range(BATCHES):
        recs = []
        for i in range(PER_BATCH):
            created = start_ms + (b * PER_BATCH + i) * 7  # two windows over the whole set
            dc = b"dc1" if i % 2 else b"dc2"
            headers = [
                ("origin.host", b"web-17.dc1.example"),
                ("origin.dc", dc),
                ("origin.created", str(created).encode()),
            ]
            recs.append(RecordInput(f"user-{i:011d}".encode(), value, created, headers))
        raw = encode_batch(recs, base_offset=b * PER_BATCH)
        out.append((read_header(raw), memoryview(raw)))
    return out


def _rate(fn: object, data: list[tuple[BatchHeader, memoryview]], seconds: float) -> float:
    """Records per second of ``fn`` over ``data``, repeated for at least ``seconds``."""
    records = 0
    started = time.perf_counter()
    while True:
        for h, b in data:
            fn(h, b)  # type: ignore[operator]
        records += len(data) * PER_BATCH
        elapsed = time.perf_counter() - started
        if elapsed >= seconds:
            return records / elapsed


def _count(h: BatchHeader, b: memoryview, counts: defaultdict[tuple[str, int, str, str], list[int]]) -> None:
    count_batch("agg", "page-views", WINDOW_MS, h, b, counts)


def where_the_time_goes(data: list[tuple[BatchHeader, memoryview]], top: int = 4) -> str:
    """The functions with the most own time in one counting pass over ``data`` (cProfile)."""
    counts: defaultdict[tuple[str, int, str, str], list[int]] = defaultdict(lambda: [0, 0])
    prof = cProfile.Profile()
    prof.enable()
    for h, b in data:
        _count(h, b, counts)
    prof.disable()
    stats = pstats.Stats(prof)
    rows = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)  # type: ignore[attr-defined]
    total = sum(v[2] for _, v in rows) or 1.0
    parts = [f"{name} {v[2] / total:.0%}" for (_, _, name), v in rows[:top]]
    return "own time under cProfile: " + ", ".join(parts)


def run(bench: Bench) -> list[Row]:
    seconds = 1.0 if bench.plan.quick else 3.0
    runs = bench.plan.runs
    count_row = Row(
        "10",
        f"count_batch: {SIZE} B records with origin headers, {PER_BATCH} per batch, one core",
        "in-process (headwater.audit.counter)",
        primary="records/s",
        reference="decode alone: ~1.2 M rec/s per core (docs/audit.md)",
        goal=Goal(GOAL_TEXT, GOAL),
    )
    decode_row = Row(
        "10",
        f"decode_batch alone (the {'compiled' if EXTENSION else 'pure-Python'} record codec), same batches",
        "in-process (headwater.protocol.records)",
        primary="records/s",
    )
    data = batches()
    counts: defaultdict[tuple[str, int, str, str], list[int]] = defaultdict(lambda: [0, 0])
    _count(*data[0], counts)  # warm up (imports, caches)
    for _ in range(runs):
        counts.clear()
        count_row.figure("records/s").add(_rate(lambda h, b: _count(h, b, counts), data, seconds))
        decode_row.figure("records/s").add(_rate(lambda h, b: decode_batch(b), data, seconds))
    expected = BATCHES * PER_BATCH
    counted = sum(c[0] for c in counts.values())
    if counted % expected or {k[2] for k in counts} != {"dc1", "dc2"}:
        raise AssertionError(f"counted {counted} records into {sorted(counts)}: not a multiple of {expected}")
    count_row.ratio_override = count_row.value / decode_row.value
    count_row.baseline = "decode_batch alone"
    if count_row.value < GOAL:
        count_row.note = where_the_time_goes(data)
    bench.add(count_row)
    bench.add(decode_row)
    return [count_row, decode_row]
