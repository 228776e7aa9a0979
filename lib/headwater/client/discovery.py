"""Finding brokers through ZooKeeper, as the seeds' producer does (``zk.connect``).

A bootstrap of the form ``zk://host:port[,host:port][/chroot]`` makes the client read the
registrations under ``/brokers/ids`` whenever it needs a first broker to ask for metadata, so
brokers that joined or left since are taken into account. After that, metadata requests (which
list every live broker) keep the client current, as with a plain bootstrap list.
"""

from __future__ import annotations

import asyncio
import json

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from headwater.zk.client import kazoo_client

ZK_SCHEME = "zk://"


def is_zookeeper_bootstrap(bootstrap: object) -> bool:
    return isinstance(bootstrap, str) and bootstrap.startswith(ZK_SCHEME)


def registered_brokers(zk: KazooClient, protocol: str | None = None) -> dict[int, tuple[str, int]]:
    """``{broker id: (host, port)}`` of the first endpoint in each ``/brokers/ids`` registration, or
    with ``protocol`` (``SASL_SSL``, ...) the first whose listener has that security protocol in the
    registration's ``listener_security_protocol_map`` (the first endpoint when none has)."""
    out: dict[int, tuple[str, int]] = {}
    try:
        ids = zk.get_children("/brokers/ids")
    except NoNodeError:
        return out
    for bid in ids:
        try:
            raw = zk.get(f"/brokers/ids/{bid}")[0]
            data = json.loads(raw) if raw else {}
        except (NoNodeError, ValueError):
            continue
        protocols = data.get("listener_security_protocol_map") or {}
        endpoints = [str(u) for u in data.get("endpoints") or []]
        if protocol is not None:
            matching = [u for u in endpoints if protocols.get(u.partition("://")[0], u.partition("://")[0]) == protocol]
            endpoints = matching + [u for u in endpoints if u not in matching]
        for url in endpoints:
            _, _, hostport = str(url).partition("://")
            host, _, port = hostport.rpartition(":")
            if host and port.isdigit() and bid.isdigit():
                out[int(bid)] = (host.strip("[]"), int(port))
                break
        else:
            if data.get("host") and bid.isdigit():
                out[int(bid)] = (str(data["host"]), int(data.get("port", 9092)))
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
