# PostgreSQL from Debian's packages, for the audit service's state in the lab. No registry needed.
# postgres-entrypoint creates the cluster on first start (POSTGRES_USER / POSTGRES_PASSWORD /
# POSTGRES_DB), listens on the container network, and runs the server in the foreground.
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}
LABEL org.headwater.image=postgres

RUN set -eux; \
    apt-get update; \
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql-15; \
    rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/log/apt /var/log/dpkg.log; \
    mkdir -p /var/lib/postgresql/data /run/postgresql; \
    chown -R postgres:postgres /var/lib/postgresql /run/postgresql

COPY postgres-entrypoint.sh /usr/local/bin/postgres-entrypoint
ENV PGDATA=/var/lib/postgresql/data \
    POSTGRES_USER=headwater \
    POSTGRES_PASSWORD=headwater \
    POSTGRES_DB=audit \
    PATH=/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
USER postgres
EXPOSE 5432
HEALTHCHECK --interval=3s --timeout=3s --start-period=30s --retries=5 \
    CMD ["pg_isready", "-h", "127.0.0.1", "-U", "headwater", "-d", "audit"]
ENTRYPOINT ["bash", "/usr/local/bin/postgres-entrypoint"]
