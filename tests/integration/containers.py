"""Clusters of containers for the integration tests: testcontainers for the containers, the
docker SDK for networks, volumes, health and faults.

Everything a test run creates carries the label ``org.headwater.test-run=<run id>`` so the
session can remove whatever a failed test left behind. Broker ports are published on
127.0.0.1 only; each broker advertises its EXTERNAL listener as ``127.0.0.1:<published port>``
and its INTERNAL one as ``broker<N>:9092`` on the cluster's own network.
"""

from __future__ import annotations

import os

# testcontainers reads these when it is imported: no Ryuk (its image cannot be pulled here; the
# fixtures clean up), and containers reached through their published ports on the docker host.
os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
os.environ.setdefault("TESTCONTAINERS_CONNECTION_MODE", "docker_host")

import socket
import time
from dataclasses import dataclass, field

import docker
from docker.models.containers import Container
from testcontainers.core.container import DockerContainer
from testcontainers.core.network import Network

RUN_LABEL = "org.headwater.test-run"
CLUSTER_LABEL = "org.headwater.test-cluster"
BROKER_DATA = "/var/lib/headwater/data"
INTERNAL_PORT = 9092
EXTERNAL_PORT = 9094


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_ports(n: int) -> list[int]:
    """n distinct free loopback ports (held open together so none repeats)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def health(container: Container) -> str:
    container.reload()
    state = container.attrs["State"]
    if state.get("Status") in ("exited", "dead"):
        return f"exited({state.get('ExitCode')})"
    return str(state.get("Health", {}).get("Status", "none"))


def wait_healthy(container: Container, timeout: float = 120.0) -> None:
    """Until Docker's health check says healthy; fails with the container's log otherwise."""
    deadline = time.monotonic() + timeout
    status = "?"
    while time.monotonic() < deadline:
        status = health(container)
        if status == "healthy":
            return
        if status.startswith("exited"):
            break
        time.sleep(0.5)
    logs = container.logs(tail=60).decode(errors="replace")
    raise AssertionError(f"container {container.name} is {status} after {timeout:.0f} s; its log ends:\n{logs}")


@dataclass
class Broker:
    broker_id: int
    alias: str
    port: int  # host port of the EXTERNAL listener (127.0.0.1)
    volume: str
    env: dict[str, str]
    tc: DockerContainer | None = None
    generation: int = 0

    @property
    def container(self) -> Container:
        assert self.tc is not None, f"broker {self.broker_id} is not running"
        return self.tc.get_wrapped_container()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


@dataclass
class ContainerCluster:
    """ZooKeeper + N brokers on their own network, each broker with a named data volume."""

    client: docker.DockerClient
    run_id: str
    name: str
    headwater_image: str
    zookeeper_image: str
    size: int = 3
    rack: str | None = None
    broker_config: dict[str, str] = field(default_factory=dict)
    network: Network | None = None
    zookeeper: DockerContainer | None = None
    brokers: list[Broker] = field(default_factory=list)
    volumes: list[str] = field(default_factory=list)

    @property
    def labels(self) -> dict[str, str]:
        return {RUN_LABEL: self.run_id, CLUSTER_LABEL: self.name}

    @property
    def prefix(self) -> str:
        return f"hw-it-{self.run_id}-{self.name}"

    @property
    def bootstrap(self) -> str:
        return ",".join(b.address for b in self.brokers)

    def broker(self, broker_id: int) -> Broker:
        return next(b for b in self.brokers if b.broker_id == broker_id)

    # ---- life cycle
    def start(self) -> ContainerCluster:
        self.network = Network(docker_network_kw={"labels": self.labels}).create()
        self.zookeeper = (
            DockerContainer(self.zookeeper_image)
            .with_name(f"{self.prefix}-zookeeper")
            .with_network(self.network)
            .with_network_aliases("zookeeper")
            .with_kwargs(labels=self.labels)
        )
        self.zookeeper.start()
        for broker_id, port in zip(range(1, self.size + 1), free_ports(self.size)):
            alias = f"broker{broker_id}"
            volume = f"{self.prefix}-{alias}"
            self.client.volumes.create(name=volume, labels=self.labels)
            self.volumes.append(volume)
            env = {
                "KAFKA_BROKER_ID": str(broker_id),
                "KAFKA_ZOOKEEPER_CONNECT": "zookeeper:2181",
                "KAFKA_LISTENERS": f"INTERNAL://:{INTERNAL_PORT},EXTERNAL://:{EXTERNAL_PORT}",
                "KAFKA_ADVERTISED_LISTENERS": f"INTERNAL://{alias}:{INTERNAL_PORT},EXTERNAL://127.0.0.1:{port}",
                "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
                "KAFKA_INTER_BROKER_LISTENER_NAME": "INTERNAL",
                "KAFKA_ZOOKEEPER_SESSION_TIMEOUT_MS": "6000",
                "KAFKA_LOG_RETENTION_CHECK_INTERVAL_MS": "1000",
            }
            if self.rack:
                env["KAFKA_BROKER_RACK"] = self.rack
            env.update(self.broker_config)
            self.brokers.append(Broker(broker_id, alias, port, volume, env))
        wait_healthy(self.zookeeper.get_wrapped_container())
        for b in self.brokers:
            self._run_broker(b)
        for b in self.brokers:
            wait_healthy(b.container)
        return self

    def _run_broker(self, b: Broker) -> None:
        assert self.network is not None
        b.generation += 1
        tc = (
            DockerContainer(self.headwater_image)
            .with_name(f"{self.prefix}-{b.alias}-{b.generation}")
            .with_network(self.network)
            .with_network_aliases(b.alias)
            .with_envs(**b.env)
            .with_volume_mapping(b.volume, BROKER_DATA, "rw")
            .with_kwargs(labels=self.labels, stop_signal="SIGTERM")
        )
        # Published on loopback only (with_bind_ports would bind every interface).
        tc.ports[f"{EXTERNAL_PORT}/tcp"] = ("127.0.0.1", b.port)  # type: ignore[assignment]
        b.tc = tc.start()

    def stop(self) -> None:
        """Remove every container, the network and the volumes; never raises."""
        for b in self.brokers:
            if b.tc is not None:
                _quietly(b.tc.stop)
                b.tc = None
        if self.zookeeper is not None:
            _quietly(self.zookeeper.stop)
            self.zookeeper = None
        if self.network is not None:
            _quietly(self.network.remove)
            self.network = None
        for v in self.volumes:
            _quietly(lambda v=v: self.client.volumes.get(v).remove(force=True))
        self.volumes.clear()

    def __enter__(self) -> ContainerCluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- faults
    def kill(self, broker_id: int) -> None:
        """SIGKILL the broker's container (a crash: no controlled shutdown, ZooKeeper session left to expire)."""
        self.broker(broker_id).container.kill()

    def start_again(self, broker_id: int, timeout: float = 120.0) -> None:
        """Start a stopped or killed broker container again (same container, same volume)."""
        c = self.broker(broker_id).container
        c.start()
        wait_healthy(c, timeout)

    def restart(self, broker_id: int, timeout: float = 120.0) -> None:
        """``docker restart``: SIGTERM, then start the same container."""
        c = self.broker(broker_id).container
        c.restart(timeout=30)
        wait_healthy(c, timeout)

    def replace(self, broker_id: int, timeout: float = 120.0) -> None:
        """Stop and remove the broker's container, then run a new one on the same volume and port."""
        b = self.broker(broker_id)
        b.container.stop(timeout=30)
        assert b.tc is not None
        b.tc.stop()
        b.tc = None
        self._run_broker(b)
        wait_healthy(b.container, timeout)

    def logs(self, broker_id: int, tail: int = 80) -> str:
        return str(self.broker(broker_id).container.logs(tail=tail).decode(errors="replace"))


def _quietly(fn: object) -> None:
    try:
        fn()  # type: ignore[operator]
    except Exception:
        pass


def remove_labelled(client: docker.DockerClient, *labels: str) -> list[str]:
    """Remove containers, then networks, then volumes carrying every one of ``labels``
    (``key=value``); returns what was there."""
    assert labels
    flt = {"label": list(labels)}
    left: list[str] = []
    for c in client.containers.list(all=True, filters=flt):
        left.append(f"container {c.name}")
        _quietly(lambda c=c: c.remove(force=True, v=True))
    for n in client.networks.list(filters=flt):
        left.append(f"network {n.name}")
        _quietly(n.remove)
    for v in client.volumes.list(filters=flt):
        left.append(f"volume {v.name}")
        _quietly(lambda v=v: v.remove(force=True))
    return left
