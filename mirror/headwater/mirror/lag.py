"""The source's end offsets for the lag metric, asked for independently of the copy.

``headwater_mirror_partition_lag`` is the source's end offset minus the offset after the last record
the target acknowledged (:meth:`headwater.mirror.copier.Copier.lag`). The copier learns the end
offset from its fetch answers, but a copier stuck producing into a stalled target fetches nothing
more (with one exact fetch at a time, the default, nothing at all), so from those alone the lag
would stop growing at the first unacknowledged fetch and hide a stuck target from the alert
``HeadwaterMirrorPartitionLagging``. So each member also asks the source for its partitions' end
offsets every ``end.offsets.refresh.interval.ms`` (5000): one ListOffsets (LATEST; under
read_committed the last stable offset, what a fetch may return) per source broker for all the
partitions of the flow this process owns (:meth:`headwater.client.consumer.Consumer.end_offsets`),
in its own task: the copiers never wait for it, and it never waits for them or for the target.
The lag uses the larger of this and what the fetches saw.

A partition the source does not answer for (its broker down, no leader) keeps the last value; that
is logged once when it starts (one line for all the partitions that failed in the same round) and
once when the source answers again, not every round.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping

from headwater.client.consumer import Consumer
from headwater.service.supervisor import Unit, wait_or_stop

__all__ = ["EndOffsets"]

log = logging.getLogger("headwater.mirror")

TopicPartition = tuple[str, int]


class EndOffsets:
    """One flow's end-offset refresh: every ``interval_s``, ask the source for the end offsets of the
    partitions ``owned()`` returns and hand each to its ``set_end_offset(offset)``."""

    def __init__(
        self,
        flow: str,
        consumer: Consumer,
        owned: Callable[[], Mapping[TopicPartition, Callable[[int], None]]],
        interval_s: float,
    ) -> None:
        self.flow = flow
        self.consumer = consumer
        self.owned = owned
        self.interval_s = interval_s
        #: partitions whose last round failed, with the error logged for them
        self.failing: dict[TopicPartition, str] = {}

    async def refresh(self) -> None:
        """One round: ask, hand over what was answered, log what changed in what failed."""
        owned = dict(self.owned())
        if not owned:
            self.failing.clear()
            return
        answers = await self.consumer.end_offsets(owned)
        newly: dict[str, list[TopicPartition]] = {}
        back: list[TopicPartition] = []
        for tp, answer in answers.items():
            if isinstance(answer, Exception):
                if tp not in self.failing:
                    newly.setdefault(str(answer) or type(answer).__name__, []).append(tp)
                self.failing[tp] = str(answer)
                continue
            if self.failing.pop(tp, None) is not None:
                back.append(tp)
            set_end = owned.get(tp)
            if set_end is not None:
                set_end(answer)
        for tp in [tp for tp in self.failing if tp not in owned]:  # no longer ours
            del self.failing[tp]
        for error, tps in newly.items():
            log.warning(
                "%s: the source did not answer the end offset of %s: %s; their lag keeps its last value until "
                "it does (logged once)",
                self.flow,
                _names(tps),
                error,
            )
        if back:
            log.info("%s: the source answers the end offset of %s again", self.flow, _names(back))

    async def run(self, unit: Unit, stop: asyncio.Event) -> None:
        """The loop, supervised beside the copiers."""
        while not stop.is_set():
            unit.progress()
            await self.refresh()
            unit.progress()
            await wait_or_stop(stop, self.interval_s)


def _names(tps: list[TopicPartition], most: int = 10) -> str:
    names = [f"{t}-{p}" for t, p in sorted(tps)]
    more = f" and {len(names) - most} more" if len(names) > most else ""
    return ", ".join(names[:most]) + more
