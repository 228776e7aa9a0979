"""The overview in a real browser (Chromium through Playwright, issue 25): a healthy store reads as
healthy; a loss injected at the agg tier and duplicates at dc2 appear with their absolute counts,
the window they began and the hop; a lagging tier is stale, not green; the topic page shows the tier
completion latency. Counts are written into a real SQLite store (what the tier counters write)
and served by the real aiohttp app: no cluster. Screenshots go to the test's tmp dir
(docs/images/audit-overview-*.png are two of them)."""

from __future__ import annotations

import shutil
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from tests.audit.dashboard_data import W, app, gap, now_window, run, service, write

ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"]


def _chromium() -> str:
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(chromium).exists():
        pytest.fail("Debian's chromium is not installed: run `make system-deps`")
    return chromium


@asynccontextmanager
async def _served(s: Any) -> AsyncIterator[str]:
    runner = web.AppRunner(app(s), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@asynccontextmanager
async def _page() -> AsyncIterator[Any]:
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=_chromium(), args=ARGS)
        try:
            yield await browser.new_page(viewport={"width": 1280, "height": 800})
        finally:
            await browser.close()


async def _rows(page: Any) -> list[dict[str, str]]:
    out = []
    for row in await page.locator("#overview tr.entry").all():
        cells = {}
        for name in ("status", "topic", "dc", "tier", "missing", "duplicated", "late", "first", "hop"):
            cells[name] = (await row.locator(f"td.{name}").inner_text()).strip()
        out.append(cells)
    return out


def test_the_overview_shows_healthy_as_healthy_and_ticks(tmp_path: Path) -> None:
    s = service(tmp_path)
    now = now_window()
    write(s, "views", [now - 10 * W, now - 9 * W, now - 8 * W])
    write(s, "clicks", [now - 10 * W, now - 9 * W, now - 8 * W], per_dc=250)

    async def scenario() -> None:
        async with _served(s) as base, _page() as page:
            await page.goto(base + "/")
            assert (await page.locator("#headline").inner_text()) == "all healthy"
            assert "ok" in (await page.locator("#headline").get_attribute("class") or "")
            rows = await _rows(page)
            assert len(rows) == 12 and {r["status"] for r in rows} == {"complete"}
            assert {r["missing"] for r in rows} == {"0"} and {r["hop"] for r in rows} == {""}
            # the inline script ticks "updated Xs ago" (the page was rendered at data-generated)
            await page.wait_for_function(
                "document.getElementById('updated').textContent.match(/updated [1-9][0-9]*s ago/)", timeout=30_000
            )
            await page.screenshot(path=str(tmp_path / "overview-healthy.png"), full_page=True)

    run(scenario())
    s.store.close()


def test_injected_loss_duplicates_and_a_lagging_tier_show_on_the_overview(tmp_path: Path) -> None:
    s = service(tmp_path)
    now = now_window()
    write(s, "views", [now - 12 * W, now - 11 * W, now - 10 * W])
    # clicks: 24 of dc1's records lost between dc1 and agg in window now-9W; dc2's local cluster
    # holds 7 records twice; windows before and after are fine
    write(s, "clicks", [now - 12 * W], updated_ms=now - 11 * W + 4_000)
    for i, w in enumerate([now - 9 * W, now - 8 * W, now - 7 * W]):
        write(
            s,
            "clicks",
            [w],
            tiers={"dc1": {"agg": 976, "warehouse": 976}, "dc2": {"dc2": 1007, "agg": 1007, "warehouse": 1007}}
            if i == 0
            else None,
            updated_ms=w + W + 4_000,  # every tier counted the window 4 s after its end
        )
    gap(s, "clicks")

    async def scenario() -> None:
        await s.check()  # records tier completion latencies, as the running service does
        async with _served(s) as base, _page() as page:
            await page.goto(base + "/")
            headline = await page.locator("#headline").inner_text()
            assert headline == "6 problems", headline  # 5 tiers (agg, warehouse; dc2, agg, warehouse) + a gap
            rows = await _rows(page)
            first = rows[0]
            assert (first["status"], first["topic"], first["dc"], first["tier"]) == ("loss", "clicks", "dc1", "agg")
            assert (first["missing"], first["hop"]) == ("24", "dc1->agg")
            assert first["first"] == time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime((now - 9 * W) / 1000)) + "Z"
            dups = [r for r in rows if r["status"] == "duplicates"]
            assert {(r["dc"], r["tier"], r["duplicated"], r["hop"]) for r in dups} == {
                ("dc2", "dc2", "7", "producer->dc2"),
                ("dc2", "agg", "7", "producer->dc2"),
                ("dc2", "warehouse", "7", "producer->dc2"),
            }
            assert {r["status"] for r in rows if r["topic"] == "views"} == {"complete"}
            assert await page.locator("#alerts tr.alert.loss").count() == 2  # agg and warehouse of dc1
            gap_row = await page.locator("#gaps tr", has_text="clicks-3").inner_text()
            assert "dc2->agg" in gap_row and "1200" in gap_row and "1499" in gap_row and "300" in gap_row
            await page.screenshot(path=str(tmp_path / "overview-problems.png"), full_page=True)

            # the topic page from the strip: the grid and the tier completion latency
            await page.locator("#overview tr.entry td.topic a", has_text="clicks").first.click()
            await page.wait_for_selector("#latency")
            assert "+4.0 s" in await page.locator("#latency").inner_text()  # dc1 reached 100 % 4 s after the end
            # the chart has a labelled time axis and a red point where agg lost records
            assert await page.locator("svg.chart text.xlabel").text_content() == "window start (UTC)"
            assert await page.locator("svg.chart text.xtick").count() >= 2
            assert "24 missing" in (await page.locator("svg.chart circle.loss title").first.text_content() or "")
            await page.screenshot(path=str(tmp_path / "topic-latency.png"), full_page=True)

            # agg's counter falls 3 windows behind: its rows turn stale (not green), reason shown
            agg = next(c for c in s.counters if c.alias == "agg")
            agg.watermarks = {k: int(time.time() * 1000) - 3 * W for k in agg.watermarks}
            await page.goto(base + "/")
            rows = await _rows(page)
            by = {(r["topic"], r["dc"], r["tier"]): r for r in rows}
            assert by[("views", "dc1", "agg")]["status"] == "stale"
            assert by[("clicks", "dc1", "agg")]["status"] == "loss"  # a loss stays a loss
            why = await page.locator("#overview tr.entry.stale td.why").first.inner_text()
            assert "counted up to" in why
            await page.screenshot(path=str(tmp_path / "overview-stale.png"), full_page=True)

    run(scenario())
    s.store.close()
    print(f"screenshots in {tmp_path}")
