"""``headwater bench --quick --only 8``: the Spark loader scenario end to end (a real ZooKeeper,
broker, kcat and a ``headwater load`` process on ``local[*]``).

Scenario 8 is left out of the ``--quick`` default (its JVM and Spark start-up alone take ~30 s),
so this is what keeps it working: it depends on the loader's log lines ("run N: loading ..." and
"run N published") and on its warehouse layout. Asserted: it ran, every row has numbers, and the
warehouse was verified (the scenario fails its rows when pyarrow finds a record missing or twice),
and Spark's own Kafka source ran beside it (or says in one line that the pinned jars are missing).
Timings are not test material on a shared machine; the figures are in docs/loader.md.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.bench.run import run_quick_bench


@pytest.mark.slow
@pytest.mark.timeout(900)  # two Spark processes (the loader's, Spark's own source's) on a loaded machine
def test_bench_load_scenario_loads_every_record_and_reports_both_rates(tmp_path: Path) -> None:
    pytest.importorskip("pyspark", reason="the loader extra (pyspark) is not installed")
    _, out = run_quick_bench(tmp_path, "8", timeout=850)
    report = json.loads((out / "results.json").read_text())
    rows = [r for r in report["rows"] if r["scenario"] == "8"]
    assert len(rows) == 7, rows
    for row in rows[:3]:
        assert not row["unavailable"], row
        mib = row["figures"]["MiB/s"]["median"]
        assert isinstance(mib, int | float) and math.isfinite(mib) and mib > 0, row
    whole, inner = rows[1], rows[2]
    assert "process start to exit" in whole["case"] and "'loading' to 'published'" in inner["case"]
    # the load itself is part of the whole process, so it cannot be slower
    assert inner["figures"]["MiB/s"]["median"] >= whole["figures"]["MiB/s"]["median"]
    assert "warehouse verified with pyarrow" in inner["note"]
    assert whole["goal_status"].endswith("not judged (smoke run)")  # --quick judges no goal (issue 40)
    assert not [r for r in report["rows"] if r["scenario"] != "8"]  # --only 8 ran nothing else
    # Spark's own format("kafka") beside it (issue 39): figures and the ratio headwater load / Spark's
    # source, or one line saying the pinned jars are missing
    sparks = [r for r in rows if r["generator"].startswith('Spark\'s format("kafka")')]
    extras = [r for r in rows[3:] if r not in sparks]
    assert len(sparks) == 2, rows[3:]
    for spark in sparks:
        assert spark["generator"].startswith('Spark\'s format("kafka")'), spark
        if spark["unavailable"]:
            assert "pinned Java jars are missing" in spark["unavailable"], spark
            continue
        assert spark["figures"]["MiB/s"]["median"] > 0, spark
        assert spark["baseline"] == "ratio: headwater load / Spark's source" and spark["ratio"] > 0, spark
    if not sparks[0]["unavailable"]:
        assert "read back: " in sparks[1]["note"] and "the CPU" in sparks[0]["note"], sparks
    # issue 44: the streaming reader and the typed Avro load, each a ratio to the batch load of the
    # same run (figures, or why not in one line)
    by_generator = {r["generator"]: r for r in extras}
    assert set(by_generator) == {'readStream.format("headwater")', "headwater load (PySpark), schema.registry.url"}
    for extra in extras:
        if extra["unavailable"]:
            assert extra["unavailable"].strip(), extra
            continue
        assert extra["figures"]["records/s"]["median"] > 0, extra
