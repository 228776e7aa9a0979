"""The transaction coordinator (KIP-98, as Kafka 2.3's TransactionCoordinator).

Which broker coordinates a transactional id: the leader of partition ``partition_for(id)`` of
``__transaction_state`` (formats.py). As the group coordinator does with ``__consumer_offsets``,
it loads the partition when it becomes its leader (LeaderAndIsr) -- the last record of every
transactional id -- answering COORDINATOR_LOAD_IN_PROGRESS meanwhile, and drops it when it stops
leading (NOT_COORDINATOR: clients look the coordinator up again). The partition's leader epoch at
load time is the *coordinator epoch* written into every marker, so partition leaders refuse the
markers of a stale coordinator (TRANSACTION_COORDINATOR_FENCED). Transactions loaded in
PrepareCommit / PrepareAbort have their markers sent again and are completed.

Every state change is a write of the id's new value to its partition as leader, acks=all with
``transaction.state.log.min.isr`` (the decision point of a commit is the PrepareCommit record);
the change is applied in memory only once the ISR has it. While a write of an id is in flight,
other requests for that id get CONCURRENT_TRANSACTIONS (retriable).

Requests (the state table is state.py):

* InitProducerId(id, timeout): a new producer id at epoch 0 for a new id; otherwise the epoch is
  bumped (a new producer id once the epoch is exhausted), which fences the previous producer
  (its next request gets INVALID_PRODUCER_EPOCH). With a transaction Ongoing, the coordinator
  bumps the epoch (PrepareEpochFence), aborts it under the new epoch and answers
  CONCURRENT_TRANSACTIONS; the client retries and gets the epoch after that once the abort is
  complete. INVALID_TRANSACTION_TIMEOUT for a timeout above ``transaction.max.timeout.ms``.
* AddPartitionsToTxn / AddOffsetsToTxn: Empty/Complete* -> Ongoing (the transaction starts: its
  timer too), Ongoing -> Ongoing with more partitions (no write when nothing is new).
* EndTxn(commit): Ongoing -> PrepareCommit/PrepareAbort, answered once written (only an older epoch is
  INVALID_PRODUCER_EPOCH, as Kafka 2.3); then markers go
  to every partition (markers.py) and CompleteCommit/CompleteAbort is written. A retried EndTxn
  of a completed transaction is answered NONE; while its markers are being written,
  CONCURRENT_TRANSACTIONS; anything else INVALID_TXN_STATE.
* Errors for any of them: NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE
  (the write could not reach min ISR), INVALID_PRODUCER_ID_MAPPING (an unknown id, or another
  producer id), INVALID_PRODUCER_EPOCH (an older epoch: fenced).

Timers (one task): an Ongoing transaction older than its timeout is aborted with a bumped epoch
(checked every ``transaction.abort.timed.out.transaction.cleanup.interval.ms``); an id idle for
``transactional.id.expiration.ms`` becomes Dead and is tombstoned (every
``transaction.remove.expired.transaction.cleanup.interval.ms``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Protocol

from headwater.broker.group.formats import OFFSETS_TOPIC
from headwater.broker.group.formats import partition_for as group_partition_for
from headwater.broker.replication_wait import ReplicationWait, wait_for_replication
from headwater.broker.txn import formats
from headwater.broker.txn.formats import TRANSACTION_STATE_TOPIC, TxnValue
from headwater.broker.txn.markers import MarkerSender
from headwater.broker.txn.state import IDLE, PREPARING, TxnState, check_transition
from headwater.protocol.errors import DecodeError, ErrorCode, KafkaError
from headwater.protocol.records.record import RecordInput, encode_batch, iter_batches

if TYPE_CHECKING:
    from headwater.broker.config import BrokerConfig
    from headwater.broker.metadata_cache import MetadataCache
    from headwater.broker.metrics import BrokerMetrics
    from headwater.broker.producer_ids import ProducerIdManager
    from headwater.broker.purgatory import Purgatory
    from headwater.broker.replica_manager import ReplicaManager

log = logging.getLogger(__name__)


class TxnHost(Protocol):
    """What the transaction coordinator reaches: this broker's id, the config, the metadata cache
    (``__transaction_state``'s partitions, the leaders markers go to), the replica manager (appends
    as leader), the purgatory (acks=all), the metrics and the producer id blocks."""

    broker_id: int
    config: BrokerConfig
    cache: MetadataCache
    replicas: ReplicaManager
    purgatory: Purgatory
    metrics: BrokerMetrics
    producer_ids: ProducerIdManager


LOAD_READ_BYTES = 1 << 20
WRITE_TIMEOUT_MS = 5000
MAX_EPOCH = 32767  # Short.MaxValue
#: how long AddPartitionsToTxn waits for the previous transaction's markers before it answers
#: CONCURRENT_TRANSACTIONS (the client retries that answer)
COMPLETION_WAIT_S = 5.0
_TO_CLIENT = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_FOR_PARTITION: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
}

TopicPartition = tuple[str, int]


def _wall_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class TxnMetadata:
    """One transactional id as its coordinator knows it."""

    transactional_id: str
    partition: int  # of __transaction_state
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition] = frozenset()
    last_update_ms: int = -1
    start_ms: int = -1
    pending: bool = field(default=False, compare=False)  # a write or a fence is in flight
    #: set when the markers and Complete record of the last EndTxn are written (or given up on)
    completed: asyncio.Event | None = field(default=None, compare=False, repr=False)

    def value(self) -> TxnValue:
        return TxnValue(
            self.producer_id,
            self.producer_epoch,
            self.timeout_ms,
            int(self.state),
            self.partitions,
            self.last_update_ms,
            self.start_ms,
        )


class TransactionCoordinator:
    def __init__(self, host: TxnHost, now_ms: Callable[[], int] = _wall_ms) -> None:
        self.host = host
        self.config = host.config
        self.now_ms = now_ms
        self.txns: dict[str, TxnMetadata] = {}
        self.owned: dict[int, int] = {}  # partition of __transaction_state -> coordinator epoch
        self.loading: dict[int, asyncio.Task[None]] = {}
        self._loading_epoch: dict[int, int] = {}  # partition -> the epoch its load is for
        self.markers = MarkerSender(host)
        self._tasks: set[asyncio.Task[None]] = set()
        self._ticker: asyncio.Task[None] | None = None
        self._next_abort_check = 0
        self._next_expiry_check = 0
        host.metrics.open_transactions.set_function(self.open_transactions)  # read by the /metrics thread

    # -- ownership ----------------------------------------------------------------------------

    def num_partitions(self) -> int:
        info = self.host.cache.topics.get(TRANSACTION_STATE_TOPIC)
        if info is not None and info.partitions:
            return len(info.partitions)
        return self.config.transaction_state_log_num_partitions

    def partition_for(self, transactional_id: str) -> int:
        return formats.partition_for(transactional_id, self.num_partitions())

    def start(self) -> None:
        self._ticker = asyncio.ensure_future(self._tick_loop())

    async def stop(self) -> None:
        tasks = [t for t in (self._ticker, *self.loading.values(), *self._tasks) if t is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for p in list(self.owned):
            self.on_resigned(p)
        self.markers.close()

    def on_elected(self, partition: int, leader_epoch: int) -> None:
        """This broker leads ``partition`` of __transaction_state at ``leader_epoch``: load it.
        A newer epoch while a load is under way starts the load again at that epoch (the markers
        of what it completes carry the epoch it is loaded at)."""
        if self.owned.get(partition) == leader_epoch or self._loading_epoch.get(partition) == leader_epoch:
            return
        if partition in self.owned or partition in self.loading:
            self.on_resigned(partition)
        self._loading_epoch[partition] = leader_epoch
        self.loading[partition] = asyncio.ensure_future(self._load(partition, leader_epoch))

    def on_resigned(self, partition: int) -> None:
        self._loading_epoch.pop(partition, None)
        task = self.loading.pop(partition, None)
        if task is not None:
            task.cancel()
        if self.owned.pop(partition, None) is None:
            return
        gone = [tid for tid, m in self.txns.items() if m.partition == partition]
        for tid in gone:
            del self.txns[tid]
        log.info("unloaded %d transactional id(s) of %s-%d", len(gone), TRANSACTION_STATE_TOPIC, partition)

    def check(self, transactional_id: str) -> ErrorCode:
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST
        p = self.partition_for(transactional_id)
        if p in self.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        if p not in self.owned:
            return ErrorCode.NOT_COORDINATOR
        return ErrorCode.NONE

    def _valid(self, partition: int, coordinator_epoch: int) -> Callable[[], bool]:
        return lambda: self.owned.get(partition) == coordinator_epoch

    async def _load(self, partition: int, coordinator_epoch: int) -> None:
        started = time.monotonic()
        try:
            _, log_ = self.host.replicas.leader_partition(TRANSACTION_STATE_TOPIC, partition)
        except KafkaError as e:
            log.warning("cannot load %s-%d: %s", TRANSACTION_STATE_TOPIC, partition, e)
            self.loading.pop(partition, None)
            self._loading_epoch.pop(partition, None)
            return
        values: dict[str, TxnValue | None] = {}
        pos, end = log_.log_start_offset, log_.log_end_offset
        while pos < end:
            data = log_.read(pos, LOAD_READ_BYTES, max_offset=end)
            if data.region is None:
                break
            r = data.region
            buf = os.pread(r.file.fileno(), r.size, r.position)
            nxt = pos
            for header, records in iter_batches(buf):
                for rec in records:
                    if rec.key is None:
                        continue
                    try:
                        tid = formats.decode_key(rec.key)
                        values[tid] = None if rec.value is None else formats.decode_value(rec.value)
                    except DecodeError as e:
                        log.warning("skipping an unreadable %s record: %s", TRANSACTION_STATE_TOPIC, e)
                nxt = header.base_offset + header.last_offset_delta + 1
            if nxt <= pos:
                break
            pos = nxt
            await asyncio.sleep(0)
        loaded = 0
        for tid, v in values.items():
            if v is None:
                continue
            try:
                state = TxnState(v.status)
            except ValueError:
                log.warning("transactional id %s has an unknown state %d: skipped", tid, v.status)
                continue
            if state == TxnState.DEAD:
                continue
            self.txns[tid] = TxnMetadata(
                tid,
                partition,
                v.producer_id,
                v.producer_epoch,
                v.timeout_ms,
                state,
                v.partitions,
                v.last_update_ms,
                v.start_ms,
            )
            loaded += 1
        self.loading.pop(partition, None)
        self._loading_epoch.pop(partition, None)
        self.owned[partition] = coordinator_epoch
        for m in list(self.txns.values()):
            if m.partition == partition and m.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
                self._spawn_completion(m, m.state == TxnState.PREPARE_COMMIT)
        log.info(
            "loaded %d transactional id(s) from %s-%d (coordinator epoch %d) in %.0f ms",
            loaded,
            TRANSACTION_STATE_TOPIC,
            partition,
            coordinator_epoch,
            (time.monotonic() - started) * 1000,
        )

    # -- writes ---------------------------------------------------------------------------------

    async def _write(self, target: TxnMetadata) -> ErrorCode:
        """Write ``target`` (the id's next value) and wait for the ISR; the client-facing error.
        NOT_COORDINATOR when the partition's leadership moved meanwhile."""
        partition = target.partition
        epoch = self.owned.get(partition)
        if epoch is None:
            return ErrorCode.NOT_COORDINATOR
        record_value = (  # Dead: a tombstone
            None
            if target.state == TxnState.DEAD
            else formats.value(target.value(), empty_state=target.state == TxnState.EMPTY)
        )
        try:
            part, _ = self.host.replicas.leader_partition(TRANSACTION_STATE_TOPIC, partition)
            batch = encode_batch([RecordInput(formats.key(target.transactional_id), record_value, self.now_ms())])
            min_isr = int(
                self.host.cache.config_of(TRANSACTION_STATE_TOPIC).get(
                    "min.insync.replicas", self.config.transaction_state_log_min_isr
                )
            )
            appended = part.append_as_leader(memoryview(batch), -1, min_isr)
        except KafkaError as e:
            log.warning("write to %s-%d failed: %s", TRANSACTION_STATE_TOPIC, partition, e)
            return _TO_CLIENT.get(e.code, ErrorCode.UNKNOWN_SERVER_ERROR)
        self.host.purgatory.notify(part.key)
        wait = ReplicationWait(part, part.leadership, appended.last_offset + 1, min_isr)
        await wait_for_replication(self.host.purgatory, [wait], WRITE_TIMEOUT_MS)
        if wait.error != ErrorCode.NONE:
            log.warning("write to %s-%d not replicated: %s", TRANSACTION_STATE_TOPIC, partition, wait.error.name)
            return _TO_CLIENT.get(wait.error, wait.error)
        if self.owned.get(partition) != epoch:
            return ErrorCode.NOT_COORDINATOR
        return ErrorCode.NONE

    async def _transit(self, m: TxnMetadata, target: TxnMetadata) -> ErrorCode:
        """Move ``m`` to ``target`` through a write; applied only when the write succeeded."""
        check_transition(m.state, target.state, m.transactional_id)
        m.pending = True
        try:
            code = await self._write(target)
        finally:
            m.pending = False
        if code == ErrorCode.NONE and self.txns.get(m.transactional_id) is m:
            m.producer_id, m.producer_epoch, m.timeout_ms = target.producer_id, target.producer_epoch, target.timeout_ms
            m.state, m.partitions = target.state, target.partitions
            m.last_update_ms, m.start_ms = target.last_update_ms, target.start_ms
            if m.state == TxnState.DEAD:
                del self.txns[m.transactional_id]
        return code

    def _spawn(self, coro: Coroutine[object, object, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _spawn_completion(self, m: TxnMetadata, commit: bool) -> None:
        done = m.completed = asyncio.Event()

        async def complete() -> None:
            try:
                await self._complete(m, commit)
            finally:
                done.set()

        self._spawn(complete())

    async def _settle(self, transactional_id: str) -> None:
        """Wait (at most COMPLETION_WAIT_S) for the completion of the id's last EndTxn. A producer
        begins its next transaction as soon as EndTxn answered; answered CONCURRENT_TRANSACTIONS
        meanwhile, librdkafka backs off ~60-80 ms, the Java client 100 ms (retry.backoff.ms), which
        would cost each short transaction that much."""
        m = self.txns.get(transactional_id)
        done = m.completed if m is not None else None
        if done is not None and not done.is_set():
            try:
                await asyncio.wait_for(done.wait(), COMPLETION_WAIT_S)
            except TimeoutError:
                pass

    async def _complete(self, m: TxnMetadata, commit: bool) -> None:
        """Markers to every partition of a prepared transaction, then CompleteCommit/CompleteAbort."""
        partition = m.partition
        epoch = self.owned.get(partition)
        if epoch is None:
            return
        valid = self._valid(partition, epoch)
        m.pending = True
        try:
            done = await self.markers.send(m.producer_id, m.producer_epoch, commit, epoch, set(m.partitions), valid)
            if not done:
                return
            final = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
            while valid() and self.txns.get(m.transactional_id) is m:
                target = replace(m, state=final, partitions=frozenset(), last_update_ms=self.now_ms())
                m.pending = False
                code = await self._transit(m, target)
                m.pending = True
                if code in (ErrorCode.NONE, ErrorCode.NOT_COORDINATOR):
                    break
                await asyncio.sleep(0.5)
        finally:
            m.pending = False
        log.debug("transaction of %s %s", m.transactional_id, "committed" if commit else "aborted")

    # -- requests -------------------------------------------------------------------------------

    def _known(
        self, transactional_id: str, producer_id: int, producer_epoch: int
    ) -> tuple[TxnMetadata | None, ErrorCode]:
        code = self.check(transactional_id)
        if code != ErrorCode.NONE:
            return None, code
        m = self.txns.get(transactional_id)
        if m is None or m.producer_id != producer_id:
            return None, ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if producer_epoch != m.producer_epoch:
            return None, ErrorCode.INVALID_PRODUCER_EPOCH
        if m.pending or m.state in PREPARING:
            return None, ErrorCode.CONCURRENT_TRANSACTIONS
        return m, ErrorCode.NONE

    async def init_producer_id(self, transactional_id: str, timeout_ms: int) -> tuple[ErrorCode, int, int]:
        code = self.check(transactional_id)
        if code != ErrorCode.NONE:
            return code, -1, -1
        if not 0 < timeout_ms <= self.config.transaction_max_timeout_ms:
            return ErrorCode.INVALID_TRANSACTION_TIMEOUT, -1, -1
        now = self.now_ms()
        m = self.txns.get(transactional_id)
        if m is None:
            try:
                pid = await self.host.producer_ids.next_id()
            except KafkaError as e:
                return e.code, -1, -1
            except Exception as e:  # ZooKeeper connection loss, session expiry
                log.warning("InitProducerId: cannot claim a producer id block: %s", e)
                return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, -1
            if transactional_id in self.txns:  # another request created it meanwhile
                return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
            m = TxnMetadata(transactional_id, self.partition_for(transactional_id), pid, -1, timeout_ms, TxnState.EMPTY)
            self.txns[transactional_id] = m
            target = replace(m, producer_epoch=0, last_update_ms=now)
            code = await self._transit(m, target)
            if code != ErrorCode.NONE:
                if self.txns.get(transactional_id) is m and m.producer_epoch < 0:
                    del self.txns[transactional_id]
                return code, -1, -1
            return ErrorCode.NONE, m.producer_id, m.producer_epoch
        if m.pending or m.state in PREPARING:
            return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
        if m.state == TxnState.ONGOING:
            self._fence_and_abort(m, "a new producer initialised the transactional id")
            return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
        if m.state not in IDLE:
            return ErrorCode.INVALID_TXN_STATE, -1, -1
        pid, epoch = m.producer_id, m.producer_epoch + 1
        if epoch >= MAX_EPOCH:
            try:
                pid, epoch = await self.host.producer_ids.next_id(), 0
            except Exception as e:
                log.warning("InitProducerId: cannot claim a producer id block: %s", e)
                return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, -1
            if m.pending or m.state not in IDLE:
                return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
        target = replace(
            m, producer_id=pid, producer_epoch=epoch, timeout_ms=timeout_ms, state=TxnState.EMPTY,
            partitions=frozenset(), last_update_ms=now, start_ms=-1,
        )  # fmt: skip
        code = await self._transit(m, target)
        if code != ErrorCode.NONE:
            return code, -1, -1
        return ErrorCode.NONE, m.producer_id, m.producer_epoch

    def _fence_and_abort(self, m: TxnMetadata, why: str) -> None:
        """Bump the epoch of ``m``'s producer (PrepareEpochFence) and abort its transaction under it."""
        check_transition(m.state, TxnState.PREPARE_EPOCH_FENCE, m.transactional_id)
        log.info(
            "aborting the transaction of %s (producer id %d, epoch %d -> %d): %s",
            m.transactional_id,
            m.producer_id,
            m.producer_epoch,
            m.producer_epoch + 1,
            why,
        )
        old_epoch = m.producer_epoch
        m.state = TxnState.PREPARE_EPOCH_FENCE
        m.producer_epoch = old_epoch + 1  # in memory: the old producer is fenced from now on
        self.host.metrics.txn_aborted_by_coordinator.inc()

        async def run() -> None:
            target = replace(m, state=TxnState.PREPARE_ABORT, last_update_ms=self.now_ms())
            code = await self._transit(m, target)
            if code == ErrorCode.NONE:
                await self._complete(m, commit=False)
            elif self.txns.get(m.transactional_id) is m and m.state == TxnState.PREPARE_EPOCH_FENCE:
                m.state, m.producer_epoch = TxnState.ONGOING, old_epoch  # the timer tries again

        self._spawn(run())

    async def add_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: set[TopicPartition]
    ) -> ErrorCode:
        m, code = self._known(transactional_id, producer_id, producer_epoch)
        if code == ErrorCode.CONCURRENT_TRANSACTIONS:  # the previous transaction may be completing
            await self._settle(transactional_id)
            m, code = self._known(transactional_id, producer_id, producer_epoch)
        if m is None:
            return code
        if m.state == TxnState.ONGOING and partitions <= m.partitions:
            return ErrorCode.NONE
        now = self.now_ms()
        start = now if m.state in IDLE else m.start_ms
        target = replace(
            m, state=TxnState.ONGOING, partitions=m.partitions | partitions, last_update_ms=now, start_ms=start
        )
        try:
            return await self._transit(m, target)
        except KafkaError as e:
            return e.code

    async def add_offsets(
        self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str
    ) -> ErrorCode:
        info = self.host.cache.topics.get(OFFSETS_TOPIC)
        count = (
            len(info.partitions) if info is not None and info.partitions else self.config.offsets_topic_num_partitions
        )
        tp = (OFFSETS_TOPIC, group_partition_for(group_id, count))
        return await self.add_partitions(transactional_id, producer_id, producer_epoch, {tp})

    async def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool) -> ErrorCode:
        code = self.check(transactional_id)
        if code != ErrorCode.NONE:
            return code
        m = self.txns.get(transactional_id)
        if m is None or m.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if producer_epoch < m.producer_epoch:  # only an older epoch is fenced here (Kafka 2.3's EndTxn)
            return ErrorCode.INVALID_PRODUCER_EPOCH
        if (m.state == TxnState.COMPLETE_COMMIT and commit) or (m.state == TxnState.COMPLETE_ABORT and not commit):
            return ErrorCode.NONE  # a retry of an EndTxn that completed
        if m.state == TxnState.PREPARE_COMMIT:
            return ErrorCode.CONCURRENT_TRANSACTIONS if commit else ErrorCode.INVALID_TXN_STATE
        if m.state == TxnState.PREPARE_ABORT:
            return ErrorCode.INVALID_TXN_STATE if commit else ErrorCode.CONCURRENT_TRANSACTIONS
        if m.pending or m.state in PREPARING:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        if m.state != TxnState.ONGOING:
            return ErrorCode.INVALID_TXN_STATE
        target = replace(
            m, state=TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT, last_update_ms=self.now_ms()
        )
        code = await self._transit(m, target)
        if code == ErrorCode.NONE:
            self._spawn_completion(m, commit)
        return code

    # -- timers ---------------------------------------------------------------------------------

    async def _tick_loop(self) -> None:
        while True:
            await asyncio.sleep(0.2)
            try:
                self.tick(self.now_ms())
            except Exception:
                log.exception("transaction coordinator timers failed; continuing")

    def tick(self, now: int) -> None:
        cfg = self.config
        if now >= self._next_abort_check:
            self._next_abort_check = now + cfg.transaction_abort_timed_out_transaction_cleanup_interval_ms
            for m in list(self.txns.values()):
                if (
                    m.state == TxnState.ONGOING
                    and not m.pending
                    and m.partition in self.owned
                    and now > m.start_ms + m.timeout_ms
                ):
                    self._fence_and_abort(m, f"it timed out after {m.timeout_ms} ms")
        if now >= self._next_expiry_check:
            self._next_expiry_check = now + cfg.transaction_remove_expired_transaction_cleanup_interval_ms
            for m in list(self.txns.values()):
                if (
                    m.state in IDLE
                    and not m.pending
                    and m.partition in self.owned
                    and now - m.last_update_ms >= cfg.transactional_id_expiration_ms
                ):
                    log.info("transactional id %s expired", m.transactional_id)
                    self._spawn(self._expire(m, now))

    async def _expire(self, m: TxnMetadata, now: int) -> None:
        await self._transit(m, replace(m, state=TxnState.DEAD, last_update_ms=now))

    # -- introspection --------------------------------------------------------------------------

    def open_transactions(self) -> int:
        return sum(1 for m in list(self.txns.values()) if m.state not in IDLE)
