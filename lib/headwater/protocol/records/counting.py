"""Counting a batch's records per (window, origin) without building a Record per record.

What the audit counts (audit/headwater/audit/counter.py): every record in the window of its own
creation time under its own datacenter, both read from two headers (``origin.dc``, and
``origin.created``: decimal ms since the epoch), the last non-null value of each winning. A record
lacking either, or whose creation time is not an integer in ``[0, max_time)``, cannot be
classified: it is counted under ``None`` in the window of its record timestamp (``-1`` when that is
outside ``[-max_time, max_time)``). Records below ``min_offset`` are not counted (a fetch answers
whole batches). A window is ``t // window_ms * window_ms``.

:func:`count_origins` runs the compiled codec's loop (_crecords.count_origins) when it is built and
:func:`_count_origins`, the pure-Python reference, otherwise -- and also for any batch the compiled
loop declines (anything malformed or unusual), so both give the same counts or the same
``KafkaError(CORRUPT_MESSAGE)`` for every batch (tests/unit/protocol/test_counting.py).
"""

from __future__ import annotations

from headwater.protocol.records import header as _h
from headwater.protocol.records import record as _r
from headwater.protocol.records.compression import DEFAULT_MAX_OUTPUT, Codec, decompress

__all__ = ["COMPILED", "OriginCounts", "count_origins", "created_value"]

# A compiled codec built before count_origins existed (a stale in-place build) counts in Python.
_COMPILED = getattr(_r._C, "count_origins", None)
#: True when batches are counted by the compiled codec.
COMPILED = _COMPILED is not None

#: Records per (window start, origin datacenter); datacenter None: not classified (no origin).
OriginCounts = dict[tuple[int, str | None], int]


def created_value(raw: bytes, max_time: int) -> int | None:
    """A creation-time header value as a time, or None when it is not an integer in ``[0, max_time)``
    (Python's ``int()`` decides what an integer is: signs, blanks and underscores are accepted)."""
    try:
        created = int(raw)
    except ValueError:
        return None
    return created if 0 <= created < max_time else None


def count_origins(
    batch: _r.Buffer,
    window_ms: int,
    min_offset: int,
    dc_header: str,
    created_header: str,
    max_time: int,
    *,
    header: _h.BatchHeader | None = None,
    verify_crc: bool = True,
    max_output: int = DEFAULT_MAX_OUTPUT,
) -> OriginCounts:
    """The records of the complete batch at byte 0 of ``batch`` counted per (window, origin).

    The batch is checked as :func:`~headwater.protocol.records.record.decode_batch` checks it (size,
    CRC-32C, codec, every record's framing): a bad one raises ``KafkaError(CORRUPT_MESSAGE)``.
    ``header``: the batch's header when the caller has read it already (a fetch's batches come
    with theirs: reading it again costs about as much as counting ten records)."""
    if not 0 < window_ms < 1 << 63:
        raise ValueError(f"window_ms {window_ms} is not a positive 64-bit integer")
    h = _h.read_header(batch, 0) if header is None else header
    if h.size > len(batch):
        raise _r._corrupt(f"record batch of {h.size} bytes is truncated at byte {len(batch)}")
    if verify_crc and not _h.crc_matches(batch, 0, h):
        raise _r._corrupt("record batch at byte 0 fails its CRC-32C check")
    count = h.records_count
    if count < 0:
        raise _r._corrupt(f"record batch has a negative record count {count}")
    if count == 0:
        if h.size != _h.HEADER_SIZE and h.codec == Codec.NONE:
            raise _r._corrupt(f"record batch holds {h.size - _h.HEADER_SIZE} bytes but no records")
        return {}
    payload = memoryview(batch)[_h.HEADER_SIZE : h.size]
    if h.codec != Codec.NONE:
        payload = memoryview(decompress(h.codec, payload, max_output=max_output))
    log_append = bool(h.attributes & _h.TIMESTAMP_TYPE_BIT)
    args = (payload, count, h.base_offset, h.base_timestamp, h.max_timestamp, log_append, min_offset, window_ms)
    if _COMPILED is not None and _r._C is not None:
        got: OriginCounts | None = _COMPILED(
            *args, dc_header.encode(), created_header.encode(), max_time, created_value
        )
        if got is not None:
            return got
    return _count_origins(*args, dc_header, created_header, max_time)


def _count_origins(
    data: _r.Buffer,
    count: int,
    base_offset: int,
    base_ts: int,
    max_ts: int,
    log_append: bool,
    min_offset: int,
    window_ms: int,
    dc_header: str,
    created_header: str,
    max_time: int,
) -> OriginCounts:
    """The reference implementation of _crecords.count_origins: decode, then count record by record."""
    try:
        records = _r._parse_records(
            bytes(data), count, base_offset, base_ts, max_ts, log_append, _r.Record, (), min_offset
        )
    except (IndexError, UnicodeDecodeError) as e:
        raise _r._corrupt(f"record batch at offset {base_offset} has malformed records: {e}") from None
    out: OriginCounts = {}
    for rec in records:
        dc: str | None = None
        created: int | None = None
        for k, v in rec.headers:
            if k == dc_header and v is not None:
                dc = v.decode("utf-8", "replace")
            elif k == created_header and v is not None:
                created = created_value(v, max_time)
        key: tuple[int, str | None]
        if dc is None or created is None:
            ts = rec.timestamp if -max_time <= rec.timestamp < max_time else -1
            key = (ts // window_ms * window_ms, None)
        else:
            key = (created // window_ms * window_ms, dc)
        out[key] = out.get(key, 0) + 1
    return out
