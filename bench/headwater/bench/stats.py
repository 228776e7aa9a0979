"""Small statistics: a figure is the median of several runs, kept with its min, max and samples."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass
class Figure:
    """One measured quantity over several runs (``samples``, one per run)."""

    unit: str
    samples: list[float] = field(default_factory=list)

    def add(self, value: float) -> None:
        self.samples.append(float(value))

    @property
    def median(self) -> float:
        return statistics.median(self.samples) if self.samples else math.nan

    @property
    def min(self) -> float:
        return min(self.samples) if self.samples else math.nan

    @property
    def max(self) -> float:
        return max(self.samples) if self.samples else math.nan

    def __bool__(self) -> bool:
        return bool(self.samples)

    def to_json(self) -> dict[str, object]:
        return {
            "unit": self.unit,
            "median": _finite(self.median),
            "min": _finite(self.min),
            "max": _finite(self.max),
            "samples": [_finite(s) for s in self.samples],
        }


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of already sorted values, nearest rank (as latency tools report)."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(q * len(sorted_values)))
    return float(sorted_values[min(rank, len(sorted_values)) - 1])


def ratio(value: float, baseline: float) -> float:
    if not baseline or not math.isfinite(baseline) or not math.isfinite(value):
        return math.nan
    return value / baseline
