"""The audit service over a real pipeline: auditing producers in two DCs, real mirror processes, the
aggregate cluster. 100 % everywhere; exact loss and duplicates when the mirror drops or doubles
records; the same counts after the audit service is killed and restarted; the dashboard in Chromium."""

from __future__ import annotations

import json
import shutil
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from headwater.client.audit import SyncAuditingProducer
from headwater.testing.zookeeper import free_port
from tests.cluster.harness import Cluster
from tests.cluster.util import create_topic
from tests.mirror.util import MirrorProcess, wait_for, zk_connect

WINDOW_MS = 2000
GRACE_MS = 10000  # generous: the mirror and the audit run on a loaded two-core machine


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def _healthy(port: int) -> bool:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as r:
        return int(r.status) == 200


def _metric(port: int, name: str) -> float:
    """The sum of a metric's samples over all labels (both flows)."""
    total = 0.0
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith((name + "{", name + " ")):
                total += float(line.rsplit(" ", 1)[1])
    return total


def _produce(bootstrap: str, dc: str, topics: list[str], n: int) -> None:
    with SyncAuditingProducer(
        bootstrap, datacenter=dc, host=f"web-{dc}", application="frontend", window_ms=WINDOW_MS, acks="all", linger_ms=5
    ) as p:
        futures = [
            p.send(topics[i % len(topics)], f"{dc}-{i}".encode(), key=f"member-{i % 31}".encode()) for i in range(n)
        ]
        for f in futures:
            f.result(60)
        p.flush()


def _settled(port: int, topic: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = _get(f"http://127.0.0.1:{port}/api/v1/completeness?topic={topic}")["rows"]
    # closed: not open, and not late with records still on their way (pending: the hop's heartbeats lag)
    return rows if rows and all(r["status"] != "open" and not r["pending"] for r in rows) else []


@pytest.fixture
def pipeline(cluster_factory: Callable[..., Cluster], tmp_path: Path) -> dict[str, Any]:
    dc1, dc2, agg = cluster_factory(1), cluster_factory(1), cluster_factory(1)
    for c in (dc1, dc2):
        for t in ("views", "views-drop", "views-dup"):
            create_topic(c, t, partitions=2, rf=1, min_isr=1)
    return {"dc1": dc1, "dc2": dc2, "agg": agg, "tmp": tmp_path}


def _mirror(p: dict[str, Any], name: str, topic: str, **extra: object) -> MirrorProcess:
    dc1, dc2, agg = p["dc1"], p["dc2"], p["agg"]
    props = {
        "clusters": "dc1, dc2, agg",
        "dc1.zookeeper.connect": zk_connect(dc1),
        "dc2.zookeeper.connect": zk_connect(dc2),
        "agg.bootstrap.servers": agg.bootstrap,
        "dc1->agg.enabled": "true",
        "dc2->agg.enabled": "true",
        "topics": topic,
        "group.id": name,
        "fetch.max.wait.ms": 100,
        "offset.commit.interval.ms": 500,
        **extra,
    }
    return MirrorProcess(p["tmp"], name, props).start()


def _audit(p: dict[str, Any], port: int) -> MirrorProcess:
    props = {
        "clusters": "dc1, dc2, agg",
        "dc1.bootstrap.servers": p["dc1"].bootstrap,
        "dc2.bootstrap.servers": p["dc2"].bootstrap,
        "agg.bootstrap.servers": p["agg"].bootstrap,
        "audit.topics": "views.*",
        "window.ms": WINDOW_MS,
        "grace.ms": GRACE_MS,
        "store": f"sqlite:///{p['tmp'] / 'audit.db'}",
        "http.host": "127.0.0.1",
        "http.port": port,
        "fetch.max.wait.ms": 100,
    }
    return MirrorProcess(p["tmp"], "audit", props, command=("audit", "serve")).start()


def test_every_tier_complete_loss_and_duplicates_exact_and_restart_safe(pipeline: dict[str, Any]) -> None:
    p = pipeline
    port, drop_port, dup_port = free_port(), free_port(), free_port()
    mirrors = [
        _mirror(p, "m-clean", "views"),
        _mirror(p, "m-drop", "views-drop", **{"headwater.test.drop.every": 25, "metrics.port": drop_port}),
        _mirror(p, "m-dup", "views-dup", **{"headwater.test.duplicate.every": 40, "metrics.port": dup_port}),
    ]
    audit = _audit(p, port)
    try:
        wait_for(lambda: _healthy(port), 60, "the audit service to answer /healthz", audit)
        for dc in ("dc1", "dc2"):
            _produce(p[dc].bootstrap, dc, ["views", "views-drop", "views-dup"], 1200)
        # Kill the audit service while it counts; a restart must not count anything twice.
        wait_for(lambda: _get(f"http://127.0.0.1:{port}/api/v1/topics")["topics"], 60, "the first counts", audit)
        audit.kill9()
        audit.start()
        for dc in ("dc1", "dc2"):
            _produce(p[dc].bootstrap, dc, ["views", "views-drop", "views-dup"], 600)

        # 100 % at every tier, once every window closed (a count that arrived after its window closed
        # is still counted: the status is then "late", the completeness still 1.0).
        def clean() -> list[dict[str, Any]]:
            rows = _settled(port, "views")
            return rows if rows and all(r["completeness"] == 1.0 for r in rows) else []

        wait_for(clean, 180, "every window of views to close at 100 %", audit)
        rows = clean()
        assert {(r["datacenter"], r["tier"]) for r in rows} == {
            ("dc1", "producer"),
            ("dc1", "dc1"),
            ("dc1", "agg"),
            ("dc2", "producer"),
            ("dc2", "dc2"),
            ("dc2", "agg"),
        }
        assert {r["status"] for r in rows} <= {"complete", "late"}
        assert sum(r["count"] for r in rows if r["tier"] == "producer") == 1200  # (1200 + 600) x 2 DCs / 3 topics

        # Exactly what the mirror dropped is missing, at the aggregate tier only.
        def dropped_rows() -> list[dict[str, Any]]:
            rows = _settled(port, "views-drop")
            dropped = _metric(drop_port, "headwater_mirror_test_dropped_records_total")
            missing = sum(r["missing"] for r in rows if r["tier"] == "agg")
            return rows if rows and dropped > 0 and missing == dropped else []

        wait_for(dropped_rows, 180, "views-drop to report exactly the dropped records", audit)
        rows = dropped_rows()
        assert all(r["completeness"] == 1.0 for r in rows if r["tier"] != "agg")
        assert "loss" in {r["status"] for r in rows if r["tier"] == "agg"}

        # Exactly what the mirror doubled is reported as duplicates.
        def doubled_rows() -> list[dict[str, Any]]:
            rows = _settled(port, "views-dup")
            doubled = _metric(dup_port, "headwater_mirror_test_duplicated_records_total")
            extra = sum(r["count"] - r["expected"] for r in rows if r["tier"] == "agg")
            return rows if rows and doubled > 0 and extra == doubled else []

        wait_for(doubled_rows, 180, "views-dup to report exactly the doubled records", audit)
        assert "duplicates" in {r["status"] for r in doubled_rows() if r["tier"] == "agg"}
        wait_for(lambda: "AUDIT LOSS: topic views-drop" in audit.log(), 60, "the loss alert line", audit)

        # The overview of the live service says the same: the loss at agg, on the hop into agg,
        # exactly the dropped count; the duplicates; views healthy; no tier stale
        seen: list[dict[str, Any]] = []

        def fresh() -> bool:  # a counter round can stall past window + grace on a loaded machine
            seen.append(_get(f"http://127.0.0.1:{port}/api/v1/overview?hours=24"))
            return bool(seen[-1]["stale"] == {})

        wait_for(fresh, 60, "no tier stale on the overview", audit)
        ov = seen[-1]
        by = {(e["topic"], e["datacenter"], e["tier"]): e for e in ov["entries"]}
        drop = [by[("views-drop", dc, "agg")] for dc in ("dc1", "dc2")]
        assert sum(e["missing"] for e in drop) == _metric(drop_port, "headwater_mirror_test_dropped_records_total")
        assert {e["hop"] for e in drop if e["missing"]} <= {"dc1->agg", "dc2->agg"}
        dup = [by[("views-dup", dc, "agg")] for dc in ("dc1", "dc2")]
        assert sum(e["duplicated"] for e in dup) == _metric(dup_port, "headwater_mirror_test_duplicated_records_total")
        assert {e["status"] for k, e in by.items() if k[0] == "views"} <= {"complete", "late", "open"}
        assert ov["headline"] == f"{ov['problems']} problems" and ov["problems"] >= 2

        _browser_drills_into_a_red_window(port, p["tmp"] / "dashboard.png")
    finally:
        audit.stop()
        for m in mirrors:
            m.stop()


def _browser_drills_into_a_red_window(port: int, screenshot: Path) -> None:
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(chromium).exists():
        pytest.fail("Debian's chromium is not installed: run `make system-deps`")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=chromium,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"],
        )
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.goto(f"http://127.0.0.1:{port}/?topic=views-drop")
            assert page.locator("table.grid").count() == 1
            red = page.locator("td.cell.loss a").first
            shown = red.inner_text()  # "-N"
            assert shown.startswith("-")
            page.screenshot(path=str(screenshot), full_page=True)  # docs/images/audit-dashboard.png is one
            red.click()
            page.wait_for_selector("#tiers")
            agg_row = page.locator("#tiers tr", has_text="agg")
            assert agg_row.locator("td.status").inner_text() == "loss"
            assert "-" + agg_row.locator("td.missing").inner_text() == shown
            assert page.locator("#hosts tr").count() >= 2  # the per-host producer counts
        finally:
            browser.close()
