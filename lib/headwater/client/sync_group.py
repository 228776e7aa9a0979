"""Blocking facade of the group consumer: :class:`SyncGroupConsumer` is a :class:`SyncConsumer`
built with a ``group_id`` (the same arguments as :class:`~headwater.client.consumer.Consumer`),
plus ``subscribe``, ``poll``, ``commit``, ``committed`` and ``assignment``. The rebalance
listener's methods run on the client's loop thread."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from headwater.client.consumer import ConsumerRecord
from headwater.client.group_consumer import RebalanceListener
from headwater.client.sync import SyncConsumer

TopicPartition = tuple[str, int]


class SyncGroupConsumer(SyncConsumer):
    def __init__(self, bootstrap: str | Sequence[str], *, group_id: str, **kwargs: Any) -> None:
        super().__init__(bootstrap, group_id=group_id, **kwargs)

    def __enter__(self) -> SyncGroupConsumer:
        return self

    def close(self, timeout: float = 30.0) -> None:
        """Commit (auto-commit), revoke and leave the group (a static member does not leave)."""
        self._shutdown(self.consumer.close(), timeout)

    def subscribe(
        self,
        topics: Iterable[str] | None = None,
        *,
        pattern: str | re.Pattern[str] | None = None,
        listener: RebalanceListener | None = None,
    ) -> None:
        topic_list = None if topics is None else list(topics)

        async def subscribe() -> None:  # on the loop: the membership task starts there
            self.consumer.subscribe(topic_list, pattern=pattern, listener=listener)

        self._run(subscribe())

    def poll(self, max_wait_ms: int | None = None) -> list[ConsumerRecord]:
        return self._run(self.consumer.poll(max_wait_ms))

    def commit(self, offsets: Mapping[TopicPartition, int] | None = None) -> None:
        self._run(self.consumer.commit(dict(offsets) if offsets is not None else None))

    def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        return self._run(self.consumer.committed(list(partitions)))

    def assignment(self) -> set[TopicPartition]:
        return self.consumer.assignment()

    def __iter__(self) -> Iterator[ConsumerRecord]:
        while True:
            yield from self.poll()
