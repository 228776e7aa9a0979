"""A multi-broker cluster on one real ZooKeeper, with fault hooks.

Every broker has two listeners: CLIENT (clients connect directly) and INTERNAL (advertised at
a :class:`FaultProxy` route, so broker-to-broker traffic — replication and the controller —
passes through the proxy). Each broker's ZooKeeper connection has its own proxy route too.

Fault hooks: ``kill9`` / ``restart`` (a hard crash), ``stop`` (SIGTERM: controlled shutdown),
``pause`` / ``resume`` (SIGSTOP / SIGCONT), ``isolate`` / ``heal`` (cut a broker off from the
other brokers, keeping its clients and ZooKeeper), ``expire_session`` (cut its ZooKeeper route
until the session expires, then restore it).

Two views of the cluster: ZooKeeper's (``state``, ``controller``, ``live_ids``) and each broker's
own (``metric``, ``leader_isr_size``: its Prometheus endpoint). ZooKeeper can run ahead of a broker
(an ISR change is written there before the leader applies it), so a test that asserts on what a
broker answers waits for that broker's own view.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from prometheus_client.parser import text_string_to_metric_families

from headwater.testing.cluster import metadata_broker_ids
from headwater.testing.faults import FaultProxy
from headwater.testing.zookeeper import free_port
from tests.harness.broker import BrokerProcess


class Cluster:
    def __init__(
        self,
        workdir: Path,
        zk_host: str,
        zk_port: int,
        chroot: str,
        size: int,
        zk_ensemble: str | None = None,
        **overrides: object,
    ) -> None:
        """``zk_ensemble`` (``127.0.0.1:p,127.0.0.1:p,...``): brokers connect to every server of that
        ensemble, each through a proxy route of its own (``zk-<broker>-<n>``), so that
        ``expire_session`` cuts a broker off from the whole ensemble."""
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.zk_host, self.zk_port, self.chroot = zk_host, zk_port, chroot
        self.proxy = FaultProxy()
        self.proxy.start()
        self.session_timeout_ms = int(overrides.pop("zookeeper_session_timeout_ms", 6000))  # type: ignore[call-overload]
        self.brokers: dict[int, BrokerProcess] = {}
        self.internal_route: dict[int, str] = {}
        self.zk_routes: dict[int, list[str]] = {}  # per broker: its routes to ZooKeeper
        self.metrics_port: dict[int, int] = {}
        for b in range(1, size + 1):
            client_port, internal_port = free_port(), free_port()
            self.metrics_port[b] = free_port()
            route = f"broker-{b}"
            proxied_internal = self.proxy.add_route(route, internal_port)
            if zk_ensemble is None:
                self.zk_routes[b] = [f"zk-{b}"]
                zk_connect = f"127.0.0.1:{self.proxy.add_route(f'zk-{b}', zk_port, kafka=False)}{chroot}"
            else:
                servers = [int(server.rpartition(":")[2]) for server in zk_ensemble.split(",")]
                self.zk_routes[b] = [f"zk-{b}-{n}" for n in range(1, len(servers) + 1)]
                ports = [
                    self.proxy.add_route(r, p, kafka=False) for r, p in zip(self.zk_routes[b], servers, strict=True)
                ]
                zk_connect = ",".join(f"127.0.0.1:{p}" for p in ports) + chroot
            self.internal_route[b] = route
            props = {
                "listeners": f"CLIENT://127.0.0.1:{client_port},INTERNAL://127.0.0.1:{internal_port}",
                "advertised_listeners": f"CLIENT://127.0.0.1:{client_port},INTERNAL://127.0.0.1:{proxied_internal}",
                "listener_security_protocol_map": "CLIENT:PLAINTEXT,INTERNAL:PLAINTEXT",
                "inter_broker_listener_name": "INTERNAL",
                "zookeeper_connect": zk_connect,
                "zookeeper_session_timeout_ms": self.session_timeout_ms,
                "controlled_shutdown_retry_backoff_ms": 500,
                "replica_lag_time_max_ms": 3000,
                # consumers with a group.id create __consumer_offsets: a few partitions, not 50
                "offsets_topic_num_partitions": 3,
                "group_initial_rebalance_delay_ms": 0,
                "prometheus_port": self.metrics_port[b],
                "prometheus_host": "127.0.0.1",
                **overrides,
            }
            broker = BrokerProcess(workdir, b, "", **props)
            broker.port = client_port
            self.brokers[b] = broker
        self.zk = KazooClient(hosts=f"{zk_ensemble or f'{zk_host}:{zk_port}'}{chroot}", timeout=10)

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> Cluster:
        for b in self.brokers.values():
            b.start(wait=False)
        for b in self.brokers.values():
            b.wait_ready()
        self.zk.start(timeout=15)
        self.wait_for(
            lambda: len(self.zk.get_children("/brokers/ids")) == len(self.brokers), 30, "all brokers registered"
        )
        self.wait_for(lambda: self.controller() is not None, 30, "a controller")
        ids = set(self.brokers)
        self.wait_for(
            lambda: all(metadata_broker_ids("127.0.0.1", b.port) == ids for b in self.brokers.values()),
            30,
            "every broker's metadata to list every broker",
        )
        return self

    def close(self) -> None:
        for b in self.brokers.values():
            try:
                b.resume()
            except Exception:
                pass
            b.stop(timeout=5)  # teardown: the last broker's controlled shutdown retries for nothing
        try:
            self.zk.stop()
            self.zk.close()
        finally:
            self.proxy.stop()

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    # -- ZooKeeper views ------------------------------------------------------------------------

    def controller(self) -> int | None:
        try:
            data, _ = self.zk.get("/controller")
        except Exception:
            return None
        return int(json.loads(data)["brokerid"])

    def state(self, topic: str, partition: int) -> dict[str, Any]:
        data, _ = self.zk.get(f"/brokers/topics/{topic}/partitions/{partition}/state")
        return dict(json.loads(data))

    # -- a broker's own view (its Prometheus endpoint) --------------------------------------------

    def metric(self, b: int, name: str, **labels: str) -> float | None:
        """The value of one sample on broker ``b``'s /metrics, or None when it has no such sample."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port[b]}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                    return float(sample.value)
        return None

    def leader_isr_size(self, b: int, topic: str, partition: int) -> int | None:
        """The ISR size broker ``b`` applies as leader of the partition (None: it does not lead it)."""
        value = self.metric(b, "kafka_cluster_partition_insyncreplicascount", topic=topic, partition=str(partition))
        return None if value is None else int(value)

    def live_ids(self) -> list[int]:
        return sorted(int(c) for c in self.zk.get_children("/brokers/ids"))

    @staticmethod
    def wait_for(cond: Callable[[], object], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            try:
                if cond():
                    return
            except Exception as e:  # the thing waited for may not exist yet
                last_error = e
            time.sleep(0.1)
        raise AssertionError(f"timed out after {timeout}s waiting for {what} (last error: {last_error!r})")

    # -- faults -----------------------------------------------------------------------------------

    def kill9(self, b: int) -> None:
        self.brokers[b].kill9()

    def restart(self, b: int) -> None:
        self.brokers[b].start()

    def stop(self, b: int) -> None:
        self.brokers[b].stop(timeout=60)

    def pause(self, b: int) -> None:
        self.brokers[b].pause()

    def resume(self, b: int) -> None:
        self.brokers[b].resume()

    def isolate(self, b: int) -> None:
        self.proxy.isolate(b, {self.internal_route[b]})

    def heal(self, b: int) -> None:
        self.proxy.heal(b)

    def expire_session(self, b: int) -> None:
        """Cut the broker off from ZooKeeper until its session has expired, then reconnect it."""
        session_path = f"/brokers/ids/{b}"
        for route in self.zk_routes[b]:
            self.proxy.cut_route(route)
        try:
            self.wait_for(
                lambda: not self.zk.exists(session_path),
                self.session_timeout_ms / 1000 * 3 + 10,
                f"broker {b}'s session to expire",
            )
        finally:
            for route in self.zk_routes[b]:
                self.proxy.restore_route(route)
