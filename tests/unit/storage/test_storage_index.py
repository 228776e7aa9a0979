"""The sparse indexes: layout on disk, bisect lookups, truncation, and the checks made at load."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from headwater.broker.storage.fs import OsFileSystem
from headwater.broker.storage.index import IndexCorruptError, InvalidOffsetError, OffsetIndex, TimeIndex

FS = OsFileSystem()


def test_offset_index_lookup_and_layout(tmp_path: Path) -> None:
    path = str(tmp_path / "00000000000000000100.index")
    idx = OffsetIndex(FS, path, 100)
    assert idx.lookup(100) == (100, 0)  # empty: the segment's start
    for off, pos in [(110, 4200), (125, 8400), (190, 12700)]:
        idx.append(off, pos)
    assert idx.lookup(99) == (100, 0)
    assert idx.lookup(109) == (100, 0)
    assert idx.lookup(110) == (110, 4200)
    assert idx.lookup(124) == (110, 4200)
    assert idx.lookup(125) == (125, 8400)
    assert idx.lookup(10**12) == (190, 12700)
    idx.flush(sync=True)
    idx.close()
    with open(path, "rb") as f:
        raw = f.read()
    assert raw == struct.pack(">iiiiii", 10, 4200, 25, 8400, 90, 12700)  # relative offset, position
    loaded = OffsetIndex.load(FS, path, 100, log_size=20000)
    assert loaded.entries() == [(110, 4200), (125, 8400), (190, 12700)]


def test_offset_index_refuses_non_increasing_entries(tmp_path: Path) -> None:
    idx = OffsetIndex(FS, str(tmp_path / "x.index"), 0)
    idx.append(10, 100)
    with pytest.raises(InvalidOffsetError):
        idx.append(10, 200)
    with pytest.raises(InvalidOffsetError):
        idx.append(11, 100)
    with pytest.raises(InvalidOffsetError):
        idx.append(2**31 + 1, 300)  # relative offsets are int32


def test_offset_index_truncation_reaches_the_file(tmp_path: Path) -> None:
    path = str(tmp_path / "x.index")
    idx = OffsetIndex(FS, path, 0)
    for i in range(1, 6):
        idx.append(i * 10, i * 1000)
    idx.flush(sync=False)
    idx.truncate_to(30)  # entries for offsets >= 30 go
    assert idx.entries() == [(10, 1000), (20, 2000)]
    idx.truncate_to_position(2000)
    assert idx.entries() == [(10, 1000)]
    idx.append(15, 1500)
    idx.flush(sync=False)
    idx.close()
    assert OffsetIndex.load(FS, path, 0, 5000).entries() == [(10, 1000), (15, 1500)]


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b"\x00\x00\x00\x05\x00\x00\x01", "size"),
        (struct.pack(">iiii", 5, 100, 5, 200), "increasing"),
        (struct.pack(">iiii", 5, 200, 6, 100), "increasing"),
        (struct.pack(">ii", 5, 100) + bytes(8), "increasing"),  # a zero page after valid entries
        (struct.pack(">ii", 5, 9999), "beyond"),
    ],
)
def test_offset_index_load_rejects_a_bad_file(tmp_path: Path, raw: bytes, why: str) -> None:
    path = tmp_path / "x.index"
    path.write_bytes(raw)
    with pytest.raises(IndexCorruptError, match=why):
        OffsetIndex.load(FS, str(path), 0, log_size=1000)


def test_time_index_entries_only_when_the_timestamp_grows(tmp_path: Path) -> None:
    path = str(tmp_path / "x.timeindex")
    idx = TimeIndex(FS, path, 50)
    assert not idx.maybe_append(-1, 50)  # no timestamp
    assert idx.maybe_append(1000, 55)
    assert not idx.maybe_append(1000, 60)
    assert not idx.maybe_append(900, 61)
    assert idx.maybe_append(2000, 70)
    assert idx.lookup(999) == (-1, 50)
    assert idx.lookup(1000) == (1000, 55)
    assert idx.lookup(1999) == (1000, 55)
    assert idx.lookup(5000) == (2000, 70)
    idx.flush(sync=True)
    idx.close()
    with open(path, "rb") as f:
        assert f.read() == struct.pack(">qiqi", 1000, 5, 2000, 20)
    loaded = TimeIndex.load(FS, path, 50)
    assert loaded.entries() == [(1000, 55), (2000, 70)]
    loaded.check_last(71)
    with pytest.raises(IndexCorruptError):
        loaded.check_last(70)  # an entry at or beyond the log's end
    loaded.truncate_to(70)
    assert loaded.entries() == [(1000, 55)]


def test_time_index_load_rejects_decreasing_timestamps(tmp_path: Path) -> None:
    path = tmp_path / "x.timeindex"
    path.write_bytes(struct.pack(">qiqi", 2000, 5, 1000, 6))
    with pytest.raises(IndexCorruptError):
        TimeIndex.load(FS, str(path), 0)
    path.write_bytes(struct.pack(">qi", 2000, 5) + b"\x00")
    with pytest.raises(IndexCorruptError):
        TimeIndex.load(FS, str(path), 0)
