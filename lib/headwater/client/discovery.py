"""Finding brokers through ZooKeeper, as the seeds' producer does (``zk.connect``).

A bootstrap of the form ``zk://host:port[,host:port][/chroot]`` makes the client read the
registrations under ``/brokers/ids`` whenever it needs a first broker to ask for metadata, so
brokers that joined or left since are taken into account. After that, metadata requests (which
list every live broker) keep the client current, as with a plain bootstrap list.
"""

from __future__ import annotations

import asyncio

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from headwater.zk import brokers
from headwater.zk.client import kazoo_client
from headwater.zk.json import ZnodeFormatError
from headwater.zk.paths import BROKER_IDS, broker_path

ZK_SCHEME = "zk://"


def is_zookeeper_bootstrap(bootstrap: object) -> bool:
    return isinstance(bootstrap, str) and bootstrap.startswith(ZK_SCHEME)


def registered_brokers(zk: KazooClient, protocol: str | None = None) -> dict[int, tuple[str, int]]:
    """``{broker id: (host, port)}`` of the first endpoint in each ``/brokers/ids`` registration, or
    with ``protocol`` (``SASL_SSL``, ...) the first whose listener has that security protocol in the
    registration's ``listener_security_protocol_map`` (the first endpoint when none has)."""
    out: dict[int, tuple[str, int]] = {}
    try:
        ids = zk.get_children(BROKER_IDS)
    except NoNodeError:
        return out
    for bid in ids:
        if not bid.isdigit():
            continue
        try:
            registration = brokers.decode(int(bid), zk.get(broker_path(int(bid)))[0])
        except (NoNodeError, ZnodeFormatError):
            continue
        endpoint = registration.endpoint_for_protocol(protocol)
        if endpoint is not None:
            out[int(bid)] = (endpoint.host, endpoint.port)
    return out


def _read(connect: str, timeout: float, protocol: str | None) -> list[tuple[str, int]]:
    zk = kazoo_client(connect, session_timeout_s=timeout)
    try:
        zk.start(timeout=timeout)
        return [addr for _, addr in sorted(registered_brokers(zk, protocol).items())]
    finally:
        zk.stop()
        zk.close()


async def brokers_from_zookeeper(
    bootstrap: str, timeout: float = 10.0, protocol: str | None = None
) -> list[tuple[str, int]]:
    """The live brokers' addresses for a ``zk://`` bootstrap (read on a worker thread); with
    ``protocol``, each broker's listener of that security protocol (see :func:`registered_brokers`)."""
    return await asyncio.to_thread(_read, bootstrap[len(ZK_SCHEME) :], timeout, protocol)
