"""The loader's nightly schedule: when the next run starts, and how a bad time is refused."""

from __future__ import annotations

import datetime
import subprocess
import sys
from pathlib import Path

import pytest

from headwater.loader.lock import warehouse_lock
from headwater.loader.schedule import next_run, parse_time

UTC = datetime.UTC


def test_next_run_is_today_when_still_ahead_else_tomorrow() -> None:
    at = parse_time("02:00")
    assert next_run(at, datetime.datetime(2026, 11, 22, 1, 59, 59, tzinfo=UTC)) == datetime.datetime(
        2026, 11, 22, 2, 0, tzinfo=UTC
    )
    # exactly at the time: that run is starting now, the next one is tomorrow
    assert next_run(at, datetime.datetime(2026, 11, 22, 2, 0, tzinfo=UTC)) == datetime.datetime(
        2026, 11, 23, 2, 0, tzinfo=UTC
    )
    assert next_run(at, datetime.datetime(2026, 12, 31, 23, 0, tzinfo=UTC)) == datetime.datetime(
        2027, 1, 1, 2, 0, tzinfo=UTC
    )


@pytest.mark.parametrize("text", ["2am", "25:00", "02:60", "02", ""])
def test_bad_times_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="expected HH:MM"):
        parse_time(text)


def test_cli_refuses_a_bad_schedule_with_one_line_and_exit_code_2(tmp_path: Path) -> None:
    config = tmp_path / "loader.properties"
    config.write_text(f"bootstrap.servers = 127.0.0.1:1\ntopics = t\nwarehouse.path = {tmp_path / 'wh'}\n")
    proc = subprocess.run(
        [sys.executable, "-m", "headwater.cli.main", "load", "-c", str(config), "--schedule", "2am"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "headwater load: --schedule '2am': expected HH:MM (UTC), for example 02:00"
    ]


def test_loads_of_one_warehouse_take_turns(tmp_path: Path) -> None:
    import threading

    order: list[str] = []
    with warehouse_lock(str(tmp_path)):
        t = threading.Thread(target=lambda: _locked(str(tmp_path), order))
        t.start()
        t.join(0.5)  # bounded: it must still be waiting for the lock we hold
        assert t.is_alive() and order == []
        order.append("first")
    t.join(30)
    assert order == ["first", "second"]


def _locked(warehouse: str, order: list[str]) -> None:
    with warehouse_lock(warehouse):
        order.append("second")


def test_a_run_that_outlasts_its_timeout_is_stopped() -> None:
    import time

    from headwater.loader.schedule import run_child

    started = time.monotonic()
    code = run_child([sys.executable, "-c", "import time; time.sleep(600)"], timeout_s=1.0)
    assert code != 0 and time.monotonic() - started < 60
