"""How the mirror recognises its own copies in the target (headwater.mirror.copies)."""

from __future__ import annotations

import struct

from headwater.mirror.copies import batch_key, skip_copied
from headwater.protocol.records.record import RecordInput, encode_batch


def _batch(i: int) -> bytes:
    return encode_batch([RecordInput(f"k{i}".encode(), f"v{i}".encode(), 1_700_000_000_000 + i, [("h", b"x")])])


def _as_stored(batch: bytes, base_offset: int, leader_epoch: int) -> bytes:
    """What the target broker stores: the same batch with its base offset and leader epoch rewritten."""
    out = bytearray(batch)
    struct.pack_into(">q", out, 0, base_offset)
    struct.pack_into(">i", out, 12, leader_epoch)
    return bytes(out)


def test_a_copy_is_recognised_whatever_offset_and_epoch_the_target_gave_it() -> None:
    b = _batch(1)
    assert batch_key(_as_stored(b, 12345, 7)) == batch_key(b)
    assert batch_key(_batch(2)) != batch_key(b)


def test_only_the_leading_batches_found_are_skipped_each_match_used_once() -> None:
    sent = [_batch(i) for i in range(5)]
    # the target holds copies of the first three (another flow's batch in between), offsets 100...
    stored = [
        _as_stored(sent[0], 100, 1),
        _as_stored(_batch(99), 101, 1),
        _as_stored(sent[1], 102, 1),
        _as_stored(sent[2], 103, 1),
    ]
    copies: dict[bytes, list[int]] = {}
    for b, next_offset in zip(stored, (101, 102, 103, 104), strict=True):
        copies.setdefault(batch_key(b), []).append(next_offset)
    assert skip_copied(sent, copies) == (3, 104)
    # a batch sent twice in a row is skipped only as often as the target holds it
    twice = [sent[3], sent[3]]
    assert skip_copied(twice, {batch_key(sent[3]): [200]}) == (1, 200)
    assert skip_copied(sent, {}) == (0, -1)
    # a batch not held stops the matching even when a later one is held
    assert skip_copied([sent[0], sent[1]], {batch_key(sent[1]): [5]}) == (0, -1)


def test_a_cleaned_batch_is_re_encoded_dense_and_deterministically() -> None:
    """Review finding 1: the cleaner keeps a batch's offset range but drops records; a broker
    refuses that from a producer, so the fast path re-encodes it with dense offsets."""
    from headwater.mirror.copier import as_target_batch, is_dense
    from headwater.protocol.records.header import read_header
    from headwater.protocol.records.record import decode_batch

    records = [RecordInput(b"k1", b"v1", 1_700_000_000_001, [("h", b"x")]), RecordInput(b"k3", None, 1_700_000_000_003)]
    cleaned = encode_batch(records, base_offset=40, compression=3, offset_deltas=[0, 2], last_offset_delta=2)
    h = read_header(cleaned)
    assert not is_dense(h)
    out = as_target_batch(h, memoryview(cleaned))
    assert out is not None and bytes(out) == bytes(as_target_batch(h, memoryview(cleaned)) or b"")
    h2, got = decode_batch(out)
    assert is_dense(h2) and h2.records_count == 2 and h2.codec == 3
    assert [(r.offset, r.key, r.value, r.timestamp, r.headers) for r in got] == [
        (0, b"k1", b"v1", 1_700_000_000_001, (("h", b"x"),)),
        (1, b"k3", None, 1_700_000_000_003, ()),
    ]
    dense = _batch(7)
    assert as_target_batch(read_header(dense), memoryview(dense)) == dense  # untouched
    emptied = h._replace(records_count=0)  # the cleaner removed every record
    assert as_target_batch(emptied, memoryview(cleaned)) is None
