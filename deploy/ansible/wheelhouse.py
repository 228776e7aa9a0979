#!/usr/bin/env python3
"""Build the wheelhouse the ``headwater`` role copies to each host (``make wheel``).

Hosts install Headwater with ``pip --no-index`` from these files, so they need no package index.
Output, ``build/wheelhouse/`` (``--out``):

    headwater-<version>-py3-none-any.whl     Headwater itself (reproducible: same code, same bytes)
    <dependency>-*.whl                        every dependency of headwater[audit,loader]
    manifest.json                             what the role reads on the control node:
        {"version": "0.1.0",
         "headwater": "headwater-0.1.0-py3-none-any.whl",
         "sets": {"": [wheels of `headwater`], "audit": [...], "loader": [...]},   # one per extra
         "sha256": {"<wheel file>": "<hex digest>", ...}}

A host copies the union of the sets it needs (``""`` plus its extras), not the whole directory:
the loader's pyspark and pyarrow are most of its 500 MB. The sets come from pip's own resolver
(``pip install --dry-run --report`` against the wheelhouse alone).

As deploy/scripts/build-images.sh does, the dependencies' wheels are rebuilt only when
pyproject.toml, the Python version or the machine changes (and are hard-linked from the image
build's wheelhouse when that one has the same key), and Headwater's wheel is built without build
isolation by the image build's kept build-tools venv when it exists. Wheels fit the Python that
runs this script: run it with Python 3.11 for Debian 12 hosts.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXTRAS = ("audit", "loader")


def say(msg: str) -> None:
    print(f"wheelhouse: {msg}", file=sys.stderr, flush=True)


def pip(python: str, *args: str) -> None:
    subprocess.run([python, "-m", "pip", "--disable-pip-version-check", "-q", *args], check=True)


def deps_key(src: Path) -> str:
    """The same key build-images.sh computes for its dependency wheels (so they can be shared)."""
    pyver = f"{sys.version_info.major}.{sys.version_info.minor}"
    text = (src / "pyproject.toml").read_bytes() + f"{pyver} {','.join(EXTRAS)} {platform.machine()}\n".encode()
    return hashlib.sha256(text).hexdigest()[:16]


def build_deps(src: Path, out: Path) -> None:
    deps = out / ".deps"
    key = deps_key(src)
    key_file = out / ".deps.key"
    if deps.is_dir() and key_file.exists() and key_file.read_text().strip() == key:
        return
    image_deps = ROOT / "build" / "docker" / "headwater" / "wheels"
    tmp = Path(tempfile.mkdtemp(dir=out, prefix=".deps-"))
    if (image_deps / "deps.key").exists() and (image_deps / "deps.key").read_text().strip() == key:
        say(f"dependencies: linked from {image_deps / 'deps'}")
        for whl in (image_deps / "deps").glob("*.whl"):
            try:
                os.link(whl, tmp / whl.name)
            except OSError:
                shutil.copy2(whl, tmp / whl.name)
    else:
        say(f"dependencies: pip wheel {src}[{','.join(EXTRAS)}] (minutes the first time)")
        pip(sys.executable, "wheel", "-w", str(tmp), f"{src}[{','.join(EXTRAS)}]")
        for whl in tmp.glob("headwater-*.whl"):
            whl.unlink()
    shutil.rmtree(deps, ignore_errors=True)
    tmp.rename(deps)
    key_file.write_text(key + "\n")


def build_app(src: Path, out: Path) -> Path:
    tools = ROOT / "build" / "docker" / "build-tools" / "bin" / "python"
    tmp = Path(tempfile.mkdtemp(dir=out, prefix=".app-"))
    try:
        if tools.exists():
            pip(str(tools), "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp), str(src))
        else:
            pip(sys.executable, "wheel", "--no-deps", "-w", str(tmp), str(src))
        (wheel,) = tmp.glob("headwater-*.whl")
        target = out / wheel.name
        os.replace(wheel, target)
        return target
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def resolve(out: Path, requirement: str) -> list[str]:
    """The wheel files pip would install for ``requirement`` from this wheelhouse alone."""
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "--disable-pip-version-check", "install", "--dry-run", "--quiet",
         "--ignore-installed", "--no-index", "--find-links", str(out), "--report", "-", requirement],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    report = json.loads(proc.stdout)
    return sorted(Path(item["download_info"]["url"]).name for item in report["install"])


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "wheelhouse")
    parser.add_argument("--src", type=Path, default=ROOT, help="the source tree to package (default: this checkout)")
    args = parser.parse_args()
    out: Path = args.out.resolve()
    src: Path = args.src.resolve()
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with (out / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # test runs and `make wheel` may overlap
        build_deps(src, out)
        app = build_app(src, out)
        version = tomllib.loads((src / "pyproject.toml").read_text())["project"]["version"]
        wanted = {app.name} | {whl.name for whl in (out / ".deps").glob("*.whl")}
        for whl in out.glob("*.whl"):
            if whl.name not in wanted:
                whl.unlink()  # an earlier build's
        for whl in (out / ".deps").glob("*.whl"):
            target = out / whl.name
            if not target.exists():
                os.link(whl, target)
        sets = {"": resolve(out, f"headwater=={version}")}
        for extra in EXTRAS:
            sets[extra] = resolve(out, f"headwater[{extra}]=={version}")
        manifest = {
            "version": version,
            "headwater": app.name,
            "sets": sets,
            "sha256": {name: sha256(out / name) for name in sorted(set().union(*sets.values()))},
        }
        text = json.dumps(manifest, indent=2, sort_keys=True) + "\n"
        path = out / "manifest.json"
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
    size = sum(f.stat().st_size for f in out.glob("*.whl"))
    say(f"{out}: {len(wanted)} wheels, {size / 1e6:.0f} MB, in {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
