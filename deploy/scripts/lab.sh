#!/usr/bin/env bash
# The multi-DC lab (deploy/compose/docker-compose.yml):
#   lab.sh up         the lab's certificates (lab.sh certs), docker compose up -d --wait, then print the
#                     bootstrap addresses
#   lab.sh certs      make the lab CA and one certificate per broker in $LAB_TLS_DIR (default
#                     deploy/compose/tls) with openssl, unless they are there already, and write the
#                     lab's secret files there (ZooKeeper's JAAS files, the admin's password)
#   lab.sh down       docker compose down (volumes are kept; `lab.sh down -v` drops them)
#   lab.sh addresses  print the bootstrap addresses of the three clusters
#   lab.sh load       run the nightly load now (in the loader container, on the lab's Spark master)
#   lab.sh check      the pipeline check: latency from each DC to the aggregate cluster, audit status,
#                     the schema registry (ready, holding searches-value)
#   lab.sh ps | logs [service] | <any docker compose command>
# Images must exist (make images); `make lab` builds them first.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
COMPOSE_FILE="$ROOT/deploy/compose/docker-compose.yml"
compose() { docker compose -f "$COMPOSE_FILE" "$@"; }
TLS_DIR="${LAB_TLS_DIR:-$ROOT/deploy/compose/tls}"

# The lab's CA and, per broker, a PEM keystore (certificate, CA, key: ssl.keystore.type=PEM) for
# the WAN listener (SASL_SSL). Names: the broker's host name and its DC's link (what the mirror
# dials), localhost. Made once; delete the directory to make new ones. Lab-only: the keys are
# unencrypted and readable by the containers' user.
certs() {
  local cluster i name sans
  mkdir -p "$TLS_DIR"
  if [ ! -s "$TLS_DIR/ca.pem" ] || [ ! -s "$TLS_DIR/ca.key" ]; then
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 825 \
      -subj "/CN=Headwater Lab CA" -keyout "$TLS_DIR/ca.key" -out "$TLS_DIR/ca.pem" 2>/dev/null
    rm -f "$TLS_DIR"/*-broker?.pem  # certificates of an older CA
    echo "lab CA: $TLS_DIR/ca.pem"
  fi
  for cluster in dc1 dc2 agg; do
    for i in 1 2 3; do
      name="$cluster-broker$i"
      [ -s "$TLS_DIR/$name.pem" ] && continue
      sans="DNS:$name,DNS:localhost,IP:127.0.0.1"
      [ "$cluster" = agg ] || sans="$sans,DNS:$cluster-link"
      openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$name" \
        -addext "subjectAltName=$sans" -keyout "$TLS_DIR/$name.key" -out "$TLS_DIR/$name.csr" 2>/dev/null
      openssl x509 -req -in "$TLS_DIR/$name.csr" -CA "$TLS_DIR/ca.pem" -CAkey "$TLS_DIR/ca.key" \
        -CAcreateserial -days 825 -copy_extensions copy -out "$TLS_DIR/$name.crt" 2>/dev/null
      cat "$TLS_DIR/$name.crt" "$TLS_DIR/ca.pem" "$TLS_DIR/$name.key" >"$TLS_DIR/$name.pem"
      rm -f "$TLS_DIR/$name.csr" "$TLS_DIR/$name.crt" "$TLS_DIR/$name.key"
    done
  done
  chmod 0755 "$TLS_DIR"
  chmod 0644 "$TLS_DIR"/*.pem
  secrets
}

# The lab's secrets as files beside the certificates (rewritten each time, from the LAB_*_PASSWORD
# variables or the lab's fixed defaults, the same as docker-compose.yml's), so that no container
# carries another principal's password in its environment:
#   zk-server.jaas   ZooKeeper's SASL (DIGEST-MD5) users: broker (LAB_ZK_BROKER_PASSWORD) and mirror
#                    (LAB_ZK_MIRROR_PASSWORD), the ZooKeeper containers' JAAS Server section; and the
#                    ensemble's own login between its servers, user zkquorum (LAB_ZK_QUORUM_PASSWORD),
#                    its QuorumServer and QuorumLearner sections
#   zk-broker.jaas   the brokers' and lab-init's ZooKeeper login (KAFKA_OPTS, as Kafka's tools)
#   zk-mirror.jaas   the mirror's login to each DC's ZooKeeper (through the links)
#   admin.password   User:admin's SCRAM password, for `lab check` / `lab outage` (lab-admin.properties)
# Lab-only: readable by the containers' users (0644), as the lab's keys are.
secrets() {
  local broker="${LAB_ZK_BROKER_PASSWORD:-zk-broker-lab-secret}" mirror="${LAB_ZK_MIRROR_PASSWORD:-zk-mirror-lab-secret}"
  local quorum="${LAB_ZK_QUORUM_PASSWORD:-zk-quorum-lab-secret}"
  {
    printf 'Server {\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n  user_broker="%s"\n  user_mirror="%s";\n};\n' \
      "$broker" "$mirror"
    # the ensemble's own logins (quorum.auth.enableSasl): each server as user zkquorum, both ways
    printf 'QuorumServer {\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n  user_zkquorum="%s";\n};\n' "$quorum"
    printf 'QuorumLearner {\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n  username="zkquorum"\n  password="%s";\n};\n' "$quorum"
  } >"$TLS_DIR/zk-server.jaas"
  for who in broker mirror; do
    local password="$broker"
    [ "$who" = mirror ] && password="$mirror"
    printf 'Client {\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n  username="%s"\n  password="%s";\n};\n' \
      "$who" "$password" >"$TLS_DIR/zk-$who.jaas"
  done
  printf '%s\n' "${LAB_ADMIN_PASSWORD:-admin-lab-secret}" >"$TLS_DIR/admin.password"
  chmod 0644 "$TLS_DIR"/zk-*.jaas "$TLS_DIR/admin.password"
}

addresses() {
  local cluster i addr list zks
  for cluster in dc1 dc2 agg; do
    list=""
    for i in 1 2 3; do
      addr="$(compose port "$cluster-broker$i" 9094 2>/dev/null || true)"
      [ -n "$addr" ] || { echo "$cluster: not running"; continue 2; }
      list="${list:+$list,}$addr"
    done
    zks=""
    for i in 1 2 3; do
      zks="${zks:+$zks,}$(compose port "$cluster-zookeeper$i" 2181 2>/dev/null || echo '?')"
    done
    printf '%-4s bootstrap.servers=%s   (ZooKeeper %s)\n' "$cluster" "$list" "$zks"
  done
  for dc in dc1 dc2; do
    addr="$(compose port "$dc-link" 9190 2>/dev/null || true)"
    if [ -n "$addr" ]; then
      printf '%s-link  WAN link to agg (%s ms one way, %s Mbit/s)   headwater lab link status|cut|heal %s --control %s\n' \
        "$dc" "${LAB_WAN_DELAY_MS:-40}" "${LAB_WAN_BANDWIDTH_MBIT:-100}" "$dc" "$addr"
    else
      echo "$dc-link: not running"
    fi
  done
  addr="$(compose port mirror 9404 2>/dev/null || true)"
  if [ -n "$addr" ]; then
    printf 'mirror dc1,dc2 -> agg   metrics http://%s/metrics   health http://%s/healthz\n' "$addr" "$addr"
  else
    echo "mirror: not running"
  fi
  addr="$(compose port audit 8080 2>/dev/null || true)"
  if [ -n "$addr" ]; then
    printf 'audit  dashboard http://%s/   API http://%s/api/v1/completeness?topic=page-views\n' "$addr" "$addr"
  else
    echo "audit: not running"
  fi
  addr="$(compose port prometheus 9090 2>/dev/null || true)"
  if [ -n "$addr" ]; then
    printf 'prometheus http://%s/   (every broker, the mirror, the audit service)\n' "$addr"
  else
    echo "prometheus: not running"
  fi
  addr="$(compose port registry 8080 2>/dev/null || true)"
  if [ -n "$addr" ]; then
    printf 'registry  Apicurio Registry (in memory)   schema.registry.url=http://%s/apis/ccompat/v6   (in the lab: http://registry:8080/apis/ccompat/v6)\n' "$addr"
  else
    echo "registry: not running"
  fi
  addr="$(compose port spark-master 8081 2>/dev/null || true)"
  if [ -n "$addr" ]; then
    printf 'spark  master spark://spark-master:7077 (in the agg network)   UI http://%s/\n' "$addr"
    echo "       nightly load at ${LOADER_SCHEDULE:-02:00} UTC into the warehouse volume; now: make lab-load"
  else
    echo "spark: not running"
  fi
}

# The registry's part of `lab.sh check`: /health/ready answers UP, and the subject searches-value
# (registered by dc1's activity when it starts) has a version.
registry_check() {
  local addr latest
  addr="$(compose port registry 8080 2>/dev/null || true)"
  if [ -z "$addr" ]; then
    echo "  registry: not running: FAILED"
    return 1
  fi
  if ! curl -fsS -m 10 "http://$addr/health/ready" 2>/dev/null | grep -q '"UP"'; then
    echo "  registry http://$addr: not ready: FAILED"
    return 1
  fi
  if ! latest="$(curl -fsS -m 10 "http://$addr/apis/ccompat/v6/subjects/searches-value/versions/latest" 2>/dev/null)"; then
    echo "  registry http://$addr: ready, but no searches-value (is dc1-activity running?): FAILED"
    return 1
  fi
  echo "  registry http://$addr: ready; searches-value $(echo "$latest" | python3 -c 'import json, sys; s = json.load(sys.stdin); print("version %s, schema id %s" % (s["version"], s["id"]))')"
}

sources="--source dc1=dc1-broker1:9092,dc1-broker2:9092,dc1-broker3:9092"
sources="$sources --source dc2=dc2-broker1:9092,dc2-broker2:9092,dc2-broker3:9092"
aggregate="agg-broker1:9092,agg-broker2:9092,agg-broker3:9092"

cmd="${1:-up}"
[ $# -eq 0 ] || shift
case "$cmd" in
  certs) certs ;;
  up)
    certs
    compose up -d --wait --wait-timeout "${LAB_WAIT_TIMEOUT:-300}" "$@"
    echo
    echo "Headwater lab is up (all healthy): 3 clusters (a 3-server ZooKeeper ensemble + 3 brokers each), demo activity in dc1 and"
    echo "dc2 (\$LAB_ACTIVITY_RATE=${LAB_ACTIVITY_RATE:-20} records/s each), the mirror, the audit service, the schema registry, Spark and Prometheus."
    addresses
    echo
    echo "Try: kcat -b $(compose port dc1-broker1 9094) -X security.protocol=SASL_PLAINTEXT \\"
    echo "       -X sasl.mechanisms=SCRAM-SHA-512 -X sasl.username=admin -X sasl.password=\"\$(cat $TLS_DIR/admin.password)\" -L"
    echo "Check the pipeline: make lab-check    Load the warehouse now: make lab-load"
    echo "Stop: make lab-down (keeps the data volumes; remove them with: $0 down -v)"
    ;;
  down)
    compose down "$@"
    case " $* " in
      *" -v "* | *" --volumes "*) echo "Lab stopped; its data volumes are removed." ;;
      *) echo "Lab stopped; data volumes kept (remove them: $0 down -v)." ;;
    esac
    ;;
  addresses) addresses ;;
  load)
    # shellcheck disable=SC2016 # expanded inside the container, from its environment
    compose exec -T loader sh -c 'exec headwater load -c /etc/headwater/loader.properties --override audit.window.ms="$AUDIT_WINDOW_MS" "$@"' load "$@"
    ;;
  check)
    # shellcheck disable=SC2086 # word splitting of the source list is intended
    # the mirror-latency goal (issue 22): every DC's p99 to the aggregate cluster <= 1 s at the lab's
    # 80 ms RTT; the check exits 1 when it is missed (LAB_CHECK_P99_GOAL_MS=0: no goal)
    rc=0
    compose exec -T audit headwater lab check $sources --aggregate "$aggregate" --audit-url http://127.0.0.1:8080 \
      --command-config /etc/headwater/lab-admin.properties --p99-goal-ms "${LAB_CHECK_P99_GOAL_MS:-1000}" "$@" || rc=$?
    # the schema registry: ready, and holding the schema dc1's activity writes `searches` with
    registry_check || rc=1
    exit "$rc"
    ;;
  outage)
    # `lab.sh outage dc2 --seconds 600 [--json]`: the outage drill (headwater lab outage), from the
    # audit container as the check is (it reaches every cluster, both links' control endpoints and
    # the mirror's metrics by their service names).
    link="${1:-dc2}"
    shift || true
    # the mirror's produce quota on agg (lab-init writes it): the catch-up is judged against it
    quota="${LAB_MIRROR_PRODUCER_BYTE_RATE:+--mirror-quota $LAB_MIRROR_PRODUCER_BYTE_RATE}"
    # shellcheck disable=SC2086 # word splitting of the source list and the quota option is intended
    compose exec -T audit headwater lab outage "$link" $sources --aggregate "$aggregate" $quota \
      --control "$link-link:9190" --mirror-metrics http://mirror:9404/metrics --audit-url http://127.0.0.1:8080 \
      --command-config /etc/headwater/lab-admin.properties "$@"
    ;;
  *) compose "$cmd" "$@" ;;
esac
