"""How copiers read their source partitions: one :class:`SourceFetcher` per flow.

A copier asks ``await fetcher.fetch((topic, partition), offset)`` and gets that partition's
complete batches from ``offset`` (possibly none, after the long poll), or an exception:
:class:`~headwater.client.errors.OffsetOutOfRangeError` when the offset is outside the source's
log, :class:`~headwater.protocol.errors.KafkaError` for an error the source answered (metadata is
refreshed first, so a retry goes to the new leader), or a connection / timeout error.
"""

from __future__ import annotations

from headwater.client.cluster import Cluster
from headwater.client.raw import RawPartition, fetch_raw
from headwater.protocol.errors import ErrorCode, KafkaError

__all__ = ["SourceFetcher", "TopicPartition"]

TopicPartition = tuple[str, int]


class SourceFetcher:
    """Fetches for the copiers of one flow from its source cluster."""

    def __init__(self, source: Cluster, *, max_bytes: int, max_wait_ms: int) -> None:
        self.source = source
        self.max_bytes = max_bytes
        self.max_wait_ms = max_wait_ms

    async def fetch(self, tp: TopicPartition, offset: int) -> RawPartition:
        got, failed = await fetch_raw(
            self.source, [(tp[0], tp[1], offset)], max_bytes=self.max_bytes, max_wait_ms=self.max_wait_ms
        )
        if tp in failed or tp not in got:
            await self.source.refresh([tp[0]])
            code = failed.get(tp, ErrorCode.UNKNOWN_SERVER_ERROR)
            raise KafkaError(code, f"fetching {tp[0]}-{tp[1]} at offset {offset}: {code.name}")
        return got[tp]

    async def close(self) -> None:
        """Nothing to release yet (the source cluster's connections are closed by its owner)."""
