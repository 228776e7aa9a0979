"""Waiting for the ISR: the delayed part of an acks=all append (Produce, and the group coordinator's
writes to ``__consumer_offsets``).

An append as leader is acknowledged once the high watermark passes it: every ISR member has the
records. The wait ends early with NOT_LEADER_FOR_PARTITION when this broker stops leading (the
records may be gone), with NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR shrank below
``min.insync.replicas`` meanwhile, and with REQUEST_TIMED_OUT at the deadline. Appends and
high-watermark moves notify the purgatory; nothing polls.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from headwater.broker.partition import Partition
from headwater.broker.purgatory import Purgatory
from headwater.protocol.errors import ErrorCode


@dataclass
class ReplicationWait:
    partition: Partition
    leadership: int  # the partition's leadership counter when the records were appended
    required_offset: int  # the high watermark that covers them (last offset + 1)
    min_isr: int
    error: ErrorCode = ErrorCode.NONE  # the outcome, set when the wait ends


async def wait_for_replication(purgatory: Purgatory, waits: list[ReplicationWait], timeout_ms: int) -> None:
    """Until each wait has its outcome in ``error``: NONE once the ISR has the records."""
    deadline = time.monotonic() + max(timeout_ms, 0) / 1000.0
    pending = list(waits)
    while pending:
        still = []
        for w in pending:
            part = w.partition
            if not part.is_leader or part.leadership != w.leadership:
                # A new leader epoch alone (the controller shrank the ISR) is no reason to fail.
                w.error = ErrorCode.NOT_LEADER_FOR_PARTITION
            elif part.high_watermark >= w.required_offset:
                if len(part.isr) < w.min_isr:
                    w.error = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
            else:
                still.append(w)
        pending = still
        remaining = deadline - time.monotonic()
        if not pending:
            return
        if remaining <= 0:
            for w in pending:
                w.error = ErrorCode.REQUEST_TIMED_OUT
            return
        await purgatory.wait([w.partition.key for w in pending], remaining)
