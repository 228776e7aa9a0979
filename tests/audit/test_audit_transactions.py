"""A cluster tier counts committed records only (issue 41): the tier reads read_committed, as the
mirror and the loader do, so an aborted transaction counted at the first tier cannot look like a
loss at the next one. The partition is served by test_audit_exact's in-memory ``fetch_raw``,
answering as a broker does: a read_committed fetch names the aborted transactions and stops at
the last stable offset."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from headwater.audit import counter as counter_mod
from headwater.audit.store import Store
from headwater.client.raw import READ_COMMITTED, RawPartition
from headwater.protocol.records import header
from headwater.protocol.records.control import encode_marker
from headwater.protocol.records.record import RecordInput, encode_batch
from tests.audit.test_audit_exact import NOW, FakeFetch, _config, _counter, _counts, _rec


def _txn_batch(records: list[RecordInput], base_offset: int, producer_id: int) -> tuple[Any, memoryview]:
    b = encode_batch(
        records, base_offset=base_offset, producer_id=producer_id, producer_epoch=0, base_sequence=0, transactional=True
    )
    return header.read_header(b), memoryview(b)


def _marker(base_offset: int, producer_id: int, commit: bool) -> tuple[Any, memoryview]:
    b = bytearray(encode_marker(producer_id, 0, commit, 0, NOW))
    header.rewrite_offset_and_epoch(b, 0, base_offset, 0)
    return header.read_header(b), memoryview(bytes(b))


class TxnFetch(FakeFetch):
    """Answers a read_committed fetch with the aborted transactions (producer id, first offset) and
    the last stable offset; a read_uncommitted one as before (everything, no aborted list)."""

    def __init__(self, logs: Any, aborted: list[tuple[int, int]], lso: int) -> None:
        super().__init__(logs)
        self.aborted = aborted
        self.lso = lso
        self.isolation: list[int] = []

    async def __call__(self, cluster: Any, requests: Any, **kw: Any) -> Any:
        level = int(kw.get("isolation_level", 0))
        self.isolation.append(level)
        got = {}
        for t, p, o in requests:
            end = self.end((t, p)) if level != READ_COMMITTED else self.lso
            batches = [(h, b) for h, b in self.logs.get((t, p), []) if h.next_offset > o and h.base_offset < end]
            if level == READ_COMMITTED:
                got[(t, p)] = RawPartition(batches, self.end((t, p)), 0, self.lso, tuple(self.aborted))
            else:
                got[(t, p)] = RawPartition(batches, self.end((t, p)), 0)
        return got, {}


def test_a_tier_counts_committed_and_plain_records_never_aborted_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = [
        _txn_batch([_rec(NOW + i) for i in range(4)], 0, producer_id=7),  # aborted below
        encode_and_read([_rec(NOW + 10 + i) for i in range(3)], 4),  # plain, inside the aborted one
        _txn_batch([_rec(NOW + 20 + i) for i in range(5)], 7, producer_id=8),  # committed below
        _marker(12, 7, commit=False),
        _marker(13, 8, commit=True),
        encode_and_read([_rec(NOW + 30 + i) for i in range(2)], 14),  # plain
        _txn_batch([_rec(NOW + 40 + i) for i in range(6)], 16, producer_id=9),  # still open: beyond the LSO
    ]
    fetch = TxnFetch({("t", 0): log}, aborted=[(7, 0)], lso=16)
    monkeypatch.setattr(counter_mod, "fetch_raw", fetch)
    config = _config(tmp_path)
    store = Store(config.store)
    tier = _counter(config, store)
    tier.offsets = {("t", 0): 0}
    asyncio.run(tier._round())
    assert fetch.isolation == [READ_COMMITTED]
    assert _counts(store) == {(NOW, "dc1", "dc1"): 3 + 5 + 2}  # not the 4 aborted, not the 6 still open
    assert tier.offsets == {("t", 0): 16}  # past the aborted records and both markers, held at the LSO
    assert tier.watermarks[("t", 0)] < NOW + 40  # the open transaction's window is not closed by it


def encode_and_read(records: list[RecordInput], base_offset: int) -> tuple[Any, memoryview]:
    b = encode_batch(records, base_offset=base_offset)
    return header.read_header(b), memoryview(b)
