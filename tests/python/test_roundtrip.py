"""Admin, produce and consume round trips with kafka-python (manual assignment, no groups)."""

import time
from collections import defaultdict

import pytest
from kafka import TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType

from kafka_helpers import (admin_client, assigned_consumer, consume_n, create_topic, producer,
                           wait_for_topic)

N_RECORDS = 10_000
PARTITIONS = 3


def _lz4_available():
    try:
        import lz4.frame  # noqa: F401
        return True
    except ImportError:
        return False


def test_admin_create_topic_three_partitions(bootstrap, topic_name):
    admin = admin_client(bootstrap)
    try:
        from kafka.admin import NewTopic
        admin.create_topics([NewTopic(topic_name, num_partitions=PARTITIONS, replication_factor=1)])
        desc = wait_for_topic(admin, topic_name, PARTITIONS)
        assert desc["topic"] == topic_name
        assert desc["is_internal"] is False
        assert sorted(p["partition"] for p in desc["partitions"]) == [0, 1, 2]
        for p in desc["partitions"]:
            assert p["error_code"] == 0
            assert p["leader"] >= 0
            assert p["replicas"] == [p["leader"]]
            assert p["isr"] == [p["leader"]]
        assert topic_name in admin.list_topics()
    finally:
        admin.close()


def test_create_existing_topic_fails(bootstrap, topic_name):
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError
    create_topic(bootstrap, topic_name, partitions=1)
    admin = admin_client(bootstrap)
    try:
        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics([NewTopic(topic_name, num_partitions=1, replication_factor=1)])
    finally:
        admin.close()


@pytest.mark.parametrize("compression", [
    None,
    "gzip",
    pytest.param("lz4", marks=pytest.mark.skipif(not _lz4_available(),
                                                 reason="python-lz4 not installed")),
])
def test_produce_consume_10k_keyed_with_headers(bootstrap, topic_name, compression):
    create_topic(bootstrap, topic_name, partitions=PARTITIONS)
    base_ts = int(time.time() * 1000) - 3_600_000

    def record(i):
        key = f"key-{i:06d}".encode()
        value = f"value-{i:06d}-".encode() + bytes([i % 251]) * (i % 97)
        headers = [("idx", str(i).encode()), ("src", b"kafka-python"), ("empty", b"")]
        return key, value, headers, base_ts + i

    p = producer(bootstrap, compression_type=compression)
    sent = []  # (i, RecordMetadata) in send order
    try:
        futures = []
        for i in range(N_RECORDS):
            key, value, headers, ts = record(i)
            futures.append((i, p.send(topic_name, key=key, value=value, headers=headers,
                                      timestamp_ms=ts)))
        p.flush(timeout=120)
        for i, f in futures:
            sent.append((i, f.get(timeout=60)))
    finally:
        p.close(timeout=10)

    # the broker assigns offsets contiguously from 0 per partition, in send order
    by_partition = defaultdict(list)
    for i, md in sent:
        assert md.topic == topic_name
        by_partition[md.partition].append((md.offset, i))
    assert set(by_partition) <= set(range(PARTITIONS))
    assert len(by_partition) == PARTITIONS, "keys should spread over all partitions"
    for part, items in by_partition.items():
        assert [o for o, _ in items] == list(range(len(items))), f"partition {part} offsets"
    expected = {(part, o): i for part, items in by_partition.items() for o, i in items}

    c, tps = assigned_consumer(bootstrap, topic_name, PARTITIONS)
    try:
        got = consume_n(c, N_RECORDS)
        ends = c.end_offsets(tps)
        begins = c.beginning_offsets(tps)
    finally:
        c.close()
    assert len(got) == N_RECORDS, f"consumed {len(got)} of {N_RECORDS}"

    seen = defaultdict(list)
    for r in got:
        seen[r.partition].append(r)
    for part in range(PARTITIONS):
        recs = seen[part]
        assert [r.offset for r in recs] == list(range(len(by_partition[part]))), \
            f"partition {part}: offsets not contiguous/in order"
        idxs = [expected[(part, r.offset)] for r in recs]
        assert idxs == sorted(idxs), f"partition {part}: records out of send order"
        for r in recs:
            i = expected[(part, r.offset)]
            key, value, headers, ts = record(i)
            assert r.topic == topic_name
            assert r.key == key
            assert r.value == value
            assert [(k, bytes(v)) for k, v in r.headers] == headers
            assert r.timestamp == ts
            assert r.timestamp_type == 0  # CreateTime
        assert begins[TopicPartition(topic_name, part)] == 0
        assert ends[TopicPartition(topic_name, part)] == len(recs)


def test_offsets_for_times(bootstrap, topic_name):
    create_topic(bootstrap, topic_name, partitions=1)
    tp = TopicPartition(topic_name, 0)
    base = int(time.time() * 1000) - 600_000
    p = producer(bootstrap)
    try:
        # three separate batches so lookups cross batch boundaries
        for chunk in range(3):
            for i in range(chunk * 100, chunk * 100 + 100):
                p.send(topic_name, key=b"k%d" % i, value=b"v%d" % i, partition=0,
                       timestamp_ms=base + i * 10)
            p.flush(timeout=60)
    finally:
        p.close(timeout=10)

    c, _ = assigned_consumer(bootstrap, topic_name, 1)
    try:
        assert c.beginning_offsets([tp]) == {tp: 0}
        assert c.end_offsets([tp]) == {tp: 300}
        cases = {
            base - 1_000: 0,        # before everything -> first record
            base: 0,
            base + 5: 1,            # between records -> next one
            base + 1000: 100,       # first record of the 2nd batch
            base + 1995: 200,       # between the last of batch 2 and the first of batch 3
            base + 2990: 299,       # the very last record
        }
        for ts, want in cases.items():
            res = c.offsets_for_times({tp: ts})[tp]
            assert res is not None, f"no offset for ts {ts - base:+d}"
            assert res.offset == want, f"ts base{ts - base:+d}: got {res.offset}, want {want}"
            assert res.timestamp == base + want * 10
        assert c.offsets_for_times({tp: base + 2991})[tp] is None  # after the last record
    finally:
        c.close()


def test_list_topics_and_describe_configs(bootstrap, topic_name):
    create_topic(bootstrap, topic_name, partitions=2,
                 configs={"retention.ms": "3600000", "cleanup.policy": "delete"})
    admin = admin_client(bootstrap)
    try:
        assert topic_name in admin.list_topics()
        res = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic_name)])
        entries = {}
        for resp in res:
            for resource in resp.resources:
                err, _msg, rtype, rname, configs = resource[:5]
                assert err == 0, f"describe_configs error {err}: {_msg}"
                assert rname == topic_name
                for cfg in configs:
                    entries[cfg[0]] = cfg[1]
        assert entries.get("retention.ms") == "3600000", entries
        assert entries.get("cleanup.policy") == "delete", entries
        assert "segment.bytes" in entries, sorted(entries)
    finally:
        admin.close()


def test_metadata_auto_creates_topic(bootstrap, topic_name):
    """auto.create.topics.enable defaults to true: a producer's Metadata creates the topic."""
    p = producer(bootstrap)
    try:
        md = p.send(topic_name, key=b"k", value=b"auto").get(timeout=60)
        assert md.offset == 0
    finally:
        p.close(timeout=10)
    c, _ = assigned_consumer(bootstrap, topic_name, 1)
    try:
        got = consume_n(c, 1, timeout=30)
    finally:
        c.close()
    assert [(r.key, r.value) for r in got] == [(b"k", b"auto")]
