"""Scenario 10: what TLS and SASL cost (issue 23).

One broker of its own (on the run's ZooKeeper) listens on PLAINTEXT, SSL, SASL_PLAINTEXT and
SASL_SSL at once, with a throwaway CA (``headwater.testing.tls.TestCA``), PLAIN users in the
listeners' JAAS config and a SCRAM-SHA-512 user written to ZooKeeper with ``headwater configs``.

- **Throughput**: librdkafka (confluent-kafka, the bench's load generator in its own process)
  produces Kreps' workload -- 100-byte records, librdkafka's default batching, acks=1 -- to a fresh
  one-partition topic per listener and run, then consumes it back from the start; PLAINTEXT, SSL
  and SASL_SSL (SCRAM-SHA-512) alternate within each run so the machine's noise hits them alike.
  Ratio: to the same run's PLAINTEXT median. Besides records/s, the broker's CPU per MiB of record
  data: CPU time is far less disturbed by other processes than wall time, and says what the broker
  pays for TLS (sendfile on PLAINTEXT, ``pread`` + OpenSSL on TLS).
- **Connection set-up**: Headwater's client (``BrokerConnection``) opens connections one after
  the other -- TCP, then the TLS handshake, ApiVersions, then the SASL handshake and login -- and
  closes each. ms per connection (the client's wall clock, PBKDF2 of SCRAM's 4096 iterations on
  the client included) and the broker's CPU per connection. Ratio: to a PLAINTEXT connection.

The issue's goal: produce and consume over TLS >= 50 % of PLAINTEXT with librdkafka at Kreps'
batching.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from headwater.bench.context import Bench, GeneratorError, Target
from headwater.bench.generators import SHORT, Workload, consume_cmd, produce_cmd, why_not
from headwater.bench.report import Goal, Row
from headwater.testing.cluster import LocalBroker
from headwater.testing.tls import TestCA
from headwater.testing.zookeeper import free_port

SIZE = 100
RECORDS = 1_000_000  # per produce run, full plan (consumed back whole)
QUICK_RECORDS = 100_000
CONNECTIONS = 200  # per kind of connection, full plan
QUICK_CONNECTIONS = 10
LISTENERS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
THROUGHPUT = ("PLAINTEXT", "SSL", "SASL_SSL")
USER, PASSWORD = "bench", "bench-secret"
PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    f'username="{USER}" password="{PASSWORD}" user_{USER}="{PASSWORD}";'
)
MIB = 1 << 20


@dataclass(frozen=True)
class Handshake:
    label: str
    listener: str
    mechanism: str | None = None


HANDSHAKES = (
    Handshake("PLAINTEXT: TCP + ApiVersions", "PLAINTEXT"),
    Handshake("SSL: + TLS handshake", "SSL"),
    Handshake("SASL_PLAINTEXT, PLAIN", "SASL_PLAINTEXT", "PLAIN"),
    Handshake("SASL_PLAINTEXT, SCRAM-SHA-512", "SASL_PLAINTEXT", "SCRAM-SHA-512"),
    Handshake("SASL_SSL, SCRAM-SHA-512", "SASL_SSL", "SCRAM-SHA-512"),
)


@dataclass
class SecuredBroker:
    target: Target
    ports: dict[str, int]
    ca_file: str

    def bootstrap(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    def client_properties(self, listener: str, mechanism: str | None = "SCRAM-SHA-512") -> dict[str, str]:
        """Kafka's client property names: librdkafka's -X and Headwater's ``security=`` alike."""
        props = {"security.protocol": listener}
        if listener in ("SSL", "SASL_SSL"):
            props["ssl.ca.location"] = self.ca_file
        if listener.startswith("SASL_") and mechanism:
            props.update({"sasl.mechanism": mechanism, "sasl.username": USER, "sasl.password": PASSWORD})
        return props


@contextmanager
def secured_broker(bench: Bench) -> Iterator[SecuredBroker]:
    from headwater.cli.main import main as cli_main

    workdir = bench.workdir / "security"
    ca = TestCA(workdir / "ca")
    cert = ca.issue("broker")
    zk = f"{bench.zk_connect}/bench-security"
    broker = LocalBroker(workdir, 0, zk)
    ports = {"PLAINTEXT": broker.port, **{name: free_port() for name in LISTENERS[1:]}}
    broker.properties.update(
        {
            "listeners": ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items()),
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": cert.keystore,
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
            "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
            "offsets.topic.replication.factor": 1,
        }
    )
    broker.start(timeout=120)
    try:
        user = ["--entity-type", "users", "--entity-name", USER]
        add = ["--add-config", f"SCRAM-SHA-512=[iterations=4096,password={PASSWORD}]"]
        if cli_main(["configs", "--zookeeper", zk, "--alter", *user, *add]) != 0:
            raise GeneratorError("could not write the SCRAM user to ZooKeeper")
        yield SecuredBroker(Target("secured broker", broker.bootstrap, [broker.pid], 1, "1"), ports, str(ca.ca_file))
    finally:
        broker.stop()


def _with_security(cmd: list[str], props: dict[str, str]) -> list[str]:
    return [*cmd, *(arg for k, v in props.items() for arg in ("-X", f"{k}={v}"))]


def _throughput(bench: Bench, sb: SecuredBroker, rows: dict[tuple[str, str], Row], count: int) -> None:
    cpu_per_mib: dict[tuple[str, str], list[float]] = {key: [] for key in rows}
    for run in range(bench.plan.runs):
        for listener in THROUGHPUT:
            topic = bench.topic(f"security-{listener.lower()}-{run}")
            bench.create_topic(sb.target, topic, 1)
            props = sb.client_properties(listener)
            bootstrap = sb.bootstrap(listener)
            cmd = produce_cmd(bench, "confluent", bootstrap, topic, count, Workload(SIZE), "1")
            produced = bench.produce(sb.target, _with_security(cmd, props), SIZE, float("nan"))
            row = rows[(listener, "produce")]
            row.figure("records/s").add(produced.records_per_s)
            row.figure("MiB/s").add(produced.mib_per_s)
            cpu_per_mib[(listener, "produce")].append(produced.broker_cpu * 1000 / (produced.payload_bytes / MIB))
            cmd = consume_cmd(bench, "confluent", bootstrap, topic, produced.records, 1 << 20)
            consumed = bench.consume_python(sb.target, _with_security(cmd, props))
            row = rows[(listener, "consume")]
            row.figure("records/s").add(consumed.records_per_s)
            row.figure("MiB/s").add(consumed.mib_per_s)
            cpu_per_mib[(listener, "consume")].append(consumed.usage.broker_cpu * 1000 / (consumed.payload_bytes / MIB))
            bench.log(
                f"[10] run {run} {listener}: produce {produced.records_per_s:,.0f} rec/s, "
                f"consume {consumed.records_per_s:,.0f} rec/s"
            )
    for (listener, direction), row in rows.items():
        for v in cpu_per_mib[(listener, direction)]:
            row.figure("broker CPU ms/MiB", "ms/MiB").add(v)
        base = rows[("PLAINTEXT", direction)].value
        row.ratio_override = row.value / base if base > 0 else None
        row.baseline = f"PLAINTEXT {direction}, same run"


async def _connections(sb: SecuredBroker, h: Handshake, count: int) -> float:
    """Open and close ``count`` connections one after the other; seconds taken."""
    from headwater.client.connection import BrokerConnection
    from headwater.client.security import ClientSecurity

    security = ClientSecurity.from_properties(sb.client_properties(h.listener, h.mechanism))
    started = time.perf_counter()
    for _ in range(count):
        conn = BrokerConnection("127.0.0.1", sb.ports[h.listener], security=security, connect_timeout=30)
        await conn.connect()
        await conn.close()
    return time.perf_counter() - started


def _handshakes(bench: Bench, sb: SecuredBroker, rows: dict[str, Row], count: int) -> None:
    for run in range(bench.plan.runs):
        for h in HANDSHAKES:
            asyncio.run(_connections(sb, h, 3))  # warm: imports, the TLS context, the SCRAM user's ZK read
            with bench.watch(sb.target) as usage:
                seconds = asyncio.run(_connections(sb, h, count))
            row = rows[h.label]
            row.figure("ms/connection").add(seconds * 1000 / count)
            row.figure("connections/s").add(count / seconds)
            row.figure("broker CPU ms/connection", "ms").add(usage.broker_cpu * 1000 / count)
            bench.log(f"[10] run {run} {h.label}: {seconds * 1000 / count:.2f} ms per connection")
    base = rows[HANDSHAKES[0].label].value
    for row in rows.values():
        row.ratio_override = row.value / base if base > 0 else None
        row.ratio_style = "times"
        row.baseline = "a PLAINTEXT connection"


def run(bench: Bench) -> list[Row]:
    count = QUICK_RECORDS if bench.plan.quick else bench.plan.count(RECORDS)
    connections = QUICK_CONNECTIONS if bench.plan.quick else CONNECTIONS
    case = f"Kreps: 100 B, librdkafka default batching, acks=1, 1 partition, {count:,} records"
    throughput = {
        (listener, direction): Row(
            "11",
            f"{direction} over {listener}{' (SCRAM-SHA-512)' if listener.startswith('SASL') else ''}; {case}",
            SHORT["confluent"],
            primary="records/s",
            goal=Goal(">= 50 % of PLAINTEXT", 0.50, on="ratio") if listener != "PLAINTEXT" else None,
        )
        for direction in ("produce", "consume")
        for listener in THROUGHPUT
    }
    handshakes = {
        h.label: Row(
            "11",
            f"connection set-up, {h.label}; {connections} connections one after another",
            SHORT["headwater"],
            primary="ms/connection",
        )
        for h in HANDSHAKES
    }
    rows = [*throughput.values(), *handshakes.values()]
    why = why_not(bench, "confluent") or ("" if bench.zk_connect else "no ZooKeeper")
    if why:
        for r in rows:
            r.unavailable = why
            bench.add(r)
        return rows
    try:
        with secured_broker(bench) as sb:
            _throughput(bench, sb, throughput, count)
            _handshakes(bench, sb, handshakes, connections)
    except (GeneratorError, RuntimeError, OSError) as e:
        for r in rows:
            if not r.figures:
                r.unavailable = f"failed: {e}"
    for r in rows:
        bench.add(r)
    return rows
