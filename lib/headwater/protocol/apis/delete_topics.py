"""DeleteTopics (key 20), v0-3 as in Kafka 2.3.

Request:
  v0-3  topic_names[], timeout_ms (all versions are the same).
Response:
  v0    responses[name, error_code].
  v1    adds throttle_time_ms.
  v2    same as v1 (throttled responses are sent before throttling).
  v3    same as v2; may return TOPIC_DELETION_DISABLED.
"""

from headwater.protocol.schema import INT16, INT32, STRING, Api, Array, Field, Struct

DELETE_TOPICS = Api(
    key=20,
    name="DeleteTopics",
    min_version=0,
    max_version=3,
    request=Struct(
        Field("topic_names", Array(STRING)),
        Field("timeout_ms", INT32),
    ),
    response=Struct(
        Field("throttle_time_ms", INT32, since=1),
        Field(
            "responses",
            Array(
                Struct(
                    Field("name", STRING),
                    Field("error_code", INT16),
                )
            ),
        ),
    ),
)
