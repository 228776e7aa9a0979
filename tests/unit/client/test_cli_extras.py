"""A command whose optional extra is not installed says so in one line, exit code 2, no traceback.

The missing module is simulated in a child interpreter: an import hook ahead of every other finder
refuses it, as a Python without the extra would (ModuleNotFoundError, and find_spec finds nothing).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from headwater.cli.extras import describe_missing

_RUN_WITHOUT = """
import importlib.abc, sys
blocked = set(sys.argv[1].split(","))

class Missing(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".", 1)[0] in blocked:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

for name in list(sys.modules):
    if name.split(".", 1)[0] in blocked:
        del sys.modules[name]
sys.meta_path.insert(0, Missing())
from headwater.cli.main import main
sys.exit(main(sys.argv[2:]))
"""


def run_without(modules: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _RUN_WITHOUT, modules, *args], capture_output=True, text=True, timeout=120
    )


def one_line(p: subprocess.CompletedProcess[str]) -> str:
    assert p.returncode == 2, f"exit {p.returncode}\nstdout: {p.stdout}\nstderr: {p.stderr}"
    assert "Traceback" not in p.stderr, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    return lines[0]


def test_audit_serve_without_the_audit_extra(tmp_path: Path) -> None:
    config = tmp_path / "audit.properties"
    config.write_text(
        f"clusters=dc1\ndc1.bootstrap.servers=127.0.0.1:1\nstore=sqlite:///{tmp_path}/a.db\nhttp.port=0\n"
    )
    line = one_line(run_without("aiohttp", "audit", "serve", "-c", str(config)))
    assert line == (
        "headwater audit serve: error: aiohttp is not installed; install the audit extra: pip install 'headwater[audit]'"
    )


def test_audit_serve_with_a_postgresql_store_without_psycopg(tmp_path: Path) -> None:
    config = tmp_path / "audit.properties"
    config.write_text("clusters=dc1\ndc1.bootstrap.servers=127.0.0.1:1\nstore=sqlite:///a.db\nhttp.port=0\n")
    store = "store=postgresql://audit@127.0.0.1:1/audit"
    line = one_line(run_without("psycopg", "audit", "serve", "-c", str(config), "--override", store))
    assert line == (
        "headwater audit serve: error: psycopg is not installed; install the audit extra: pip install 'headwater[audit]'"
    )


@pytest.mark.parametrize("module", ["pyspark", "pyarrow"])
def test_load_without_the_loader_extra(tmp_path: Path, module: str) -> None:
    config = tmp_path / "loader.properties"
    config.write_text("bootstrap.servers=127.0.0.1:1\nwarehouse.path=/nonexistent\n")
    line = one_line(run_without(module, "load", "-c", str(config)))
    assert line == (
        f"headwater load: error: {module} is not installed; install the loader extra: pip install 'headwater[loader]'"
    )


def test_other_commands_do_not_need_the_extras() -> None:
    p = run_without("aiohttp,psycopg,pyspark,pyarrow,ansible", "topics", "-b", "127.0.0.1:1", "list")
    assert p.returncode == 1 and "extra" not in p.stderr  # an unreachable cluster, not a missing extra


def test_a_missing_module_found_later_names_its_extra() -> None:
    try:
        try:
            import psycopg_not_here  # type: ignore[import-not-found]  # noqa: F401
        except ModuleNotFoundError as e:
            e.name = "psycopg.pq"
            raise RuntimeError("cannot open the store") from e
    except RuntimeError as wrapped:
        assert describe_missing("headwater audit", wrapped) == (
            "headwater audit: error: psycopg is not installed; install the audit extra: pip install 'headwater[audit]'"
        )
    assert describe_missing("headwater x", ModuleNotFoundError("No module named 'yaml'", name="yaml")) is None
