"""A ZooKeeper session for the commands that write ZooKeeper directly, as Kafka 2.3's tools do with
``--zookeeper`` (``headwater configs --entity-type users``, ``headwater acls``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from headwater.cli.topics import CliError


@contextmanager
def zookeeper_session(connect: str) -> Iterator[Any]:
    """A started kazoo client for ``connect`` (``host:port[/chroot]``), stopped and closed on exit;
    a ZooKeeper that cannot be reached is a readable CLI error."""
    from headwater.zk.client import kazoo_client

    zk = kazoo_client(connect, session_timeout_s=10.0)
    try:
        zk.start(timeout=15)
    except Exception as e:
        raise CliError(f"cannot connect to ZooKeeper at {connect}: {e}") from None
    try:
        yield zk
    finally:
        zk.stop()
        zk.close()
