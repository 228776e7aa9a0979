"""``--command-config``: a file the CLI cannot use is a usage error (one line, exit code 2) before
any connection is made; a good one becomes the client's security settings and hides its secrets.

The commands point at a port nothing listens on: a usage error must come before a connection is
tried (a connection attempt would say "cannot connect" with exit code 1 instead).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from headwater.cli.command_config import CommandConfigError, load_command_config
from headwater.cli.main import main as cli_main
from headwater.testing.tls import TestCA
from headwater.testing.zookeeper import free_port

COMMANDS = [
    ["topics", "list"],
    ["configs", "--describe", "--entity-type", "topics", "--entity-name", "t"],
    ["groups", "list"],
    ["delete-records", "--offset-json-file", "{offsets}"],
    ["produce", "--topic", "t"],
    ["consume", "--topic", "t", "--max-messages", "1"],
    ["acls", "--list"],
    ["log-dirs", "--describe"],
    ["leader-election", "--election-type", "preferred", "--all-topic-partitions"],
    ["configs", "--describe", "--entity-type", "brokers", "--entity-name", "1"],
    ["configs", "--alter", "--entity-type", "brokers", "--entity-default", "--add-config", "log.retention.ms=1"],
]


def run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str]:
    code = cli_main(argv)
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err


@pytest.fixture
def offsets(tmp_path: Path) -> str:
    f = tmp_path / "offsets.json"
    f.write_text('{"partitions": [{"topic": "t", "partition": 0, "offset": 1}], "version": 1}')
    return str(f)


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: "-".join(x for x in c if not x.startswith("-"))[:40])
@pytest.mark.parametrize(
    "content, expected",
    [
        (None, "cannot read it"),
        ("security.protocol=SASL_SSH\n", "security.protocol=SASL_SSH: one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"),
        ("security.protocol=SASL_SSL\nsasl.username=a\nsasl.password=p\n", "needs sasl.mechanism"),
        ("security.protocol=SSL\nssl.ca.location=/nonexistent/ca.pem\n", "cannot load the TLS files"),
        ("security.protocol=SSL\nssl.truststore.location=ts.jks\nssl.truststore.type=JKS\n", "JKS is not supported"),
        (
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.username=a\nsasl.password=env:HW_NOT_SET_X\n",
            "environment variable HW_NOT_SET_X is not set",
        ),
    ],
    ids=["missing-file", "unknown-protocol", "no-mechanism", "missing-ca", "jks", "unset-env-secret"],
)
def test_a_file_the_cli_cannot_use_is_one_line_and_exit_code_2(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    offsets: str,
    monkeypatch: pytest.MonkeyPatch,
    command: list[str],
    content: str | None,
    expected: str,
) -> None:
    monkeypatch.delenv("HW_NOT_SET_X", raising=False)
    props = tmp_path / "client.properties"
    if content is not None:
        props.write_text(content)
    argv = [c.replace("{offsets}", offsets) for c in command]
    code, err = run(
        capsys, [*argv[:1], "--bootstrap-server", f"127.0.0.1:{free_port()}", "--command-config", str(props), *argv[1:]]
    )
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"headwater {argv[0]}: error: --command-config {props}: "), lines[0]
    assert expected in lines[0], lines[0]


def test_command_config_after_the_action_and_before_it(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """As --bootstrap-server: kafka-topics users put it anywhere."""
    props = tmp_path / "client.properties"
    props.write_text("security.protocol=BOGUS\n")
    port = free_port()
    for argv in (
        ["topics", "--command-config", str(props), "--bootstrap-server", f"127.0.0.1:{port}", "list"],
        ["topics", "list", "--bootstrap-server", f"127.0.0.1:{port}", "--command-config", str(props)],
    ):
        code, err = run(capsys, argv)
        assert code == 2 and "security.protocol=BOGUS" in err, err


def test_good_file_gives_the_clients_settings_warns_of_unused_keys_and_never_shows_secrets(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ca = TestCA(tmp_path / "ca")
    secret = tmp_path / "admin.secret"
    secret.write_text("s3cret-from-file\n")
    monkeypatch.setenv("HW_KEY_PW", "key-s3cret")
    props = tmp_path / "admin.properties"
    props.write_text(
        "# kafka-topics --command-config admin.properties\n"
        "security.protocol=sasl_ssl\n"
        f"ssl.ca.location={ca.ca_file}\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        '    username="admin" password="jaas-s3cret";\n'
        f"sasl.password=file:{secret}\n"
        "request.timeout.ms=5000\n"
    )
    security = load_command_config(str(props), "headwater topics")
    err = capsys.readouterr().err
    assert err.strip() == (
        f"headwater topics: warning: --command-config {props}: request.timeout.ms is not used "
        "(only security.*, ssl.*, sasl.*)"
    )
    assert security.protocol == "SASL_SSL" and security.uses_tls and security.uses_sasl
    assert security.sasl_mechanism == "SCRAM-SHA-512"
    assert (security.sasl_username, security.sasl_password) == ("admin", "s3cret-from-file")
    assert security.ca_location == str(ca.ca_file)
    assert "s3cret" not in repr(security)


def test_bad_file_error_never_contains_the_password(tmp_path: Path) -> None:
    props = tmp_path / "client.properties"
    props.write_text("security.protocol=SASL_SSL\nsasl.username=alice\nsasl.password=hunter2-secret\n")
    with pytest.raises(CommandConfigError) as e:
        load_command_config(str(props))
    assert "hunter2" not in str(e.value) and e.value.exit_code == 2


def test_acls_takes_zookeeper_or_bootstrap_server_not_both(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    props = tmp_path / "client.properties"
    props.write_text("security.protocol=PLAINTEXT\n")
    port = free_port()
    code, err = run(
        capsys, ["acls", "--zookeeper", f"127.0.0.1:{port}", "--bootstrap-server", f"127.0.0.1:{port}", "--list"]
    )
    assert code == 1 and "give one" in err, err
    code, err = run(capsys, ["acls", "--zookeeper", f"127.0.0.1:{port}", "--command-config", str(props), "--list"])
    assert code == 1 and "--command-config goes with --bootstrap-server" in err, err


def test_configs_users_refuses_a_command_config_it_would_not_use(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    props = tmp_path / "client.properties"
    props.write_text("security.protocol=PLAINTEXT\n")
    argv = ["configs", "--zookeeper", f"127.0.0.1:{free_port()}", "--command-config", str(props)]
    code, err = run(capsys, [*argv, "--describe", "--entity-type", "users"])
    assert code == 1 and "--command-config is for --bootstrap-server" in err, err
