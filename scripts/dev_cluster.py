"""Start a local ZooKeeper and one broker in the foreground, print how to reach them, stop on Ctrl-C.

Data lives under ./var/dev (kept between runs). Usage: ``make dev`` or
``python scripts/dev_cluster.py [--port 9092] [--zk-port 2181]``.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from headwater.testing.zookeeper import ZooKeeperServer


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=9092)
    parser.add_argument("--zk-port", type=int, default=2181)
    parser.add_argument("--data", default="var/dev")
    args = parser.parse_args()
    data = Path(args.data).resolve()
    (data / "zookeeper").mkdir(parents=True, exist_ok=True)
    print(f"starting ZooKeeper on 127.0.0.1:{args.zk_port} ...", flush=True)
    zk = ZooKeeperServer(data / "zookeeper", port=args.zk_port, tick_ms=2000)
    zk.start()
    props = data / "server.properties"
    props.write_text(
        "broker.id=0\n"
        f"listeners=PLAINTEXT://127.0.0.1:{args.port}\n"
        f"log.dirs={data / 'kafka-logs'}\n"
        f"zookeeper.connect=127.0.0.1:{args.zk_port}\n"
        "num.partitions=1\n"
        "offsets.topic.replication.factor=1\n"  # one broker: Kafka's single-node example does the same
    )
    print(f"starting broker 0 on 127.0.0.1:{args.port} (config {props}) ...", flush=True)
    broker = subprocess.Popen([sys.executable, "-m", "headwater.cli.main", "broker", "start", "-c", str(props)])
    stop = False

    def on_signal(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    time.sleep(2)
    if broker.poll() is None:
        print(
            "\nHeadwater is up.\n"
            f"  bootstrap servers: 127.0.0.1:{args.port}\n"
            f"  zookeeper.connect: 127.0.0.1:{args.zk_port}\n"
            f"  try: kcat -b 127.0.0.1:{args.port} -L\n"
            f"       echo hello | headwater produce --bootstrap-server 127.0.0.1:{args.port} --topic demo\n"
            f"       headwater consume --bootstrap-server 127.0.0.1:{args.port} --topic demo --from-beginning\n"
            "Ctrl-C stops both.\n",
            flush=True,
        )
    while not stop and broker.poll() is None:
        time.sleep(0.2)
    if broker.poll() is None:
        broker.send_signal(signal.SIGTERM)
        broker.wait(30)
    zk.stop()
    return broker.returncode or 0


if __name__ == "__main__":
    os.chdir(Path(__file__).resolve().parent.parent)
    sys.exit(main())
