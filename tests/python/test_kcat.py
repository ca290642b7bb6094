"""Debian's kcat (librdkafka 2.0.2): metadata, produce and consume.

librdkafka 2.0.2 misparses tagged fields that a broker sends at their default values, so this
is a regression test for the flexible-version encoders as much as a client test."""

import os
import shutil
import subprocess

import pytest

from kafka_helpers import create_topic

if shutil.which("kcat") is None:
    if os.environ.get("STROM_REQUIRE_KCAT"):
        raise RuntimeError("kcat is required (STROM_REQUIRE_KCAT is set) but not on PATH")
    pytestmark = pytest.mark.skip(reason="kcat not installed")


def kcat(*args, input=None, timeout=60):
    cmd = ["kcat", "-X", "socket.timeout.ms=20000", "-X", "topic.metadata.refresh.interval.ms=2000",
           *args]
    r = subprocess.run(cmd, input=input, capture_output=True, timeout=timeout)
    assert r.returncode == 0, (f"{' '.join(cmd)} exited {r.returncode}\n"
                               f"stdout: {r.stdout.decode(errors='replace')[-2000:]}\n"
                               f"stderr: {r.stderr.decode(errors='replace')[-4000:]}")
    return r


def test_kcat_metadata(bootstrap, topic_name):
    create_topic(bootstrap, topic_name, partitions=3)
    out = kcat("-b", bootstrap, "-L", "-t", topic_name).stdout.decode()
    assert "1 brokers:" in out, out
    assert f'topic "{topic_name}" with 3 partitions:' in out, out
    for p in range(3):
        assert f"partition {p}, leader" in out, out
    assert "Err" not in out.replace("err: Success", ""), out


@pytest.mark.parametrize("compression", ["none", "lz4"])
def test_kcat_produce_consume(bootstrap, topic_name, compression):
    create_topic(bootstrap, topic_name, partitions=3)
    n = 1000
    lines = "".join(f"key-{i}:value-{i}\n" for i in range(n)).encode()
    kcat("-b", bootstrap, "-P", "-t", topic_name, "-K", ":", "-H", "src=kcat",
         "-z", compression, "-X", "acks=all", input=lines)
    out = kcat("-b", bootstrap, "-C", "-t", topic_name, "-e", "-o", "beginning", "-q",
               "-f", "%p\t%o\t%k\t%s\t%h\n").stdout.decode()
    rows = [line.split("\t") for line in out.splitlines() if line]
    assert len(rows) == n, out[-2000:]
    by_part = {}
    for part, off, key, value, hdrs in rows:
        assert key.startswith("key-")
        assert value == "value-" + key[4:]
        assert hdrs == "src=kcat"
        by_part.setdefault(int(part), []).append((int(off), int(key[4:])))
    assert set(by_part) <= {0, 1, 2}
    for part, items in by_part.items():
        assert [o for o, _ in items] == list(range(len(items))), f"partition {part} offsets"
        idx = [i for _, i in items]
        assert idx == sorted(idx), f"partition {part} out of order"
    assert sorted(i for items in by_part.values() for _, i in items) == list(range(n))


def test_kcat_consume_what_kafka_python_produced(bootstrap, topic_name):
    from kafka_helpers import producer
    create_topic(bootstrap, topic_name, partitions=1)
    p = producer(bootstrap, compression_type="gzip")
    try:
        for i in range(100):
            p.send(topic_name, key=b"k%d" % i, value=b"v%d" % i, headers=[("h", b"%d" % i)])
        p.flush(timeout=60)
    finally:
        p.close(timeout=10)
    out = kcat("-b", bootstrap, "-C", "-t", topic_name, "-e", "-o", "beginning", "-q",
               "-f", "%o %k %s %h\n").stdout.decode()
    assert out.splitlines() == [f"{i} k{i} v{i} h={i}" for i in range(100)]
