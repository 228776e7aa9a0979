"""Spark's own Kafka source (``spark-sql-kafka-0-10``, pinned in tests/java/pom.xml) reading a Headwater
topic: ``spark.read.format("kafka")`` as a batch, every record exactly once with its key, value,
partition, offset and headers. Spark runs in a child process (its JVM gets the connector's jars at
start, and the loader tests' Spark session stays untouched)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

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
