"""The audit service's HTTP side (aiohttp): the dashboard, the JSON API, /metrics and /healthz.

- ``GET /`` — the overview (overview.py): every topic x datacenter x tier over the last ``?hours=``
  (default 6), worst first, with absolute counts, the first bad window, the hop, the mirrors' gaps
  and one headline; "updated Xs ago" and a reload every 15 s by a small inline script.
  ``GET /api/v1/overview[?hours=&limit=&offset=&gaps_limit=&gaps_offset=]`` — the same as JSON, paged.
- ``GET /topic?topic=[&from=ms&to=ms]`` (and ``/?topic=``, the old deep link) — for one topic (its
  latest 40 windows, or the range given), a chart (server-side SVG, time axis), the tier completion
  latency, and a grid of windows by (datacenter, tier): green complete,
  red loss with the missing count, amber duplicates, blue late, grey open; each cell links to the
  window's drill-down; a chart of records per window per tier (inline SVG); refreshes every 10 s.
  Windows late with records still on their way (their hop lags: a cut link) are drawn as hollow blue
  points, not as a drop, and the latency table counts their wait "so far"; the overview's row shows
  how long the tier is behind.
- ``GET /window?topic=&window_start=&datacenter=`` — every tier of one window and the producer
  tier's per-host counts.
- ``GET /api/v1/completeness[?topic=T&from=ms&to=ms]`` — ``{"rows": [...]}`` (the last day by
  default, at most 7 days); ``GET /api/v1/topics``;
  ``GET /api/v1/gaps[?topic=T]`` — the records mirrors reported lost (``{"gaps": [...]}``).
- A query value that is not a time (not an integer in [-2^62, 2^62)) answers 400 with a message.
- Time ranges are bounded (review M7: one request must not reconcile the whole history): without
  ``from`` the completeness API and the topic page's deep link take the day before ``to`` (or now);
  a range longer than 7 days, or ``to`` before ``from``, answers 400 saying so.
- Every store read runs on a worker thread (the callables given to :func:`make_app` are coroutines).
- ``GET /metrics`` (Prometheus), ``GET /healthz``.
- With ``http.auth = basic|bearer`` (http_auth.py) every path but /metrics and /healthz answers 401
  with a ``WWW-Authenticate`` challenge until the request carries the credentials.
"""

from __future__ import annotations

import html
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlencode

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from headwater.audit.http_auth import HttpAuth, auth_middleware
from headwater.audit.overview import SEVERITY
from headwater.audit.reconcile import PRODUCER, Completeness
from headwater.audit.store import UNAUDITED_DC, Gap

MAX_MS = 2**62
DEFAULT_RANGE_MS = 24 * 3_600_000  # no ``from``: the day before ``to`` (or now)
MAX_RANGE_MS = 7 * 24 * 3_600_000  # the overview's longest too (hours <= 168)

_COLORS = {
    "complete": "#2e7d32",
    "loss": "#c62828",
    "duplicates": "#ef8f00",
    "late": "#1565c0",
    "open": "#9e9e9e",
    "unaudited": "#6d4c41",
    "stale": "#757575",
}
_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.3em; } h2 { font-size: 1.1em; margin-top: 1.5em; }
table.grid, table.latency { border-collapse: collapse; font-size: 0.85em; }
.grid th, .grid td, .latency th, .latency td { border: 1px solid #ddd; padding: 3px 6px; text-align: center; white-space: nowrap; }
.grid td.cell a { color: white; text-decoration: none; display: block; }
.legend span { display: inline-block; padding: 2px 8px; margin-right: 4px; color: white; border-radius: 3px; }
nav a { margin-right: 1em; } .muted { color: #777; }
.headline { font-size: 1.4em; padding: 6px 12px; color: white; display: inline-block; border-radius: 4px; }
.headline.ok { background: #2e7d32; } .headline.bad { background: #c62828; } .headline.late { background: #1565c0; }
table.strip { border-collapse: collapse; font-size: 0.85em; }
.strip td, .strip th { border-bottom: 1px solid #ddd; padding: 3px 8px; text-align: left; white-space: nowrap; }
.strip td.num { text-align: right; font-variant-numeric: tabular-nums; }
.strip td.status { color: white; font-weight: bold; }
"""

# "updated Xs ago", ticking; the page reloads itself every 15 s (no external script: the lab is offline).
_TICKER = """<script>
(function () {
  var el = document.getElementById("updated");
  var at = Number(el.dataset.generated);
  function tick() { el.textContent = "updated " + Math.max(0, Math.round((Date.now() - at) / 1000)) + "s ago"; }
  tick(); setInterval(tick, 1000); setTimeout(function () { location.reload(); }, 15000);
})();
</script>"""


def _fmt_time(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms / 1000)) + "Z"


def _page(title: str, body: str, refresh: bool = True) -> web.Response:
    meta = '<meta http-equiv="refresh" content="10">' if refresh else ""
    return _html(title, body, meta)


def _html(title: str, body: str, meta: str = "") -> web.Response:
    return web.Response(
        text=f"<!doctype html><html><head><meta charset='utf-8'>{meta}<title>{html.escape(title)}</title>"
        f"<style>{_STYLE}</style></head><body>{body}</body></html>",
        content_type="text/html",
    )


def _href(path: str, **query: object) -> str:
    """A link with URL-encoded query values, escaped for an HTML attribute."""
    return html.escape(f"{path}?{urlencode({k: str(v) for k, v in query.items()})}")


def _ms(request: web.Request, name: str, required: bool = False) -> int | None:
    raw = request.query.get(name)
    if raw is None:
        if required:
            raise web.HTTPBadRequest(text=f"{name}: required (milliseconds since the epoch)")
        return None
    try:
        value = int(raw)
    except ValueError:
        raise web.HTTPBadRequest(
            text=f"{name}: {raw[:40]!r} is not an integer (milliseconds since the epoch)"
        ) from None
    if not -MAX_MS <= value < MAX_MS:  # negative: records without a timestamp (-1) are counted in window -window.ms
        raise web.HTTPBadRequest(text=f"{name}: {raw[:40]} is out of range (-2^62 to 2^62 ms)")
    return value


def _bounded(since: int | None, until: int | None, now_ms: int | None = None) -> tuple[int, int | None]:
    """``from``/``to`` of a query, bounded: ``from`` defaults to a day before ``to`` (or now); 400
    when ``to`` is before ``from`` or they are more than :data:`MAX_RANGE_MS` apart."""
    end = until if until is not None else int(time.time() * 1000) if now_ms is None else now_ms
    if since is None:
        since = end - DEFAULT_RANGE_MS
    if until is not None and until < since:
        raise web.HTTPBadRequest(text=f"to: before from ({until} < {since})")
    if end - since > MAX_RANGE_MS:
        raise web.HTTPBadRequest(
            text=f"from, to: {(end - since) // 86_400_000} days apart; ask for at most "
            f"{MAX_RANGE_MS // 86_400_000} days ({MAX_RANGE_MS} ms) at a time (without to: up to now)"
        )
    return since, until


def _int(request: web.Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise web.HTTPBadRequest(text=f"{name}: {raw[:40]!r} is not an integer") from None
    if not low <= value <= high:
        raise web.HTTPBadRequest(text=f"{name}: {value} is out of range ({low} to {high})")
    return value


def _overview_args(request: web.Request) -> dict[str, int]:
    return {
        "hours": _int(request, "hours", 6, 1, 24 * 7),  # a week: one reconciliation over every topic
        "limit": _int(request, "limit", 200, 1, 1000),
        "offset": _int(request, "offset", 0, 0, 2**31),
        "gaps_limit": _int(request, "gaps_limit", 50, 1, 1000),
        "gaps_offset": _int(request, "gaps_offset", 0, 0, 2**31),
    }


def _overview_page(data: dict[str, Any]) -> str:
    cls = ("late" if data.get("late") else "ok") if data["healthy"] else "bad"
    rows = []
    for e in data["entries"]:
        first = _fmt_time(e["first_problem_window"]) if e["first_problem_window"] is not None else ""
        status = e["status"]
        behind = "" if e.get("behind_s") is None else f"{e['behind_s']} s"
        title = html.escape(e["stale_reason"] or "")
        link = _href("/topic", topic=e["topic"])
        rows.append(
            f'<tr class="entry {status}"><td class="status" style="background:{_COLORS.get(status, "#999")}" '
            f'title="{title}">{status}</td><td class="topic"><a href="{link}">{html.escape(e["topic"])}</a></td>'
            f'<td class="dc">{html.escape(e["datacenter"])}</td><td class="tier">{html.escape(e["tier"])}</td>'
            f'<td class="num missing">{e["missing"]}</td><td class="num duplicated">{e["duplicated"]}</td>'
            f'<td class="num late">{e["late"]}</td>'
            f'<td class="num behind">{behind}</td>'
            f'<td class="first">{first}</td>'
            f'<td class="hop">{html.escape(e["hop"] or "")}</td><td class="why muted">{title}</td></tr>'
        )
    more = ""
    if data["offset"] + len(data["entries"]) < data["total"]:
        nxt = _href("/", hours=data["hours"], offset=data["offset"] + data["limit"], limit=data["limit"])
        more = f'<p><a href="{nxt}">next {data["limit"]} of {data["total"]}</a></p>'
    gaps = "".join(
        f'<tr><td>{html.escape(g["topic"])}-{g["partition"]}</td><td class="hop">{html.escape(g["hop"])}</td>'
        f'<td class="num">{g["from_offset"]}</td><td class="num">{g["to_offset"] - 1}</td>'
        f'<td class="num">{g["records"]}</td><td>{html.escape(g["reason"])}</td>'
        f"<td>{html.escape(g['tier'])}</td><td>{_fmt_time(g['detected_ms'])}</td></tr>"
        for g in data["gaps"]
    )
    gap_table = (
        f'<h2>Gaps reported by mirrors and the loader ({data["gaps_total"]})</h2><table class="strip" id="gaps">'
        "<tr><th>partition</th><th>hop</th><th>first offset</th><th>last offset</th><th>records</th>"
        f"<th>reason</th><th>tier</th><th>detected</th></tr>{gaps}</table>"
        if data["gaps_total"]
        else ""
    )
    alert_rows = []
    for a in data["alerts"]:
        if not a.get("webhook", True):
            delivery = "logged (no alert.webhook.url)"
        elif a["delivered_ms"] is not None:
            delivery = f"delivered {_fmt_time(a['delivered_ms'])}"
        elif not a["sent"]:
            delivery = "logged only"
        else:
            delivery = f"pending ({a['attempts']} failed attempt(s))" if a["attempts"] else "pending"
        alert_rows.append(
            f'<tr class="alert {a["status"]}"><td class="status" style="background:{_COLORS.get(a["status"], "#2e7d32")}">'
            f"{html.escape(a['status'])}</td><td>{html.escape(a['topic'])}</td><td>{html.escape(a['datacenter'])}</td>"
            f"<td>{html.escape(a['tier'])}</td><td>{_fmt_time(a['window_start'])}</td>"
            f'<td>{_fmt_time(a["alerted_ms"])}</td><td class="delivery">{html.escape(delivery)}</td></tr>'
        )
    alert_table = (
        f'<h2>Alerts ({data["alerts_active"]} active)</h2><table class="strip" id="alerts"><tr><th>alert</th>'
        "<th>topic</th><th>datacenter</th><th>tier</th><th>window</th><th>raised</th><th>webhook</th></tr>"
        f"{''.join(alert_rows)}</table>"
        if alert_rows
        else ""
    )
    legend = "".join(f'<span style="background:{_COLORS[s]}">{s}</span>' for s in SEVERITY if s in _COLORS)
    hours = " ".join(f'<a href="{_href("/", hours=h)}">{h} h</a>' for h in (1, 6, 24, 72))
    return (
        f'<h1>Headwater audit</h1><p><span id="headline" class="headline {cls}">{html.escape(data["headline"])}</span> '
        f'<span id="updated" class="muted" data-generated="{data["generated_ms"]}">updated 0s ago</span></p>'
        f'<nav>last {data["hours"]} h · {hours} · <a href="/api/v1/overview?hours={data["hours"]}">JSON</a></nav>'
        f'<p class="legend">{legend}</p>'
        '<table class="strip" id="overview"><tr><th>status</th><th>topic</th><th>datacenter</th><th>tier</th>'
        "<th>missing</th><th>duplicated</th><th>late</th><th>behind</th><th>problem since (window, UTC)</th><th>hop</th>"
        f"<th></th></tr>{''.join(rows)}</table>{more}{alert_table}{gap_table}"
        '<p class="muted">Absolute record counts over the windows shown; the hop is where the counts first '
        "differ (producer → datacenter → aggregate → warehouse). Stale: the tier's counter is down or behind, "
        "so its windows cannot be judged. Late: records past their window's end + grace still on their way "
        "(the hop lags: a cut link or a stopped mirror; behind = since when), or counted after the window "
        f"closed; not lost.</p>{_TICKER}"
    )


def _ranges(topic: str) -> str:
    """Links to the last 1, 6 and 24 hours of ``topic`` (deep links with ``from``)."""
    now = int(time.time() * 1000)
    links = [f'<a href="{_href("/topic", topic=topic)}">latest 40 windows</a>']
    links += [
        f'<a href="{_href("/topic", topic=topic, **{"from": now - h * 3_600_000})}">{h} h</a>' for h in (1, 6, 24)
    ]
    return " · ".join(links)


def _latency_table(
    windows: list[int],
    completions: dict[tuple[str, int, str, str], int],
    rows: list[Completeness] | None = None,
    now_ms: int | None = None,
) -> str:
    """Per window shown and (datacenter, tier): seconds after the window's end at which the tier
    reached 100 %; for a window still short while its hop lags (late, pending), how long it has been
    waiting so far (``+95.0 s so far``): it grows while a link is cut or a mirror stopped."""
    by: dict[tuple[int, str, str], str] = {(w, dc, t): f"{v / 1000:+.1f} s" for (_, w, dc, t), v in completions.items()}
    now = int(time.time() * 1000) if now_ms is None else now_ms
    waiting = {(r.window_start, r.datacenter, r.tier) for r in rows or [] if r.pending}
    for r in rows or []:
        if r.pending:
            by[(r.window_start, r.datacenter, r.tier)] = f"{(now - r.window_end) / 1000:+.1f} s so far"
    shown = [w for w in windows if any(k[0] == w for k in by)]
    if not shown:
        return ""
    columns = sorted({(dc, t) for (_, dc, t) in by})
    head = "".join(f"<th>{html.escape(dc)}<br>{html.escape(t)}</th>" for dc, t in columns)
    body = []
    for w in shown:
        cells = []
        for dc, t in columns:
            text = by.get((w, dc, t), "")
            cls = ' class="waiting" style="color:#1565c0"' if (w, dc, t) in waiting else ""
            cells.append(f"<td{cls}>{text}</td>")
        body.append(f"<tr><th>{_fmt_time(w)}</th>{''.join(cells)}</tr>")
    return (
        '<h2>Tier completion latency</h2><p class="muted">When each tier reached 100 %, relative to the '
        "window's end (negative: before it ended); in blue, windows whose records are still on their way "
        "(late: the hop lags), and for how long so far.</p>"
        f'<table class="latency" id="latency"><tr><th>window (UTC)</th>{head}</tr>{"".join(body)}</table>'
    )


def _gaps_table(gaps: list[Gap]) -> str:
    if not gaps:
        return ""
    rows = "".join(
        f"<tr><td>{html.escape(g.topic)}-{g.partition}</td><td>{html.escape(g.describe())}</td>"
        f"<td>{html.escape(g.datacenter)}</td><td>{html.escape(g.tier)}</td><td>{_fmt_time(g.detected_ms)}</td></tr>"
        for g in gaps
    )
    return (
        '<h2>Gaps</h2><table class="grid" id="gaps"><tr><th>partition</th><th>what</th><th>datacenter</th>'
        f"<th>tier</th><th>detected</th></tr>{rows}</table>"
    )


def _cell_text(r: Completeness) -> str:
    if r.status == "loss":
        return f"-{r.missing}"
    if r.status == "duplicates":
        return f"+{r.count - (r.expected or 0)}"
    if r.completeness is None:
        return str(r.count)
    return f"{r.completeness * 100:.0f}%"


def _cell_title(r: Completeness) -> str:
    if r.pending:
        return f"late: {r.count} of {r.expected} arrived, {r.missing} still on their way (the hop lags), not lost"
    return f"{r.status}: {r.count} of {r.expected}"


def _nice(top: int) -> int:
    """A round axis maximum at or above ``top`` (1, 2 or 5 times a power of ten)."""
    step = 1
    while True:
        for m in (1, 2, 5):
            if m * step >= top:
                return m * step
        step *= 10


def _chart(rows: list[Completeness]) -> str:
    """Records per window per tier (summed over datacenters) as an inline SVG line chart, drawn on
    the server (no script, no external assets): a labelled time axis (UTC) and count axis; closed
    windows as a solid line; open windows (still being counted) dashed with hollow points, so the
    newest window does not look like a drop; a red point where a tier lost records, amber where it
    holds duplicates, each with a tooltip of the absolute count."""
    series: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    state: dict[tuple[str, int], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for r in rows:
        if r.datacenter == UNAUDITED_DC:
            continue
        series[r.tier][r.window_start] += r.count
        st = state[(r.tier, r.window_start)]
        st["pending" if r.pending else r.status] += 1
        st["waiting"] += r.missing if r.pending else 0
        st["missing"] += r.missing if r.status == "loss" else 0
        st["duplicated"] += r.count - (r.expected or 0) if r.status == "duplicates" else 0
    windows = sorted({w for s in series.values() for w in s})
    if len(windows) < 2:
        return ""
    width, height, left, right, top_pad, bottom = 760, 240, 60, 20, 28, 44
    plot_w, plot_h = width - left - right, height - top_pad - bottom
    top = _nice(max((v for s in series.values() for v in s.values()), default=1) or 1)
    span = windows[-1] - windows[0]

    def x(w: int) -> float:
        return left + (w - windows[0]) * plot_w / span

    def y(v: int) -> float:
        return top_pad + plot_h - v * plot_h / top

    palette = ["#37474f", "#2e7d32", "#1565c0", "#6a1b9a", "#00838f", "#ad1457", "#5d4037"]
    parts = [
        f'<line x1="{left}" y1="{top_pad + plot_h}" x2="{left + plot_w}" y2="{top_pad + plot_h}" stroke="#999"/>',
        f'<line x1="{left}" y1="{top_pad}" x2="{left}" y2="{top_pad + plot_h}" stroke="#999"/>',
    ]
    for v in (0, top // 2, top):  # the count axis
        parts.append(
            f'<text class="ytick" x="{left - 6}" y="{y(v) + 4:.1f}" font-size="11" fill="#666" text-anchor="end">{v}</text>'
            f'<line x1="{left}" y1="{y(v):.1f}" x2="{left + plot_w}" y2="{y(v):.1f}" stroke="#eee"/>'
        )
    ticks = windows[:: max(1, len(windows) // 6)]
    for w in ticks:  # the time axis
        seconds = windows[1] - windows[0] < 60_000  # windows shorter than a minute: label the seconds
        fmt = "%H:%M:%S" if seconds else "%H:%M" if span < 86_400_000 else "%m-%d %H:%M"
        label = time.strftime(fmt, time.gmtime(w / 1000))
        parts.append(
            f'<line x1="{x(w):.1f}" y1="{top_pad + plot_h}" x2="{x(w):.1f}" y2="{top_pad + plot_h + 4}" stroke="#999"/>'
            f'<text class="xtick" x="{x(w):.1f}" y="{top_pad + plot_h + 16}" font-size="11" fill="#666" '
            f'text-anchor="middle">{label}</text>'
        )
    parts.append(
        f'<text class="xlabel" x="{left + plot_w / 2}" y="{height - 6}" font-size="11" fill="#444" '
        'text-anchor="middle">window start (UTC)</text>'
        f'<text class="ylabel" x="12" y="{top_pad + plot_h / 2}" font-size="11" fill="#444" text-anchor="middle" '
        f'transform="rotate(-90 12 {top_pad + plot_h / 2})">records per window</text>'
    )
    for i, (tier, points) in enumerate(sorted(series.items())):
        color = palette[i % len(palette)]
        ws = [w for w in windows if w in points]
        closed = [w for w in ws if not state[(tier, w)].get("open", 0) and not state[(tier, w)].get("pending", 0)]
        opened = [w for w in ws if w not in closed]
        if closed:
            pts = " ".join(f"{x(w):.1f},{y(points[w]):.1f}" for w in closed)
            parts.append(f'<polyline class="closed" fill="none" stroke="{color}" stroke-width="2" points="{pts}"/>')
        if opened:
            first = [closed[-1]] if closed and closed[-1] < opened[0] else []
            pts = " ".join(f"{x(w):.1f},{y(points[w]):.1f}" for w in first + opened)
            parts.append(
                f'<polyline class="open" fill="none" stroke="{color}" stroke-width="1.5" stroke-dasharray="4 3" points="{pts}"/>'
            )
            for w in opened:
                st = state[(tier, w)]
                if st.get("pending"):  # past end + grace, its hop lags: late, still arriving (not a drop)
                    parts.append(
                        f'<circle class="late" cx="{x(w):.1f}" cy="{y(points[w]):.1f}" r="4" fill="white" '
                        f'stroke="{_COLORS["late"]}" stroke-width="2"><title>{html.escape(tier)} {_fmt_time(w)}: late, '
                        f"{st['waiting']} record(s) still on their way, {points[w]} counted so far</title></circle>"
                    )
                    continue
                parts.append(
                    f'<circle class="open" cx="{x(w):.1f}" cy="{y(points[w]):.1f}" r="3" fill="white" stroke="{color}">'
                    f"<title>{html.escape(tier)} {_fmt_time(w)}: open, {points[w]} counted so far</title></circle>"
                )
        for w in closed:
            st = state[(tier, w)]
            for status, n in (("duplicates", st["duplicated"]), ("loss", st["missing"])):  # loss on top
                if st.get(status):
                    what = f"{n} missing" if status == "loss" else f"{n} duplicated"
                    parts.append(
                        f'<circle class="{status}" cx="{x(w):.1f}" cy="{y(points[w]):.1f}" r="5" '
                        f'fill="{_COLORS[status]}"><title>{html.escape(tier)} {_fmt_time(w)}: {what}</title></circle>'
                    )
        parts.append(f'<text x="{left + i * 110}" y="14" fill="{color}" font-size="12">{html.escape(tier)}</text>')
    return (
        f'<svg class="chart" width="{width}" height="{height}" role="img" '
        f'aria-label="records per window and tier">{"".join(parts)}</svg>'
    )


def make_app(
    rows_for: Callable[[str | None, int | None, int | None], Awaitable[list[Completeness]]],
    topics: Callable[[], Awaitable[list[str]]],
    hosts_for: Callable[[str, int, str], Awaitable[list[tuple[str, str, int, int]]]],
    registry: Any,
    health: Callable[[], tuple[bool, str]],
    gaps_for: Callable[[str | None], Awaitable[list[Gap]]] | None = None,
    recent_for: Callable[[str], Awaitable[list[Completeness]]] | None = None,
    *,
    overview_for: Callable[..., Awaitable[dict[str, Any]]] | None = None,
    completions_for: Callable[[str, int, int], Awaitable[dict[tuple[str, int, str, str], int]]] | None = None,
    auth: HttpAuth | None = None,
) -> web.Application:
    """``recent_for(topic)``: the dashboard's rows (its latest windows); default: all of ``rows_for``.
    ``completions_for(topic, from, to)``: the tier completion latencies of those windows (ms);
    ``overview_for(hours, limit, offset, gaps_limit, gaps_offset)``: the overview's data (overview.py);
    without it ``/`` is the first topic's page. ``auth``: ``http.auth`` (http_auth.py); every path but
    /healthz and /metrics then needs its credentials."""
    app = web.Application(middlewares=[auth_middleware(auth)] if auth is not None and auth.enabled else [])

    async def gaps(topic: str | None) -> list[Gap]:
        return await gaps_for(topic) if gaps_for is not None else []

    async def landing(request: web.Request) -> web.Response:
        if request.query.get("topic") or overview_for is None:
            return await dashboard(request)
        data = await overview_for(**_overview_args(request))
        return _html(f"Headwater audit: {data['headline']}", _overview_page(data))

    async def overview_api(request: web.Request) -> web.Response:
        if overview_for is None:
            raise web.HTTPNotFound(text="no overview")
        return web.json_response(await overview_for(**_overview_args(request)))

    async def dashboard(request: web.Request) -> web.Response:
        names = await topics()
        topic = request.query.get("topic") or (names[0] if names else None)
        nav = '<a href="/">overview</a> ' + " ".join(
            f'<a href="{_href("/topic", topic=t)}">{"<b>" if t == topic else ""}{html.escape(t)}{"</b>" if t == topic else ""}</a>'
            for t in names
        )
        legend = "".join(f'<span style="background:{c}">{s}</span>' for s, c in _COLORS.items())
        if topic is None:
            return _page("Headwater audit", "<h1>Headwater audit</h1><p>No audited records counted yet.</p>")
        since, until = _ms(request, "from"), _ms(request, "to")
        if since is not None or until is not None:  # a deep link: ?topic=&from=&to= (ms)
            recent = await rows_for(topic, *_bounded(since, until))
            windows = sorted({r.window_start for r in recent}, reverse=True)[:500]
        else:
            recent = await recent_for(topic) if recent_for is not None else await rows_for(topic, None, None)
            windows = sorted({r.window_start for r in recent}, reverse=True)[:40]
        shown = set(windows)
        rows = [r for r in recent if r.window_start in shown]
        columns = sorted({(r.datacenter, r.tier) for r in rows}, key=lambda c: (c[0], c[1] != PRODUCER, c[1]))
        by = {(r.window_start, r.datacenter, r.tier): r for r in rows}
        head = "".join(f"<th>{html.escape(dc)}<br>{html.escape(t)}</th>" for dc, t in columns)
        body = []
        for w in windows:
            cells = []
            for dc, t in columns:
                r = by.get((w, dc, t))
                if r is None:
                    cells.append("<td></td>")
                    continue
                link = _href("/window", topic=topic, window_start=w, datacenter=dc)
                cells.append(
                    f'<td class="cell {r.status}" style="background:{_COLORS[r.status]}" '
                    f'title="{_cell_title(r)}"><a href="{link}">{_cell_text(r)}</a></td>'
                )
            body.append(f"<tr><th>{_fmt_time(w)}</th>{''.join(cells)}</tr>")
        return _page(
            f"Headwater audit: {topic}",
            f"<h1>Headwater audit — {html.escape(topic)}</h1><nav>{nav}</nav>"
            f'<p class="legend">{legend}</p><p class="range">{_ranges(topic)}</p>{_chart(rows)}'
            f'<table class="grid"><tr><th>window (UTC)</th>{head}</tr>{"".join(body)}</table>'
            "<p class=\"muted\">Counts per window of the records' creation time; expected = the producers' count events.</p>"
            f"{_latency_table(windows, await completions_for(topic, windows[-1], windows[0] + 1) if completions_for is not None and windows else {}, rows)}"
            f"{_gaps_table(await gaps(topic))}",
        )

    async def window(request: web.Request) -> web.Response:
        topic = request.query.get("topic")
        dc = request.query.get("datacenter")
        if not topic or dc is None:
            raise web.HTTPBadRequest(text="topic, window_start (ms) and datacenter are required")
        start = _ms(request, "window_start", required=True)
        assert start is not None
        rows = [r for r in await rows_for(topic, start, start + 1) if r.datacenter == dc]
        tiers = "".join(
            f"<tr><td>{html.escape(r.tier)}</td><td>{r.count}</td><td>{r.expected}</td>"
            f'<td style="background:{_COLORS[r.status]};color:white" class="status">{r.status}</td>'
            f'<td class="missing">{r.missing}</td><td>{r.late}</td></tr>'
            for r in rows
        )
        hosts = "".join(
            f"<tr><td>{html.escape(h)}</td><td>{html.escape(a)}</td><td>{n}</td><td>{e}</td></tr>"
            for h, a, n, e in await hosts_for(topic, start, dc)
        )
        return _page(
            f"{topic} {dc} {_fmt_time(start)}",
            f'<p><a href="{_href("/topic", topic=topic)}">← {html.escape(topic)}</a></p>'
            f"<h1>{html.escape(topic)} · {html.escape(dc)} · window {_fmt_time(start)}</h1>"
            '<table class="grid" id="tiers"><tr><th>tier</th><th>count</th><th>expected</th><th>status</th>'
            f"<th>missing</th><th>late</th></tr>{tiers}</table>"
            '<h2>Producers</h2><table class="grid" id="hosts"><tr><th>host</th><th>application</th><th>records</th>'
            f"<th>count events</th></tr>{hosts}</table>",
            refresh=False,
        )

    async def completeness(request: web.Request) -> web.Response:
        topic = request.query.get("topic")
        since, until = _bounded(_ms(request, "from"), _ms(request, "to"))
        return web.json_response({"rows": [r.as_json() for r in await rows_for(topic, since, until)]})

    async def topics_api(_request: web.Request) -> web.Response:
        return web.json_response({"topics": await topics()})

    async def gaps_api(request: web.Request) -> web.Response:
        out = []
        for g in await gaps(request.query.get("topic")):
            d = dict(g.__dict__)
            d["message"] = g.describe()
            out.append(d)
        return web.json_response({"gaps": out})

    async def metrics(_request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(_request: web.Request) -> web.Response:
        ok, why = health()
        return web.Response(text=why + "\n", status=200 if ok else 503)

    app.add_routes(
        [
            web.get("/", landing),
            web.get("/topic", dashboard),
            web.get("/api/v1/overview", overview_api),
            web.get("/window", window),
            web.get("/api/v1/completeness", completeness),
            web.get("/api/v1/topics", topics_api),
            web.get("/api/v1/gaps", gaps_api),
            web.get("/metrics", metrics),
            web.get("/healthz", healthz),
        ]
    )
    return app
