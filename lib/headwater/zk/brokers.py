"""``/brokers/ids/<id>``: a broker's registration (ephemeral), Kafka 2.3's BrokerIdZNode, version 4::

    {"version":4,"host":"h","port":9092,"jmx_port":-1,"timestamp":"1574000000000",
     "endpoints":["PLAINTEXT://h:9092","SSL://h:9093"],
     "listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT","SSL":"SSL"},"rack":"r1"}

``host``/``port`` repeat the PLAINTEXT endpoint (null/-1 without one), as Kafka writes them for
old clients; ``rack`` is present only when ``broker.rack`` is set. Readers accept versions 1-4:
before version 2 there are no endpoints (``host``/``port`` only); before version 4 no protocol map
(the listener name is the security protocol).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from headwater.zk.json import json_object, to_json

VERSION = 4


@dataclass(frozen=True)
class Endpoint:
    listener: str  # the listener name, upper case (PLAINTEXT, INTERNAL, ...)
    host: str
    port: int

    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.listener}://{host}:{self.port}"


@dataclass(frozen=True)
class BrokerRegistration:
    broker_id: int
    endpoints: tuple[Endpoint, ...]
    #: listener name -> security protocol
    protocols: dict[str, str] = field(default_factory=dict)
    rack: str | None = None
    timestamp_ms: int = 0
    jmx_port: int = -1

    def endpoint(self, listener: str) -> Endpoint | None:
        for e in self.endpoints:
            if e.listener == listener.upper():
                return e
        return None

    def endpoint_for_protocol(self, protocol: str | None) -> Endpoint | None:
        """The first endpoint whose listener has ``protocol`` (SASL_SSL, ...), or the first
        endpoint when ``protocol`` is None or no listener has it."""
        if protocol is not None:
            for e in self.endpoints:
                if self.protocols.get(e.listener, e.listener) == protocol:
                    return e
        return self.endpoints[0] if self.endpoints else None

    def encode(self) -> bytes:
        plain = self.endpoint("PLAINTEXT")
        doc: dict[str, object] = {
            "version": VERSION,
            "host": plain.host if plain else None,
            "port": plain.port if plain else -1,
            "jmx_port": self.jmx_port,
            "timestamp": str(self.timestamp_ms),
            "endpoints": [e.url() for e in self.endpoints],
            "listener_security_protocol_map": dict(self.protocols),
        }
        if self.rack is not None:
            doc["rack"] = self.rack
        return to_json(doc)


def parse_endpoint(url: str) -> Endpoint | None:
    """``"SASL_SSL://host:9093"`` (IPv6 hosts in brackets) -> Endpoint; None when malformed."""
    name, sep, rest = str(url).partition("://")
    host, _, port = rest.rpartition(":")
    if not sep or not name or not port.isdigit():
        return None
    return Endpoint(name.upper(), host.strip("[]"), int(port))


def decode(broker_id: int, data: bytes | None) -> BrokerRegistration:
    """The registration of ``broker_id``; ZnodeFormatError when the znode is not one."""
    doc = json_object(data, f"/brokers/ids/{broker_id}")
    endpoints = [e for e in (parse_endpoint(u) for u in doc.get("endpoints") or []) if e is not None]
    if not endpoints and doc.get("host"):
        endpoints.append(Endpoint("PLAINTEXT", str(doc["host"]), int(doc.get("port", 9092))))
    protocols = {str(k).upper(): str(v) for k, v in (doc.get("listener_security_protocol_map") or {}).items()}
    rack = doc.get("rack")
    ts = doc.get("timestamp")
    return BrokerRegistration(
        broker_id,
        tuple(endpoints),
        protocols,
        rack if isinstance(rack, str) else None,
        int(ts) if isinstance(ts, str | int) and str(ts).lstrip("-").isdigit() else 0,
        int(doc.get("jmx_port", -1) or -1),
    )
