"""``headwater bench --quick --only 11``: TLS and SASL against PLAINTEXT on one broker with four
listeners (a real ZooKeeper, a throwaway CA, a SCRAM user in ZooKeeper), librdkafka producing and
consuming over each, and Headwater's client opening connections with each kind of login.

Scenario 10 is left out of the ``--quick`` default, so this is what keeps it working. Asserted: every
row has its numbers, the ratios to PLAINTEXT are there and the TLS rows say they judge nothing (a --quick run is a smoke run).
Timings are not test material on a shared machine; the figures are in docs/performance.md.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from tests.bench.run import run_quick_bench


def finite_positive(row: dict[str, Any], key: str) -> float:
    value = row["figures"][key]["median"]
    assert isinstance(value, int | float) and math.isfinite(value) and value > 0, (key, row)
    return float(value)


def test_bench_security_scenario_measures_tls_sasl_and_connection_set_up(tmp_path: Path) -> None:
    _, out = run_quick_bench(tmp_path, "11", timeout=400)
    report = json.loads((out / "results.json").read_text())
    rows = [r for r in report["rows"] if r["scenario"] == "11"]
    assert not [r for r in report["rows"] if r["scenario"] != "11"]  # --only 11 ran nothing else
    throughput = [r for r in rows if r["case"].startswith(("produce", "consume"))]
    handshakes = [r for r in rows if r["case"].startswith("connection set-up")]
    assert [r["case"].split(";")[0] for r in throughput] == [
        f"{d} over {p}" for d in ("produce", "consume") for p in ("PLAINTEXT", "SSL", "SASL_SSL (SCRAM-SHA-512)")
    ]
    assert len(handshakes) == 5, [r["case"] for r in rows]
    for row in rows:
        assert not row["unavailable"], row
        assert row["ratio"] and math.isfinite(row["ratio"]), row
    for row in throughput:
        finite_positive(row, "records/s")
        assert "broker CPU ms/MiB" in row["figures"], row
        if "PLAINTEXT" in row["case"].split(";")[0]:
            assert row["ratio"] == 1.0 and row["goal"] is None, row
        else:
            assert row["goal_status"].endswith("not judged (smoke run)"), row  # --quick judges no goal (issue 40)
    for row in handshakes:
        finite_positive(row, "ms/connection")
        finite_positive(row, "connections/s")
