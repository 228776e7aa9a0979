"""A Spark driver for tests/loader/test_stream_kill.py: one readStream query, headwater to Parquet.

    python tests/loader/stream_driver.py BOOTSTRAP TOPIC OUT CHECKPOINT [option=value ...]

It never calls ``spark.dataSource.register``: ``format("headwater")`` must be found by Spark itself
(``pyspark_headwater.DefaultSource``). Runs with Trigger.AvailableNow and exits when caught up.
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str]) -> int:
    bootstrap, topic, out, checkpoint, *extra = argv
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("headwater-stream-driver")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    reader = (
        spark.readStream.format("headwater")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
    )
    for kv in extra:
        k, v = kv.split("=", 1)
        reader = reader.option(k, v)
    for attempt in range(1, 4):
        q = (
            reader.load()
            .writeStream.format("parquet")
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start(out)
        )
        try:
            q.awaitTermination()
            break
        except Exception as e:
            # Spark gives the query's planner process 10 s (fixed) to start and connect back; on a
            # loaded machine it may not. The query resumes from its checkpoint.
            if "failed to connect back" not in str(e) or attempt == 3:
                raise
            print(f"attempt {attempt}: {str(e).splitlines()[0]}; restarting the query", flush=True)
    print(f"caught up: {q.lastProgress and q.lastProgress['sources'][0]['endOffset']}", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
