"""More rows of ``headwater bench --versus kafka`` (issue 40 item 1): TLS and SASL_SSL, data stored,
1 MB records and a tuned producer, each on Kafka and on Headwater in the same run.

- ``tls``: one broker of each system (its own chroot on the run's ZooKeeper) listening on PLAINTEXT,
  SSL and SASL_SSL at once (a throwaway EC P-256 CA, ``headwater.testing.tls``; Kafka 2.3.1 reads
  the same key and chain as a PKCS12 keystore, Headwater as PEM; SCRAM-SHA-512 with 4,096 iterations,
  the user written to ZooKeeper by ``headwater configs`` before the broker starts, on both).
  librdkafka at its defaults produces 100-byte records with acks=1 to a fresh 1-partition topic
  through each listener in turn, then reads them back from the start through the same listener
  (after an unmeasured warm-up of a third of the records through each listener).
- ``stored``: "with data stored": a 1-partition topic (RF 1, broker 0) first filled with
  ``stored_bytes`` of 10 KiB records (the fill of ``headwater bench`` scenario 4); then 100-byte
  records are produced into it (the append path with a long log: many segments, a big index), and
  the stored records are read back **from the oldest** after their segment files were written out
  (``fsync``) and dropped from the page cache (``posix_fadvise(DONTNEED)`` on that partition's files
  only, nothing else of the machine's cache): the reads come from the disk, not from the newest
  pages of the cache. MiB/s of record values.
- ``large1m``: the ``large`` row at Kafka's default maximum message size: records of 999,900 bytes
  (a 1,000,000-byte value does not fit a batch under the brokers' ``message.max.bytes`` of 1,000,012
  with the batch and record headers), 1 partition RF 1, acks=1, librdkafka defaults.
- ``tuned``: the ``p6`` row (6 partitions RF 1, acks=1, 100 B) with the producer tuned on both sides
  alike: ``linger.ms=100`` and ``batch.num.messages=1000000`` (batches fill to librdkafka's
  ``batch.size`` of 1,000,000 bytes instead of stopping at 10,000 records after 5 ms).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from headwater.testing.kafka import KafkaBroker
from headwater.testing.zookeeper import ZooKeeperServer, free_port

Log = Callable[[str], None]
MIB = 1 << 20

LISTENERS = ("PLAINTEXT", "SSL", "SASL_SSL")
USER, PASSWORD = "bench", "bench-secret"
SCRAM_JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
STORED_SIZE = 10 * 1024
MB_RECORD = 999_900
TUNED = ("linger.ms=100", "batch.num.messages=1000000")


def _loadgen() -> Callable[..., dict[str, Any]]:
    from headwater.bench.versus import loadgen

    return loadgen


def _create(bootstrap: str, name: str, partitions: int, rf: int) -> None:
    from headwater.bench.versus import create_topic

    create_topic(bootstrap, name, partitions, rf)


def _produce(bootstrap: str, topic: str, count: int, size: int, seconds: float, *x: str) -> dict[str, Any]:
    args = ["--count", str(count), "--seconds", str(seconds), "--size", str(size), "--acks", "1"]
    for prop in x:
        args += ["-X", prop]
    res = _loadgen()("confluent-produce", bootstrap, topic, seconds * 3 + 60, *args)
    if res["errors"]:
        raise RuntimeError(f"producing to {topic}: {res['errors']} errors, first: {res['first_error']}")
    return res


def _consume(bootstrap: str, topic: str, count: int, seconds: float, *x: str) -> dict[str, Any]:
    args = ["--count", str(count), "--seconds", str(seconds)]
    for prop in x:
        args += ["-X", prop]
    res = _loadgen()("confluent-consume", bootstrap, topic, seconds * 3 + 60, *args)
    if res["records"] < count:
        raise RuntimeError(f"reading {topic}: {res['records']:,} of {count:,} records in {seconds:.0f}s")
    return res


# --- TLS and SASL_SSL --------------------------------------------------------------------------


def _pkcs12(keystore_pem: Path, out: Path, password: str) -> Path:
    """The PEM chain + key as a PKCS12 keystore: what Kafka 2.3.1 reads (PEM keystores came in 2.7)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    pem = keystore_pem.read_bytes()
    certs = x509.load_pem_x509_certificates(pem)
    key = serialization.load_pem_private_key(pem[pem.index(b"-----BEGIN PRIVATE KEY") :], None)
    data = pkcs12.serialize_key_and_certificates(
        b"broker",
        key,  # type: ignore[arg-type]
        certs[0],
        certs[1:],
        serialization.BestAvailableEncryption(password.encode()),
    )
    out.write_bytes(data)
    return out


def secured_broker(system: str, workdir: Path, zk: ZooKeeperServer, name: str) -> tuple[Any, dict[str, int], Path]:
    """One broker of ``system`` on PLAINTEXT, SSL and SASL_SSL (SCRAM-SHA-512), not yet started:
    (broker, port per listener, the CA file)."""
    from headwater.cli.main import main as cli_main
    from headwater.testing.cluster import LocalBroker
    from headwater.testing.tls import TestCA

    d = workdir / name
    ca = TestCA(d / "ca")
    cert = ca.issue("broker")
    zk_connect = f"{zk.connect}/{name}"
    user = ["--entity-type", "users", "--entity-name", USER]
    add = ["--add-config", f"SCRAM-SHA-512=[iterations=4096,password={PASSWORD}]"]
    if cli_main(["configs", "--zookeeper", zk_connect, "--alter", *user, *add]) != 0:
        raise RuntimeError("could not write the SCRAM user to ZooKeeper")
    common: dict[str, object] = {
        "offsets.topic.replication.factor": 1,
        "offsets.topic.num.partitions": 3,
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": SCRAM_JAAS,
    }
    broker: Any
    if system == "kafka":
        broker = KafkaBroker(d, 0, zk_connect, common)
        store = _pkcs12(cert.keystore, d / "broker.p12", "bench-store")
        broker.properties.update(
            {
                "ssl.keystore.type": "PKCS12",
                "ssl.keystore.location": store,
                "ssl.keystore.password": "bench-store",
                "ssl.key.password": "bench-store",
            }
        )
    else:
        broker = LocalBroker(d, 0, zk_connect, overrides=common)
        broker.properties.update({"ssl.keystore.type": "PEM", "ssl.keystore.location": cert.keystore})
    ports = {"PLAINTEXT": broker.port, "SSL": free_port(), "SASL_SSL": free_port()}
    broker.properties["listeners"] = ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items())
    return broker, ports, ca.ca_file


def client_properties(listener: str, ca_file: Path) -> list[str]:
    props = [f"security.protocol={listener}"]
    if listener != "PLAINTEXT":
        props.append(f"ssl.ca.location={ca_file}")
    if listener == "SASL_SSL":
        props += ["sasl.mechanism=SCRAM-SHA-512", f"sasl.username={USER}", f"sasl.password={PASSWORD}"]
    return props


def tls(
    system: str,
    workdir: Path,
    zk: ZooKeeperServer,
    name: str,
    count: int,
    seconds: float,
    rows: dict[str, Any],
    log: Log,
    warm: bool = True,
    listeners: tuple[str, ...] = LISTENERS,
) -> None:
    broker, ports, ca_file = secured_broker(system, workdir, zk, name)
    broker.start(timeout=120)
    try:
        for listener in listeners if warm else ():  # a warm-up through each listener (JIT, TLS contexts), unmeasured
            props = client_properties(listener, ca_file)
            topic = f"versus-warm-{listener.lower().replace('_', '-')}"
            _create(broker.bootstrap, topic, 1, 1)
            first = _produce(f"127.0.0.1:{ports[listener]}", topic, max(1, count // 3), 100, seconds, *props)
            _consume(f"127.0.0.1:{ports[listener]}", topic, first["acked"], seconds, *props)
        for listener in listeners:
            bootstrap = f"127.0.0.1:{ports[listener]}"
            props = client_properties(listener, ca_file)
            topic = f"versus-{listener.lower().replace('_', '-')}"
            _create(broker.bootstrap, topic, 1, 1)
            res = _produce(bootstrap, topic, count, 100, seconds, *props)
            c = _consume(bootstrap, topic, res["acked"], seconds, *props)
            key = {"PLAINTEXT": "t", "SSL": "ts", "SASL_SSL": "tss"}[listener]
            rows[f"{key}p"].values[system].append(res["acked"] / res["seconds"])
            rows[f"{key}c"].values[system].append(c["records"] / c["seconds"])
            log(
                f"{system} {listener}: produce {res['acked'] / res['seconds']:,.0f} rec/s, "
                f"consume {c['records'] / c['seconds']:,.0f} rec/s"
            )
    finally:
        broker.stop()


# --- data stored --------------------------------------------------------------------------------


def evict(root: Path, topic: str) -> int:
    """Write out and drop from the page cache the files of ``topic``'s partitions under ``root``
    (``posix_fadvise(DONTNEED)``, these files only); bytes dropped."""
    dropped = 0
    for part in root.rglob(f"{topic}-*"):
        if not part.is_dir():
            continue
        for f in part.iterdir():
            if not f.is_file():
                continue
            fd = os.open(f, os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                dropped += os.fstat(fd).st_size
            finally:
                os.close(fd)
    return dropped


def stored(
    system: str,
    bootstrap: str,
    root: Path,
    stored_bytes: int,
    count: int,
    seconds: float,
    rows: dict[str, Any],
    log: Log,
) -> None:
    topic = f"versus-stored-{root.name}"
    _create(bootstrap, topic, 1, 1)
    n = max(1, stored_bytes // STORED_SIZE)
    _produce(bootstrap, topic, n, STORED_SIZE, 600)
    res = _produce(bootstrap, topic, count, 100, seconds)
    rows["sp"].values[system].append(res["acked"] / res["seconds"])
    dropped = evict(root, topic)
    c = _consume(bootstrap, topic, n, 600)
    rows["sc"].values[system].append(c["bytes"] / MIB / c["seconds"])
    log(
        f"{system} stored: {n:,} x 10 KiB first; produce {res['acked'] / res['seconds']:,.0f} rec/s into it; "
        f"{dropped / MIB:,.0f} MiB dropped from the page cache, read from the oldest at "
        f"{rows['sc'].values[system][-1]:.1f} MiB/s"
    )


# --- 1 MB records and the tuned producer --------------------------------------------------------


def large_1m(system: str, bootstrap: str, count: int, rows: dict[str, Any], log: Log) -> None:
    topic = "versus-1mb"
    _create(bootstrap, topic, 1, 1)
    res = _produce(bootstrap, topic, count, MB_RECORD, 120)
    rows["mp"].values[system].append(res["acked"] * MB_RECORD / MIB / res["seconds"])
    c = _consume(bootstrap, topic, res["acked"], 120)
    rows["mc"].values[system].append(c["bytes"] / MIB / c["seconds"])
    log(
        f"{system} 1 MB: produce {rows['mp'].values[system][-1]:.1f} MiB/s, consume {rows['mc'].values[system][-1]:.1f}"
    )


def tuned(system: str, bootstrap: str, count: int, seconds: float, rows: dict[str, Any], log: Log) -> None:
    topic = "versus-tuned"
    _create(bootstrap, topic, 6, 1)
    res = _produce(bootstrap, topic, count, 100, seconds, *TUNED)
    rows["tp6"].values[system].append(res["acked"] / res["seconds"])
    log(f"{system} tuned p6: {res['acked'] / res['seconds']:,.0f} rec/s")


# --- client quotas (issue 42's scenario 12, beside Kafka) --------------------------------------


def quotas(
    system: str,
    workdir: Path,
    zk: ZooKeeperServer,
    name: str,
    count: int,
    seconds: float,
    run: int,
    rows: dict[str, Any],
    log: Log,
    latency_seconds: float | None = None,
) -> None:
    """Scenario 12 on one broker of ``system`` (its own chroot): the paper's 200-byte records in
    batches of 50 (acks=1) produced and read back with client quotas off (no quota entity) and on
    (``clients/<default>``: 1 TB/s byte rates and ``request_percentage`` 10^9, so every request is
    measured and checked and none throttled), the order alternating with ``run``, after an unmeasured
    warm-up; the broker's CPU per MiB each way. Then the quiet producer's p99 alone and beside a noisy
    one offered 5x its 1 MiB/s quota (``clients/noisy``). Both brokers read the quotas from
    ZooKeeper's ``/config/clients`` (written by ``headwater configs --zookeeper``, the format of
    Kafka 2.3's ``kafka-configs.sh --zookeeper``) and apply them on its change notification."""
    import time

    from headwater.bench.procmon import cpu_seconds
    from headwater.bench.scenarios import quotas as q
    from headwater.cli.main import main as cli_main
    from headwater.testing.cluster import LocalBroker

    zk_connect = f"{zk.connect}/{name}"
    props: dict[str, object] = {"offsets.topic.replication.factor": 1, "offsets.topic.num.partitions": 3}
    broker: Any = (
        KafkaBroker(workdir / name, 0, zk_connect, props)
        if system == "kafka"
        else LocalBroker(workdir / name, 0, zk_connect, overrides=props)
    )
    clients = ["configs", "--zookeeper", zk_connect, "--alter", "--entity-type", "clients"]
    batch = (f"batch.num.messages={q.BATCH}", "linger.ms=5")  # scenario 12's Workload(200, batch=50)

    def set_quotas(on: bool) -> None:
        rates = f"producer_byte_rate={q.UNLIMITED},consumer_byte_rate={q.UNLIMITED}"
        change = (
            ["--add-config", f"{rates},request_percentage={q.UNLIMITED_PERCENT}"]
            if on
            else ["--delete-config", "producer_byte_rate,consumer_byte_rate,request_percentage"]
        )
        if cli_main([*clients, "--entity-default", *change]) != 0:
            raise RuntimeError("could not change the clients/<default> quota in ZooKeeper")
        time.sleep(2.0)  # the broker applies the change notification (as scenario 12)

    broker.start(timeout=180)
    try:
        warm = "versus-quotas-warm"
        _create(broker.bootstrap, warm, 1, 1)
        first = _produce(broker.bootstrap, warm, max(1, count // 3), q.SIZE, seconds, *batch)
        _consume(broker.bootstrap, warm, first["acked"], seconds)
        cpu: dict[str, tuple[float, float]] = {}
        on = False
        for mode in ("off", "on") if run % 2 == 0 else ("on", "off"):
            if (mode == "on") != on:
                set_quotas(mode == "on")
                on = mode == "on"
            topic = f"versus-quotas-{mode}"
            _create(broker.bootstrap, topic, 1, 1)
            t = cpu_seconds(broker.pid)
            res = _produce(broker.bootstrap, topic, count, q.SIZE, seconds, *batch)
            produced = cpu_seconds(broker.pid) - t
            t = cpu_seconds(broker.pid)
            c = _consume(broker.bootstrap, topic, res["acked"], seconds)
            consumed = cpu_seconds(broker.pid) - t
            mib = res["acked"] * q.SIZE / MIB
            cpu[mode] = (produced * 1000 / mib, consumed * 1000 / (c["bytes"] / MIB))
            rows[f"q{mode}"].values[system].append(cpu[mode][0])
            log(
                f"{system} quotas {mode}: produce {res['acked'] / res['seconds']:,.0f} rec/s, broker CPU "
                f"{cpu[mode][0]:.2f} ms/MiB; consume {cpu[mode][1]:.2f} ms/MiB"
            )
        if on:
            set_quotas(False)
        # a ratio only where both CPU figures were measured (the kernel counts CPU in 10 ms ticks:
        # a small run may show none)
        for key, i in (("qpr", 0), ("qcr", 1)):
            if cpu["on"][i] > 0 and cpu["off"][i] > 0:
                rows[key].values[system].append(cpu["on"][i] / cpu["off"][i])
        if cli_main([*clients, "--entity-name", "noisy", "--add-config", f"producer_byte_rate={q.NOISY_QUOTA}"]):
            raise RuntimeError("could not set the noisy client's quota")
        time.sleep(2.0)
        p99 = {}
        for noisy in (False, True) if run % 2 == 0 else (True, False):
            topic = f"versus-quotas-latency-{int(noisy)}"
            _create(broker.bootstrap, topic, 1, 1)
            p99[noisy] = q._quiet_p99(broker.bootstrap, topic, latency_seconds or q.LATENCY_S, noisy)
        rows["qq"].values[system].append(p99[True] / p99[False])
        log(f"{system} quotas: quiet producer's p99 {p99[False]:.1f} ms alone, {p99[True]:.1f} ms beside the noisy one")
    finally:
        broker.stop()
