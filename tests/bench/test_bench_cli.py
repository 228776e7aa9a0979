"""``headwater bench`` argument checks that need no cluster."""

from __future__ import annotations

import subprocess
import sys

import pytest

from headwater.cli.bench import _sizes


def test_scale_partitions_are_parsed() -> None:
    assert _sizes(None) == ()
    assert _sizes("1000, 10_000") == (1000, 10000)


@pytest.mark.parametrize("text", ["", "0", "1001", "-20", "ten"])
def test_bad_scale_partitions_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        _sizes(text)


def test_the_cli_refuses_bad_scale_partitions_in_one_line() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "headwater.cli.main", "bench", "--only", "scale", "--scale-partitions", "1001"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 2
    assert run.stderr.strip().splitlines() == [
        "headwater bench: --scale-partitions '1001': give positive multiples of 20, comma-separated (topics of 20 partitions)"
    ]


def test_versus_refuses_an_unknown_group_in_one_line() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "headwater.cli.main", "bench", "--versus", "kafka", "--only", "core,mm3"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 2
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "unknown group(s) mm3" in lines[0] and "failover, mm2, spark" in lines[0], lines
