"""The overview (issue 25): every topic x datacenter x tier, worst first, absolute counts, the first
bad window, the hop, gaps, stale tiers; the JSON API, paged. A real SQLite store, the real app."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from tests.audit.dashboard_data import W, app, gap, now_window, run, service, write


async def _get(client: TestClient, path: str, **params: str) -> Any:
    r = await client.get(path, params=params)
    assert r.status == 200, await r.text()
    return await r.json() if path.startswith("/api") else await r.text()


def test_a_healthy_store_is_all_healthy(tmp_path: Path) -> None:
    s = service(tmp_path)
    now = now_window()
    write(s, "views", [now - 10 * W, now - 9 * W, now - 8 * W])

    async def scenario() -> None:
        async with TestClient(TestServer(app(s))) as client:
            data = await _get(client, "/api/v1/overview")
            assert data["headline"] == "all healthy" and data["healthy"] and data["problems"] == 0
            got = {(e["datacenter"], e["tier"]): e["status"] for e in data["entries"]}
            assert got == {(dc, t): "complete" for dc in ("dc1", "dc2") for t in (dc, "agg", "warehouse")}
            page = await _get(client, "/")
            assert 'id="headline" class="headline ok">all healthy<' in page
            assert "data-generated=" in page and "updated" in page

    run(scenario())
    s.store.close()


def test_loss_and_duplicates_are_shown_with_absolute_counts_first_window_and_hop(tmp_path: Path) -> None:
    s = service(tmp_path)
    now = now_window()
    windows = [now - 10 * W, now - 9 * W]
    write(s, "views", windows)  # healthy
    # clicks: window 8 is fine, window 7 lost 24 of dc1's records between dc1 and agg (so the
    # warehouse misses them too), and dc2's local tier counted 5 twice (carried on to agg)
    write(s, "clicks", [now - 8 * W])
    write(
        s,
        "clicks",
        [now - 7 * W, now - 6 * W],
        tiers={"dc1": {"agg": 976, "warehouse": 976}, "dc2": {"dc2": 1005, "agg": 1005, "warehouse": 1005}},
    )
    gap(s, "clicks")

    async def scenario() -> None:
        assert await s.check() == 6  # five window alerts and the gap, as the running service records them
        async with TestClient(TestServer(app(s))) as client:
            data = await _get(client, "/api/v1/overview", hours="2")
            assert data["headline"] == f"{data['problems']} problems" and not data["healthy"]
            assert data["alerts_active"] == 5
            loss = [a for a in data["alerts"] if a["status"] == "loss" and a["tier"] == "agg"]
            assert [(a["topic"], a["datacenter"], a["window_start"]) for a in loss] == [("clicks", "dc1", now - 7 * W)]
            assert loss[0]["delivered_ms"] is None and loss[0]["sent"] and not loss[0]["webhook"]
            by = {(e["topic"], e["datacenter"], e["tier"]): e for e in data["entries"]}
            agg = by[("clicks", "dc1", "agg")]
            assert (agg["status"], agg["missing"], agg["duplicated"], agg["hop"]) == ("loss", 24, 0, "dc1->agg")
            assert agg["first_problem_window"] == now - 7 * W
            wh = by[("clicks", "dc1", "warehouse")]
            assert (wh["status"], wh["missing"], wh["hop"]) == ("loss", 24, "dc1->agg")  # where it first appeared
            assert by[("clicks", "dc1", "dc1")]["status"] == "complete"
            dup = by[("clicks", "dc2", "dc2")]
            assert (dup["status"], dup["duplicated"], dup["hop"]) == ("duplicates", 5, "producer->dc2")
            assert by[("clicks", "dc2", "agg")]["hop"] == "producer->dc2"
            assert data["entries"][0]["status"] == "loss"  # worst first
            statuses = [e["status"] for e in data["entries"]]
            assert statuses.index("complete") > max(i for i, x in enumerate(statuses) if x != "complete")
            assert data["problems"] == 6  # dc1: agg and warehouse lost; dc2: dc2, agg, warehouse doubled; a gap
            assert [g["from_offset"] for g in data["gaps"]] == [1200] and data["gaps"][0]["hop"] == "dc2->agg"
            # paged
            page2 = await _get(client, "/api/v1/overview", hours="2", limit="2", offset="2")
            assert page2["total"] == data["total"] and page2["entries"] == data["entries"][2:4]
            html = await _get(client, "/", hours="2")
            assert 'class="headline bad"' in html
            assert "<h2>Alerts (5 active)</h2>" in html
            assert '<td class="delivery">logged (no alert.webhook.url)</td>' in html  # none configured here
            assert '<td class="num missing">24</td>' in html and "dc1-&gt;agg" in html
            for bad in ({"hours": "x"}, {"hours": "0"}, {"limit": "-1"}):
                r = await client.get("/api/v1/overview", params=bad)
                assert r.status == 400
            topic_page = await _get(client, "/", topic="clicks")  # the old deep link still opens the topic
            assert 'table class="grid"' in topic_page

    run(scenario())
    s.store.close()


def test_a_stopped_or_lagging_tier_is_stale_not_green(tmp_path: Path) -> None:
    s = service(tmp_path)
    now = now_window()
    write(s, "views", [now - 10 * W, now - 9 * W])
    agg = next(c for c in s.counters if c.alias == "agg")
    agg.watermarks = {k: int(time.time() * 1000) - 10 * W for k in agg.watermarks}  # 10 windows behind

    async def scenario() -> None:
        async with TestClient(TestServer(app(s))) as client:
            data = await _get(client, "/api/v1/overview")
            by = {(e["datacenter"], e["tier"]): e for e in data["entries"]}
            assert by[("dc1", "agg")]["status"] == "stale"
            assert "counted up to" in by[("dc1", "agg")]["stale_reason"]
            assert data["stale"]["agg"] and not data["healthy"]
            # the producer tier (every __audit) is stale too: the local tiers cannot be judged either
            assert by[("dc1", "dc1")]["status"] == "stale"
            assert by[("dc1", "warehouse")]["status"] == "stale"  # its counts come through __audit too
            assert by[("dc1", "agg")]["missing"] == 0  # nothing made up
            agg.store_error = "database is locked"
            data = await _get(client, "/api/v1/overview")
            assert "store unavailable" in data["stale"]["agg"]

    run(scenario())
    s.store.close()


def test_tier_completion_latency_is_stored_once_shown_and_exported(tmp_path: Path) -> None:
    s = service(tmp_path)
    w = now_window() - 10 * W
    end = w + W
    # producer, dc1 and dc2 complete 30 s after the window's end; agg counted nothing by then ...
    write(s, "views", [w], tiers={"dc1": {"agg": 0}, "dc2": {"agg": 0}}, updated_ms=end + 30_000)
    # ... and reached 100 % at 4 minutes: "the agg tier is 4 minutes behind"
    s.store.apply("agg", {}, {("views", w, dc, "agg"): (1000, 0) for dc in ("dc1", "dc2")}, end + 240_000, 0)

    async def scenario() -> None:
        await s.check()
        await s.check()  # observed once, not per pass
        done = s.store.completions("views")
        assert done[("views", w, "dc1", "agg")] == 240_000 and done[("views", w, "dc1", "dc1")] == 30_000
        assert ("views", w, "dc1", "warehouse") not in done  # the warehouse has not counted it yet
        async with TestClient(TestServer(app(s))) as client:
            metrics = await (await client.get("/metrics")).text()

            def bucket(tier: str, le: str) -> float:
                line = f'headwater_audit_tier_completion_seconds_bucket{{le="{le}",tier="{tier}",topic="views"}} '
                return float(next(x for x in metrics.splitlines() if x.startswith(line)).split()[-1])

            assert bucket("agg", "120.0") == 0 and bucket("agg", "300.0") == 2  # both datacenters' windows
            assert bucket("dc1", "30.0") == 1 and bucket("dc2", "30.0") == 1
            page = await _get(client, "/topic", topic="views")
            assert 'id="latency"' in page and "+240.0 s" in page and "+30.0 s" in page

    run(scenario())
    s.store.close()


def test_retention_prunes_old_windows_and_keeps_undelivered_alerts(tmp_path: Path) -> None:
    import pytest

    from headwater.audit.config import AuditConfigError, parse
    from headwater.audit.store import Gap, PendingAlert, Rejected

    with pytest.raises(AuditConfigError, match=r"retention.days: 0 is below the minimum of 1"):
        parse({"clusters": "dc1", "dc1.bootstrap.servers": "h:1", "retention.days": "0"})
    s = service(tmp_path)
    assert s.config.retention_days == 30
    store = s.store
    now = int(time.time() * 1000)
    old, new = now_window() - 31 * 86_400_000, now_window() - 10 * W
    write(s, "views", [old, new])
    store.apply("dc1", {}, {}, old, 0, rejected=[Rejected("__audit", 0, 7, "not JSON", b"x")])
    for w in (old, new):
        store.record_completion(("views", w, "dc1", "dc1"), w + W, 1000)
    store.record_alert(("views", old, "dc1", "agg"), "loss", old, "sent")
    store.alert_delivered(PendingAlert("window", ("views", old, "dc1", "agg"), "sent", 0), old, "sent")
    store.record_alert(("views", old, "dc2", "agg"), "loss", old, "never delivered")
    old_gaps = [Gap(g * 32, "agg", "dc1->agg", "dc1", "views", 0, 0, 10, 10, "source retention", old) for g in "ab"]
    store.apply("agg", {}, {}, old, 0, gaps=old_gaps)
    store.set_gap_payload("a" * 32, "sent")
    store.alert_delivered(PendingAlert("gap", ("a" * 32,), "sent", 0), old, "sent")
    store.set_gap_payload("b" * 32, "never delivered")

    deleted = run(s.prune(now))
    assert deleted == {
        "audit_counts": 8,  # producer, local, agg, warehouse for dc1 and dc2
        "audit_events": 2,  # the producers' events of dc1 and dc2
        "audit_completion": 1,
        "audit_alerts": 1,
        "audit_gaps": 1,
        "audit_rejected": 1,
    }
    assert {r.window_start for r in store.counts("views")} == {new}
    assert set(store.completions("views")) == {("views", new, "dc1", "dc1")}
    assert store.alerted() == {("views", old, "dc2", "agg"): "loss"}  # still to be delivered
    assert [g.guid for g in store.gaps()] == ["b" * 32]
    assert store.rejected() == []
    assert run(s.prune(now)) == dict.fromkeys(deleted, 0)
    metrics = s.registry.get_sample_value("headwater_audit_pruned_rows_total", {"table": "audit_counts"})
    assert metrics == 8
    store.close()


def test_the_topic_chart_has_a_time_axis_markers_open_windows_and_deep_links(tmp_path: Path) -> None:
    import re

    s = service(tmp_path)
    now = now_window()
    write(s, "clicks", [now - 5 * W, now - 4 * W])
    write(s, "clicks", [now - 3 * W], tiers={"dc1": {"agg": 976}})  # agg lost 24
    write(s, "clicks", [now - 2 * W])
    write(s, "clicks", [now], per_dc=300)  # the current window: open, counted so far

    async def scenario() -> None:
        async with TestClient(TestServer(app(s))) as client:
            page = await _get(client, "/topic", topic="clicks")
            svg = page[page.index('<svg class="chart"') : page.index("</svg>")]
            labels = re.findall(r'<text class="xtick"[^>]*>(\d\d:\d\d)</text>', svg)
            assert labels and labels[0] == time.strftime("%H:%M", time.gmtime((now - 5 * W) / 1000))
            assert "window start (UTC)" in svg and "records per window" in svg
            assert re.search(r'<circle class="loss"[^>]*><title>agg [^<]*: 24 missing</title>', svg)
            assert '<polyline class="open"' in svg and "open, 600 counted so far" in svg  # not a drop
            assert "duplicates" not in re.findall(r'<circle class="(\w+)"', svg)
            # a deep link to a time range: only those windows
            deep = await _get(client, "/topic", topic="clicks", **{"from": str(now - 3 * W), "to": str(now - 2 * W)})
            grid = deep[deep.index('<table class="grid"') :]
            assert grid.count("<tr><th>20") == 1  # one window row
            assert time.strftime("%H:%M:%S", time.gmtime((now - 3 * W) / 1000)) in grid
            r = await client.get("/topic", params={"topic": "clicks", "from": "yesterday"})
            assert r.status == 400 and "from" in await r.text()

    run(scenario())
    s.store.close()


def test_the_headline_says_late_only_while_records_are_on_their_way() -> None:
    """A row late because records are still on their way (pending) makes the headline "no loss, N
    late"; one whose records all arrived, some after the window closed, leaves it "all healthy"."""
    from headwater.audit import overview
    from headwater.audit.reconcile import Completeness

    now = 100 * 60_000

    def row(dc: str, tier: str, count: int, status: str, late: int = 0, lagging: bool = False) -> Completeness:
        return Completeness("t", 0, 60_000, dc, tier, count, 10, count / 10, status, late, 0, lagging)

    arrived_late = [row("dc1", "producer", 10, "complete"), row("dc1", "agg", 10, "late", late=3)]
    ov = overview.build(arrived_late, [], {}, now_ms=now, hours=6)
    assert (ov["headline"], ov["healthy"], ov["late"]) == ("all healthy", True, 0)
    assert ov["entries"][0]["status"] == "late" and ov["entries"][0]["behind_s"] is None
    on_their_way = [*arrived_late, row("dc2", "producer", 10, "complete"), row("dc2", "agg", 4, "late", lagging=True)]
    ov = overview.build(on_their_way, [], {}, now_ms=now, hours=6)
    assert (ov["headline"], ov["healthy"], ov["late"]) == ("no loss, 1 late", True, 1)
    e = next(e for e in ov["entries"] if e["datacenter"] == "dc2")
    assert (e["status"], e["missing"], e["late"], e["behind_s"]) == ("late", 0, 6, (now - 60_000) // 1000)
