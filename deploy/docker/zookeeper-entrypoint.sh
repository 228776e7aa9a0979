#!/bin/bash
# Start ZooKeeper in the foreground (PID 1 is the JVM, so `docker stop` stops it cleanly).
#
# zoo.cfg is written from the environment unless ZOO_CFG_FILE names an existing file:
#   ZOO_CLIENT_PORT, ZOO_TICK_TIME, ZOO_INIT_LIMIT, ZOO_SYNC_LIMIT, ZOO_MAX_CLIENT_CNXNS,
#   ZOO_4LW_COMMANDS_WHITELIST, ZOO_DATA_DIR, ZOO_DATA_LOG_DIR, ZOO_AUTOPURGE_* ,
#   ZOO_MY_ID + ZOO_SERVERS ("server.1=zk1:2888:3888;2181 server.2=...") for an ensemble,
#   ZOO_CFG_EXTRA (more lines, separated by spaces or newlines).
# JVM: ZOO_HEAP_OPTS, JVMFLAGS. Logs go to stderr (slf4j-simple) at ZOO_LOG_LEVEL.
set -euo pipefail

cfg="${ZOO_CFG_FILE:-/var/lib/zookeeper/conf/zoo.cfg}"
if [ -z "${ZOO_CFG_FILE:-}" ] || [ ! -s "$cfg" ]; then
  mkdir -p "$(dirname "$cfg")" "$ZOO_DATA_DIR" "$ZOO_DATA_LOG_DIR"
  {
    echo "tickTime=${ZOO_TICK_TIME}"
    echo "initLimit=${ZOO_INIT_LIMIT}"
    echo "syncLimit=${ZOO_SYNC_LIMIT}"
    echo "dataDir=${ZOO_DATA_DIR}"
    echo "dataLogDir=${ZOO_DATA_LOG_DIR}"
    echo "clientPort=${ZOO_CLIENT_PORT}"
    echo "maxClientCnxns=${ZOO_MAX_CLIENT_CNXNS}"
    echo "admin.enableServer=false"
    echo "4lw.commands.whitelist=${ZOO_4LW_COMMANDS_WHITELIST}"
    echo "autopurge.snapRetainCount=${ZOO_AUTOPURGE_SNAPRETAINCOUNT:-3}"
    echo "autopurge.purgeInterval=${ZOO_AUTOPURGE_PURGEINTERVAL:-24}"
    if [ -n "${ZOO_SERVERS:-}" ]; then
      for server in $ZOO_SERVERS; do echo "$server"; done
    fi
    if [ -n "${ZOO_CFG_EXTRA:-}" ]; then
      for line in $ZOO_CFG_EXTRA; do echo "$line"; done
    fi
  } >"$cfg"
  if [ -n "${ZOO_SERVERS:-}" ]; then
    echo "${ZOO_MY_ID:-1}" >"$ZOO_DATA_DIR/myid"
  fi
fi

if [ "$#" -gt 0 ]; then
  exec "$@"
fi

# zookeeper.jar's manifest names its dependencies; slf4j-simple logs to stderr.
# The JVM options are lists of words on purpose.
# shellcheck disable=SC2086
exec java $ZOO_HEAP_OPTS -XX:+UseSerialGC -XX:+ExitOnOutOfMemoryError \
  -Dorg.slf4j.simpleLogger.defaultLogLevel="${ZOO_LOG_LEVEL}" \
  -Dorg.slf4j.simpleLogger.showDateTime=true \
  -Dorg.slf4j.simpleLogger.dateTimeFormat="yyyy-MM-dd HH:mm:ss,SSS" \
  -Dorg.slf4j.simpleLogger.log.org.apache.zookeeper.server.NIOServerCnxn=warn \
  -Dorg.slf4j.simpleLogger.log.org.apache.zookeeper.server.command.FourLetterCommands=warn \
  -Dzookeeper.jmx.log4j.disable=true \
  ${JVMFLAGS:-} \
  -cp /usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar \
  org.apache.zookeeper.server.quorum.QuorumPeerMain "$cfg"
