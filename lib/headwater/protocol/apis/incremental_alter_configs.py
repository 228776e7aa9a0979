"""IncrementalAlterConfigs (key 44), v0 as in Kafka 2.3 (KIP-339).

Request:
  v0    resources[resource_type, resource_name, configs[name, config_operation, value (nullable)]],
        validate_only.
Response:
  v0    throttle_time_ms, responses[error_code, error_message, resource_type, resource_name]
        (AlterConfigs' response).

config_operation: 0 SET, 1 DELETE (back to the default), 2 APPEND and 3 SUBTRACT (list-valued
configs such as cleanup.policy). Keys not named keep their value.
"""

from headwater.protocol.apis.alter_configs import ALTER_CONFIGS_RESPONSE
from headwater.protocol.schema import (
    BOOLEAN,
    INT8,
    NULLABLE_STRING,
    STRING,
    Api,
    Array,
    Field,
    Struct,
)

INCREMENTAL_ALTER_CONFIGS = Api(
    key=44,
    name="IncrementalAlterConfigs",
    min_version=0,
    max_version=0,
    request=Struct(
        Field(
            "resources",
            Array(
                Struct(
                    Field("resource_type", INT8),
                    Field("resource_name", STRING),
                    Field(
                        "configs",
                        Array(
                            Struct(
                                Field("name", STRING),
                                Field("config_operation", INT8),
                                Field("value", NULLABLE_STRING),
                            )
                        ),
                    ),
                )
            ),
        ),
        Field("validate_only", BOOLEAN),
    ),
    response=ALTER_CONFIGS_RESPONSE,
)
