"""Supervised long-lived tasks and one health registry for the services (mirror, audit, loader).

A service (the mirror's copiers, the audit's tier counters, the loader's partition readers) starts
each long-lived coroutine through a :class:`Supervisor`. When the coroutine raises, the supervisor

- logs the failure at ERROR with the unit's name and what it was doing (``describe()``),
- counts it in ``headwater_<service>_task_failures_total`` with the unit's labels,
- marks the unit down in the :class:`HealthRegistry` (so ``/healthz`` answers 503 with the reason),
- and starts it again after a backoff that doubles up to ``max_backoff_s``.

A coroutine that raises :class:`FatalError` is not restarted: the unit stays down, loudly, until the
service stops it (an error retrying cannot fix: corrupt data, data lost to retention with
``stop``, a config the target refuses). The other units keep running. This is how Kafka Connect
reports a FAILED task beside its RUNNING ones.

A unit may also declare a progress deadline: when it has not called :meth:`Unit.progress` for
``stuck_after_s`` while running, health reports it stuck. Problems that are not tasks (a topic that
cannot be planned, a lost ZooKeeper session) are reported with :meth:`HealthRegistry.set_problem`
and withdrawn with :meth:`HealthRegistry.clear_problem`.

Everything runs on one event loop; the registry is read by the HTTP handler on the same loop.
The clock and the sleep are injected so tests can move time.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter

log = logging.getLogger("headwater.service")


async def wait_or_stop(stop: asyncio.Event, seconds: float) -> None:
    """Sleep ``seconds`` between a periodic task's rounds, or less when ``stop`` is set meanwhile."""
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except TimeoutError:
        pass


class FatalError(Exception):
    """Raised by a supervised coroutine for an error that retrying cannot fix: the unit stops, loudly."""


@dataclass
class Unit:
    """One supervised task's state, as health and the operator see it."""

    name: str
    labels: Mapping[str, str]
    stuck_after_s: float | None
    clock: Callable[[], float]
    state: str = "running"  # running | restarting (in backoff after a failure) | failed (fatal) | stopped
    reason: str = ""
    failures: int = 0
    last_progress: float = field(default=0.0)
    detail: Callable[[], str] | None = None

    def progress(self) -> None:
        """Called by the task when it has done useful work (or checked there is none to do)."""
        self.last_progress = self.clock()

    def describe(self) -> str:
        if self.detail is None:
            return self.name
        try:
            return f"{self.name} ({self.detail()})"
        except Exception:  # a describe() must never hide the failure it describes
            return self.name

    def problem(self, now: float) -> str | None:
        if self.state in ("restarting", "failed"):
            return f"{self.name}: {self.state}: {self.reason}"
        if self.state == "running" and self.stuck_after_s is not None and now - self.last_progress > self.stuck_after_s:
            return f"{self.name}: stuck: no progress for {now - self.last_progress:.0f} s"
        return None


class HealthRegistry:
    """What ``/healthz`` answers: healthy while no unit is down or stuck and no problem is reported."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.units: dict[str, Unit] = {}
        self.problems: dict[str, str] = {}

    def set_problem(self, key: str, reason: str) -> None:
        if self.problems.get(key) != reason:
            log.error("unhealthy: %s: %s", key, reason)
        self.problems[key] = reason

    def clear_problem(self, key: str) -> None:
        if self.problems.pop(key, None) is not None:
            log.warning("recovered: %s", key)

    def reasons(self) -> list[str]:
        now = self.clock()
        out = [f"{k}: {v}" for k, v in sorted(self.problems.items())]
        for unit in self.units.values():
            p = unit.problem(now)
            if p is not None:
                out.append(p)
        return out

    def check(self, ok_text: str = "ok") -> tuple[bool, str]:
        """``(healthy, reason)``: the reasons joined by ``; `` when unhealthy, ``ok_text`` otherwise."""
        reasons = self.reasons()
        return (not reasons, "; ".join(reasons) if reasons else ok_text)


class Supervisor:
    """Starts, restarts with backoff, and stops a service's long-lived tasks."""

    def __init__(
        self,
        service: str,
        health: HealthRegistry,
        registry: CollectorRegistry | None = None,
        label_names: tuple[str, ...] = (),
        *,
        min_backoff_s: float = 0.5,
        max_backoff_s: float = 30.0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.service = service
        self.health = health
        self.label_names = label_names
        self.failures = Counter(
            f"headwater_{service}_task_failures",
            f"Failures of the {service}'s supervised tasks (each one logged at ERROR and restarted with backoff, "
            "or stopped when fatal)",
            list(label_names),
            registry=registry,
        )
        self.min_backoff_s = min_backoff_s
        self.max_backoff_s = max_backoff_s
        self._sleep = sleep
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def start(
        self,
        name: str,
        run: Callable[[Unit], Awaitable[None]],
        *,
        labels: Mapping[str, str] | None = None,
        stuck_after_s: float | None = None,
        detail: Callable[[], str] | None = None,
    ) -> Unit:
        """Start ``run(unit)`` under supervision. ``run`` returning normally ends the unit (stopped)."""
        if name in self._tasks and not self._tasks[name].done():
            raise ValueError(f"{self.service}: unit {name!r} is already running")
        unit = Unit(name, dict(labels or {}), stuck_after_s, self.health.clock, detail=detail)
        unit.progress()
        if self.label_names:
            # The unit's failure series exists from its start, at 0: Prometheus's increase() sees the
            # first failure as a rise (a series that first appears at 1 has no increase to show).
            self._failures_of(unit)
        self.health.units[name] = unit
        self._tasks[name] = asyncio.ensure_future(self._supervise(unit, run))
        return unit

    def unit(self, name: str) -> Unit | None:
        return self.health.units.get(name)

    def running(self) -> list[str]:
        return [n for n, t in self._tasks.items() if not t.done()]

    async def join(self, name: str, timeout: float | None = None) -> bool:
        """Wait for a unit to end by itself (its coroutine returned, or failed fatally) without
        cancelling it; False when it is still running after ``timeout`` seconds."""
        task = self._tasks.get(name)
        if task is None or task.done():
            return True
        done, _ = await asyncio.wait([task], timeout=timeout)
        return bool(done)

    async def stop(self, name: str) -> None:
        """Cancel one unit and wait for it; it leaves the health registry."""
        task = self._tasks.pop(name, None)
        self.health.units.pop(name, None)
        if task is None:
            return
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            if task.cancelled():
                return
            raise  # our own caller was cancelled

    async def stop_all(self) -> None:
        for name in list(self._tasks):
            await self.stop(name)

    async def _supervise(self, unit: Unit, run: Callable[[Unit], Awaitable[None]]) -> None:
        backoff = self.min_backoff_s
        while True:
            unit.state = "running"
            started = unit.clock()
            try:
                await run(unit)
                unit.state, unit.reason = "stopped", ""
                return
            except asyncio.CancelledError:
                unit.state = "stopped"
                raise
            except FatalError as e:
                unit.failures += 1
                unit.state, unit.reason = "failed", str(e)
                self._count(unit)
                log.error(
                    "%s: %s stopped: %s (not restarted; fix the cause, then restart)", self.service, unit.describe(), e
                )
                return
            except Exception as e:
                unit.failures += 1
                unit.state, unit.reason = "restarting", f"{type(e).__name__}: {e}"
                self._count(unit)
                # A unit that ran a good while before failing starts again from the shortest backoff.
                if unit.clock() - started > 4 * self.max_backoff_s:
                    backoff = self.min_backoff_s
                log.error(
                    "%s: %s failed: %s: %s; restarting in %.1f s",
                    self.service,
                    unit.describe(),
                    type(e).__name__,
                    e,
                    backoff,
                    exc_info=e,
                )
                await self._sleep(backoff)
                backoff = min(backoff * 2, self.max_backoff_s)
                unit.progress()

    def _failures_of(self, unit: Unit) -> Counter:
        return self.failures.labels(*(unit.labels.get(n, "") for n in self.label_names))

    def _count(self, unit: Unit) -> None:
        if self.label_names:
            self._failures_of(unit).inc()
        else:
            self.failures.inc()
