#!/usr/bin/env bash
# The multi-DC lab (deploy/compose/docker-compose.yml):
#   lab.sh up         docker compose up -d --wait, then print the bootstrap addresses
#   lab.sh down       docker compose down (volumes are kept; `lab.sh down -v` drops them)
#   lab.sh addresses  print the bootstrap addresses of the three clusters
#   lab.sh ps | logs [service] | <any docker compose command>
# Images must exist (make images); `make lab` builds them first.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
COMPOSE_FILE="$ROOT/deploy/compose/docker-compose.yml"
compose() { docker compose -f "$COMPOSE_FILE" "$@"; }

addresses() {
  local cluster i addr list
  for cluster in dc1 dc2 agg; do
    list=""
    for i in 1 2 3; do
      addr="$(compose port "$cluster-broker$i" 9094 2>/dev/null || true)"
      [ -n "$addr" ] || { echo "$cluster: not running"; continue 2; }
      list="${list:+$list,}$addr"
    done
    printf '%-4s bootstrap.servers=%s   (ZooKeeper %s)\n' "$cluster" "$list" \
      "$(compose port "$cluster-zookeeper" 2181 2>/dev/null || echo '?')"
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
}

cmd="${1:-up}"
[ $# -eq 0 ] || shift
case "$cmd" in
  up)
    compose up -d --wait --wait-timeout "${LAB_WAIT_TIMEOUT:-300}" "$@"
    echo
    echo "Headwater lab is up: 3 clusters, each ZooKeeper + 3 brokers (all healthy)."
    addresses
    echo
    echo "Try: kcat -b $(compose port dc1-broker1 9094) -L"
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
  *) compose "$cmd" "$@" ;;
esac
