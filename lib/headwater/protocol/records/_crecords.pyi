"""Types of the compiled record codec (_crecords.pyx); see record.py for the reference code."""

from collections.abc import Sequence
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
