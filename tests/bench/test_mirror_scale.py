"""``python -m headwater.bench.mirror_scale`` with a tiny case (20 topics x 2 partitions): a real
ZooKeeper, two brokers and two mirror processes (the second after a ``kill -9`` of the first).

Asserted: it exits 0, every figure is there and finite, every record arrived (the destination
holds what the source holds after the restart, plus exactly the at-least-once re-copies of the
partitions that had no committed target offset at the kill); and,
without a cluster, that the table prints every figure. Timings are not test material on a shared machine; the figures of the
full case are in docs/performance.md.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from headwater.bench.mirror_scale import Copy, Result, table
from headwater.testing.zookeeper import ZK_SERVER

TOPICS, PARTITIONS, RECORDS, RESUME = 20, 2, 50, 5


def _run(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    if not Path(ZK_SERVER).exists() or shutil.which("java") is None:
        pytest.fail("ZooKeeper is not installed: run `make system-deps` (Debian's zookeeper package)")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "headwater.bench.mirror_scale",
            "--topics",
            str(TOPICS),
            "--partitions",
            str(PARTITIONS),
            "--records-per-partition",
            str(RECORDS),
            "--resume-records",
            str(RESUME),
            "--deadline",
            "120",
            "--workdir",
            str(tmp_path / "work"),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def test_mirror_scale_copies_every_partition_and_resumes_without_duplicates(tmp_path: Path) -> None:
    proc = _run(tmp_path, "--json")
    r = json.loads(proc.stdout)
    parts = TOPICS * PARTITIONS
    assert r["partitions"] == parts
    assert r["records"] == parts * RECORDS
    assert r["resume_records"] == parts * RESUME
    assert r["source_total"] == parts * (RECORDS + RESUME)
    # nothing lost; copied twice only what had no committed target offset at the kill (at-least-once
    # by design), the rest skipped by the resume scan
    assert r["duplicates"] == r["expected_recopied"], r
    assert r["destination_total"] == r["source_total"] + r["expected_recopied"], r
    assert 0 <= r["uncommitted_partitions"] <= parts
    assert r["first"]["records"] == r["records"]
    assert r["restart"]["records"] == r["destination_total"]
    for phase in ("first", "restart"):
        for key, value in r[phase].items():
            assert isinstance(value, int | float) and math.isfinite(value) and value >= 0, (phase, key, value)
        assert r[phase]["peak_rss_mib"] > 0 and r[phase]["records_per_s"] > 0
        assert r[phase]["total_s"] >= r[phase]["startup_s"]
    # progress lines went to stderr, the figures alone to stdout
    assert "first record in the destination" in proc.stderr and "mirror restarted" in proc.stderr
    # the mirror processes are gone (stopped by pid): their logs end with the clean stop or the kill
    assert "mirror stopped; offsets committed" in (tmp_path / "work" / "mirror-2.log").read_text()


def test_mirror_scale_table_prints_every_figure() -> None:
    r = Result(200, 10, 2000, 1000, 2_000_000, create_topics_s=1.5, fill_s=9.0, resume_records=20000)
    r.first = Copy(2_000_000, 12.5, 20.0, 32.5, 100_000.0, 150.0, 30.0, 92.0)
    r.restart = Copy(2_020_000, 3.25, 6.0, 9.25, 3_333.0, 160.0, 8.0, 86.0)
    r.resume_skipped_records, r.resume_skipped_partitions = 123_456, 1999
    r.source_total = r.destination_total = 2_020_000
    r.uncommitted_partitions, r.expected_recopied = 3, 3000
    text = table(r)
    for figure in ("200 topics x 10 = 2,000", "12.50 s", "100,000", "150 MiB", "3.25 s", "9.25 s", "160 MiB"):
        assert figure in text, (figure, text)
    assert "123,456 records in 1,999 partitions" in text and "(0 duplicates, 3,000 expected)" in text
    assert "3 partitions, 3,000 records" in text
