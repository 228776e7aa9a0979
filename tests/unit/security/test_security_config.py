"""Listener security properties: what is accepted, and the errors that name the property."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from headwater.broker.config import ConfigError, config_from_props
from headwater.broker.security import parse_jaas
from headwater.testing.tls import TestCA

JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="a\\"b" user_admin="a\\"b" user_x="y";'


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> tuple[TestCA, Path]:
    ca = TestCA(tmp_path_factory.mktemp("pki"))
    return ca, ca.issue("broker", password="pw").keystore


def props(**extra: str) -> dict[str, str]:
    return {"zookeeper.connect": "127.0.0.1:2181", **{k.replace("__", "."): v for k, v in extra.items()}}


def test_jaas_options_and_malformed_jaas() -> None:
    assert parse_jaas(JAAS, "p") == {"username": "admin", "password": 'a"b', "user_admin": 'a"b', "user_x": "y"}
    with pytest.raises(ValueError, match="expected"):
        parse_jaas('username="x"', "p")


def test_listeners_get_their_protocols_and_listener_prefixed_settings(pki: tuple[TestCA, Path]) -> None:
    ca, keystore = pki
    cfg = config_from_props(
        {
            "zookeeper.connect": "127.0.0.1:2181",
            "listeners": "PLAINTEXT://:9092,INTERNAL://:9093,SASL_PLAINTEXT://:9094",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_SSL,SASL_PLAINTEXT:SASL_PLAINTEXT",
            "inter.broker.listener.name": "INTERNAL",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "ssl.keystore.location": str(keystore),
            "ssl.key.password": "pw",
            "listener.name.internal.ssl.truststore.location": str(ca.ca_file),
            "listener.name.internal.ssl.client.auth": "required",
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "listener.name.internal.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.internal.plain.sasl.jaas.config": JAAS,
        }
    )
    assert cfg.unknown == []
    internal = cfg.security["INTERNAL"]
    assert (internal.protocol, internal.sasl_mechanisms, internal.plain_users) == (
        "SASL_SSL",
        ("PLAIN",),
        {"admin": 'a"b', "x": "y"},
    )
    assert internal.ssl is not None and internal.ssl.client_auth == "required"
    assert cfg.security["SASL_PLAINTEXT"].sasl_mechanisms == ("SCRAM-SHA-512",)
    assert cfg.security["PLAINTEXT"].ssl is None
    ib = cfg.inter_broker_security
    assert ib is not None and ib.ssl_context is not None
    assert (ib.sasl_mechanism, ib.username, ib.password) == ("PLAIN", "admin", 'a"b')


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"listeners": "SSL://:9093"}, "ssl.keystore.location is required"),
        ({"listeners": "SSL://:9093", "ssl.keystore.location": "/nonexistent.pem"}, "cannot load a PEM"),
        ({"listeners": "SSL://:9093", "ssl.keystore.type": "PKCS12"}, "ssl.keystore.type=PKCS12 is not supported"),
        ({"listeners": "SASL_PLAINTEXT://:9093"}, "sasl.enabled.mechanisms is required"),
        (
            {"listeners": "SASL_PLAINTEXT://:9093", "sasl.enabled.mechanisms": "GSSAPI"},
            "GSSAPI is not supported",
        ),
        ({"listeners": "SASL_PLAINTEXT://:9093", "sasl.enabled.mechanisms": "PLAIN"}, "PLAIN needs"),
        (
            {"listeners": "SASL_PLAINTEXT://:9093", "sasl.enabled.mechanisms": "SCRAM-SHA-512"},
            "set sasl.mechanism.inter.broker.protocol",
        ),
        ({"listeners": "X://:9093", "listener.security.protocol.map": "X:KERBEROS"}, "unknown security protocol"),
    ],
)
def test_unusable_settings_fail_at_start_up_naming_the_property(extra: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        config_from_props(props(**extra))


def test_client_auth_needs_a_truststore(pki: tuple[TestCA, Path]) -> None:
    _, keystore = pki
    with pytest.raises(ConfigError, match=re.escape("ssl.client.auth=required needs ssl.truststore.location")):
        config_from_props(
            props(
                listeners="SSL://:9093",
                **{"ssl.keystore.location": str(keystore), "ssl.key.password": "pw", "ssl.client.auth": "required"},
            )
        )
    with pytest.raises(ConfigError, match=re.escape("check ssl.key.password")):
        config_from_props(props(listeners="SSL://:9093", **{"ssl.keystore.location": str(keystore)}))


def test_certificate_subject_as_kafka_prints_it(pki: tuple[TestCA, Path]) -> None:
    """Most specific part first; more cases in test_secrets_and_names.py (RFC 2253, as X500Principal)."""
    from cryptography import x509

    from headwater.broker.network import certificate_principal

    ca, _ = pki
    cert = x509.load_pem_x509_certificate(ca.issue("client", organizational_unit="eng").certificate.read_bytes())
    from cryptography.hazmat.primitives.serialization import Encoding

    assert certificate_principal(cert.public_bytes(Encoding.DER)) == "CN=client,OU=eng"
