"""Results of a run and their two renderings: a markdown table and JSON.

A :class:`Row` is one line of the table: a scenario, a case, the load generator that produced the
figure, the figure itself (median [min-max] over the runs), its ratio to a baseline measured in
the same run, the published figures beside it, and the issue's goal with met / missed.
A row without figures carries the reason (``not available: ...``).
"""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from headwater.bench.stats import Figure, ratio

SCENARIOS = {
    "1": "Produce throughput",
    "2": "Consume throughput (warm log)",
    "3": "End-to-end latency (produce → consume)",
    "4": "Throughput with data already stored",
    "5": "Broker memory and CPU during scenario 1",
    "6": "Large records (10 KB, ~1 MB per request)",
    "7": "Mirror throughput (one source broker -> mirror -> one destination broker)",
    "8": "Spark loader (warm aggregate topic -> headwater load, local[*] -> Parquet)",
    "9": "Mirror across a WAN link (0, 20, 40, 80 ms one way; headwater lab link)",
    "10": "Audit counting (records/s counted by one audit process, per-batch path)",
    "11": "Security: TLS and SASL vs PLAINTEXT (throughput, connection set-up)",
    "12": "Client quotas on vs off (broker CPU per request)",
    "scale": "Scale: 1,000 / 5,000 / 10,000 partitions on 3 brokers, RF 3 (failover, restart, idle cost, metadata)",
    "zk-outage": "ZooKeeper outage (7 min) under 3 brokers, a ZooKeeper consumer group and the mirror: time to heal",
    "preauth": "Clients that never log in: idle and 100 MiB-announcing connections vs a SCRAM client",
    "txn": "Transactions: transactional produce (100 records per transaction) vs idempotent",
}


@dataclass
class Goal:
    """The issue's goal for a row, as written there (``text``) and as a test.

    ``kind``: "at least" / "at most" ``target``, or "within" (|value - 1| <= target, for ratios
    that should stay flat). ``on``: the row's headline figure ("primary") or its ratio ("ratio").
    """

    text: str
    target: float
    kind: str = "at least"
    on: str = "primary"

    def met(self, value: float) -> bool:
        if self.kind == "at least":
            return value >= self.target
        if self.kind == "at most":
            return value <= self.target
        return abs(value - 1.0) <= self.target

    def gap(self, value: float) -> str:
        if self.kind == "within":
            return f"{value - 1:+.0%}"
        if self.on == "ratio":
            return f"{value:.0%} vs {self.target:.0%}"
        if self.kind == "at least":
            return f"{value / self.target:.1%} of the goal"
        return f"{value / self.target:.1f}x the limit"


@dataclass
class Row:
    scenario: str
    case: str
    generator: str
    primary: str  # key of the headline figure in ``figures``
    figures: dict[str, Figure] = field(default_factory=dict)
    baseline: str = ""  # what the ratio compares with, e.g. "W @ 1.0 MB requests"
    baseline_mib_s: float = math.nan
    ratio_of: str = "MiB/s"  # which figure is divided by the baseline
    ratio_override: float | None = None  # a ratio computed elsewhere (e.g. vs another row)
    ratio_style: str = "percent"  # or "times" (for costs, where more than 2x is common)
    reference: str = ""
    goal: Goal | None = None
    note: str = ""
    unavailable: str = ""  # why there are no figures
    extra: dict[str, Any] = field(default_factory=dict)
    smoke: bool = False  # a --quick run: its counts are too small to judge a goal (issue 40)

    def figure(self, key: str, unit: str | None = None) -> Figure:
        """The figure named ``key`` (created empty, in ``unit``, default: the key itself)."""
        if key not in self.figures:
            self.figures[key] = Figure(unit or key)
        return self.figures[key]

    def per_request(self) -> Figure | None:
        """Broker CPU per request (us), for the rows that measured it (produce rows)."""
        samples = self.extra.get("broker_cpu_us_per_request", {}).get("samples")
        if not samples:
            return None
        f = Figure("us")
        for s in samples:
            f.add(s)
        return f

    @property
    def value(self) -> float:
        f = self.figures.get(self.primary)
        return f.median if f else math.nan

    @property
    def ratio(self) -> float:
        if self.ratio_override is not None:
            return self.ratio_override
        f = self.figures.get(self.ratio_of)
        return ratio(f.median, self.baseline_mib_s) if f else math.nan

    def goal_status(self) -> str:
        if self.goal is None:
            return ""
        if self.unavailable:
            return f"{self.goal.text}: not measured"
        if self.smoke:
            return f"{self.goal.text}: not judged (smoke run)"
        value = self.ratio if self.goal.on == "ratio" else self.value
        if not math.isfinite(value):
            return f"{self.goal.text}: not measured"
        if self.goal.met(value):
            return f"{self.goal.text}: **met**"
        return f"{self.goal.text}: **missed** ({self.goal.gap(value)})"

    def to_json(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "case": self.case,
            "generator": self.generator,
            "primary": self.primary,
            "figures": {k: f.to_json() for k, f in self.figures.items()},
            "baseline": self.baseline,
            "baseline_mib_s": _finite(self.baseline_mib_s),
            "ratio": _finite(self.ratio),
            "reference": self.reference,
            "goal": self.goal.text if self.goal else None,
            "goal_status": self.goal_status() or None,
            "note": self.note,
            "unavailable": self.unavailable or None,
            "extra": self.extra,
        }


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _loads(values: object) -> str:
    return " / ".join(f"{v:.1f}" for v in values) if isinstance(values, list) else "?"


def fmt(x: float, unit: str = "") -> str:
    if not math.isfinite(x):
        return "-"
    if abs(x) >= 1000:
        s = f"{x:,.0f}"
    elif abs(x) >= 100:
        s = f"{x:.0f}"
    elif abs(x) >= 10:
        s = f"{x:.1f}"
    elif abs(x) >= 1:
        s = f"{x:.2f}"
    else:
        s = f"{x:.3g}"
    return f"{s} {unit}".strip()


def fmt_figure(f: Figure | None) -> str:
    if not f:
        return "-"
    if len(f.samples) == 1:
        return fmt(f.median, f.unit)
    return f"{fmt(f.median, f.unit)} [{fmt(f.min)}-{fmt(f.max)}]"


def fmt_bytes(n: float) -> str:
    if not math.isfinite(n):
        return "?"
    for unit, size in (("MB", 1e6), ("KB", 1e3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} B"


# -- the whole report ---------------------------------------------------------------------------


def confluent_version() -> str:
    import confluent_kafka

    v = confluent_kafka.version()  # documented as (str, int); some builds return the str alone
    return str(v[0] if isinstance(v, tuple) else v)


def machine() -> dict[str, Any]:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = 0
    try:
        mem = int(Path("/proc/meminfo").read_text().split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    os_name = ""
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                os_name = line.split("=", 1)[1].strip('"')
    except OSError:
        pass
    versions: dict[str, str] = {"python": platform.python_version()}
    try:
        import confluent_kafka

        versions["confluent-kafka"] = f"{confluent_version()} (librdkafka {confluent_kafka.libversion()[0]})"
    except ImportError:
        pass
    try:
        versions["java (ZooKeeper)"] = subprocess.run(
            ["java", "-version"], capture_output=True, text=True, timeout=30
        ).stderr.splitlines()[0]
    except (OSError, IndexError, subprocess.SubprocessError):
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(mem / 2**30, 1),
        "os": os_name,
        "kernel": platform.release(),
        "versions": versions,
        "load_average_start": [round(x, 2) for x in os.getloadavg()],
    }


@dataclass
class Report:
    mode: str
    command: str
    started: str
    rows: list[Row] = field(default_factory=list)
    baselines: list[dict[str, Any]] = field(default_factory=list)
    machine: dict[str, Any] = field(default_factory=dict)
    generators: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    hotspots: list[dict[str, Any]] = field(default_factory=list)
    elapsed_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "command": self.command,
            "started": self.started,
            "elapsed_s": round(self.elapsed_s, 1),
            "machine": self.machine,
            "generators": self.generators,
            "baselines": self.baselines,
            "rows": [r.to_json() for r in self.rows],
            "notes": self.notes,
            "hotspots": self.hotspots,
        }

    def markdown(self) -> str:
        m = self.machine
        out = [
            f"# Headwater benchmark ({self.mode}), {self.started}",
            "",
            f"Machine: {m.get('cpu', '?')}, {m.get('cores', '?')} cores, {m.get('memory_gib', '?')} GiB, "
            f"{m.get('os', '?')}, Linux {m.get('kernel', '?')}; "
            + ", ".join(f"{k} {v}" for k, v in m.get("versions", {}).items())
            + ".",
            f"Command: `{self.command}` ({self.elapsed_s / 60:.1f} min). Load average (1, 5, 15 min) at the start "
            f"{_loads(m.get('load_average_start'))}, at the end {_loads(m.get('load_average_end'))}: other work on "
            "the machine competes for the same cores.",
            "",
            *(
                ["**A smoke run** (`--quick`): its counts are too small to judge any goal, and it judges none.", ""]
                if self.mode == "quick"
                else []
            ),
            "Figures are medians over the runs, [min-max]; MiB/s counts record values (as Kreps did).",
            "Ratios compare MiB/s with a baseline measured in the same run: W = loopback TCP appended to a",
            "file with one write per request of the same size, R = `sendfile` of a warm file to a loopback",
            "socket in chunks of the fetch size.",
            "",
            "## Generators",
            "",
        ]
        out += [f"- **{k}**: {v}" for k, v in self.generators.items()]
        out += ["", "## Baselines", "", "| baseline | size | MiB/s | extra |", "|---|---|---|---|"]
        for b in self.baselines:
            out.append(f"| {b['name']} | {fmt_bytes(b['size'])} | {fmt_figure(b['figure'])} | {b.get('extra', '')} |")
        out += ["", "## Results", ""]
        out += [
            "| # | case | generator | result | MiB/s | broker us/request | baseline | ratio | paper / Kreps | goal |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in self.rows:
            if r.unavailable:
                result, mib, base, rat = r.unavailable, "", r.baseline, ""
            else:
                result = fmt_figure(r.figures.get(r.primary))
                if r.primary in r.figures and r.primary != r.figures[r.primary].unit:
                    result = f"{r.primary} {result}"
                others = [
                    fmt_figure(f) if k == f.unit else f"{k} {fmt_figure(f)}"
                    for k, f in r.figures.items()
                    if k not in (r.primary, "MiB/s")
                ]
                if others:
                    result += "<br>" + "<br>".join(others)
                mib = fmt_figure(r.figures.get("MiB/s")) if "MiB/s" in r.figures and r.primary != "MiB/s" else ""
                base = r.baseline
                if r.ratio_override is None and math.isfinite(r.baseline_mib_s):
                    base += f" = {fmt(r.baseline_mib_s)} MiB/s"
                rat = ""
                if math.isfinite(r.ratio):
                    rat = f"{r.ratio:.1f}x" if r.ratio_style == "times" else f"{r.ratio:.0%}"
            note = f"<br>_{r.note}_" if r.note else ""
            per_request = "" if r.unavailable else fmt_figure(r.per_request())
            out.append(
                f"| {r.scenario} | {r.case}{note} | {r.generator} | {result} | {mib} | {per_request} | {base} | {rat} | "
                f"{r.reference} | {r.goal_status()} |"
            )
        if self.hotspots:
            out += ["", "## Broker hot spots (py-spy, --profile)", ""]
            for h in self.hotspots:
                out += [f"### {h['during']}", "", "| self % | function |", "|---|---|"]
                out += [f"| {s['percent']:.1f} | `{s['frame']}` |" for s in h["self"]]
                out += ["", "| total % | function (headwater code, inclusive) |", "|---|---|"]
                out += [f"| {s['percent']:.1f} | `{s['frame']}` |" for s in h["inclusive"]]
                out.append("")
        if self.notes:
            out += ["", "## Notes", ""]
            out += [f"- {n}" for n in self.notes]
        return "\n".join(out) + "\n"

    def write(self, directory: Path) -> tuple[Path, Path]:
        directory.mkdir(parents=True, exist_ok=True)
        md = directory / "results.md"
        js = directory / "results.json"
        md.write_text(self.markdown())
        js.write_text(json.dumps(self.to_json(), indent=2, default=_json_default) + "\n")
        return md, js


def _json_default(o: object) -> Any:
    if isinstance(o, Figure):
        return o.to_json()
    if isinstance(o, float) and not math.isfinite(o):
        return None
    raise TypeError(f"cannot serialise {type(o).__name__}")
