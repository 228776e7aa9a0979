"""``headwater bench --quick`` end to end: a real ZooKeeper and brokers, every quick scenario.

Asserted only for "it ran and produced numbers" (the issue's contract for CI): timings on a shared
two-core machine are not test material. Figures and goals are in docs/performance.md.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from tests.bench.run import run_quick_bench

SCENARIOS = ("1", "2", "3", "4", "5", "6")


def _numbers(row: dict[str, object]) -> list[float]:
    figures = row["figures"]
    assert isinstance(figures, dict)
    return [f["median"] for f in figures.values() if isinstance(f.get("median"), int | float)]


def test_bench_quick_produces_a_table_and_json_for_every_scenario(tmp_path: Path) -> None:
    proc, out = run_quick_bench(tmp_path, timeout=280)

    markdown = (out / "results.md").read_text()
    assert "| # | case | generator | result |" in markdown
    assert markdown == proc.stdout  # the table is also printed

    report = json.loads((out / "results.json").read_text())
    assert report["mode"] == "quick"
    rows = report["rows"]
    for scenario in SCENARIOS:
        measured = [r for r in rows if r["scenario"] == scenario and _numbers(r)]
        assert measured, f"scenario {scenario} produced no numbers: {[r for r in rows if r['scenario'] == scenario]}"
        for row in measured:
            assert all(math.isfinite(x) and x >= 0 for x in _numbers(row)), row
            assert f"| {scenario} | {row['case']}" in markdown

    # the baselines of the same run: W (write) and R (read), with numbers
    names = {b["name"].split()[0] for b in report["baselines"] if b["figure"]["median"]}
    assert {"W", "R"} <= names
    # produce rows carry the broker's CPU per request (counted by the broker, any client), a column;
    # a quick run's few requests can round a row's CPU to zero, so one measured row is enough here
    produce = [r for r in rows if r["scenario"] == "1" and not r["unavailable"]]
    assert any((r["extra"]["broker_cpu_us_per_request"]["median"] or 0) > 0 for r in produce), produce
    assert "| broker us/request |" in markdown
    # figures compared with a baseline carry the ratio
    assert any(r["ratio"] for r in rows if r["scenario"] == "1" and not r["unavailable"])
    # the acks=all RF=3 rows either have numbers or say why not
    rf3 = [r for r in rows if "acks=all RF=3" in r["case"]]
    assert rf3 and all(_numbers(r) or r["unavailable"] for r in rf3)
