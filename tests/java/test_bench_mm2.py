"""``headwater bench --quick --only 7``: MirrorMaker 2 (dedicated mode, the pinned jars) beside
``headwater mirror`` in the mirror scenario, same source topic, same destination broker, same run
(issue 39). Asserted: both copied every record (the scenario fails its rows otherwise), both rows
carry records/s and CPU, and MM2's row notes headwater mirror / MM2. Timings are not test material."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bench.run import run_quick_bench


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_mirror_scenario_runs_mm2_beside_headwater_mirror(java_deps: None, tmp_path: Path) -> None:
    _, out = run_quick_bench(tmp_path, "7", timeout=550)
    rows = [r for r in json.loads((out / "results.json").read_text())["rows"] if r["scenario"] == "7"]
    by_generator = {r["generator"].split(" (")[0]: r for r in rows if "path" not in r["case"]}
    fast = next(r for r in rows if r["case"].startswith("fast path"))
    mm2 = by_generator["MirrorMaker 2"]
    for row in (fast, mm2):
        assert not row["unavailable"], row
        for figure in ("records/s", "CPU us/record", "cores"):
            assert row["figures"][figure]["median"] > 0, (figure, row)
    assert mm2["note"].startswith("headwater mirror / MM2: "), mm2
    assert "connect-mirror 3." in mm2["generator"]
