"""Every ZooKeeper path Kafka 2.3 (and the seeds' ZooKeeper consumer) uses, named as Kafka's
``kafka.zk.ZkData`` names them. Nothing else in Headwater spells a znode path.

=====================================  ==========================================================
path                                    what it holds (format module)
=====================================  ==========================================================
/cluster/id                             the cluster id (:mod:`.cluster`)
/controller                             the active controller, ephemeral (:mod:`.controller`)
/controller_epoch                       the controller epoch, a decimal integer (:mod:`.controller`)
/brokers/ids/<id>                       a broker's registration, ephemeral (:mod:`.brokers`)
/brokers/topics/<t>                     a topic's replica assignment (:mod:`.topics`)
/brokers/topics/<t>/partitions/<p>/state  leader, leader epoch, ISR (:mod:`.topics`)
/brokers/seqid                          sequence for broker ids (unused by Headwater)
/config/<entity type>/<name>            dynamic configs of topics, brokers, users, clients
                                        (:mod:`.config`)
/config/changes/config_change_<seq>     a change notification (:mod:`.config`)
/admin/delete_topics/<t>                a pending topic deletion, no data (:mod:`.admin`)
/admin/reassign_partitions              a reassignment in progress (:mod:`.admin`)
/admin/preferred_replica_election       a preferred-replica election request (:mod:`.admin`)
/isr_change_notification/isr_change_<seq>          ISR changes to propagate (:mod:`.notifications`)
/log_dir_event_notification/log_dir_event_<seq>    a failed log directory (:mod:`.notifications`)
/latest_producer_id_block               the last producer-id block claimed (:mod:`.cluster`)
/kafka-acl/<type>/<name>, /kafka-acl-extended/prefixed/<type>/<name>, their change
queues /kafka-acl-changes, /kafka-acl-extended-changes  ACLs (:mod:`headwater.acls`)
/consumers/<g>/{ids,owners,offsets}     the seeds' ZooKeeper consumer groups (:mod:`.consumers`)
=====================================  ==========================================================
"""

from __future__ import annotations

CLUSTER_ID = "/cluster/id"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
BROKERS = "/brokers"
BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
BROKER_SEQID = "/brokers/seqid"
CONFIG = "/config"
CONFIG_TOPICS = "/config/topics"
CONFIG_BROKERS = "/config/brokers"
CONFIG_USERS = "/config/users"
CONFIG_CLIENTS = "/config/clients"
CONFIG_CHANGES = "/config/changes"
#: sequential children of CONFIG_CHANGES are created with this prefix
CONFIG_CHANGE_PREFIX = CONFIG_CHANGES + "/config_change_"
ADMIN = "/admin"
DELETE_TOPICS = "/admin/delete_topics"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
PREFERRED_REPLICA_ELECTION = "/admin/preferred_replica_election"
ISR_CHANGE_NOTIFICATION = "/isr_change_notification"
ISR_CHANGE_PREFIX = ISR_CHANGE_NOTIFICATION + "/isr_change_"
LOG_DIR_EVENT_NOTIFICATION = "/log_dir_event_notification"
LOG_DIR_EVENT_PREFIX = LOG_DIR_EVENT_NOTIFICATION + "/log_dir_event_"
LATEST_PRODUCER_ID_BLOCK = "/latest_producer_id_block"
CONSUMERS = "/consumers"
#: ACLs (formats in headwater.acls): literal resources, prefixed ones (Kafka 2.0+), and the two
#: change queues whose sequential children are named ACL_CHANGE_PREFIX<seq>
ACL_LITERAL_ROOT = "/kafka-acl"
ACL_PREFIXED_ROOT = "/kafka-acl-extended/prefixed"
ACL_LITERAL_CHANGES = "/kafka-acl-changes"
ACL_EXTENDED_CHANGES = "/kafka-acl-extended-changes"
ACL_CHANGE_PREFIX = "acl_changes_"

#: The persistent paths Kafka's brokers create at start-up (KafkaZkClient.createTopLevelPaths).
PERSISTENT_PATHS = (
    BROKER_IDS,
    BROKER_TOPICS,
    CONFIG_TOPICS,
    CONFIG_CHANGES,
    DELETE_TOPICS,
    ISR_CHANGE_NOTIFICATION,
    LOG_DIR_EVENT_NOTIFICATION,
    # as Kafka's ZkData.PersistentZkPaths: with zookeeper.set.acl, /consumers is made open (old
    # consumers of any principal register under it), /config/users creator-only (SCRAM credentials)
    CONSUMERS,
    CONFIG_USERS,
)

#: Entity types under /config, as Kafka's ConfigType.
CONFIG_ENTITY_TYPES = ("topics", "clients", "users", "brokers")


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}"


def partitions_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions"


def partition_path(topic: str, partition: int) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions/{partition}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions/{partition}/state"


def config_entity_path(entity_type: str, name: str) -> str:
    """``/config/<type>/<name>``; ``name`` is already sanitized (see :func:`headwater.zk.config.sanitize`)
    for users and clients, and may be ``users/<u>/clients/<c>`` for a nested quota entity."""
    return f"{CONFIG}/{entity_type}/{name}"


def topic_config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS}/{topic}"


def broker_config_path(broker: str) -> str:
    """``/config/brokers/<id>``, or ``/config/brokers/<default>`` for the cluster-wide default."""
    return f"{CONFIG_BROKERS}/{broker}"


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS}/{topic}"


def consumer_group_path(group: str) -> str:
    return f"{CONSUMERS}/{group}"


def consumer_ids_path(group: str) -> str:
    return f"{CONSUMERS}/{group}/ids"


def consumer_owners_path(group: str, topic: str | None = None) -> str:
    base = f"{CONSUMERS}/{group}/owners"
    return base if topic is None else f"{base}/{topic}"


def consumer_offsets_path(group: str, topic: str | None = None) -> str:
    base = f"{CONSUMERS}/{group}/offsets"
    return base if topic is None else f"{base}/{topic}"


def consumer_owner_path(group: str, topic: str, partition: int) -> str:
    return f"{CONSUMERS}/{group}/owners/{topic}/{partition}"


def consumer_offset_path(group: str, topic: str, partition: int) -> str:
    return f"{CONSUMERS}/{group}/offsets/{topic}/{partition}"


def mirror_target_path(group: str, topic: str, partition: int | None = None) -> str:
    """Headwater's own (not Kafka's): ``/consumers/<g>/mirror-target/<t>/<p>`` holds the target
    offset the mirror's re-partitioning path committed with the source offset (mirror/group.py)."""
    base = f"{CONSUMERS}/{group}/mirror-target/{topic}"
    return base if partition is None else f"{base}/{partition}"


def mirror_rates_path(group: str, member: str | None = None) -> str:
    """Headwater's own: ``/consumers/<g>/mirror-rates/<member>`` (ephemeral) holds the byte rates of
    the partitions a mirror process copies (mirror/group.py)."""
    base = f"{CONSUMERS}/{group}/mirror-rates"
    return base if member is None else f"{base}/{member}"


def mirror_placement_path(group: str) -> str:
    """Headwater's own: ``/consumers/<g>/mirror-placement`` holds the load-aware placement the
    group's leader computed (mirror/group.py, mirror/placement.py)."""
    return f"{CONSUMERS}/{group}/mirror-placement"
