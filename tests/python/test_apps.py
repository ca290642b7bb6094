"""Kafka Streams and Kafka Connect, unchanged, on Strom (tests/apps/README.md).

Each scenario runs on a 3-node Strom cluster ($STROM_BIN, else target/debug/strom) and on Apache
Kafka 4.4 (scripts/kafka-ref.sh, one node: the oracle that the test itself is right):

- test_streams_word_count_eos: the tests/apps WordCountApp (word count KTable + tumbling-window
  counts, exactly_once_v2, replication factor 3 on Strom) on deterministic input: the last
  committed value of every key equals the counts computed from the input topic, and every key's
  values only grow; after a clean stop and a restart with a wiped state dir (restored from the
  compacted changelogs) and after SIGKILL of a broker mid-run (Strom), counts are still exact.
- test_connect_distributed_file_pipeline: two ConnectDistributed workers (compacted config,
  offset and status topics, which Connect checks with DescribeConfigs), FileStreamSource ->
  topic -> FileStreamSink: every line arrives; SIGKILL of the worker running the source task
  moves its tasks to the other worker, which resumes from the committed source offset (only the
  lines after that offset repeat, as Connect's at-least-once allows).

APPS_LOG_LEVEL=DEBUG gives the child JVMs' org.apache.kafka DEBUG logs (kept with
STROM_KEEP_DATA=1) to compare a run on Strom with one on Kafka; APPS_BROKERS=strom (or kafka)
runs one side only.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter, defaultdict

import pytest

from apps_harness import (REPO, KafkaRef, Proc, StromCluster, build_apps, cleaned_partitions,
                          free_ports, java_cmd, log4j_config, new_tmp, tail, wait_until)

pytestmark = pytest.mark.timeout(420)
# kafka-python logs every refused connection to the killed broker as an error: expected here
logging.getLogger("kafka").setLevel(logging.CRITICAL)

STROM_SETTINGS = [
    "broker.session.timeout.ms=3000", "broker.heartbeat.interval.ms=500",
    "replica.fetch.wait.max.ms=100", "replica.lag.time.max.ms=5000",
    "group.initial.rebalance.delay.ms=0", "min.insync.replicas=2",
    # the log cleaner looks for dirty logs every second instead of every 15 s
    "log.cleaner.backoff.ms=1000",
]
KAFKA_PROPS = ["group.initial.rebalance.delay.ms=0", "log.cleaner.backoff.ms=1000"]
BROKERS = [b for b in os.environ.get("APPS_BROKERS", "strom,kafka").split(",") if b]

VOCAB = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india",
         "juliet", "kilo", "lima"]
WINDOW_MS = 2000
LINE_GAP_MS = 50
# compacted topics (the app's changelogs, its output topics) roll a segment every second and are
# cleanable at once, so that a broker with a log cleaner compacts them while the test runs: the
# restore then reads a cleaned changelog, the output is read while it is being cleaned
COMPACT_NOW = {"segment.ms": "1000", "min.cleanable.dirty.ratio": "0.01"}


@pytest.fixture(scope="module")
def apps_classpath():
    try:
        return build_apps()
    except FileNotFoundError as e:
        if os.environ.get("CI"):
            raise
        pytest.skip(str(e))


@pytest.fixture(scope="module", params=BROKERS)
def target(request):
    tmp = new_tmp(f"apps-{request.param}-")
    if request.param == "strom":
        binary = os.environ.get("STROM_BIN") or str(REPO / "target" / "debug" / "strom")
        if binary.endswith(".sh"):
            # STROM_BIN=scripts/kafka-as-strom.sh: the Kafka side below is that run already
            shutil.rmtree(tmp, ignore_errors=True)
            pytest.skip("STROM_BIN is a script, not a strom binary: only the Kafka 4.4 side runs")
        if not os.path.exists(binary):
            pytest.fail(f"strom binary not found at {binary}: cargo build -p strom")
        t = StromCluster(binary, tmp, n=3, settings=STROM_SETTINGS)
    else:
        t = KafkaRef(tmp / "kafka", props=KAFKA_PROPS)
    t.tmp = tmp
    failed_before = request.session.testsfailed
    try:
        t.start()
        yield t
    finally:
        t.close()
        if os.environ.get("STROM_KEEP_DATA") or request.session.testsfailed > failed_before:
            print(f"{t.name} data and logs kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture
def procs():
    started = []
    yield started
    for p in started:
        p.kill()


def _log_level():
    return os.environ.get("APPS_LOG_LEVEL", "WARN").upper()


def _admin(target):
    from kafka_helpers import admin_client
    return admin_client(target.bootstrap)


def _create(target, name, partitions, configs=None):
    from kafka.admin import NewTopic
    from kafka_helpers import wait_for_topic
    admin = _admin(target)
    try:
        admin.create_topics([NewTopic(name=name, num_partitions=partitions,
                                      replication_factor=target.replication_factor,
                                      topic_configs=configs or {})])
        wait_for_topic(admin, name, partitions)
    finally:
        admin.close()


def _topic_configs(target, topic):
    from kafka.admin import ConfigResource, ConfigResourceType
    admin = _admin(target)
    try:
        res = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    finally:
        admin.close()
    out = {}
    for r in res:
        for err, msg, _type, _name, entries in r.resources:
            if err:
                return {"error": f"{err} {msg}"}
            for e in entries:
                out[e[0]] = e[1]
    return out


def _read_all(target, topic, isolation="read_uncommitted"):
    """Every record of `topic` up to its end offsets, as (partition, offset, key, value, ts)."""
    from kafka import KafkaConsumer, TopicPartition
    c = KafkaConsumer(bootstrap_servers=target.bootstrap, group_id=None,
                      enable_auto_commit=False, auto_offset_reset="earliest",
                      isolation_level=isolation, fetch_max_wait_ms=200,
                      request_timeout_ms=30000)
    try:
        parts = wait_until(f"partitions of {topic}", 30,
                           lambda: c.partitions_for_topic(topic))
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        ends = c.end_offsets(tps)
        out = []

        def done():
            for _tp, recs in c.poll(timeout_ms=300, max_records=10000).items():
                out.extend(recs)
            return all(c.position(tp) >= ends[tp] for tp in tps)

        wait_until(f"{topic} read to {ends}", 60, done, interval=0)
        return [(r.partition, r.offset, r.key and r.key.decode(),
                 r.value and r.value.decode(), r.timestamp) for r in out]
    finally:
        c.close()


def _log_start_offsets(target, topic):
    from kafka import KafkaConsumer, TopicPartition
    c = KafkaConsumer(bootstrap_servers=target.bootstrap, group_id=None,
                      request_timeout_ms=30000)
    try:
        parts = wait_until(f"partitions of {topic}", 30, lambda: c.partitions_for_topic(topic))
        return {tp.partition: o for tp, o in
                c.beginning_offsets([TopicPartition(topic, p) for p in parts]).items()}
    finally:
        c.close()


# ---------------------------------------------------------------------------- Kafka Streams

class Lines:
    """The deterministic input: line i has 1-4 words of VOCAB, timestamp base + i*LINE_GAP_MS."""

    def __init__(self):
        self.next = 0
        now = int(time.time() * 1000)
        self.base = now - now % 60000 - 600000

    def batch(self, n):
        out = []
        for i in range(self.next, self.next + n):
            words = [VOCAB[(i * 7 + j * 5) % len(VOCAB)] for j in range(1 + i % 4)]
            out.append((" ".join(words), self.base + i * LINE_GAP_MS))
        self.next += n
        return out


def _feed(target, topic, lines):
    from kafka_helpers import producer
    p = producer(target.bootstrap, retries=100, retry_backoff_ms=200)
    try:
        futs = [p.send(topic, value=line.encode(), timestamp_ms=ts) for line, ts in lines]
        p.flush(timeout=120)
        for f in futs:
            f.get(timeout=60)
    finally:
        p.close()


def _expected(target, topic):
    """word -> count and word@windowStart -> count over what the input topic holds (so a
    record the feeding producer wrote twice counts twice, as the app must count it)."""
    counts, windowed = Counter(), Counter()
    for _p, _o, _k, value, ts in _read_all(target, topic):
        for w in value.split():
            counts[w] += 1
            windowed[f"{w}@{ts - ts % WINDOW_MS}"] += 1
    return dict(counts), dict(windowed)


class CommittedView:
    """A read_committed consumer of the output topics that keeps every key's values in order."""

    def __init__(self, target, topics):
        from kafka import KafkaConsumer, TopicPartition
        self.c = KafkaConsumer(bootstrap_servers=target.bootstrap, group_id=None,
                               enable_auto_commit=False, auto_offset_reset="earliest",
                               isolation_level="read_committed", fetch_max_wait_ms=200,
                               request_timeout_ms=30000)
        tps = []
        for t in topics:
            parts = wait_until(f"partitions of {t}", 30, lambda t=t: self.c.partitions_for_topic(t))
            tps += [TopicPartition(t, p) for p in sorted(parts)]
        self.c.assign(tps)
        self.c.seek_to_beginning(*tps)
        self.history = {t: defaultdict(list) for t in topics}

    def poll(self):
        for tp, recs in self.c.poll(timeout_ms=300, max_records=10000).items():
            for r in recs:
                self.history[tp.topic][r.key.decode()].append(int(r.value.decode()))

    def last(self, topic):
        return {k: v[-1] for k, v in self.history[topic].items()}

    def wait_exact(self, expected, timeout, what, diag):
        """Until the last committed value of every key of every topic is the expected one."""
        def check():
            self.poll()
            return all(self.last(t) == exp for t, exp in expected.items())
        try:
            wait_until(what, timeout, check, interval=0)
        except AssertionError:
            msgs = []
            for t, exp in expected.items():
                got = self.last(t)
                bad = {k: (got.get(k), v) for k, v in exp.items() if got.get(k) != v}
                extra = set(got) - set(exp)
                msgs.append(f"{t}: {len(bad)} keys wrong (got, want), e.g. "
                            f"{dict(list(bad.items())[:6])}; unexpected keys {sorted(extra)[:6]}")
            raise AssertionError(f"{what}: " + "; ".join(msgs) + "\n" + diag()) from None

    def check_growing(self):
        """Exactly-once: a key's committed values only grow (a value seen twice or a smaller
        one after a larger means a count was applied twice or lost and re-done)."""
        for t, keys in self.history.items():
            for k, vals in keys.items():
                assert all(a < b for a, b in zip(vals, vals[1:])), \
                    f"{t} key {k}: committed values not strictly increasing: {vals}"

    def close(self):
        self.c.close()


def _start_app(target, classpath, procs, tmp, app_id, state, topics, tag):
    log = tmp / f"streams-{tag}.log"
    cmd = java_cmd(classpath, log4j_config(tmp, _log_level()), "dev.strom.apps.WordCountApp",
                   target.bootstrap, app_id, state, target.replication_factor, *topics,
                   WINDOW_MS, *(f"topic.{k}={v}" for k, v in COMPACT_NOW.items()), heap="384m")
    p = Proc(cmd, log)
    procs.append(p)

    def running():
        if not p.alive():
            raise AssertionError(f"streams app {tag} exited:\n{tail(log)}")
        ls = [x for x in p.lines() if x.startswith("STATE ")]
        return ls and ls[-1] == "STATE RUNNING"
    wait_until(f"streams app {tag} RUNNING", 90, running)
    return p


def _no_uncaught(p):
    bad = [x for x in p.lines() if x.startswith("UNCAUGHT")]
    assert not bad, f"stream thread died: {bad}\n{tail(p.log)}"


def test_streams_word_count_eos(target, apps_classpath, procs):
    sfx = uuid.uuid4().hex[:8]
    tmp = target.tmp / f"streams-{sfx}"
    tmp.mkdir()
    inp, counts, windowed = f"wc-in-{sfx}", f"wc-counts-{sfx}", f"wc-windowed-{sfx}"
    _create(target, inp, 3)
    _create(target, counts, 3, {"cleanup.policy": "compact", **COMPACT_NOW})
    _create(target, windowed, 3, {"cleanup.policy": "compact", **COMPACT_NOW})
    app_id = f"wc-{sfx}"
    lines = Lines()
    view = CommittedView(target, [counts, windowed])

    def diag():
        return "\n".join(f"--- {p.log.name} ---\n{tail(p.log, 40)}" for p in procs) + \
            f"\n{target.logs(30)}"

    def exact(what, timeout=90):
        c, w = _expected(target, inp)
        view.wait_exact({counts: c, windowed: w}, timeout, what, diag)

    try:
        # 1. a first run over known input
        _feed(target, inp, lines.batch(300))
        app = _start_app(target, apps_classpath, procs, tmp, app_id, tmp / "state-1",
                         (inp, counts, windowed), "1")
        _feed(target, inp, lines.batch(300))
        exact("counts after the first run")

        # 2. a clean stop, the local state wiped, a restart that restores from the changelogs
        app.stop()
        assert any(x == "CLOSED" for x in app.lines()), tail(app.log)
        _no_uncaught(app)
        shutil.rmtree(tmp / "state-1")
        changelog = _topic_configs(target, f"{app_id}-counts-changelog")
        assert changelog.get("cleanup.policy") == "compact", changelog
        assert changelog.get("segment.ms") == "1000", changelog
        wchangelog = _topic_configs(target, f"{app_id}-windowed-counts-changelog")
        assert set(wchangelog["cleanup.policy"].split(",")) == {"compact", "delete"}, wchangelog
        _feed(target, inp, lines.batch(300))
        app = _start_app(target, apps_classpath, procs, tmp, app_id, tmp / "state-2",
                         (inp, counts, windowed), "2")
        exact("counts after the restore from the changelogs")
        restored = Counter()
        for r in (x.split() for x in app.lines() if x.startswith("RESTORED ")):
            restored[r[1]] += int(r[3])
        assert restored["counts"] > 0 and restored["windowed-counts"] > 0, \
            f"nothing restored: {restored}"

        # 3. SIGKILL one broker while the app processes (a cluster only)
        if target.n > 1:
            # the app's group coordinator: its offsets (committed in the app's transactions)
            # and group move to another broker while the app runs
            admin = _admin(target)
            try:
                leader = admin._find_coordinator_ids([app_id])[app_id]
            finally:
                admin.close()
            _feed(target, inp, lines.batch(600))
            target.kill_node(leader)
            try:
                _feed(target, inp, lines.batch(300))
                exact(f"counts after SIGKILL of broker {leader}", timeout=150)
                assert app.alive(), tail(app.log)
            finally:
                # back for the next test, which wants replication factor 3
                target.restart_node(leader)
        _no_uncaught(app)
        # Streams deleted the records of its repartition topic it had consumed (DeleteRecords)
        starts = _log_start_offsets(target, f"{app_id}-words-repartition")
        assert any(starts.values()), f"repartition topic never purged: {starts}"
        app.stop()
        view.poll()
        view.check_growing()
        c, w = _expected(target, inp)
        print(f"{target.name}: {lines.next} lines, {sum(c.values())} words; restored "
              f"{dict(restored)}; {sum(map(len, view.history[counts].values()))} count and "
              f"{sum(map(len, view.history[windowed].values()))} windowed updates read; "
              f"{len(cleaned_partitions(target.tmp, sfx))} of the app's compacted partitions "
              "cleaned by the log cleaner during the run")
    finally:
        view.close()


# ---------------------------------------------------------------------------- Kafka Connect

def _http(method, url, body=None, timeout=10):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            text = r.read().decode()
            return r.status, (json.loads(text) if text else None)
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


def _try_http(method, url, body=None):
    try:
        return _http(method, url, body)
    except (urllib.error.URLError, OSError, ValueError):
        return None, None


class Worker:
    def __init__(self, target, classpath, procs, tmp, name, group, topics, eos=False):
        self.port = free_ports(1)[0]
        self.url = f"http://127.0.0.1:{self.port}"
        self.id = f"127.0.0.1:{self.port}"
        rf = target.replication_factor
        props = {
            "bootstrap.servers": target.bootstrap, "group.id": group,
            "key.converter": "org.apache.kafka.connect.storage.StringConverter",
            "value.converter": "org.apache.kafka.connect.storage.StringConverter",
            "config.storage.topic": topics[0], "offset.storage.topic": topics[1],
            "status.storage.topic": topics[2],
            "config.storage.replication.factor": rf, "offset.storage.replication.factor": rf,
            "status.storage.replication.factor": rf,
            "offset.storage.partitions": 5, "status.storage.partitions": 3,
            "offset.flush.interval.ms": 2000,
            "listeners": self.url, "rest.advertised.host.name": "127.0.0.1",
            "rest.advertised.port": self.port,
            # a dead worker's tasks are given to the others this long after it left
            "scheduled.rebalance.max.delay.ms": 3000,
            "session.timeout.ms": 6000, "heartbeat.interval.ms": 1000,
            "plugin.discovery": "service_load",
            "metadata.max.age.ms": 2000,
        }
        if eos:
            # KIP-618: source records and their offsets in one transaction per batch, the
            # leader's config writes transactional, zombie tasks fenced on every task start
            props["exactly.once.source.support"] = "enabled"
            props["consumer.isolation.level"] = "read_committed"
        cfg = tmp / f"{name}.properties"
        cfg.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        self.proc = Proc(java_cmd(classpath, log4j_config(tmp, _log_level()),
                                  "org.apache.kafka.connect.cli.ConnectDistributed", cfg,
                                  heap="384m"), tmp / f"{name}.log")
        procs.append(self.proc)
        self.name = name

    def wait_up(self):
        def up():
            if not self.proc.alive():
                raise AssertionError(f"{self.name} exited:\n{tail(self.proc.log)}")
            st, _ = _try_http("GET", self.url + "/connectors")
            return st == 200
        wait_until(f"connect worker {self.name} REST up", 120, up, interval=0.5)


def _create_connector(worker, name, config, diag):
    """POST /connectors, asked again while the workers' group is still forming (Connect answers
    409 during a rebalance and 500 until the worker has read the config topic)."""
    answers = []

    def created():
        # a worker still starting its herder holds the request (up to Connect's own 90 s)
        try:
            st, body = _http("POST", worker.url + "/connectors",
                             {"name": name, "config": config}, timeout=90)
        except (urllib.error.URLError, OSError) as e:
            st, body = None, repr(e)
        answers.append((st, body))
        if st == 409 and "already exists" in str(body):
            return True  # an earlier POST that timed out on our side went through
        return st == 201
    try:
        wait_until(f"connector {name} created", 120, created, interval=1.0)
    except AssertionError as e:
        raise AssertionError(f"{e}: {answers[-3:]}\n{diag()}") from None


def _status(workers, connector):
    for w in workers:
        if w.proc.alive():
            st, body = _try_http("GET", f"{w.url}/connectors/{connector}/status")
            if st == 200:
                return body
    return None


def _running_on(workers, connector):
    """The worker id running the connector's task 0, once it and its task are RUNNING."""
    s = _status(workers, connector)
    if s and s["connector"]["state"] == "RUNNING" and s["tasks"] \
            and s["tasks"][0]["state"] == "RUNNING":
        return s["tasks"][0]["worker_id"]
    return None


LINE_BYTES = len("line-00000\n")


def _append(path, start, n):
    with open(path, "a") as f:
        for i in range(start, start + n):
            f.write(f"line-{i:05d}\n")


def _committed_positions(target, offsets_topic, connector):
    """Every source offset (byte position in the file) the source task committed (read
    read_committed: under exactly.once.source.support the offsets are in the transactions)."""
    out = set()
    for _p, _o, key, value, _ts in _read_all(target, offsets_topic, "read_committed"):
        if key and value and json.loads(key)[0] == connector:
            out.add(json.loads(value)["position"])
    return out


def _check_resumes(seq, total, committed, what):
    """`seq` (line numbers in the order read) holds every line 0..total-1, first seen in order,
    and each step back starts at a committed position: at-least-once from committed offsets."""
    assert set(seq) == set(range(total)), \
        f"{what}: lost lines {sorted(set(range(total)) - set(seq))[:10]}"
    firsts = list(dict.fromkeys(seq))
    assert firsts == list(range(total)), f"{what}: lines first seen out of order"
    restarts = [b for a, b in zip(seq, seq[1:]) if b != a + 1]
    for b in restarts:
        assert b * LINE_BYTES in committed, \
            f"{what}: resumed at line {b}, not at a committed offset {sorted(committed)[-5:]}"
    return len(seq) - total, restarts


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
def test_connect_distributed_file_pipeline(target, apps_classpath, procs, guarantee):
    eos = guarantee == "exactly_once"
    sfx = uuid.uuid4().hex[:8]
    tmp = target.tmp / f"connect-{sfx}"
    tmp.mkdir()
    group = f"connect-{sfx}"
    topics = (f"connect-configs-{sfx}", f"connect-offsets-{sfx}", f"connect-status-{sfx}")
    data = f"connect-data-{sfx}"
    _create(target, data, 1)
    src, sink = tmp / "source.txt", tmp / "sink.txt"
    src.write_text("")
    workers = [Worker(target, apps_classpath, procs, tmp, f"worker-{i}", group, topics, eos)
               for i in (1, 2)]
    # a worker of another group whose config topic exists with cleanup.policy=delete: Connect
    # reads the policy with DescribeConfigs and must refuse to run on it
    bad_topics = tuple(t.replace(sfx, sfx + "-bad") for t in topics)
    _create(target, bad_topics[0], 1, {"cleanup.policy": "delete"})
    refused = Worker(target, apps_classpath, procs, tmp, "worker-bad-config-topic",
                     group + "-bad", bad_topics, eos)

    def diag():
        return "\n".join(f"--- {w.name} ---\n{tail(w.proc.log, 40)}" for w in workers) + \
            f"\n{target.logs(30)}"

    try:
        for w in workers:
            w.wait_up()
        # Connect created its topics compacted (and refuses to start on ones that are not)
        for t in topics:
            # the REST server answers before the herder has created every topic
            wait_until(f"{t} created with cleanup.policy=compact", 60,
                       lambda t=t: _topic_configs(target, t).get("cleanup.policy") == "compact"
                       or None, interval=0.5)
        wait_until("the worker with a cleanup.policy=delete config topic refusing it", 60,
                   lambda: any("required to have 'cleanup.policy=compact'" in x
                               for x in refused.proc.lines()))
        refused.proc.kill()
        _append(src, 0, 200)
        _create_connector(workers[0], "src", {
            "connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
            "tasks.max": "1", "file": str(src), "topic": data}, diag)
        _create_connector(workers[0], "sink", {
            "connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector",
            "tasks.max": "1", "file": str(sink), "topics": data}, diag)

        def sink_lines():
            try:
                return [int(x[5:]) for x in sink.read_text().split()]
            except FileNotFoundError:
                return []

        try:
            wait_until("the first 200 lines in the sink file", 90,
                       lambda: set(sink_lines()) == set(range(200)))
            victim_id = wait_until("source task running", 30,
                                   lambda: _running_on(workers, "src"))
        except AssertionError as e:
            raise AssertionError(f"{e}\n{diag()}") from None
        # the first 200 lines' offset committed (offset.flush.interval.ms), so that a restart
        # from 0 would be a lost commit, not at-least-once
        committed_before = wait_until(
            "source offset of the first 200 lines committed", 30,
            lambda: max(_committed_positions(target, topics[1], "src"), default=0)
            >= 200 * LINE_BYTES and max(_committed_positions(target, topics[1], "src")),
            interval=0.5)
        victim = next(w for w in workers if w.id == victim_id)
        survivor = next(w for w in workers if w is not victim)

        # SIGKILL the worker running the source task while lines keep coming
        _append(src, 200, 200)
        wait_until("source reading the new lines", 30,
                   lambda: max(sink_lines(), default=0) >= 200, interval=0.05)
        victim.proc.kill()
        killed_at = time.monotonic()
        _append(src, 400, 200)
        at_kill = None
        if not eos:
            # the last offset the killed task committed: produce requests it had sent have been
            # handled a second later, and its tasks move only after the session timeout (6 s)
            time.sleep(1.0)
            at_kill = max(_committed_positions(target, topics[1], "src"))
        try:
            wait_until("both tasks running on the surviving worker", 90,
                       lambda: _running_on([survivor], "src") == survivor.id
                       and _running_on([survivor], "sink") == survivor.id)
            moved_s = time.monotonic() - killed_at
            wait_until("all 600 lines in the sink file", 90,
                       lambda: set(sink_lines()) == set(range(600)))
            done_s = time.monotonic() - killed_at
        except AssertionError as e:
            raise AssertionError(f"{e}\n{diag()}") from None

        committed = _committed_positions(target, topics[1], "src")
        in_topic = [int(v[5:]) for _p, _o, _k, v, _ts in
                    _read_all(target, data, "read_committed" if eos else "read_uncommitted")]
        dup_topic, restarts = _check_resumes(in_topic, 600, committed, "topic")
        if eos:
            # the killed task's open transaction was aborted: read_committed sees each line once
            assert dup_topic == 0, f"exactly-once source repeated lines: restarts at {restarts}"
        assert all(b * LINE_BYTES >= committed_before for b in restarts), \
            f"resumed at {restarts}, before the offset {committed_before} committed before the kill"
        if at_kill is not None:
            assert moved_s > 1.5, "tasks moved before the offsets were read"
            assert restarts in ([], [at_kill // LINE_BYTES]), \
                f"resumed at lines {restarts}, not at the offset committed at the kill ({at_kill})"
        in_sink = sink_lines()
        assert set(in_sink) == set(range(600))
        print(f"{target.name}: {dup_topic} lines repeated in the topic after the worker kill "
              f"(resumed at lines {restarts}; committed positions {sorted(committed)}), "
              f"{len(in_sink) - 600} in the sink file; tasks moved {moved_s:.1f} s after the "
              f"kill, all lines in the sink {done_s:.1f} s after it")
    finally:
        for w in workers:
            w.proc.stop(timeout=20)
