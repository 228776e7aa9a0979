"""DescribeConfigs (key 32), v0-2 as in Kafka 2.3.

Request:
  v0    resources[resource_type, resource_name, configuration_keys[] (null = all keys)].
  v1    adds include_synonyms (2.3's JSON spells it IncludeSynoyms).
  v2    same as v1.
Response:
  v0    throttle_time_ms, results[error_code, error_message, resource_type, resource_name,
        configs[name, value, read_only, is_default, is_sensitive]].
  v1    is_default replaced by config_source; adds synonyms[name, value, source] per config.
  v2    same as v1 (throttled responses are sent before throttling).

resource_type: 2 = topic, 4 = broker. config_source: 1 dynamic topic, 2 dynamic broker,
3 dynamic default broker, 4 static broker, 5 default, 6 dynamic broker logger.
"""

from headwater.protocol.schema import (
    BOOLEAN,
    INT8,
    INT16,
    INT32,
    NULLABLE_STRING,
    STRING,
    Api,
    Array,
    Field,
    Struct,
)

DESCRIBE_CONFIGS = Api(
    key=32,
    name="DescribeConfigs",
    min_version=0,
    max_version=2,
    request=Struct(
        Field(
            "resources",
            Array(
                Struct(
                    Field("resource_type", INT8),
                    Field("resource_name", STRING),
                    Field("configuration_keys", Array(STRING, nullable_since=0)),
                )
            ),
        ),
        Field("include_synonyms", BOOLEAN, since=1),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32),
        Field(
            "results",
            Array(
                Struct(
                    Field("error_code", INT16),
                    Field("error_message", NULLABLE_STRING),
                    Field("resource_type", INT8),
                    Field("resource_name", STRING),
                    Field(
                        "configs",
                        Array(
                            Struct(
                                Field("name", STRING),
                                Field("value", NULLABLE_STRING),
                                Field("read_only", BOOLEAN),
                                Field("is_default", BOOLEAN, until=0),
                                Field("config_source", INT8, since=1, default=-1),
                                Field("is_sensitive", BOOLEAN),
                                Field(
                                    "synonyms",
                                    Array(
                                        Struct(
                                            Field("name", STRING),
                                            Field("value", NULLABLE_STRING),
                                            Field("source", INT8),
                                        )
                                    ),
                                    since=1,
                                ),
                            )
                        ),
                    ),
                )
            ),
        ),
    ),
)
