"""Prometheus metrics with the names operators know from Kafka's JMX exporter.

Each broker has its own registry (tests run several brokers in one process). The HTTP
endpoint starts when ``prometheus.port`` is set (0 = an ephemeral port, unset = off).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

if TYPE_CHECKING:
    from headwater.broker.quotas import Sensor


class BrokerMetrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.bytes_in = Counter(
            "kafka_server_brokertopicmetrics_bytesin", "Bytes appended by producers", ["topic"], registry=r
        )
        self.bytes_out = Counter(
            "kafka_server_brokertopicmetrics_bytesout", "Bytes sent to consumers and followers", ["topic"], registry=r
        )
        self.messages_in = Counter(
            "kafka_server_brokertopicmetrics_messagesin", "Records appended by producers", ["topic"], registry=r
        )
        self.failed_produce = Counter(
            "kafka_server_brokertopicmetrics_failedproducerequests",
            "Produce requests refused per partition",
            ["topic"],
            registry=r,
        )
        self.requests = Counter(
            "kafka_network_requestmetrics_requests", "Requests handled", ["request", "version"], registry=r
        )
        self.request_latency = Histogram(
            "kafka_network_requestmetrics_totaltime_seconds",
            "Time from request received to response ready",
            ["request"],
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
            registry=r,
        )
        self.under_replicated = Gauge(
            "kafka_server_replicamanager_underreplicatedpartitions",
            "Led partitions whose ISR is smaller than the replica set",
            registry=r,
        )
        self.under_min_isr = Gauge(
            "kafka_server_replicamanager_underminisrpartitioncount",
            "Led partitions whose ISR is below min.insync.replicas",
            registry=r,
        )
        self.leader_count = Gauge(
            "kafka_server_replicamanager_leadercount", "Partitions led by this broker", registry=r
        )
        self.partition_count = Gauge(
            "kafka_server_replicamanager_partitioncount", "Partitions on this broker", registry=r
        )
        self.isr_shrinks = Counter("kafka_server_replicamanager_isrshrinks", "ISR shrinks", registry=r)
        self.isr_expands = Counter("kafka_server_replicamanager_isrexpands", "ISR expansions", registry=r)
        self.active_controller = Gauge(
            "kafka_controller_kafkacontroller_activecontrollercount", "1 on the active controller", registry=r
        )
        # Replication throttles (KIP-73), as Kafka's kafka.server:type=LeaderReplication / FollowerReplication
        # byte-rate: the rate each quota measures (throttled partitions' bytes only)
        self.leader_replication_rate = Gauge(
            "kafka_server_leaderreplication_byte_rate",
            "Bytes/s this broker sent as leader for throttled replicas (leader.replication.throttled.replicas)",
            registry=r,
        )
        self.follower_replication_rate = Gauge(
            "kafka_server_followerreplication_byte_rate",
            "Bytes/s this broker fetched as follower for throttled replicas (follower.replication.throttled.replicas)",
            registry=r,
        )
        self.offline_partitions = Gauge(
            "kafka_controller_kafkacontroller_offlinepartitionscount",
            "Partitions without a live leader (controller only)",
            registry=r,
        )
        # Per led partition, as Kafka's kafka.cluster:type=Partition MBeans: the leader's own view of
        # its ISR (ZooKeeper's copy can run ahead of it while an ISR change is being applied).
        self.partition_isr_count = Gauge(
            "kafka_cluster_partition_insyncreplicascount",
            "Size of the ISR of a partition this broker leads, as the leader applies it",
            ["topic", "partition"],
            registry=r,
        )
        self.partition_under_min_isr = Gauge(
            "kafka_cluster_partition_underminisr",
            "1 when the ISR of a partition this broker leads is below min.insync.replicas",
            ["topic", "partition"],
            registry=r,
        )
        # The group coordinator (kafka.coordinator.group:type=GroupMetadataManager) and the log cleaner
        # (kafka.log:type=LogCleaner)
        self.num_groups = Gauge(
            "kafka_coordinator_group_groupmetadatamanager_numgroups", "Groups this broker coordinates", registry=r
        )
        self.num_offsets = Gauge(
            "kafka_coordinator_group_groupmetadatamanager_numoffsets",
            "Committed offsets of the groups this broker coordinates",
            registry=r,
        )
        self.rebalances = Counter(
            "kafka_coordinator_group_groupcoordinator_rebalances", "Join phases completed (new generations)", registry=r
        )
        # The transaction coordinator (txn/coordinator.py)
        self.open_transactions = Gauge(
            "headwater_transaction_coordinator_open_transactions",
            "Transactions not complete (Ongoing or being decided) of the ids this broker coordinates",
            registry=r,
        )
        self.txn_aborted_by_coordinator = Counter(
            "headwater_transaction_coordinator_aborted_by_coordinator",
            "Transactions the coordinator aborted itself (timeout, or a new producer fencing the old one)",
            registry=r,
        )
        self.cleanings = Counter("kafka_log_logcleaner_cleanings", "Compacted logs cleaned", registry=r)
        self.cleaner_bytes_read = Counter("kafka_log_logcleaner_bytesread", "Bytes the log cleaner read", registry=r)
        self.cleaner_bytes_written = Counter(
            "kafka_log_logcleaner_byteswritten", "Bytes the log cleaner wrote", registry=r
        )
        self.cleaner_records_removed = Counter(
            "kafka_log_logcleaner_recordsremoved", "Records compaction removed", registry=r
        )
        self.cleaner_last_clean_seconds = Gauge(
            "kafka_log_logcleaner_lastcleantimesecs", "Duration of the last cleaning", registry=r
        )
        # Kafka's successful-authentication-total / failed-authentication-total, by mechanism
        self.authentications = Counter(
            "kafka_server_socket_server_authentications",
            "SASL authentications, by mechanism and result (success | failure)",
            ["mechanism", "result"],
            registry=r,
        )
        # Client quotas (broker/quotas.py), per quota entity as Kafka's kafka.server:type=Produce|Fetch|Request
        # with tags user and client-id ("" at a level that does not name one): the measured rate (bytes/s;
        # Request: percent of one thread) and the average throttle time (ms) over the quota window.
        self.quota_rate: dict[str, Gauge] = {}
        self.quota_throttle_time: dict[str, Gauge] = {}
        for quota_type, rate_name, what in (
            ("Produce", "byte_rate", "Bytes/s produced"),
            ("Fetch", "byte_rate", "Bytes/s fetched by consumers"),
            ("Request", "request_time", "Percent of a request thread's time used"),
        ):
            prefix = f"kafka_server_{quota_type.lower()}"
            self.quota_rate[quota_type] = Gauge(
                f"{prefix}_{rate_name}",
                f"{what} by a quota entity, over quota.window.num x quota.window.size.seconds",
                ["user", "client_id"],
                registry=r,
            )
            self.quota_throttle_time[quota_type] = Gauge(
                f"{prefix}_throttle_time",
                f"Average {quota_type} throttle time (ms) of a quota entity's throttled responses, over the quota window",
                ["user", "client_id"],
                registry=r,
            )
        self.exempt_request_time = Gauge(
            "kafka_server_request_exempt_request_time",
            "Percent of a request thread's time used by requests exempt from request quotas "
            "(follower fetches, ClusterAction APIs), while any request_percentage is set",
            registry=r,
        )
        #: the per-partition gauges' values as last set: only changes are written again
        self._partition_values: dict[tuple[str, int], tuple[int, bool]] = {}
        self._request_children: dict[tuple[str, int], tuple[Any, Any]] = {}
        self._topic_in_children: dict[str, tuple[Any, Any]] = {}
        self._topic_out_children: dict[str, Any] = {}
        self.port: int | None = None

    def topic_in_children(self, topic: str) -> tuple[Any, Any]:
        """(bytes in, messages in) counters of one topic, resolved once (every Produce uses them)."""
        children = self._topic_in_children.get(topic)
        if children is None:
            children = (self.bytes_in.labels(topic), self.messages_in.labels(topic))
            self._topic_in_children[topic] = children
        return children

    def topic_out_child(self, topic: str) -> Any:
        """The bytes-out counter of one topic, resolved once (every Fetch with data uses it)."""
        child = self._topic_out_children.get(topic)
        if child is None:
            child = self._topic_out_children[topic] = self.bytes_out.labels(topic)
        return child

    def quota_sensor(self, quota_type: str, sensor: Sensor, clock: Callable[[], float]) -> None:
        """Export a new quota sensor (its values are read when scraped, nothing per request)."""
        labels = (sensor.user, sensor.client_id)
        rate, throttle = self.quota_rate[quota_type], self.quota_throttle_time[quota_type]
        rate.labels(*labels).set_function(lambda: sensor.rate.measure(clock()))
        throttle.labels(*labels).set_function(lambda: sensor.throttle.measure(clock()))
        sensor.gauges += [lambda: rate.remove(*labels), lambda: throttle.remove(*labels)]

    def count_authentication(self, mechanism: str, succeeded: bool) -> None:
        self.authentications.labels(mechanism, "success" if succeeded else "failure").inc()

    def request_children(self, api: str, version: int) -> tuple[Any, Any]:
        """(requests counter, latency histogram) of one API and version, resolved once: ``labels()``
        costs more than the ``inc()`` it precedes, and this runs for every request."""
        children = self._request_children.get((api, version))
        if children is None:
            children = (self.requests.labels(api, str(version)), self.request_latency.labels(api))
            self._request_children[(api, version)] = children
        return children

    def set_led_partitions(self, partitions: dict[tuple[str, int], tuple[int, bool]]) -> None:
        """Per-partition gauges for exactly the partitions led now: (topic, index) -> (ISR size, under
        min ISR). Called on every ISR maintenance pass: only the gauges whose value changed (or that
        appeared or went) are touched, not thousands of labelled children each time."""
        old = self._partition_values
        for topic, index in old.keys() - partitions.keys():
            self.partition_isr_count.remove(topic, str(index))
            self.partition_under_min_isr.remove(topic, str(index))
        for (topic, index), value in partitions.items():
            if old.get((topic, index)) != value:
                isr_size, under_min_isr = value
                self.partition_isr_count.labels(topic, str(index)).set(isr_size)
                self.partition_under_min_isr.labels(topic, str(index)).set(int(under_min_isr))
        self._partition_values = dict(partitions)

    def serve(self, port: int, host: str = "0.0.0.0") -> int:
        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        self.port = int(server.server_port)
        return self.port
