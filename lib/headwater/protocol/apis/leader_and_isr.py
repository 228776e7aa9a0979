"""LeaderAndIsr (key 4), v0-2 as in Kafka 2.3: controller → broker, become leader or follower.

Request:
  v0    controller_id, controller_epoch, ungrouped_partition_states[topic_name, partition_index,
        controller_epoch, leader, leader_epoch, isr[], partition_epoch, replicas[]],
        live_leaders[broker_id, host_name, port].
  v1    adds is_new per partition state.
  v2    adds broker_epoch; partitions are grouped by topic: topic_states[topic_name,
        partition_states[...]] replaces ungrouped_partition_states, and the partition states
        lose their topic_name.
Response:
  v0    error_code, partition_errors[topic_name, partition_index, error_code].
  v1    same as v0; may return KAFKA_STORAGE_ERROR.
  v2    same as v1.

Field names are the newest Kafka JSON's (the last release that had this API; Kafka 4.0 removed
it with ZooKeeper). Kafka 2.3 called them partition_states_v0 (v0-1), topic_states[name,
partition_states], leader_key, isr_replicas, zk_version (now partition_epoch: in the ZooKeeper
era it *is* the partition's znode version) and, in the response, partitions. One partition-state struct is
shared by both layouts, as in the JSON: its topic_name exists in v0-1 only.
"""

from headwater.protocol.schema import BOOLEAN, INT16, INT32, INT64, STRING, Api, Array, Field, Struct

_PARTITION_STATE = Struct(
    Field("topic_name", STRING, until=1),
    Field("partition_index", INT32),
    Field("controller_epoch", INT32),
    Field("leader", INT32),
    Field("leader_epoch", INT32),
    Field("isr", Array(INT32)),
    Field("partition_epoch", INT32),
    Field("replicas", Array(INT32)),
    Field("is_new", BOOLEAN, since=1),
)

LEADER_AND_ISR = Api(
    key=4,
    name="LeaderAndIsr",
    min_version=0,
    max_version=2,
    request=Struct(
        Field("controller_id", INT32),
        Field("controller_epoch", INT32),
        Field("broker_epoch", INT64, since=2, default=-1),
        Field("ungrouped_partition_states", Array(_PARTITION_STATE), until=1),
        Field(
            "topic_states",
            Array(
                Struct(
                    Field("topic_name", STRING),
                    Field("partition_states", Array(_PARTITION_STATE)),
                )
            ),
            since=2,
        ),
        Field(
            "live_leaders",
            Array(
                Struct(
                    Field("broker_id", INT32),
                    Field("host_name", STRING),
                    Field("port", INT32),
                )
            ),
        ),
    ),
    response=Struct(
        Field("error_code", INT16),
        Field(
            "partition_errors",
            Array(
                Struct(
                    Field("topic_name", STRING),
                    Field("partition_index", INT32),
                    Field("error_code", INT16),
                )
            ),
        ),
    ),
)
