"""ApiVersions (key 18), v0-2 as in Kafka 2.3."""

from headwater.protocol.schema import INT16, INT32, Api, Array, Field, Struct

API_VERSIONS = Api(
    key=18,
    name="ApiVersions",
    min_version=0,
    max_version=2,
    request=Struct(),
    response=Struct(
        Field("error_code", INT16),
        Field(
            "api_keys",
            Array(
                Struct(
                    Field("api_key", INT16),
                    Field("min_version", INT16),
                    Field("max_version", INT16),
                )
            ),
        ),
        Field("throttle_time_ms", INT32, since=1),
    ),
)
