"""Client quota configs (KIP-13, KIP-55, KIP-124): their names, what values Kafka 2.3 accepts, and the
entities that hold them (``/config/users/<u>[/clients/<c>]``, ``/config/clients/<c>``, ``<default>``
for either). The broker applies them (broker/quotas.py); ``headwater configs`` writes them."""

from __future__ import annotations

import math

from headwater.zk import config as zkconfig
from headwater.zk.paths import config_entity_path

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
#: the quota configs of a user or client entity, as Kafka 2.3's DynamicConfig.Client / .User
QUOTA_CONFIGS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE)
DEFAULT = zkconfig.DEFAULT_ENTITY


def validate_quota_config(name: str, value: str) -> str | None:
    """An error message for a quota config Kafka 2.3 would refuse (``None``: valid)."""
    if name not in QUOTA_CONFIGS:
        return f"Unknown quota config {name!r}: one of {', '.join(QUOTA_CONFIGS)}"
    try:
        if name == REQUEST_PERCENTAGE:
            x = float(value)
            if not x > 0 or math.isinf(x) or math.isnan(x):
                raise ValueError
        else:
            if int(value) <= 0:
                raise ValueError
    except ValueError:
        kind = "a positive number (percent)" if name == REQUEST_PERCENTAGE else "a positive integer (bytes/s)"
        return f"Invalid value {value!r} for {name}: must be {kind}"
    return None


def entity_key(user: str | None, client: str | None) -> str:
    """The entity's name under ``/config`` with its type: ``users/alice/clients/app``, ``users/<default>``,
    ``clients/app``; ``user`` and ``client`` raw (sanitized here) or ``<default>``."""
    if user is not None:
        base = f"users/{zkconfig.sanitize(user)}"
        return base if client is None else f"{base}/clients/{zkconfig.sanitize(client)}"
    assert client is not None
    return f"clients/{zkconfig.sanitize(client)}"


def entity_znode(key: str) -> str:
    entity_type, _, name = key.partition("/")
    return config_entity_path(entity_type, name)


def user_clients_znode(user: str) -> str:
    """The parent of a user's client-id entities (``user`` raw or ``<default>``)."""
    return config_entity_path("users", f"{zkconfig.sanitize(user)}/clients")
