# ZooKeeper from Debian's packages (libzookeeper-java: the server jars) on a headless JRE.
# The `zookeeper` package itself is not installed: it pulls the full (X11) JRE only for its
# scripts; zookeeper-entrypoint writes zoo.cfg from ZOO_* variables and starts the server.
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}
LABEL org.headwater.image=zookeeper

RUN set -eux; \
    mkdir -p /usr/share/man/man1; \
    apt-get update; \
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        openjdk-17-jre-headless libzookeeper-java libslf4j-java; \
    rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/log/apt /var/log/dpkg.log; \
    useradd --system --uid 10002 --user-group --home-dir /var/lib/zookeeper --shell /usr/sbin/nologin zookeeper; \
    mkdir -p /var/lib/zookeeper/data /var/lib/zookeeper/datalog /var/lib/zookeeper/conf; \
    chown -R zookeeper:zookeeper /var/lib/zookeeper

COPY zookeeper-entrypoint.sh /usr/local/bin/zookeeper-entrypoint
COPY zookeeper-healthcheck.sh /usr/local/bin/zookeeper-healthcheck

ENV ZOO_CLIENT_PORT=2181 \
    ZOO_TICK_TIME=2000 \
    ZOO_INIT_LIMIT=5 \
    ZOO_SYNC_LIMIT=2 \
    ZOO_MAX_CLIENT_CNXNS=0 \
    ZOO_4LW_COMMANDS_WHITELIST="ruok,srvr,stat,mntr,conf" \
    ZOO_DATA_DIR=/var/lib/zookeeper/data \
    ZOO_DATA_LOG_DIR=/var/lib/zookeeper/datalog \
    ZOO_HEAP_OPTS="-Xms32m -Xmx256m" \
    ZOO_LOG_LEVEL=info

USER zookeeper
WORKDIR /var/lib/zookeeper
EXPOSE 2181 2888 3888
# Scripts run through bash: right even where a checkout lost the executable bit.
HEALTHCHECK --interval=3s --timeout=3s --start-period=60s --retries=5 \
    CMD ["bash", "/usr/local/bin/zookeeper-healthcheck"]
ENTRYPOINT ["bash", "/usr/local/bin/zookeeper-entrypoint"]
