"""The mirror's consumer group in a source cluster's ZooKeeper, in the seeds' layout.

::

    /consumers/<group>/ids/<consumer id>     ephemeral   {"version": 1, "subscription": {"<regex>": 1},
                                                          "pattern": "white_list", "timestamp": "<ms>"}
    /consumers/<group>/owners/<topic>/<p>    ephemeral   the owning consumer id
    /consumers/<group>/offsets/<topic>/<p>   persistent  the next source offset to mirror (decimal); its
                                                         znode version is the partition's fencing token
    /consumers/<group>/mirror-target/<topic>/<p>
                                             persistent  the target partition's offset right after the
                                                         mirror's last acknowledged append of the records
                                                         before that source offset (decimal); written
                                                         with it in one transaction (see Mirror: where a
                                                         new owner looks for copies the old one made)
    /consumers/<group>/mirror-rates/<consumer id>
                                             ephemeral   the byte rates of the partitions that member
                                                         copies (:func:`encode_rates`)
    /consumers/<group>/mirror-placement      persistent  the load-aware placement the group's leader
                                                         computed (:func:`encode_placement`)

Assignment is rendezvous hashing (highest random weight) of each partition over the live
members: every member computes the same owner for every partition from the member list alone
(and the placement node, below), and a member joining or leaving moves only the partitions it gains or loses — the rest keep
flowing (no stop-the-world rebalance, uReplicator's complaint about MirrorMaker 1). A partition
moves hands through its owner node: the old owner commits its acknowledged offset, then deletes
the node; the new owner claims it (retrying while the node still exists), then reads the offset.

Load-aware placement (:mod:`headwater.mirror.placement`). Every member publishes, every half
``placement.rebalance.interval.seconds``, the bytes per second the target acknowledged for each
partition it copies, a moving rate over the last interval::

    {"version": 1, "window_ms": 60000, "timestamp": <ms>, "rates": {"<topic>": {"<p>": <bytes/s>}}}

(a partition it took over since the last publication is not listed yet). The leader (smallest
consumer id) reads them every interval and writes the placement, as overrides of the rendezvous
owner, only when they change, with the znode's version (two leaders for a moment cannot both
write the same generation)::

    {"version": 1, "generation": <n>, "leader": "<consumer id>", "timestamp": <ms>,
     "owners": {"<topic>": {"<p>": "<consumer id>"}}}

(``generation``: how many placements were written, the znode's version + 1.) A partition not listed, or listed with a member that is not live, goes to its rendezvous owner.
Every member watches the node and rebalances when it changes: a moved partition is handed over
as on a join or a leave (commit, release, claim), the others keep their copiers.

Fencing. A member whose ZooKeeper session expires loses its owner nodes at once, but may learn
of it only when it reconnects: meanwhile another member can claim the partition. So

- the member holds a lease: a thread makes a ZooKeeper round trip every second, and the mirror
  produces and commits only while the last one that succeeded was *sent* less than
  :data:`LEASE_S` ago (:meth:`ZkGroup.may_produce`) -- well within the session timeout, so a
  member that was paused (GC, SIGSTOP, a cut to ZooKeeper) stops before it can act on a session
  that expired meanwhile; on SUSPENDED (connection lost) it stops at once, and on LOST every
  copier stops;
- a member that claims a partition writes its offset node back unchanged (:meth:`take_over`),
  which moves the node's version; every commit is a ``set_data`` with the version this member
  last saw, in the same transaction as the target offset. A commit by a member that has been
  taken over fails with :class:`FencedError` and changes nothing.

The methods here block (kazoo); the mirror calls them from a worker thread. Watches call
``on_change`` on kazoo's thread.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from kazoo.client import KazooState
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from headwater.zk.client import kazoo_client
from headwater.zk.consumers import ConsumerRegistration, decode_offset, decode_owner, encode_offset, encode_owner
from headwater.zk.json import ZnodeFormatError, json_object, to_json
from headwater.zk.paths import (
    BROKER_TOPICS,
    DELETE_TOPICS,
    consumer_ids_path,
    consumer_offset_path,
    consumer_offsets_path,
    consumer_owner_path,
    consumer_owners_path,
    mirror_placement_path,
    mirror_rates_path,
    mirror_target_path,
    topic_path,
)
from headwater.zk.topics import decode_assignment

log = logging.getLogger("headwater.mirror.group")

TopicPartition = tuple[str, int]
T = TypeVar("T")

#: ZooKeeper session timeout of the group's client (seconds)
SESSION_TIMEOUT_S = 10.0
#: the member produces and commits only within this long of its last ZooKeeper round trip
LEASE_S = SESSION_TIMEOUT_S * 0.4


class FencedError(Exception):
    """A commit refused because another member has taken the partition over since this one claimed it."""


def owner_of(tp: TopicPartition, members: Iterable[str]) -> str | None:
    """The member that owns ``tp``: the highest hash of (member, topic, partition)."""
    best: tuple[bytes, str] | None = None
    for m in members:
        h = hashlib.blake2b(f"{m}\0{tp[0]}\0{tp[1]}".encode(), digest_size=8).digest()
        if best is None or (h, m) > best:
            best = (h, m)
    return None if best is None else best[1]


def assign(partitions: Iterable[TopicPartition], members: Iterable[str], me: str) -> set[TopicPartition]:
    """The partitions ``me`` owns among ``members``."""
    ms = sorted(set(members))
    return {tp for tp in partitions if owner_of(tp, ms) == me}


def _by_topic(values: dict[TopicPartition, T]) -> dict[str, dict[str, T]]:
    out: dict[str, dict[str, T]] = {}
    for (topic, partition), value in sorted(values.items()):
        out.setdefault(topic, {})[str(partition)] = value
    return out


def _from_topics(doc: object, path: str, kind: type | tuple[type, ...], what: str) -> dict[TopicPartition, Any]:
    if not isinstance(doc, dict):
        raise ZnodeFormatError(f"{path}: not a JSON object of topics")
    out: dict[TopicPartition, Any] = {}
    for topic, partitions in doc.items():
        if not isinstance(partitions, dict):
            raise ZnodeFormatError(f"{path}: {topic}: not a JSON object of partitions")
        for p, value in partitions.items():
            if not p.isdigit() or isinstance(value, bool) or not isinstance(value, kind):
                raise ZnodeFormatError(f"{path}: {topic}-{p}: {value!r} is not {what}")
            out[(topic, int(p))] = value
    return out


def encode_rates(rates: dict[TopicPartition, float], window_s: float) -> bytes:
    """A member's ``mirror-rates`` node (see the module's docstring)."""
    return to_json(
        {
            "version": 1,
            "window_ms": round(window_s * 1000),
            "timestamp": int(time.time() * 1000),
            "rates": _by_topic({tp: round(r, 1) for tp, r in rates.items()}),
        }
    )


def decode_rates(path: str, data: bytes | None) -> dict[TopicPartition, float]:
    doc = json_object(data, path)
    return {tp: float(r) for tp, r in _from_topics(doc.get("rates", {}), path, (int, float), "a number").items()}


def encode_placement(owners: dict[TopicPartition, str], generation: int, leader: str) -> bytes:
    """The ``mirror-placement`` node (see the module's docstring)."""
    return to_json(
        {
            "version": 1,
            "generation": generation,
            "leader": leader,
            "timestamp": int(time.time() * 1000),
            "owners": _by_topic(owners),
        }
    )


def decode_placement(path: str, data: bytes | None) -> tuple[dict[TopicPartition, str], int]:
    """The overrides and the generation."""
    doc = json_object(data, path)
    generation = doc.get("generation", 0)
    return _from_topics(doc.get("owners", {}), path, str, "a consumer id"), generation if isinstance(
        generation, int
    ) else 0


def new_consumer_id(group: str) -> str:
    return f"{group}_{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


class ZkGroup:
    def __init__(self, zk_connect: str, group: str, consumer_id: str, subscription: list[str]) -> None:
        self.zk_connect = zk_connect
        self.group = group
        self.consumer_id = consumer_id
        self.subscription = subscription
        # Headwater's one connection policy: reconnect forever, a few seconds apart at most (a cut WAN
        # link to a source ZooKeeper must not push the next try minutes after the link is back).
        self.zk = kazoo_client(zk_connect, session_timeout_s=SESSION_TIMEOUT_S)
        self._on_change: Callable[[], None] = lambda: None
        self.session_lost = False
        #: the connection to ZooKeeper is down and the session may expire: do not produce or commit
        self.suspended = False
        #: partition -> the version of its offset node this member last wrote (its fencing token)
        self._versions: dict[TopicPartition, int] = {}
        self._stopping = False
        #: monotonic time at which the last successful ZooKeeper round trip was sent
        self.last_contact = float("-inf")
        self._lease_stop = threading.Event()
        self._lease_thread: threading.Thread | None = None

    @property
    def _member_path(self) -> str:
        return f"{consumer_ids_path(self.group)}/{self.consumer_id}"

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self, on_change: Callable[[], None], timeout: float = 15.0) -> None:
        self._on_change = on_change
        self.zk.add_listener(self._state)
        self.zk.start(timeout=timeout)
        self.register()
        ChildrenWatch(self.zk, consumer_ids_path(self.group), self._children_changed)
        self.zk.ensure_path(BROKER_TOPICS)
        ChildrenWatch(self.zk, BROKER_TOPICS, self._children_changed)
        DataWatch(self.zk, mirror_placement_path(self.group), self._placement_changed)
        self._lease_thread = threading.Thread(target=self._renew_lease, name=f"lease-{self.group}", daemon=True)
        self._lease_thread.start()

    def may_produce(self) -> bool:
        """Whether this member may still act as the owner of its partitions (see Fencing)."""
        return not self.suspended and not self.session_lost and time.monotonic() - self.last_contact < LEASE_S

    def _renew_lease(self) -> None:
        while not self._lease_stop.is_set():
            sent = time.monotonic()
            try:
                if self.zk.exists(self._member_path) is not None:
                    self.last_contact = sent
            except Exception:  # no contact: the lease runs out
                pass
            self._lease_stop.wait(1.0)

    def register(self) -> None:
        for path in (
            consumer_ids_path(self.group),
            consumer_owners_path(self.group),
            consumer_offsets_path(self.group),
        ):
            self.zk.ensure_path(path)
        registration = ConsumerRegistration(dict.fromkeys(self.subscription, 1), "white_list", int(time.time() * 1000))
        try:
            self.zk.create(self._member_path, registration.encode(), ephemeral=True)
        except NodeExistsError:
            pass
        self.session_lost = False

    def stop(self) -> None:
        self._stopping = True  # kazoo reports LOST when it closes the session itself
        self._lease_stop.set()
        if self._lease_thread is not None:
            self._lease_thread.join(15)
        if self.zk.connected:  # without a connection kazoo would wait for one
            try:
                self.zk.delete(self._member_path)
            except Exception:
                pass
        try:
            self.zk.stop()
            self.zk.close()
        except Exception:
            pass

    def _children_changed(self, _children: list[str]) -> None:
        self._on_change()

    def _placement_changed(self, _data: bytes | None, _stat: object) -> None:
        self._on_change()

    def _state(self, state: str) -> None:  # kazoo's thread: no blocking calls
        if state == KazooState.SUSPENDED:
            self.suspended = True
            log.warning("%s: connection to ZooKeeper lost: producing and committing paused", self.group)
        elif state == KazooState.LOST:
            self.suspended = True
            self.session_lost = True
            if not self._stopping:
                log.warning("%s: ZooKeeper session expired: every partition of this member is given up", self.group)
        elif state == KazooState.CONNECTED:
            if self.suspended and not self.session_lost:
                log.warning("%s: reconnected to ZooKeeper within the session: producing again", self.group)
            self.suspended = False
        if state in (KazooState.LOST, KazooState.CONNECTED):
            self._on_change()

    # -- what ZooKeeper says ---------------------------------------------------------------------

    def members(self) -> list[str]:
        try:
            return sorted(self.zk.get_children(consumer_ids_path(self.group)))
        except NoNodeError:
            return []

    def topics(self) -> list[str]:
        try:
            return sorted(self.zk.get_children(BROKER_TOPICS))
        except NoNodeError:
            return []

    def partitions(self, topic: str) -> list[int]:
        try:
            return sorted(decode_assignment(topic, self.zk.get(topic_path(topic))[0]).partitions)
        except (NoNodeError, ZnodeFormatError):
            return []

    def deleting(self) -> set[str]:
        try:
            return set(self.zk.get_children(DELETE_TOPICS))
        except NoNodeError:
            return set()

    # -- ownership and offsets -------------------------------------------------------------------

    def _owner_path(self, tp: TopicPartition) -> str:
        return consumer_owner_path(self.group, *tp)

    def _offset_path(self, tp: TopicPartition) -> str:
        return consumer_offset_path(self.group, *tp)

    def claim(self, tp: TopicPartition) -> bool:
        """Take the owner node; False while another member still holds it."""
        path = self._owner_path(tp)
        try:
            self.zk.create(path, encode_owner(self.consumer_id), ephemeral=True, makepath=True)
            return True
        except NodeExistsError:
            try:
                return bool(decode_owner(self.zk.get(path)[0]) == self.consumer_id)
            except NoNodeError:
                return False

    def take_over(self, tp: TopicPartition) -> int | None:
        """After :meth:`claim`: the committed offset (None: nothing committed), and the offset node
        rewritten unchanged so its version moves: from here on, a commit of a previous owner
        that did not notice it lost the partition fails (:meth:`commit_offset`)."""
        path = self._offset_path(tp)
        while True:
            try:
                raw, stat = self.zk.get(path)
            except NoNodeError:
                try:
                    self.zk.create(path, encode_offset(-1), makepath=True)
                except NodeExistsError:
                    pass
                continue
            try:
                stat = self.zk.set(path, raw, version=stat.version)
            except BadVersionError:
                continue  # the previous owner committed in between: read again
            self._versions[tp] = stat.version
            try:
                value = decode_offset(path, raw)
            except ZnodeFormatError:
                log.warning("ignoring unreadable committed offset %r of %s-%d", raw, *tp)
                return None
            return value if value >= 0 else None

    def release(self, tp: TopicPartition) -> None:
        self._versions.pop(tp, None)
        path = self._owner_path(tp)
        try:
            if decode_owner(self.zk.get(path)[0]) == self.consumer_id:
                self.zk.delete(path)
        except NoNodeError:
            pass

    def read_offset(self, tp: TopicPartition) -> int | None:
        path = self._offset_path(tp)
        try:
            raw = self.zk.get(path)[0]
        except NoNodeError:
            return None
        try:
            return decode_offset(path, raw)
        except ZnodeFormatError:
            log.warning("ignoring unreadable committed offset %r of %s-%d", raw, *tp)
            return None

    def _target_path(self, tp: TopicPartition) -> str:
        return mirror_target_path(self.group, *tp)

    def has_target_offsets(self, topic: str) -> bool:
        """Whether the fast path (partition for partition) ever committed for this topic."""
        try:
            return bool(self.zk.get_children(mirror_target_path(self.group, topic)))
        except NoNodeError:
            return False

    def read_target_offset(self, tp: TopicPartition) -> int | None:
        """The target offset committed with the source offset (None: not known)."""
        try:
            path = self._target_path(tp)
            return decode_offset(path, self.zk.get(path)[0])
        except (NoNodeError, ZnodeFormatError):
            return None

    def commit_offset(self, tp: TopicPartition, offset: int, target_offset: int | None = None) -> None:
        """Commit the next source offset and, when known, the target offset that goes with it
        (both in one ZooKeeper transaction: a reader never sees one without the other). The
        offset node is written only if its version is still the one this member last wrote;
        otherwise another member took the partition over: :class:`FencedError`."""
        version = self._versions.get(tp)
        if version is None:
            raise FencedError(f"{tp[0]}-{tp[1]} is not claimed by this member")
        if target_offset is not None and self.zk.exists(self._target_path(tp)) is None:
            try:
                self.zk.create(self._target_path(tp), encode_offset(-1), makepath=True)
            except NodeExistsError:
                pass
        t = self.zk.transaction()
        t.set_data(self._offset_path(tp), encode_offset(offset), version=version)
        if target_offset is not None:
            t.set_data(self._target_path(tp), encode_offset(target_offset))
        results = t.commit()
        if any(isinstance(r, BadVersionError) for r in results):
            self._versions.pop(tp, None)
            raise FencedError(
                f"{tp[0]}-{tp[1]}: another member took the partition over (offset node moved past version "
                f"{version}): commit of {offset} refused"
            )
        for result in results:
            if isinstance(result, Exception):
                raise result
        self._versions[tp] = results[0].version

    # -- load-aware placement (see the module's docstring) --------------------------------------

    def publish_rates(self, rates: dict[TopicPartition, float], window_s: float) -> None:
        path = mirror_rates_path(self.group, self.consumer_id)
        data = encode_rates(rates, window_s)
        try:
            self.zk.set(path, data)
        except NoNodeError:
            try:
                self.zk.create(path, data, ephemeral=True, makepath=True)
            except NodeExistsError:
                self.zk.set(path, data)

    def read_rates(self) -> dict[str, dict[TopicPartition, float]]:
        """Every member's published rates (a member that has published none yet is absent)."""
        base = mirror_rates_path(self.group)
        try:
            children = self.zk.get_children(base)
        except NoNodeError:
            return {}
        out: dict[str, dict[TopicPartition, float]] = {}
        for member in children:
            path = f"{base}/{member}"
            try:
                out[member] = decode_rates(path, self.zk.get(path)[0])
            except NoNodeError:
                continue
            except ZnodeFormatError as e:
                log.warning("ignoring unreadable byte rates: %s", e)
        return out

    def read_placement(self) -> tuple[dict[TopicPartition, str], int | None]:
        """The placement's overrides and its znode version (None: no placement written yet)."""
        path = mirror_placement_path(self.group)
        try:
            raw, stat = self.zk.get(path)
        except NoNodeError:
            return {}, None
        try:
            return decode_placement(path, raw)[0], stat.version
        except ZnodeFormatError as e:
            log.warning("ignoring an unreadable placement (every partition goes to its rendezvous owner): %s", e)
            return {}, stat.version

    def write_placement(self, owners: dict[TopicPartition, str], version: int | None) -> bool:
        """Write the placement over the one of ``version`` (None: there was none); False when
        another leader wrote meanwhile (nothing written)."""
        path = mirror_placement_path(self.group)
        try:
            if version is None:
                self.zk.create(path, encode_placement(owners, 1, self.consumer_id), makepath=True)
            else:
                self.zk.set(path, encode_placement(owners, version + 2, self.consumer_id), version=version)
        except (NodeExistsError, BadVersionError):
            return False
        return True
