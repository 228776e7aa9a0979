# Prometheus from Debian's package, for the lab: it scrapes every broker (prometheus.port), the
# mirror and the audit service (deploy/compose/prometheus.yml). No registry needed.
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}
LABEL org.headwater.image=prometheus
RUN set -eux; \
    apt-get update; \
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus; \
    rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/log/apt /var/log/dpkg.log; \
    mkdir -p /var/lib/prometheus/lab; \
    chown -R prometheus:prometheus /var/lib/prometheus
USER prometheus
EXPOSE 9090
HEALTHCHECK --interval=5s --timeout=3s --start-period=30s --retries=5 \
    CMD ["promtool", "query", "instant", "http://127.0.0.1:9090", "vector(1)"]
ENTRYPOINT ["prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/var/lib/prometheus/lab", \
     "--storage.tsdb.retention.time=2d", "--web.listen-address=:9090"]
