"""The services' security settings: Kafka's client property names per cluster alias (the mirror's
and the audit's MM2-style files), unprefixed for the loader; secrets from files or the environment,
never in a repr, a log line or an error message."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from kazoo.exceptions import NoNodeError

from headwater.audit.config import AuditConfigError
from headwater.audit.config import parse as parse_audit
from headwater.client.discovery import registered_brokers
from headwater.client.security import ClientSecurity, SecurityConfigError, cluster_security, describe
from headwater.loader.job import LoaderConfigError, parse_config
from headwater.mirror.config import MirrorConfigError
from headwater.mirror.config import parse as parse_mirror
from headwater.testing.tls import TestCA

SECRET = "s3cr3t-Pa55"


@pytest.fixture(scope="module")
def ca_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(TestCA(tmp_path_factory.mktemp("ca")).ca_file)


def mirror_props(ca: str, **extra: str) -> dict[str, str]:
    return {
        "clusters": "dc1, agg",
        "dc1.zookeeper.connect": "zk1:2181",
        "agg.bootstrap.servers": "agg1:9094",
        "dc1->agg.enabled": "true",
        **extra,
    }


def test_mirror_takes_security_per_alias_over_the_unprefixed_defaults(
    ca_file: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret_file = tmp_path / "mirror.password"
    secret_file.write_text(SECRET + "\n")
    monkeypatch.setenv("HW_TEST_MIRROR_PW", SECRET + "-env")
    config = parse_mirror(
        mirror_props(
            ca_file,
            **{
                # every cluster: SASL_SSL with SCRAM-SHA-512 and the lab's CA ...
                "security.protocol": "SASL_SSL",
                "ssl.ca.location": ca_file,
                "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": "mirror",
                "sasl.password": f"file:{secret_file}",
                # ... but the aggregate cluster's password from the environment, its CA by Java's name
                "agg.sasl.password": "env:HW_TEST_MIRROR_PW",
                "agg.ssl.truststore.location": ca_file,
            },
        )
    )
    dc1, agg = config.clusters["dc1"].security, config.clusters["agg"].security
    assert (dc1.protocol, dc1.sasl_mechanism, dc1.sasl_username, dc1.sasl_password, dc1.ca_location) == (
        "SASL_SSL",
        "SCRAM-SHA-512",
        "mirror",
        SECRET,
        ca_file,
    )
    assert (agg.sasl_password, agg.ca_location) == (SECRET + "-env", ca_file)
    assert config.unknown == []  # security names are known settings, prefixed or not
    assert SECRET not in repr(config)
    assert describe(dc1) == "SASL_SSL (SCRAM-SHA-512 as mirror)"

    # per alias only: the other cluster stays PLAINTEXT; sasl.jaas.config as Java clients write it
    jaas = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="mirror" password="j-pw";'
    only_dc1 = parse_mirror(
        mirror_props(
            ca_file,
            **{
                "dc1.security.protocol": "SASL_PLAINTEXT",
                "dc1.sasl.mechanism": "SCRAM-SHA-256",
                "dc1.sasl.jaas.config": jaas,
            },
        )
    )
    assert only_dc1.clusters["agg"].security == ClientSecurity()
    assert (only_dc1.clusters["dc1"].security.sasl_username, only_dc1.clusters["dc1"].security.sasl_password) == (
        "mirror",
        "j-pw",
    )
    assert "j-pw" not in repr(only_dc1)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"dc1.security.protocol": "TLS"}, r"^dc1\.security\.protocol=TLS"),
        ({"agg.security.protocol": "SASL_SSL"}, r"^agg\.security\.protocol=SASL_SSL needs sasl\.mechanism"),
        (
            {"dc1.security.protocol": "SASL_SSL", "dc1.sasl.mechanism": "PLAIN", "dc1.sasl.username": "m"},
            r"^dc1\.security\.protocol=SASL_SSL needs sasl\.username and sasl\.password",
        ),
        (
            {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN",
                "sasl.username": "m",
                "sasl.password": "file:/nonexistent/hw-pw",
            },
            r"^dc1\.sasl\.password: cannot read /nonexistent/hw-pw",
        ),
        ({"agg.security.protocol": "SSL", "agg.ssl.ca.location": "/nonexistent/ca.pem"}, r"^agg\.ssl\.ca\.location"),
    ],
)
def test_mirror_security_errors_name_the_aliased_property(ca_file: str, extra: dict[str, str], message: str) -> None:
    with pytest.raises(MirrorConfigError, match=message):
        parse_mirror(mirror_props(ca_file, **extra))


def test_a_secret_in_a_file_that_is_not_a_pem_never_reaches_the_error(tmp_path: Path) -> None:
    bad = tmp_path / "not-a-ca.pem"
    bad.write_text(SECRET)
    with pytest.raises(SecurityConfigError) as e:
        cluster_security({"dc1.security.protocol": "SSL", "dc1.ssl.ca.location": str(bad)}, "dc1.")
    assert str(e.value).startswith("dc1.ssl.ca.location: cannot load") and SECRET not in str(e.value)


def test_audit_takes_security_per_alias(ca_file: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HW_TEST_AUDIT_PW", SECRET)
    config = parse_audit(
        {
            "clusters": "dc1, agg",
            "dc1.bootstrap.servers": "dc1:9092",
            "agg.bootstrap.servers": "agg:9094",
            "agg.security.protocol": "SASL_SSL",
            "agg.ssl.ca.location": ca_file,
            "agg.sasl.mechanism": "SCRAM-SHA-512",
            "agg.sasl.username": "audit",
            "agg.sasl.password": "env:HW_TEST_AUDIT_PW",
        }
    )
    assert config.security["dc1"] == ClientSecurity()
    agg = config.security["agg"]
    assert (agg.protocol, agg.sasl_username, agg.sasl_password) == ("SASL_SSL", "audit", SECRET)
    assert SECRET not in repr(config)
    with pytest.raises(AuditConfigError, match=r"^agg\.security\.protocol=SASL_SSL needs sasl\.mechanism"):
        parse_audit({"clusters": "agg", "agg.bootstrap.servers": "agg:9094", "agg.security.protocol": "SASL_SSL"})


def test_loader_takes_kafka_names_and_audit_prefixed_overrides(ca_file: str, tmp_path: Path) -> None:
    secret_file = tmp_path / "loader.password"
    secret_file.write_text(SECRET)
    props = {
        "bootstrap.servers": "agg:9094",
        "topics": "page-views",
        "warehouse.path": str(tmp_path / "wh"),
        "audit.bootstrap.servers": "agg:9094",
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": ca_file,
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "loader",
        "sasl.password": f"file:{secret_file}",
        "audit.sasl.username": "loader-audit",
    }
    config = parse_config(props)
    assert (config.security.protocol, config.security.sasl_username, config.security.sasl_password) == (
        "SASL_SSL",
        "loader",
        SECRET,
    )
    assert (config.audit_security.sasl_username, config.audit_security.sasl_password) == ("loader-audit", SECRET)
    # the data source gets the properties as written: the reference, not the secret
    assert config.security_properties["sasl.password"] == f"file:{secret_file}"
    assert SECRET not in repr(config)
    with pytest.raises(LoaderConfigError, match=r"^security\.protocol=SASL_SSL needs sasl\.mechanism"):
        parse_config({**props, "sasl.mechanism": ""})


def test_the_mirror_logs_how_it_connects_never_the_secret(
    ca_file: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """What the services log about a cluster's security (cli.py / service.py use ``describe``)."""
    sec = cluster_security(
        {
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": ca_file,
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "mirror",
            "sasl.password": SECRET,
        }
    )
    with caplog.at_level(logging.DEBUG):
        logging.getLogger("headwater.test").info("cluster dc1: %s; %r", describe(sec), sec)
    assert "SASL_SSL (SCRAM-SHA-512 as mirror)" in caplog.text and SECRET not in caplog.text
    assert describe(None) == "PLAINTEXT" and describe(ClientSecurity(protocol="SSL")) == "SSL"


class FakeZk:
    def __init__(self, registrations: dict[str, dict[str, Any]]) -> None:
        self.registrations = registrations

    def get_children(self, path: str) -> list[str]:
        return list(self.registrations)

    def get(self, path: str) -> tuple[bytes, None]:
        bid = path.rsplit("/", 1)[1]
        if bid not in self.registrations:
            raise NoNodeError
        return json.dumps(self.registrations[bid]).encode(), None


def test_zookeeper_discovery_picks_the_listener_of_the_clients_protocol() -> None:
    zk = FakeZk(
        {
            "1": {
                "endpoints": ["INTERNAL://b1:9092", "WAN://b1-wan:9094", "SASL_SSL://b1:9095"],
                "listener_security_protocol_map": {"INTERNAL": "PLAINTEXT", "WAN": "SASL_SSL", "SASL_SSL": "SASL_SSL"},
            },
            "2": {"endpoints": ["PLAINTEXT://b2:9092", "SSL://b2:9093"]},  # no map: a listener named after its protocol
        }
    )
    assert registered_brokers(zk) == {1: ("b1", 9092), 2: ("b2", 9092)}  # type: ignore[arg-type]
    assert registered_brokers(zk, "SASL_SSL") == {1: ("b1-wan", 9094), 2: ("b2", 9092)}  # type: ignore[arg-type]
    assert registered_brokers(zk, "SSL") == {1: ("b1", 9092), 2: ("b2", 9093)}  # type: ignore[arg-type]
