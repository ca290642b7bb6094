"""Transactions harness for confluent-kafka (librdkafka's transactional producer and
read_committed consumer). Protocol: tests/txn/README.md.

    worker.py CONFIG_JSON      then one JSON command per stdin line, one JSON answer per line
"""

import json
import sys
import time

from confluent_kafka import (Consumer, KafkaException, Producer, TopicPartition,
                             OFFSET_BEGINNING)
from confluent_kafka.admin import AdminClient


def err_answer(e):
    if isinstance(e, KafkaException) and e.args and hasattr(e.args[0], "code"):
        k = e.args[0]
        return {"ok": False, "error": str(k), "code": k.name(), "fatal": k.fatal(),
                "abortable": k.txn_requires_abort()}
    return {"ok": False, "error": repr(e), "code": type(e).__name__, "fatal": False,
            "abortable": False}


class Worker:
    def __init__(self, cfg):
        self.cfg = cfg
        self.producer = None
        self.consumer = None
        self.timeout = 30

    def producer_conf(self):
        return {"bootstrap.servers": self.cfg["bootstrap"],
                "transactional.id": self.cfg["transactional_id"],
                "transaction.timeout.ms": self.cfg.get("transaction_timeout_ms", 60000),
                "client.id": self.cfg.get("client_id", "txn-confluent"),
                "linger.ms": 5}

    def consumer_conf(self):
        return {"bootstrap.servers": self.cfg["bootstrap"],
                "group.id": self.cfg.get("group", "txn-reader"),
                "enable.auto.commit": False,
                "isolation.level": self.cfg.get("isolation", "read_committed"),
                "auto.offset.reset": "earliest",
                "client.id": self.cfg.get("client_id", "txn-confluent")}

    # --- producer ---
    def op_init(self, _):
        self.producer = Producer(self.producer_conf())
        self.producer.init_transactions(self.timeout)

    def op_begin(self, _):
        self.producer.begin_transaction()

    def op_send(self, c):
        failed = []

        def cb(err, _msg):
            if err is not None:
                failed.append(err)
        for i in range(c["n"]):
            v = f"{c['prefix']}-{i}".encode()
            self.producer.produce(c["topic"], key=v, value=v, on_delivery=cb)
        left = self.producer.flush(self.timeout)
        if failed:
            raise KafkaException(failed[0])
        if left:
            raise RuntimeError(f"{left} records not delivered within {self.timeout}s")

    def op_send_offsets(self, c):
        cons = Consumer({"bootstrap.servers": self.cfg["bootstrap"], "group.id": c["group"],
                         "enable.auto.commit": False})
        try:
            offsets = [TopicPartition(t, p, o) for t, p, o in c["offsets"]]
            self.producer.send_offsets_to_transaction(offsets, cons.consumer_group_metadata(),
                                                      self.timeout)
        finally:
            cons.close()

    def op_commit(self, _):
        self.producer.commit_transaction(self.timeout)

    def op_abort(self, _):
        self.producer.abort_transaction(self.timeout)

    # --- consumer ---
    def ensure_consumer(self):
        if self.consumer is None:
            self.consumer = Consumer(self.consumer_conf())

    def partitions(self, topic):
        md = self.consumer.list_topics(topic, timeout=10)
        return sorted(md.topics[topic].partitions)

    def op_read(self, c):
        self.ensure_consumer()
        topic = c["topic"]
        tps = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in self.partitions(topic)]
        self.consumer.assign(tps)
        out = []
        idle = c.get("idle_ms", 3000) / 1000
        deadline = time.monotonic() + c.get("max_ms", 60000) / 1000
        last = time.monotonic()
        while time.monotonic() < deadline and time.monotonic() - last < idle:
            for m in self.consumer.consume(500, 0.2):
                if m.error():
                    continue
                out.append([m.partition(), m.offset(), m.value().decode()])
                last = time.monotonic()
        self.consumer.unassign()
        return {"records": out}

    def op_end_offsets(self, c):
        self.ensure_consumer()
        topic = c["topic"]
        ends = {}
        for p in self.partitions(topic):
            # ListOffsets with the consumer's isolation level: the LSO under read_committed
            _lo, hi = self.consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10,
                                                          cached=False)
            ends[str(p)] = hi
        return {"end_offsets": ends}

    def op_close(self, _):
        if self.producer is not None:
            self.producer.flush(5)
        if self.consumer is not None:
            self.consumer.close()
        return {"closed": True}


def main():
    cfg = json.loads(sys.argv[1])
    w = Worker(cfg)
    for line in sys.stdin:
        if not line.strip():
            continue
        c = json.loads(line)
        try:
            res = getattr(w, "op_" + c["op"])(c) or {}
            ans = {"ok": True, **res}
        except Exception as e:  # every failure is an answer; the test judges it
            ans = err_answer(e)
        print(json.dumps(ans), flush=True)
        if c["op"] == "close":
            break


if __name__ == "__main__":
    main()
