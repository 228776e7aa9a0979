"""Produce and consume throughput over PLAINTEXT, SSL and SASL_SSL (SCRAM-SHA-512) in one run.

    python scripts/bench_tls.py [--records 500000] [--rounds 2]

One broker listening on all three, a throwaway CA; librdkafka (confluent-kafka, via the bench's
load generator in its own process) produces Kreps' workload -- 100-byte records, librdkafka's
default batching, acks=1 -- to a fresh topic per round and protocol, then consumes it back. The
protocols alternate within each round so machine noise hits them alike. Prints records/s per
protocol and the ratio to PLAINTEXT.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from headwater.cli.main import main as cli_main
from headwater.testing.cluster import LocalBroker
from headwater.testing.tls import TestCA
from headwater.testing.zookeeper import ZooKeeperServer, free_port


def loadgen(command: str, bootstrap: str, topic: str, count: int, conf: dict[str, str]) -> dict[str, float]:
    cmd = [sys.executable, "-m", "headwater.bench.loadgen", command, "--bootstrap", bootstrap, "--topic", topic]
    cmd += ["--count", str(count), "--seconds", "120", "--size", "100"]
    for k, v in conf.items():
        cmd += ["-X", f"{k}={v}"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        ca = TestCA(tmp / "ca")
        cert = ca.issue("broker")
        zk = ZooKeeperServer(tmp / "zk")
        zk.start()
        broker = LocalBroker(tmp, 0, zk.connect + "/bench-tls")
        try:
            ports = {"PLAINTEXT": broker.port, "SSL": free_port(), "SASL_SSL": free_port()}
            broker.properties.update(
                {
                    "listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
                    "ssl.keystore.location": cert.keystore,
                    "sasl.enabled.mechanisms": "SCRAM-SHA-512",
                    "offsets.topic.replication.factor": 1,
                }
            )
            broker.start(timeout=90)
            user = ["--entity-type", "users", "--entity-name", "bench"]
            add = ["--add-config", "SCRAM-SHA-512=[password=bench-pw]"]
            cli_main(["configs", "--zookeeper", zk.connect + "/bench-tls", "--alter", *user, *add])
            tls = {"ssl.ca.location": str(ca.ca_file)}
            confs = {
                "PLAINTEXT": {},
                "SSL": {"security.protocol": "SSL", **tls},
                "SASL_SSL": {
                    "security.protocol": "SASL_SSL",
                    "sasl.mechanism": "SCRAM-SHA-512",
                    "sasl.username": "bench",
                    "sasl.password": "bench-pw",
                    **tls,
                },
            }
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            results: dict[str, dict[str, list[float]]] = {n: {"produce": [], "consume": []} for n in confs}
            for r in range(args.rounds):
                for name, conf in confs.items():
                    topic = f"tls-{name.lower()}-{r}"
                    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(60)
                    bootstrap = f"127.0.0.1:{ports[name]}"
                    for command in ("produce", "consume"):
                        got = loadgen(f"confluent-{command}", bootstrap, topic, args.records, conf)
                        done = got["acked"] if "acked" in got else got["records"]
                        results[name][command].append(done / got["seconds"])
                        print(f"round {r} {name:<10} {command:<8} {done / got['seconds']:>12,.0f} rec/s", flush=True)
            base = {c: statistics.median(results["PLAINTEXT"][c]) for c in ("produce", "consume")}
            print("\nmedian records/s (ratio to PLAINTEXT)")
            for name in confs:
                cells = [
                    f"{c} {statistics.median(results[name][c]):,.0f} ({statistics.median(results[name][c]) / base[c]:.2f})"
                    for c in ("produce", "consume")
                ]
                print(f"{name:<10} " + "  ".join(cells))
        finally:
            broker.stop()
            zk.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
