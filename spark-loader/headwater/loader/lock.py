"""One load of a warehouse at a time: a ZooKeeper lock across hosts, or a file lock on one host.

``loader.lock.zookeeper.connect`` (the clusters' ZooKeeper, ``host:port[,host:port][/chroot]``)
selects a kazoo ``Lock`` at ``<chroot>/headwater-loader/locks/<sha256 of warehouse.path>``: every
loader of one warehouse, on any host, takes turns, whatever URI the warehouse is (hdfs://, s3a://,
a shared mount). Without it the lock is a file in this host's temp directory (``flock``), which
orders loads on one host only: enough when one host runs the loader (the ansible ``loader`` group
holds one), not for a warehouse several hosts load.

The ZooKeeper lock is only as good as its session: kazoo reports SUSPENDED when the connection
drops (the lock may still be ours) and LOST when the session expired (the lock is gone, another
loader may take it). :meth:`LockGuard.check` raises unless the session is connected and never
lost since the lock was taken; the loader calls it before each step that publishes.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import socket
import tempfile
import threading
from collections.abc import Iterator

log = logging.getLogger("headwater.loader.lock")

__all__ = ["LockGuard", "LockLostError", "LockTimeoutError", "warehouse_lock"]


class LockTimeoutError(RuntimeError):
    """Another load held the warehouse's lock for longer than ``loader.lock.timeout.ms``."""


class LockLostError(RuntimeError):
    """The ZooKeeper session that held the lock was suspended or lost: not safe to publish."""


class LockGuard:
    """What a load checks before publishing: that it still holds the lock."""

    def __init__(self, what: str, session: object = None) -> None:
        self.what = what
        self.session = session  # the KazooClient holding a ZooKeeper lock (tests expire it)
        self._lost: str | None = None
        self._mutex = threading.Lock()

    def lose(self, reason: str) -> None:
        with self._mutex:
            self._lost = self._lost or reason

    def check(self) -> None:
        with self._mutex:
            if self._lost:
                raise LockLostError(f"{self.what}: {self._lost}; not publishing (another load may hold it now)")


def _digest(warehouse: str) -> str:
    return hashlib.sha256(warehouse.encode()).hexdigest()[:16]


@contextlib.contextmanager
def warehouse_lock(warehouse: str, zookeeper: str | None = None, timeout_ms: int = 3_600_000) -> Iterator[LockGuard]:
    """Hold the warehouse's lock for a run (waiting up to ``timeout_ms`` for another load)."""
    if zookeeper:
        with _zookeeper_lock(warehouse, zookeeper, timeout_ms) as guard:
            yield guard
        return
    path = os.path.join(tempfile.gettempdir(), f"headwater-load-{_digest(warehouse)}.lock")
    with open(path, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("another load of %s runs on this host; waiting for it (a host-local lock: %s)", warehouse, path)
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield LockGuard(f"the file lock {path}")
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@contextlib.contextmanager
def _zookeeper_lock(warehouse: str, connect: str, timeout_ms: int) -> Iterator[LockGuard]:
    from kazoo.client import KazooState
    from kazoo.exceptions import LockTimeout

    from headwater.zk.client import kazoo_client

    hosts, slash, chroot = connect.partition("/")
    path = f"{'/' + chroot.rstrip('/') if slash and chroot else ''}/headwater-loader/locks/{_digest(warehouse)}"
    client = kazoo_client(hosts, session_timeout_s=10.0)
    guard = LockGuard(f"the ZooKeeper lock {path} on {hosts}", client)
    held = threading.Event()

    def on_state(state: str) -> None:
        if held.is_set() and state == KazooState.LOST:
            guard.lose("the ZooKeeper session expired (LOST)")
        elif held.is_set() and state == KazooState.SUSPENDED:
            guard.lose("the ZooKeeper connection was suspended")

    client.add_listener(on_state)
    client.start(timeout=30)
    try:
        lock = client.Lock(path, identifier=f"{socket.gethostname()}:{os.getpid()}")
        if not lock.acquire(blocking=False):
            holders = lock.contenders()
            log.info("another load of %s holds %s (%s); waiting for it", warehouse, path, ", ".join(holders) or "?")
            try:
                lock.acquire(timeout=timeout_ms / 1000.0)
            except LockTimeout:
                raise LockTimeoutError(
                    f"another load of {warehouse} ({', '.join(lock.contenders()[:1]) or '?'}) held {path} for "
                    f"longer than loader.lock.timeout.ms={timeout_ms}"
                ) from None
        held.set()
        log.info("holding %s for the load of %s", path, warehouse)
        try:
            yield guard
        finally:
            held.clear()
            with contextlib.suppress(Exception):  # a lost session has released it already
                lock.release()
    finally:
        client.stop()
        client.close()
