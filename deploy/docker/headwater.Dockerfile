# Headwater's Python services (broker, mirror, audit, loader; Spark in the `spark` stage), from a wheelhouse built
# on the host by deploy/scripts/build-images.sh: no package index is reached during the build.
#
# Build context (made by build-images.sh):
#   wheels/deps/*.whl       every dependency (changes rarely: its layer stays cached)
#   wheels/app/*.whl        headwater itself (changes with every Python edit: the last layer)
#   headwater-healthcheck.py, server.properties
#
# Layers of the final image: runtime (python3, user) | dependencies | headwater. A Python-only
# change rebuilds just the last one, in seconds.
ARG BASE_IMAGE=debian:bookworm-slim

# ---- runtime: the interpreter and the user, shared by the build stages and the final image
FROM ${BASE_IMAGE} AS runtime
RUN set -eux; \
    apt-get update; \
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3; \
    rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/log/apt /var/log/dpkg.log; \
    useradd --system --uid 10001 --user-group --home-dir /var/lib/headwater --shell /usr/sbin/nologin headwater; \
    mkdir -p /var/lib/headwater/data /etc/headwater; \
    chown -R headwater:headwater /var/lib/headwater /etc/headwater

# ---- deps: a venv (no pip inside) with every dependency from the wheelhouse
FROM runtime AS deps
RUN set -eux; \
    apt-get update; \
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3-venv; \
    rm -rf /var/lib/apt/lists/*; \
    python3 -m venv --without-pip /opt/headwater; \
    site="$(/opt/headwater/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"; \
    echo /opt/headwater/app >"$site/headwater-app.pth"; \
    ln -s "$(ls /usr/share/python-wheels/pip-*.whl)" /opt/pip.whl
COPY wheels/deps/ /wheels/deps/
RUN /opt/headwater/bin/python /opt/pip.whl/pip install --no-cache-dir --no-index --disable-pip-version-check \
        --find-links /wheels/deps /wheels/deps/*.whl

# ---- app: headwater itself, into /opt/headwater/app (on sys.path through the .pth above)
FROM deps AS app
LABEL org.headwater.image=headwater-build
COPY wheels/app/ /wheels/app/
RUN /opt/headwater/bin/python /opt/pip.whl/pip install --no-cache-dir --no-index --disable-pip-version-check \
        --no-deps --target /opt/headwater/app /wheels/app/*.whl

# ---- spark (headwater/spark): Spark standalone (master, worker) and the nightly loader's driver.
# PyPI's pyspark (the `loader` extra, in the deps stage) ships Spark's launch scripts and jars, so
# Spark needs only a JRE (Debian's OpenJDK 17) and `ps`. Built with --target spark; the JRE layer
# stays cached across Python changes, like the deps layer.
FROM runtime AS spark
RUN set -eux; \
    apt-get update; \
    mkdir -p /usr/share/man/man1; \
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends openjdk-17-jre-headless procps; \
    rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/log/apt /var/log/dpkg.log; \
    mkdir -p /var/lib/headwater/warehouse /var/lib/headwater/spark-work; \
    chown -R headwater:headwater /var/lib/headwater
COPY --from=deps /opt/headwater /opt/headwater
RUN ln -s "$(/opt/headwater/bin/python -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')" /opt/spark
ENV SPARK_HOME=/opt/spark \
    PYSPARK_PYTHON=/opt/headwater/bin/python \
    PYSPARK_DRIVER_PYTHON=/opt/headwater/bin/python \
    SPARK_NO_DAEMONIZE=1 \
    PATH=/opt/headwater/app/bin:/opt/headwater/bin:/opt/spark/bin:/opt/spark/sbin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
USER headwater
WORKDIR /var/lib/headwater
ENTRYPOINT ["headwater"]
CMD ["--help"]
COPY --from=app /opt/headwater/app /opt/headwater/app

# ---- the image (headwater's own files last: the only layer a Python change touches)
FROM runtime
# build-images.sh tags the final image and the `app` stage, then prunes untagged images with
# this label (the builds they replaced); the stages below them are the build cache and stay.
LABEL org.headwater.image=headwater
COPY --from=deps /opt/headwater /opt/headwater
COPY headwater-healthcheck.py /usr/local/bin/headwater-healthcheck
COPY server.properties /etc/headwater/server.properties
ENV PATH=/opt/headwater/app/bin:/opt/headwater/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
USER headwater
WORKDIR /var/lib/headwater
EXPOSE 9092
# Scripts run through their interpreter: right even where a checkout lost the executable bit.
HEALTHCHECK --interval=3s --timeout=5s --start-period=60s --retries=5 \
    CMD ["python3", "/usr/local/bin/headwater-healthcheck"]
ENTRYPOINT ["headwater"]
# The file holds the container's defaults; KAFKA_<NAME> variables override it (see config.py).
CMD ["broker", "start", "-c", "/etc/headwater/server.properties"]
COPY --from=app /opt/headwater/app /opt/headwater/app
