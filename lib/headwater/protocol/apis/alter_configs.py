"""AlterConfigs (key 33), v0-1 as in Kafka 2.3.

Request:
  v0    resources[resource_type, resource_name, configs[name, value (nullable)]], validate_only.
  v1    same as v0.
Response:
  v0    throttle_time_ms, responses[error_code, error_message, resource_type, resource_name].
  v1    same as v0 (throttled responses are sent before throttling).

The configs given *replace* the resource's whole set of overrides: a key left out returns to its
default (IncrementalAlterConfigs changes single keys). resource_type: 2 = topic, 4 = broker.
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

ALTER_CONFIGS_RESPONSE = Struct(
    Field("throttle_time_ms", INT32),
    Field(
        "responses",
        Array(
            Struct(
                Field("error_code", INT16),
                Field("error_message", NULLABLE_STRING),
                Field("resource_type", INT8),
                Field("resource_name", STRING),
            )
        ),
    ),
)

ALTER_CONFIGS = Api(
    key=33,
    name="AlterConfigs",
    min_version=0,
    max_version=1,
    request=Struct(
        Field(
            "resources",
            Array(
                Struct(
                    Field("resource_type", INT8),
                    Field("resource_name", STRING),
                    Field("configs", Array(Struct(Field("name", STRING), Field("value", NULLABLE_STRING)))),
                )
            ),
        ),
        Field("validate_only", BOOLEAN),
    ),
    response=ALTER_CONFIGS_RESPONSE,
)
