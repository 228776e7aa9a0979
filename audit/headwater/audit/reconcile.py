"""Reconciliation: what each tier counted against what the producers said they sent ("balancing
the books", the paper's section 4). Pure: rows in, statuses out.

Per (topic, window, datacenter, tier): ``expected`` is the producer tier's count (de-duplicated count
events), ``completeness`` = count / expected, and the status:

- ``open``        the window has not closed yet for this tier: its watermark (how far in creation
                  time the tier has been counted on every partition, see counter.py) or the
                  producer tier's has not passed window end + grace. Without watermarks (tests,
                  tools), the clock: now < window end + grace
- ``late``        either (a) the window is past its end + grace for the tier, but the hop that feeds
                  it lags: at an aggregate tier, once the mirror's heartbeats from the datacenter were
                  ever seen there, the newest one is older than window end + grace (a cut link, a
                  stopped mirror), and fewer records than the producers sent have arrived — they are
                  on their way, not lost (``lagging``; ``missing`` says how many are still to come; no
                  alert); once they arrive the window is ``complete``. Or (b) closed and balanced, but
                  some counts arrived after the tier had closed it (``late`` counts them; never at the
                  warehouse tier: a nightly load counts windows long closed by design)
- ``loss``        closed, fewer records than the producers sent (``missing`` says how many), and
                  the tier it is fed from is settled. A tier can only be lost where its upstream
                  tier is complete: while the datacenter's own cluster is open or late for the
                  window, an aggregate tier short of records is ``late`` (``lagging``), and so is
                  the warehouse while an aggregate tier is
- ``duplicates``  closed, more records than the producers sent
- ``complete``    closed and balanced (also while the hop lags: every record is there)
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
    # past end + grace for the tier, but its hop lags (heartbeats): the missing records are on their way
    lagging: bool = False

    @property
    def pending(self) -> bool:
        """Late and still short: not final (no alert, not in the completeness gauge)."""
        return self.lagging and self.status == "late" and self.missing > 0

    @property
    def missing(self) -> int:
        return max((self.expected or 0) - self.count, 0) if self.expected is not None else 0

    def as_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["missing"] = self.missing
        d["pending"] = self.pending
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

    def judged(tier: str, topic: str, dc: str, end: int) -> str:
        """``open``, ``lagging`` (closed by the tier's own watermark, but the hop from ``dc`` lags by
        its heartbeats: a cut link) or ``closed``."""
        if watermark is None:
            if now_ms < end + grace_ms:
                return "open"
        else:
            for t in {PRODUCER, PRODUCER if tier == WAREHOUSE else tier}:
                wm = watermark(t, topic)
                if wm is None or wm < end + grace_ms:
                    return "open"
        if heartbeat is not None and tier not in (PRODUCER, WAREHOUSE, dc):
            newest = heartbeat(tier, dc)
            if newest is not None and newest < end + grace_ms:
                return "lagging"  # the link from dc may be cut: its records may not have arrived yet
        return "closed"

    def counted(tier: str, topic: str) -> bool:
        """Whether ``tier`` counts ``topic`` at all (a cluster tier without it, or not watched by this
        service, has no say on the tiers below it)."""
        return watermark is None or tier == WAREHOUSE or watermark(tier, topic) is not None

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
        # in the order records flow: producer, the datacenter's own cluster, aggregates, warehouse
        names = [PRODUCER, *sorted(tiers_for(dc, clusters, datacenters, aggregates), key=lambda t: t != dc)]
        if topic in reach and reach[topic] > start:
            names.append(WAREHOUSE)
        judged_here: dict[str, Completeness] = {}
        for tier in names:
            row = tiers.get(tier)
            count = row.count if row is not None else 0
            late = row.late if row is not None else 0
            updated = row.updated_ms if row is not None else 0
            state = judged(tier, topic, dc, end)
            if state == "open":
                status = "open"
            elif count < expected:
                status = "late" if state == "lagging" else "loss"
            elif count > expected:
                status = "duplicates"
            elif late and tier != WAREHOUSE:
                status = "late"
            else:
                status = "complete"
            lagging = state == "lagging"
            if status == "loss" and any(
                not _settled(judged_here.get(u)) and counted(u, topic) for u in _upstream(tier, dc, names)
            ):
                # the tier it is fed from is itself still open or late: what is missing here may be on
                # its way through that tier; a tier can only be lost where its upstream is complete
                status, lagging = "late", True
            ratio = count / expected if expected else (1.0 if count == 0 else None)
            judged_here[tier] = c = Completeness(
                topic, start, end, dc, tier, count, expected, ratio, status, late, updated, lagging
            )
            out.append(c)
    return out


def _upstream(tier: str, dc: str, names: list[str]) -> list[str]:
    """The tiers ``tier`` is fed from, for datacenter ``dc``'s records: an aggregate cluster from the
    datacenter's own cluster (through the mirror), the warehouse from the aggregate clusters (the
    loader reads them; from the datacenter's own cluster when there is no aggregate)."""
    if tier in (PRODUCER, dc):
        return []
    if tier == WAREHOUSE:
        aggregates = [t for t in names if t not in (PRODUCER, WAREHOUSE, dc)]
        return aggregates or [t for t in names if t == dc]
    return [dc] if dc in names else []


def _settled(c: Completeness | None) -> bool:
    """Whether an upstream tier's window is final: not open and not late with records on their way.
    (A loss upstream is settled: the records missing there are missing downstream too.)"""
    return c is not None and c.status != "open" and not c.pending
