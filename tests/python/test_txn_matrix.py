"""Transactions across the real clients (tests/txn/README.md): for each client's transactional
producer (confluent-kafka = librdkafka, Java kafka-clients 4.4, franz-go) and its read_committed
consumer: committed records are visible, aborted ones never (no aborted read), an open
transaction holds read_committed back at the LSO while read_uncommitted sees it, a second
producer with the same transactional id fences the first, and offsets sent to a transaction
become the group's committed offsets only when it commits.

The broker is started as the other tests start it ($STROM_BIN, e.g. scripts/kafka-as-strom.sh
for Apache Kafka 4.4); STROM_BOOTSTRAP=host:port uses a running broker.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TXN = REPO / "tests" / "txn"
CLIENTS = ["confluent", "java", "franz-go"]
# clients whose harness can send offsets to a transaction for a group without members
OFFSETS_CLIENTS = ["confluent", "java"]


class ToolMissing(RuntimeError):
    pass


def _run(cmd, cwd=None):
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed:\n{p.stdout}\n{p.stderr}")


@pytest.fixture(scope="module")
def toolchain():
    work = Path(tempfile.mkdtemp(prefix="txn-tools-"))
    built = {}

    def command(client):
        if client in built:
            return built[client]
        if client == "confluent":
            cmd = [sys.executable, str(TXN / "python" / "worker.py")]
        elif client == "java":
            libs = REPO / ".cache" / "kafka-4.4" / "libs"
            if not (libs / ".complete").exists() or not shutil.which("javac"):
                raise ToolMissing("java harness: javac or the Kafka jars missing "
                                  "(make kafka-ref-fetch)")
            out = work / "java-classes"
            out.mkdir(exist_ok=True)
            _run([shutil.which("javac"), "-d", str(out), "-cp", f"{libs}/*",
                  str(TXN / "java" / "TxnWorker.java")])
            cmd = ["java", "-Xmx128m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
                   "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                   "-cp", f"{out}:{libs}/*", "TxnWorker"]
        elif client == "franz-go":
            go = shutil.which("go")
            if not go:
                raise ToolMissing("franz-go harness: `go` not installed")
            out = work / "franz-txn-worker"
            _run([go, "build", "-o", str(out), "."], cwd=TXN / "go")
            cmd = [str(out)]
        else:
            raise ValueError(client)
        built[client] = cmd
        return cmd

    yield command
    shutil.rmtree(work, ignore_errors=True)


def _command_or_skip(toolchain, client):
    try:
        return toolchain(client)
    except ToolMissing as e:
        if os.environ.get("CI"):
            raise
        pytest.skip(str(e))


class Worker:
    """One harness process: JSON commands on stdin, one JSON answer per line on stdout."""

    def __init__(self, cmd, cfg, log):
        self.log_path = log
        self.log = open(log, "ab")
        self.proc = subprocess.Popen([*cmd, json.dumps(cfg)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log, text=True,
                                     start_new_session=True)

    def call(self, op, **kw):
        self.proc.stdin.write(json.dumps(dict(op=op, **kw)) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError(f"harness exited during {op} (code {self.proc.wait()})")
        try:
            return json.loads(line)
        except json.JSONDecodeError:
            raise AssertionError(f"harness answered {op} with {line!r}") from None

    def ok(self, op, **kw):
        a = self.call(op, **kw)
        assert a["ok"], f"{op} failed: {a}"
        return a

    def close(self):
        try:
            if self.proc.poll() is None:
                self.call("close")
                self.proc.wait(timeout=20)
        except Exception:
            pass
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self.log.close()


@pytest.fixture
def workers(tmp_path):
    started = []

    def start(cmd, **cfg):
        w = Worker(cmd, cfg, tmp_path / f"worker-{len(started)}.log")
        started.append(w)
        return w

    yield start
    for w in started:
        w.close()


def _values(answer):
    return [r[2] for r in answer["records"]]


def _prefixed(values, prefix):
    return sorted(v for v in values if v.startswith(prefix + "-"))


def _expected(prefix, n):
    return sorted(f"{prefix}-{i}" for i in range(n))


def _create_topic(bootstrap, topic, partitions=3):
    from kafka_helpers import create_topic
    create_topic(bootstrap, topic, partitions=partitions)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("client", CLIENTS)
def test_commit_abort_open_and_fencing(client, bootstrap, toolchain, workers):
    cmd = _command_or_skip(toolchain, client)
    topic = f"txn-{client}-{uuid.uuid4().hex[:8]}"
    _create_topic(bootstrap, topic)
    tid = f"tid-{topic}"
    p1 = workers(cmd, bootstrap=bootstrap, transactional_id=tid)
    rc = workers(cmd, bootstrap=bootstrap, isolation="read_committed", group=f"rc-{topic}")
    ru = workers(cmd, bootstrap=bootstrap, isolation="read_uncommitted", group=f"ru-{topic}")

    p1.ok("init")
    p1.ok("begin")
    p1.ok("send", topic=topic, prefix="A", n=60)
    p1.ok("commit")
    p1.ok("begin")
    p1.ok("send", topic=topic, prefix="B", n=60)
    p1.ok("abort")
    p1.ok("begin")
    p1.ok("send", topic=topic, prefix="C", n=30)

    # C is open: read_committed stops at the LSO, read_uncommitted sees everything
    seen = _values(rc.ok("read", topic=topic, idle_ms=2500))
    assert _prefixed(seen, "A") == _expected("A", 60)
    assert not _prefixed(seen, "B"), "aborted records read under read_committed"
    assert not _prefixed(seen, "C"), "records of an open transaction read under read_committed"
    seen_ru = _values(ru.ok("read", topic=topic, idle_ms=2500))
    for prefix, n in (("A", 60), ("B", 60), ("C", 30)):
        assert _prefixed(seen_ru, prefix) == _expected(prefix, n), prefix
    lso = rc.ok("end_offsets", topic=topic)["end_offsets"]
    hw = ru.ok("end_offsets", topic=topic)["end_offsets"]
    assert all(lso[p] <= hw[p] for p in hw), (lso, hw)
    assert any(lso[p] < hw[p] for p in hw), f"the open transaction must hold an LSO back: {lso} {hw}"

    p1.ok("commit")
    seen = _values(rc.ok("read", topic=topic, idle_ms=2500))
    assert _prefixed(seen, "A") == _expected("A", 60)
    assert _prefixed(seen, "C") == _expected("C", 30)
    assert not _prefixed(seen, "B")
    assert len(seen) == 90, "no duplicates"
    lso = rc.ok("end_offsets", topic=topic)["end_offsets"]
    hw = ru.ok("end_offsets", topic=topic)["end_offsets"]
    assert lso == hw, "with no open transaction the LSO is the high watermark"

    # zombie fencing: a new instance with the same transactional id fences p1
    p2 = workers(cmd, bootstrap=bootstrap, transactional_id=tid)
    p2.ok("init")
    fenced = []
    for op, kw in (("begin", {}), ("send", dict(topic=topic, prefix="D", n=10)), ("commit", {})):
        a = p1.call(op, **kw)
        if not a["ok"]:
            fenced.append(a)
            break
    assert fenced, "the fenced producer's transaction went through"
    p2.ok("begin")
    p2.ok("send", topic=topic, prefix="E", n=20)
    p2.ok("commit")
    seen = _values(rc.ok("read", topic=topic, idle_ms=2500))
    assert not _prefixed(seen, "D"), "a zombie's records are visible"
    assert _prefixed(seen, "E") == _expected("E", 20)
    assert len(seen) == 110


@pytest.mark.timeout(300)
@pytest.mark.parametrize("client", OFFSETS_CLIENTS)
def test_offsets_committed_with_the_transaction(client, bootstrap, toolchain, workers):
    from kafka_helpers import admin_client
    from kafka.structs import TopicPartition
    cmd = _command_or_skip(toolchain, client)
    topic = f"txo-{client}-{uuid.uuid4().hex[:8]}"
    _create_topic(bootstrap, topic, partitions=1)
    group = f"g-{topic}"
    p = workers(cmd, bootstrap=bootstrap, transactional_id=f"tid-{topic}")
    p.ok("init")
    p.ok("begin")
    p.ok("send", topic=topic, prefix="A", n=5)
    p.ok("send_offsets", group=group, offsets=[[topic, 0, 42]])
    p.ok("commit")
    admin = admin_client(bootstrap)
    try:
        committed = admin.list_consumer_group_offsets(group)
        assert committed[TopicPartition(topic, 0)].offset == 42
        p.ok("begin")
        p.ok("send", topic=topic, prefix="B", n=5)
        p.ok("send_offsets", group=group, offsets=[[topic, 0, 99]])
        p.ok("abort")
        committed = admin.list_consumer_group_offsets(group)
        assert committed[TopicPartition(topic, 0)].offset == 42, "an aborted offset commit applied"
    finally:
        admin.close()


@pytest.mark.timeout(300)
def test_every_client_reads_every_clients_transactions(bootstrap, toolchain, workers):
    """Cross-client: each producer's committed and aborted transactions, read by each
    client's read_committed consumer."""
    cmds = {}
    for c in CLIENTS:
        cmds[c] = _command_or_skip(toolchain, c)
    topic = f"txx-{uuid.uuid4().hex[:8]}"
    _create_topic(bootstrap, topic)
    for c, cmd in cmds.items():
        p = workers(cmd, bootstrap=bootstrap, transactional_id=f"tid-{topic}-{c}")
        p.ok("init")
        p.ok("begin")
        p.ok("send", topic=topic, prefix=f"{c}.ok", n=25)
        p.ok("commit")
        p.ok("begin")
        p.ok("send", topic=topic, prefix=f"{c}.ab", n=25)
        p.ok("abort")
    for c, cmd in cmds.items():
        r = workers(cmd, bootstrap=bootstrap, isolation="read_committed", group=f"x-{c}")
        seen = _values(r.ok("read", topic=topic, idle_ms=2500))
        for prod in cmds:
            assert _prefixed(seen, f"{prod}.ok") == _expected(f"{prod}.ok", 25), (c, prod)
            assert not _prefixed(seen, f"{prod}.ab"), f"{c} read {prod}'s aborted records"
        assert len(seen) == 25 * len(cmds)
