"""``headwater bench --quick --only 9``: the mirror across a WAN link end to end (a real ZooKeeper, two
brokers, a ``headwater lab link serve`` process and a mirror per row: a LAN row at 0 ms without a cap, a
WAN row at 40 ms one way through the lab's 100 Mbit/s cap).

Scenario 9 is left out of the ``--quick`` default, so this is what keeps it working. Asserted: it ran,
every row has a number, the WAN row's ratio to the run's best LAN row and the wire bytes per record (the
link's counter: at least the 100 B values) are there, and the goal row says it judges nothing (a --quick
run is a smoke run).
Timings are not test material on a shared machine; the figures are in docs/performance.md.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from tests.bench.run import run_quick_bench


def test_bench_wan_scenario_mirrors_through_the_link_at_each_delay(tmp_path: Path) -> None:
    _, out = run_quick_bench(tmp_path, "9", timeout=400)
    report = json.loads((out / "results.json").read_text())
    rows = [r for r in report["rows"] if r["scenario"] == "9"]
    assert [r["case"].split(" ms")[0] for r in rows] == ["LAN: 0", "WAN: 40"], rows
    assert "100 Mbit/s cap" in rows[1]["case"], rows[1]
    for row in rows:
        assert not row["unavailable"], row
        rate = row["figures"]["records/s"]["median"]
        assert isinstance(rate, int | float) and math.isfinite(rate) and rate > 0, row
    assert rows[1]["figures"]["wire bytes/record"]["median"] >= 100, rows[1]
    assert rows[1]["ratio"] and rows[1]["goal_status"].endswith("not judged (smoke run)"), rows[1]  # --quick
    assert not [r for r in report["rows"] if r["scenario"] != "9"]  # --only 9 ran nothing else
