"""A throwaway PostgreSQL server from Debian's binaries (``/usr/lib/postgresql/*/bin``) for store
tests: initdb in a temporary directory, started and restarted with pg_ctl, as the ``postgres`` user
when run as root (PostgreSQL refuses to run as root). Tests skip when the binaries are missing."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from headwater.testing.zookeeper import free_port


def binaries() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return Path(found[-1]).parent if found else None


class LocalPostgres:
    def __init__(self) -> None:
        bindir = binaries()
        if bindir is None:
            raise RuntimeError("no PostgreSQL server binaries (apt-get install postgresql)")
        self.bin = bindir
        self.dir = Path(tempfile.mkdtemp(prefix="hw-audit-pg-"))
        self.data = self.dir / "data"
        self.port = free_port()
        self.user: str | None = None
        if os.geteuid() == 0:
            self.user = "postgres"
            pw = pwd.getpwnam("postgres")
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "audit", "--no-sync")
        self.dsn = f"postgresql://audit@127.0.0.1:{self.port}/postgres"

    def _run(self, tool: str, *args: str) -> None:
        cmd = [str(self.bin / tool), *args]
        if self.user is not None:
            cmd = ["runuser", "-u", self.user, "--", *cmd]
        subprocess.run(cmd, check=True, capture_output=True, timeout=120)

    def _ctl(self, action: str) -> None:
        options = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(
            "pg_ctl",
            action,
            "-D",
            str(self.data),
            "-w",
            "-t",
            "120",
            "-m",
            "fast",
            "-o",
            options,
            "-l",
            str(self.dir / "log"),
        )

    def start(self) -> LocalPostgres:
        self._ctl("start")
        return self

    def restart(self) -> None:
        self._ctl("restart")

    def stop(self) -> None:
        self._run("pg_ctl", "stop", "-D", str(self.data), "-w", "-m", "fast")

    def cleanup(self) -> None:
        try:
            self.stop()
        except subprocess.CalledProcessError:
            pass
        shutil.rmtree(self.dir, ignore_errors=True)


class ContainerPostgres:
    """The lab's PostgreSQL image (``headwater/postgres:dev``, ``make integration-deps``) as a
    container with its port published on 127.0.0.1; restarted with ``docker restart``. Labelled
    ``org.headwater.test-run`` so a failed run's leftovers can be found."""

    IMAGE = f"headwater/postgres:{os.environ.get('HEADWATER_IMAGE_TAG', 'dev')}"

    def __init__(self) -> None:
        import docker

        self.client = docker.from_env(timeout=60)
        self.client.ping()
        self.client.images.get(self.IMAGE)  # ImageNotFound: run `make integration-deps`
        self.port = free_port()
        self.container = self.client.containers.run(
            self.IMAGE,
            detach=True,
            ports={"5432/tcp": ("127.0.0.1", self.port)},
            environment={"POSTGRES_USER": "audit", "POSTGRES_PASSWORD": "audit", "POSTGRES_DB": "audit"},
            labels={"org.headwater.test-run": "audit-postgres"},
        )
        self.dsn = f"postgresql://audit:audit@127.0.0.1:{self.port}/audit"

    def _wait(self, timeout: float = 120) -> None:
        import psycopg

        deadline = time.monotonic() + timeout
        while True:
            try:
                with psycopg.connect(self.dsn, connect_timeout=5) as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)

    def start(self) -> ContainerPostgres:
        self._wait()
        return self

    def restart(self) -> None:
        # SIGINT: PostgreSQL's fast shutdown (docker's SIGTERM is a smart shutdown, which waits for
        # the audit's connection to close until docker kills the server).
        self.container.kill(signal="SIGINT")
        self.container.wait(timeout=60)
        self.container.start()
        self._wait()

    def cleanup(self) -> None:
        try:
            self.container.remove(force=True)
        finally:
            self.client.close()


def available() -> list[str]:
    """Which servers the fault test can use here: ``debian`` (binaries), ``container`` (an engine
    and the image)."""
    out = ["debian"] if binaries() is not None else []
    try:
        import docker

        client = docker.from_env(timeout=10)
        try:
            client.ping()
            client.images.get(ContainerPostgres.IMAGE)
            out.append("container")
        finally:
            client.close()
    except Exception:  # no engine or no image: that variant is skipped
        pass
    return out
