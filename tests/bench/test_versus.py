"""``headwater bench --versus kafka`` and ``--quick``: the report logic without a cluster (the real
comparison runs by hand, docs/performance.md), and the smoke-run rule of issue 40."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from headwater.bench import versus
from headwater.bench import versus_extra as extra
from headwater.bench import versus_more as more
from headwater.bench.report import Goal, Row
from headwater.testing import java
from headwater.testing.zookeeper import ZooKeeperServer


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


# --- the rows of issues 39 and 40 beyond the core, each group's --quick path on Headwater brokers ---
# (the Kafka side runs by hand: a 3-broker Kafka cluster alone takes 20-40 s to start here)


def _java_or_skip() -> None:
    reason = java.unavailable()
    if reason is not None:
        pytest.skip(reason)


def _measured(rows: dict[str, versus.Row], *keys: str) -> None:
    for key in keys:
        got = rows[key].values["headwater"]
        assert len(got) == 1 and math.isfinite(got[0]) and got[0] > 0, (key, rows[key].values)


def _all_rows() -> dict[str, versus.Row]:
    return {
        r.key: versus.Row(r.key, r.label, r.unit, r.goal, r.higher_is_better, r.table, r.group) for r in versus.ROWS
    }


def test_versus_large_java_and_failover_quick_on_headwater(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    """Large records, Kafka 2.3.1's ProducerPerformance / ConsumerPerformance, data stored (read back
    after its files left the page cache), SASL_SSL (SCRAM-SHA-512 over TLS) on a broker of three
    listeners, and a controller's kill -9 at 40 partitions (RF 3) with the restart, controlled
    shutdown, idle CPU and Metadata rows beside it, with --quick's counts or smaller. (The 1 MB and
    tuned rows are the large and produce paths with other arguments: not repeated here.)"""
    _java_or_skip()
    rows = _all_rows()
    with more.any_cluster("headwater", tmp_path, zookeeper, "versus-quick", 3) as c:
        more.large("headwater", c.bootstrap, 20, rows, print)
        more.java_perf("headwater", c.bootstrap, 2_000, rows, print)
        extra.stored("headwater", c.bootstrap, tmp_path / "versus-quick", 1 << 20, 2_000, 30, rows, print)
    extra.tls("headwater", tmp_path, zookeeper, "versus-quick-tls", 2_000, 30, rows, print, False, ("SASL_SSL",))
    more.failover("headwater", tmp_path, zookeeper, "versus-quick-failover", 40, rows, print, idle_seconds=1)
    _measured(rows, "lp", "lc", "jp", "jc", "sp", "sc", "tssp", "tssc")
    _measured(rows, "fo", "fox", "rs", "cs", "idle", "mdt")


def test_versus_quotas_quick_on_headwater(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    """``--versus kafka --only quotas``'s Headwater side, small: a broker of its own, quotas off and on
    (written to ZooKeeper's /config/clients as Kafka 2.3's kafka-configs does), the broker's CPU
    per MiB for each and the quiet producer beside the noisy one; every figure measured. (The Kafka
    side runs by hand: docs/performance.md.)"""
    rows = _all_rows()
    extra.quotas("headwater", tmp_path, zookeeper, "versus-quick-quotas", 50_000, 60, 0, rows, print, 2.0)
    _measured(rows, "qoff", "qon", "qpr", "qq")  # qcr: a consume of 10 MB may cost under the 10 ms CPU tick


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_versus_mm2_and_spark_quick_on_headwater(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    """MirrorMaker 2 and ``headwater mirror`` copying dc1 -> agg; Spark's ``format("kafka")`` and the
    project's ``format("headwater")`` writing the same Parquet, every record (both check the count)."""
    _java_or_skip()
    rows = _all_rows()
    more.mirrors("headwater", tmp_path, zookeeper, "versus-quick-mm2", 2_000, rows, print)
    with more.any_cluster("headwater", tmp_path, zookeeper, "versus-quick-spark", 1) as c:
        more.spark("headwater", c.bootstrap, tmp_path, 2_000, rows, print)
    _measured(rows, "mm2", "mm2e", "tm", "tme", "sk", "ts")
    assert rows["tm"].values["kafka"] == rows["mm2"].values["headwater"]  # the tool table's MM2 side
    text = versus.markdown(list(rows.values()), versus.Plan.make(True, None), "now", (1.0,) * 3, (1.0,) * 3)
    assert "Headwater's tool | Kafka's tool" in text and "MirrorMaker 2" in text
