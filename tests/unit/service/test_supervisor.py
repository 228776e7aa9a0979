"""The shared supervisor: restart with backoff, fatal stops, health reasons, stuck units, metrics."""

from __future__ import annotations

import asyncio
import logging

import pytest
from prometheus_client import CollectorRegistry

from headwater.service.supervisor import FatalError, HealthRegistry, Supervisor, Unit


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _failures(registry: CollectorRegistry, **labels: str) -> float:
    return registry.get_sample_value("headwater_test_task_failures_total", labels) or 0.0


def test_a_failing_task_is_logged_counted_unhealthy_and_restarted(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        registry = CollectorRegistry()
        health = HealthRegistry()
        sleeps: list[float] = []
        resume = asyncio.Event()

        async def sleep(s: float) -> None:
            sleeps.append(s)
            await resume.wait()
            resume.clear()

        sup = Supervisor("test", health, registry, ("flow",), min_backoff_s=0.5, max_backoff_s=2, sleep=sleep)
        runs = 0
        healthy = asyncio.Event()

        async def run(unit: Unit) -> None:
            nonlocal runs
            runs += 1
            if runs <= 3:
                raise ConnectionError(f"boom {runs}")
            healthy.set()
            await asyncio.Event().wait()

        sup.start("dc1->agg t-0", run, labels={"flow": "dc1->agg"}, detail=lambda: "offset 42")
        for i in range(3):
            while len(sleeps) <= i:
                await asyncio.sleep(0)
            ok, why = health.check()
            assert not ok and "dc1->agg t-0: restarting: ConnectionError: boom" in why
            resume.set()
        await healthy.wait()
        assert health.check() == (True, "ok")
        assert sleeps == [0.5, 1.0, 2.0]
        assert _failures(registry, flow="dc1->agg") == 3
        await sup.stop_all()
        assert sup.running() == [] and health.units == {}

    with caplog.at_level(logging.ERROR, "headwater.service"):
        asyncio.run(main())
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any("dc1->agg t-0 (offset 42) failed: ConnectionError: boom 1" in m for m in errors)


def test_a_fatal_error_stops_only_that_unit_loudly() -> None:
    async def main() -> None:
        registry = CollectorRegistry()
        health = HealthRegistry()
        sup = Supervisor("test", health, registry, ("flow",))
        other_running = asyncio.Event()

        async def fatal(unit: Unit) -> None:
            raise FatalError("MESSAGE_TOO_LARGE from the target")

        async def fine(unit: Unit) -> None:
            other_running.set()
            await asyncio.Event().wait()

        sup.start("a", fatal, labels={"flow": "f"})
        sup.start("b", fine, labels={"flow": "f"})
        await other_running.wait()
        while "a" in sup.running():
            await asyncio.sleep(0)
        ok, why = health.check()
        assert not ok and why == "a: failed: MESSAGE_TOO_LARGE from the target"
        assert sup.running() == ["b"]
        assert _failures(registry, flow="f") == 1
        await sup.stop("a")
        assert health.check()[0]
        await sup.stop_all()

    asyncio.run(main())


def test_a_unit_without_progress_past_its_deadline_is_stuck() -> None:
    async def main() -> None:
        clock = FakeClock()
        health = HealthRegistry(clock)
        sup = Supervisor("test", health)
        unit_ref: list[Unit] = []

        async def run(unit: Unit) -> None:
            unit_ref.append(unit)
            await asyncio.Event().wait()

        sup.start("counter dc1", run, stuck_after_s=30)
        await asyncio.sleep(0)
        clock.now += 29
        assert health.check()[0]
        clock.now += 2
        ok, why = health.check()
        assert not ok and why == "counter dc1: stuck: no progress for 31 s"
        unit_ref[0].progress()
        assert health.check()[0]
        await sup.stop_all()

    asyncio.run(main())


def test_problems_are_reported_until_cleared_and_a_duplicate_unit_is_refused() -> None:
    async def main() -> None:
        health = HealthRegistry()
        health.set_problem("topic orders", "cannot be planned: INVALID_CONFIG")
        assert health.check() == (False, "topic orders: cannot be planned: INVALID_CONFIG")
        health.clear_problem("topic orders")
        assert health.check("mirroring") == (True, "mirroring")
        sup = Supervisor("test", health)

        async def run(unit: Unit) -> None:
            await asyncio.Event().wait()

        sup.start("x", run)
        with pytest.raises(ValueError, match="already running"):
            sup.start("x", run)
        await sup.stop_all()

    asyncio.run(main())


def test_a_task_that_returns_is_stopped_not_restarted() -> None:
    async def main() -> None:
        health = HealthRegistry()
        sup = Supervisor("test", health)
        calls = 0

        async def run(unit: Unit) -> None:
            nonlocal calls
            calls += 1

        u = sup.start("once", run)
        while sup.running():
            await asyncio.sleep(0)
        assert calls == 1 and u.state == "stopped" and health.check()[0]

    asyncio.run(main())


def test_join_waits_for_a_unit_to_end_by_itself_without_cancelling_it() -> None:
    async def main() -> None:
        sup = Supervisor("test", HealthRegistry(), CollectorRegistry())
        finish = asyncio.Event()
        finished: list[bool] = []

        async def run(unit: Unit) -> None:
            await finish.wait()
            finished.append(True)

        sup.start("u", run)
        assert not await sup.join("u", timeout=0.05)  # still running: not cancelled
        assert sup.running() == ["u"]
        finish.set()
        assert await sup.join("u", timeout=5)
        assert finished == [True]
        assert await sup.join("never-started")

    asyncio.run(main())


def test_a_units_failure_series_exists_at_zero_from_its_start() -> None:
    """Prometheus's increase() cannot see a series that first appears at 1 rise: the failure
    counter of a labelled unit is there, at 0, before its first failure."""

    async def main() -> None:
        registry = CollectorRegistry()
        sup = Supervisor("test", HealthRegistry(), registry, ("tier",))
        started = asyncio.Event()

        async def run(unit: Unit) -> None:
            started.set()
            await asyncio.Event().wait()

        sup.start("agg", run, labels={"tier": "agg"})
        await started.wait()
        assert registry.get_sample_value("headwater_test_task_failures_total", {"tier": "agg"}) == 0.0
        await sup.stop_all()

    asyncio.run(main())
