"""The overview: every audited topic x datacenter x tier over the last hours, worst first — what an
on-call engineer asks first: is anything wrong anywhere, since when, where in the pipeline and how
many records. Pure: reconciled rows, gaps and stale tiers in; a JSON-able dict out.

Attribution (the hop): records move producer -> the datacenter's local tier -> the aggregate tiers ->
the warehouse. For each window the difference between a tier's count and its upstream tier's count
is what that hop lost (positive) or duplicated (negative); a tier's problem is attributed to the
first hop along its chain where the counts differ. So 24 records dropped between dc1 and agg show
at agg as hop ``dc1->agg``, and the same 24 missing at the warehouse too, still as ``dc1->agg``.

Stale: a tier whose counter is down, waiting for its store or lagging (its watermark far behind the
clock) cannot say a window is complete; its entries are ``stale`` unless they already show a loss or
duplicates. The producer tier's staleness (a cluster's ``__audit`` not read) makes every tier stale:
the expected counts, and the warehouse's counts, come through ``__audit``.

Late: a tier whose windows are past their end + grace while the hop feeding it lags (the mirror's
heartbeats from the datacenter are older: a cut link, a stopped mirror) shows ``late`` with the records
still on their way in ``late`` (plus those that arrived after the tier had closed a window) and
``behind_s``, how long ago the oldest such window ended: it grows while the link is down. Late is not
a problem (nothing is lost yet): while records are on their way the headline says "no loss, N late"
instead of "all healthy" (windows whose records all arrived, some after the window closed, do not).
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from headwater.audit.reconcile import PRODUCER, WAREHOUSE, Completeness
from headwater.audit.store import UNAUDITED_DC, Gap

# Worst first.
SEVERITY = ("loss", "duplicates", "stale", "late", "open", "complete", "unaudited")
PROBLEMS = ("loss", "duplicates", "stale")


@dataclass
class Entry:
    topic: str
    datacenter: str
    tier: str
    status: str = "complete"
    windows: int = 0
    missing: int = 0
    duplicated: int = 0
    late: int = 0
    first_problem_window: int | None = None
    hop: str | None = None
    stale_reason: str | None = None
    behind_s: int | None = None  # now - the end of the oldest window whose records are still on their way
    _statuses: set[str] = field(default_factory=set)

    def as_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "datacenter": self.datacenter,
            "tier": self.tier,
            "status": self.status,
            "windows": self.windows,
            "missing": self.missing,
            "duplicated": self.duplicated,
            "late": self.late,
            "first_problem_window": self.first_problem_window,
            "hop": self.hop,
            "stale_reason": self.stale_reason,
            "behind_s": self.behind_s,
        }


def _chains(rows: list[Completeness]) -> dict[tuple[str, int, str], list[Completeness]]:
    """Per (topic, window, datacenter): its tiers in pipeline order."""
    by: dict[tuple[str, int, str], list[Completeness]] = defaultdict(list)
    for r in rows:
        by[(r.topic, r.window_start, r.datacenter)].append(r)

    def order(r: Completeness) -> tuple[int, str]:
        if r.tier == PRODUCER:
            return (0, "")
        if r.tier == r.datacenter:
            return (1, "")
        if r.tier == WAREHOUSE:
            return (3, "")
        return (2, r.tier)

    return {k: sorted(v, key=order) for k, v in by.items()}


def _first_hop(chain: list[Completeness], upto: Completeness) -> str | None:
    """The first hop on the way to the tier ``upto`` where the count changes (``chain`` in pipeline
    order: producer, local tier, aggregates, warehouse)."""
    by = {r.tier: r for r in chain}
    producer = by.get(PRODUCER)
    if producer is None:
        return None
    local = by.get(upto.datacenter)
    aggregates = [r for r in chain if r.tier not in (PRODUCER, WAREHOUSE, upto.datacenter)]
    path = [producer]
    if local is not None:
        path.append(local)
    if upto.tier == WAREHOUSE:
        path += aggregates[-1:]
    elif upto is not local:
        path.append(upto)
    if upto.tier == WAREHOUSE:
        path.append(upto)
    for up, down in itertools.pairwise(path):
        if up.count != down.count:
            return f"{up.tier}->{down.tier}"
    return None


def build(
    rows: Iterable[Completeness],
    gaps: list[Gap],
    stale: Mapping[str, str],
    *,
    now_ms: int,
    hours: int,
    limit: int = 200,
    offset: int = 0,
    gaps_limit: int = 50,
    gaps_offset: int = 0,
    alerts: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """``stale``: tier -> why its data is stale (the producer tier stands for every ``__audit``)."""
    rows = [r for r in rows if r.datacenter != UNAUDITED_DC]
    chains = _chains(rows)
    entries: dict[tuple[str, str, str], Entry] = {}
    for (_topic, window, _dc), chain in sorted(chains.items()):
        for r in chain:
            if r.tier == PRODUCER:
                continue
            e = entries.setdefault((r.topic, r.datacenter, r.tier), Entry(r.topic, r.datacenter, r.tier))
            e.windows += 1
            e._statuses.add(r.status)
            e.late += r.late
            if r.pending:  # past its end + grace, the hop lags: the records still to come are late, not lost
                e.late += r.missing
                behind = max(now_ms - r.window_end, 0) // 1000
                e.behind_s = max(e.behind_s or 0, behind)
            if r.status == "loss":
                e.missing += r.missing
            elif r.status == "duplicates":
                e.duplicated += r.count - (r.expected or 0)
            if r.status in ("loss", "duplicates") and e.first_problem_window is None:
                e.first_problem_window = window
                e.hop = _first_hop(chain, r)
    for e in entries.values():
        e.status = min(e._statuses, key=SEVERITY.index) if e._statuses else "complete"
        why = stale.get(e.tier) or stale.get(PRODUCER)  # the warehouse's counts come through __audit too
        if why is not None:
            e.stale_reason = why
            if e.status not in ("loss", "duplicates"):
                e.status = "stale"
    ordered = sorted(
        entries.values(),
        key=lambda e: (SEVERITY.index(e.status), -(e.missing + e.duplicated), e.topic, e.datacenter, e.tier),
    )
    problems = [e for e in ordered if e.status in PROBLEMS]
    # late now: records still on their way (a cut link, a stopped mirror); records that merely arrived
    # after their window closed (and are all there) do not change the headline
    late = [e for e in ordered if e.status == "late" and e.behind_s is not None]
    since = now_ms - hours * 3_600_000
    recent_gaps = [g for g in gaps if g.detected_ms >= since]
    n = len(problems) + len(recent_gaps)
    if n:
        headline = f"{n} problem{'s' if n != 1 else ''}"
    elif late:
        headline = f"no loss, {len(late)} late"
    else:
        headline = "all healthy"
    return {
        "generated_ms": now_ms,
        "hours": hours,
        "healthy": not problems and not recent_gaps,
        "problems": n,
        "late": len(late),
        "headline": headline,
        "stale": dict(stale),
        "total": len(ordered),
        "offset": offset,
        "limit": limit,
        "entries": [e.as_json() for e in ordered[offset : offset + limit]],
        "gaps_total": len(recent_gaps),
        "gaps": [_gap_json(g) for g in recent_gaps[gaps_offset : gaps_offset + gaps_limit]],
        # the window alerts of those hours, newest first: active = loss/duplicates not since resolved
        "alerts": alerts or [],
        "alerts_active": sum(1 for a in alerts or [] if a["status"] in ("loss", "duplicates")),
    }


def _gap_json(g: Gap) -> dict[str, Any]:
    d = dict(g.__dict__)
    d["message"] = g.describe()
    return d
