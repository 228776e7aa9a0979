"""A ZooKeeper session for the commands that write ZooKeeper directly, as Kafka 2.3's tools do with
``--zookeeper`` (``headwater configs --entity-type users``, ``headwater acls``).

A secured ZooKeeper (docs/security.md): as Kafka's tools, the session logs in with SASL when
``KAFKA_OPTS`` names a JAAS file with a ``Client`` section
(``KAFKA_OPTS=-Djava.security.auth.login.config=/etc/headwater/zk_jaas.conf``) and then creates its
znodes with Kafka's default ACLs; a command's properties (``--authorizer-properties``) may name the
file instead (``java.security.auth.login.config=...``) and set ``zookeeper.set.acl``."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from headwater.cli.topics import CliError


@contextmanager
def zookeeper_session(connect: str, props: Mapping[str, str] | None = None) -> Iterator[Any]:
    """A started kazoo client for ``connect`` (``host:port[/chroot]``), stopped and closed on exit;
    a ZooKeeper that cannot be reached, or a login it refuses, is a readable CLI error.
    ``props``: the command's own properties (ZooKeeper security settings among them)."""
    from headwater.zk.client import kazoo_client
    from headwater.zk.security import ZkSecurityError, zk_security

    try:
        security = zk_security(props)
    except ZkSecurityError as e:
        raise CliError(str(e)) from None
    zk = kazoo_client(connect, session_timeout_s=10.0, security=security)
    try:
        zk.start(timeout=15)
        zk.exists("/")  # a refused SASL login (AuthFailedError) shows on the first request
    except Exception as e:
        zk.stop()
        zk.close()
        login = f" (SASL login as {security.username} from {security.source})" if security.sasl else ""
        raise CliError(f"cannot connect to ZooKeeper at {connect}{login}: {type(e).__name__} {e}") from None
    try:
        yield zk
    finally:
        zk.stop()
        zk.close()
