"""SCRAM credentials held by each broker (Kafka's CredentialCache), kept current by Kafka's config
change notifications: a login never reads ZooKeeper (security review L3).

ZooKeeper layout (Kafka 2.3's; written by ``headwater configs --entity-type users`` and by
``kafka-configs --zookeeper``)::

    /config/users/<sanitized user>              {"version":1,"config":{"SCRAM-SHA-512":"salt=...,..."}}
    /config/changes/config_change_<10 digits>   {"version":2,"entity_path":"users/<sanitized user>"}

User names are stored ``Sanitizer``-encoded (``alice@X`` is ``alice%40X``: headwater.zk.config.sanitize).

At start the cache reads every ``/config/users/*`` node, then watches ``/config/changes``: each
notification with a higher sequence number than the last one processed names an entity; for
``users/<name>`` the user's node is read again (absent: the user is gone). Notifications for other
entity types (topics, brokers, clients, ``users/<name>/clients/<id>`` quotas) are skipped here;
every notification is also handed to ``listeners`` (the client quotas, broker/quotas.py), so the
broker has one watch on ``/config/changes``.
As Kafka's ZkNodeChangeNotificationListener does, notifications older than 15 minutes are deleted
(any broker may delete them; every broker has long processed them by then).

A credential changed or deleted in ZooKeeper without a notification is not seen until the next
notification for that user or a restart -- as in Kafka. All state is touched on the event loop.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from kazoo.exceptions import NoNodeError

from headwater.broker.zk import ZooKeeper
from headwater.scram import (
    CHANGES_PATH,
    MECHANISMS,
    USERS_PATH,
    ScramCredential,
    ScramError,
    user_config_path,
)
from headwater.zk.config import desanitize

log = logging.getLogger(__name__)

#: Kafka's ZkNodeChangeNotificationListener default changeExpirationMs: 15 minutes.
CHANGE_EXPIRATION_MS = 15 * 60 * 1000
_PREFIX = "config_change_"


def _credentials(data: bytes | None) -> dict[str, ScramCredential]:
    """Every SCRAM mechanism's credential in a ``/config/users/<name>`` node (malformed ones skipped)."""
    try:
        doc: Any = json.loads(data) if data else None
    except ValueError:
        return {}
    config = doc.get("config") if isinstance(doc, dict) else None
    out: dict[str, ScramCredential] = {}
    for mech, text in (config or {}).items():
        if mech in MECHANISMS and isinstance(text, str):
            try:
                out[mech] = ScramCredential.from_kafka(text)
            except ScramError:
                log.warning("ignoring a malformed %s credential in ZooKeeper", mech)
    return out


def changed_user(data: bytes | None) -> str | None:
    """The (sanitized) user a change notification names, or None for any other entity."""
    try:
        doc: Any = json.loads(data) if data else None
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    if doc.get("version") == 2:
        parts = str(doc.get("entity_path", "")).split("/")
        return parts[1] if len(parts) == 2 and parts[0] == "users" and parts[1] else None
    if doc.get("version") == 1 and doc.get("entity_type") == "users":  # the older form
        name = doc.get("entity_name")
        return str(name) if name and "/" not in str(name) else None
    return None


class CredentialCache:
    """``get(user, mechanism)``: the user's credential, from memory."""

    def __init__(
        self, zk: ZooKeeper, change_expiration_ms: int = CHANGE_EXPIRATION_MS, now_ms: Callable[[], float] | None = None
    ) -> None:
        self.zk = zk
        self.change_expiration_ms = change_expiration_ms
        self._now_ms = now_ms or (lambda: time.time() * 1000)
        self._users: dict[str, dict[str, ScramCredential]] = {}  # desanitized name -> mechanism -> credential
        self._last_change = -1
        self._created: dict[str, int] = {}  # notification -> its ctime (ms), until purged
        self._children: list[str] | None = None  # the latest children not yet processed
        self._worker: asyncio.Task[None] | None = None
        #: called with every new notification's data, in order (client quotas re-read their entity)
        self.listeners: list[Callable[[bytes | None], Awaitable[None]]] = []

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._users.get(user, {}).get(mechanism)

    async def start(self) -> None:
        await self.zk.call(self.zk.client.ensure_path, USERS_PATH)
        for name in await self.zk.children(USERS_PATH):
            await self._reload(name)
        log.info("SCRAM credentials of %d user(s) loaded", len(self._users))
        self.zk.watch_children(CHANGES_PATH, self._on_changes)

    async def stop(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            await asyncio.gather(self._worker, return_exceptions=True)

    def _on_changes(self, children: list[str]) -> None:
        self._children = children
        if self._worker is None or self._worker.done():
            self._worker = asyncio.ensure_future(self._process())

    async def _process(self) -> None:
        while self._children is not None:
            children, self._children = self._children, None
            try:
                await self._process_notifications(children)
            except Exception as e:  # ZooKeeper trouble: the next change (or reconnection) tries again
                log.warning("processing config change notifications failed: %r", e)

    async def _process_notifications(self, children: list[str]) -> None:
        for name in sorted(c for c in children if c.startswith(_PREFIX) and c[len(_PREFIX) :].isdigit()):
            seq = int(name[len(_PREFIX) :])
            if seq <= self._last_change:
                continue
            try:
                data, stat = await self.zk.call(self.zk.client.get, f"{CHANGES_PATH}/{name}")
            except NoNodeError:  # purged meanwhile
                self._last_change = seq
                continue
            self._created[name] = stat.ctime
            user = changed_user(data)
            if user is not None:
                await self._reload(user)
            for listener in self.listeners:
                await listener(data)
            self._last_change = seq
        await self._purge()

    async def _reload(self, sanitized: str) -> None:
        user = desanitize(sanitized)
        try:
            data, _ = await self.zk.call(self.zk.client.get, user_config_path(user))
        except NoNodeError:
            data = None
        credentials = _credentials(data)
        if credentials:
            self._users[user] = credentials
        else:
            self._users.pop(user, None)
        log.info("SCRAM credentials of user %r now: %s", user, sorted(credentials) or "none")

    async def _purge(self) -> None:
        cutoff = self._now_ms() - self.change_expiration_ms
        for name in [n for n, created in self._created.items() if created < cutoff]:
            del self._created[name]
            try:
                await self.zk.call(self.zk.client.delete, f"{CHANGES_PATH}/{name}")
            except NoNodeError:
                pass
