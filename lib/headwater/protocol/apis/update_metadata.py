"""UpdateMetadata (key 6), v0-5 as in Kafka 2.3: controller → broker, the cluster's metadata.

Request:
  v0    controller_id, controller_epoch, ungrouped_partition_states[topic_name, partition_index,
        controller_epoch, leader, leader_epoch, isr[], zk_version, replicas[]],
        live_brokers[id, v0_host, v0_port].
  v1    a broker lists endpoints[port, host, security_protocol] instead of v0_host/v0_port.
  v2    adds rack (nullable) per broker.
  v3    adds listener per endpoint.
  v4    adds offline_replicas per partition state.
  v5    adds broker_epoch; partitions are grouped by topic: topic_states[topic_name,
        partition_states[...]] replaces ungrouped_partition_states, and the partition states
        lose their topic_name.
Response:
  v0-5  error_code (all versions are the same).

Field names are the newest Kafka JSON's (Kafka 4.0 removed the API with ZooKeeper); Kafka 2.3
called them partition_states_v0 (v0-4) and brokers. One partition-state struct
is shared by both layouts, as in the JSON: its topic_name exists in v0-4 only.
"""

from headwater.protocol.schema import INT16, INT32, INT64, NULLABLE_STRING, STRING, Api, Array, Field, Struct

_PARTITION_STATE = Struct(
    Field("topic_name", STRING, until=4),
    Field("partition_index", INT32),
    Field("controller_epoch", INT32),
    Field("leader", INT32),
    Field("leader_epoch", INT32),
    Field("isr", Array(INT32)),
    Field("zk_version", INT32),
    Field("replicas", Array(INT32)),
    Field("offline_replicas", Array(INT32), since=4),
)

UPDATE_METADATA = Api(
    key=6,
    name="UpdateMetadata",
    min_version=0,
    max_version=5,
    request=Struct(
        Field("controller_id", INT32),
        Field("controller_epoch", INT32),
        Field("broker_epoch", INT64, since=5, default=-1),
        Field("ungrouped_partition_states", Array(_PARTITION_STATE), until=4),
        Field(
            "topic_states",
            Array(
                Struct(
                    Field("topic_name", STRING),
                    Field("partition_states", Array(_PARTITION_STATE)),
                )
            ),
            since=5,
        ),
        Field(
            "live_brokers",
            Array(
                Struct(
                    Field("id", INT32),
                    Field("v0_host", STRING, until=0),
                    Field("v0_port", INT32, until=0),
                    Field(
                        "endpoints",
                        Array(
                            Struct(
                                Field("port", INT32),
                                Field("host", STRING),
                                Field("listener", STRING, since=3),
                                Field("security_protocol", INT16),
                            )
                        ),
                        since=1,
                    ),
                    Field("rack", NULLABLE_STRING, since=2),
                )
            ),
        ),
    ),
    response=Struct(
        Field("error_code", INT16),
    ),
)
