#!/usr/bin/env bash
# Build Headwater's images from a wheelhouse made on the host (pip cannot reach an index inside a
# build): headwater/headwater:$TAG (the Python services: broker, mirror, audit, loader),
# headwater/zookeeper:$TAG, headwater/postgres:$TAG (the audit service's database in the lab),
# headwater/spark:$TAG (Spark standalone and the loader's driver: the same Python and a JRE),
# headwater/prometheus:$TAG (Debian's prometheus, scraping the lab) and headwater/registry:$TAG
# (Apicurio Registry, the lab's schema registry: the app `make registry-deps` builds into
# build/registry/app, on the spark image's JRE layers).
#
#   deploy/scripts/build-images.sh            # all six images
#   deploy/scripts/build-images.sh headwater  # only some (headwater | zookeeper | postgres | spark | prometheus | registry)
#
# The dependencies' wheels are rebuilt only when pyproject.toml (or the Python version) changes,
# and headwater's own wheel is reproducible, so the image layers stay cached until the code
# changes; a Python-only change rebuilds the last layer in seconds.
# Environment: HEADWATER_IMAGE_TAG (dev), BASE_IMAGE (debian:bookworm-slim), PYTHON (the
# project's .venv python when there is one), HEADWATER_EXTRAS (extras baked into the image; default audit,loader),
# HEADWATER_SRC (the source tree to package; default this checkout).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
SRC="$(cd "${HEADWATER_SRC:-$ROOT}" && pwd)"
TAG="${HEADWATER_IMAGE_TAG:-dev}"
BASE_IMAGE="${BASE_IMAGE:-debian:bookworm-slim}"
EXTRAS="${HEADWATER_EXTRAS-audit,loader}"  # the audit service and the loader run from the same image
if [ -z "${PYTHON:-}" ]; then
  if [ -x "$ROOT/.venv/bin/python" ]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON=python3; fi
fi
OUT="$ROOT/build/docker"
CTX="$OUT/headwater"
WHAT=("$@")
named=$#
[ ${#WHAT[@]} -gt 0 ] || WHAT=(headwater zookeeper postgres spark prometheus registry)

say() { echo "build-images: $*" >&2; }
pip_q() { "$PYTHON" -m pip --disable-pip-version-check -q "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); }

mkdir -p "$OUT"
# One build at a time per checkout (test runs and `make lab` may overlap): they share the wheelhouse.
exec 9>"$OUT/.lock"
flock 9

"$ROOT/deploy/scripts/ensure-base-image.sh" "$BASE_IMAGE"

# Every build uses the image's Python (bookworm: 3.11) to pick wheels; the host's must match.
pyver="$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
if [ "$pyver" != "${HEADWATER_IMAGE_PYTHON:-3.11}" ]; then
  say "warning: host Python $pyver differs from the image's ${HEADWATER_IMAGE_PYTHON:-3.11}: binary wheels may not fit"
fi

build_wheelhouse() {
  mkdir -p "$CTX/wheels"
  local spec="$SRC" key tmp
  [ -z "$EXTRAS" ] || spec="${SRC}[${EXTRAS}]"
  key="$( (cat "$SRC/pyproject.toml"; echo "$pyver $EXTRAS $(uname -m)") | sha256sum | cut -c1-16)"
  if [ "$(cat "$CTX/wheels/deps.key" 2>/dev/null)" != "$key" ] || [ ! -d "$CTX/wheels/deps" ]; then
    say "wheelhouse: dependencies ($spec)"
    tmp="$(mktemp -d "$OUT/wheels.XXXXXX")"
    pip_q wheel -w "$tmp" "$spec"
    rm -f "$tmp"/headwater-*.whl
    rm -rf "$CTX/wheels/deps"
    mv "$tmp" "$CTX/wheels/deps"
    chmod 0755 "$CTX/wheels/deps"
    echo "$key" >"$CTX/wheels/deps.key"
  fi
  # Headwater's own wheel: hatchling writes fixed timestamps, so the same code gives the same bytes.
  # Built without build isolation by a kept venv that has the build backend: a second, not ten.
  local tools="$OUT/build-tools" requires
  requires="$("$PYTHON" -c 'import sys, tomllib; print("\n".join(tomllib.load(open(sys.argv[1], "rb"))["build-system"]["requires"]))' "$SRC/pyproject.toml")"
  if [ ! -x "$tools/bin/python" ] || [ "$(cat "$tools/requires.txt" 2>/dev/null)" != "$requires" ]; then
    say "build tools venv ($tools): $(echo "$requires" | tr '\n' ' ')"
    rm -rf "$tools"
    "$PYTHON" -m venv "$tools"
    echo "$requires" >"$tools/requires.in"
    PYTHON="$tools/bin/python" pip_q install -r "$tools/requires.in"
    echo "$requires" >"$tools/requires.txt"
  fi
  tmp="$(mktemp -d "$OUT/wheels.XXXXXX")"
  PYTHON="$tools/bin/python" pip_q wheel --no-deps --no-build-isolation -w "$tmp" "$SRC"
  if ! { [ -d "$CTX/wheels/app" ] && diff -rq "$tmp" "$CTX/wheels/app" >/dev/null 2>&1; }; then
    rm -rf "$CTX/wheels/app"
    mv "$tmp" "$CTX/wheels/app"
    chmod 0755 "$CTX/wheels/app"
  else
    rm -rf "$tmp"
  fi
}

docker_build() {
  local log="$1"
  shift
  if ! DOCKER_BUILDKIT="${DOCKER_BUILDKIT:-0}" docker build --network host --build-arg BASE_IMAGE="$BASE_IMAGE" \
    "$@" >"$log" 2>&1; then
    tail -40 "$log" >&2
    say "docker build failed (whole log: $log)"
    exit 1
  fi
}

build() {
  local name="$1" dockerfile="$2" context="$3" start ms
  start=$(date +%s%N)
  say "docker build $name:$TAG"
  docker_build "$OUT/$name-build.log" -f "$dockerfile" -t "headwater/$name:$TAG" "${@:4}" "$context"
  if [ "$name" = headwater ]; then
    # Tag the `app` stage too (all cached by now): the next build finds it, and the prune below
    # leaves it alone.
    docker_build "$OUT/$name-build-app.log" --target app -f "$dockerfile" -t "headwater/$name-build:$TAG" "$context"
  fi
  ms=$((($(date +%s%N) - start) / 1000000))
  say "built headwater/$name:$TAG in $((ms / 1000)).$(printf '%03d' $((ms % 1000))) s"
}

for what in "${WHAT[@]}"; do
  case "$what" in
    headwater)
      build_wheelhouse
      for f in headwater.Dockerfile headwater-healthcheck.py server.properties; do
        cp -p "$ROOT/deploy/docker/$f" "$CTX/$f"
      done
      build headwater "$CTX/headwater.Dockerfile" "$CTX"
      ;;
    zookeeper)
      build zookeeper "$ROOT/deploy/docker/zookeeper.Dockerfile" "$ROOT/deploy/docker"
      ;;
    postgres)
      build postgres "$ROOT/deploy/docker/postgres.Dockerfile" "$ROOT/deploy/docker"
      ;;
    spark) # the `spark` stage of headwater.Dockerfile (its context is made by the headwater step)
      [ -f "$CTX/headwater.Dockerfile" ] || { say "build the headwater image first"; exit 2; }
      build spark "$CTX/headwater.Dockerfile" "$CTX" --target spark
      ;;
    prometheus)
      build prometheus "$ROOT/deploy/docker/prometheus.Dockerfile" "$ROOT/deploy/docker"
      ;;
    registry) # Apicurio Registry's Quarkus app, built by `make registry-deps` (Maven Central)
      app="${HEADWATER_REGISTRY_CACHE:-$ROOT/build/registry}/app"
      if ! ls "$app"/*-runner.jar >/dev/null 2>&1; then
        # asked for by name: an error; in the default list: the lab then runs without it
        [ "$named" = 0 ] || { say "no $app/*-runner.jar: run make registry-deps first"; exit 2; }
        say "warning: no $app/*-runner.jar (make registry-deps): headwater/registry not built"
        continue
      fi
      rm -rf "$OUT/registry"
      mkdir -p "$OUT/registry"
      cp -al "$app" "$OUT/registry/app" 2>/dev/null || cp -a "$app" "$OUT/registry/app"
      cp -p "$ROOT/deploy/docker/registry.Dockerfile" "$OUT/registry/Dockerfile"
      build registry "$OUT/registry/Dockerfile" "$OUT/registry"
      ;;
    *)
      say "unknown image $what (headwater | zookeeper | postgres | spark | prometheus | registry)"
      exit 2
      ;;
  esac
done
# Images of earlier builds that no tag names any more (each Python change leaves a final image
# and an `app` stage). Only those carry the label untagged; the stages under them stay cached.
docker image prune -f --filter label=org.headwater.image >/dev/null 2>&1 || true
