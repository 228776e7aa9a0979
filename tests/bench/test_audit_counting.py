"""``python -m headwater.bench.audit_counting``: it runs, counts every record, prints every path.

No broker: it counts batches built in memory. Its figures are not asserted (a shared two-core
machine); the script itself checks that the compiled count equals the record-by-record one.
"""

from __future__ import annotations

import json
import subprocess
import sys

from headwater.bench.audit_counting import measure


def test_measure_counts_every_record_on_each_path() -> None:
    result = measure(batches=20, repeat=1)
    assert result["records"] == 20 * result["records_per_batch"] > 0
    assert set(result["records_per_s"]) == {"compiled", "python", "decode+loop"}
    assert all(r is None or r > 0 for r in result["records_per_s"].values())


def test_the_script_prints_json() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "headwater.bench.audit_counting",
            "--batches",
            "10",
            "--repeat",
            "1",
            "--json",
            "--compression",
            "lz4",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    result = json.loads(proc.stdout)
    assert result["compression"] == "lz4" and result["goal_records_per_s"] == 2_000_000
