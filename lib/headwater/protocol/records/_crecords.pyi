"""Types of the compiled record codec (_crecords.pyx); see record.py for the reference code."""

from collections.abc import Callable, Sequence
from typing import Any

def parse_records(
    data: bytes | bytearray | memoryview,
    count: int,
    base_offset: int,
    base_ts: int,
    max_ts: int,
    log_append: bool,
    cls: type[Any],
    prefix: tuple[Any, ...],
    min_offset: int,
) -> list[Any]: ...
def encode_records(out: bytearray, records: Sequence[Any], base_ts: int) -> int: ...
def count_origins(
    data: bytes | bytearray | memoryview,
    count: int,
    base_offset: int,
    base_ts: int,
    max_ts: int,
    log_append: bool,
    min_offset: int,
    window_ms: int,
    dc_header: bytes,
    created_header: bytes,
    max_time: int,
    created_value: Callable[[bytes, int], int | None],
) -> dict[tuple[int, str | None], int] | None: ...
