"""Dynamic configs under ``/config`` and their change notifications.

``/config/<type>/<name>`` (Kafka 2.3's ConfigEntityZNode, version 1), for types ``topics``,
``brokers`` (``<id>`` or ``<default>``), ``users`` and ``clients`` (quotas and SCRAM credentials;
``users/<u>/clients/<c>`` for nested quota entities); values are always strings::

    {"version":1,"config":{"retention.ms":"60000","cleanup.policy":"compact"}}

``/config/changes/config_change_<seq>`` (ConfigEntityChangeNotificationSequenceZNode, version 2):
written after every change so that every broker re-reads that entity::

    {"version":2,"entity_path":"topics/orders"}

User and client names are stored *sanitized* (Kafka's ``Sanitizer``: URL-encoded as Java's
URLEncoder does in UTF-8, with ``*`` as ``%2A`` and a space as ``%20``): ``alice@X`` is
``/config/users/alice%40X``.
"""

from __future__ import annotations

from urllib.parse import quote, unquote

from headwater.zk.json import ZnodeFormatError, json_object, to_json

ENTITY_VERSION = 1
CHANGE_VERSION = 2
#: the entity name of the cluster-wide default (brokers, users, clients)
DEFAULT_ENTITY = "<default>"


def sanitize(name: str) -> str:
    """Kafka's Sanitizer.sanitize: what a user or client name is called in a znode path."""
    if name == DEFAULT_ENTITY:
        return name
    # Java's URLEncoder leaves only [A-Za-z0-9.-*_] alone; Kafka then encodes '*' (and the space
    # that URLEncoder makes '+'). Python's quote also leaves '~' alone: Java does not.
    return quote(name, safe="").replace("~", "%7E")


def desanitize(name: str) -> str:
    return unquote(name)


def encode_entity_config(config: dict[str, str]) -> bytes:
    return to_json({"version": ENTITY_VERSION, "config": {k: str(v) for k, v in config.items()}})


def decode_entity_config(path: str, data: bytes | None) -> dict[str, str]:
    """The entity's configs; an absent or empty znode is ``{}``."""
    if not data:
        return {}
    doc = json_object(data, path)
    config = doc.get("config") or {}
    if not isinstance(config, dict):
        raise ZnodeFormatError(f"{path}: config is not an object: {config!r}")
    return {str(k): str(v) for k, v in config.items()}


def encode_change(entity_type: str, name: str) -> bytes:
    """A version-2 change notification for ``<entity_type>/<name>`` (``name`` already sanitized)."""
    return to_json({"version": CHANGE_VERSION, "entity_path": f"{entity_type}/{name}"})


def decode_change(data: bytes | None) -> tuple[str, str]:
    """(entity type, entity name) of a change notification; Kafka's version 1 (``entity_type`` +
    ``entity_name``) is read too."""
    doc = json_object(data, "/config/changes entry")
    if doc.get("version") == 1:
        return str(doc.get("entity_type", "")), str(doc.get("entity_name", ""))
    path = str(doc.get("entity_path", ""))
    entity_type, sep, name = path.partition("/")
    if not sep or not entity_type or not name:
        raise ZnodeFormatError(f"/config/changes entry: malformed entity_path {path!r}")
    return entity_type, name
