"""Client quotas (KIP-13, KIP-55, KIP-124) as Kafka 2.3's ClientQuotaManager applies them.

Configs: ``producer_byte_rate``, ``consumer_byte_rate`` (bytes/s) and ``request_percentage``
(percent of one request-handling thread) on the quota entities of the config registry
(:mod:`headwater.zk.config`, :func:`headwater.zk.paths.config_entity_path`)::

    /config/users/<user>/clients/<client-id>    /config/users/<user>    /config/clients/<client-id>
    /config/users/<user>/clients/<default>      /config/users/<default> /config/clients/<default>
    /config/users/<default>/clients/<client-id>
    /config/users/<default>/clients/<default>

Which entity's quota binds a request is Kafka 2.3's DefaultQuotaCallback, per quota type (a type
only sees the entities that set it), first match of the eight levels::

    1 users/<user>/clients/<client-id>    5 users/<default>/clients/<default>
    2 users/<user>/clients/<default>      6 users/<default>
    3 users/<user>                        7 clients/<client-id>
    4 users/<default>/clients/<client-id> 8 clients/<default>, then quota.producer.default /
                                            quota.consumer.default (server.properties, deprecated)

The level that matched names the *sensor* (Kafka's metric tags ``user`` and ``client-id``): at
levels 1, 2, 4, 5 one per (user, client-id), at 3 and 6 one per user shared by all its clients, at
7 and 8 one per client-id shared by all its users. ``<user>`` is the connection's principal name
(``ANONYMOUS`` without authentication), sanitized as Kafka's Sanitizer.

Measuring: each sensor is Kafka's ``Rate`` over ``quota.window.num`` (11) samples of
``quota.window.size.seconds`` (1): the recorded total over the time the live samples cover, that
time padded to at least ``num - 1`` windows (so a new client may burst about ten seconds' worth).
Produce records the request's size, Fetch the response's size, request quotas the time the
request was handled (as a percentage of one thread). A rate above the quota gives
``throttle_time_ms = (rate - quota) / quota * window`` (Kafka's ClientQuotaManager.throttleTime);
a request-quota throttle is at most one window (Kafka's ClientRequestQuotaManager.maxThrottleTimeMs).

Request time (``request_percentage``, KIP-124): the broker handles every request on one event loop,
so "a request handler thread's time" is the time the loop spends in *this request's own steps*:
decoding it, checking its ACLs, the handler's code between its awaits and encoding the response
(what Kafka's network threads do for it, which Kafka 2.3 counts too): network.LoopTime clocks every
step of the connection's task, so a long-polling Fetch or an acks=all Produce waiting for the ISR
is not counted while it waits, as Kafka's purgatory is not. Recorded as percent of one
second per second, against the entity's ``request_percentage``. Every API is measured and may be
throttled (throttle_time_ms in its response where the version has one), except, as Kafka 2.3:
follower fetches, the ClusterAction APIs (LeaderAndIsr, StopReplica, UpdateMetadata,
ControlledShutdown, WriteTxnMarkers), whose time goes to the unlabelled ``exempt-request-time``
sensor, and acks=0 Produce (not recorded). Produce and Fetch take the larger of their byte-rate and
request throttle; a Fetch throttled for either is answered empty and its bytes unrecorded.

While no entity sets a quota type (and no static default), that type measures nothing: no cost per
request and no per-entity series (Kafka measures every client; here the series appear with the first
quota).

Per request, the cost is kept to a few operations (issue 42): a connection resolves its entity's
sensor and bound per quota type once, on its first request of that type (:class:`QuotaSlots` on
``conn.quota_slots``, as Kafka looks a (user, client-id) sensor up only when it is missing), and again
only after a quota change, a new principal or client id, or an expired sensor; then a request reads
the clock once, adds to the current sample and compares the sum of all samples with a precomputed
cap (:class:`Slot`), the rate itself being measured only above that cap.

Throttling, as Kafka 2.3 (KIP-219): the response leaves at once with ``throttle_time_ms`` set,
then the connection is *muted* for that time (network.py: nothing more is read or handled on it);
nothing is ever dropped. A throttled consumer Fetch is answered empty (its bytes unrecorded), as
Kafka's ``getThrottledResponse``; the consumer fetches the same offsets again. Exempt, as in Kafka:
follower fetches (``replica_id >= 0``), and the broker's own work (replication, the group
coordinator's appends) never passes through a client connection's quota.

Changes: brokers read every user and client entity at start-up and re-read one entity when a
``/config/changes`` notification names it (``users/...`` or ``clients/...``), without a restart;
the notifications come from the broker's one watch on ``/config/changes`` (credential_cache.py).
State lives on the event loop only; the clock is injected.
"""

from __future__ import annotations

import functools
import itertools
import logging
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kazoo.exceptions import NoNodeError

from headwater.quotas import (
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    QUOTA_CONFIGS,
    REQUEST_PERCENTAGE,
    entity_znode,
    user_clients_znode,
    validate_quota_config,
)
from headwater.zk import config as zkconfig
from headwater.zk.json import ZnodeFormatError
from headwater.zk.paths import CONFIG_CLIENTS, CONFIG_USERS

if TYPE_CHECKING:
    from headwater.broker.zk import ZooKeeper

log = logging.getLogger(__name__)

#: quota type -> the Kafka metric group its sensors are named after (kafka.server:type=...)
PRODUCE, FETCH, REQUEST = "Produce", "Fetch", "Request"
#: the API keys whose requests the byte-rate quotas measure
PRODUCE_KEY, FETCH_KEY = 0, 1
QUOTA_API_KEYS = frozenset((PRODUCE_KEY, FETCH_KEY))
#: Kafka 2.3's ClusterAction APIs (LeaderAndIsr, StopReplica, UpdateMetadata, ControlledShutdown,
#: WriteTxnMarkers): never throttled by a request quota, their time recorded as exempt
EXEMPT_API_KEYS = frozenset((4, 5, 6, 7, 27))
_CONFIG_OF_TYPE = {PRODUCE: PRODUCER_BYTE_RATE, FETCH: CONSUMER_BYTE_RATE, REQUEST: REQUEST_PERCENTAGE}
#: sensors idle this long are dropped (Kafka's quota sensors expire after an hour)
SENSOR_EXPIRY_S = 3600.0

DEFAULT = zkconfig.DEFAULT_ENTITY
#: ClientQuotas' generations, unique across instances (a connection's QuotaSlots name one)
_GENERATIONS = itertools.count(1)


class Rate:
    """Kafka's ``Rate`` over a ``SampledStat``: ``samples`` windows of ``window_s`` seconds."""

    __slots__ = ("_current", "_starts", "_values", "samples", "sum", "window_s")

    def __init__(self, samples: int, window_s: float, now: float) -> None:
        self.samples = max(samples, 2)
        self.window_s = window_s
        self._starts = [now] * self.samples
        self._values = [0.0] * self.samples
        self._current = 0
        #: every sample's value, expired or not: an upper bound of the measured total, kept in O(1)
        self.sum = 0.0

    def record(self, value: float, now: float) -> None:
        i = self._current
        if now - self._starts[i] >= self.window_s:  # the current sample is complete: reuse the oldest
            i = self._current = (i + 1) % self.samples
            self._starts[i] = now
            self.sum -= self._values[i]
            self._values[i] = 0.0
        self._values[i] += value
        self.sum += value

    def unrecord(self, value: float) -> None:
        self._values[self._current] -= value
        self.sum -= value

    def surely_within(self, bound: float) -> bool:
        """True when the rate cannot exceed ``bound`` (the window is at least ``samples - 1`` windows
        long, and no live total exceeds ``sum``): the per-request check without measuring."""
        return self.sum <= bound * (self.samples - 1) * self.window_s

    def _live(self, now: float) -> tuple[float, float]:
        """(total of the samples not yet expired, start of the oldest of them); pure, so the metrics
        thread may call it too (Kafka purges expired samples; ignoring them is the same measure)."""
        expire = self.samples * self.window_s
        total, oldest = 0.0, now
        for start, value in zip(self._starts, self._values, strict=True):
            if now - start < expire:
                total += value
                oldest = min(oldest, start)
        return total, oldest

    def _size(self, now: float, oldest: float) -> float:
        elapsed = now - oldest
        full = int(elapsed / self.window_s)
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_s
        return elapsed

    def window_size(self, now: float) -> float:
        """Seconds the rate is measured over (Kafka's Rate.windowSize)."""
        return self._size(now, self._live(now)[1])

    def measure(self, now: float) -> float:
        """Units per second."""
        total, oldest = self._live(now)
        size = self._size(now, oldest)
        return total / size if size > 0 else 0.0

    def total(self, now: float) -> float:
        return self._live(now)[0]


class Avg:
    """Kafka's ``Avg`` over the same samples (the ``throttle-time`` metric)."""

    __slots__ = ("count", "rate")

    def __init__(self, samples: int, window_s: float, now: float) -> None:
        self.rate = Rate(samples, window_s, now)
        self.count = Rate(samples, window_s, now)

    def record(self, value: float, now: float) -> None:
        self.rate.record(value, now)
        self.count.record(1.0, now)

    def measure(self, now: float) -> float:
        n = self.count.total(now)
        return self.rate.total(now) / n if n else 0.0


@dataclass(slots=True)
class Sensor:
    """One quota entity's measurements for one quota type (Kafka's quota and throttle-time sensors)."""

    user: str  # metric tag: sanitized user, or "" for a client-id level
    client_id: str  # metric tag: client id, or "" for a user level
    rate: Rate
    throttle: Avg
    last_used: float
    gauges: list[Any] = field(default_factory=list)


class QuotaManager:
    """One quota type's sensors (Kafka's ClientQuotaManager for Produce, Fetch or Request)."""

    def __init__(
        self,
        quota_type: str,
        configs: QuotaConfigs,
        samples: int,
        window_s: float,
        clock: Callable[[], float],
        static_default: float | None = None,
        on_new_sensor: Callable[[str, Sensor, Callable[[], float]], None] | None = None,
        max_throttle_ms: int | None = None,
    ) -> None:
        """``on_new_sensor(quota type, sensor, clock)``: a sensor was created (metrics.py exports it);
        ``max_throttle_ms``: the longest throttle (the request quota's: one window)."""
        self.max_throttle_ms = max_throttle_ms
        self.quota_type = quota_type
        self.config_name = _CONFIG_OF_TYPE[quota_type]
        self.configs = configs
        self.samples = samples
        self.window_s = window_s
        self.clock = clock
        self.static_default = static_default
        self.on_new_sensor = on_new_sensor
        self.sensors: dict[tuple[str, str], Sensor] = {}
        #: (sanitized user, client id) -> (sensor tags, quota bound or None); cleared on every change
        self._resolved: dict[tuple[str, str], tuple[tuple[str, str], float | None]] = {}
        self._last_expiry = clock()
        #: a sensor was dropped (ClientQuotas: the connections' cached slots are resolved again)
        self.on_expire: Callable[[], None] = lambda: None

    def config_changed(self) -> None:
        self._resolved.clear()

    def active(self) -> bool:
        """Any quota of this type anywhere: with none, nothing is measured (no cost, no series)."""
        return self.static_default is not None or bool(self.configs.quotas.get(self.config_name))

    def resolve(self, user: str, client_id: str) -> tuple[tuple[str, str], float | None]:
        """(sensor tags, quota bound) for a request of ``user`` (sanitized) and ``client_id``."""
        got = self._resolved.get((user, client_id))
        if got is None:
            tags = self._tags(user, client_id)
            got = self._resolved[(user, client_id)] = (tags, self._limit(*tags))
        return got

    def _tags(self, user: str, client_id: str) -> tuple[str, str]:
        """Kafka 2.3's DefaultQuotaCallback.quotaMetricTags: the eight levels, first match."""
        q = self.configs.quotas.get(self.config_name, {})
        if not q:
            return "", client_id
        u, c, d = f"users/{user}", zkconfig.sanitize(client_id), DEFAULT
        for key, tags in (
            (f"{u}/clients/{c}", (user, client_id)),
            (f"{u}/clients/{d}", (user, client_id)),
            (u, (user, "")),
            (f"users/{d}/clients/{c}", (user, client_id)),
            (f"users/{d}/clients/{d}", (user, client_id)),
            (f"users/{d}", (user, "")),
        ):
            if key in q:
                return tags
        return "", client_id

    def _limit(self, user: str, client_id: str) -> float | None:
        """Kafka 2.3's DefaultQuotaCallback.quotaLimit for a sensor's tags (None: unlimited)."""
        q = self.configs.quotas.get(self.config_name, {})
        d = DEFAULT
        if user and client_id:
            u, c = f"users/{user}", zkconfig.sanitize(client_id)
            keys: Iterable[str] = (
                f"{u}/clients/{c}",
                f"{u}/clients/{d}",
                f"users/{d}/clients/{c}",
                f"users/{d}/clients/{d}",
            )
        elif user:
            keys = (f"users/{user}", f"users/{d}")
        else:
            keys = (f"clients/{zkconfig.sanitize(client_id)}", f"clients/{d}")
        for key in keys:
            if key in q:
                return q[key]
        return self.static_default if not user else None

    def sensor(self, tags: tuple[str, str], now: float) -> Sensor:
        s = self.sensors.get(tags)
        if s is None:
            s = self.sensors[tags] = Sensor(
                tags[0],
                tags[1],
                Rate(self.samples, self.window_s, now),
                Avg(self.samples, self.window_s, now),
                now,
            )
            if self.on_new_sensor is not None:
                self.on_new_sensor(self.quota_type, s, self.clock)
            if now - self._last_expiry > 60.0:
                self._expire(now)
        s.last_used = now
        return s

    def _expire(self, now: float) -> None:
        self._last_expiry = now
        for tags, s in list(self.sensors.items()):
            if now - s.last_used > SENSOR_EXPIRY_S:
                del self.sensors[tags]
                self.on_expire()  # no connection records into it any more
                for gauge in s.gauges:
                    try:
                        gauge()
                    except KeyError:
                        pass

    def record(self, user: str, client_id: str, value: float) -> tuple[Sensor, int]:
        """Record ``value`` for the request's entity; (its sensor, throttle time in ms, 0 if within quota)."""
        now = self.clock()
        tags, bound = self.resolve(user, client_id)
        s = self.sensor(tags, now)
        s.rate.record(value, now)
        if bound is None or s.rate.surely_within(bound):
            return s, 0
        return s, self.throttle_time(s.rate, bound, now)

    def throttle_time(self, rate: Rate, bound: float, now: float) -> int:
        """Kafka's throttleTime: how long (ms) until the measured rate is back at the quota (0: within)."""
        measured = rate.measure(now)
        if measured <= bound:
            return 0
        ms = round((measured - bound) / bound * rate.window_size(now) * 1000.0)
        if self.max_throttle_ms is not None:
            ms = min(ms, self.max_throttle_ms)
        return ms

    def slot(self, user: str, client_id: str, now: float) -> Slot | None:
        """What one connection's requests of ``user`` (sanitized) and ``client_id`` record into for
        this quota type (None while no entity sets it: nothing measured), resolved once per
        connection and again after a change (:class:`QuotaSlots`)."""
        if not self.active():
            return None
        tags, bound = self.resolve(user, client_id)
        return Slot(self, self.sensor(tags, now), bound)

    def throttled(self, s: Sensor, throttle_ms: int) -> None:
        s.throttle.record(throttle_ms, self.clock())


class Slot:
    """One connection's view of one quota type: the sensor its requests record into and its bound,
    ``cap`` being the bound of the window's total under which the rate cannot exceed the quota
    (:meth:`Rate.surely_within`, precomputed; infinite without a bound)."""

    __slots__ = ("bound", "cap", "manager", "rate", "sensor")

    def __init__(self, manager: QuotaManager, sensor: Sensor, bound: float | None) -> None:
        self.manager = manager
        self.sensor = sensor
        self.rate = rate = sensor.rate
        self.bound = bound
        self.cap = math.inf if bound is None else bound * (rate.samples - 1) * rate.window_s

    def record(self, value: float, now: float) -> int:
        """Record ``value``; the throttle time in ms (0 within the quota): QuotaManager.record's measure."""
        self.sensor.last_used = now
        rate = self.rate
        i = rate._current
        if now - rate._starts[i] < rate.window_s:  # Rate.record inline: the current sample goes on
            rate._values[i] += value
            rate.sum += value
        else:
            rate.record(value, now)
        if rate.sum <= self.cap or self.bound is None:
            return 0
        return self.manager.throttle_time(rate, self.bound, now)


#: a quota type not yet resolved for a connection
_UNRESOLVED: Any = object()


class QuotaSlots:
    """A connection's slots per quota type (``conn.quota_slots``), valid while ``generation`` is
    ClientQuotas' (bumped on any quota change and when a sensor expires) and the connection's
    principal and the requests' client id are the ones they were resolved for. Kafka keeps its
    sensors per (user, client-id) the same way: the entity is looked up when its sensor is missing,
    not per request. Each type is resolved on its first request, so its sensor (and its metric
    series) appears when it did before."""

    __slots__ = ("client_id", "fetch", "generation", "principal", "produce", "request", "user")

    def __init__(self, generation: int, principal: str, client_id: str | None) -> None:
        self.generation = generation
        self.principal = principal
        self.client_id = client_id
        self.user = user_of(principal)
        self.produce: Slot | None = _UNRESOLVED
        self.fetch: Slot | None = _UNRESOLVED
        self.request: Slot | None = _UNRESOLVED


class QuotaConfigs:
    """The quota configs of every user and client entity, kept current from ZooKeeper.

    ``quotas[config name][entity key]`` -> bound, entity keys as :func:`entity_key` (sanitized
    names, ``<default>``). ``on_change`` is called on the event loop after any entity changed.
    """

    def __init__(self, zk: ZooKeeper | None, on_change: Callable[[], None] = lambda: None) -> None:
        self.zk = zk
        self.on_change = on_change
        self.quotas: dict[str, dict[str, float]] = {}
        self._entities: dict[str, dict[str, float]] = {}

    def set_entity(self, key: str, config: dict[str, str]) -> None:
        """Apply one entity's stored config (other configs, such as SCRAM credentials, are ignored)."""
        bounds: dict[str, float] = {}
        for name in QUOTA_CONFIGS:
            value = config.get(name)
            if value is None:
                continue
            problem = validate_quota_config(name, value)
            if problem:
                log.error("ignoring %s of %s: %s", name, entity_znode(key), problem)
                continue
            bounds[name] = float(value)
        if bounds == self._entities.get(key, {}):
            return
        if bounds:
            self._entities[key] = bounds
        else:
            self._entities.pop(key, None)
        quotas: dict[str, dict[str, float]] = {}
        for k, b in self._entities.items():
            for name, bound in b.items():
                quotas.setdefault(name, {})[k] = bound
        self.quotas = quotas
        log.info("quotas of %s now %s", entity_znode(key), bounds or "unset")
        self.on_change()

    # -- ZooKeeper ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Read every user and client entity. Changes then come through :meth:`on_change_notification`,
        called for each ``/config/changes`` notification by the broker's one watch on it (the
        credential cache's, broker/credential_cache.py)."""
        assert self.zk is not None
        zk = self.zk
        keys = []
        for user in await zk.children(CONFIG_USERS):
            keys.append(f"users/{user}")
            keys += [
                f"users/{user}/clients/{c}" for c in await zk.children(user_clients_znode(zkconfig.desanitize(user)))
            ]
        keys += [f"clients/{c}" for c in await zk.children(CONFIG_CLIENTS)]
        await self._read(keys)

    async def _read(self, keys: list[str]) -> None:
        assert self.zk is not None
        for key in keys:
            try:
                data, _stat = await self.zk.call(self.zk.client.get, entity_znode(key))
            except NoNodeError:  # deleted: no quota
                data = None
            try:
                self.set_entity(key, zkconfig.decode_entity_config(entity_znode(key), data))
            except ZnodeFormatError as e:
                log.error("ignoring %s", e)

    async def on_change_notification(self, data: bytes | None) -> None:
        """A ``/config/changes`` notification (Kafka's ZkNodeChangeNotificationListener hands each
        one over in order): a ``users/...`` or ``clients/...`` entity is read again."""
        try:
            entity_type, name = zkconfig.decode_change(data)
        except ZnodeFormatError as e:
            log.warning("ignoring a config change notification: %s", e)
            return
        if entity_type in ("users", "clients") and self.zk is not None:
            await self._read([f"{entity_type}/{name}"])


class ClientQuotas:
    """The broker's three quota managers and the one hook the request path calls.

    ``metrics``: called with (quota type, sensor, rate function) for each new sensor, so the
    Prometheus series exist per entity (metrics.py)."""

    def __init__(
        self,
        zk: ZooKeeper | None,
        samples: int = 11,
        window_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        producer_default: float | None = None,
        consumer_default: float | None = None,
        on_new_sensor: Callable[[str, Sensor, Callable[[], float]], None] | None = None,
    ) -> None:
        self.configs = QuotaConfigs(zk, self._config_changed)
        self.produce = QuotaManager(PRODUCE, self.configs, samples, window_s, clock, producer_default, on_new_sensor)
        self.fetch = QuotaManager(FETCH, self.configs, samples, window_s, clock, consumer_default, on_new_sensor)
        self.request = QuotaManager(
            REQUEST, self.configs, samples, window_s, clock, None, on_new_sensor, round(window_s * 1000)
        )
        self.clock = clock
        #: Kafka's exempt-request-time: percent of a thread used by exempt requests (while request quotas are on)
        self.exempt = Rate(samples, window_s, clock())
        #: the connections' QuotaSlots are valid while theirs is this one
        self.generation = next(_GENERATIONS)
        #: request quotas are on somewhere: each request's own time is clocked (server.handle_frame)
        self.clocked = False
        #: a byte-rate quota is on (or a static default): Produce and Fetch go through after_request
        self.measures_bytes = self.produce.active() or self.fetch.active()
        for m in (self.produce, self.fetch, self.request):
            m.on_expire = self._invalidate

    def _invalidate(self) -> None:
        self.generation = next(_GENERATIONS)

    def _config_changed(self) -> None:
        for m in (self.produce, self.fetch, self.request):
            m.config_changed()
        self.clocked = self.request.active()
        self.measures_bytes = self.produce.active() or self.fetch.active()
        self._invalidate()

    async def start(self) -> None:
        await self.configs.start()

    def after_request(
        self,
        conn: Any,
        client_id: str | None,
        api_key: int,
        request: Any,
        response: Any,
        request_bytes: int,
        parts: list[Any] | None,
        encode: Callable[[Any], list[Any]],
        own_s: float | None = None,
    ) -> list[Any] | None:
        """The hook after any request was handled (server.handle_frame): record its bytes (Produce,
        Fetch) and its own time ``own_s`` (seconds, None when not clocked), and when the entity is over
        a quota put ``throttle_time_ms`` in the response (a consumer Fetch answered empty instead) and
        set ``conn.throttle_ms`` so the connection mutes itself after sending it. Kafka 2.3's
        KafkaApis: the larger of the byte-rate and the request throttle applies."""
        if api_key in EXEMPT_API_KEYS or (api_key == FETCH_KEY and request["replica_id"] >= 0):
            # followers and inter-broker requests: never throttled here (replication, the controller)
            if own_s is not None:
                self.exempt.record(own_s * 100.0, self.clock())
            return parts
        # the connection's sensors and bounds, resolved once (QuotaSlots); one clock read for all
        try:
            slots: QuotaSlots | None = conn.quota_slots
        except AttributeError:  # a connection object that never had any
            slots = None
        if (
            slots is None
            or slots.generation != self.generation
            or slots.client_id != client_id
            or slots.principal != conn.principal
        ):
            slots = conn.quota_slots = QuotaSlots(self.generation, conn.principal, client_id)
        now = self.clock()
        bytes_ms, bytes_slot, fetch_size = 0, None, 0
        if api_key == PRODUCE_KEY:
            bytes_slot = slots.produce
            if bytes_slot is _UNRESOLVED:
                bytes_slot = slots.produce = self.produce.slot(slots.user, client_id or "", now)
            if bytes_slot is not None:
                bytes_ms = bytes_slot.record(request_bytes, now)
        elif api_key == FETCH_KEY and parts is not None:
            bytes_slot = slots.fetch
            if bytes_slot is _UNRESOLVED:
                bytes_slot = slots.fetch = self.fetch.slot(slots.user, client_id or "", now)
            if bytes_slot is not None:
                fetch_size = sum(len(p) if isinstance(p, bytes | bytearray | memoryview) else p.size for p in parts)
                bytes_ms = bytes_slot.record(fetch_size, now)
        request_ms, request_slot = 0, None
        if own_s is not None and response is not None:  # acks=0 Produce: request time not recorded
            request_slot = slots.request
            if request_slot is _UNRESOLVED:
                request_slot = slots.request = self.request.slot(slots.user, client_id or "", now)
            if request_slot is not None:
                request_ms = request_slot.record(own_s * 100.0, now)
        if bytes_ms <= 0 and request_ms <= 0:
            return parts
        throttle_ms = max(bytes_ms, request_ms)
        if bytes_ms > request_ms and bytes_slot is not None:
            bytes_slot.manager.throttled(bytes_slot.sensor, bytes_ms)
        elif request_slot is not None:
            self.request.throttled(request_slot.sensor, request_ms)
        conn.throttle_ms = throttle_ms
        if response is None:  # acks=0: no response, but the channel is muted all the same
            return None
        if api_key == FETCH_KEY:
            if bytes_slot is not None:
                bytes_slot.rate.unrecord(fetch_size)  # nothing is sent (Kafka's unrecordQuotaSensor)
            return encode(
                {
                    "throttle_time_ms": throttle_ms,
                    "error_code": response["error_code"],
                    "session_id": response["session_id"],
                    "responses": [],
                }
            )
        if "throttle_time_ms" not in response:  # a version without it: the mute alone tells the client
            return parts
        response["throttle_time_ms"] = throttle_ms
        return encode(response)


@functools.lru_cache(maxsize=4096)
def user_of(principal: str) -> str:
    """A KafkaPrincipal's name as quota entities name it (sanitized): ``User:alice`` -> ``alice``."""
    _, _, name = principal.partition(":")
    return zkconfig.sanitize(name or principal)
