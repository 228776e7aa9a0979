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
``fetch.max.in.flight`` (fetches of a partition on the wire, and Fetch rounds per source broker, 2),
``fetch.max.buffered.bytes`` (per partition, fetched ahead and not yet acknowledged by the target;
default twice ``fetch.max.bytes``, 0: no fetching ahead; all three: :mod:`headwater.mirror.fetch_ahead`),
``resume.scan.max.bytes`` (64 MiB) and
``resume.scan.total.max.bytes`` (256 MiB: how much of the target a new owner's resume scan reads
per partition and holds, summed, over all partitions; see :mod:`headwater.mirror.copies`),
``repartition`` (``auto``: decode only when partition counts differ; ``always``),
``mirror.on.data.loss`` (``report``: a gap below the source's log start is reported, then the copier
resumes there; ``stop``: reported, then that partition stops; see :mod:`headwater.mirror.gaps`),
MM2's ``emit.heartbeats.enabled`` (true) and ``emit.heartbeats.interval.seconds`` (1; see
:mod:`headwater.mirror.heartbeats`), and the
test-only fault properties ``headwater.test.drop.every`` / ``headwater.test.duplicate.every``
(drop / produce twice every N-th record; they force the decoding path).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from headwater.client.audit import SigningKeyError, signing_key
from headwater.client.security import SECURITY_PROPERTIES, ClientSecurity, SecurityConfigError, cluster_security
from headwater.properties import parse_properties

__all__ = ["HEARTBEATS_TOPIC", "Flow", "MirrorConfig", "MirrorConfigError", "SourceCluster", "load", "parse"]

_POLICIES = {
    "IdentityReplicationPolicy": "identity",
    "org.apache.kafka.connect.mirror.IdentityReplicationPolicy": "identity",
    "DefaultReplicationPolicy": "default",
    "org.apache.kafka.connect.mirror.DefaultReplicationPolicy": "default",
}
HEARTBEATS_TOPIC = "heartbeats"
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
    "resume.scan.max.bytes",
    "resume.scan.total.max.bytes",
    "repartition",
    "mirror.on.data.loss",
    "emit.heartbeats.enabled",
    "emit.heartbeats.interval.seconds",
    "headwater.test.drop.every",
    "headwater.test.duplicate.every",
}
_CLUSTER_SETTINGS = {"bootstrap.servers", "zookeeper.connect"}


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

    def matches(self, topic: str) -> bool:
        if self.heartbeats and topic == HEARTBEATS_TOPIC:
            return True
        return any(p.fullmatch(topic) for p in self.topics) and not any(p.fullmatch(topic) for p in self.exclude)


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
    fetch_max_in_flight: int = 2
    fetch_max_buffered_bytes: int | None = None  # per partition; None: twice fetch_max_bytes
    resume_scan_max_bytes: int = 64 * 1024 * 1024
    resume_scan_total_max_bytes: int = 256 * 1024 * 1024
    always_repartition: bool = False
    on_data_loss: str = "report"
    heartbeats_interval_s: float | None = 1.0  # None: no heartbeats
    drop_every: int = 0
    duplicate_every: int = 0
    #: signs the gap events the mirror publishes (the audit service's audit.signing.key)
    audit_signing_key: bytes | None = field(default=None, repr=False)
    unknown: list[str] = field(default_factory=list)

    def target_topic(self, flow: Flow, topic: str) -> str:
        return topic if self.policy == "identity" else f"{flow.source}{self.separator}{topic}"

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
            if setting not in _FLOW_SETTINGS:
                unknown.append(key)
            flow_settings.setdefault((src, dst), {})[setting] = value
            continue
        if key in _GLOBAL_SETTINGS or key in SECURITY_PROPERTIES:
            continue
        alias, _, setting = key.partition(".")
        if setting in SECURITY_PROPERTIES and alias in aliases:
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
    interval = props.get("emit.heartbeats.interval.seconds", "1")
    try:
        interval_s = float(interval)
    except ValueError:
        raise MirrorConfigError(f"emit.heartbeats.interval.seconds: {interval!r} is not a number") from None
    if not 0.1 <= interval_s <= 3600:
        raise MirrorConfigError(f"emit.heartbeats.interval.seconds: {interval_s:g} is not between 0.1 and 3600")
    try:
        audit_signing_key = signing_key(props.get("audit.signing.key") or None)
    except SigningKeyError as e:
        raise MirrorConfigError(str(e)) from None
    return MirrorConfig(
        audit_signing_key=audit_signing_key,
        clusters=clusters,
        flows=flows,
        policy=policy,
        separator=props.get("replication.policy.separator", "."),
        group_id=props.get("group.id", "headwater-mirror") or "headwater-mirror",
        metrics_host=props.get("metrics.host", "0.0.0.0"),
        metrics_port=_int(props, "metrics.port", None),
        replication_factor=_int(props, "replication.factor", None, minimum=1),
        offset_commit_interval_ms=_int(props, "offset.commit.interval.ms", 5000, minimum=1) or 5000,
        auto_offset_reset=aliases_reset[reset],
        fetch_max_bytes=_int(props, "fetch.max.bytes", 8 * 1024 * 1024, minimum=1024) or 8 * 1024 * 1024,
        fetch_max_wait_ms=_int(props, "fetch.max.wait.ms", 500) or 0,
        fetch_max_in_flight=_int(props, "fetch.max.in.flight", 2, minimum=1) or 2,
        fetch_max_buffered_bytes=_int(props, "fetch.max.buffered.bytes", None, minimum=0),
        resume_scan_max_bytes=_int(props, "resume.scan.max.bytes", 64 * 1024 * 1024, minimum=0) or 0,
        resume_scan_total_max_bytes=_int(props, "resume.scan.total.max.bytes", 256 * 1024 * 1024, minimum=0) or 0,
        always_repartition=repartition == "always",
        on_data_loss=on_data_loss,
        heartbeats_interval_s=interval_s if heartbeats else None,
        drop_every=_int(props, "headwater.test.drop.every", 0) or 0,
        duplicate_every=_int(props, "headwater.test.duplicate.every", 0) or 0,
        unknown=sorted(unknown),
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
