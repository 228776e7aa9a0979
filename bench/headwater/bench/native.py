"""The native load generators: our C producer (``bench/native/rdkafka_produce.c``) and kcat.

The C producer is compiled with gcc against Debian's ``librdkafka-dev``, which is installed with
apt-get when it is missing and we run as root. Anything missing degrades to a clear "not
available" reason instead of failing the benchmark.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

_SOURCE_ENV = "HEADWATER_BENCH_NATIVE_DIR"
_HEADER = Path("/usr/include/librdkafka/rdkafka.h")


@dataclass
class Native:
    """What this machine offers: paths to the tools, or why each one is missing."""

    producer: Path | None
    producer_why_not: str
    kcat: Path | None
    kcat_why_not: str
    librdkafka_version: str = ""


def source_dir() -> Path:
    """``bench/native`` of the source tree (the wheel does not carry C sources)."""
    if os.environ.get(_SOURCE_ENV):
        return Path(os.environ[_SOURCE_ENV])
    return Path(__file__).resolve().parents[2] / "native"


def _apt_install(package: str, log: list[str]) -> None:
    """``apt-get install`` (after an ``apt-get update`` if the first try fails), as root only."""
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    install = ["apt-get", "install", "-y", "-q", package]
    for cmd in (install, ["apt-get", "update", "-q"], install):
        log.append(" ".join(cmd))
        done = subprocess.run(cmd, env=env, capture_output=True, timeout=600, check=False)
        if cmd is install and done.returncode == 0:
            return


def build_producer(build_dir: Path, log: list[str]) -> tuple[Path | None, str]:
    src = source_dir() / "rdkafka_produce.c"
    if not src.exists():
        return None, f"not available: C source {src} not found (run from a source checkout)"
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        return None, "not available: no C compiler (gcc)"
    if not _HEADER.exists():
        _apt_install("librdkafka-dev", log)
        if not _HEADER.exists():
            return None, "not available: librdkafka-dev is missing (apt-get install librdkafka-dev, as root)"
    build_dir.mkdir(parents=True, exist_ok=True)
    exe = build_dir / "rdkafka_produce"
    if exe.exists() and exe.stat().st_mtime >= src.stat().st_mtime:
        return exe, ""
    cmd = [gcc, "-O2", "-Wall", "-o", str(exe), str(src), "-lrdkafka"]
    log.append(" ".join(cmd))
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        return None, f"not available: compiling {src.name} failed: {proc.stderr.strip()[-500:]}"
    return exe, ""


def find_kcat(log: list[str]) -> tuple[Path | None, str]:
    found = shutil.which("kcat") or shutil.which("kafkacat")
    if found is None:
        _apt_install("kcat", log)
        found = shutil.which("kcat")
    if found is None:
        return None, "not available: kcat is missing (apt-get install kcat)"
    return Path(found), ""


def discover(build_dir: Path) -> tuple[Native, list[str]]:
    """Build or find the native generators; returns them and the commands that were run."""
    log: list[str] = []
    producer, producer_why = build_producer(build_dir, log)
    kcat, kcat_why = find_kcat(log)
    version = ""
    if kcat is not None:
        out = subprocess.run([str(kcat), "-V"], capture_output=True, text=True, timeout=30)
        m = re.search(r"librdkafka ([0-9][0-9.]*)", out.stdout + out.stderr)
        version = m.group(1) if m else ""
    return Native(producer, producer_why, kcat, kcat_why, version), log
