# Headwater's developer entry points. `make test` works on a fresh Debian machine.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: test deps system-deps lint typecheck unit compat dev clean wheel java-deps registry-deps librdkafka-txn-tests

# two pytest lanes side by side (containers, bench, mixed clusters beside the rest): scripts/run-tests.sh.
test: deps lint typecheck integration-deps java-deps registry-deps
	@BIN=$(BIN) bash scripts/run-tests.sh

deps: system-deps $(VENV)/.installed

system-deps:
	@bash scripts/install-system-deps.sh

$(VENV)/.installed: pyproject.toml hatch_build.py lib/headwater/protocol/records/_crecords.pyx
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $@

lint: $(VENV)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(VENV)/.installed
	$(BIN)/mypy

unit: deps
	$(BIN)/pytest -q tests/unit

compat: deps
	$(BIN)/pytest -q -m compat

# The pinned Java side of Kafka (tests/java/pom.xml: clients 2.3.1 and 4.x, the 2.3.1 tools, Streams,
# MM2, Spark's Kafka source) into build/java, once; later runs use the cache. Without Maven Central
# it says so in one line and the Java tests skip.
java-deps: $(VENV)/.installed
	@$(BIN)/python -m headwater.testing.java fetch

# Apicurio Registry (the schema registry of typed warehouse tables: docs/loader.md), built once from
# Maven Central (deploy/registry/pom.xml) into build/registry; later runs use the cache. Without
# Maven Central it says so in one line and the registry's tests skip.
registry-deps: $(VENV)/.installed
	@$(BIN)/python -m headwater.testing.registry fetch

# librdkafka's transaction tests (0098, 0103, 0129; TESTS=0105 for the mock-only one) against a
# local 3-broker cluster: clones and builds librdkafka and its tests into build/librdkafka once
# (~15 min on 2 cores: too slow for `make test`), then ~6 min per run. docs/transactions.md.
librdkafka-txn-tests: $(VENV)/.installed java-deps
	$(BIN)/python scripts/librdkafka_txn_tests.py $(if $(TESTS),--tests $(TESTS))

# Start a local ZooKeeper and one broker in the foreground; prints how to reach them.
dev: deps
	$(BIN)/python scripts/dev_cluster.py

# build/wheelhouse: headwater's wheel and its dependencies' (with manifest.json), what the
# ansible roles (deploy/ansible) copy to each host so hosts need no package index.
wheel: $(VENV)/.installed
	$(BIN)/python deploy/ansible/wheelhouse.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache

# ---- containers: images, the multi-DC lab (deploy/compose/), what tests/integration needs
.PHONY: images lab lab-down lab-load lab-check lab-outage integration-deps docker-engine

# Docker engine (installed and started when absent and we are root) and the compose v2 plugin.
docker-engine: $(VENV)/.installed
	@PYTHON=$(BIN)/python bash deploy/scripts/ensure-docker.sh

# debian:bookworm-slim (pulled, or made with debootstrap), the wheelhouse, both images.
images: deps docker-engine registry-deps
	@PYTHON=$(BIN)/python bash deploy/scripts/build-images.sh

# The three clusters (dc1, dc2, agg), healthy; prints their bootstrap addresses.
lab: images
	@bash deploy/scripts/lab.sh up

# The nightly load, now: the aggregate cluster into the warehouse on the lab's Spark master.
lab-load:
	@bash deploy/scripts/lab.sh load

# The pipeline check: each DC to the aggregate cluster (p50/p99/max latency), every record, the audit.
lab-check:
	@bash deploy/scripts/lab.sh check

# The outage drill: cut dc2's WAN link for LAB_OUTAGE_SECONDS (600), heal it, measure the catch-up (JSON).
lab-outage:
	@bash deploy/scripts/lab.sh outage $${LAB_OUTAGE_LINK:-dc2} --seconds $${LAB_OUTAGE_SECONDS:-600} --json

# Stops the lab and keeps its data volumes (drop them: deploy/scripts/lab.sh down -v).
lab-down:
	@bash deploy/scripts/lab.sh down

# For tests/integration: the engine and fresh images. Without any engine (not root, none
# running) the integration tests skip, so this only warns.
integration-deps: $(VENV)/.installed registry-deps
	@if PYTHON=$(BIN)/python bash deploy/scripts/ensure-docker.sh; then \
	  PYTHON=$(BIN)/python bash deploy/scripts/build-images.sh; \
	else \
	  echo "integration-deps: no Docker engine can be started: tests/integration will skip"; \
	fi
