"""The transactional producer's state (KIP-98), what Kafka's Java client keeps in its
``TransactionManager``: the transactional id, the coordinator, the partitions in the open transaction
and the state machine, with Kafka's state names::

    UNINITIALIZED -> INITIALIZING -> READY -> IN_TRANSACTION -> COMMITTING_TRANSACTION -> READY
                                                   |  \\-> ABORTING_TRANSACTION -> READY
                                                   \\-> ABORTABLE_ERROR -> ABORTING_TRANSACTION
    any -> FATAL_ERROR (fenced: INVALID_PRODUCER_EPOCH; an authorization failure of the id)

Requests to the transaction coordinator (InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn,
EndTxn) are retried, after finding the coordinator again when it moved, on COORDINATOR_NOT_AVAILABLE,
NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS and CONCURRENT_TRANSACTIONS (the previous transaction's
markers are still being written), as the Java client does, until ``max_block`` runs out.
:class:`~headwater.client.producer.Producer` owns one when given ``transactional_id``.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from headwater.client.errors import KafkaConnectionError, KafkaTimeoutError
from headwater.protocol.apis import (
    ADD_OFFSETS_TO_TXN,
    ADD_PARTITIONS_TO_TXN,
    END_TXN,
    FIND_COORDINATOR,
    INIT_PRODUCER_ID,
    TXN_OFFSET_COMMIT,
)
from headwater.protocol.errors import ErrorCode, KafkaError
from headwater.protocol.schema import Api

if TYPE_CHECKING:
    from headwater.client.producer import Producer

log = logging.getLogger("headwater.client.transactions")

__all__ = ["ProducerFencedError", "TransactionManager", "TransactionState"]

TP = tuple[str, int]


class TransactionState(enum.Enum):
    UNINITIALIZED = "UNINITIALIZED"
    INITIALIZING = "INITIALIZING"
    READY = "READY"
    IN_TRANSACTION = "IN_TRANSACTION"
    COMMITTING_TRANSACTION = "COMMITTING_TRANSACTION"
    ABORTING_TRANSACTION = "ABORTING_TRANSACTION"
    ABORTABLE_ERROR = "ABORTABLE_ERROR"
    FATAL_ERROR = "FATAL_ERROR"


S = TransactionState

#: retried against the (re-found) coordinator, as the Java client's handlers do
COORDINATOR_MOVED = {ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE}
RETRY_SAME = {ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.CONCURRENT_TRANSACTIONS}
#: the producer was fenced by a newer one with the same transactional id (Kafka 2.3 answers
#: INVALID_PRODUCER_EPOCH; later versions PRODUCER_FENCED, code 90)
FENCED_CODES = {int(ErrorCode.INVALID_PRODUCER_EPOCH), 90}
FATAL_CODES = {
    int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
    int(ErrorCode.INVALID_PRODUCER_ID_MAPPING),
    int(ErrorCode.INVALID_TXN_STATE),
    int(ErrorCode.UNSUPPORTED_VERSION),
}


class ProducerFencedError(KafkaError):
    """Fatal: another producer with the same transactional id initialized after this one. Close
    the producer; nothing it does can commit any more."""


def _code(raw: int) -> ErrorCode:
    # PRODUCER_FENCED (90, newer than Kafka 2.3) means what 2.3's INVALID_PRODUCER_EPOCH does
    return ErrorCode.INVALID_PRODUCER_EPOCH if raw == 90 else ErrorCode.of(raw)


class TransactionManager:
    def __init__(self, producer: Producer, transactional_id: str, transaction_timeout_ms: int) -> None:
        self.producer = producer
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.state = S.UNINITIALIZED
        self.coordinator = -1
        self.partitions: set[TP] = set()  # added to the open transaction (AddPartitionsToTxn answered)
        self.pending: set[TP] = set()  # waiting for AddPartitionsToTxn
        self.started = False  # partitions or offsets added: EndTxn is needed to finish
        self.last_error: BaseException | None = None
        self._add_task: asyncio.Task[None] | None = None

    # -- state -----------------------------------------------------------------------------------

    def _transition(self, target: TransactionState) -> None:
        log.debug("transactional id %s: %s -> %s", self.transactional_id, self.state.name, target.name)
        self.state = target

    def fail(self, error: BaseException) -> None:
        """An error of the open transaction: fatal when fenced, else it must be aborted."""
        if self.state is S.FATAL_ERROR:
            return
        code = error.code if isinstance(error, KafkaError) else None
        # fenced is fatal whenever it is heard; the other fatal codes only from a live transaction
        # (a batch failed by an abort carries INVALID_TXN_STATE: the abort goes on)
        fatal = FENCED_CODES | (FATAL_CODES if self.sending() else set())
        if code is not None and int(code) in fatal:
            self.last_error = self._fatal_error(code)
            self._transition(S.FATAL_ERROR)
        elif self.state in (S.IN_TRANSACTION, S.COMMITTING_TRANSACTION, S.ABORTABLE_ERROR):
            self.last_error = self.last_error if self.state is S.ABORTABLE_ERROR else error
            if self.state is not S.ABORTABLE_ERROR:
                self._transition(S.ABORTABLE_ERROR)

    def _fatal_error(self, code: ErrorCode) -> KafkaError:
        if int(code) in FENCED_CODES:
            return ProducerFencedError(
                code,
                f"producer fenced: another producer with transactional.id {self.transactional_id!r} "
                "has initialized since; close this one",
            )
        return KafkaError(code, f"transactional.id {self.transactional_id!r}: {code.name} (fatal)")

    def check_can_send(self) -> None:
        """Raised by send() outside a transaction (Java: "Cannot perform a 'send' before ...")."""
        if self.state is S.IN_TRANSACTION:
            return
        if self.state in (S.ABORTABLE_ERROR, S.FATAL_ERROR) and self.last_error is not None:
            raise KafkaError(ErrorCode.INVALID_TXN_STATE, f"cannot send: {self.last_error}")
        raise KafkaError(
            ErrorCode.INVALID_TXN_STATE,
            f"cannot send outside a transaction (state {self.state.name}): call begin_transaction() first",
        )

    def _require(self, op: str, *states: TransactionState) -> None:
        if self.state is S.FATAL_ERROR and self.last_error is not None:
            raise self.last_error
        if self.state not in states:
            detail = f": {self.last_error}" if self.state is S.ABORTABLE_ERROR else ""
            raise KafkaError(ErrorCode.INVALID_TXN_STATE, f"cannot {op} in state {self.state.name}{detail}")

    # -- coordinator requests ----------------------------------------------------------------------

    def _deadline(self) -> float:
        p = self.producer
        return time.monotonic() + (p.max_block if p.max_block is not None else 60.0)

    async def _find_coordinator(self, key: str, key_type: int, deadline: float) -> int:
        cluster = self.producer.cluster
        while True:
            try:
                r = await cluster.request(None, FIND_COORDINATOR, {"key": key, "key_type": key_type}, 1)
                code = ErrorCode.of(r["error_code"])
                if code is ErrorCode.NONE:
                    node: int = r["node_id"]
                    if node not in cluster.brokers:
                        await cluster.refresh()
                    return node
                if int(code) in FATAL_CODES or code is ErrorCode.GROUP_AUTHORIZATION_FAILED:
                    raise KafkaError(code, f"FindCoordinator for {key!r}: {code.name}")
                error: BaseException = KafkaError(code, f"FindCoordinator for {key!r}: {code.name}")
            except (KafkaConnectionError, KafkaTimeoutError) as e:
                error = e
            if time.monotonic() + self.producer.retry_backoff > deadline:
                raise KafkaTimeoutError(f"no coordinator for {key!r}: {error}")
            await asyncio.sleep(self.producer.retry_backoff)

    async def _request(self, api: Api, body: dict[str, Any], code_of: Callable[[Any], int]) -> tuple[ErrorCode, Any]:
        """``api`` to the transaction coordinator, retried while the answer is one of the
        coordinator's retriable codes; the first other code and the response."""
        deadline = self._deadline()
        while True:
            if self.coordinator < 0:
                self.coordinator = await self._find_coordinator(self.transactional_id, 1, deadline)
            try:
                resp = await self.producer.cluster.request(self.coordinator, api, body)
                raw = code_of(resp)
                code = _code(raw)
                if code not in COORDINATOR_MOVED and code not in RETRY_SAME:
                    return code, resp
                if code in COORDINATOR_MOVED:
                    self.coordinator = -1
                error: BaseException = KafkaError(code, f"{api.name}: {code.name}")
            except (KafkaConnectionError, KafkaTimeoutError) as e:
                self.coordinator = -1
                error = e
            if time.monotonic() + self.producer.retry_backoff > deadline:
                raise KafkaTimeoutError(f"{api.name} for transactional.id {self.transactional_id!r}: {error}")
            log.debug("%s retried: %s", api.name, error)
            await asyncio.sleep(self.producer.retry_backoff)

    def _ids(self) -> dict[str, Any]:
        p = self.producer
        return {
            "transactional_id": self.transactional_id,
            "producer_id": p._producer_id,
            "producer_epoch": p._producer_epoch,
        }

    def _raise_for(self, op: str, code: ErrorCode) -> None:
        if code is ErrorCode.NONE:
            return
        if int(code) in FENCED_CODES | FATAL_CODES:
            self.last_error = self._fatal_error(code)
            self._transition(S.FATAL_ERROR)
            raise self.last_error
        error = KafkaError(code, f"{op} for transactional.id {self.transactional_id!r}: {code.name}")
        self.fail(error)
        raise error

    # -- the operations ----------------------------------------------------------------------------

    async def init_transactions(self) -> None:
        self._require("init_transactions", S.UNINITIALIZED, S.INITIALIZING)
        self._transition(S.INITIALIZING)
        body = {"transactional_id": self.transactional_id, "transaction_timeout_ms": self.transaction_timeout_ms}
        code, resp = await self._request(INIT_PRODUCER_ID, body, lambda r: r["error_code"])
        if code is not ErrorCode.NONE:
            self.last_error = self._fatal_error(code)
            self._transition(S.FATAL_ERROR)
            raise self.last_error
        p = self.producer
        p._producer_id, p._producer_epoch = resp["producer_id"], resp["producer_epoch"]
        p._next_sequence.clear()
        log.info(
            "transactional id %s: producer id %d, epoch %d", self.transactional_id, p._producer_id, p._producer_epoch
        )
        self._transition(S.READY)

    def begin_transaction(self) -> None:
        self._require("begin_transaction", S.READY)
        self.partitions.clear()
        self.pending.clear()
        self.started = False
        self.last_error = None
        self._transition(S.IN_TRANSACTION)

    def sending(self) -> bool:
        """Whether new batches may be sent: the transaction is open or committing."""
        return self.state is S.IN_TRANSACTION or self.state is S.COMMITTING_TRANSACTION

    def undrained_error(self) -> KafkaError:
        """What a batch not yet sent fails with when the transaction is aborted or failed."""
        if isinstance(self.last_error, KafkaError) and self.state is S.FATAL_ERROR:
            return self.last_error
        why = f": {self.last_error}" if self.last_error is not None else ""
        return KafkaError(ErrorCode.INVALID_TXN_STATE, f"not sent: the transaction is being aborted{why}")

    def need_partition(self, tp: TP) -> bool:
        """Whether a batch of ``tp`` may be sent now; else AddPartitionsToTxn is (being) sent."""
        if tp in self.partitions:
            return True
        if self.state is not S.IN_TRANSACTION and self.state is not S.COMMITTING_TRANSACTION:
            return False
        self.pending.add(tp)
        if self._add_task is None:
            self._add_task = asyncio.create_task(self._add_partitions(), name="headwater-txn-add-partitions")
        return False

    async def _add_partitions(self) -> None:
        p = self.producer
        try:
            while self.pending and not p._closed:
                wanted = sorted(self.pending)
                topics: dict[str, list[int]] = {}
                for t, part in wanted:
                    topics.setdefault(t, []).append(part)
                body = {**self._ids(), "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}

                def first_error(r: Any) -> int:
                    codes = [x["partition_error_code"] for t in r["results"] for x in t["results_by_partition"]]
                    bad = [c for c in codes if c not in (0, int(ErrorCode.OPERATION_NOT_ATTEMPTED))]
                    return bad[0] if bad else 0

                try:
                    code, resp = await self._request(ADD_PARTITIONS_TO_TXN, body, first_error)
                except (KafkaTimeoutError, KafkaConnectionError, KafkaError) as e:
                    code, resp = ErrorCode.REQUEST_TIMED_OUT, None
                    error: BaseException = e
                else:
                    error = KafkaError(code, f"AddPartitionsToTxn: {code.name}")
                if code is ErrorCode.NONE:
                    for t in resp["results"]:
                        for x in t["results_by_partition"]:
                            if x["partition_error_code"] == 0:
                                tp = (t["name"], x["partition_index"])
                                self.partitions.add(tp)
                                self.pending.discard(tp)
                                self.started = True
                    continue
                if code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    await asyncio.sleep(p.retry_backoff)
                    continue
                # fatal or abortable: the batches waiting for these partitions fail
                self.fail(error)
                failed = self.last_error or error
                p._fail_queued(set(wanted), failed)
                self.pending.difference_update(wanted)
        finally:
            self._add_task = None
            p._wakeup.set()

    async def send_offsets_to_transaction(self, offsets: Mapping[TP, int], group_id: str) -> None:
        self._require("send_offsets_to_transaction", S.IN_TRANSACTION)
        code, _ = await self._request(
            ADD_OFFSETS_TO_TXN, {**self._ids(), "group_id": group_id}, lambda r: r["error_code"]
        )
        self._raise_for("AddOffsetsToTxn", code)
        self.started = True
        topics: dict[str, list[dict[str, Any]]] = {}
        for (t, part), off in sorted(offsets.items()):
            topics.setdefault(t, []).append(
                {
                    "partition_index": part,
                    "committed_offset": off,
                    "committed_leader_epoch": -1,
                    "committed_metadata": "",
                }
            )
        body = {
            "transactional_id": self.transactional_id,
            "group_id": group_id,
            "producer_id": self.producer._producer_id,
            "producer_epoch": self.producer._producer_epoch,
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
        }
        deadline = self._deadline()
        cluster = self.producer.cluster
        node = -1
        while True:
            if node < 0:
                node = await self._find_coordinator(group_id, 0, deadline)
            try:
                resp = await cluster.request(node, TXN_OFFSET_COMMIT, body)
                codes = [_code(x["error_code"]) for t in resp["topics"] for x in t["partitions"]]
                bad = [c for c in codes if c is not ErrorCode.NONE]
                code = bad[0] if bad else ErrorCode.NONE
                if code is ErrorCode.NONE:
                    return
                retriable = (
                    code in COORDINATOR_MOVED or code in RETRY_SAME or code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                )
                if not retriable:
                    self._raise_for("TxnOffsetCommit", code)
                if code in COORDINATOR_MOVED:
                    node = -1
                error: BaseException = KafkaError(code, f"TxnOffsetCommit: {code.name}")
            except (KafkaConnectionError, KafkaTimeoutError) as e:
                node, error = -1, e
            if time.monotonic() + self.producer.retry_backoff > deadline:
                timeout = KafkaTimeoutError(f"TxnOffsetCommit for group {group_id!r}: {error}")
                self.fail(timeout)
                raise timeout
            await asyncio.sleep(self.producer.retry_backoff)

    async def commit_transaction(self) -> None:
        self._require("commit_transaction", S.IN_TRANSACTION)
        await self.producer.flush()
        if self.state is not S.IN_TRANSACTION:  # a batch failed: the transaction must be aborted
            self._require("commit_transaction", S.IN_TRANSACTION)
        self._transition(S.COMMITTING_TRANSACTION)
        await self._end(True)

    async def abort_transaction(self) -> None:
        self._require("abort_transaction", S.IN_TRANSACTION, S.ABORTABLE_ERROR, S.ABORTING_TRANSACTION)
        self._transition(S.ABORTING_TRANSACTION)
        try:
            await self.producer.flush()  # the records' futures settle (written or failed) first
        except (KafkaTimeoutError, KafkaError) as e:
            log.warning("abort: flush failed: %s", e)
        await self._end(False)

    async def _end(self, commit: bool) -> None:
        if self.started:
            code, _ = await self._request(END_TXN, {**self._ids(), "committed": commit}, lambda r: r["error_code"])
            if code is not ErrorCode.NONE:
                if not commit and code not in (ErrorCode.NONE,) and int(code) not in FENCED_CODES | FATAL_CODES:
                    self._transition(S.ABORTABLE_ERROR)
                self._raise_for("EndTxn", code)
        self.partitions.clear()
        self.pending.clear()
        self.started = False
        self.last_error = None
        self._transition(S.READY)

    async def close(self) -> None:
        if self._add_task is not None:
            self._add_task.cancel()
