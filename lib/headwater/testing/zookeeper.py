"""A real standalone ZooKeeper (Debian's package) on a free loopback port.

Like kazoo's own harness: one server per test session, each test gets its own chroot
(``127.0.0.1:<port>/<chroot>``) so tests never see each other's znodes.

``sasl_users={"broker": "secret"}`` makes it a SASL-enabled server as Kafka 2.3's documentation
sets one up: ``authProvider.1=org.apache.zookeeper.server.auth.SASLAuthenticationProvider``,
``requireClientAuthScheme=sasl`` and a JAAS ``Server`` section (``DigestLoginModule`` with
``user_<name>="<password>"``) given through ``SERVER_JVMFLAGS``. Clients that do not log in still
connect (ZooKeeper 3.x does not refuse them): what protects the znodes is their ACLs.
:meth:`ZooKeeperServer.client_jaas` writes the matching client file (a ``Client`` section).
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

ZK_SERVER = os.environ.get("ZOOKEEPER_SERVER_SH", "/usr/share/zookeeper/bin/zkServer.sh")


#: Every port this process handed out. A port is free when checked but only taken once its new owner
#: binds it; without this, two callers in a row (a cluster's brokers, listeners, metrics and proxy
#: routes) could get the same one and the second broker fail with "Address already in use".
_handed_out: set[int] = set()


def free_port() -> int:
    """A free loopback port below Linux's ephemeral range (32768-60999).

    Ports handed out by the kernel (bind to port 0) come from the ephemeral range, which every
    outgoing connection also draws from: a broker restarted on "its" port after a kill could find
    it taken by some client's connection. Ports below the range are only ever taken on purpose.
    """
    for _ in range(200):
        port = random.randrange(20000, 32000)
        if port in _handed_out:  # not bound yet by whoever got it: do not give it twice
            continue
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            _handed_out.add(port)
            return port
    raise RuntimeError("no free port between 20000 and 32000")


def _ruok(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"ruok")
            return s.recv(4) == b"imok"
    except OSError:
        return False


class ZooKeeperServer:
    def __init__(
        self,
        workdir: Path,
        port: int | None = None,
        tick_ms: int = 500,
        sasl_users: Mapping[str, str] | None = None,
    ) -> None:
        self.workdir = workdir
        self.port = port or free_port()
        self.tick_ms = tick_ms
        self.sasl_users = dict(sasl_users or {})
        self.proc: subprocess.Popen[bytes] | None = None

    def client_jaas(self, username: str, password: str | None = None, *, name: str | None = None) -> Path:
        """A JAAS file with a ``Client`` section logging in as ``username`` (its password on this
        server unless given): what ``java.security.auth.login.config`` names."""
        secret = self.sasl_users.get(username, "") if password is None else password
        path = self.workdir / (name or f"client-{username}.jaas")
        path.write_text(
            "Client {\n"
            "  org.apache.zookeeper.server.auth.DigestLoginModule required\n"
            f'  username="{username}"\n'
            f'  password="{secret}";\n'
            "};\n"
        )
        path.chmod(0o600)
        return path

    @property
    def connect(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> None:
        if not Path(ZK_SERVER).exists():
            raise RuntimeError(f"{ZK_SERVER} not found: install Debian's zookeeper package (make system-deps)")
        data = self.workdir / "data"
        data.mkdir(parents=True, exist_ok=True)
        cfg = self.workdir / "zoo.cfg"
        cfg.write_text(
            f"tickTime={self.tick_ms}\n"
            f"dataDir={data}\n"
            f"clientPort={self.port}\n"
            "clientPortAddress=127.0.0.1\n"
            "maxClientCnxns=0\n"
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=ruok,stat,srvr,mntr\n"
            f"minSessionTimeout={2 * self.tick_ms}\n"
        )
        env = dict(os.environ, ZOOCFGDIR=str(self.workdir), ZOO_LOG_DIR=str(self.workdir), JVMFLAGS="-Xmx256m")
        if self.sasl_users:
            with open(cfg, "a") as f:
                f.write(
                    "authProvider.1=org.apache.zookeeper.server.auth.SASLAuthenticationProvider\n"
                    "requireClientAuthScheme=sasl\n"
                )
            jaas = self.workdir / "server.jaas"
            users = "".join(f'\n  user_{u}="{p}"' for u, p in self.sasl_users.items())
            jaas.write_text(f"Server {{\n  org.apache.zookeeper.server.auth.DigestLoginModule required{users};\n}};\n")
            jaas.chmod(0o600)
            env["SERVER_JVMFLAGS"] = f"-Djava.security.auth.login.config={jaas}"
        self.log_file = open(self.workdir / "zookeeper.out", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [ZK_SERVER, "start-foreground", str(cfg)],
            stdout=self.log_file,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited: {(self.workdir / 'zookeeper.out').read_text()[-2000:]}")
            if _ruok(self.port):
                return
            time.sleep(0.2)
        self.stop()
        raise RuntimeError("ZooKeeper did not start in time")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.proc = None
        if getattr(self, "log_file", None):
            self.log_file.close()
