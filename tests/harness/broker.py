"""Real broker processes (``python -m headwater.cli.main broker start``) with fault hooks."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from headwater.testing.zookeeper import free_port


class BrokerProcess:
    def __init__(self, workdir: Path, broker_id: int, zk_connect: str, **overrides: object) -> None:
        self.workdir = workdir
        self.broker_id = broker_id
        self.zk_connect = zk_connect
        self.port = free_port()
        self.log_dir = workdir / f"broker-{broker_id}-logs"
        self.overrides: dict[str, object] = {
            "broker.id": broker_id,
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "log.dirs": str(self.log_dir),
            "zookeeper.connect": zk_connect,
            "zookeeper.session.timeout.ms": 6000,
            "log.retention.check.interval.ms": 1000,
        }
        self.overrides.update({k.replace("_", "."): v for k, v in overrides.items()})
        self.proc: subprocess.Popen[bytes] | None = None
        self.output = workdir / f"broker-{broker_id}.out"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def properties_file(self) -> Path:
        path = self.workdir / f"broker-{self.broker_id}.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in self.overrides.items()))
        return path

    def start(self, wait: bool = True, timeout: float = 30.0) -> None:
        cmd = [sys.executable, "-m", "headwater.cli.main", "broker", "start", "-c", str(self.properties_file())]
        self._out = open(self.output, "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(cmd, stdout=self._out, stderr=subprocess.STDOUT, start_new_session=True)
        if wait:
            self.wait_ready(timeout)

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker {self.broker_id} exited {self.proc.returncode}:\n{self.tail()}")
            if "] started" in self.output.read_text(errors="replace"):
                try:
                    with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                        return
                except OSError:
                    pass
            time.sleep(0.1)
        raise RuntimeError(f"broker {self.broker_id} not ready in {timeout}s:\n{self.tail()}")

    def tail(self, n: int = 4000) -> str:
        try:
            return self.output.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def kill9(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self, timeout: float = 20.0) -> int | None:
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        code = self.proc.returncode if self.proc else None
        if getattr(self, "_out", None):
            self._out.close()
        return code

    def pause(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGCONT)
