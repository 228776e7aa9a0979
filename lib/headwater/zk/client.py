"""One connection policy for every kazoo client Headwater starts.

kazoo's default reconnect backoff doubles up to one hour (``retry_max_delay=3600``): after ZooKeeper
has been away for a few minutes, a client would try again only minutes apart, long after the ensemble
is back. Kafka's ZooKeeper client tries again about every second. Every Headwater process (broker,
ZooKeeper consumer, discovery, loader lock, mirror, CLI, bench) therefore builds its client with
:func:`kazoo_client`: reconnect attempts forever, jittered, at most :data:`RECONNECT_MAX_DELAY_S`
(±40 % jitter) apart. After a session expiry kazoo connects with a new session on its own; what the
caller registered or watched is the caller's to restore (each listens for ``KazooState.LOST``).

A connect string is Kafka's ``host:port[,host:port...][/chroot]``; :func:`split_chroot` separates
the chroot, which callers create (as Kafka does) before applying it.
"""

from __future__ import annotations

from typing import Any

from kazoo.client import KazooClient
from kazoo.retry import KazooRetry

#: the longest pause between two reconnect attempts (before jitter)
RECONNECT_MAX_DELAY_S = 2.0
#: the first pause; doubled after each failed attempt up to RECONNECT_MAX_DELAY_S
RECONNECT_FIRST_DELAY_S = 0.1
#: kazoo's jitter: each pause is multiplied by a uniform factor in [1 - j, 1 + j]
RECONNECT_JITTER = 0.4


def connection_retry() -> KazooRetry:
    """Reconnect forever, jittered, never more than ~RECONNECT_MAX_DELAY_S apart."""
    return KazooRetry(
        max_tries=-1,
        delay=RECONNECT_FIRST_DELAY_S,
        backoff=2,
        max_jitter=RECONNECT_JITTER,
        max_delay=RECONNECT_MAX_DELAY_S,
    )


def split_chroot(connect: str) -> tuple[str, str]:
    """``"h1:2181,h2:2181/kafka/dc1"`` -> ``("h1:2181,h2:2181", "/kafka/dc1")``; no chroot -> ``""``."""
    hosts, slash, chroot = connect.partition("/")
    chroot = chroot.strip("/")
    return hosts, ("/" + chroot if slash and chroot else "")


def kazoo_client(hosts: str, *, session_timeout_s: float = 10.0, **kwargs: Any) -> KazooClient:
    """A (not yet started) KazooClient for ``hosts`` with Headwater's connection policy.

    ``hosts`` may carry a chroot; kazoo then applies it to every path. Extra keyword arguments go to
    KazooClient unchanged.
    """
    return KazooClient(hosts=hosts, timeout=session_timeout_s, connection_retry=connection_retry(), **kwargs)
