"""Scenario ``preauth``: what clients that never log in cost the broker (issue 37 item 3, review H3).

Per run, a broker of its own (on the run's ZooKeeper, a fresh one each run so resident memory
starts from the same place) listens on PLAINTEXT and SASL_PLAINTEXT, with a SCRAM-SHA-512 user.
The attack, from this process's own sockets:

- 1,000 idle unauthenticated connections to the SASL_PLAINTEXT listener (TCP connected, nothing sent);
- 100 connections to the PLAINTEXT listener each announcing a 100 MiB request (a 4-byte size
  prefix and 1 KiB of it). On the SASL listener such a prefix closes the connection at once
  (512 KiB before login); on PLAINTEXT the connection stays, waiting for bytes that never come,
  which is the harder case for memory.

Measured: the broker's resident memory (``/proc/<pid>/status`` VmRSS) once every attacker's
connection is accepted (its open descriptors say so) and after the client's run beside them,
against the same broker just before the first attack (the largest growth seen); and a
SCRAM-SHA-512 client's produce latency (confluent-kafka, acks=1, one 100-byte record per request,
waited for before the next) without and with the attackers connected, alternating in ten blocks
per run (the attackers connect, and are closed, ten times; four in ``--quick``) so the machine's
drift hits both alike; and the broker's own CPU per request in each phase (``/proc/<pid>/stat``),
which other processes' bursts of CPU -- what sets the p99 on a shared machine -- hardly move.
Ratio: p99 with / p99 without, same broker, same run.

Goals (issue 37): the attack costs the broker < 64 MiB, and the SCRAM client keeps its produce p99.
"""

from __future__ import annotations

import os
import resource
import socket
import statistics
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from headwater.bench.context import Bench, GeneratorError
from headwater.bench.generators import SHORT
from headwater.bench.report import Goal, Row
from headwater.testing.cluster import LocalBroker
from headwater.testing.zookeeper import free_port

IDLE = 1000
ANNOUNCERS = 100
QUICK_IDLE = 200
QUICK_ANNOUNCERS = 20
RECORDS = 10_000  # latency samples per phase, full plan
BLOCKS = 10  # without / with alternate this many times per run (1,000 requests each)
QUICK_RECORDS = 500
QUICK_BLOCKS = 4
USER, PASSWORD = "bench", "bench-secret"
MIB = 1 << 20


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise GeneratorError(f"no VmRSS for pid {pid}")


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _cpu_s(pid: int) -> float:
    """The process's user + system CPU seconds so far (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _raise_fd_limit(needed: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        new = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))  # the broker, started from here, inherits it


def _latencies_ms(bootstrap: str, topic: str, count: int) -> list[float]:
    from confluent_kafka import Producer

    errors: list[str] = []
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": USER,
            "sasl.password": PASSWORD,
            "acks": "1",
            "linger.ms": 0,
            "error_cb": lambda e: errors.append(e.str()),
        }
    )
    value = b"x" * 100
    assert p.flush(0) == 0
    p.produce(topic, value)  # the connection, the login, the topic's metadata
    if p.flush(60) != 0:
        raise GeneratorError(f"the SCRAM client could not produce: {errors[-3:]}")
    out = []
    for _ in range(count):
        started = time.perf_counter()
        p.produce(topic, value)
        if p.flush(30) != 0:
            raise GeneratorError(f"a produce took more than 30 s: {errors[-3:]}")
        out.append((time.perf_counter() - started) * 1000)
    return out


def _p99(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=100)[98]


def _attack(port_sasl: int, port_plain: int, idle: int, announcers: int) -> list[socket.socket]:
    socks: list[socket.socket] = []
    try:
        for _ in range(idle):
            socks.append(socket.create_connection(("127.0.0.1", port_sasl), timeout=30))
        announce = struct.pack(">i", 100 * MIB) + b"\0" * 1024
        for _ in range(announcers):
            s = socket.create_connection(("127.0.0.1", port_plain), timeout=30)
            s.sendall(announce)
            socks.append(s)
    except OSError:
        for s in socks:
            s.close()
        raise
    return socks


@dataclass
class Phases:
    """What :func:`alternate` measured: the client's latencies and the broker's CPU seconds per phase."""

    without: list[float] = field(default_factory=list)
    with_attack: list[float] = field(default_factory=list)
    cpu: dict[str, float] = field(default_factory=lambda: {"without": 0.0, "with": 0.0})
    grown: int = 0  # the largest RSS growth seen, bytes
    before: int = 0  # the broker's RSS before the first attack, bytes
    alive: int = 0  # attacking connections still open when the first "with" phase ended

    def cpu_ms(self, phase: str) -> float:
        n = len(self.with_attack if phase == "with" else self.without)
        return self.cpu[phase] * 1000 / n


def alternate(
    pid: int, sasl_port: int, plain_port: int, topic: str, idle: int, announcers: int, records: int, blocks: int
) -> Phases:
    """The SCRAM client's requests without and with the attackers, alternating in ``blocks``, on the
    broker process ``pid`` (Headwater's or Kafka's: only its sockets, ``/proc`` and the wire are used)."""
    bootstrap = f"127.0.0.1:{sasl_port}"
    _latencies_ms(bootstrap, topic, max(100, records // 4))  # warm: the broker's steady state
    before, fds = _rss(pid), _fds(pid)
    m = Phases(before=before)
    socks: list[socket.socket] = []

    def measured(phase: str) -> list[float]:
        started = _cpu_s(pid)
        out = _latencies_ms(bootstrap, topic, records // blocks)
        m.cpu[phase] += _cpu_s(pid) - started
        return out

    try:
        # the phases alternate in blocks, so the machine's drift (other processes' bursts of CPU,
        # which set the p99 on a shared machine) hits both alike
        for block in range(blocks):
            m.without += measured("without")
            socks = _attack(sasl_port, plain_port, idle, announcers)
            _wait(lambda: _fds(pid) >= fds + idle + announcers - 8, "the broker to accept every attacker")
            time.sleep(0.5)  # the announcers' bytes are read as soon as they are accepted
            m.grown = max(m.grown, _rss(pid) - before)
            m.with_attack += measured("with")
            m.grown = max(m.grown, _rss(pid) - before)
            if block == 0:
                m.alive = sum(1 for s in socks if _open(s))
            for s in socks:
                s.close()
            socks = []
            _wait(lambda: _fds(pid) < fds + 8, "the broker to close the attackers' connections")
    finally:
        for s in socks:
            s.close()
    return m


def add_user(zk: str) -> None:
    """The SCRAM user, written to ZooKeeper as Kafka's kafka-configs writes it (either broker reads it)."""
    from headwater.cli.main import main as cli_main

    user = ["--entity-type", "users", "--entity-name", USER]
    add = ["--add-config", f"SCRAM-SHA-512=[iterations=4096,password={PASSWORD}]"]
    if cli_main(["configs", "--zookeeper", zk, "--alter", *user, *add]) != 0:
        raise GeneratorError("could not write the SCRAM user to ZooKeeper")


def _one_run(
    bench: Bench, run: int, idle: int, announcers: int, records: int, blocks: int, rows: dict[str, Row]
) -> None:
    workdir = bench.workdir / f"preauth-{run}"
    zk = f"{bench.zk_connect}/bench-preauth-{run}"
    broker = LocalBroker(workdir, 0, zk)
    sasl_port = free_port()
    broker.properties.update(
        {
            "listeners": f"PLAINTEXT://127.0.0.1:{broker.port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "offsets.topic.replication.factor": 1,
        }
    )
    broker.start(timeout=120)
    try:
        add_user(zk)
        topic = bench.topic(f"preauth-{run}")
        m = alternate(broker.pid, sasl_port, broker.port, topic, idle, announcers, records, blocks)
    finally:
        broker.stop()
    rows["rss"].figure("MiB", "MiB").add(m.grown / MIB)
    rows["rss"].figure("KiB per attacking connection", "KiB").add(m.grown / 1024 / (idle + announcers))
    rows["rss"].figure("attacking connections still open", "").add(m.alive)
    lat = rows["latency"]
    lat.figure("p99 ms with", "ms").add(_p99(m.with_attack))
    lat.figure("p99 ms without", "ms").add(_p99(m.without))
    lat.figure("p50 ms with", "ms").add(statistics.median(m.with_attack))
    lat.figure("p50 ms without", "ms").add(statistics.median(m.without))
    lat.figure("p99 ratio", "x").add(_p99(m.with_attack) / _p99(m.without))
    # what a request costs the broker itself (its CPU over the phase, login included, per request):
    # the machine's scheduling noise, which moves the p99, hardly moves this
    lat.figure("broker CPU ms per request with", "ms").add(m.cpu_ms("with"))
    lat.figure("broker CPU ms per request without", "ms").add(m.cpu_ms("without"))
    bench.log(
        f"[preauth] run {run}: RSS +{m.grown / MIB:.1f} MiB for {idle}+{announcers} connections "
        f"({m.alive} still open); produce p99 {_p99(m.without):.2f} ms without, {_p99(m.with_attack):.2f} ms with; "
        f"broker CPU {m.cpu_ms('without'):.3f} / {m.cpu_ms('with'):.3f} ms per request without / with"
    )


def _wait(check: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise GeneratorError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _open(s: socket.socket) -> bool:
    s.setblocking(False)
    try:
        return s.recv(1) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False


def run(bench: Bench) -> list[Row]:
    quick = bench.plan.quick
    idle, announcers = (QUICK_IDLE, QUICK_ANNOUNCERS) if quick else (IDLE, ANNOUNCERS)
    records = QUICK_RECORDS if quick else RECORDS
    rows = {
        "rss": Row(
            "preauth",
            f"broker RSS growth: {idle:,} idle unauthenticated connections (SASL_PLAINTEXT) + {announcers} "
            "announcing 100 MiB each (PLAINTEXT)",
            "raw sockets (Py)",
            primary="MiB",
            goal=Goal("< 64 MiB", 64, kind="at most"),
        ),
        "latency": Row(
            "preauth",
            f"SCRAM-SHA-512 client beside them: produce p99, acks=1, one 100 B record per request, {records:,} requests",
            SHORT["confluent"],
            primary="p99 ms with",
            goal=Goal("p99 within 1.5x of without the attackers", 1.5, kind="at most", on="ratio"),
        ),
    }
    if not bench.zk_connect:
        for r in rows.values():
            r.unavailable = "no ZooKeeper"
            bench.add(r)
        return list(rows.values())
    _raise_fd_limit(idle + announcers + 1024)
    try:
        for run_index in range(bench.plan.runs):
            _one_run(bench, run_index, idle, announcers, records, QUICK_BLOCKS if quick else BLOCKS, rows)
    except (GeneratorError, RuntimeError, OSError) as e:
        for r in rows.values():
            if not r.figures:
                r.unavailable = f"failed: {e}"
    lat = rows["latency"]
    if lat.figures:
        lat.ratio_override = lat.figure("p99 ratio", "x").median
        lat.ratio_style = "times"
        lat.baseline = "the same broker just before the attack (p99 without)"
    rows["rss"].baseline = "the same broker just before the attack"
    for r in rows.values():
        bench.add(r)
    return list(rows.values())
