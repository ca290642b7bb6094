#!/usr/bin/env python3
"""Many partitions on one node under a descriptor limit (issue 9, defect 5).

Starts `strom server` (release build by default) under `prlimit --nofile=LIMIT:LIMIT` on a fresh
data dir, creates one topic with PARTITIONS partitions, writes one record to every partition with
confluent-kafka (librdkafka), reads every partition back, and prints what was acknowledged, what
was read, the broker's open descriptors and its RSS. The broker is stopped (SIGTERM, then SIGKILL)
on exit.

    .venv/bin/python scripts/bench/many_partitions.py --partitions 10000 --nofile 20000

Needs confluent-kafka (`.venv/bin/pip install confluent-kafka` into the test venv of `make venv`)
and prlimit (util-linux).
"""

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=10000)
    ap.add_argument("--nofile", type=int, default=20000)
    ap.add_argument("--bin", default=os.path.join(ROOT, "target/release/strom"))
    ap.add_argument("--timeout", type=float, default=600.0)
    a = ap.parse_args()

    data = tempfile.mkdtemp(prefix="strom-many-")
    port = free_port()
    log = open(os.path.join(data, "server.log"), "w")
    broker = subprocess.Popen(
        ["prlimit", f"--nofile={a.nofile}:{a.nofile}", a.bin, "server",
         "--listen", f"127.0.0.1:{port}", "--data-dir", os.path.join(data, "data")],
        stdout=log, stderr=log, stdin=subprocess.DEVNULL,
        env={**os.environ, "RUST_LOG": "warn"})
    try:
        bs = f"127.0.0.1:{port}"
        deadline = time.time() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                if time.time() > deadline or broker.poll() is not None:
                    sys.exit("broker did not start; see " + log.name)
                time.sleep(0.1)
        t0 = time.time()
        admin = AdminClient({"bootstrap.servers": bs})
        fut = admin.create_topics([NewTopic("many", a.partitions, 1)], operation_timeout=a.timeout,
                                  request_timeout=a.timeout)
        fut["many"].result()
        created = time.time() - t0
        print(f"created {a.partitions} partitions in {created:.1f} s; broker fds {fds(broker.pid)}")

        acked, failed = 0, []

        def done(err, msg):
            nonlocal acked
            if err is None:
                acked += 1
            else:
                failed.append((msg.partition(), str(err)))

        p = Producer({"bootstrap.servers": bs, "linger.ms": 5, "acks": "all",
                      "message.timeout.ms": int(a.timeout * 1000)})
        t0 = time.time()
        for i in range(a.partitions):
            while True:
                try:
                    p.produce("many", value=f"v{i}".encode(), partition=i, on_delivery=done)
                    break
                except BufferError:
                    p.poll(0.05)
            p.poll(0)
        p.flush(a.timeout)
        produced = time.time() - t0
        print(f"acked {acked}, failed {len(failed)} in {produced:.1f} s; broker fds {fds(broker.pid)}")
        for f in failed[:10]:
            print("  failed:", f)

        c = Consumer({"bootstrap.servers": bs, "group.id": "unused", "enable.auto.commit": False})
        c.assign([TopicPartition("many", i, 0) for i in range(a.partitions)])
        seen = set()
        t0 = time.time()
        while len(seen) < a.partitions and time.time() - t0 < a.timeout:
            for m in c.consume(1000, 1.0):
                if m.error() is None:
                    seen.add(m.partition())
                elif m.error().code() != KafkaError._PARTITION_EOF:
                    print("consume error:", m.error())
        c.close()
        print(f"read back {len(seen)} of {a.partitions} partitions in {time.time() - t0:.1f} s; "
              f"broker fds {fds(broker.pid)} (limit {a.nofile}), RSS {rss_mb(broker.pid):.0f} MB")
        ok = acked == a.partitions and len(seen) == a.partitions
        print("OK" if ok else "FAILED")
        return 0 if ok else 1
    finally:
        broker.send_signal(signal.SIGTERM)
        try:
            broker.wait(30)
        except subprocess.TimeoutExpired:
            broker.kill()
            broker.wait()


if __name__ == "__main__":
    sys.exit(main())
