"""Offset ranges as planned from a partition's log start and log end offsets (no broker, no Spark)."""

from __future__ import annotations

import pytest

from headwater.loader.offsets import (
    EARLIEST,
    LATEST,
    DataLossError,
    OffsetRange,
    OffsetSpecError,
    _offset_for,
    plan_range,
)


def test_explicit_offsets_are_used_as_given() -> None:
    # The log holds [500, 900): explicit offsets inside it are the range, never re-clamped.
    assert plan_range("t", 0, 600, 700, earliest=500, latest=900) == (OffsetRange("t", 0, 600, 700), None)
    assert plan_range("t", 0, EARLIEST, LATEST, earliest=500, latest=900) == (OffsetRange("t", 0, 500, 900), None)
    assert plan_range("t", 0, 900, LATEST, earliest=500, latest=900) == (OffsetRange("t", 0, 900, 900), None)


def test_an_end_beyond_the_log_end_cannot_be_honoured() -> None:
    # A leader that now reports a lower high watermark (or a planned end the log never reached):
    # the read fails instead of quietly returning fewer records than the manifest claims.
    with pytest.raises(OffsetSpecError, match=r"t-3 ends at 1000, beyond its log end offset 950"):
        plan_range("t", 3, 800, 1000, earliest=0, latest=950)
    with pytest.raises(OffsetSpecError, match=r"t-0: the starting offset 20 is above the ending offset 10"):
        plan_range("t", 0, 20, 10, earliest=0, latest=50)


def test_json_offsets_name_every_partition_unless_a_default_is_given() -> None:
    spec = {"t": {0: 5}}
    assert _offset_for(spec, "startingOffsets", "t", 0) == 5
    with pytest.raises(OffsetSpecError, match=r"startingOffsets: no offset for t-1"):
        _offset_for(spec, "startingOffsets", "t", 1)
    assert _offset_for(spec, "startingOffsets", "t", 1, missing=EARLIEST) == EARLIEST


def test_a_start_below_the_log_start_is_an_exact_loss() -> None:
    # Retention moved the log start to 500; the loader stopped at 100: [100, 500) is gone.
    r, loss = plan_range("t", 2, 100, LATEST, earliest=500, latest=900)
    assert r == OffsetRange("t", 2, 500, 900)
    assert loss is not None and (loss.from_offset, loss.to_offset, loss.records) == (100, 500, 400)
    assert loss.reason == "source retention"
    assert "t-2: offsets [100, 500) are gone (400 record(s))" in loss.describe()
    # The whole asked-for range is gone: nothing to read, all of it lost.
    r, loss = plan_range("t", 2, 100, 300, earliest=500, latest=900)
    assert r.size == 0 and loss is not None and (loss.from_offset, loss.to_offset) == (100, 300)


def test_a_start_above_the_log_end_is_a_re_created_topic() -> None:
    # Stored 1000, the new topic's log ends at 50: read the new log from its start, report the old.
    r, loss = plan_range("t", 0, 1000, LATEST, earliest=0, latest=50)
    assert r == OffsetRange("t", 0, 0, 50)
    assert loss is not None and loss.reason == "topic re-created" and loss.from_offset == 1000
    assert "above the log end offset 50" in loss.describe()


def test_data_loss_error_names_every_partition_and_range() -> None:
    _, a = plan_range("page-views", 1, 100, LATEST, earliest=500, latest=900)
    _, b = plan_range("clicks", 0, 1000, LATEST, earliest=0, latest=50)
    assert a is not None and b is not None
    text = str(DataLossError([a, b]))
    assert "page-views-1: offsets [100, 500) are gone" in text
    assert "clicks-0: the offset to read, 1000, is above the log end offset 50" in text
    assert "failOnDataLoss=false" in text
