"""kafka-python's admin client asking for absurd partition counts (issue 18, defect 1).

kafka-python sends whatever count it is given (librdkafka refuses such counts client-side);
before the fix one CreateTopics of 2,000,000,000 partitions made a Strom node allocate tens of
GB. Kafka 4.4's controller refuses a request whose partitions add up to more than 10,000
(`ReplicationControlManager.MAX_PARTITIONS_PER_BATCH`) with POLICY_VIOLATION, which
kafka-python raises as PolicyViolationError. Runs against Kafka too (STROM_BOOTSTRAP); the
memory check needs the local strom process.
"""

import pytest
from kafka.admin import NewPartitions, NewTopic
from kafka.errors import PolicyViolationError

from kafka_helpers import admin_client, create_topic, producer

# An idle node sits near 30 MiB; the bound leaves room for the test's own traffic.
RSS_BOUND_KIB = 256 * 1024


def peak_rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM in /proc status")


@pytest.mark.parametrize("count", [2_000_000_000, 2**31 - 1, 1_000_000, 100_000])
def test_create_topics_huge_count_is_refused(broker, bootstrap, topic_name, count):
    admin = admin_client(bootstrap)
    try:
        # kafka-python raises the topic's error with the response (and its message) in it.
        with pytest.raises(PolicyViolationError) as e:
            admin.create_topics(
                [NewTopic(name=topic_name, num_partitions=count, replication_factor=1)])
        assert "Excessively large number of partitions per request" in str(e.value)
    finally:
        admin.close()
    if not broker.external:
        assert peak_rss_kib(broker.strom.proc.pid) < RSS_BOUND_KIB
    # The node keeps serving.
    create_topic(bootstrap, topic_name, partitions=1)
    p = producer(bootstrap)
    try:
        p.send(topic_name, b"still serving").get(timeout=30)
    finally:
        p.close()


@pytest.mark.parametrize("count", [2_000_000_000, 1_000_000, 100_000])
def test_create_partitions_huge_count_is_refused(broker, bootstrap, topic_name, count):
    create_topic(bootstrap, topic_name, partitions=1)
    admin = admin_client(bootstrap)
    try:
        with pytest.raises(PolicyViolationError) as e:
            admin.create_partitions({topic_name: NewPartitions(total_count=count)})
        assert "Excessively large number of additional partitions per request" in str(e.value)
        # A reasonable growth still works.
        admin.create_partitions({topic_name: NewPartitions(total_count=3)})
    finally:
        admin.close()
    if not broker.external:
        assert peak_rss_kib(broker.strom.proc.pid) < RSS_BOUND_KIB
