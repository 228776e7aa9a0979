"""What every scenario uses: the plan (quick or full), the clusters, the generators, the baselines.

Load generators run as their own processes (our C producer, kcat, ``python -m
headwater.bench.loadgen ...``) and are bounded by a record count and a time limit; the broker is a
separate process too (:mod:`headwater.testing.cluster`), watched by :class:`ProcessMonitor`.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import os
import resource
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from headwater.bench import baselines
from headwater.bench.loadgen import BENCH_GROUP
from headwater.bench.native import Native
from headwater.bench.procmon import ProcessMonitor
from headwater.bench.report import Report, Row
from headwater.bench.stats import Figure

MIB = 1 << 20


class GeneratorError(RuntimeError):
    """A load generator failed or produced no numbers; the message says why."""


@dataclass(frozen=True)
class Plan:
    """How big each scenario is. ``scale`` multiplies every record count of the full plan."""

    quick: bool
    runs: int
    scale: float
    max_seconds: float  # per generator run
    partitions: tuple[int, ...]
    stored_bytes: int
    latency_seconds: float
    latency_rate: int
    probe_seconds: float
    baseline_bytes: int
    baseline_seconds: float
    #: the ``scale`` scenario's cluster sizes when given (``--scale-partitions``), else its own
    scale_partitions: tuple[int, ...] = ()

    @staticmethod
    def make(
        quick: bool,
        runs: int | None = None,
        stored_gib: float | None = None,
        scale_partitions: tuple[int, ...] = (),
    ) -> Plan:
        if quick:
            return Plan(
                quick=True,
                runs=runs or 1,
                scale=0.1,
                max_seconds=6.0,
                partitions=(1,),
                stored_bytes=int((stored_gib if stored_gib is not None else 0.25) * 2**30),
                latency_seconds=2.0,
                latency_rate=10_000,
                probe_seconds=3.0,
                baseline_bytes=64 * MIB,
                baseline_seconds=0.5,
                scale_partitions=scale_partitions,
            )
        return Plan(
            quick=False,
            runs=runs or 3,
            scale=1.0,
            max_seconds=10.0,
            partitions=(1, 6),
            stored_bytes=int((stored_gib if stored_gib is not None else 2.0) * 2**30),
            latency_seconds=5.0,
            latency_rate=10_000,
            probe_seconds=10.0,
            baseline_bytes=256 * MIB,
            baseline_seconds=1.0,
            scale_partitions=scale_partitions,
        )

    def count(self, full: int, minimum: int = 100) -> int:
        return max(minimum, int(full * self.scale))


@dataclass
class Target:
    """A cluster the clients write to, with the acks they use there."""

    name: str  # "acks=1 RF=1"
    bootstrap: str
    pids: list[int]
    replication_factor: int
    acks: str
    unavailable: str = ""
    #: the brokers' Prometheus endpoints (prometheus.port), to count the requests they answered
    metrics_urls: list[str] = field(default_factory=list)

    def produce_requests(self) -> int | None:
        """Produce requests the brokers have answered so far (None when a scrape fails)."""
        total = 0.0
        for url in self.metrics_urls:
            text = _scrape(url)
            if text is None:
                return None
            for line in text.splitlines():
                if line.startswith("kafka_network_requestmetrics_requests_total{") and 'request="Produce"' in line:
                    total += float(line.rsplit(" ", 1)[1])
        return int(total) if self.metrics_urls else None


@dataclass
class Usage:
    """CPU of the brokers and of the generator process(es) over a generator's whole life
    (start-up included), and the brokers' peak RSS."""

    wall: float = 0.0
    broker_cpu: float = 0.0
    client_cpu: float = 0.0  # the generator process, start-up included
    broker_peak_rss: int = 0
    #: the generator's measured interval and its own CPU over it (when it reports that)
    measured: float = 0.0
    client_cpu_measured: float | None = None

    @property
    def broker_busy(self) -> float:
        """Broker CPU as a share of one core over the measured interval (the broker idles
        outside it)."""
        interval = self.measured or self.wall
        return self.broker_cpu / interval if interval > 0 else math.nan

    @property
    def client_busy(self) -> float:
        """The generator's CPU over the measured interval as a share of one core (its whole
        life for generators that do not report it: kcat, whose start-up is short)."""
        if self.client_cpu_measured is not None and self.measured > 0:
            return self.client_cpu_measured / self.measured
        return self.client_cpu / self.wall if self.wall > 0 else math.nan


def busy_note(usages: Sequence[Usage], brokers: int = 1) -> str:
    """'busy: broker 97 %, client 45 % of a core' (medians over the runs)."""
    if not usages:
        return ""
    broker = statistics.median(u.broker_busy for u in usages)
    client = statistics.median(u.client_busy for u in usages)
    who = "broker" if brokers == 1 else f"{brokers} brokers"
    return f"busy: {who} {broker:.0%}, client {client:.0%} of a core"


def _scrape(url: str, attempts: int = 3) -> str | None:
    """A Prometheus endpoint's text, or None when it does not answer (a busy machine: retried)."""
    for attempt in range(attempts):
        try:
            with urllib.request.urlopen(url, timeout=15) as r:
                return str(r.read().decode())
        except OSError:
            if attempt + 1 < attempts:
                time.sleep(0.5)
    return None


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


@dataclass
class ProduceRun:
    records: int
    payload_bytes: int
    seconds: float
    request_size: float  # average bytes per Produce request (NaN when unknown)
    request_size_known: bool
    requests: int  # Produce requests sent (-1: unknown)
    usage: Usage
    errors: int
    first_error: str

    @property
    def broker_cpu(self) -> float:
        return self.usage.broker_cpu

    @property
    def broker_peak_rss(self) -> int:
        return self.usage.broker_peak_rss

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else math.nan

    @property
    def mib_per_s(self) -> float:
        return self.payload_bytes / MIB / self.seconds if self.seconds > 0 else math.nan


@dataclass
class ConsumeRun:
    records: int
    payload_bytes: int
    seconds: float
    usage: Usage

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else math.nan

    @property
    def mib_per_s(self) -> float:
        return self.payload_bytes / MIB / self.seconds if self.seconds > 0 else math.nan


@dataclass
class Bench:
    plan: Plan
    workdir: Path
    native: Native
    report: Report
    main: Target | None = None
    zk_connect: str = ""
    rf3: Target | None = None
    verbose: bool = True
    _names: Iterator[int] = field(default_factory=itertools.count)
    _w_cache: dict[int, tuple[Figure, Figure]] = field(default_factory=dict)
    _r_cache: dict[int, Figure] = field(default_factory=dict)
    _read_file: Path | None = None
    peak_rss: int = 0

    # -- logging and names ------------------------------------------------------------------

    def log(self, message: str) -> None:
        if self.verbose:
            print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)

    def topic(self, prefix: str) -> str:
        return f"bench-{prefix}-{next(self._names)}"

    # -- topics (confluent-kafka's AdminClient: the stock tool, independent of our client) -----

    def warm_group_coordinator(self, target: Target) -> None:
        """Create ``__consumer_offsets`` before anything is measured: the confluent consumers' group.id
        makes librdkafka look up a group coordinator, and the topic's creation (its replicas, their
        leader elections) would otherwise fall inside a measurement."""
        from headwater.client.groups import GroupAdmin

        async def find() -> None:
            async with GroupAdmin(target.bootstrap, timeout_s=60) as admin:
                await admin.coordinator(BENCH_GROUP)

        asyncio.run(find())

    def create_topic(self, target: Target, name: str, partitions: int, configs: dict[str, str] | None = None) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

        admin = AdminClient({"bootstrap.servers": target.bootstrap})
        new = NewTopic(
            name, num_partitions=partitions, replication_factor=target.replication_factor, config=configs or {}
        )
        admin.create_topics([new], operation_timeout=30)[name].result(60)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            md = admin.list_topics(name, timeout=10).topics.get(name)
            if md is not None and md.error is None and len(md.partitions) == partitions:  # noqa: SIM102
                if all(p.leader >= 0 for p in md.partitions.values()):
                    return
            time.sleep(0.1)
        raise GeneratorError(f"topic {name} has no leaders after 30 s")

    def isr(self, target: Target, name: str) -> list[list[int]]:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": target.bootstrap})
        md = admin.list_topics(name, timeout=10).topics[name]
        return [sorted(md.partitions[p].isrs) for p in sorted(md.partitions)]

    # -- running generators -----------------------------------------------------------------

    def run_json(self, cmd: Sequence[str], timeout: float) -> dict[str, Any]:
        """Run a generator to completion; its last stdout line is JSON."""
        try:
            proc = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise GeneratorError(f"{Path(cmd[0]).name} did not finish in {timeout:g} s") from None
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        if proc.returncode != 0 or not lines:
            why = (proc.stderr.strip().splitlines() or proc.stdout.strip().splitlines() or ["no output"])[-1]
            raise GeneratorError(f"{' '.join(cmd[:3])} exited {proc.returncode}: {why}")
        return dict(json.loads(lines[-1]))

    @staticmethod
    def loadgen(command: str, *args: str) -> list[str]:
        return [sys.executable, "-m", "headwater.bench.loadgen", command, *args]

    def fresh_disk(self) -> None:
        """Write dirty pages back before a measured run, so earlier runs' writeback does not land in it."""
        os.sync()

    @contextmanager
    def watch(self, target: Target) -> Iterator[Usage]:
        """Measure a generator run: the brokers' CPU and RSS, the generator's CPU (it must be a
        child process that is waited for inside the block)."""
        self.fresh_disk()
        usage = Usage()
        monitors = [ProcessMonitor(pid) for pid in target.pids]
        for m in monitors:
            m.__enter__()
        client0, wall0 = _children_cpu(), time.perf_counter()
        try:
            yield usage
        finally:
            for m in monitors:
                m.__exit__(None, None, None)
            usage.wall = time.perf_counter() - wall0
            usage.client_cpu = _children_cpu() - client0
            usage.broker_cpu = sum(m.cpu for m in monitors)
            usage.broker_peak_rss = max((m.peak_rss for m in monitors), default=0)

    def produce(self, target: Target, cmd: Sequence[str], size: int, estimate: float) -> ProduceRun:
        """Run one produce generator against ``target`` with the brokers watched."""
        before = target.produce_requests()
        with self.watch(target) as usage:
            got = self.run_json(cmd, self.plan.max_seconds * 2 + 120)
        after = target.produce_requests()
        acked = int(got["acked"])
        if acked <= 0:
            raise GeneratorError(f"nothing was acknowledged: {got.get('first_error') or 'no error reported'}")
        known = int(got.get("tx_requests", -1)) > 0 and int(got.get("tx_bytes", -1)) > 0
        request_size = got["tx_bytes"] / got["tx_requests"] if known else estimate
        # The brokers' own count (any client; covers the generator's metadata-free start-up too,
        # which sends no Produce requests); the client's count when the brokers' is unknown.
        answered = after - before if before is not None and after is not None else -1
        self.peak_rss = max(self.peak_rss, usage.broker_peak_rss)
        usage.measured = float(got["seconds"])
        usage.client_cpu_measured = float(got["cpu"]) if "cpu" in got else None
        return ProduceRun(
            records=acked,
            payload_bytes=acked * size,
            seconds=float(got["seconds"]),
            request_size=request_size,
            request_size_known=known,
            requests=answered if answered > 0 else int(got["tx_requests"]) if known else -1,
            usage=usage,
            errors=int(got.get("errors", 0)),
            first_error=str(got.get("first_error", "")),
        )

    def consume_python(self, target: Target, cmd: Sequence[str]) -> ConsumeRun:
        with self.watch(target) as usage:
            got = self.run_json(cmd, self.plan.max_seconds + 120)
        if int(got["records"]) <= 0 or float(got["seconds"]) <= 0:
            raise GeneratorError("the consumer received no records")
        usage.measured = float(got["seconds"])
        usage.client_cpu_measured = float(got["cpu"]) if "cpu" in got else None
        return ConsumeRun(int(got["records"]), int(got["bytes"]), float(got["seconds"]), usage)

    def consume_kcat(
        self,
        target: Target,
        topic: str,
        count: int,
        size: int,
        fetch_bytes: int,
        offset: str = "beginning",
    ) -> ConsumeRun:
        """kcat prints one newline per record. The clock runs from its first output (after its
        first fetch; those records are left out of the rate) to its last."""
        if self.native.kcat is None:
            raise GeneratorError(self.native.kcat_why_not)
        cmd = [
            str(self.native.kcat),
            "-C",
            "-b",
            target.bootstrap,
            "-t",
            topic,
            "-o",
            offset,
            "-c",
            str(count),
            "-e",
            "-q",
            "-f",
            "\n",
            "-X",
            f"fetch.message.max.bytes={fetch_bytes}",
        ]
        with self.watch(target) as usage:
            records, first_records, first, last, err = self._kcat(cmd)
        timed = records - first_records  # the first chunk arrived before the clock started
        if timed <= 0 or last <= first:
            raise GeneratorError(f"kcat received {records} records: {err.strip()[-300:]}")
        usage.measured = last - first
        return ConsumeRun(timed, timed * size, last - first, usage)

    def _kcat(self, cmd: list[str]) -> tuple[int, int, float, float, str]:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        timer = threading.Timer(self.plan.max_seconds + 60, proc.kill)
        timer.start()
        records = first_records = 0
        first = last = 0.0
        try:
            assert proc.stdout is not None
            fd = proc.stdout.fileno()
            while chunk := os.read(fd, 1 << 20):
                last = time.perf_counter()
                records += chunk.count(b"\n")
                if not first:
                    first, first_records = last, records
            proc.wait(30)
        finally:
            timer.cancel()
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
            err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
        return records, first_records, first, last, err

    # -- baselines (cached per size within the run) ----------------------------------------

    def baseline_w(self, request_size: float) -> tuple[Figure, Figure]:
        """Baseline W at ``request_size``: MiB/s and the sink's CPU s/MiB. A size within 15 % of one
        already measured in this run reuses that measurement."""
        for measured in self._w_cache:
            if abs(measured - request_size) <= 0.15 * measured:
                return self._w_cache[measured]
        size = int(float(f"{max(request_size, 1):.2g}"))
        if size not in self._w_cache:
            mib, cpu = Figure("MiB/s"), Figure("s/MiB")
            for _ in range(self.plan.runs):
                self.fresh_disk()
                got = baselines.measure_write(self.workdir, size, self.plan.baseline_bytes, self.plan.baseline_seconds)
                mib.add(got.mib_per_s)
                cpu.add(got.cpu_s_per_mib)
            self._w_cache[size] = (mib, cpu)
            self.report.baselines.append(
                {
                    "name": "W (loopback TCP -> appended file)",
                    "size": size,
                    "figure": mib,
                    "extra": f"sink CPU {cpu.median * 1000:.2f} ms/MiB",
                    "cpu_s_per_mib": cpu,
                }
            )
            self.log(f"baseline W @ {size} B: {mib.median:.0f} MiB/s")
        return self._w_cache[size]

    def baseline_r(self, chunk: int) -> Figure:
        if chunk not in self._r_cache:
            if self._read_file is None:
                size = 256 * MIB if self.plan.quick else 1024 * MIB
                self._read_file = baselines.make_file(self.workdir / "baseline-r.data", size)
            mib = Figure("MiB/s")
            total = (512 if self.plan.quick else 4096) * MIB
            for _ in range(self.plan.runs):
                mib.add(baselines.measure_read(self._read_file, chunk, total, self.plan.baseline_seconds * 2).mib_per_s)
            self._r_cache[chunk] = mib
            self.report.baselines.append(
                {"name": "R (sendfile -> loopback socket)", "size": chunk, "figure": mib, "extra": ""}
            )
            self.log(f"baseline R @ {chunk} B: {mib.median:.0f} MiB/s")
        return self._r_cache[chunk]

    def add(self, row: Row) -> Row:
        self.report.rows.append(row)
        head = row.unavailable or f"{row.primary} {row.value:,.1f}"
        self.log(f"[{row.scenario}] {row.case} / {row.generator}: {head}")
        return row


@contextmanager
def interrupt_on_exit(proc: subprocess.Popen[bytes]) -> Iterator[subprocess.Popen[bytes]]:
    """SIGINT the process when the block ends (py-spy writes its profile then) and reap it."""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
