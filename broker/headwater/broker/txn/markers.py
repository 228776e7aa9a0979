"""The transaction marker sender: WriteTxnMarkers to the leaders of a transaction's partitions.

Once a decision is recorded (PrepareCommit / PrepareAbort in ``__transaction_state``), the
coordinator calls :meth:`MarkerSender.send` with the transaction's partitions. The sender groups
them by their leader (this broker's metadata cache), sends one WriteTxnMarkers (v0) per leader on
the inter-broker listener (to this broker too: one path for every leader), and retries, every
``RETRY_BACKOFF_S``, what is not yet written, as Kafka's TransactionMarkerChannelManager does:

* NONE: written and replicated (the leader appended with acks=all);
* a partition whose topic no longer exists is dropped (nothing left to mark);
* NOT_LEADER_FOR_PARTITION, UNKNOWN_TOPIC_OR_PARTITION, NOT_ENOUGH_REPLICAS(_AFTER_APPEND),
  REQUEST_TIMED_OUT, KAFKA_STORAGE_ERROR, a lost connection, no live leader: retried after the
  backoff against the leader the cache then names;
* INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED: this coordinator is stale (a newer
  epoch or coordinator already wrote markers): sending stops and returns False;
* the coordinator lost the ``__transaction_state`` partition (``still_valid`` false): stops, False.

Connections (one per leader) are kept and closed by :meth:`MarkerSender.close`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from headwater.broker.broker_client import BrokerConnection, BrokerConnectionError
from headwater.protocol.apis import WRITE_TXN_MARKERS
from headwater.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from headwater.broker.txn.coordinator import TxnHost

log = logging.getLogger(__name__)

RETRY_BACKOFF_S = 0.1
REQUEST_TIMEOUT_S = 30.0
_STALE = {ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED}

TopicPartition = tuple[str, int]


class MarkerSender:
    def __init__(self, host: TxnHost) -> None:
        self.host = host
        self._conns: dict[int, BrokerConnection] = {}

    def close(self) -> None:
        for c in self._conns.values():
            c.close()
        self._conns.clear()

    def _conn(self, broker_id: int) -> BrokerConnection | None:
        info = self.host.cache.brokers.get(broker_id)
        cfg = self.host.config
        endpoint = info.endpoints.get(cfg.inter_broker_listener_name) if info is not None else None
        if endpoint is None:
            return None
        conn = self._conns.get(broker_id)
        if conn is None or (conn.host, conn.port) != endpoint:
            if conn is not None:
                conn.close()
            conn = self._conns[broker_id] = BrokerConnection(
                endpoint[0],
                endpoint[1],
                f"broker-{self.host.broker_id}-txn-markers",
                security=cfg.inter_broker_security,
            )
        return conn

    async def send(
        self,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        partitions: set[TopicPartition],
        still_valid: Callable[[], bool],
    ) -> bool:
        """Until every partition has its marker (True), or the coordinator is stale (False)."""
        remaining = set(partitions)
        attempt = 0
        while remaining:
            if not still_valid():
                return False
            if attempt:
                await asyncio.sleep(RETRY_BACKOFF_S)
                if not still_valid():
                    return False
            attempt += 1
            by_leader: dict[int, list[TopicPartition]] = {}
            for tp in sorted(remaining):
                if tp[0] not in self.host.cache.topics:
                    log.info("dropping the marker for %s-%d: the topic no longer exists", *tp)
                    remaining.discard(tp)
                    continue
                info = self.host.cache.partition(*tp)
                if info is not None and info.leader >= 0:
                    by_leader.setdefault(info.leader, []).append(tp)
            results = await asyncio.gather(
                *(
                    self._send_one(leader, tps, producer_id, producer_epoch, commit, coordinator_epoch)
                    for leader, tps in by_leader.items()
                )
            )
            for answer in results:
                for tp, code in answer.items():
                    if code == ErrorCode.NONE:
                        remaining.discard(tp)
                    elif code in _STALE:
                        log.warning(
                            "markers for producer id %d epoch %d refused by %s-%d: %s; this coordinator is stale",
                            producer_id,
                            producer_epoch,
                            tp[0],
                            tp[1],
                            code.name,
                        )
                        return False
                    elif attempt % 50 == 0:
                        log.info("marker for %s-%d not written yet (%s); retrying", tp[0], tp[1], code.name)
        return True

    async def _send_one(
        self,
        leader: int,
        tps: list[TopicPartition],
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
    ) -> dict[TopicPartition, ErrorCode]:
        conn = self._conn(leader)
        if conn is None:
            return {}
        by_topic: dict[str, list[int]] = {}
        for t, p in tps:
            by_topic.setdefault(t, []).append(p)
        body = {
            "markers": [
                {
                    "producer_id": producer_id,
                    "producer_epoch": producer_epoch,
                    "transaction_result": commit,
                    "topics": [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()],
                    "coordinator_epoch": coordinator_epoch,
                }
            ]
        }
        try:
            resp = await conn.request(WRITE_TXN_MARKERS, body, timeout_s=REQUEST_TIMEOUT_S)
        except (BrokerConnectionError, OSError) as e:
            log.info("WriteTxnMarkers to broker %d failed: %s", leader, e)
            conn.close()
            self._conns.pop(leader, None)
            return {}
        out: dict[TopicPartition, ErrorCode] = {}
        for m in resp["markers"]:
            for t in m["topics"]:
                for p in t["partitions"]:
                    out[(t["name"], p["partition_index"])] = ErrorCode(p["error_code"])
        return out
