"""How copiers read their source partitions: one :class:`SourceFetcher` per flow, one fetch per
source broker for all the partitions it leads.

A copier asks ``await fetcher.fetch((topic, partition), offset)`` and gets that partition's
complete batches from ``offset`` (possibly none, after the long poll), or an exception:
:class:`~headwater.client.errors.OffsetOutOfRangeError` when the offset is outside the source's
log, :class:`~headwater.protocol.errors.KafkaError` for an error the source answered for that
partition (metadata is refreshed first, so a retry goes to the new leader), or a connection /
timeout error.

Why one fetch per broker. A broker answers the requests of one connection one at a time, so
when every copier sent its own long poll (``fetch.max.wait.ms``), a busy partition's fetch waited
behind the long polls of all the idle partitions of the same broker -- with ~60 or more idle
partitions, longer than the request timeout: the busy partition stopped (review finding 6). Here,
as in Kafka's replica fetcher and consumer, each source broker has one fetch *round* at a time:
it takes every request waiting for a partition that broker leads, sends one Fetch, and answers
each copier with its partition's part of the response; requests that arrive meanwhile go into the
next round. A busy partition therefore waits at most one long poll, and a round returns as soon
as any partition in it has data (min_bytes = 1).

Isolation: ``isolation.level`` (default read_committed, KIP-98): the source answers only below each partition's
last stable offset and names the aborted transactions in what it returns, which the copier leaves
out (:func:`headwater.client.raw.committed_batches`), so a transaction's data reaches the target
only once it committed, and an aborted one never does. An open transaction holds the partition's
copy at its first offset until it ends (as for any read_committed consumer). With
``read_uncommitted`` the fetches go to the high watermark and every data record is copied
(aborted and open transactions' too; the markers are still left out).

``fetch.max.in.flight`` (default 1) lets a broker have more than one round outstanding -- for a
WAN link, where the round trip rather than the long poll bounds the rate (issue 22): the next
round is on the wire while the broker still answers the previous one. A partition may have
several fetches waiting (a copier fetching ahead at more than one offset, see
:mod:`headwater.mirror.fetch_ahead`): a round takes the oldest of each partition's (one entry per
partition in a Fetch request), the others go into the next rounds in the order they were asked.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from headwater.client.cluster import STALE_METADATA_ERRORS, Cluster
from headwater.client.errors import KafkaConnectionError, KafkaTimeoutError
from headwater.client.raw import READ_COMMITTED, RawPartition, fetch_from_node
from headwater.protocol.errors import ErrorCode, KafkaError

__all__ = ["SourceFetcher", "TopicPartition"]

log = logging.getLogger("headwater.mirror")

TopicPartition = tuple[str, int]
_Waiter = tuple[int, "asyncio.Future[RawPartition]"]


class SourceFetcher:
    """Fetches for the copiers of one flow from its source cluster: one round per broker at a time
    (``in_flight`` at most), covering every partition waiting for that broker."""

    def __init__(
        self,
        source: Cluster,
        *,
        max_bytes: int,
        max_wait_ms: int,
        total_max_bytes: int = 52428800,
        in_flight: int = 1,
        timeout: float = 30.0,
        isolation_level: int = READ_COMMITTED,
    ) -> None:
        self.source = source
        self.isolation_level = isolation_level
        self.max_bytes = max_bytes
        self.max_wait_ms = max_wait_ms
        self.total_max_bytes = total_max_bytes
        self.in_flight = max(1, in_flight)
        self.timeout = timeout
        #: per source broker, per partition: the fetches waiting for a round, oldest first
        self._waiting: dict[int, dict[TopicPartition, list[_Waiter]]] = {}
        self._rounds: dict[int, set[asyncio.Task[None]]] = {}
        self.rounds_sent = 0  # for tests and the operator's curiosity: Fetch requests sent

    async def fetch(self, tp: TopicPartition, offset: int) -> RawPartition:
        leader = self.source.leader(tp[0], tp[1])
        if leader < 0:
            await self.source.refresh([tp[0]])
            leader = self.source.leader(tp[0], tp[1])
            if leader < 0:
                raise KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, f"no leader for {tp[0]}-{tp[1]} in the source")
        fut: asyncio.Future[RawPartition] = asyncio.get_running_loop().create_future()
        waiting = self._waiting.setdefault(leader, {})
        entry = (offset, fut)
        waiting.setdefault(tp, []).append(entry)
        self._maybe_start_round(leader)
        try:
            return await fut
        finally:
            queued = waiting.get(tp)
            if queued is not None and entry in queued:
                queued.remove(entry)  # cancelled before a round took it
                if not queued:
                    del waiting[tp]

    def _maybe_start_round(self, node: int) -> None:
        rounds = self._rounds.setdefault(node, set())
        if self._waiting.get(node) and len(rounds) < self.in_flight:
            task = asyncio.ensure_future(self._round(node))
            rounds.add(task)
            task.add_done_callback(lambda t: self._round_done(node, t))

    def _round_done(self, node: int, task: asyncio.Task[None]) -> None:
        self._rounds.get(node, set()).discard(task)
        if not task.cancelled() and task.exception() is not None:  # a bug: never leave a copier waiting
            log.error("fetch round for source broker %d failed", node, exc_info=task.exception())
        self._maybe_start_round(node)

    async def _round(self, node: int) -> None:
        waiting = self._waiting.get(node, {})
        taken: dict[TopicPartition, _Waiter] = {}
        for tp in list(waiting):
            queued = waiting[tp]
            while queued and tp not in taken:
                offset, fut = queued.pop(0)
                if not fut.done():
                    taken[tp] = (offset, fut)
            if not queued:
                del waiting[tp]
        if not taken:
            return
        self.rounds_sent += 1
        try:
            answers = await fetch_from_node(
                self.source,
                node,
                {tp: offset for tp, (offset, _) in taken.items()},
                max_bytes=self.max_bytes,
                max_wait_ms=self.max_wait_ms,
                total_max_bytes=self.total_max_bytes,
                timeout=self.timeout,
                isolation_level=self.isolation_level,
            )
        except (KafkaConnectionError, KafkaTimeoutError, KafkaError) as e:
            with contextlib.suppress(Exception):
                await self.source.refresh(sorted({tp[0] for tp in taken}))
            for _, fut in taken.values():
                if not fut.done():
                    fut.set_exception(e)
            return
        except BaseException as e:
            for _, fut in taken.values():
                if not fut.done():
                    fut.set_exception(KafkaConnectionError(f"fetch from source broker {node} failed: {e!r}"))
            raise
        stale = sorted(
            {tp[0] for tp, a in answers.items() if isinstance(a, KafkaError) and a.code in STALE_METADATA_ERRORS}
        )
        if stale:
            with contextlib.suppress(Exception):
                await self.source.refresh(stale)
        for tp, (_, fut) in taken.items():
            if fut.done():
                continue
            answer = answers[tp]
            if isinstance(answer, RawPartition):
                fut.set_result(answer)
            else:
                fut.set_exception(answer)

    async def close(self) -> None:
        """Cancel the rounds in flight (their copiers are stopped by then)."""
        tasks = [t for rounds in self._rounds.values() for t in rounds]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
