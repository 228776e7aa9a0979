"""Audit counting speed: records/s of one audit process counting batches of 100 B records.

``python -m headwater.bench.audit_counting [--batches N] [--compression lz4]`` builds N batches as
an AuditingProducer writes them (a 100 B text-like value, the three origin headers, ~16 KiB per batch, the
producer's default batch.size) and counts them in one process, with no broker: the audit's
per-batch path (``count_batch``: CRC-32C, decompression, the per-record loop) timed with

- ``compiled``: the compiled record codec's loop (_crecords.count_origins), what the audit runs;
- ``python``: its pure-Python reference (counting._count_origins), what the audit runs without the
  extension (HEADWATER_NO_EXTENSIONS=1, or no C compiler at install);
- ``decode+loop``: how the audit counted before: every record decoded (compiled) into a Record,
  then its headers read in Python;

and the parts of the compiled path on their own (header, CRC-32C, decompression, the loop), to say where the time
goes. Goal (issue 25): 2,000,000 records/s per audit process. Prints a table; ``--json`` one object.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from headwater.audit.counter import MAX_TIMESTAMP, count_batch
from headwater.audit.store import UNAUDITED_DC
from headwater.client.audit import HEADER_CREATED, HEADER_DC, HEADER_HOST
from headwater.protocol.records import counting
from headwater.protocol.records import header as batch_header
from headwater.protocol.records import record as rec
from headwater.protocol.records.compression import Codec, decompress
from headwater.protocol.records.record import RecordInput, decode_batch, encode_batch

GOAL = 2_000_000
WINDOW_MS = 60_000
BATCH_SIZE = 16384
VALUE_SIZE = 100


def make_batches(
    n: int, codec: Codec, value_size: int = VALUE_SIZE
) -> list[tuple[batch_header.BatchHeader, memoryview]]:
    """``n`` batches of ~BATCH_SIZE bytes from two datacenters, creation times one ms apart."""
    rnd = random.Random(25)
    # A pool of text-like values: compressible as real payloads are, not as a run of one byte.
    values = [bytes(rnd.choices(b"abcdefghijklmnopqrstuvwxyz0123456789 {}:,", k=value_size)) for _ in range(64)]
    per_batch = BATCH_SIZE // (value_size + 70)  # 70: record framing and the three origin headers
    out = []
    created = 1_700_000_000_000
    offset = 0
    for i in range(n):
        dc = b"dc1" if i % 2 else b"dc2"
        records = []
        for _ in range(per_batch):
            headers = [(HEADER_HOST, b"web-7"), (HEADER_DC, dc), (HEADER_CREATED, str(created).encode())]
            records.append(RecordInput(None, values[created % 64], created, headers))
            created += 1
        b = encode_batch(records, base_offset=offset, compression=codec)
        offset += per_batch
        out.append((batch_header.read_header(b), memoryview(b)))
    return out


def _decode_and_loop(
    alias: str, topic: str, window_ms: int, h: Any, batch: memoryview, counts: dict[Any, list[int]], min_offset: int
) -> None:
    """The audit's counting before the compiled loop (counter.py until this change), for the figure."""
    for r in decode_batch(batch)[1]:
        if r.offset < min_offset:
            continue
        dc = created = None
        for k, v in r.headers:
            if k == HEADER_DC and v is not None:
                dc = v.decode("utf-8", "replace")
            elif k == HEADER_CREATED and v is not None:
                created = counting.created_value(v, MAX_TIMESTAMP)
        if dc is None or created is None:
            c = counts[(topic, r.timestamp // window_ms * window_ms, UNAUDITED_DC, alias)]
            c[0] += 1
            c[1] += 1
        else:
            counts[(topic, created // window_ms * window_ms, dc, alias)][0] += 1


def _rate(fn: Callable[[], Any], records: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return records / best


def measure(batches: int = 2000, codec: Codec = Codec.NONE, repeat: int = 3) -> dict[str, Any]:
    data = make_batches(batches, codec)
    records = sum(h.records_count for h, _ in data)

    def audit(counter: Callable[..., None]) -> Callable[[], dict[Any, list[int]]]:
        def run() -> dict[Any, list[int]]:
            counts: dict[Any, list[int]] = defaultdict(lambda: [0, 0])
            for h, b in data:
                counter("dc1", "clicks", WINDOW_MS, h, b, counts, 0)
            return counts

        return run

    def without_extension() -> None:
        saved, rec._C = rec._C, None
        try:
            audit(count_batch)()
        finally:
            rec._C = saved

    compiled = audit(count_batch)
    got = compiled()
    expected = audit(_decode_and_loop)()
    if dict(got) != dict(expected) or sum(c[0] for c in got.values()) != records:
        raise AssertionError("the compiled count differs from the record-by-record count")
    rates = {
        "compiled": _rate(compiled, records, repeat) if counting.COMPILED else None,
        "python": _rate(without_extension, records, max(1, repeat // 2)),
        "decode+loop": _rate(audit(_decode_and_loop), records, repeat),
    }
    # The compiled path's parts, each alone over the same batches.
    payloads = [(h, bytes(b[batch_header.HEADER_SIZE :])) for h, b in data]
    parts: dict[str, float | None] = {
        "read_header": _rate(lambda: [batch_header.read_header(b) for _, b in data], records, repeat),
        "crc32c": _rate(lambda: [batch_header.crc_matches(b, 0, h) for h, b in data], records, repeat),
    }
    if codec != Codec.NONE:
        parts["decompress"] = _rate(lambda: [decompress(codec, p) for _, p in payloads], records, repeat)
    c = counting._COMPILED
    if c is not None and codec == Codec.NONE:
        dc, cr = HEADER_DC.encode(), HEADER_CREATED.encode()
        parts["c_loop"] = _rate(
            lambda: [
                c(
                    p,
                    h.records_count,
                    h.base_offset,
                    h.base_timestamp,
                    h.max_timestamp,
                    False,
                    0,
                    WINDOW_MS,
                    dc,
                    cr,
                    MAX_TIMESTAMP,
                    counting.created_value,
                )
                for h, p in payloads
            ],
            records,
            repeat,
        )
    return {
        "batches": batches,
        "records": records,
        "records_per_batch": records // batches,
        "batch_bytes": sum(len(b) for _, b in data) // batches,
        "value_bytes": VALUE_SIZE,
        "compression": codec.name.lower(),
        "goal_records_per_s": GOAL,
        "records_per_s": rates,
        "parts_records_per_s": parts,
    }


def _fmt(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:,.0f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m headwater.bench.audit_counting", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--batches", type=int, default=2000)
    parser.add_argument("--compression", choices=["none", "gzip", "snappy", "lz4", "zstd"], default="none")
    parser.add_argument("--repeat", type=int, default=3, help="runs per path; the best is reported")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = measure(args.batches, Codec[args.compression.upper()], args.repeat)
    if args.json:
        print(json.dumps(result))
        return 0
    print(
        f"{result['records']:,} records of {VALUE_SIZE} B in {args.batches} batches "
        f"({result['records_per_batch']} records, {result['batch_bytes']:,} B each, compression {result['compression']})"
    )
    for name, rate in result["records_per_s"].items():
        mark = "" if rate is None else ("  >= goal" if rate >= GOAL else "  < goal")
        print(f"  {name:<12} {_fmt(rate):>12} records/s{mark}")
    print(f"  goal         {GOAL:>12,} records/s")
    print("  parts of the compiled path, each alone:")
    for name, rate in result["parts_records_per_s"].items():
        print(f"    {name:<12} {_fmt(rate):>12} records/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
