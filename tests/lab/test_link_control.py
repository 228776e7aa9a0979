"""The lab link's control endpoint against a web page (review security-2026-11-26, L6).

``POST /cut|/heal|/set`` on ``127.0.0.1:19190`` must not be reachable from a page the operator's
browser visits: a cross-site form or ``fetch`` is a "simple" request that needs no CORS permission to
be *sent*. The endpoint refuses any request carrying ``Origin`` or ``Referer`` (browsers add them;
``headwater lab link`` does not) and a POST without the ``X-Headwater-Lab`` header (which a form cannot
set and a cross-origin ``fetch`` can only set after a CORS preflight the endpoint never grants).
Real HTTP requests to a real control endpoint; one test drives real Chromium (Playwright).
"""

from __future__ import annotations

import asyncio
import http.client
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from headwater.lab.link import CONTROL_HEADER, LinkSettings, LinkThread, control_request


def _raw(port: int, method: str, path: str, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path, body=b"a=1" if method == "POST" else None, headers=headers)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"{}")
    finally:
        conn.close()


FORM = {"Content-Type": "application/x-www-form-urlencoded"}


@pytest.mark.parametrize(
    "headers",
    [
        {**FORM, "Origin": "http://evil.example"},  # a cross-site form or fetch
        {**FORM, "Origin": "null"},  # a sandboxed iframe or a file:// page
        {**FORM, "Referer": "http://evil.example/page.html"},  # a browser that sends no Origin
        {**FORM, "Origin": "http://evil.example", CONTROL_HEADER: "1"},  # a fetch after a (refused) preflight
        FORM,  # no Origin but not headwater's client either
    ],
)
def test_a_browser_style_post_is_refused_and_changes_nothing(headers: dict[str, str]) -> None:
    with LinkThread("dc2", LinkSettings(delay_ms=1)) as link:
        port = link.serve_control()
        for path in ("/cut?link=dc2&mode=drop", "/set?link=dc2&delay_ms=5000", "/heal?link=dc2"):
            code, body = _raw(port, "POST", path, headers)
            assert code == 403, (path, headers, body)
            assert "headwater lab link" in body["error"]
        status = link.status()
        assert status["state"] == "up" and status["cuts"] == 0 and status["settings"]["delay_ms"] == 1


def test_headwater_lab_link_and_health_checks_still_work() -> None:
    with LinkThread("dc2", LinkSettings(delay_ms=1)) as link:
        port = link.serve_control()
        assert _raw(port, "GET", "/status", {})[0] == 200  # the compose health check: plain GET
        assert _raw(port, "GET", "/status", {"Origin": "http://evil.example"})[0] == 403
        assert _raw(port, "OPTIONS", "/cut?link=dc2", {"Origin": "http://evil.example"})[0] == 403  # no preflight
        code, body = control_request(f"127.0.0.1:{port}", "POST", "/cut?link=dc2&mode=drop")
        assert code == 200 and body["state"] == "cut (drop)"
        assert control_request(f"127.0.0.1:{port}", "POST", "/heal?link=dc2")[0] == 200
        assert link.status()["state"] == "up"


def _chromium() -> str:
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(chromium).exists():
        pytest.fail("Debian's chromium is not installed: run `make system-deps`")
    return chromium


def test_a_web_page_the_operator_visits_cannot_cut_the_link() -> None:
    """Chromium on a page of another origin: an auto-submitted form and a no-cors fetch, both POSTs to
    the control endpoint, are answered (the test waits for both answers) and the link stays up."""
    from playwright.async_api import async_playwright

    with LinkThread("dc2", LinkSettings(delay_ms=1)) as link:
        control = link.serve_control()
        target = f"http://127.0.0.1:{control}"
        page_html = (
            "<!doctype html><html><body>"
            f'<form id="f" method="POST" action="{target}/cut?link=dc2&mode=drop"><input name="a" value="1"></form>'
            "</body></html>"
        )

        async def evil(_request: web.Request) -> web.Response:
            return web.Response(text=page_html, content_type="text/html")

        async def scenario() -> list[str]:
            app = web.Application()
            app.add_routes([web.get("/", evil)])
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            page_url = f"http://127.0.0.1:{runner.addresses[0][1]}/"  # another port: another origin
            seen = []
            try:
                async with async_playwright() as pw:
                    browser = await pw.chromium.launch(executable_path=_chromium(), args=["--no-sandbox"])
                    try:
                        page = await browser.new_page()
                        await page.goto(page_url)
                        seen.append(
                            await page.evaluate(
                                "u => fetch(u, {method: 'POST', mode: 'no-cors', body: 'a=1', headers: "
                                "{'Content-Type': 'application/x-www-form-urlencoded'}}).then(() => 'answered')",
                                f"{target}/set?link=dc2&delay_ms=5000",
                            )
                        )
                        async with page.expect_navigation(url=f"{target}/**"):
                            await page.evaluate("document.getElementById('f').submit()")
                        seen.append(await page.content())
                    finally:
                        await browser.close()
            finally:
                await runner.cleanup()
            return seen

        answered, form_answer = asyncio.run(scenario())
        assert answered == "answered"
        assert "headwater lab link" in form_answer  # the refusal, shown to the browser
        status = link.status()
        assert status["state"] == "up" and status["cuts"] == 0 and status["settings"]["delay_ms"] == 1
