"""Orchestration of the consumer-group client matrix: starts client harness processes, produces
keyed records, drives the scenarios and writes the orchestrator's report for the checker.

Used by tests/python/test_groups_matrix.py; see tests/groups/README.md.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]

SESSION_TIMEOUT_MS = 6000
HEARTBEAT_MS = 1000
# the broker properties the matrix starts Strom (or Kafka through kafka-as-strom.sh) with:
# no initial rebalance delay, and KIP-848 sessions as short as the classic ones
BROKER_PROPS = {
    "group.initial.rebalance.delay.ms": 0,
    "group.consumer.session.timeout.ms": SESSION_TIMEOUT_MS,
    "group.consumer.min.session.timeout.ms": SESSION_TIMEOUT_MS,
    "group.consumer.heartbeat.interval.ms": HEARTBEAT_MS,
    "group.consumer.min.heartbeat.interval.ms": HEARTBEAT_MS,
}
# a killed member's partitions must be owned by others this long after the kill: its session
# expires, then the survivors rejoin (classic) or are reconciled (KIP-848)
REBALANCE_WITHIN_MS = SESSION_TIMEOUT_MS + 10000


def now_ms():
    return int(time.time() * 1000)


class Toolchain:
    """Builds each client's harness once per test session (skips what is not installed)."""

    def __init__(self, workdir: Path):
        self.workdir = workdir
        self._built = {}

    def command(self, client: str):
        if client not in self._built:
            self._built[client] = getattr(self, "_build_" + client.replace("-", "_"))()
        return self._built[client]

    def _build_kafka_python(self):
        return [sys.executable, str(HERE / "python" / "worker.py"), "kafka-python"]

    def _build_confluent(self):
        return [sys.executable, str(HERE / "python" / "worker.py"), "confluent"]

    def _build_java(self):
        libs = REPO / ".cache" / "kafka-4.4" / "libs"
        if not (libs / ".complete").exists() or not shutil.which("javac"):
            raise ToolMissing(f"java harness: javac or Kafka jars in {libs} missing "
                              "(make kafka-ref-fetch)")
        out = self.workdir / "java-classes"
        out.mkdir(exist_ok=True)
        cp = f"{libs}/*"
        run([shutil.which("javac"), "-d", str(out), "-cp", cp,
             str(HERE / "java" / "GroupWorker.java")])
        return ["java", "-Xmx128m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
                "-cp", f"{out}:{libs}/*", "GroupWorker"]

    def _build_franz_go(self):
        go = shutil.which("go")
        if not go:
            raise ToolMissing("franz-go harness: `go` not installed")
        out = self.workdir / "franz-worker"
        run([go, "build", "-o", str(out), "."], cwd=HERE / "go")
        return [str(out)]

    def _build_kafkajs(self):
        node = shutil.which("node")
        if not node or not (HERE / "node" / "node_modules" / "kafkajs").exists():
            raise ToolMissing("kafkajs harness: node or tests/groups/node/node_modules missing "
                              "(npm ci --prefix tests/groups/node)")
        return [node, str(HERE / "node" / "worker.js")]


class ToolMissing(RuntimeError):
    pass


def run(cmd, cwd=None):
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed:\n{p.stdout}\n{p.stderr}")


class Worker:
    """One consumer process (one incarnation of a member)."""

    def __init__(self, run, member, cmd, cfg):
        self.member = member
        self.report = run.dir / f"{member.replace('#', '_')}.jsonl"
        cfg = dict(cfg, member=member, report=str(self.report))
        self.log = open(run.dir / f"{member.replace('#', '_')}.log", "ab")
        self.proc = subprocess.Popen([*cmd, json.dumps(cfg)], stdout=self.log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)

    def alive(self):
        return self.proc.poll() is None

    def close(self, timeout=40.0):
        """SIGTERM: the harness commits, closes the consumer and exits 0."""
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(
                f"{self.member} did not exit within {timeout}s of SIGTERM") from None
        self.log.close()
        return rc

    def kill(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        self.log.close()


class Run:
    """One run of one client configuration: a topic, a group, the reports directory."""

    def __init__(self, bootstrap, client, strategy, cmd, name, partitions=10):
        self.bootstrap = bootstrap
        self.client = client
        self.dir = Path(tempfile.mkdtemp(prefix=f"groups-{name}-"))
        self.topic = f"groups-{name}-{os.urandom(4).hex()}"
        self.group = f"g-{self.topic}"
        self.cmd = cmd
        self.partitions = partitions
        self.cfg = dict(bootstrap=bootstrap, topic=self.topic, group=self.group,
                        strategy=strategy, instance_id=None,
                        session_timeout_ms=SESSION_TIMEOUT_MS, heartbeat_interval_ms=HEARTBEAT_MS,
                        metadata_max_age_ms=2000, max_poll_records=50)
        self.workers = {}
        self._orch = open(self.dir / "orchestrator.jsonl", "a", encoding="utf-8")
        self.produced = 0
        from kafka_helpers import create_topic, producer
        create_topic(bootstrap, self.topic, partitions=partitions)
        self.producer = producer(bootstrap)

    def event(self, ev, **kw):
        kw.update(ev=ev, ts=now_ms())
        self._orch.write(json.dumps(kw) + "\n")
        self._orch.flush()

    def start(self, member, instance_id=None):
        cfg = dict(self.cfg, instance_id=instance_id)
        w = Worker(self, member, self.cmd, cfg)
        self.workers[member] = w
        return w

    def produce(self, n, partitions=None):
        """n keyed records (round over `partitions` explicitly when given); logs each offset."""
        futs = []
        for i in range(n):
            key = f"k{self.produced + i}"
            part = None if partitions is None else partitions[i % len(partitions)]
            futs.append((key, self.producer.send(self.topic, key=key.encode(),
                                                 value=f"v{self.produced + i}".encode(),
                                                 partition=part)))
        self.producer.flush(timeout=30)
        for key, f in futs:
            md = f.get(timeout=30)
            self.event("produced", partition=md.partition, offset=md.offset, key=key)
        self.produced += n

    def add_partitions(self, total):
        from kafka.admin import NewPartitions
        from kafka_helpers import admin_client, producer, wait_for_topic
        admin = admin_client(self.bootstrap)
        try:
            admin.create_partitions({self.topic: NewPartitions(total_count=total)})
            wait_for_topic(admin, self.topic, total)
        finally:
            admin.close()
        self.partitions = total
        # a new producer, so that it knows the new partitions at once
        self.producer.close()
        self.producer = producer(self.bootstrap)

    # --- reading the reports while the run goes on ---
    def _events(self):
        out = []
        for w in self.workers.values():
            try:
                text = w.report.read_text(encoding="utf-8")
            except FileNotFoundError:
                continue
            for line in text.splitlines():
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    pass
        return out

    def owned(self):
        """member -> partitions it owns now, for members that have not closed or been killed."""
        own = {}
        for ev in self._events():
            m, kind = ev.get("member"), ev.get("ev")
            if m is None or not self.workers[m].alive():
                continue
            s = own.setdefault(m, set())
            if kind == "assigned":
                s.update(ev["partitions"])
            elif kind in ("revoked", "lost"):
                s.difference_update(ev["partitions"])
            elif kind == "closing":
                s.clear()
        return own

    def wait_stable(self, members, partitions, timeout=60.0, what=""):
        """Until exactly `members` own all `partitions`, each at least one, with no overlap."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            for m in members:
                if not self.workers[m].alive():
                    raise AssertionError(f"{m} exited (rc {self.workers[m].proc.returncode}): "
                                         f"{self.log_tail(m)}")
            last = self.owned()
            sets = [last.get(m, set()) for m in members]
            union = set().union(*sets)
            others = [m for m, s in last.items() if m not in members and s]
            if union == set(range(partitions)) and all(sets) and not others \
                    and sum(map(len, sets)) == partitions:
                return last
            time.sleep(0.2)
        raise AssertionError(f"group not stable ({what}) within {timeout}s: {last}")

    def wait_consumed(self, timeout=60.0, what=""):
        """Until every produced record is reported consumed and committed."""
        want = set()
        with open(self.dir / "orchestrator.jsonl", encoding="utf-8") as f:
            for line in f:
                ev = json.loads(line)
                if ev["ev"] == "produced":
                    want.add((ev["partition"], ev["offset"]))
        deadline = time.monotonic() + timeout
        missing = want
        while time.monotonic() < deadline:
            evs = self._events()
            got = {(e["partition"], e["offset"]) for e in evs if e.get("ev") == "record"}
            committed = {}
            for e in evs:
                if e.get("ev") == "commit":
                    for p, o in e["offsets"].items():
                        committed[int(p)] = max(committed.get(int(p), 0), o)
            missing = {r for r in want if r not in got or committed.get(r[0], 0) <= r[1]}
            if not missing:
                return
            time.sleep(0.2)
        raise AssertionError(f"{len(missing)} records not consumed+committed ({what}) within "
                             f"{timeout}s, e.g. {sorted(missing)[:5]}")

    def log_tail(self, member, n=30):
        try:
            lines = (self.dir / f"{member.replace('#', '_')}.log").read_text(
                errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-n:])

    def finish(self):
        """Closes every live worker, records end and committed offsets, runs the checker."""
        from kafka import KafkaConsumer, TopicPartition
        from kafka_helpers import admin_client
        for w in self.workers.values():
            if w.alive():
                w.close()
        self.producer.close()
        c = KafkaConsumer(bootstrap_servers=self.bootstrap, group_id=None)
        try:
            tps = [TopicPartition(self.topic, p) for p in range(self.partitions)]
            ends = c.end_offsets(tps)
        finally:
            c.close()
        admin = admin_client(self.bootstrap)
        try:
            committed = admin.list_consumer_group_offsets(self.group)
        finally:
            admin.close()
        self.event("end_offsets", offsets={str(tp.partition): o for tp, o in ends.items()})
        self.event("final_committed", offsets={str(tp.partition): om.offset
                                               for tp, om in committed.items()
                                               if tp.topic == self.topic})
        self._orch.close()
        sys.path.insert(0, str(HERE))
        import checker
        return checker.check(checker.load_run(self.dir))

    def abort(self):
        for w in self.workers.values():
            if w.alive():
                w.kill()
        try:
            self.producer.close(timeout=5)
        except Exception:  # noqa: BLE001 - best effort on a failed run
            pass
