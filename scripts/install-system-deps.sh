#!/usr/bin/env bash
# System packages the test suite needs: ZooKeeper (Debian's package, needs a JRE; Spark uses it too),
# a JDK and Maven (tests/java), kcat, Chromium, and a C compiler with Python's headers for the compiled record codec (hatch_build.py).
# Installs only what is missing; needs root (or passwordless sudo) when something is missing.
set -euo pipefail
need=()
[ -x /usr/share/zookeeper/bin/zkServer.sh ] || need+=(zookeeper)
command -v java >/dev/null 2>&1 || need+=(default-jre-headless)
command -v kcat >/dev/null 2>&1 || need+=(kcat)
# The Java side of Kafka (tests/java: Java clients, Kafka's own tools, Streams, MM2): a JDK and Maven.
command -v javac >/dev/null 2>&1 || need+=(default-jdk-headless)
command -v mvn >/dev/null 2>&1 || need+=(maven)
# Debian's Chromium drives the audit dashboard's browser test (Playwright; no browser download here).
[ -x /usr/bin/chromium ] || need+=(chromium)
# The record codec (Cython) is compiled at install: gcc, and the headers of the Python that makes the venv.
command -v gcc >/dev/null 2>&1 || need+=(gcc)
if ! "${PYTHON:-python3}" -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' 2>/dev/null; then
  need+=(python3-dev)
fi
if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "missing system packages: ${need[*]} (run this script as root)" >&2; exit 1
  fi
fi
echo "installing system packages: ${need[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
