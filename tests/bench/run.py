"""Running ``headwater bench --quick`` from a test: a real ZooKeeper must be installed, results go
under the test's own directory."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from headwater.testing.zookeeper import ZK_SERVER


def run_quick_bench(tmp_path: Path, *only: str, timeout: float) -> tuple[subprocess.CompletedProcess[str], Path]:
    """``headwater bench --quick [--only N]`` with ``--out``/``--workdir`` in ``tmp_path``; the finished
    process (asserted to have exited 0) and the results directory."""
    if not Path(ZK_SERVER).exists() or shutil.which("java") is None:
        pytest.fail("ZooKeeper is not installed: run `make system-deps` (Debian's zookeeper package)")
    out = tmp_path / "results"
    args = [sys.executable, "-m", "headwater.cli.main", "bench", "--quick"]
    for scenario in only:
        args += ["--only", scenario]
    proc = subprocess.run(
        [*args, "--out", str(out), "--workdir", str(tmp_path / "work")],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc, out
