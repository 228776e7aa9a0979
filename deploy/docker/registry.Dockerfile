# Apicurio Registry 2.0.2.Final (headwater/registry): the lab's schema registry, on the aggregate
# side. The application is the Quarkus app `make registry-deps` builds from Maven Central into
# build/registry/app (deploy/registry/pom.xml); build-images.sh copies it into this image's context.
# Storage: Apicurio's SQL storage on H2, in memory unless REGISTRY_DATASOURCE_URL names a file (the
# lab's compose file: jdbc:h2:file:/var/lib/headwater/data/registry on a volume); Apicurio's
# kafkasql storage is not on Maven Central for 2.0.2 (docs/loader.md).
#
# The JRE: the same two layers as headwater.Dockerfile's `runtime` and `spark` stages (Debian's
# OpenJDK 17), written identically so that the builder reuses them from its cache; keep them in step.
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}
RUN set -eux; \
    apt-get update; \
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3; \
    rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/log/apt /var/log/dpkg.log; \
    useradd --system --uid 10001 --user-group --home-dir /var/lib/headwater --shell /usr/sbin/nologin headwater; \
    mkdir -p /var/lib/headwater/data /etc/headwater; \
    chown -R headwater:headwater /var/lib/headwater /etc/headwater
RUN set -eux; \
    apt-get update; \
    mkdir -p /usr/share/man/man1; \
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends openjdk-17-jre-headless procps; \
    rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/log/apt /var/log/dpkg.log; \
    mkdir -p /var/lib/headwater/warehouse /var/lib/headwater/spark-work; \
    chown -R headwater:headwater /var/lib/headwater
LABEL org.headwater.image=registry
COPY app/ /opt/registry/
USER headwater
WORKDIR /var/lib/headwater
EXPOSE 8080
# H2 storage (see above); the Confluent-compatible API at /apis/ccompat/v6; readiness at /health/ready.
ENTRYPOINT ["java", "-XX:+UseSerialGC", "-Djava.io.tmpdir=/tmp", "-Dquarkus.http.host=0.0.0.0", "-Dquarkus.http.port=8080"]
CMD ["-Xmx256m", "-jar", "/opt/registry/headwater-registry-1-runner.jar"]
