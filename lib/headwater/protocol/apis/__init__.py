"""Every Kafka API we speak, declared once with per-field version ranges.

The advertised snapshot is Kafka 2.3's (see docs/protocol.md for the reasoning); each module
declares one API. ``API_BY_KEY`` is what the broker advertises in ApiVersions.
"""

from headwater.protocol.apis.api_versions import API_VERSIONS
from headwater.protocol.apis.create_topics import CREATE_TOPICS
from headwater.protocol.apis.delete_topics import DELETE_TOPICS
from headwater.protocol.apis.describe_configs import DESCRIBE_CONFIGS
from headwater.protocol.apis.fetch import FETCH
from headwater.protocol.apis.list_offsets import LIST_OFFSETS
from headwater.protocol.apis.metadata import METADATA
from headwater.protocol.apis.produce import PRODUCE
from headwater.protocol.schema import Api

ALL_APIS: tuple[Api, ...] = (
    PRODUCE,
    FETCH,
    LIST_OFFSETS,
    METADATA,
    API_VERSIONS,
    CREATE_TOPICS,
    DELETE_TOPICS,
    DESCRIBE_CONFIGS,
)

API_BY_KEY: dict[int, Api] = {api.key: api for api in ALL_APIS}

__all__ = [
    "ALL_APIS",
    "API_BY_KEY",
    "API_VERSIONS",
    "CREATE_TOPICS",
    "DELETE_TOPICS",
    "DESCRIBE_CONFIGS",
    "FETCH",
    "LIST_OFFSETS",
    "METADATA",
    "PRODUCE",
]
