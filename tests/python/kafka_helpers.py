"""Helpers shared by the kafka-python tests."""

import time

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

CLIENT_TIMEOUTS = dict(request_timeout_ms=30000, api_version_auto_timeout_ms=10000)


def admin_client(bootstrap):
    return KafkaAdminClient(bootstrap_servers=bootstrap, client_id="strom-pytest-admin",
                            **CLIENT_TIMEOUTS)


def create_topic(bootstrap, name, partitions=3, configs=None):
    admin = admin_client(bootstrap)
    try:
        resp = admin.create_topics([NewTopic(name=name, num_partitions=partitions,
                                             replication_factor=1,
                                             topic_configs=configs or {})])
        wait_for_topic(admin, name, partitions)
        return resp
    finally:
        admin.close()


def wait_for_topic(admin, name, partitions, timeout=30.0):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = admin.describe_topics([name])
        if last and last[0]["error_code"] == 0 and len(last[0]["partitions"]) == partitions \
                and all(p["leader"] >= 0 for p in last[0]["partitions"]):
            return last[0]
        time.sleep(0.1)
    raise AssertionError(f"topic {name} not ready with {partitions} partitions: {last}")


def producer(bootstrap, **kw):
    conf = dict(bootstrap_servers=bootstrap, client_id="strom-pytest-producer", acks="all",
                linger_ms=5, max_in_flight_requests_per_connection=1, retries=5,
                **CLIENT_TIMEOUTS)
    conf.update(kw)
    return KafkaProducer(**conf)


def assigned_consumer(bootstrap, topic, partitions, **kw):
    conf = dict(bootstrap_servers=bootstrap, client_id="strom-pytest-consumer", group_id=None,
                enable_auto_commit=False, auto_offset_reset="earliest",
                fetch_max_wait_ms=200, **CLIENT_TIMEOUTS)
    conf.update(kw)
    c = KafkaConsumer(**conf)
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    c.assign(tps)
    c.seek_to_beginning(*tps)
    return c, tps


def consume_n(consumer, n, timeout=90.0):
    """Poll until n records have been read (or the timeout); returns them in poll order."""
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        for _tp, recs in consumer.poll(timeout_ms=500, max_records=5000).items():
            out.extend(recs)
    return out
