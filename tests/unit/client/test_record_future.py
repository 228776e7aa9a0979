"""RecordFuture against asyncio's future protocol: await, gather, wait, wait_for, callbacks, cancel."""

from __future__ import annotations

import asyncio
import contextvars

import pytest

from headwater.client.record_future import BatchOutcome, RecordFuture, RecordMetadata
from headwater.protocol.errors import ErrorCode, KafkaError


def batch(n: int) -> tuple[BatchOutcome, list[RecordFuture]]:
    outcome = BatchOutcome(asyncio.get_running_loop(), "t", 3)
    return outcome, [RecordFuture(outcome, i) for i in range(n)]


def test_is_a_future_to_asyncio_and_awaits_to_its_metadata() -> None:
    async def go() -> None:
        outcome, futs = batch(3)
        assert asyncio.isfuture(futs[0]) and not futs[0].done()
        with pytest.raises(asyncio.InvalidStateError):
            futs[0].result()
        asyncio.get_running_loop().call_later(0.01, outcome.succeeded, 100, -1, [7, 8, 9])
        first = await futs[0]
        assert first == RecordMetadata("t", 3, 100, 7)
        assert await asyncio.gather(*futs) == [RecordMetadata("t", 3, 100 + i, 7 + i) for i in range(3)]
        assert futs[2].exception() is None and not futs[2].cancelled()

    asyncio.run(go())


def test_log_append_time_and_acks_0_offsets() -> None:
    async def go() -> None:
        outcome, futs = batch(2)
        outcome.succeeded(-1, 555, [1, 2])
        assert [f.result() for f in futs] == [RecordMetadata("t", 3, -1, 555)] * 2

    asyncio.run(go())


def test_failure_reaches_every_record_and_wait_reports_done() -> None:
    async def go() -> None:
        outcome, futs = batch(2)
        error = KafkaError(ErrorCode.NOT_LEADER_FOR_PARTITION, "moved")
        asyncio.get_running_loop().call_soon(outcome.failed, error)
        done, pending = await asyncio.wait(futs, timeout=5)
        assert set(done) == set(futs) and not pending
        for f in futs:
            assert f.exception() is error
            with pytest.raises(KafkaError):
                f.result()
        results = await asyncio.gather(*futs, return_exceptions=True)
        assert results == [error, error]

    asyncio.run(go())


def test_callbacks_run_through_the_loop_with_their_context_and_can_be_removed() -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="none")

    async def go() -> None:
        outcome, futs = batch(2)
        seen: list[tuple[int, str]] = []

        def record(f: RecordFuture) -> None:
            seen.append((f.result().offset, var.get()))

        def never(f: RecordFuture) -> None:
            raise AssertionError("removed")

        ctx = contextvars.copy_context()
        ctx.run(var.set, "caller")
        futs[0].add_done_callback(record, context=ctx)
        futs[1].add_done_callback(never)
        assert futs[1].remove_done_callback(never) == 1
        outcome.succeeded(10, -1, [0, 0])
        assert seen == []  # not synchronously: through call_soon, as asyncio does
        await asyncio.sleep(0)
        assert seen == [(10, "caller")]
        futs[1].add_done_callback(record)  # already done: still scheduled, not called inline
        assert len(seen) == 1
        await asyncio.sleep(0)
        assert seen[-1] == (11, "none")

    asyncio.run(go())


def test_wait_for_times_out_and_cancels_only_that_record() -> None:
    async def go() -> None:
        outcome, futs = batch(2)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(futs[0], 0.05)
        assert futs[0].cancelled() and not futs[1].done()
        with pytest.raises(asyncio.CancelledError):
            futs[0].result()
        outcome.succeeded(5, -1, [1, 2])
        assert (await futs[1]).offset == 6
        assert futs[0].cancel() is False  # already done

    asyncio.run(go())


def test_a_task_awaiting_a_record_can_be_cancelled() -> None:
    async def go() -> None:
        outcome, futs = batch(1)
        task = asyncio.ensure_future(futs[0])  # returned as is: it is a future
        assert task is futs[0]
        waiter = asyncio.create_task(asyncio.sleep(0, result=None))
        await waiter

        async def wait_for_it() -> RecordMetadata:
            return await futs[0]

        t = asyncio.create_task(wait_for_it())
        await asyncio.sleep(0)
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t
        assert futs[0].cancelled()
        outcome.succeeded(1, -1, [0])  # settles later: nothing breaks

    asyncio.run(go())
