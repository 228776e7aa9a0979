"""Reading the audit's count events back from ``__audit`` (Headwater's client), for the tests of
the tiers that publish them."""

from __future__ import annotations

import json
from typing import Any

from headwater.client.sync import SyncConsumer


def audit_events(bootstrap: str) -> list[dict[str, Any]]:
    """Every event in ``__audit``, partition by partition, each in offset order."""
    events = []
    with SyncConsumer(bootstrap) as c:
        for p in c.partitions_for("__audit"):
            offset = 0
            while records := c.fetch("__audit", p, offset, max_wait_ms=100).records:
                events.extend(json.loads(r.value or b"{}") for r in records)
                offset = records[-1].offset + 1
    return events


def counts_by_window(events: list[dict[str, Any]]) -> dict[tuple[str, int, str], int]:
    """The events' counts summed per (topic, window start, origin datacenter)."""
    counted: dict[tuple[str, int, str], int] = {}
    for e in events:
        k = (e["topic"], e["window_start"], e["datacenter"])
        counted[k] = counted.get(k, 0) + e["count"]
    return counted
