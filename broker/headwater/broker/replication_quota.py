"""Replication throttles (KIP-73), as Kafka 2.3's ReplicationQuotaManager applies them.

Which replicas are throttled is a topic config, a list of ``partition:brokerId`` (or ``*`` for
all): ``leader.replication.throttled.replicas`` names the replicas whose *leaders* limit what they
send, ``follower.replication.throttled.replicas`` those whose *followers* limit what they fetch.
``kafka-reassign-partitions --throttle`` sets the first to the partitions' current replicas and the
second to the replicas being added. How fast is a dynamic broker config:
``leader.replication.throttled.rate`` / ``follower.replication.throttled.rate`` (bytes/s, unset:
unlimited) — per broker, shared by all its throttled partitions.

- Follower (replica_fetcher.py): a throttled partition this broker is not in sync on is left out
  of the next fetch while the measured rate is over the limit; the bytes of every throttled
  partition fetched are recorded.
- Leader (handlers/fetch.py, for follower fetches): a throttled partition whose follower is not
  in the ISR gets no records while the rate is over the limit; the bytes sent for throttled
  partitions are recorded.

In-sync replicas are never throttled, so a throttle slows a reassignment, never acks=all produces.

The rate is measured as Kafka's ``Rate``: the bytes of ``replication.quota.window.num`` samples of
``replication.quota.window.size.seconds`` each, divided by the time they cover (at least all but
one full sample, so a burst at the start is allowed about ``(num - 1) * size`` seconds' worth).
Called on the event loop only.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

MAX_LONG = 2**63 - 1


def throttled_partitions(value: str | None, broker_id: int) -> bool | frozenset[int]:
    """The partitions a ``*.replication.throttled.replicas`` value throttles on ``broker_id``
    (True: all of them, the ``*`` wildcard)."""
    if not value:
        return frozenset()
    if value.strip() == "*":
        return True
    out = set()
    for item in value.split(","):
        p, _, b = item.strip().partition(":")
        if p.strip().isdigit() and b.strip().isdigit() and int(b) == broker_id:
            out.add(int(p))
    return frozenset(out)


def validate_throttled_replicas(value: str) -> str | None:
    """An error for a value that is neither ``*`` nor a list of ``partition:brokerId``."""
    if value.strip() in ("", "*"):
        return None
    for item in value.split(","):
        p, sep, b = item.strip().partition(":")
        if not (sep and p.strip().isdigit() and b.strip().isdigit()):
            return f"{value!r} must be '*' or a list of partitionId:brokerId (e.g. 0:101,0:102,1:101)"
    return None


class ReplicationQuota:
    def __init__(
        self,
        broker_id: int,
        kind: str,
        limit: Callable[[], int],
        topic_config: Callable[[str], Mapping[str, str]],
        *,
        samples: int = 11,
        window_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        assert kind in ("leader", "follower")
        self.broker_id = broker_id
        self.key = f"{kind}.replication.throttled.replicas"
        self.limit = limit
        self.topic_config = topic_config
        self.samples = max(samples, 2)
        self.window_s = window_s
        self.clock = clock
        self._windows: list[list[float]] = []  # [start, bytes], oldest first
        self._parsed: dict[str, tuple[str | None, bool | frozenset[int]]] = {}

    def is_throttled(self, tp: tuple[str, int]) -> bool:
        value = self.topic_config(tp[0]).get(self.key)
        cached = self._parsed.get(tp[0])
        if cached is None or cached[0] != value:
            cached = (value, throttled_partitions(value, self.broker_id))
            self._parsed[tp[0]] = cached
        which = cached[1]
        return which is True or (isinstance(which, frozenset) and tp[1] in which)

    def record(self, nbytes: int) -> None:
        now = self.clock()
        self._expire(now)
        if not self._windows or now - self._windows[-1][0] >= self.window_s:
            self._windows.append([now, 0.0])
        self._windows[-1][1] += nbytes

    def rate(self) -> float:
        """Bytes per second over the sampled windows."""
        now = self.clock()
        self._expire(now)
        if not self._windows:
            return 0.0
        elapsed = now - self._windows[0][0]
        elapsed = max(elapsed, (self.samples - 1) * self.window_s)
        return sum(w[1] for w in self._windows) / elapsed

    def is_quota_exceeded(self) -> bool:
        limit = self.limit()
        return limit < MAX_LONG and self.rate() > limit

    def _expire(self, now: float) -> None:
        horizon = now - self.samples * self.window_s
        while self._windows and self._windows[0][0] + self.window_s <= horizon:
            self._windows.pop(0)
