"""Reconciliation: what each tier counted against what the producers said they sent ("balancing
the books", the paper's section 4). Pure: rows in, statuses out.

Per (topic, window, datacenter, tier): ``expected`` is the producer tier's count (de-duplicated count
events), ``completeness`` = count / expected, and the status:

- ``open``        the window has not closed yet for this tier: its watermark (how far in creation
                  time the tier has been counted on every partition, see counter.py) or the
                  producer tier's has not passed window end + grace. Without watermarks (tests,
                  tools), the clock: now < window end + grace. At an aggregate tier, once the
                  mirror's heartbeats from the datacenter were ever seen there, the tier's
                  watermark for that datacenter is at most its newest heartbeat: a cut link holds
                  the datacenter's windows open there (not ``loss``) until its records arrive
- ``loss``        closed, fewer records than the producers sent (``missing`` says how many)
- ``duplicates``  closed, more records than the producers sent
- ``late``        closed and balanced, but some counts arrived after the tier had closed it (never at the
                  warehouse tier: a nightly load counts windows long closed by design)
- ``complete``    closed and balanced
- ``unaudited``   records without origin headers (datacenter ``-``): nothing to compare with

Which tiers a datacenter's records must reach: the producer tier; the cluster named like the
datacenter (its local tier); every cluster that is not named like a datacenter (an aggregate); and
the warehouse, once the warehouse has counted a later window of the topic. Not the latest window it
counted: a nightly load runs while that window is still being written, so it holds only part of it
until the next load, and calling that a loss would raise a false alarm every night.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from headwater.audit.store import UNAUDITED_DC, CountRow

PRODUCER = "producer"
WAREHOUSE = "warehouse"


@dataclass(frozen=True)
class Completeness:
    topic: str
    window_start: int
    window_end: int
    datacenter: str
    tier: str
    count: int
    expected: int | None
    completeness: float | None
    status: str
    late: int = 0
    updated_ms: int = 0  # the last write to this tier's count (0: none)

    @property
    def missing(self) -> int:
        return max((self.expected or 0) - self.count, 0) if self.expected is not None else 0

    def as_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["missing"] = self.missing
        return d


def tiers_for(
    datacenter: str, clusters: Iterable[str], datacenters: set[str], aggregates: frozenset[str] | None = None
) -> list[str]:
    if aggregates is not None:
        return [c for c in clusters if c == datacenter or c in aggregates]
    return [c for c in clusters if c == datacenter or c not in datacenters]


def reconcile(
    rows: Iterable[CountRow],
    clusters: list[str],
    datacenters: set[str],
    window_ms: int,
    grace_ms: int,
    now_ms: int,
    aggregates: frozenset[str] | None = None,
    *,
    watermark: Callable[[str, str], int | None] | None = None,
    warehouse_reach: Mapping[str, int] | None = None,
    heartbeat: Callable[[str, str], int | None] | None = None,
) -> list[Completeness]:
    """``watermark(tier, topic)``: how far that tier has counted the topic (ms, None: not at all);
    ``warehouse_reach``: per topic, the latest window the warehouse counted (default: from ``rows``,
    which then must hold the later windows); ``heartbeat(tier, datacenter)``: the newest mirror
    heartbeat from that datacenter seen in that cluster tier (ms, None: never), which bounds the
    tier's watermark for the datacenter's windows when the tier is not the datacenter's own."""
    by_window: dict[tuple[str, int, str], dict[str, CountRow]] = defaultdict(dict)
    reach: dict[str, int] = dict(warehouse_reach or {})
    for r in rows:
        by_window[(r.topic, r.window_start, r.datacenter)][r.tier] = r
        if r.tier == WAREHOUSE:
            reach[r.topic] = max(reach.get(r.topic, r.window_start), r.window_start)

    def closed(tier: str, topic: str, dc: str, end: int) -> bool:
        if heartbeat is not None and tier not in (PRODUCER, WAREHOUSE, dc):
            newest = heartbeat(tier, dc)
            if newest is not None and newest < end + grace_ms:
                return False  # the link from dc may be cut: its records may not have arrived yet
        if watermark is None:
            return now_ms >= end + grace_ms
        for t in {PRODUCER, PRODUCER if tier == WAREHOUSE else tier}:
            wm = watermark(t, topic)
            if wm is None or wm < end + grace_ms:
                return False
        return True

    out: list[Completeness] = []
    for (topic, start, dc), tiers in sorted(by_window.items()):
        end = start + window_ms
        if dc == UNAUDITED_DC:
            for tier, r in sorted(tiers.items()):
                out.append(
                    Completeness(topic, start, end, dc, tier, r.count, None, None, "unaudited", r.late, r.updated_ms)
                )
            continue
        producer = tiers.get(PRODUCER)
        expected = producer.count if producer is not None else 0
        names = [PRODUCER, *tiers_for(dc, clusters, datacenters, aggregates)]
        if topic in reach and reach[topic] > start:
            names.append(WAREHOUSE)
        for tier in names:
            row = tiers.get(tier)
            count = row.count if row is not None else 0
            late = row.late if row is not None else 0
            updated = row.updated_ms if row is not None else 0
            if not closed(tier, topic, dc, end):
                status = "open"
            elif count < expected:
                status = "loss"
            elif count > expected:
                status = "duplicates"
            elif late and tier != WAREHOUSE:
                status = "late"
            else:
                status = "complete"
            ratio = count / expected if expected else (1.0 if count == 0 else None)
            out.append(Completeness(topic, start, end, dc, tier, count, expected, ratio, status, late, updated))
    return out
