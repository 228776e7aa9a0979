"""librdkafka's own transaction tests (0098, 0103, 0105, 0129) against a local 3-broker Headwater
cluster: ``make librdkafka-txn-tests``.

1. Source: ``--src DIR`` (a librdkafka checkout), else ``build/librdkafka/src`` from an earlier run,
   else ``git clone --depth 1 --branch v<version>`` of github.com/confluentinc/librdkafka, the
   version confluent-kafka reports (``confluent_kafka.libversion()``).
2. Build, once, in ``build/librdkafka/src`` (not committed): ``./configure --disable-gssapi
   --disable-curl``, ``make libs``, ``make -C tests build`` (a C/C++ compiler; 0098 needs the
   rapidjson headers, Debian's ``rapidjson-dev``, or librdkafka compiles it as a skip). About 15
   minutes on 2 busy cores, which is why this is not part of ``make test``; later runs reuse it.
3. A 3-broker cluster (its own ZooKeeper) and librdkafka's harness, ``TESTS=... ./test-runner``
   in ``tests/`` with a ``test.conf`` naming the cluster and ``TEST_KAFKA_VERSION=2.3.1`` (the
   protocol Headwater speaks; tests needing newer brokers skip their parts, as 0103's KIP-360 case
   expects a failure below 2.5).
4. 0098 runs Kafka's Java producer (``tests/java/TransactionProducerCli.java``) through
   ``$KAFKA_PATH/bin/kafka-run-class.sh``: ``KAFKA_PATH`` here is a directory holding ``libs/``
   (the kafka-clients 2.3.1 jars of ``make java-deps``, ``build/java/kafka-legacy``) and a
   three-line ``kafka-run-class.sh`` running ``java`` on them. The helpers' Makefile also builds
   ``IncrementalRebalanceCli``, which needs clients >= 2.4 and which 0098 does not run: an empty
   ``.class`` stands in for it.
5. 0105 runs on librdkafka's built-in mock cluster only (``test.mock.num.brokers``): it never
   connects to Headwater and takes ~8 minutes, so it runs only when named (``--tests 0105``).

Exit status: the test-runner's.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from headwater.testing.cluster import LocalCluster

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "build" / "librdkafka"
DEFAULT_TESTS = "0098,0103,0129"
OVERRIDES = {
    "group.initial.rebalance.delay.ms": 0,
    "transaction.state.log.num.partitions": 6,
    "controlled.shutdown.max.retries": 1,
}
RUN_CLASS = """#!/bin/bash
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
exec java -cp "$CLASSPATH:$here/libs/*" "$@"
"""


def say(line: str) -> None:
    print(f"librdkafka-txn-tests: {line}", flush=True)


def source(explicit: Path | None) -> Path:
    src = BUILD / "src"
    if explicit is not None:
        if not src.exists():
            say(f"copying {explicit} to {src}")
            shutil.copytree(explicit, src, ignore=shutil.ignore_patterns(".git"))
        return src
    if not src.exists():
        import confluent_kafka

        version = confluent_kafka.libversion()[0]
        url = "https://github.com/confluentinc/librdkafka"
        say(f"cloning {url} v{version}")
        subprocess.run(["git", "clone", "-q", "--depth", "1", "--branch", f"v{version}", url, str(src)], check=True)
    return src


def build(src: Path) -> None:
    if (src / "tests" / "test-runner").exists():
        return
    if shutil.which("g++") is None or shutil.which("make") is None:
        sys.exit("librdkafka-txn-tests: needs g++ and make")
    log = BUILD / "build.log"
    say(f"building librdkafka and its tests in {src} (log: {log}); ~15 min on 2 cores")
    with open(log, "ab") as out:
        for cmd, cwd in (
            (["./configure", "--disable-gssapi", "--disable-curl"], src),
            (["make", "-j2", "libs"], src),
            (["make", "-j2", "build"], src / "tests"),
        ):
            if subprocess.run(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT).returncode != 0:
                sys.exit(f"librdkafka-txn-tests: {' '.join(cmd)} failed; see {log}")


def kafka_path() -> Path | None:
    jars = ROOT / "build" / "java" / "kafka-legacy"
    if not (jars / "kafka-clients-2.3.1.jar").exists():
        return None
    path = BUILD / "kafka"
    (path / "bin").mkdir(parents=True, exist_ok=True)
    if not (path / "libs").exists():
        (path / "libs").symlink_to(jars)
    script = path / "bin" / "kafka-run-class.sh"
    script.write_text(RUN_CLASS)
    script.chmod(0o755)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", type=Path, help="a librdkafka source tree (default: clone the installed version)")
    ap.add_argument("--tests", default=DEFAULT_TESTS, help=f"test numbers (default {DEFAULT_TESTS}; 0105: mock only)")
    args = ap.parse_args(argv)
    BUILD.mkdir(parents=True, exist_ok=True)
    src = source(args.src)
    build(src)
    tests = src / "tests"
    env = dict(os.environ, TESTS=args.tests, TEST_KAFKA_VERSION="2.3.1")
    env["LD_LIBRARY_PATH"] = f"{src / 'src'}:{src / 'src-cpp'}"
    kp = kafka_path()
    if kp is not None:
        env["KAFKA_PATH"] = str(kp)
        stand_in = tests / "java" / "IncrementalRebalanceCli.class"
        if not stand_in.exists():
            stand_in.touch()  # needs clients >= 2.4; 0098 uses TransactionProducerCli only
    elif "0098" in args.tests:
        say("no build/java/kafka-legacy (make java-deps): 0098 cannot run its Java producer")
    with (
        tempfile.TemporaryDirectory(prefix="librdkafka-txn-") as tmp,
        LocalCluster(Path(tmp), 3, overrides=OVERRIDES) as cluster,
    ):
        (tests / "test.conf").write_text(f"bootstrap.servers={cluster.bootstrap}\ntest.timeout.multiplier=3\n")
        say(f"TESTS={args.tests} ./test-runner against {cluster.bootstrap}")
        return subprocess.run(["./test-runner"], cwd=tests, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
