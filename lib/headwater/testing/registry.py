"""A real schema registry for tests and the lab: Apicurio Registry, built once from Maven Central.

``deploy/registry/pom.xml`` pins Apicurio Registry's published application jar
(``io.apicurio:apicurio-registry-app``) and builds it into a runnable Quarkus application;
``fetch()`` (``python -m headwater.testing.registry fetch``, the Makefile's ``registry-deps``) runs
Maven once and keeps the runner jar and its ``lib/`` under ``build/registry/app`` with a stamp of the
project's hash; while the stamp matches, later runs start no Maven. Without Maven Central it says
so in one line and exits 0: the tests that need the registry then skip with that line.

:class:`RegistryProcess` runs it (``java -jar``, in-memory storage, a port of its
own on 127.0.0.1), waits for its readiness check, and stops it by pid. Its Confluent-compatible API
is :attr:`RegistryProcess.url` (what confluent-kafka's ``SchemaRegistryClient`` and the loader's
``schema.registry.url`` take).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from headwater.testing.java import REPO, java_home

PROJECT = Path(os.environ.get("HEADWATER_REGISTRY_PROJECT", REPO / "deploy" / "registry"))
CACHE = Path(os.environ.get("HEADWATER_REGISTRY_CACHE", REPO / "build" / "registry"))
APP = CACHE / "app"  # the runner jar and its lib/
STAMP = CACHE / ".fetched"
UNREACHABLE = CACHE / ".unreachable"
#: Apicurio Registry's Confluent-compatible API under its root
CCOMPAT = "/apis/ccompat/v6"

_NETWORK_ERRORS = re.compile(
    r"UnknownHost|Unknown host|Connection refused|Connect to .* failed|Network is unreachable|timed out|"
    r"No route to host|Could not transfer|transfer failed|offline mode",
)


def fingerprint() -> str:
    h = hashlib.sha256()
    for f in sorted(p for p in PROJECT.rglob("*") if p.is_file() and "target" not in p.parts):
        h.update(str(f.relative_to(PROJECT)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def cached() -> bool:
    return STAMP.exists() and STAMP.read_text().split()[0] == fingerprint() and _runner() is not None


def _runner() -> Path | None:
    """The application's jar (Quarkus's legacy-jar packaging, as Apicurio's own build sets it)."""
    return next(iter(sorted(APP.glob("*-runner.jar"))), None) or next(iter(APP.glob("quarkus-run.jar")), None)


def unavailable() -> str | None:
    """Why the registry cannot run (one line), or None when it is built."""
    if cached():
        return None
    if UNREACHABLE.exists():
        return UNREACHABLE.read_text().strip()
    return "the schema registry is not built: run `make registry-deps`"


def fetch(force: bool = False) -> int:
    if cached() and not force:
        print(f"registry-deps: cached in {APP}; Maven not run", flush=True)
        return 0
    mvn = shutil.which("mvn")
    if mvn is None:
        return _unreachable("Maven is not installed (make system-deps)")
    CACHE.mkdir(parents=True, exist_ok=True)
    UNREACHABLE.unlink(missing_ok=True)
    STAMP.unlink(missing_ok=True)
    print(f"registry-deps: building Apicurio Registry from Maven Central into {APP} (once)", flush=True)
    started = time.monotonic()
    env = {**os.environ, "JAVA_HOME": str(java_home(11))}
    cmd = [mvn, "-B", "-Dstyle.color=never", "-f", str(PROJECT / "pom.xml"), "package", "-DskipTests"]
    cmd += os.environ.get("HEADWATER_JAVA_MVN_ARGS", "").split()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    if proc.returncode != 0:
        if _NETWORK_ERRORS.search(proc.stdout):
            reason = next((ln.strip() for ln in proc.stdout.splitlines() if _NETWORK_ERRORS.search(ln)), "")
            return _unreachable(f"Maven Central cannot be reached: {reason[:160]}")
        sys.stdout.write(proc.stdout[-4000:])
        return proc.returncode
    shutil.rmtree(APP, ignore_errors=True)
    target = PROJECT / "target"
    if (target / "quarkus-app").is_dir():  # fast-jar packaging
        shutil.copytree(target / "quarkus-app", APP)
    else:
        shutil.copytree(target / "lib", APP / "lib")
        for jar in target.glob("*-runner.jar"):
            shutil.copy2(jar, APP / jar.name)
    shutil.rmtree(PROJECT / "target", ignore_errors=True)
    STAMP.write_text(f"{fingerprint()} {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\n")
    print(f"registry-deps: built in {time.monotonic() - started:.0f}s; later runs use the cache", flush=True)
    return 0


def _unreachable(reason: str) -> int:
    CACHE.mkdir(parents=True, exist_ok=True)
    line = f"schema registry tests skip: {reason}"
    UNREACHABLE.write_text(line + "\n")
    print(f"registry-deps: {line}", flush=True)
    return 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RegistryProcess:
    """One Apicurio Registry process (in-memory storage) on 127.0.0.1."""

    def __init__(self, workdir: Path, port: int | None = None) -> None:
        self.workdir = workdir
        self.port = port or _free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = workdir / "registry.log"

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        """The Confluent-compatible API (``schema.registry.url``)."""
        return self.root + CCOMPAT

    def start(self, timeout: float = 180.0) -> RegistryProcess:
        why = unavailable()
        if why:
            raise FileNotFoundError(why)
        self.workdir.mkdir(parents=True, exist_ok=True)
        java = java_home(11) / "bin" / "java"
        cmd = [
            str(java),
            "-Xmx384m",
            "-XX:TieredStopAtLevel=1",  # a short-lived test process: start fast
            f"-Dquarkus.http.port={self.port}",
            "-Dquarkus.http.host=127.0.0.1",
            "-Djava.io.tmpdir=" + str(self.workdir),
            "-jar",
            str(_runner()),
        ]
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=self.workdir)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the registry exited {self.proc.returncode}: {self._tail()}")
            if self.ready():
                return self
            time.sleep(0.3)
        self.stop()
        raise TimeoutError(f"the registry was not ready in {timeout:.0f}s: {self._tail()}")

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.root + "/health/ready", timeout=5) as resp:
                body = json.loads(resp.read() or b"{}")
                return bool(resp.status == 200 and body.get("status", "UP") == "UP")
        except (OSError, ValueError):
            return False

    def _tail(self) -> str:
        try:
            lines = self.log.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "no log"
        return " | ".join(lines[-5:])[-1500:]

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(30)

    def __enter__(self) -> RegistryProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str]) -> int:
    if argv[:1] == ["fetch"]:
        return fetch(force="--force" in argv)
    if argv[:1] == ["run"]:  # a registry in the foreground (make registry)
        port = int(argv[1]) if len(argv) > 1 else 8081
        reg = RegistryProcess(CACHE / "run", port).start()
        print(f"schema registry: {reg.url} (Ctrl-C stops it)", flush=True)
        try:
            assert reg.proc is not None
            reg.proc.wait()
        except KeyboardInterrupt:
            reg.stop()
        return 0
    print("usage: python -m headwater.testing.registry fetch [--force] | run [PORT]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
