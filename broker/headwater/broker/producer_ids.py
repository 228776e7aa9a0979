"""Producer ids for idempotent producers, unique across the cluster, in blocks claimed in ZooKeeper.

As Kafka's ZooKeeper-era ProducerIdManager: ``/latest_producer_id_block`` holds the last block
any broker claimed, as JSON ``{"version":1,"broker":<id>,"block_start":"<first>","block_end":"<last>"}``
(the two ids are strings, as Kafka writes them). A broker claims the next block of
:data:`BLOCK_SIZE` ids (the one after ``block_end``, or 0 .. 999 while the znode is absent) with a
conditional write on the znode's version (create when absent), and retries when another broker
won the race; then it hands out the ids of its block one by one, and claims a new block when
they run out. Ids are never reused: a restarted broker claims a fresh block.

ZooKeeper is reached through :meth:`ZooKeeper.call` (a worker thread); claims are serialised by
an asyncio lock, so concurrent InitProducerId requests never claim two blocks for one need.
"""

from __future__ import annotations

import asyncio
import logging

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from headwater.broker.zk import ZooKeeper
from headwater.protocol.errors import ErrorCode, KafkaError
from headwater.zk.cluster import ProducerIdBlock, decode_producer_id_block
from headwater.zk.json import ZnodeFormatError
from headwater.zk.paths import LATEST_PRODUCER_ID_BLOCK

log = logging.getLogger(__name__)

PRODUCER_ID_BLOCK_PATH = LATEST_PRODUCER_ID_BLOCK
BLOCK_SIZE = 1000
_MAX_ATTEMPTS = 50


def parse_block(data: bytes | None) -> tuple[int, int] | None:
    """(block_start, block_end) of the znode's JSON; None when it is empty. ValueError when malformed."""
    if not data:
        return None
    try:
        block = decode_producer_id_block(data)
    except ZnodeFormatError as e:
        raise ValueError(str(e)) from None
    return block.start, block.end


def block_json(broker_id: int, start: int, end: int) -> bytes:
    return ProducerIdBlock(broker_id, start, end).encode()


class ProducerIdManager:
    def __init__(self, zk: ZooKeeper, broker_id: int) -> None:
        self._zk = zk
        self._broker_id = broker_id
        self._next = 0
        self._end = -1  # the last id of the current block; none claimed yet
        self._lock = asyncio.Lock()

    async def next_id(self) -> int:
        """A producer id no other call on any broker gets. Raises KafkaError when ZooKeeper fails."""
        async with self._lock:
            if self._next > self._end:
                self._next, self._end = await self._claim_block()
            pid = self._next
            self._next += 1
            return pid

    async def _claim_block(self) -> tuple[int, int]:
        zk = self._zk
        for _ in range(_MAX_ATTEMPTS):
            try:
                data, stat = await zk.call(zk.client.get, PRODUCER_ID_BLOCK_PATH)
            except NoNodeError:
                data, stat = None, None
            try:
                prev = parse_block(data)
            except (ValueError, KeyError, TypeError) as e:
                raise KafkaError(
                    ErrorCode.UNKNOWN_SERVER_ERROR, f"{PRODUCER_ID_BLOCK_PATH} holds invalid JSON: {e}"
                ) from None
            start = 0 if prev is None else prev[1] + 1
            end = start + BLOCK_SIZE - 1
            try:
                if stat is None:
                    await zk.call(zk.client.create, PRODUCER_ID_BLOCK_PATH, block_json(self._broker_id, start, end))
                else:
                    await zk.call(
                        zk.client.set,
                        PRODUCER_ID_BLOCK_PATH,
                        block_json(self._broker_id, start, end),
                        version=stat.version,
                    )
            except (BadVersionError, NodeExistsError, NoNodeError):
                continue  # another broker claimed a block meanwhile: read again
            log.info("claimed producer id block %d..%d", start, end)
            return start, end
        raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, "could not claim a producer id block (contention)")
