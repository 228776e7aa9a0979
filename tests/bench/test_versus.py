"""``headwater bench --versus kafka`` and ``--quick``: the report logic without a cluster (the real
comparison runs by hand, docs/performance.md), and the smoke-run rule of issue 40."""

from __future__ import annotations

from headwater.bench import versus
from headwater.bench.report import Goal, Row


def test_a_quick_row_judges_no_goal() -> None:
    row = Row("1", "case", "gen", "rec/s", goal=Goal(">= 1 rec/s", 1))
    row.smoke = True
    assert row.goal_status() == ">= 1 rec/s: not judged (smoke run)"


def _rows(kafka: list[float], headwater: list[float]) -> versus.Row:
    row = versus.Row("p1", "produce", "rec/s", "produce")
    row.values = {"kafka": kafka, "headwater": headwater}
    return row


def test_versus_judges_the_median_ratio_only_from_three_runs() -> None:
    assert _rows([100, 90, 110], [60, 40, 55]).verdict() == ">= 0.5x Kafka: met"  # 55 / 100
    assert _rows([100, 90, 110], [40, 45, 60]).verdict() == ">= 0.5x Kafka: missed"  # 45 / 100
    assert "not judged" in _rows([100], [60]).verdict()
    assert _rows([100, 90, 110], [60, 40, 55]).cell("kafka") == "100 (90-110)"


def test_a_quick_versus_table_says_it_is_a_smoke_run() -> None:
    row = _rows([100], [60])
    text = versus.markdown([row], versus.Plan.make(True, None), "now", (1.0, 1.0, 1.0), (1.0, 1.0, 1.0))
    assert "A smoke run" in text and "met" not in text and "missed" not in text
