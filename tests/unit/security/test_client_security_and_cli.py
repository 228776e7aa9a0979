"""Client security properties (Kafka's names) and kafka-configs' --add-config syntax for SCRAM users."""

from __future__ import annotations

from pathlib import Path

import pytest

from headwater.cli.configs import parse_scram_configs
from headwater.cli.topics import CliError
from headwater.client.security import ClientSecurity, SecurityConfigError


def test_client_properties_librdkafka_and_java_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = tmp_path / "pw"
    secret.write_text("from-file\n")
    sec = ClientSecurity.from_properties(
        {
            "security.protocol": "sasl_ssl",
            "ssl.truststore.location": "/ca.pem",
            "sasl.mechanisms": "scram-sha-512",
            "sasl.username": "alice",
            "sasl.password": f"file:{secret}",
        }
    )
    assert (sec.protocol, sec.ca_location, sec.sasl_mechanism, sec.sasl_password) == (
        "SASL_SSL",
        "/ca.pem",
        "SCRAM-SHA-512",
        "from-file",
    )
    assert "from-file" not in repr(sec)
    monkeypatch.setenv("HW_TEST_PW", "from-env")
    jaas = ClientSecurity.from_properties(
        {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required username="bob" password="b";',
        }
    )
    assert (jaas.sasl_username, jaas.sasl_password, jaas.ssl_context()) == ("bob", "b", None)
    env = ClientSecurity.from_properties(
        {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "c",
            "sasl.password": "env:HW_TEST_PW",
        }
    )
    assert env.sasl_password == "from-env"
    assert ClientSecurity.from_properties({}).protocol == "PLAINTEXT"


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"security.protocol": "TLS"}, "security.protocol=TLS"),
        ({"security.protocol": "SASL_SSL"}, "needs sasl.mechanism"),
        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"}, "needs sasl.username"),
        (
            {
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "PLAIN",
                "sasl.username": "a",
                "sasl.password": "env:HW_NOPE_X",
            },
            "HW_NOPE_X is not set",
        ),
    ],
)
def test_client_properties_errors_name_the_property(props: dict[str, str], message: str) -> None:
    with pytest.raises(SecurityConfigError, match=message):
        ClientSecurity.from_properties(props)


def test_add_config_syntax() -> None:
    creds = parse_scram_configs("SCRAM-SHA-512=[iterations=8192,password=a=b],SCRAM-SHA-256=[password=pw]")
    assert creds["SCRAM-SHA-512"].iterations == 8192 and creds["SCRAM-SHA-256"].iterations == 4096
    for bad, message in (
        ("SCRAM-SHA-1=[password=x]", "not one of"),
        ("SCRAM-SHA-512=[iterations=4096]", "needs password"),
        ("SCRAM-SHA-512=[password=x,iterations=10]", "at least 4096"),
        ("SCRAM-SHA-512=[password=x,salt=y]", "unknown option"),
        ("SCRAM-SHA-512=[password=x", "unclosed"),
    ):
        with pytest.raises(CliError, match=message):
            parse_scram_configs(bad)
