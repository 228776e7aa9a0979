"""Scenario 8's streaming-reader row (issue 44): ``readStream.format("headwater")`` into the loader's layout.

A fresh PySpark process (``local[*]``, the data source found by ``pyspark_headwater``, never
registered by hand) runs one streaming query over the scenario's topic: ``startingOffsets``
earliest, ``maxOffsetsPerTrigger`` a quarter of the records (so four micro-batches, each planned in
the checkpoint, as a catching-up stream runs), ``Trigger.AvailableNow``, written by Spark's file
sink as the loader writes (every column plus ``date``, ``partitionBy("date")``). Timed inside the
session from the query's start to its end (JVM and session start-up left out, as the loader's
``loading`` -> ``published`` interval leaves them out); read back through the file sink's log:
every record, each (partition, offset) once, or the run fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

from headwater.bench import peers

CHILD = textwrap.dedent(
    """
    import json, sys, time
    from pyspark.sql import SparkSession, functions as F
    bootstrap, topic, out, checkpoint, master, cap = sys.argv[1:7]
    spark = (SparkSession.builder.master(master).appName("bench-headwater-stream")
             .config("spark.ui.enabled", "false").config("spark.sql.session.timeZone", "UTC").getOrCreate())
    t = time.perf_counter()
    for attempt in range(3):  # a planner process that missed Spark's fixed 10 s connect-back: again
        q = (spark.readStream.format("headwater").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", topic).option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", cap)
             .load().withColumn("date", F.date_format(F.col("timestamp"), "yyyy-MM-dd"))
             .writeStream.format("parquet").partitionBy("date").option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start(out))
        try:
            q.awaitTermination()
            break
        except Exception as e:
            if "failed to connect back" not in str(e) or attempt == 2:
                raise
    seconds = time.perf_counter() - t
    batches = sum(1 for p in q.recentProgress if p["numInputRows"])
    got = spark.read.parquet(out)
    rows = got.count()
    distinct = got.select("partition", "offset").distinct().count()
    print(json.dumps({"seconds": seconds, "rows": rows, "distinct": distinct, "batches": batches}))
    spark.stop()
    """
)


@dataclass
class StreamRun:
    seconds: float  # query start to end, in the session
    wall: float  # the process, start to exit
    cpu: float
    batches: int


def stream_read(
    bootstrap: str, topic: str, out: Path, count: int, master: str = "local[*]", timeout: float = 900
) -> StreamRun:
    """One streaming read of ``topic`` into ``out`` (a fresh directory); RuntimeError unless it
    holds ``count`` rows, each (partition, offset) once."""
    env = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    cap = str(max(1, -(-count // 4)))
    args = [sys.executable, "-c", CHILD, bootstrap, topic, str(out / "data"), str(out / "checkpoint"), master, cap]
    started = time.perf_counter()
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    with peers.TreeCpu(proc.pid) as cpu:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            peers.kill_tree(proc.pid)
            proc.communicate()
            raise RuntimeError(f"readStream.format(headwater) did not finish in {timeout:.0f}s") from None
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"readStream.format(headwater) exited {proc.returncode}: {_cause(stderr)}")
    res = json.loads(stdout.strip().splitlines()[-1])
    if res["rows"] != count or res["distinct"] != count:
        raise RuntimeError(
            f"readStream.format(headwater) wrote {res['rows']} rows ({res['distinct']} offsets) of {count}"
        )
    return StreamRun(float(res["seconds"]), wall, cpu.seconds, int(res["batches"]))


def _cause(stderr: str) -> str:
    """What a failed query's stderr says went wrong: its exception lines (Python's last line and
    Spark's ``...Exception: ...`` heads, the JVM's ``Caused by:``), not the tail of a Java stack,
    which the report's cell cuts (a run of 2026-11-27 failed with only ``at ...`` frames shown)."""
    lines = [line.strip() for line in stderr.splitlines()]
    heads = [
        line
        for line in lines
        if line.startswith("Caused by:") or (("Exception" in line or "Error" in line) and not line.startswith("at "))
    ]
    picked = list(dict.fromkeys(heads))[-6:]
    return " | ".join(picked)[-1500:] if picked else stderr[-1500:]
