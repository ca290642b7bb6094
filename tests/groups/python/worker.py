#!/usr/bin/env python3
"""Group consumer harness for kafka-python and confluent-kafka (librdkafka).

    worker.py kafka-python|confluent CONFIG_JSON

CONFIG_JSON (the same for every client's harness, see tests/groups/README.md): bootstrap, topic,
group, member, report, strategy (range | roundrobin | sticky | cooperative-sticky | consumer),
instance_id (or null), session_timeout_ms, heartbeat_interval_ms, metadata_max_age_ms,
max_poll_records.

Subscribes, and per polled batch reports each record, then commits the batch's next offsets
synchronously; a failed commit stays pending and is retried with the next batch or in the
revoke callback. Assignment / revocation / loss are reported from the rebalance callbacks.
SIGTERM: stop polling, commit what is pending, close (which leaves the group unless static).
"""

import json
import logging
import os
import signal
import sys
import time

stop = False


def on_term(_sig, _frm):
    global stop
    stop = True


class Reporter:
    def __init__(self, path, member):
        self.f = open(path, "a", encoding="utf-8")
        self.member = member

    def __call__(self, ev, **kw):
        kw.update(ev=ev, member=self.member, ts=int(time.time() * 1000))
        # one write per line, flushed at once: a SIGKILL loses at most the line being written
        self.f.write(json.dumps(kw) + "\n")
        self.f.flush()


def run_kafka_python(cfg, report):
    from kafka import ConsumerRebalanceListener, KafkaConsumer, TopicPartition
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
    from kafka.structs import OffsetAndMetadata

    assignors = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor,
                 "sticky": StickyPartitionAssignor}
    if cfg["strategy"] not in assignors or cfg.get("instance_id"):
        raise SystemExit(f"kafka-python: unsupported {cfg['strategy']} / static membership")
    topic = cfg["topic"]
    c = KafkaConsumer(
        bootstrap_servers=cfg["bootstrap"], group_id=cfg["group"], client_id=cfg["member"],
        enable_auto_commit=False, auto_offset_reset="earliest",
        session_timeout_ms=cfg["session_timeout_ms"],
        heartbeat_interval_ms=cfg["heartbeat_interval_ms"],
        metadata_max_age_ms=cfg["metadata_max_age_ms"],
        max_poll_records=cfg["max_poll_records"], fetch_max_wait_ms=200,
        partition_assignment_strategy=[assignors[cfg["strategy"]]],
        request_timeout_ms=30000, api_version_auto_timeout_ms=10000)
    pending = {}

    def gen():
        # kafka-python has no public accessor for the generation the member joined with
        g = getattr(c._coordinator, "_generation", None)
        return getattr(g, "generation_id", None)

    def commit(parts):
        offs = {TopicPartition(topic, p): OffsetAndMetadata(pending[p], "", -1)
                for p in parts if p in pending}
        if not offs:
            return
        try:
            c.commit(offs)
        except Exception as e:  # noqa: BLE001 - reported, kept pending, retried
            report("commit_failed", error=repr(e))
            return
        report("commit", gen=gen(), offsets={str(tp.partition): om.offset
                                             for tp, om in offs.items()})
        for tp in offs:
            pending.pop(tp.partition, None)

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            parts = [tp.partition for tp in revoked]
            commit(parts)
            for p in parts:
                pending.pop(p, None)
            report("revoked", partitions=sorted(parts))

        def on_partitions_assigned(self, assigned):
            report("assigned", gen=gen(), partitions=sorted(tp.partition for tp in assigned))

    c.subscribe([topic], listener=Listener())
    report("start")
    last_gen = None
    while not stop:
        batch = c.poll(timeout_ms=500)
        g = gen()
        if g != last_gen:  # a generation change that came with no callback
            last_gen = g
            report("generation", gen=g)
        for tp, msgs in batch.items():
            for m in msgs:
                report("record", gen=gen(), partition=tp.partition, offset=m.offset,
                       key=m.key.decode() if m.key is not None else None)
                pending[tp.partition] = m.offset + 1
        commit(list(pending))
    report("closing")
    commit(list(pending))
    c.close(autocommit=False)
    report("closed")


def cgmd_generation(c):
    """The generation in librdkafka's serialized group metadata: "CGMDv2:", int32 little-endian."""
    try:
        raw = bytes(c.consumer_group_metadata())
        if raw.startswith(b"CGMDv2:"):
            return int.from_bytes(raw[7:11], "little", signed=True)
    except Exception:  # noqa: BLE001 - the generation is informative only
        pass
    return None


def run_confluent(cfg, report):
    from confluent_kafka import Consumer, TopicPartition

    topic = cfg["topic"]
    conf = {"bootstrap.servers": cfg["bootstrap"], "group.id": cfg["group"],
            "client.id": cfg["member"], "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "topic.metadata.refresh.interval.ms": cfg["metadata_max_age_ms"],
            "fetch.wait.max.ms": 200, "log_level": 4}
    if cfg["strategy"] == "consumer":
        # KIP-848: the broker assigns; session and heartbeat are the broker's configs
        conf["group.protocol"] = "consumer"
    else:
        conf.update({"partition.assignment.strategy": cfg["strategy"],
                     "session.timeout.ms": cfg["session_timeout_ms"],
                     "heartbeat.interval.ms": cfg["heartbeat_interval_ms"]})
    if cfg.get("instance_id"):
        conf["group.instance.id"] = cfg["instance_id"]
    c = Consumer(conf)
    pending = {}

    def commit(parts):
        offs = [TopicPartition(topic, p, pending[p]) for p in parts if p in pending]
        if not offs:
            return
        try:
            c.commit(offsets=offs, asynchronous=False)
        except Exception as e:  # noqa: BLE001 - reported, kept pending, retried
            report("commit_failed", error=repr(e))
            return
        report("commit", gen=cgmd_generation(c),
               offsets={str(tp.partition): tp.offset for tp in offs})
        for tp in offs:
            pending.pop(tp.partition, None)

    def on_assign(_c, parts):
        report("assigned", gen=cgmd_generation(c), partitions=sorted(tp.partition for tp in parts))

    def on_revoke(_c, parts):
        ps = [tp.partition for tp in parts]
        commit(ps)
        for p in ps:
            pending.pop(p, None)
        report("revoked", partitions=sorted(ps))

    def on_lost(_c, parts):
        ps = [tp.partition for tp in parts]
        for p in ps:
            pending.pop(p, None)
        report("lost", partitions=sorted(ps))

    c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
    report("start")
    last_gen = None
    while not stop:
        msgs = c.consume(num_messages=cfg["max_poll_records"], timeout=0.5)
        g = cgmd_generation(c)
        if g != last_gen:  # a generation change that came with no callback
            last_gen = g
            report("generation", gen=g)
        for m in msgs:
            if m.error():
                continue  # partition EOF and transient errors: librdkafka retries
            key = m.key()
            report("record", gen=cgmd_generation(c), partition=m.partition(), offset=m.offset(),
                   key=key.decode() if key is not None else None)
            pending[m.partition()] = m.offset() + 1
        commit(list(pending))
    report("closing")
    commit(list(pending))
    c.close()
    report("closed")


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("kafka-python", "confluent"):
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    cfg = json.loads(sys.argv[2])
    # the clients' own log lines go to the harness log (stderr), to explain a failed run
    logging.basicConfig(level=logging.INFO if os.environ.get("GROUPS_DEBUG") else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    signal.signal(signal.SIGTERM, on_term)
    report = Reporter(cfg["report"], cfg["member"])
    (run_kafka_python if sys.argv[1] == "kafka-python" else run_confluent)(cfg, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
