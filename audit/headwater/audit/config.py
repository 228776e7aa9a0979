"""The audit service's configuration (``audit.properties``).

::

    clusters = dc1, dc2, agg                 # each one is a tier named by its alias
    dc1.bootstrap.servers = dc1-broker1:9092
    dc2.bootstrap.servers = dc2-broker1:9092
    agg.bootstrap.servers = agg-broker1:9092
    audit.topics = page-views, clicks.*      # regexes of the audited topics
    window.ms = 60000                        # must match the producers' window
    grace.ms = 120000     # a window closes for a tier once it was counted this long past its end
    store = sqlite:////var/lib/headwater/audit.db   # or postgresql://user:pass@host/db
    http.host = 127.0.0.1                    # the default; beyond loopback http.auth is required
    http.port = 8080
    http.auth = none                         # or basic / bearer: http_auth.py (/healthz, /metrics stay open)
    http.allow.unauthenticated = false       # true: serve http.auth = none beyond loopback (the lab)
    audit.max.topics = 1000                  # distinct topic names tracked; more are refused (counted)
    audit.signing.key = file:/etc/headwater/audit-signing.key   # HMAC of count/gap events (counter.py)
    alert.webhook.url = http://alerts:9000/hook     # optional
    heartbeats.topic = heartbeats            # the mirror's heartbeats, read on aggregate tiers

Each cluster's client security takes Kafka's client property names under its alias, or unprefixed
for every cluster (the alias's value wins), as in the mirror's file::

    agg.security.protocol = SASL_SSL
    agg.ssl.ca.location = /etc/headwater/ca.pem
    agg.sasl.mechanism = SCRAM-SHA-512
    agg.sasl.username = audit
    agg.sasl.password = file:/etc/headwater/audit.password     # or env:NAME; never logged

A cluster whose alias is also a datacenter name (``origin.dc`` of the producers) is that
datacenter's local tier: only its own datacenter's records are expected there. Any other cluster is
an aggregate tier, expected to hold every datacenter's records — or, with
``aggregate.clusters = agg``, exactly the clusters listed (then a DC cluster is never mistaken
for an aggregate before its own producers have reported).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field

from headwater.audit.http_auth import HttpAuth, HttpAuthConfigError, parse_http_auth
from headwater.audit.signing import EventSigning, SigningConfigError, parse_signing
from headwater.client.security import ClientSecurity, SecurityConfigError, cluster_security
from headwater.properties import parse_properties


class AuditConfigError(ValueError):
    """One line naming the property."""


@dataclass(frozen=True)
class AuditConfig:
    clusters: dict[str, str]  # alias -> bootstrap
    topics: tuple[re.Pattern[str], ...]
    window_ms: int = 60000
    grace_ms: int = 120000
    store: str = "sqlite:///audit.db"
    http_host: str = "127.0.0.1"
    http_port: int = 8080
    http_auth: HttpAuth = field(default_factory=HttpAuth)  # http.auth*: the dashboard's and API's credentials, if any
    webhook_url: str | None = None
    fetch_max_wait_ms: int = 500
    aggregates: frozenset[str] | None = None  # aggregate.clusters; None: the clusters not named like a DC
    retention_days: int = 30  # windows (and their events, alerts, gaps) older than this are pruned
    heartbeats_topic: str = "heartbeats"  # the mirror's heartbeats (mirror/heartbeats.py) on aggregate tiers
    #: alias -> how the audit's clients connect (``<alias>.security.protocol``, ``<alias>.sasl.*``, ...)
    security: dict[str, ClientSecurity] = field(default_factory=dict)
    #: http.allow.unauthenticated: http.auth = none on an address beyond loopback, said explicitly
    http_allow_unauthenticated: bool = False
    max_topics: int = 1000  # audit.max.topics: distinct topic names tracked (store, metrics labels)
    signing: EventSigning = field(default_factory=EventSigning)  # audit.signing.*: see signing.py

    def audited(self, topic: str) -> bool:
        return any(p.fullmatch(topic) for p in self.topics)


def parse(raw: dict[str, str]) -> AuditConfig:
    props = {k.strip(): re.split(r"\s+#", v, maxsplit=1)[0].strip() for k, v in raw.items()}
    aliases = [a.strip() for a in props.get("clusters", "").split(",") if a.strip()]
    if not aliases:
        raise AuditConfigError("clusters: no cluster aliases (e.g. clusters = dc1, dc2, agg)")
    reserved = {"producer", "warehouse"}
    clusters: dict[str, str] = {}
    for a in aliases:
        if a in reserved:
            raise AuditConfigError(f"clusters: {a!r} is a tier name of its own; choose another alias")
        bootstrap = props.get(f"{a}.bootstrap.servers") or (
            f"zk://{props[f'{a}.zookeeper.connect']}" if props.get(f"{a}.zookeeper.connect") else ""
        )
        if not bootstrap:
            raise AuditConfigError(f"{a}.bootstrap.servers: required for cluster {a}")
        clusters[a] = bootstrap
    for key in props:
        alias, _, setting = key.partition(".")
        if setting in ("bootstrap.servers", "zookeeper.connect") and alias not in clusters:
            raise AuditConfigError(f"{key}: cluster {alias!r} is not in clusters ({', '.join(aliases)})")
    security: dict[str, ClientSecurity] = {}
    for a in aliases:
        try:
            security[a] = cluster_security(props, f"{a}.")
        except SecurityConfigError as e:
            raise AuditConfigError(str(e)) from None
    topics = []
    for item in (t.strip() for t in props.get("audit.topics", ".*").split(",")):
        if item:
            try:
                topics.append(re.compile(item))
            except re.error as e:
                raise AuditConfigError(f"audit.topics: {item!r} is not a valid regex ({e})") from None

    def integer(key: str, default: int, minimum: int) -> int:
        raw_value = props.get(key, "")
        if not raw_value:
            return default
        try:
            value = int(raw_value)
        except ValueError:
            raise AuditConfigError(f"{key}: {raw_value!r} is not an integer") from None
        if value < minimum:
            raise AuditConfigError(f"{key}: {value} is below the minimum of {minimum}")
        return value

    aggregates = None
    if props.get("aggregate.clusters"):
        aggregates = frozenset(a.strip() for a in props["aggregate.clusters"].split(",") if a.strip())
        for a in aggregates:
            if a not in clusters:
                raise AuditConfigError(f"aggregate.clusters: {a!r} is not in clusters ({', '.join(aliases)})")
    store = props.get("store", "sqlite:///audit.db")
    if not store.startswith(("sqlite:///", "postgresql://", "postgres://")):
        raise AuditConfigError(f"store: {store!r} is not sqlite:///<path> or postgresql://...")
    http_host = props.get("http.host", "127.0.0.1")
    http_auth = _http_auth(props)
    allow = props.get("http.allow.unauthenticated", "false").lower()
    if allow not in ("true", "false"):
        raise AuditConfigError(f"http.allow.unauthenticated: {allow[:40]!r} is not true or false")
    if not http_auth.enabled and not is_loopback(http_host) and allow != "true":
        raise AuditConfigError(
            f"http.auth: none on http.host {http_host or '(every address)'!r} would serve every topic, datacenter "
            "and producer host to anyone who reaches it: set http.auth = basic or bearer (http.auth.*), "
            "or http.host = 127.0.0.1 behind a reverse proxy that logs users in, "
            "or http.allow.unauthenticated = true where the network itself is trusted (the lab)"
        )
    try:
        signing = parse_signing(props)
    except SigningConfigError as e:
        raise AuditConfigError(str(e)) from None
    return AuditConfig(
        clusters=clusters,
        topics=tuple(topics),
        window_ms=integer("window.ms", 60000, 1),
        grace_ms=integer("grace.ms", 120000, 0),
        store=store,
        http_host=http_host,
        http_port=integer("http.port", 8080, 0),
        http_auth=http_auth,
        webhook_url=props.get("alert.webhook.url") or None,
        fetch_max_wait_ms=integer("fetch.max.wait.ms", 500, 0),
        aggregates=aggregates,
        retention_days=integer("retention.days", 30, 1),
        heartbeats_topic=props.get("heartbeats.topic") or "heartbeats",
        security=security,
        http_allow_unauthenticated=allow == "true",
        max_topics=integer("audit.max.topics", 1000, 1),
        signing=signing,
    )


def is_loopback(host: str) -> bool:
    """Whether ``http.host`` binds loopback only: ``localhost`` or a loopback address (any other name
    may resolve to anything, so it counts as beyond loopback)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False


def _http_auth(props: dict[str, str]) -> HttpAuth:
    try:
        return parse_http_auth(props)
    except HttpAuthConfigError as e:
        raise AuditConfigError(str(e)) from None


def load(path: str, overrides: dict[str, str]) -> AuditConfig:
    try:
        with open(path, encoding="utf-8") as f:
            props = parse_properties(f.read())
    except OSError as e:
        raise AuditConfigError(f"cannot read {path}: {e.strerror}") from None
    props.update(overrides)
    return parse(props)
