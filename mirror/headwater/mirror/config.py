"""The mirror's configuration, with MirrorMaker 2's property names.

::

    clusters = dc1, dc2, agg
    dc1.zookeeper.connect = zk-dc1:2181          # the source group lives in the source's ZooKeeper
    dc1.bootstrap.servers = dc1-broker1:9092     # optional when zookeeper.connect is given
    agg.bootstrap.servers = agg-broker1:9092
    dc1->agg.enabled = true
    dc1->agg.topics = page-views, clicks.*       # comma-separated regexes (default .*)
    topics.exclude = __.*                        # default: internal topics are not mirrored
    replication.policy.class = IdentityReplicationPolicy   # or DefaultReplicationPolicy ("dc1.<topic>")
    group.id = headwater-mirror
    metrics.port = 9404

Each cluster's client security takes Kafka's client property names under its alias, or unprefixed
for every cluster (MM2's rule; the alias's value wins)::

    dc1.security.protocol = SASL_SSL             # PLAINTEXT (default), SSL, SASL_PLAINTEXT, SASL_SSL
    dc1.ssl.ca.location = /etc/headwater/ca.pem  # or ssl.truststore.location (a PEM file)
    dc1.sasl.mechanism = SCRAM-SHA-512           # or PLAIN, SCRAM-SHA-256
    dc1.sasl.username = mirror
    dc1.sasl.password = file:/etc/headwater/mirror.password   # or env:NAME, or the password itself
    # or: dc1.sasl.jaas.config = org.apache.kafka.common.security.scram.ScramLoginModule required username="mirror" password="...";

Secrets are never logged (see :mod:`headwater.client.security`).

Per-flow settings (``<src>-><dst>.topics``, ``.topics.exclude``) fall back to the global ones, as
in MM2. A value may carry a trailing `` # comment`` (whitespace before the ``#``). Every error is
a :class:`MirrorConfigError` whose message is one line naming the property.

Headwater's own settings: ``replication.factor`` (of destination topics; default: the smaller of 3
and the destination's live brokers), ``offset.commit.interval.ms`` (5000), ``auto.offset.reset``
(``earliest``), ``fetch.max.bytes`` per partition (8 MiB), ``fetch.max.wait.ms`` (500),
``fetch.max.in.flight`` (fetches of a partition on the wire, and Fetch rounds per source broker, 1),
``fetch.max.buffered.bytes`` (per partition, fetched ahead and not yet acknowledged by the target;
unset: 0, no fetching ahead, with one fetch in flight, twice ``fetch.max.bytes`` with more; all three:
:mod:`headwater.mirror.fetch_ahead`; issue 40 measured one exact fetch at a time faster),
``end.offsets.refresh.interval.ms`` (5000: how often each member reads its partitions' end offsets
from the source for the lag metric, see :mod:`headwater.mirror.lag`),
``resume.scan.max.bytes`` (64 MiB) and
``resume.scan.total.max.bytes`` (256 MiB: how much of the target a new owner's resume scan reads
per partition and holds, summed, over all partitions; see :mod:`headwater.mirror.copies`),
``repartition`` (``auto``: decode only when partition counts differ; ``always``),
``provenance.header.enabled`` (false; true: every record copied carries the ``headwater.provenance``
header and one that was already in the target is not copied back -- active/active under
IdentityReplicationPolicy, see :mod:`headwater.mirror.copier`),
``mirror.on.data.loss`` (``report``: a gap below the source's log start is reported, then the copier
resumes there; ``stop``: reported, then that partition stops; see :mod:`headwater.mirror.gaps`),
``isolation.level`` (``read_committed``: aborted and open transactions are not copied, see
:mod:`headwater.mirror.fetcher`; ``read_uncommitted``: every record, markers left out),
MM2's ``emit.heartbeats.enabled`` (true) and ``emit.heartbeats.interval.seconds`` (1; see
:mod:`headwater.mirror.heartbeats`), MM2's ``emit.offset-syncs.enabled`` (true), ``offset.lag.max``
(100), ``emit.checkpoints.enabled`` (true), ``emit.checkpoints.interval.seconds`` (60), ``groups``
(``.*``), ``groups.exclude`` / ``groups.blacklist`` (``console-consumer-.*, connect-.*, __.*``) and
``offset-syncs.topic.location`` (``source`` only), ``sync.group.offsets.enabled`` (false) and
``sync.group.offsets.interval.seconds`` (60) (see :mod:`headwater.mirror.checkpoints`),
``sync.topic.acls.enabled`` (false: MM2's default is true, see :mod:`headwater.mirror.acl_sync`) and
``sync.topic.acls.interval.seconds`` (600), ``sync.topic.configs.enabled`` (true, as MM2),
``sync.topic.configs.interval.seconds`` (600) and ``config.properties.exclude`` /
``config.properties.blacklist`` (regexes; MM2's default list, see :mod:`headwater.mirror.config_sync`),
``placement.load.tolerance`` (1.25: no mirror process carries more than this times the mean
bytes per second, unless one partition alone does) and ``placement.rebalance.interval.seconds`` (60:
how often the placement is evaluated, and the window of the byte rates; see
:mod:`headwater.mirror.placement`), and the
test-only fault properties ``headwater.test.drop.every`` / ``headwater.test.duplicate.every``
(drop / produce twice every N-th record; they force the decoding path).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

from headwater.client.audit import SigningKeyError, signing_key
from headwater.client.security import SECURITY_PROPERTIES, ClientSecurity, SecurityConfigError, cluster_security
from headwater.mirror.checkpoints import checkpoints_topic, offset_syncs_topic
from headwater.mirror.config_sync import DEFAULT_EXCLUDE
from headwater.properties import parse_properties

__all__ = ["HEARTBEATS_TOPIC", "Flow", "MirrorConfig", "MirrorConfigError", "SourceCluster", "load", "parse"]

_POLICIES = {
    "IdentityReplicationPolicy": "identity",
    "org.apache.kafka.connect.mirror.IdentityReplicationPolicy": "identity",
    "DefaultReplicationPolicy": "default",
    "org.apache.kafka.connect.mirror.DefaultReplicationPolicy": "default",
}
HEARTBEATS_TOPIC = "heartbeats"
#: MM2's offset-syncs and checkpoints topics with any replication.policy.separator
_MM2_INTERNAL = re.compile(r"mm2-offset-syncs.+internal|.+.checkpoints.internal")
_ALIAS = re.compile(r"[A-Za-z0-9_-]+")
_FLOW_KEY = re.compile(r"^([^.>\s]+)->([^.>\s]+)\.(.+)$")
_FLOW_SETTINGS = {"enabled", "topics", "topics.exclude", "topics.blacklist"}
_GLOBAL_SETTINGS = {
    "clusters",
    "audit.signing.key",
    "topics",
    "topics.exclude",
    "topics.blacklist",
    "replication.policy.class",
    "replication.policy.separator",
    "group.id",
    "metrics.port",
    "metrics.host",
    "replication.factor",
    "offset.commit.interval.ms",
    "auto.offset.reset",
    "fetch.max.bytes",
    "fetch.max.wait.ms",
    "fetch.max.in.flight",
    "fetch.max.buffered.bytes",
    "end.offsets.refresh.interval.ms",
    "resume.scan.max.bytes",
    "resume.scan.total.max.bytes",
    "repartition",
    "provenance.header.enabled",
    "mirror.on.data.loss",
    "isolation.level",
    "emit.heartbeats.enabled",
    "emit.heartbeats.interval.seconds",
    "emit.checkpoints.enabled",
    "emit.checkpoints.interval.seconds",
    "emit.offset-syncs.enabled",
    "offset.lag.max",
    "offset-syncs.topic.location",
    "groups",
    "groups.exclude",
    "groups.blacklist",
    "sync.group.offsets.enabled",
    "sync.group.offsets.interval.seconds",
    "sync.topic.acls.enabled",
    "sync.topic.acls.interval.seconds",
    "sync.topic.configs.enabled",
    "sync.topic.configs.interval.seconds",
    "config.properties.exclude",
    "config.properties.blacklist",
    "replication.policy.internal.topic.separator.enabled",
    "checkpoints.topic.replication.factor",
    "offset-syncs.topic.replication.factor",
    "placement.load.tolerance",
    "placement.rebalance.interval.seconds",
    "headwater.test.drop.every",
    "headwater.test.duplicate.every",
}
_CLUSTER_SETTINGS = {"bootstrap.servers", "zookeeper.connect"}

# Every MirrorMaker 2 key (3.9's MirrorMakerConfig, the three connectors' configs and the Connect
# worker keys an MM2 file carries) is honoured (the sets above), taken differently (accepted; the
# reason is logged at start and in docs/mirror.md) or refused at start unless its value is one the
# mirror honours. Keys that are neither MM2's nor Headwater's are logged as unknown, as Kafka does.
_DIFFERENTLY = {
    "tasks.max": "every source partition has its own copier; run more mirror processes to spread them",
    "refresh.topics.enabled": "new source topics are seen through ZooKeeper's watch within seconds, always",
    "refresh.topics.interval.seconds": "new source topics are seen through ZooKeeper's watch within seconds",
    "refresh.groups.enabled": "the source's groups are listed every emit.checkpoints.interval.seconds",
    "refresh.groups.interval.seconds": "the source's groups are listed every emit.checkpoints.interval.seconds",
    "use.incremental.alter.configs": "topic configs are kept in step with IncrementalAlterConfigs, always",
    "heartbeats.topic.replication.factor": "the heartbeats topic is created in the source with the smaller of 3 "
    "and its live brokers",
    "admin.timeout.ms": "the mirror's own timeouts and retries apply",
    "consumer.poll.timeout.ms": "fetch.max.wait.ms bounds each fetch",
    "offset.flush.interval.ms": "offset.commit.interval.ms is how often source offsets are committed",
    "offset.flush.timeout.ms": "offsets are committed to the source's ZooKeeper, not a Connect topic",
    "offset.storage.replication.factor": "no Kafka Connect internal topics: offsets live in the source's ZooKeeper",
    "offset.storage.topic": "no Kafka Connect internal topics: offsets live in the source's ZooKeeper",
    "status.storage.replication.factor": "no Kafka Connect internal topics: /healthz and the metrics give status",
    "status.storage.topic": "no Kafka Connect internal topics: /healthz and the metrics give status",
    "config.storage.replication.factor": "no Kafka Connect internal topics: the file is the configuration",
    "config.storage.topic": "no Kafka Connect internal topics: the file is the configuration",
    "task.shutdown.graceful.timeout.ms": "a stopping copier finishes its in-flight produce (up to 60 s)",
    "dedicated.mode.enable.internal.rest": "no REST: processes coordinate through the source's ZooKeeper",
}
_DEFAULT_CLASSES = {
    "topic.filter.class": ("DefaultTopicFilter", "use topics / topics.exclude"),
    "group.filter.class": ("DefaultGroupFilter", "use groups / groups.exclude"),
    "config.property.filter.class": ("DefaultConfigPropertyFilter", "use config.properties.exclude"),
    "forwarding.admin.class": ("ForwardingAdmin", "the mirror's own admin client creates target topics"),
    "key.converter": ("ByteArrayConverter", "records are copied as bytes"),
    "value.converter": ("ByteArrayConverter", "records are copied as bytes"),
    "header.converter": ("ByteArrayConverter", "records are copied as bytes"),
}
#: key -> (the values honoured, lowercase; why others are refused)
_REFUSED_UNLESS: dict[str, tuple[frozenset[str], str]] = {
    "exactly.once.source.support": (
        frozenset({"disabled"}),
        "the mirror is at-least-once, duplicates after a change of owner removed (docs/mirror.md, Delivery)",
    ),
    "config.providers": (frozenset(), "secrets: sasl.password = file:... or env:..."),
    "name": (frozenset(), "a Kafka Connect connector setting: headwater mirror takes MM2's dedicated-mode file"),
    "connector.class": (
        frozenset(),
        "a Kafka Connect connector setting: headwater mirror takes MM2's dedicated-mode file",
    ),
    "source.cluster.alias": (frozenset(), "a Kafka Connect connector setting: use clusters and <src>-><dst>.enabled"),
    "target.cluster.alias": (frozenset(), "a Kafka Connect connector setting: use clusters and <src>-><dst>.enabled"),
}
_CLIENT_PREFIXES = ("consumer.", "producer.", "admin.")
#: MM2's keys honoured globally only (MM2 also takes them per flow)
_GLOBAL_ONLY = {
    "emit.checkpoints.enabled",
    "emit.checkpoints.interval.seconds",
    "emit.offset-syncs.enabled",
    "offset.lag.max",
    "groups",
    "groups.exclude",
    "groups.blacklist",
    "emit.heartbeats.enabled",
    "emit.heartbeats.interval.seconds",
    "replication.factor",
    "replication.policy.class",
    "replication.policy.separator",
    "checkpoints.topic.replication.factor",
    "offset-syncs.topic.replication.factor",
    "offset-syncs.topic.location",
    "sync.group.offsets.enabled",
    "sync.group.offsets.interval.seconds",
    "sync.topic.acls.enabled",
    "sync.topic.acls.interval.seconds",
    "sync.topic.configs.enabled",
    "sync.topic.configs.interval.seconds",
    "config.properties.exclude",
    "config.properties.blacklist",
}


def _mm2_key(key: str, setting: str, value: str, differently: list[str]) -> bool:
    """Whether ``setting`` (of ``key``) is an MM2 key taken differently or refused; raises for a refusal."""
    if setting in _DIFFERENTLY:
        differently.append(f"{key}: taken differently: {_DIFFERENTLY[setting]}")
        return True
    if setting in _DEFAULT_CLASSES:
        name, why = _DEFAULT_CLASSES[setting]
        if value.rsplit(".", 1)[-1] != name:
            raise MirrorConfigError(f"{key}: {value!r}: only {name} is supported ({why})")
        return True
    if setting in _REFUSED_UNLESS:
        allowed, why = _REFUSED_UNLESS[setting]
        if value.strip().lower() not in allowed:
            only = f" (only {', '.join(sorted(allowed))})" if allowed else ""
            raise MirrorConfigError(f"{key}: not supported{only}: {why}")
        return True
    if setting.startswith(_CLIENT_PREFIXES):
        raise MirrorConfigError(
            f"{key}: client overrides are not taken (only the security keys: docs/mirror.md, Secured clusters)"
        )
    return False


class MirrorConfigError(ValueError):
    """A configuration the mirror cannot run with; the message is one line naming the property."""


@dataclass(frozen=True)
class SourceCluster:
    alias: str
    bootstrap: str  # host:port list, or zk://<zookeeper.connect> when only ZooKeeper is given
    zookeeper_connect: str | None
    #: how the mirror's clients connect (``<alias>.security.protocol``, ``<alias>.sasl.*``, ...)
    security: ClientSecurity = field(default_factory=ClientSecurity)


@dataclass(frozen=True)
class Flow:
    source: str
    target: str
    topics: tuple[re.Pattern[str], ...]
    exclude: tuple[re.Pattern[str], ...]

    @property
    def name(self) -> str:
        return f"{self.source}->{self.target}"

    #: the mirror's heartbeats topic, mirrored whatever the topic lists say (as MM2 does)
    heartbeats: bool = False
    #: the replication policy ("identity" or "default") and its separator: cycle detection
    policy: str = "identity"
    separator: str = "."

    def matches(self, topic: str) -> bool:
        if self.is_cycle(topic):
            return False  # it came from the target: never mirrored back (MM2's isCycle)
        if self.heartbeats and (topic == HEARTBEATS_TOPIC or self._remote_heartbeats(topic)):
            return True
        if topic.endswith((".internal", "-internal")) or _MM2_INTERNAL.fullmatch(topic):
            return False  # MM2's internal topics (offset syncs, checkpoints) are never mirrored, as in MM2
        return any(p.fullmatch(topic) for p in self.topics) and not any(p.fullmatch(topic) for p in self.exclude)

    def _remote_heartbeats(self, topic: str) -> bool:
        """``<alias><sep>heartbeats``: an upstream cluster's heartbeats (MM2 mirrors them on, for replicationHops)."""
        return self.policy == "default" and topic.endswith(self.separator + HEARTBEATS_TOPIC)

    def topic_source(self, topic: str) -> str | None:
        """The cluster a topic's name says it came from (MM2's ``ReplicationPolicy.topicSource``):
        DefaultReplicationPolicy, ``<alias><sep><topic>``; IdentityReplicationPolicy, none (the
        name says nothing; the provenance of each record is not checked: docs/mirror.md)."""
        if self.policy != "default" or self.separator not in topic:
            return None
        return topic.split(self.separator, 1)[0] or None

    def is_cycle(self, topic: str) -> bool:
        """MM2's ``MirrorSourceConnector.isCycle``: the topic's source, or its upstream topic's, is the target."""
        seen = set()
        while (source := self.topic_source(topic)) is not None and topic not in seen:
            if source == self.target:
                return True
            seen.add(topic)
            topic = topic.split(self.separator, 1)[1]
        return False


@dataclass(frozen=True)
class MirrorConfig:
    clusters: dict[str, SourceCluster]
    flows: list[Flow]
    policy: str = "identity"  # or "default": "<source alias><separator><topic>"
    separator: str = "."
    group_id: str = "headwater-mirror"
    metrics_host: str = "0.0.0.0"
    metrics_port: int | None = None
    replication_factor: int | None = None
    offset_commit_interval_ms: int = 5000
    auto_offset_reset: str = "earliest"
    fetch_max_bytes: int = 8 * 1024 * 1024
    fetch_max_wait_ms: int = 500
    fetch_max_in_flight: int = 1
    #: per partition; None: 0 (no fetching ahead) with one fetch in flight, twice fetch_max_bytes with more
    fetch_max_buffered_bytes: int | None = None
    #: how often each member reads its partitions' end offsets from the source for the lag (lag.py)
    end_offsets_refresh_interval_ms: int = 5000
    resume_scan_max_bytes: int = 64 * 1024 * 1024
    resume_scan_total_max_bytes: int = 256 * 1024 * 1024
    always_repartition: bool = False
    #: stamp and check the provenance header (copier.py): active/active under IdentityReplicationPolicy
    provenance_header: bool = False
    on_data_loss: str = "report"
    #: how the sources are read: read_committed (KIP-98: aborted and open transactions never
    #: copied; the default) or read_uncommitted (every record, as MM2 with a consumer default)
    isolation_level: str = "read_committed"
    heartbeats_interval_s: float | None = 1.0  # None: no heartbeats
    #: MM2's offset syncs and checkpoints (headwater.mirror.checkpoints); None: not emitted
    offset_lag_max: int | None = 100
    checkpoints_interval_s: float | None = 60.0
    groups: tuple[re.Pattern[str], ...] = (re.compile(".*"),)
    groups_exclude: tuple[re.Pattern[str], ...] = tuple(
        re.compile(p) for p in ("console-consumer-.*", "connect-.*", "__.*")
    )
    internal_separator: str = "."  # the separator in MM2's internal topic names
    checkpoints_replication_factor: int | None = None  # None: the smaller of 3 and the live brokers
    sync_group_offsets_s: float | None = None  # KIP-545; None: off
    #: sync.topic.acls (acl_sync.py): every this many seconds; None: off (Headwater's default; MM2's is on)
    acl_sync_interval_s: float | None = None
    #: sync.topic.configs (config_sync.py): every this many seconds; None: off (configs copied at creation only)
    config_sync_interval_s: float | None = 600.0
    #: config.properties.exclude: never copied, never altered in the target (MM2's default list)
    config_exclude: tuple[re.Pattern[str], ...] = tuple(re.compile(p) for p in DEFAULT_EXCLUDE)
    offset_syncs_replication_factor: int | None = None
    #: load-aware placement (placement.py)
    placement_tolerance: float = 1.25
    placement_interval_s: float = 60.0
    drop_every: int = 0
    duplicate_every: int = 0
    #: signs the gap events the mirror publishes (the audit service's audit.signing.key)
    audit_signing_key: bytes | None = field(default=None, repr=False)
    unknown: list[str] = field(default_factory=list)
    #: MM2 keys accepted but taken differently, with why (logged at start)
    differently: list[str] = field(default_factory=list)

    def target_topic(self, flow: Flow, topic: str) -> str:
        return topic if self.policy == "identity" else f"{flow.source}{self.separator}{topic}"

    def offset_syncs_topic(self, flow: Flow) -> str:
        return offset_syncs_topic(flow.target, self.internal_separator)

    def checkpoints_topic(self, source: str) -> str:
        return checkpoints_topic(source, self.internal_separator)

    @property
    def max_buffered_bytes(self) -> int:
        """``fetch.max.buffered.bytes`` per partition; unset: 0 (one exact fetch at a time, the default)
        with ``fetch.max.in.flight`` 1, twice ``fetch.max.bytes`` with more (a second fetch of a
        partition is fetching ahead; see :mod:`headwater.mirror.fetch_ahead`)."""
        if self.fetch_max_buffered_bytes is not None:
            return self.fetch_max_buffered_bytes
        return 2 * self.fetch_max_bytes if self.fetch_max_in_flight > 1 else 0

    @property
    def isolation(self) -> int:
        """``isolation.level`` as the Fetch and ListOffsets field (0 read_uncommitted, 1 read_committed)."""
        return 1 if self.isolation_level == "read_committed" else 0

    def group_for(self, flow: Flow) -> str:
        """The ZooKeeper consumer group of a flow in its source cluster: ``group.id``, suffixed with
        the target when one source feeds several targets (each flow then has its own offsets)."""
        targets = {f.target for f in self.flows if f.source == flow.source}
        return self.group_id if len(targets) == 1 else f"{self.group_id}.{flow.target}"


def _strip_comment(value: str) -> str:
    return re.split(r"\s+#", value, maxsplit=1)[0].strip()


def _regexes(key: str, value: str) -> tuple[re.Pattern[str], ...]:
    out = []
    for item in (v.strip() for v in value.split(",")):
        if not item:
            continue
        try:
            out.append(re.compile(item))
        except re.error as e:
            raise MirrorConfigError(f"{key}: {item!r} is not a valid regex ({e})") from None
    return tuple(out)


def _int(props: dict[str, str], key: str, default: int | None, minimum: int = 0) -> int | None:
    raw = props.get(key)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise MirrorConfigError(f"{key}: {raw!r} is not an integer") from None
    if value < minimum:
        raise MirrorConfigError(f"{key}: {value} is below the minimum of {minimum}")
    return value


def _bool(key: str, raw: str) -> bool:
    low = raw.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    raise MirrorConfigError(f"{key}: {raw!r} is not true or false")


def _seconds(props: dict[str, str], key: str, default: str, highest: float) -> float:
    """An ``*.interval.seconds`` setting: a number from 0.1 to ``highest``."""
    raw = props.get(key, default)
    try:
        value = float(raw)
    except ValueError:
        raise MirrorConfigError(f"{key}: {raw!r} is not a number") from None
    if not 0.1 <= value <= highest:
        raise MirrorConfigError(f"{key}: {value:g} is not between 0.1 and {highest:g}")
    return value


def parse(raw_props: dict[str, str]) -> MirrorConfig:
    """Validate and build the configuration; raises MirrorConfigError (one line) on anything wrong."""
    props = {k.strip(): _strip_comment(v) for k, v in raw_props.items()}
    aliases = [a.strip() for a in props.get("clusters", "").split(",") if a.strip()]
    if not aliases:
        raise MirrorConfigError("clusters: no cluster aliases (e.g. clusters = dc1, dc2, agg)")
    for a in aliases:
        if not _ALIAS.fullmatch(a):
            raise MirrorConfigError(f"clusters: {a!r} is not a valid alias (letters, digits, '_' and '-')")
    if len(set(aliases)) != len(aliases):
        raise MirrorConfigError(f"clusters: an alias is listed twice in {props['clusters']!r}")

    unknown: list[str] = []
    differently: list[str] = []
    flow_settings: dict[tuple[str, str], dict[str, str]] = {}
    for key, value in props.items():
        m = _FLOW_KEY.match(key)
        if m:
            src, dst, setting = m.groups()
            for alias in (src, dst):
                if alias not in aliases:
                    raise MirrorConfigError(f"{key}: cluster {alias!r} is not in clusters ({', '.join(aliases)})")
            if src == dst:
                raise MirrorConfigError(f"{key}: a flow from {src} to itself")
            if setting in _GLOBAL_ONLY:
                raise MirrorConfigError(f"{key}: not supported per flow: set {setting} for every flow (no prefix)")
            if setting not in _FLOW_SETTINGS and not _mm2_key(key, setting, value, differently):
                unknown.append(key)
            flow_settings.setdefault((src, dst), {})[setting] = value
            continue
        if key in _GLOBAL_SETTINGS or key in SECURITY_PROPERTIES:
            continue
        if _mm2_key(key, key, value, differently):
            continue
        alias, _, setting = key.partition(".")
        if setting in SECURITY_PROPERTIES and alias in aliases:
            continue
        if alias in aliases and _mm2_key(key, setting, value, differently):
            continue
        if setting in _CLUSTER_SETTINGS and alias not in aliases:
            raise MirrorConfigError(f"{key}: cluster {alias!r} is not in clusters ({', '.join(aliases)})")
        if not (alias in aliases and setting in _CLUSTER_SETTINGS):
            unknown.append(key)  # MM2 has many more settings: reported, never fatal

    clusters: dict[str, SourceCluster] = {}
    for a in aliases:
        zk = props.get(f"{a}.zookeeper.connect") or None
        bootstrap = props.get(f"{a}.bootstrap.servers") or (f"zk://{zk}" if zk else "")
        if not bootstrap:
            raise MirrorConfigError(f"{a}.bootstrap.servers: cluster {a} needs bootstrap.servers or zookeeper.connect")
        try:
            security = cluster_security(props, f"{a}.")
        except SecurityConfigError as e:
            raise MirrorConfigError(str(e)) from None
        clusters[a] = SourceCluster(a, bootstrap, zk, security)

    default_topics = _regexes("topics", props.get("topics", ".*"))
    default_exclude = _regexes("topics.exclude", props.get("topics.exclude", props.get("topics.blacklist", "__.*")))
    heartbeats = _bool("emit.heartbeats.enabled", props.get("emit.heartbeats.enabled", "true"))
    flows: list[Flow] = []
    for (src, dst), settings in sorted(flow_settings.items()):
        if not _bool(f"{src}->{dst}.enabled", settings.get("enabled", "false")):
            continue
        if not clusters[src].zookeeper_connect:
            raise MirrorConfigError(
                f"{src}.zookeeper.connect: the source of {src}->{dst} needs ZooKeeper (its consumer group lives there)"
            )
        topics = _regexes(f"{src}->{dst}.topics", settings["topics"]) if "topics" in settings else default_topics
        ex_key = "topics.exclude" if "topics.exclude" in settings else "topics.blacklist"
        exclude = _regexes(f"{src}->{dst}.{ex_key}", settings[ex_key]) if ex_key in settings else default_exclude
        flows.append(Flow(src, dst, topics, exclude, heartbeats))
    if not flows:
        raise MirrorConfigError("no flow is enabled (e.g. dc1->agg.enabled = true)")
    if len({f.target for f in flows}) > 1:
        raise MirrorConfigError("every enabled flow must have the same target cluster (the aggregate cluster)")

    policy_name = props.get("replication.policy.class", "IdentityReplicationPolicy")
    policy = _POLICIES.get(policy_name)
    if policy is None:
        raise MirrorConfigError(
            f"replication.policy.class: {policy_name!r} is not IdentityReplicationPolicy or DefaultReplicationPolicy"
        )
    separator = props.get("replication.policy.separator", ".")
    if not separator:
        raise MirrorConfigError("replication.policy.separator: empty")
    flows = [dataclasses.replace(f, policy=policy, separator=separator) for f in flows]
    reset = props.get("auto.offset.reset", "earliest")
    aliases_reset = {"earliest": "earliest", "smallest": "earliest", "latest": "latest", "largest": "latest"}
    if reset not in aliases_reset:
        raise MirrorConfigError(f"auto.offset.reset: {reset!r} is not earliest or latest")
    repartition = props.get("repartition", "auto")
    if repartition not in ("auto", "always"):
        raise MirrorConfigError(f"repartition: {repartition!r} is not auto or always")
    on_data_loss = props.get("mirror.on.data.loss", "report")
    if on_data_loss not in ("report", "stop"):
        raise MirrorConfigError(f"mirror.on.data.loss: {on_data_loss!r} is not report or stop")
    isolation_level = props.get("isolation.level", "read_committed")
    if isolation_level not in ("read_committed", "read_uncommitted"):
        raise MirrorConfigError(f"isolation.level: {isolation_level!r} is not read_committed or read_uncommitted")
    interval_s = _seconds(props, "emit.heartbeats.interval.seconds", "1", 3600)
    checkpoints_enabled = _bool("emit.checkpoints.enabled", props.get("emit.checkpoints.enabled", "true"))
    syncs_enabled = _bool("emit.offset-syncs.enabled", props.get("emit.offset-syncs.enabled", "true"))
    if checkpoints_enabled and not syncs_enabled:
        raise MirrorConfigError(
            "emit.offset-syncs.enabled: false, but emit.checkpoints.enabled is true (checkpoints are translated "
            "with the offset syncs; set emit.checkpoints.enabled = false too)"
        )
    sync_groups = _bool("sync.group.offsets.enabled", props.get("sync.group.offsets.enabled", "false"))
    if sync_groups and not checkpoints_enabled:
        raise MirrorConfigError("sync.group.offsets.enabled: true needs emit.checkpoints.enabled = true (as in MM2)")
    sync_interval_s = _seconds(props, "sync.group.offsets.interval.seconds", "60", 86400)
    acls_enabled = _bool("sync.topic.acls.enabled", props.get("sync.topic.acls.enabled", "false"))
    acls_interval_s = _seconds(props, "sync.topic.acls.interval.seconds", "600", 86400)
    configs_enabled = _bool("sync.topic.configs.enabled", props.get("sync.topic.configs.enabled", "true"))
    configs_interval_s = _seconds(props, "sync.topic.configs.interval.seconds", "600", 86400)
    cex_key = "config.properties.exclude" if "config.properties.exclude" in props else "config.properties.blacklist"
    config_exclude = (
        _regexes(cex_key, props[cex_key]) if cex_key in props else tuple(re.compile(p) for p in DEFAULT_EXCLUDE)
    )
    location = props.get("offset-syncs.topic.location", "source")
    if location != "source":
        raise MirrorConfigError(f"offset-syncs.topic.location: {location!r}: only source (MM2's default) is supported")
    checkpoints_interval_s = _seconds(props, "emit.checkpoints.interval.seconds", "60", 86400)
    offset_lag_max = _int(props, "offset.lag.max", 100, minimum=1) or 100
    groups = _regexes("groups", props.get("groups", ".*"))
    ex_key = "groups.exclude" if "groups.exclude" in props else "groups.blacklist"
    groups_exclude = _regexes(ex_key, props.get(ex_key, "console-consumer-.*, connect-.*, __.*"))
    internal_separator_enabled = _bool(
        "replication.policy.internal.topic.separator.enabled",
        props.get("replication.policy.internal.topic.separator.enabled", "true"),
    )
    raw_tolerance = props.get("placement.load.tolerance", "1.25")
    try:
        placement_tolerance = float(raw_tolerance)
    except ValueError:
        raise MirrorConfigError(f"placement.load.tolerance: {raw_tolerance!r} is not a number") from None
    if not 1.0 <= placement_tolerance <= 100.0:
        raise MirrorConfigError(
            f"placement.load.tolerance: {placement_tolerance:g} is not between 1 (the mean load) and 100"
        )
    try:
        audit_signing_key = signing_key(props.get("audit.signing.key") or None)
    except SigningKeyError as e:
        raise MirrorConfigError(str(e)) from None
    return MirrorConfig(
        audit_signing_key=audit_signing_key,
        clusters=clusters,
        flows=flows,
        policy=policy,
        separator=separator,
        group_id=props.get("group.id", "headwater-mirror") or "headwater-mirror",
        metrics_host=props.get("metrics.host", "0.0.0.0"),
        metrics_port=_int(props, "metrics.port", None),
        replication_factor=_int(props, "replication.factor", None, minimum=1),
        offset_commit_interval_ms=_int(props, "offset.commit.interval.ms", 5000, minimum=1) or 5000,
        auto_offset_reset=aliases_reset[reset],
        fetch_max_bytes=_int(props, "fetch.max.bytes", 8 * 1024 * 1024, minimum=1024) or 8 * 1024 * 1024,
        fetch_max_wait_ms=_int(props, "fetch.max.wait.ms", 500) or 0,
        fetch_max_in_flight=_int(props, "fetch.max.in.flight", 1, minimum=1) or 1,
        fetch_max_buffered_bytes=_int(props, "fetch.max.buffered.bytes", None, minimum=0),
        end_offsets_refresh_interval_ms=_int(props, "end.offsets.refresh.interval.ms", 5000, minimum=100) or 5000,
        resume_scan_max_bytes=_int(props, "resume.scan.max.bytes", 64 * 1024 * 1024, minimum=0) or 0,
        resume_scan_total_max_bytes=_int(props, "resume.scan.total.max.bytes", 256 * 1024 * 1024, minimum=0) or 0,
        always_repartition=repartition == "always",
        provenance_header=_bool("provenance.header.enabled", props.get("provenance.header.enabled", "false")),
        on_data_loss=on_data_loss,
        isolation_level=isolation_level,
        heartbeats_interval_s=interval_s if heartbeats else None,
        offset_lag_max=offset_lag_max if syncs_enabled else None,
        checkpoints_interval_s=checkpoints_interval_s if checkpoints_enabled else None,
        groups=groups,
        groups_exclude=groups_exclude,
        internal_separator=separator if internal_separator_enabled else ".",
        sync_group_offsets_s=sync_interval_s if sync_groups else None,
        acl_sync_interval_s=acls_interval_s if acls_enabled else None,
        config_sync_interval_s=configs_interval_s if configs_enabled else None,
        config_exclude=config_exclude,
        checkpoints_replication_factor=_int(props, "checkpoints.topic.replication.factor", None, minimum=1),
        offset_syncs_replication_factor=_int(props, "offset-syncs.topic.replication.factor", None, minimum=1),
        placement_tolerance=placement_tolerance,
        placement_interval_s=_seconds(props, "placement.rebalance.interval.seconds", "60", 86400),
        drop_every=_int(props, "headwater.test.drop.every", 0) or 0,
        duplicate_every=_int(props, "headwater.test.duplicate.every", 0) or 0,
        unknown=sorted(unknown),
        differently=sorted(differently),
    )


def load(path: str | None, overrides: dict[str, str]) -> MirrorConfig:
    """The file (if any) with the overrides on top; raises MirrorConfigError, also for an unreadable file."""
    props: dict[str, str] = {}
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                props.update(parse_properties(f.read()))
        except OSError as e:
            raise MirrorConfigError(f"cannot read {path}: {e.strerror}") from None
    props.update(overrides)
    return parse(props)
