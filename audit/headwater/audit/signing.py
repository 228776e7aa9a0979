"""Which ``__audit`` events the audit service accepts (``audit.signing.*``; review M8).

::

    audit.signing.key = file:/etc/headwater/audit-signing.key    # or env:NAME; never logged
    audit.signing.previous.key = env:OLD_AUDIT_KEY                # optional: accepted during a rotation
    audit.signing.exempt = warehouse, gap                         # optional: kinds accepted unsigned

Anyone allowed to Write ``__audit`` — every audited producer must be — could otherwise forge count
events (raising loss or duplicates alerts at will, or hiding a real loss) and gap events. The audit
service cannot see which principal produced a record (Kafka stores none), so ACLs alone cannot tell
an audited producer's event from a forged one: the producers sign each event's value with
HMAC-SHA256 under a key they share with the audit service (the ``audit.signature`` header,
headwater.client.audit.sign_event), and with a key configured every count and gap event must carry
a valid signature by it (or by ``audit.signing.previous.key``). An unsigned or badly signed event is
refused: kept in ``audit_rejected`` (reason ``unsigned`` / ``bad signature``), counted in
``headwater_audit_bad_events{tier,reason}`` and logged once per producer (datacenter and host).

``audit.signing.exempt`` lists kinds still accepted unsigned: ``warehouse`` (the loader's count
events) and ``gap`` (the mirror's), which do not sign yet. Without a key nothing is verified (the
default, for compatibility): the service logs that at start, and docs/audit.md says what it risks.
The key is shared: a holder can sign any event, so keep it on the producers' hosts only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from headwater.client.audit import SigningKeyError, signing_key

EXEMPTABLE = ("warehouse", "gap")


class SigningConfigError(ValueError):
    """An ``audit.signing.*`` property we cannot use; names the property, never the key."""


@dataclass(frozen=True)
class EventSigning:
    keys: tuple[bytes, ...] = field(default=(), repr=False)  # the current key first
    exempt: frozenset[str] = frozenset()

    @property
    def required(self) -> bool:
        return bool(self.keys)

    def required_for(self, kind: str, tier: str) -> bool:
        """Whether an event of ``kind`` (``count``/``gap``) from ``tier`` must be signed."""
        if not self.keys:
            return False
        return (kind if kind == "gap" else tier) not in self.exempt


def parse_signing(props: Mapping[str, str]) -> EventSigning:
    keys: list[bytes] = []
    for prop in ("audit.signing.key", "audit.signing.previous.key"):
        raw = props.get(prop) or None
        if raw is None:
            continue
        if prop.endswith("previous.key") and not keys:
            raise SigningConfigError(f"{prop}: set without audit.signing.key")
        try:
            key = signing_key(raw, prop)
        except SigningKeyError as e:
            raise SigningConfigError(str(e)) from None
        if key is not None:
            keys.append(key)
    exempt = frozenset(k.strip().lower() for k in (props.get("audit.signing.exempt") or "").split(",") if k.strip())
    unknown = sorted(exempt - set(EXEMPTABLE))
    if unknown:
        raise SigningConfigError(
            f"audit.signing.exempt: {unknown[0][:40]!r} is not one of {', '.join(EXEMPTABLE)} "
            "(producer count events are always verified when a key is set)"
        )
    if exempt and not keys:
        raise SigningConfigError("audit.signing.exempt: set without audit.signing.key")
    return EventSigning(tuple(keys), exempt)
