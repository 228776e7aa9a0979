"""ZooKeeper SASL settings read the Kafka way, and Kafka 2.3's default znode ACLs (review M6)."""

from __future__ import annotations

from pathlib import Path

import pytest
from kazoo.security import CREATOR_ALL_ACL, OPEN_ACL_UNSAFE, READ_ACL_UNSAFE

from headwater.zk.client import SecureKazooClient, kazoo_client
from headwater.zk.security import ZkSecurityError, default_acls, parse_jaas_file, zk_security

JAAS = """
/* the brokers' and tools' ZooKeeper login */
KafkaServer {
  org.apache.kafka.common.security.scram.ScramLoginModule required username="b" password="x";
};
Client {
  // DIGEST-MD5
  org.apache.zookeeper.server.auth.DigestLoginModule required
  username="broker"
  password="p#a//ss\\"word";
};
"""


def test_jaas_file_sections_and_options() -> None:
    sections = parse_jaas_file(JAAS, "test")
    assert set(sections) == {"KafkaServer", "Client"}
    module, options = sections["Client"][0]
    assert module == "org.apache.zookeeper.server.auth.DigestLoginModule"
    assert options == {"username": "broker", "password": 'p#a//ss"word'}


def test_login_from_kafka_opts_as_kafka_tools_take_it(tmp_path: Path) -> None:
    jaas = tmp_path / "zk.jaas"
    jaas.write_text(JAAS)
    env = {"KAFKA_OPTS": f"-Xmx1g -Djava.security.auth.login.config={jaas} -Dzookeeper.sasl.client.username=zk"}
    sec = zk_security(environ=env)
    assert (sec.username, sec.service, sec.set_acl) == ("broker", "zk", True)  # tools: ACLs when secure
    assert sec.sasl_options() == {
        "mechanism": "DIGEST-MD5",
        "username": "broker",
        "password": 'p#a//ss"word',
        "service": "zk",
    }
    assert "p#a" not in repr(sec)
    # the broker's rule: zookeeper.set.acl decides; zookeeper.sasl.client=false turns SASL off
    assert zk_security(environ=env, set_acl=False).set_acl is False
    assert not zk_security({"zookeeper.sasl.client": "false"}, environ=env).sasl
    # another section, named as ZooKeeper's client property names it
    assert not zk_security({"zookeeper.sasl.clientconfig": "Other"}, environ=env).sasl
    # properties win over KAFKA_OPTS
    other = tmp_path / "other.jaas"
    other.write_text('Client { x.DigestLoginModule required username="tool" password="t"; };')
    assert zk_security({"java.security.auth.login.config": str(other)}, environ=env).username == "tool"


def test_no_login_without_jaas_and_refusals(tmp_path: Path) -> None:
    assert not zk_security(environ={}).sasl
    assert zk_security(environ={}).sasl_options() is None
    with pytest.raises(ZkSecurityError, match=r"zookeeper\.set\.acl is true"):
        zk_security(environ={}, set_acl=True)
    krb = tmp_path / "krb.jaas"
    krb.write_text('Client { com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true keyTab="/k"; };')
    with pytest.raises(ZkSecurityError, match="Kerberos"):
        zk_security({"java.security.auth.login.config": str(krb)}, environ={})
    with pytest.raises(ZkSecurityError, match="cannot read the JAAS file"):
        zk_security({"java.security.auth.login.config": str(tmp_path / "missing")}, environ={})


def test_kafka_default_acls_per_path() -> None:
    secure = CREATOR_ALL_ACL + READ_ACL_UNSAFE
    assert default_acls("/brokers/ids/1") == secure
    assert default_acls("/kafka-acl/Topic/t") == secure
    assert default_acls("/config/topics/t") == secure
    assert default_acls("/config") == secure
    for sensitive in ("/config/users", "/config/users/alice", "/config/brokers/1", "/delegation_token/tokens/x"):
        assert default_acls(sensitive) == CREATOR_ALL_ACL, sensitive
    assert default_acls("/consumers") == OPEN_ACL_UNSAFE
    assert default_acls("/consumers/g/ids") == secure  # only the root is open, as in Kafka


def test_kazoo_client_takes_the_login_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    jaas = tmp_path / "zk.jaas"
    jaas.write_text(JAAS)
    monkeypatch.setenv("KAFKA_OPTS", f"-Djava.security.auth.login.config={jaas}")
    client = kazoo_client("127.0.0.1:1")
    assert isinstance(client, SecureKazooClient)
    assert client._connection.sasl_options["username"] == "broker"
    monkeypatch.delenv("KAFKA_OPTS")
    client = kazoo_client("127.0.0.1:1")
    assert not isinstance(client, SecureKazooClient) and client._connection.sasl_options is None
