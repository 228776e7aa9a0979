"""The transaction state machine, as data: Kafka 2.3's TransactionState and its valid transitions.

Each state has the id Kafka writes in ``transaction_status`` of a ``__transaction_state`` value.
:data:`VALID_PREVIOUS` is Kafka's ``TransactionMetadata.isValidTransition`` table: a transition to
a state is allowed only from the states listed for it. The coordinator never moves a
transactional id except through :func:`check_transition`.

    state              id  meaning
    Empty               0  no transaction open (after InitProducerId)
    Ongoing             1  partitions were added; the producer is writing
    PrepareCommit       2  EndTxn(commit) is recorded: markers are being written (the decision point)
    PrepareAbort        3  EndTxn(abort), a timeout or a fencing InitProducerId: abort markers are being written
    CompleteCommit      4  every partition has its COMMIT marker
    CompleteAbort       5  every partition has its ABORT marker
    Dead                6  the transactional id expired (a tombstone follows); never loaded back
    PrepareEpochFence   7  in memory only, never written: the coordinator bumped a producer's epoch
                           to fence it and is about to abort its open transaction (PrepareAbort)
"""

from __future__ import annotations

from enum import IntEnum

from headwater.protocol.errors import ErrorCode, KafkaError


class TxnState(IntEnum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        return "".join(w.capitalize() for w in self.name.split("_"))


S = TxnState
VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}

#: states written to __transaction_state (PrepareEpochFence never is)
WRITTEN = frozenset(VALID_PREVIOUS) - {S.PREPARE_EPOCH_FENCE}
#: a transaction is being decided: new requests for the id get CONCURRENT_TRANSACTIONS
PREPARING = frozenset({S.PREPARE_COMMIT, S.PREPARE_ABORT, S.PREPARE_EPOCH_FENCE})
#: no transaction open: InitProducerId may bump the epoch at once; the id may expire
IDLE = frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT})


def check_transition(current: TxnState, target: TxnState, transactional_id: str) -> None:
    """Raises KafkaError(INVALID_TXN_STATE) when ``target`` may not follow ``current``."""
    if current not in VALID_PREVIOUS[target]:
        raise KafkaError(
            ErrorCode.INVALID_TXN_STATE,
            f"transactional id {transactional_id}: {current.kafka_name} cannot move to {target.kafka_name}",
        )
