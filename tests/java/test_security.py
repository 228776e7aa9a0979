"""kafka-clients 2.3.1 and 4.x over SSL and SASL_SSL (SCRAM-SHA-512) against a secured 3-broker
Headwater cluster: the fixture of tests/compat/test_security_matrix.py (brokers talking to each other
over TLS with client certificates, a SCRAM user in ZooKeeper), with the CA in a PKCS12 truststore as a
Java client takes it (2.3.1 reads no PEM truststore; KIP-651 came in 2.7).

Each cell produces records with acks=all over the secured listener to a topic of 3 replicas with
``min.insync.replicas=2`` and reads every one back over the same listener, in one JVM: it passes only
if the Java client's TLS handshake (hostname verified against the broker's certificate) and SCRAM
login work and the records crossed the brokers' TLS links. A wrong SCRAM password is refused with
Kafka's SaslAuthenticationException. The README's client matrix cites these cells."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from headwater.testing import java
from headwater.testing.zookeeper import ZooKeeperServer
from tests.compat.test_security_matrix import SCRAM_PW, SCRAM_USER, Cluster, _create_topic, secured_cluster
from tests.java.conftest import CLIENTS, Driver

RECORDS = 50
STOREPASS = "matrix-trust"


@pytest.fixture(scope="module")
def secured(java_deps: None, zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with secured_cluster(zookeeper, tmp_path_factory.mktemp("java-secured")) as c:
        yield c


@pytest.fixture(scope="module")
def truststore(secured: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The test CA in a PKCS12 truststore (keytool of the JDK the tests run)."""
    path = tmp_path_factory.mktemp("java-trust") / "truststore.p12"
    keytool = java.java_home() / "bin" / "keytool"
    subprocess.run(
        [
            *(str(keytool), "-importcert", "-noprompt", "-alias", "headwater-test-ca"),
            *("-file", str(secured.ca.ca_file), "-keystore", str(path), "-storetype", "PKCS12"),
            *("-storepass", STOREPASS),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    yield path


def _configs(protocol: str, truststore: Path, password: str = SCRAM_PW) -> list[str]:
    out = [
        f"security.protocol={protocol}",
        f"ssl.truststore.location={truststore}",
        "ssl.truststore.type=PKCS12",
        f"ssl.truststore.password={STOREPASS}",
    ]
    if protocol == "SASL_SSL":
        module = "org.apache.kafka.common.security.scram.ScramLoginModule"
        out += [
            "sasl.mechanism=SCRAM-SHA-512",
            f'sasl.jaas.config={module} required username="{SCRAM_USER}" password="{password}";',
        ]
    return out


@pytest.mark.parametrize("protocol", ["SSL", "SASL_SSL"])
@pytest.mark.parametrize("version", sorted(CLIENTS))
def test_java_client_round_trip(secured: Cluster, truststore: Path, version: str, protocol: str) -> None:
    topic = f"java-{version}-{protocol}".lower().replace("_", "-").replace(".", "-")
    _create_topic(secured, topic)
    driver = Driver(version)
    bootstrap = secured.bootstrap(protocol)
    produced, consumed = driver.run_all(
        "roundtrip", bootstrap, topic, str(RECORDS), "100", "acks=all", *_configs(protocol, truststore)
    )
    assert "error" not in produced, produced
    assert sorted(produced["acked"]) == [[0, o] for o in range(RECORDS)]
    records = consumed["records"]
    assert [(r["p"], r["o"], r["k"], r["len"]) for r in records] == [(0, i, f"k{i}", 100) for i in range(RECORDS)]
    assert all(r["headers"] == {"h": str(i), "n": "x"} for i, r in enumerate(records))


@pytest.mark.parametrize("version", sorted(CLIENTS))
def test_java_client_wrong_scram_password_is_refused(secured: Cluster, truststore: Path, version: str) -> None:
    configs = _configs("SASL_SSL", truststore, password="not-the-password")
    cmd = Driver(version).command(
        "produce", secured.bootstrap("SASL_SSL"), "java-refused", "1", "10", "max.block.ms=30000", *configs
    )
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    # the send fails (its future, or send() itself) with Kafka's SaslAuthenticationException
    assert "SaslAuthenticationException" in proc.stdout + proc.stderr, (proc.returncode, proc.stdout, proc.stderr)
    assert '"acked":[[' not in proc.stdout.replace(" ", "")
