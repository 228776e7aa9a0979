#!/usr/bin/env bash
# The lab's SCRAM users and ACLs, written into each cluster's ZooKeeper before its brokers start
# (the lab-init service of docker-compose.yml). Idempotent: `headwater configs --alter` sets the
# same users again, `headwater acls --add` adds only what is missing; every `up` runs it.
#
# ZooKeeper: it logs in as the brokers do (KAFKA_OPTS names zk-broker.jaas), so what it writes
# carries Kafka's znode ACLs (only User broker changes them; the credentials only it reads).
# Principals (passwords from LAB_<NAME>_PASSWORD; super users: broker and admin, see
# KAFKA_SUPER_USERS) and the only ACLs each holds (docs/security.md):
#   mirror    sources: Read, DescribeConfigs on every topic (topics = .* in mirror.properties;
#                      DescribeConfigs: the copies are created with the source's configs);
#                      Create, Write on heartbeats and __audit (its heartbeats and gap events)
#             agg:     Create, Write, Read, AlterConfigs on every topic (the copies; resume scans,
#                      heartbeats; AlterConfigs: their configs kept in step, sync.topic.configs)
#   audit     every cluster: Read on page-views, clicks, __audit, heartbeats
#   loader    agg: Read on page-views, clicks, searches; Create, Write on __audit (warehouse-tier events)
#   activity  dc1, dc2: Create, Write on page-views, clicks, searches, __audit (the auditing producer);
#                      IdempotentWrite on the cluster (it is idempotent: Kafka 2.3's InitProducerId)
# deploy/ansible grants the services the same ACLs from an inventory (headwater_service_acls in
# roles/headwater/defaults/main.yml, applied with `headwater acls --from-file`).
set -euo pipefail

users=(broker admin mirror audit loader activity)

# Each step is idempotent: on a busy machine a ZooKeeper connection may time out, so try again
# (5 times, 3 s apart) before giving up.
retry() {
  local attempt
  for attempt in 1 2 3 4; do
    "$@" && return 0
    echo "lab-init: attempt $attempt of '$1 $2 ...' failed; trying again" >&2
    sleep 3
  done
  "$@"
}

acl() { # acl <zookeeper> <user> <--operation X ...> --topic T
  local zk="$1" user="$2"
  shift 2
  retry headwater acls --zookeeper "$zk" --add --allow-principal "User:$user" "$@" >/dev/null
}

for cluster in dc1 dc2 agg; do
  zk="$cluster-zookeeper1:2181,$cluster-zookeeper2:2181,$cluster-zookeeper3:2181"  # the ensemble
  for user in "${users[@]}"; do
    var="LAB_${user^^}_PASSWORD"
    : "${!var:?$var is not set}"
    # password=env:NAME: the password stays off the command line (ps, /proc/*/cmdline)
    retry headwater configs --zookeeper "$zk" --alter --entity-type users --entity-name "$user" \
      --add-config "SCRAM-SHA-512=[iterations=4096,password=env:$var]" >/dev/null
  done
  for topic in page-views clicks __audit heartbeats; do
    acl "$zk" audit --operation Read --topic "$topic"
  done
  if [ "$cluster" = agg ]; then
    acl "$zk" mirror --operation Create --operation Write --operation Read --operation AlterConfigs --topic '*'
    for topic in page-views clicks searches; do
      acl "$zk" loader --operation Read --topic "$topic"
    done
    acl "$zk" loader --operation Create --operation Write --topic __audit
    if [ -n "${LAB_MIRROR_PRODUCER_BYTE_RATE:-}" ]; then # the mirror's produce quota (docs/pipeline.md)
      retry headwater configs --zookeeper "$zk" --alter --entity-type users --entity-name mirror \
        --add-config "producer_byte_rate=$LAB_MIRROR_PRODUCER_BYTE_RATE" >/dev/null
    fi
  else
    acl "$zk" mirror --operation Read --operation DescribeConfigs --topic '*'
    for topic in heartbeats __audit; do
      acl "$zk" mirror --operation Create --operation Write --topic "$topic"
    done
    # MM2's offset syncs: written, then read back for the checkpoints (docs/mirror.md)
    acl "$zk" mirror --operation Create --operation Write --operation Read --topic mm2-offset-syncs.agg.internal
    # the source's groups, listed and read for the checkpoints
    acl "$zk" mirror --operation Describe --group '*'
    for topic in page-views clicks searches __audit; do
      acl "$zk" activity --operation Create --operation Write --topic "$topic"
    done
    acl "$zk" activity --operation IdempotentWrite --cluster
  fi
  echo "lab-init: $cluster: users ${users[*]} (SCRAM-SHA-512) and their ACLs are in place"
done
