"""ZooKeeper._pipelined: a sliding window of asynchronous requests (issue 26), with a fake kazoo result."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from headwater.broker import zk as zkmod
from headwater.broker.zk import ZooKeeper


class FakeResult:
    """Kazoo's IAsyncResult as ``ZooKeeper._future`` uses it: ``rawlink`` and ``get_nowait``."""

    def __init__(self, value: Any = None, error: BaseException | None = None) -> None:
        self.value, self.error = value, error
        self.callback: Callable[[FakeResult], None] | None = None

    def rawlink(self, callback: Callable[[FakeResult], None]) -> None:
        self.callback = callback

    def get_nowait(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.value

    def complete(self) -> None:
        assert self.callback is not None
        self.callback(self)


def test_requests_leave_as_the_oldest_are_answered_not_in_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(zkmod, "PIPELINE_DEPTH", 3)
    zk = ZooKeeper("127.0.0.1:1", 6000, 6000)  # never started: only the loop is set below
    started: list[FakeResult] = []

    def start(item: int) -> FakeResult:
        started.append(FakeResult(error=ValueError(item)) if item == 4 else FakeResult(item * 10))
        return started[-1]

    async def until(condition: Callable[[], bool]) -> bool:
        for _ in range(200):
            if condition():
                return True
            await asyncio.sleep(0)
        return condition()

    async def run() -> list[Any]:
        zk._loop = asyncio.get_running_loop()
        task = asyncio.ensure_future(zk._pipelined(start, list(range(8))))
        assert await until(lambda: len(started) == 3)
        assert not await until(lambda: len(started) > 3)  # the window is full
        started[0].complete()
        assert await until(lambda: len(started) == 4)  # one answer lets one more request out
        for answered in range(1, 8):
            started[answered].complete()  # ZooKeeper answers a session's requests in order
            assert await until(lambda n=answered + 4: len(started) == min(8, n))
        return await task

    results = asyncio.run(run())
    assert [r if not isinstance(r, ValueError) else "error" for r in results] == [0, 10, 20, 30, "error", 50, 60, 70]
