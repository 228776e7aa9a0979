"""``headwater bench --versus kafka``: the same scenarios on Apache Kafka and on Headwater, alternately,
in one run, on one ZooKeeper.

Each run starts a 3-broker Apache Kafka cluster (the pinned 2.3.1, :mod:`headwater.testing.kafka`:
heap as ``kafka-server-start.sh``, IBP and message format 2.3) and a 3-broker Headwater cluster, one
after the other (the order alternates between runs, and only one cluster runs at a time), each in its
own ZooKeeper chroot, ZooKeeper ticking every 2,000 ms as the lab and the ansible roles ship it.
Each produce row sends ``--records`` records (default 1,500,000) or stops after 60 s.
On each cluster, with the same client (confluent-kafka, i.e. librdkafka, at its **default settings**;
the latency producer sets only ``linger.ms=0``, as the existing latency scenario does):

- produce, 100-byte records: 1 and 6 partitions with acks=1 on RF 1 (every replica on broker 0,
  so one broker works, as in the single-broker rows of ``headwater bench``), and acks=all on RF 3;
- consume: the 6-partition RF 1 topic read back from the start;
- end-to-end latency at a fixed rate (10,000 rec/s, 1 partition, RF 1, acks=1): p50, p99, p99.9;
- (before any figure, a warm-up: the produce of p6 and its consume once, unmeasured, so the JVM's JIT is warm)
- broker 0's CPU seconds per MiB produced and its peak RSS during the 6-partition acks=1 produce.

These are the ``core`` group; ``--only`` picks groups, the others (large records, Kafka 2.3.1's Java
perf tools, controller failover with restart, controlled shutdown, idle CPU and Metadata beside it,
MirrorMaker 2 and Spark's Kafka source, with ``headwater mirror`` and ``format("headwater")`` beside
the last two) are described in :mod:`headwater.bench.versus_more`; TLS and SASL_SSL, data stored,
1 MB records and a tuned producer in :mod:`headwater.bench.versus_extra`.

Every figure is the median of ``runs`` (default 3) with its min-max; each row gains the Kafka
figure and the ratio Headwater / Kafka, judged against issue 40's goals (produce >= 0.5x, consume
>= 0.8x, p99 <= 1.5x, RSS <= 0.25x). The load average at start and end is part of the report: on a
shared machine the figures move with it.
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from headwater.bench.procmon import ProcessMonitor
from headwater.protocol.apis import CREATE_TOPICS, METADATA
from headwater.testing.cluster import LocalCluster
from headwater.testing.kafka import KafkaCluster, version
from headwater.testing.wire import request
from headwater.testing.zookeeper import ZooKeeperServer

MIB = 1 << 20
SYSTEMS = ("kafka", "headwater")
#: ZooKeeper's tickTime as deploy/ (lab and ansible) ship it.
TICK_MS = 2000


@dataclass(frozen=True)
class Goal:
    text: str
    ok: Callable[[float], bool]


GOALS = {
    "produce": Goal(">= 0.5x Kafka", lambda r: r >= 0.5),
    "consume": Goal(">= 0.8x Kafka", lambda r: r >= 0.8),
    "p99": Goal("<= 1.5x Kafka", lambda r: r <= 1.5),
    "rss": Goal("<= 0.25x Kafka", lambda r: r <= 0.25),
    "failover": Goal("<= 0.5x Kafka", lambda r: r <= 0.5),
}


@dataclass
class Row:
    key: str
    label: str
    unit: str
    goal: str | None = None  # a GOALS key
    higher_is_better: bool = True
    #: "broker": Headwater's brokers vs Kafka's, one client; "tool": Headwater's tool vs Kafka's
    #: (MM2, Spark's source), both over Headwater brokers
    table: str = "broker"
    group: str = "core"
    values: dict[str, list[float]] = field(default_factory=lambda: {s: [] for s in SYSTEMS})

    def median(self, system: str) -> float | None:
        v = self.values[system]
        return statistics.median(v) if v else None

    def ratio(self) -> float | None:
        h, k = self.median("headwater"), self.median("kafka")
        return h / k if h is not None and k else None

    def verdict(self) -> str:
        r = self.ratio()
        if self.goal is None:
            return ""
        g = GOALS[self.goal]
        if r is None:
            return f"{g.text}: not measured"
        runs = min(len(self.values["kafka"]), len(self.values["headwater"]))
        if runs < 3:
            return f"{g.text}: not judged ({runs} run{'s' if runs != 1 else ''}, a smoke figure)"
        return f"{g.text}: {'met' if g.ok(r) else 'missed'}"

    def cell(self, system: str) -> str:
        v = self.values[system]
        if not v:
            return "-"
        return f"{_fmt(statistics.median(v))} ({_fmt(min(v))}-{_fmt(max(v))})"


def _fmt(x: float) -> str:
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:.0f}" if x == int(x) else f"{x:.1f}"
    return f"{x:.3g}"


def _cost(key: str, label: str, unit: str, group: str, goal: str | None = None) -> Row:
    """A row where less is better (seconds, CPU, memory, latency, a cost ratio)."""
    return Row(key, label, unit, goal, False, group=group)


ROWS = [
    Row("p1", "produce, 1 partition, acks=1 RF 1", "rec/s", "produce"),
    Row("p6", "produce, 6 partitions, acks=1 RF 1", "rec/s", "produce"),
    Row("pa1", "produce, 1 partition, acks=all RF 3", "rec/s", "produce"),
    Row("pa6", "produce, 6 partitions, acks=all RF 3", "rec/s", "produce"),
    Row("c6", "consume, 6 partitions (from the p6 topic)", "rec/s", "consume"),
    Row("l50", "end-to-end latency p50 at 10,000 rec/s", "ms", None, False),
    Row("l99", "end-to-end latency p99 at 10,000 rec/s", "ms", "p99", False),
    Row("l999", "end-to-end latency p99.9 at 10,000 rec/s", "ms", None, False),
    Row("cpu", "broker CPU per MiB produced (p6)", "CPU s/MiB", None, False),
    Row("rss", "broker peak RSS during p6", "MiB", "rss", False),
    Row("lp", "produce, 100 KiB records, 1 partition, acks=1 RF 1", "MiB/s", "produce", group="large"),
    Row("lc", "consume, 100 KiB records, 1 partition", "MiB/s", "consume", group="large"),
    Row("jp", "Java ProducerPerformance 2.3.1, 100 B, 6 partitions, acks=1", "rec/s", "produce", group="java"),
    Row("jc", "Java ConsumerPerformance 2.3.1 (fetch.nMsg.sec), 6 partitions", "rec/s", "consume", group="java"),
    _cost("fo", "controller failover after kill -9 (PARTS partitions, RF 3)", "s", "failover", "failover"),
    _cost(
        "fox",
        "of which after the controller's ZooKeeper session expired (/controller gone -> every partition led)",
        "s",
        "failover",
    ),
    _cost("rs", "restart after kill -9 until back in every ISR (PARTS partitions, RF 3)", "s", "failover"),
    _cost("cs", "controlled shutdown, SIGTERM to exit (PARTS partitions, RF 3)", "s", "failover"),
    _cost("idle", "idle CPU per broker, mean of 3 over 10 s (PARTS partitions, RF 3)", "% of a core", "failover"),
    _cost("mdt", "Metadata v7, all topics, round trip (PARTS partitions)", "ms", "failover"),
    Row("mm2", "MirrorMaker 2 dc1 -> agg, 100 B, first to last record", "rec/s", None, group="mm2"),
    Row("mm2e", "MirrorMaker 2 dc1 -> agg, process start to last record", "s", None, False, group="mm2"),
    Row("sk", "Spark format(kafka) -> Parquet, 1 KiB, 4 partitions", "rec/s", None, group="spark"),
    Row("tp", "produce over PLAINTEXT, 1 partition, acks=1 (1 broker)", "rec/s", "produce", group="tls"),
    Row("tc", "consume over PLAINTEXT, 1 partition (1 broker)", "rec/s", "consume", group="tls"),
    Row("tsp", "produce over SSL, 1 partition, acks=1 (1 broker)", "rec/s", "produce", group="tls"),
    Row("tsc", "consume over SSL, 1 partition (1 broker)", "rec/s", "consume", group="tls"),
    Row("tssp", "produce over SASL_SSL SCRAM-SHA-512, 1 partition, acks=1 (1 broker)", "rec/s", "produce", group="tls"),
    Row("tssc", "consume over SASL_SSL SCRAM-SHA-512, 1 partition (1 broker)", "rec/s", "consume", group="tls"),
    Row("sp", "produce, 100 B, into a partition holding STORED of 10 KiB records", "rec/s", "produce", group="stored"),
    Row(
        "sc", "consume STORED stored, from the oldest, dropped from the page cache", "MiB/s", "consume", group="stored"
    ),
    Row("mp", "produce, 999,900 B records (1 MB max), 1 partition, acks=1 RF 1", "MiB/s", "produce", group="large1m"),
    Row("mc", "consume, 999,900 B records, 1 partition", "MiB/s", "consume", group="large1m"),
    Row(
        "tp6",
        "produce, 6 partitions, acks=1 RF 1, tuned: linger.ms=100, batch.num.messages=1000000",
        "rec/s",
        "produce",
        group="tuned",
    ),
    _cost("ar", "SCRAM client's produce p99, 1,000 idle unauthenticated connections / none", "x", "preauth"),
    _cost("aw", "SCRAM client's produce p99 beside 1,000 idle unauthenticated connections", "ms", "preauth"),
    _cost("ac", "broker CPU per produce request beside them (login included)", "ms", "preauth"),
    _cost("am", "broker RSS beside 1,000 idle unauthenticated connections (VmRSS)", "MiB", "preauth", "rss"),
    _cost("ag", "broker RSS growth with them open (VmRSS vs just before)", "MiB", "preauth"),
    _cost("qoff", "produce 200 B in batches of 50, acks=1: broker CPU, client quotas off", "ms/MiB", "quotas"),
    _cost("qon", "the same, quotas on (clients/<default>: every request measured, none throttled)", "ms/MiB", "quotas"),
    _cost("qpr", "quotas on / off, produce broker CPU (issue 42: <= 1.05 on each)", "x", "quotas"),
    _cost("qcr", "quotas on / off, consume broker CPU per MiB", "x", "quotas"),
    _cost(
        "qq",
        "quiet producer's p99 beside a noisy one at 5x its 1 MiB/s quota / alone (issue 42: <= 2 on each)",
        "x",
        "quotas",
    ),
    Row("tm", "headwater mirror / MM2, first to last record", "rec/s", None, table="tool", group="mm2"),
    Row("tme", "headwater mirror / MM2, process start to last record", "s", None, False, table="tool", group="mm2"),
    Row("ts", "format(headwater) / Spark format(kafka) -> Parquet", "rec/s", None, table="tool", group="spark"),
]
#: what ``--only`` selects with ``--versus kafka`` (default: every group)
GROUPS = (
    "core",
    "large",
    "java",
    "failover",
    "mm2",
    "spark",
    "preauth",
    "quotas",
    "tls",
    "stored",
    "large1m",
    "tuned",
)


@dataclass
class Plan:
    runs: int = 3
    produce_count: int = 300_000
    produce_seconds: float = 30.0
    latency_seconds: float = 10.0
    latency_rate: int = 10_000
    quick: bool = False
    groups: tuple[str, ...] = GROUPS
    large_count: int = 1_000  # 100 KiB records: ~100 MiB
    java_count: int = 1_500_000
    partitions: int = 2_000  # the failover row
    mirror_count: int = 50_000
    spark_count: int = 50_000  # 1 KiB records: ~50 MiB
    stored_bytes: int = 1 << 30
    mb_count: int = 200  # 999,900 B records: ~190 MiB

    @staticmethod
    def make(
        quick: bool,
        runs: int | None,
        records: int | None = None,
        groups: tuple[str, ...] = GROUPS,
        partitions: int | None = None,
    ) -> Plan:
        if quick:
            return Plan(
                runs or 1,
                records or 30_000,
                produce_seconds=15,
                latency_seconds=3,
                quick=True,
                groups=groups,
                large_count=100,
                java_count=records or 20_000,
                partitions=partitions or 100,
                mirror_count=5_000,
                spark_count=5_000,
                stored_bytes=20 << 20,
                mb_count=20,
            )
        return Plan(
            runs=runs or 3,
            produce_count=records or 1_500_000,
            produce_seconds=60,
            groups=groups,
            java_count=records or 500_000,
            partitions=partitions or 2_000,
        )


def _request(bootstrap: str, api: Any, version_: int, body: dict[str, Any], timeout: float = 30) -> dict[str, Any]:
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    return request(host, int(port), api, version_, body, timeout=timeout, client_id="headwater-bench")


def create_topic(bootstrap: str, name: str, partitions: int, rf: int) -> None:
    """RF 1: every partition on broker 0 (one broker works); RF 3: the controller spreads them."""
    if rf == 1:
        topic = {
            "name": name,
            "num_partitions": -1,
            "replication_factor": -1,
            "assignments": [{"partition_index": p, "broker_ids": [0]} for p in range(partitions)],
            "configs": [],
        }
    else:
        topic = {"name": name, "num_partitions": partitions, "replication_factor": rf, "assignments": [], "configs": []}
    deadline = time.monotonic() + 60
    err = -1
    while err not in (0, 36):  # CreateTopics goes to the controller: NOT_CONTROLLER (41) from the others
        for b in bootstrap.split(","):
            req = {"topics": [topic], "timeout_ms": 30000, "validate_only": False}
            err = _request(b, CREATE_TOPICS, 2, req)["topics"][0]["error_code"]
            if err != 41:
                break
        if err not in (0, 36, 41) or time.monotonic() > deadline:
            raise RuntimeError(f"CreateTopics {name}: error {err}")
        if err == 41:
            time.sleep(0.2)
    for b in bootstrap.split(","):
        while True:
            md = _request(b, METADATA, 1, {"topics": [{"name": name}]})
            parts = md["topics"][0]["partitions"]
            if len(parts) == partitions and all(p["leader_id"] >= 0 and len(p["isr_nodes"]) == rf for p in parts):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} not led with {rf} in-sync replicas on {b}: {parts}")
            time.sleep(0.2)


def loadgen(command: str, bootstrap: str, topic: str, timeout: float, *args: str) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "headwater.bench.loadgen", command, "--bootstrap", bootstrap, "--topic", topic, *args]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"{command} exited {out.returncode}: {out.stderr[-2000:]}")
    return dict(json.loads(lines[-1]))


@contextmanager
def cluster(system: str, workdir: Path, zk: ZooKeeperServer, n: int) -> Iterator[tuple[str, list[int], Path]]:
    """A 3-broker cluster of ``system``: (bootstrap, broker pids, its directory)."""
    if system == "kafka":
        with KafkaCluster(workdir / f"kafka{n}", 3, zk_connect=zk.connect, chroot=f"/versus-kafka{n}") as k:
            yield k.bootstrap, [b.pid for b in k.brokers], k.workdir
    else:
        with LocalCluster(workdir / f"headwater{n}", 3, zk_connect=f"{zk.connect}/versus-headwater{n}") as h:
            yield h.bootstrap, [b.pid for b in h.brokers], workdir / f"headwater{n}"


def warm_up(bootstrap: str, plan: Plan) -> None:
    """Before any figure of a cluster: a produce and a consume of ``produce_count`` records, unmeasured,
    so the JVM's JIT (and Headwater's first batches) are out of the measured runs."""
    seconds = str(plan.produce_seconds)
    count = str(plan.produce_count)
    create_topic(bootstrap, "versus-warmup", 6, 1)
    loadgen(
        "confluent-produce",
        bootstrap,
        "versus-warmup",
        plan.produce_seconds * 3 + 60,
        "--count",
        count,
        "--seconds",
        seconds,
        "--size",
        "100",
        "--acks",
        "1",
    )
    timeout = plan.produce_seconds * 3 + 60
    loadgen("confluent-consume", bootstrap, "versus-warmup", timeout, "--count", count, "--seconds", seconds)


def one_run(
    system: str, bootstrap: str, pids: list[int], plan: Plan, rows: dict[str, Row], log: Callable[[str], None]
) -> None:
    warm_up(bootstrap, plan)
    seconds = str(plan.produce_seconds)
    count = str(plan.produce_count)
    for key, parts, rf, acks in (("p1", 1, 1, "1"), ("p6", 6, 1, "1"), ("pa1", 1, 3, "all"), ("pa6", 6, 3, "all")):
        topic = f"versus-{key}"
        create_topic(bootstrap, topic, parts, rf)
        with ProcessMonitor(pids[0]) as mon:
            res = loadgen(
                "confluent-produce",
                bootstrap,
                topic,
                plan.produce_seconds * 3 + 60,
                "--count",
                count,
                "--seconds",
                seconds,
                "--size",
                "100",
                "--acks",
                acks,
            )
        if res["errors"]:
            log(f"{system} {key}: {res['errors']} errors, first: {res['first_error']}")
        rate = res["acked"] / res["seconds"]
        rows[key].values[system].append(rate)
        log(f"{system} {key}: {rate:,.0f} rec/s ({res['acked']} in {res['seconds']:.1f}s)")
        if key == "p6":
            mib = res["acked"] * 100 / MIB
            rows["cpu"].values[system].append(mon.cpu / mib if mib else float("nan"))
            rows["rss"].values[system].append(mon.peak_rss / MIB)
            res_c = loadgen(
                "confluent-consume",
                bootstrap,
                topic,
                plan.produce_seconds * 3 + 60,
                "--count",
                str(res["acked"]),
                "--seconds",
                seconds,
            )
            c_rate = res_c["records"] / res_c["seconds"] if res_c.get("seconds") else 0.0
            rows["c6"].values[system].append(c_rate)
            log(f"{system} c6: {c_rate:,.0f} rec/s")
    topic = "versus-latency"
    create_topic(bootstrap, topic, 1, 1)
    n = str(int(plan.latency_rate * plan.latency_seconds))
    cons = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "headwater.bench.loadgen",
            "confluent-latency-consumer",
            "--bootstrap",
            bootstrap,
            "--topic",
            topic,
            "--count",
            n,
            "--seconds",
            str(plan.latency_seconds * 4 + 30),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert cons.stdout is not None
        if cons.stdout.readline().strip() != "READY":
            raise RuntimeError("latency consumer did not start")
        loadgen(
            "confluent-latency-producer",
            bootstrap,
            topic,
            plan.latency_seconds * 4 + 60,
            "--count",
            n,
            "--rate",
            str(plan.latency_rate),
            "--size",
            "100",
            "--acks",
            "1",
        )
        out, _ = cons.communicate(timeout=plan.latency_seconds * 4 + 60)
    finally:
        if cons.poll() is None:
            cons.kill()
            cons.wait()
    lat = json.loads([ln for ln in out.splitlines() if ln.startswith("{")][-1])
    for key, name in (("l50", "p50_ms"), ("l99", "p99_ms"), ("l999", "p999_ms")):
        if name in lat:
            rows[key].values[system].append(float(lat[name]))
    log(f"{system} latency: {lat}")


def run(plan: Plan, out: Path, workdir: Path | None = None, log: Callable[[str], None] | None = None) -> Path:
    say = log or (lambda m: print(f"versus: {m}", file=sys.stderr, flush=True))
    from headwater.bench import versus_extra as extra
    from headwater.bench import versus_more as more

    stored_label = (
        f"{plan.stored_bytes / (1 << 30):g} GiB" if plan.stored_bytes >= 1 << 30 else f"{plan.stored_bytes >> 20} MiB"
    )
    rows = {
        r.key: Row(
            r.key,
            r.label.replace("PARTS", f"{plan.partitions:,}").replace("STORED", stored_label),
            r.unit,
            r.goal,
            r.higher_is_better,
            r.table,
            r.group,
        )
        for r in ROWS
        if r.group in plan.groups
    }
    shared = {"core", "large", "java", "spark", "stored", "large1m", "tuned"} & set(plan.groups)
    load_start = os.getloadavg()
    started = time.strftime("%Y-%m-%d %H:%M %Z")
    wd = workdir or Path(tempfile.mkdtemp(prefix="headwater-versus-"))
    zk = ZooKeeperServer(wd / "zookeeper", tick_ms=TICK_MS)
    zk.start()
    n = itertools.count()
    try:
        for i in range(plan.runs):
            order = SYSTEMS if i % 2 == 0 else tuple(reversed(SYSTEMS))
            for system in order:
                say(f"run {i + 1}/{plan.runs}: {system}")
                if shared:
                    with cluster(system, wd, zk, next(n)) as (bootstrap, pids, root):
                        if "core" in plan.groups:
                            one_run(system, bootstrap, pids, plan, rows, say)
                        if "large" in plan.groups:
                            _tried(say, system, "large", more.large, system, bootstrap, plan.large_count, rows, say)
                        if "java" in plan.groups:
                            _tried(say, system, "java", more.java_perf, system, bootstrap, plan.java_count, rows, say)
                        if "spark" in plan.groups:
                            _tried(say, system, "spark", more.spark, system, bootstrap, wd, plan.spark_count, rows, say)
                        if "core" not in plan.groups:
                            warm_up(bootstrap, plan)
                        if "large1m" in plan.groups:
                            _tried(say, system, "large1m", extra.large_1m, system, bootstrap, plan.mb_count, rows, say)
                        if "tuned" in plan.groups:
                            count, secs = plan.produce_count, plan.produce_seconds
                            _tried(say, system, "tuned", extra.tuned, system, bootstrap, count, secs, rows, say)
                        if "stored" in plan.groups:
                            args = (
                                system,
                                bootstrap,
                                root,
                                plan.stored_bytes,
                                plan.produce_count,
                                plan.produce_seconds,
                            )
                            _tried(say, system, "stored", extra.stored, *args, rows, say)
                if "tls" in plan.groups:
                    name = f"versus-tls-{system}{next(n)}"
                    tls_args = (system, wd, zk, name, plan.produce_count, plan.produce_seconds)
                    _tried(say, system, "tls", extra.tls, *tls_args, rows, say)
                if "mm2" in plan.groups:
                    name = f"versus-mm2-{system}{next(n)}"
                    _tried(say, system, "mm2", more.mirrors, system, wd, zk, name, plan.mirror_count, rows, say)
                if "preauth" in plan.groups:
                    name = f"versus-preauth-{system}{next(n)}"
                    _tried(say, system, "preauth", more.preauth, system, wd, zk, name, plan.quick, rows, say)
                if "quotas" in plan.groups:
                    name = f"versus-quotas-{system}{next(n)}"
                    q_args = (system, wd, zk, name, plan.produce_count, plan.produce_seconds, i, rows, say)
                    _tried(say, system, "quotas", extra.quotas, *q_args, plan.latency_seconds if plan.quick else None)
                if "failover" in plan.groups:
                    name = f"versus-failover-{system}{next(n)}"
                    _tried(say, system, "failover", more.failover, system, wd, zk, name, plan.partitions, rows, say)
                _write(out, rows, plan, started, load_start)
    finally:
        zk.stop()
    md = _write(out, rows, plan, started, load_start)
    return md


def _write(out: Path, rows: dict[str, Row], plan: Plan, started: str, load_start: tuple[float, ...]) -> Path:
    """versus.md and versus.json as they stand (after every run too: a long run interrupted keeps its figures)."""
    out.mkdir(parents=True, exist_ok=True)
    md = out / "versus.md"
    md.write_text(markdown(list(rows.values()), plan, started, load_start, os.getloadavg()))
    (out / "versus.json").write_text(
        json.dumps(
            {
                "started": started,
                "kafka": _kafka_version(),
                "runs": plan.runs,
                "quick": plan.quick,
                "load_average": {"start": load_start, "end": os.getloadavg()},
                "groups": list(plan.groups),
                "rows": {
                    r.key: {"label": r.label, "unit": r.unit, "table": r.table, **r.values} for r in rows.values()
                },
            },
            indent=1,
        )
    )
    return md


def _tried(say: Callable[[str], None], system: str, group: str, fn: Callable[..., None], *args: Any) -> None:
    """One group's measurement; a failure is logged and leaves its rows without this run's figure
    (the table shows the runs each cell has), the other groups still run."""
    try:
        fn(*args)
    except (RuntimeError, OSError, TimeoutError, subprocess.SubprocessError, KeyError, ValueError) as e:
        say(f"{system} {group}: failed: {e}")


def _kafka_version() -> str:
    try:
        return version()
    except FileNotFoundError:
        return "(jars not fetched)"


def _line(r: Row, plan: Plan) -> str:
    ratio = r.ratio()
    verdict = "" if plan.quick else r.verdict()
    cells = {
        s: r.cell(s) + (f" [{len(r.values[s])} of {plan.runs}]" if 0 < len(r.values[s]) < plan.runs else "")
        for s in SYSTEMS
    }
    return (
        f"| {r.label} | {r.unit} | {cells['headwater']} | {cells['kafka']} | "
        f"{'-' if ratio is None else f'{ratio:.2f}'} | {verdict} |"
    )


def markdown(
    rows: list[Row], plan: Plan, started: str, load_start: tuple[float, ...], load_end: tuple[float, ...]
) -> str:
    lines = [
        f"# Headwater / Kafka ({started})",
        "",
        f"Apache Kafka {_kafka_version()} and Headwater, 3 brokers each, one at a time on one ZooKeeper (tickTime {TICK_MS} ms); "
        f"{plan.runs} run(s) per figure, alternating; median (min-max). Client: confluent-kafka (librdkafka) at its "
        f"default settings, 100-byte records, {plan.produce_count:,} per produce row (60 s at most). Load average at start {', '.join(f'{x:.1f}' for x in load_start)}, "
        f"at end {', '.join(f'{x:.1f}' for x in load_end)} ({os.cpu_count()} cores, shared).",
        "",
    ]
    if plan.quick:
        lines += ["**A smoke run** (`--quick`): too few records and runs to judge any goal; no goal is judged.", ""]
    lines += ["| row | unit | Headwater | Kafka | Headwater / Kafka | goal |", "|---|---|---|---|---|---|"]
    lines += [_line(r, plan) for r in rows if r.table == "broker"]
    tools = [r for r in rows if r.table == "tool"]
    if tools:
        lines += [
            "",
            "Headwater's own tool against Kafka's, both over the same Headwater brokers in the same run "
            '(`headwater mirror` / MirrorMaker 2; `format("headwater")` / Spark\'s `format("kafka")`):',
            "",
            "| row | unit | Headwater's tool | Kafka's tool | Headwater's / Kafka's | goal |",
            "|---|---|---|---|---|---|",
        ]
        lines += [_line(r, plan) for r in tools]
    return "\n".join(lines) + "\n"
