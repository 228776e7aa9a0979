"""A real ZooKeeper ensemble (Debian's package) of N servers on loopback, for quorum faults.

Each server has its own directory, ``myid``, client port and the two quorum ports (peer and leader
election). :meth:`ZooKeeperEnsemble.kill` is a ``kill -9`` of one server; killing a majority takes
the quorum away (the survivors stop serving: "not currently serving requests"), and
:meth:`ZooKeeperEnsemble.start_server` brings one back. ``connect`` lists every server, as a
production ``zookeeper.connect`` does.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from headwater.testing.zookeeper import ZK_SERVER, free_port


def four_letter(port: int, command: bytes, timeout: float = 2.0) -> str:
    """The answer of a ZooKeeper four-letter command (``srvr``, ``ruok``...), "" when unreachable."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(command)
            chunks = []
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    break
                chunks.append(chunk)
            return b"".join(chunks).decode(errors="replace")
    except OSError:
        return ""


def server_mode(port: int) -> str | None:
    """``leader``, ``follower`` or ``standalone`` while the server serves requests; None otherwise
    (down, or up without a quorum)."""
    for line in four_letter(port, b"srvr").splitlines():
        if line.startswith("Mode:"):
            return line.split(":", 1)[1].strip()
    return None


class ZooKeeperEnsemble:
    def __init__(self, workdir: Path, size: int = 3, tick_ms: int = 500) -> None:
        self.workdir = workdir
        self.size = size
        self.tick_ms = tick_ms
        self.client_ports = {i: free_port() for i in range(1, size + 1)}
        self.quorum_ports = {i: (free_port(), free_port()) for i in range(1, size + 1)}
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self._logs: dict[int, object] = {}

    @property
    def connect(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.client_ports.values())

    def _configure(self, sid: int) -> Path:
        home = self.workdir / f"zk{sid}"
        data = home / "data"
        data.mkdir(parents=True, exist_ok=True)
        (data / "myid").write_text(f"{sid}\n")
        servers = "".join(f"server.{i}=127.0.0.1:{p}:{e}\n" for i, (p, e) in self.quorum_ports.items())
        cfg = home / "zoo.cfg"
        cfg.write_text(
            f"tickTime={self.tick_ms}\n"
            "initLimit=20\n"
            "syncLimit=10\n"
            f"dataDir={data}\n"
            f"clientPort={self.client_ports[sid]}\n"
            "clientPortAddress=127.0.0.1\n"
            "maxClientCnxns=0\n"
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=ruok,stat,srvr,mntr\n"
            f"minSessionTimeout={2 * self.tick_ms}\n"
            f"{servers}"
        )
        return cfg

    def start_server(self, sid: int) -> None:
        """Start (or restart) server ``sid``; returns at once (see :meth:`wait_serving`)."""
        if sid in self.procs and self.procs[sid].poll() is None:
            return
        if not Path(ZK_SERVER).exists():
            raise RuntimeError(f"{ZK_SERVER} not found: install Debian's zookeeper package (make system-deps)")
        cfg = self._configure(sid)
        home = cfg.parent
        env = dict(os.environ, ZOOCFGDIR=str(home), ZOO_LOG_DIR=str(home), JVMFLAGS="-Xmx256m")
        log = open(home / "zookeeper.out", "ab")  # noqa: SIM115
        self._logs[sid] = log
        self.procs[sid] = subprocess.Popen(
            [ZK_SERVER, "start-foreground", str(cfg)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )

    def start(self, timeout: float = 90.0) -> ZooKeeperEnsemble:
        for sid in self.client_ports:
            self.start_server(sid)
        self.wait_serving(list(self.client_ports), timeout)
        return self

    def wait_serving(self, sids: list[int], timeout: float = 90.0) -> None:
        """Wait until every server in ``sids`` serves requests (it is part of a quorum)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for sid in sids:
                proc = self.procs.get(sid)
                if proc is not None and proc.poll() is not None:
                    out = (self.workdir / f"zk{sid}" / "zookeeper.out").read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"ZooKeeper server {sid} exited: {out}")
            if all(server_mode(self.client_ports[s]) in ("leader", "follower") for s in sids):
                return
            time.sleep(0.2)
        modes = {s: server_mode(self.client_ports[s]) for s in sids}
        raise TimeoutError(f"ZooKeeper servers {sids} not serving within {timeout}s: {modes}")

    def leader(self) -> int | None:
        for sid, port in self.client_ports.items():
            if sid in self.procs and self.procs[sid].poll() is None and server_mode(port) == "leader":
                return sid
        return None

    def kill(self, sid: int) -> None:
        """``kill -9`` of server ``sid``."""
        proc = self.procs.pop(sid, None)
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)

    def stop(self) -> None:
        for sid, proc in list(self.procs.items()):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(10)
            self.procs.pop(sid, None)
        for log in self._logs.values():
            log.close()  # type: ignore[attr-defined]
        self._logs.clear()
