"""Spark's own Kafka source (``spark-sql-kafka-0-10``, pinned in tests/java/pom.xml) reading a Headwater
topic: ``spark.read.format("kafka")`` as a batch, every record exactly once with its key, value,
partition, offset and headers; ``readStream.format("kafka")`` with a checkpoint, run twice. Spark runs in a child process (its JVM gets the connector's jars at
start, and the loader tests' Spark session stays untouched)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from headwater.testing import java
from tests.cluster.harness import Cluster
from tests.java.conftest import Driver

READ = """
import json, sys
from pyspark.sql import SparkSession
bootstrap, topic, jars = sys.argv[1:4]
spark = (SparkSession.builder.master("local[2]").appName("spark-kafka-source")
         .config("spark.jars", jars).config("spark.ui.enabled", "false").getOrCreate())
df = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
      .option("startingOffsets", "earliest").option("endingOffsets", "latest").option("includeHeaders", "true").load())
rows = [(r.partition, r.offset, r.key.decode(), len(r.value), {h.key: h.value.decode() for h in r.headers})
        for r in df.select("partition", "offset", "key", "value", "headers").collect()]
print(json.dumps({"partitions": df.rdd.getNumPartitions(), "rows": rows}))
spark.stop()
"""


@pytest.mark.slow
def test_spark_batch_read_of_a_topic(cluster: Cluster) -> None:
    driver = Driver("4.x")
    b = cluster.bootstrap
    assert driver.admin(b, "createTopic", "spark-in", "3", "3").get("result") == "created"
    acked = driver.run("produce", b, "spark-in", "300", "64", "acks=all")["acked"]
    assert len(acked) == 300
    jars = java.classpath("spark-kafka").replace(os.pathsep, ",")
    env = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    proc = subprocess.run(
        [sys.executable, "-c", READ, b, "spark-in", jars], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["partitions"] == 3  # one input partition per topic partition
    rows = out["rows"]
    assert sorted((p, o) for p, o, *_ in rows) == sorted((p, o) for p, o in acked)  # each record once, at its offset
    assert sorted(k for _, _, k, _, _ in rows) == sorted(f"k{i}" for i in range(300))
    assert all(n == 64 and h == {"h": k[1:], "n": "x"} for _, _, k, n, h in rows)


STREAM = """
import json, sys
from pyspark.sql import SparkSession
bootstrap, topic, jars, out, checkpoint = sys.argv[1:6]
spark = (SparkSession.builder.master("local[2]").appName("spark-kafka-stream")
         .config("spark.jars", jars).config("spark.ui.enabled", "false").getOrCreate())
df = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
      .option("startingOffsets", "earliest").load().selectExpr("partition", "offset", "CAST(key AS STRING) AS key"))
query = (df.writeStream.format("parquet").option("path", out).option("checkpointLocation", checkpoint)
         .trigger(availableNow=True).start())
query.awaitTermination()
rows = spark.read.parquet(out).collect()
print(json.dumps([(r.partition, r.offset, r.key) for r in rows]))
spark.stop()
"""


@pytest.mark.slow
def test_spark_stream_with_a_checkpoint_reads_each_record_once(cluster: Cluster, tmp_path: Path) -> None:
    """``readStream.format("kafka")`` with a checkpoint, run twice (``availableNow``): the second run
    reads only what was produced after the first, and the sink holds every record exactly once."""
    driver = Driver("4.x")
    b = cluster.bootstrap
    assert driver.admin(b, "createTopic", "spark-stream", "2", "3").get("result") == "created"
    acked = driver.run("produce", b, "spark-stream", "200", "16", "acks=all")["acked"]
    jars = java.classpath("spark-kafka").replace(os.pathsep, ",")
    env = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    args = [b, "spark-stream", jars, str(tmp_path / "out"), str(tmp_path / "checkpoint")]

    def run() -> list[list[Any]]:
        proc = subprocess.run(
            [sys.executable, "-c", STREAM, *args], capture_output=True, text=True, env=env, timeout=300
        )
        assert proc.returncode == 0, proc.stderr[-4000:]
        return list(json.loads(proc.stdout.strip().splitlines()[-1]))

    first = run()
    assert sorted((p, o) for p, o, _ in first) == sorted((p, o) for p, o in acked)
    acked += driver.run("produce", b, "spark-stream", "100", "16", "acks=all")["acked"]
    second = run()
    assert len(second) == 300 and sorted((p, o) for p, o, _ in second) == sorted((p, o) for p, o in acked)
