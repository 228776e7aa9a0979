"""What the broker never shows (H1, L6), the security properties it refuses (L7), and how it names
peers (M1: hosts, M2: certificate principals), as Kafka 2.3 does. Review: security-2026-11-26."""

from __future__ import annotations

import datetime
import json
import logging
import ssl
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from headwater.broker.config import ConfigError, config_from_props
from headwater.broker.dynamic_config import DYNAMIC_BROKER_CONFIGS, DynamicBrokerConfig, describe
from headwater.broker.network import certificate_principal, peer_address
from headwater.testing.tls import TestCA

SECRETS = ("broker-secret", "alice-secret", "key-pw", "scram-broker-pw", "custom-value-1")
PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="broker" password="broker-secret" user_broker="broker-secret" user_alice="alice-secret";'
)
SCRAM_JAAS = (
    'org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" password="scram-broker-pw";'
)


@pytest.fixture(scope="module")
def keystore(tmp_path_factory: pytest.TempPathFactory) -> tuple[TestCA, Path]:
    ca = TestCA(tmp_path_factory.mktemp("pki"))
    return ca, ca.issue("broker", password="key-pw").keystore


def secured_props(keystore: Path, ca: TestCA, **extra: str) -> dict[str, str]:
    return {
        "zookeeper.connect": "zk:2181",
        "broker.id": "1",
        "listeners": "PLAINTEXT://:9092,SASL_PLAINTEXT://:9093,SSL://:9094,INTERNAL://:9095",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SSL:SSL,INTERNAL:SASL_SSL",
        "inter.broker.listener.name": "INTERNAL",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "listener.name.internal.sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.internal.scram-sha-512.sasl.jaas.config": SCRAM_JAAS,
        "ssl.keystore.location": str(keystore),
        "ssl.key.password": "key-pw",
        "ssl.truststore.location": str(ca.ca_file),
        "some.plugin.setting": "custom-value-1",  # unknown: Kafka treats an unknown type as sensitive
        **extra,
    }


# -- H1: DescribeConfigs(BROKER) ------------------------------------------------------------------


def test_describe_broker_configs_returns_no_secret_and_marks_them_sensitive(keystore: tuple[TestCA, Path]) -> None:
    ca, ks = keystore
    dyn = DynamicBrokerConfig(config_from_props(secured_props(ks, ca)), zk=None)  # type: ignore[arg-type]
    entries = {e["name"]: e for e in describe(dyn, "1", None, True)}
    text = json.dumps(list(entries.values()))
    for needle in ("password=", "user_", *SECRETS):
        assert needle not in text, needle
    for name in (
        "listener.name.sasl_plaintext.plain.sasl.jaas.config",
        "listener.name.internal.scram-sha-512.sasl.jaas.config",
        "ssl.key.password",
        "some.plugin.setting",
    ):
        e = entries[name]
        assert e["value"] is None and e["is_sensitive"], e
        assert e["synonyms"] and all(s["value"] is None for s in e["synonyms"]), e
    # what is known and not a secret is still shown, as Kafka shows it
    for name, value in (
        ("broker.id", "1"),
        ("ssl.truststore.location", str(ca.ca_file)),
        ("sasl.enabled.mechanisms", "PLAIN,SCRAM-SHA-512"),
    ):
        assert (entries[name]["value"], entries[name]["is_sensitive"]) == (value, False), name
    assert not any(entries[name]["is_sensitive"] for name in DYNAMIC_BROKER_CONFIGS)


def test_dynamic_config_log_lines_hide_sensitive_values(caplog: pytest.LogCaptureFixture) -> None:
    dyn = DynamicBrokerConfig(config_from_props({"zookeeper.connect": "zk:2181"}), zk=None)  # type: ignore[arg-type]
    stored = {"version": 1, "config": {"message.max.bytes": "2000", "listener.name.x.ssl.key.password": "zk-secret"}}
    with caplog.at_level(logging.INFO, logger="headwater.broker.dynamic_config"):
        dyn._on_broker(json.dumps(stored).encode(), object())
        stored["config"]["message.max.bytes"] = "lots"
        dyn._on_broker(json.dumps(stored).encode(), object())
    assert "message.max.bytes" in caplog.text and "zk-secret" not in caplog.text


# -- L6: repr, file:/env: secrets -----------------------------------------------------------------


def test_no_secret_in_the_repr_of_the_broker_config(keystore: tuple[TestCA, Path]) -> None:
    ca, ks = keystore
    cfg = config_from_props(secured_props(ks, ca))
    assert cfg.security["SASL_PLAINTEXT"].plain_users == {"broker": "broker-secret", "alice": "alice-secret"}
    assert cfg.inter_broker_security is not None and cfg.inter_broker_security.password == "scram-broker-pw"
    shown = repr(cfg) + repr(cfg.security) + repr(cfg.inter_broker_security)
    for secret in SECRETS:
        assert secret not in shown, secret


def test_jaas_secrets_and_the_key_password_may_be_file_or_env_references(
    keystore: tuple[TestCA, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ca, ks = keystore
    (tmp_path / "alice").write_text("alice-secret\n")
    (tmp_path / "key").write_text("key-pw\n")
    monkeypatch.setenv("BROKER_PW", "scram-broker-pw")
    cfg = config_from_props(
        secured_props(
            ks,
            ca,
            **{
                "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
                    "org.apache.kafka.common.security.plain.PlainLoginModule required "
                    f'user_alice="file:{tmp_path / "alice"}";'
                ),
                "listener.name.internal.scram-sha-512.sasl.jaas.config": (
                    'org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" '
                    'password="env:BROKER_PW";'
                ),
                "ssl.key.password": f"file:{tmp_path / 'key'}",
            },
        )
    )
    assert cfg.security["SASL_PLAINTEXT"].plain_users == {"alice": "alice-secret"}
    assert cfg.inter_broker_security is not None and cfg.inter_broker_security.password == "scram-broker-pw"
    monkeypatch.delenv("BROKER_PW")
    with pytest.raises(ConfigError, match="environment variable BROKER_PW is not set") as e:
        config_from_props(
            secured_props(
                ks,
                ca,
                **{
                    "listener.name.internal.scram-sha-512.sasl.jaas.config": (
                        'org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" '
                        'password="env:BROKER_PW";'
                    )
                },
            )
        )
    assert "scram-sha-512.sasl.jaas.config" in str(e.value)


# -- L7: unknown and unsupported security properties ------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("ssl.client.authentication", "required", "ssl.client.authentication is not a known security property"),
        ("sasl.enabeld.mechanisms", "PLAIN", "sasl.enabeld.mechanisms is not a known security property"),
        ("listener.name.ssl.ssl.clientauth", "required", "listener.name.ssl.ssl.clientauth is not a known"),
        ("listener.name.nosuch.ssl.client.auth", "required", "listener.name.nosuch is not one of the listeners"),
        ("ssl.principal.mapping.rules", "RULE:^CN=(.*?),.*$/$1/", "ssl.principal.mapping.rules is not supported"),
        ("ssl.keystore.password", "x", "ssl.keystore.password is not supported"),
        ("ssl.provider", "SunJSSE", "ssl.provider is not supported"),
        ("sasl.kerberos.service.name", "kafka", "GSSAPI, which is not built"),
        ("sasl.jaas.config", PLAIN_JAAS, "listener.name.<listener>.<mechanism>.sasl.jaas.config"),
        ("listener.name.ssl.gssapi.sasl.jaas.config", "x", "GSSAPI is not a supported mechanism"),
        ("ssl.enabled.protocols", "TLSv1.1,TLSv1", "TLS 1.2 is the oldest version offered"),
        ("ssl.enabled.protocols", "SSLv3", "SSLv3 is not a TLS version"),
        ("ssl.cipher.suites", "TLS_RSA_WITH_3DES_EDE_CBC_SHA", "TLS_RSA_WITH_3DES_EDE_CBC_SHA is not supported"),
        ("ssl.cipher.suites", "TLS_AES_128_GCM_SHA256", "TLS 1.3 suites can only be all"),
    ],
)
def test_unknown_or_unsupported_security_properties_are_refused_by_name(
    keystore: tuple[TestCA, Path], key: str, value: str, message: str
) -> None:
    ca, ks = keystore
    with pytest.raises(ConfigError, match=message.replace("$", r"\$").replace("^", r"\^").replace(".", r"\.")) as e:
        config_from_props(secured_props(ks, ca, **{key: value}))
    assert not any(secret in str(e.value) for secret in SECRETS)  # the property is named, never a secret


def test_kafkas_default_mapping_rules_are_accepted(keystore: tuple[TestCA, Path]) -> None:
    ca, ks = keystore
    cfg = config_from_props(secured_props(ks, ca, **{"ssl.principal.mapping.rules": "DEFAULT"}))
    assert cfg.raw["ssl.principal.mapping.rules"] == "DEFAULT" and "ssl.principal.mapping.rules" not in cfg.unknown


def test_enabled_protocols_and_cipher_suites_shape_the_tls_contexts(keystore: tuple[TestCA, Path]) -> None:
    ca, ks = keystore
    cfg = config_from_props(secured_props(ks, ca, **{"listener.name.ssl.ssl.enabled.protocols": "TLSv1.3"}))
    tls = cfg.security["SSL"].ssl
    assert tls is not None and tls.server_context("SSL").minimum_version == ssl.TLSVersion.TLSv1_3
    other = cfg.security["INTERNAL"].ssl
    assert other is not None and other.server_context("INTERNAL").minimum_version == ssl.TLSVersion.TLSv1_2
    # Kafka 2.3's default list: TLSv1 and TLSv1.1 are never offered here
    cfg = config_from_props(secured_props(ks, ca, **{"ssl.enabled.protocols": "TLSv1.2,TLSv1.1,TLSv1"}))
    tls = cfg.security["SSL"].ssl
    assert tls is not None and tls.versions[0] == ssl.TLSVersion.TLSv1_2
    # IANA names as Kafka takes them, TLS 1.2 only (no TLS 1.3 suite listed)
    suites = "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"
    cfg = config_from_props(secured_props(ks, ca, **{"ssl.cipher.suites": suites}))
    tls = cfg.security["SSL"].ssl
    assert tls is not None and tls.ciphers == "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305"
    ctx = tls.server_context("SSL")
    assert ctx.maximum_version == ssl.TLSVersion.TLSv1_2
    assert {c["name"] for c in ctx.get_ciphers() if c["protocol"] == "TLSv1.2"} == {
        "ECDHE-ECDSA-AES256-GCM-SHA384",
        "ECDHE-ECDSA-CHACHA20-POLY1305",
    }


def test_the_lab_and_ansible_security_properties_are_accepted(keystore: tuple[TestCA, Path]) -> None:
    """The keys deploy/compose (as KAFKA_* variables) and deploy/ansible (roles/broker/vars) set."""
    ca, ks = keystore
    lab = {
        "zookeeper.connect": "zk:2181",
        "listeners": "INTERNAL://:9092,EXTERNAL://:9094,WAN://:9093",
        "listener.security.protocol.map": "INTERNAL:SASL_PLAINTEXT,EXTERNAL:PLAINTEXT,WAN:SASL_SSL",
        "inter.broker.listener.name": "INTERNAL",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.internal.scram-sha-512.sasl.jaas.config": SCRAM_JAAS,
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(ks),
        "ssl.key.password": "key-pw",
        "ssl.truststore.location": str(ca.ca_file),
    }
    config_from_props(lab)
    ansible = {
        "zookeeper.connect": "zk:2181",
        "listeners": "PLAINTEXT://:9092,SECURE://:9093",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SECURE:SASL_SSL",
        "inter.broker.listener.name": "SECURE",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(ks),
        "ssl.key.password": "key-pw",
        "ssl.truststore.location": str(ca.ca_file),
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.secure.scram-sha-512.sasl.jaas.config": SCRAM_JAAS,
    }
    config_from_props(ansible)


def test_broker_start_with_a_misspelt_security_property_exits_with_its_name(tmp_path: Path) -> None:
    props = tmp_path / "server.properties"
    props.write_text(
        "zookeeper.connect=127.0.0.1:1\nlisteners=PLAINTEXT://127.0.0.1:0\nssl.client.authentification=required\n"
    )
    run = subprocess.run(
        [sys.executable, "-m", "headwater.cli.main", "broker", "start", "-c", str(props)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2, run
    assert "ssl.client.authentification is not a known security property" in run.stderr
    assert "Traceback" not in run.stderr


# -- M1: the peer's host as Kafka's ACLs see it -----------------------------------------------------


def test_peer_host_is_what_java_getHostAddress_gives() -> None:
    assert peer_address(("::ffff:10.0.0.66", 4000, 0, 0)) == "10.0.0.66:4000"
    assert peer_address(("127.0.0.1", 5)) == "127.0.0.1:5"
    assert peer_address(("::1", 6, 0, 0)) == "0:0:0:0:0:0:0:1:6"
    assert peer_address(("fe80::1%eth0", 7, 0, 2)) == "fe80:0:0:0:0:0:0:1%eth0:7"


# -- M2: certificate principals, RFC 2253 as X500Principal.getName() --------------------------------

A = x509.NameAttribute
RDN = x509.RelativeDistinguishedName

#: subjects (in DER order, least specific first) and the principal name JDK 17's
#: X500Principal.getName() gives for a certificate with that subject (run by hand, 2026-11-26)
SUBJECTS: list[tuple[str, x509.Name, str]] = [
    (
        "legit",
        x509.Name(
            [
                A(NameOID.ORGANIZATION_NAME, "Example"),
                A(NameOID.ORGANIZATIONAL_UNIT_NAME, "ops"),
                A(NameOID.COMMON_NAME, "broker"),
            ]
        ),
        "CN=broker,OU=ops,O=Example",
    ),
    (
        "comma in the CN",
        x509.Name([A(NameOID.ORGANIZATION_NAME, "Example"), A(NameOID.COMMON_NAME, "broker,OU=ops")]),
        "CN=broker\\,OU\\=ops,O=Example",
    ),
    (
        "multi-valued RDN",
        x509.Name(
            [
                RDN([A(NameOID.ORGANIZATION_NAME, "Example")]),
                RDN([A(NameOID.ORGANIZATIONAL_UNIT_NAME, "ops"), A(NameOID.COMMON_NAME, "broker")]),
            ]
        ),
        "OU=ops+CN=broker,O=Example",
    ),
    (
        "DC, UID, emailAddress",
        x509.Name(
            [
                A(NameOID.DOMAIN_COMPONENT, "com"),
                A(NameOID.DOMAIN_COMPONENT, "example"),
                A(NameOID.USER_ID, "alice"),
                A(NameOID.EMAIL_ADDRESS, "alice@example.com"),
                A(NameOID.COMMON_NAME, "Alice"),
            ]
        ),
        "CN=Alice,1.2.840.113549.1.9.1=#1611616c696365406578616d706c652e636f6d,UID=alice,DC=example,DC=com",
    ),
    (
        "specials",
        x509.Name([A(NameOID.COMMON_NAME, ' #lead=a+b<c>d;e"f\\g trail ')]),
        'CN=\\ \\#lead\\=a\\+b\\<c\\>d\\;e\\"f\\\\g trail\\ ',
    ),
    (
        "keywords and OIDs",
        x509.Name(
            [
                A(NameOID.SERIAL_NUMBER, "1234"),
                A(NameOID.TITLE, "boss"),
                A(NameOID.COUNTRY_NAME, "US"),
                A(NameOID.STATE_OR_PROVINCE_NAME, "CA"),
                A(NameOID.LOCALITY_NAME, "SF"),
                A(NameOID.STREET_ADDRESS, "1 Main"),
                A(NameOID.COMMON_NAME, "ünï"),
            ]
        ),
        "CN=ünï,STREET=1 Main,L=SF,ST=CA,C=US,2.5.4.12=#0c04626f7373,2.5.4.5=#130431323334",
    ),
]


def _certificate(subject: x509.Name) -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.DER)


@pytest.mark.parametrize(("case", "subject", "expected"), SUBJECTS, ids=[s[0] for s in SUBJECTS])
def test_certificate_principal_is_x500principal_getname(case: str, subject: x509.Name, expected: str) -> None:
    assert certificate_principal(_certificate(subject)) == expected


def test_subjects_that_used_to_collide_get_distinct_principals() -> None:
    names: dict[str, Any] = {}
    for case, subject, _ in SUBJECTS[:3]:
        names.setdefault(certificate_principal(_certificate(subject)), []).append(case)
    assert len(names) == 3, names
