"""Processes for tests/python/test_apps.py: a 3-node Strom cluster, a single-node Apache Kafka
4.4 (scripts/kafka-ref.sh), and child JVMs running the tests/apps applications (Kafka Streams,
Kafka Connect's ConnectDistributed). Every process is started in its own session and killed by
pid on close, on failure and at interpreter exit.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
APPS = REPO / "tests" / "apps"

_live: set = set()


@atexit.register
def _kill_leftovers():
    for p in list(_live):
        try:
            p.kill()
        except Exception:  # noqa: BLE001 - best effort at exit
            pass


def free_ports(n):
    socks, ports = [], []
    try:
        while len(ports) < n:
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


def port_accepts(port, timeout=0.5):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_until(what, timeout, check, interval=0.2):
    """Polls `check()` until it returns a truthy value (returned) or `timeout` seconds pass."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"not within {timeout}s: {what} (last: {last!r})")


def tail(path, n=60):
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


class Proc:
    """A child process in its own session, stdout+stderr appended to `log`."""

    def __init__(self, cmd, log, env=None):
        self.cmd = [str(c) for c in cmd]
        self.log = Path(log)
        self._fh = open(self.log, "ab")
        e = dict(os.environ)
        e.update(env or {})
        self.proc = subprocess.Popen(self.cmd, stdout=self._fh, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=e, start_new_session=True)
        _live.add(self)

    @property
    def pid(self):
        return self.proc.pid

    def alive(self):
        return self.proc.poll() is None

    def lines(self):
        try:
            return self.log.read_text(errors="replace").splitlines()
        except OSError:
            return []

    def _signal_group(self, sig):
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def stop(self, timeout=40.0):
        """SIGTERM (a clean shutdown); SIGKILL after `timeout`. Returns the exit code."""
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
        return self.kill()

    def kill(self):
        """SIGKILL the process (and anything it left in its session)."""
        self._signal_group(signal.SIGKILL)
        self.proc.wait()
        _live.discard(self)
        if not self._fh.closed:
            self._fh.close()
        return self.proc.returncode


def cleaned_partitions(root: Path, marker: str):
    """(topic, partition) -> cleaned-up-to offset from every cleaner-offset-checkpoint (Kafka's
    format: version, count, then `topic partition offset` lines) under `root`, for topics whose
    name contains `marker`: what the brokers' log cleaners compacted."""
    out = {}
    for f in root.rglob("cleaner-offset-checkpoint"):
        try:
            lines = f.read_text().splitlines()[2:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if len(parts) == 3 and marker in parts[0]:
                key = (parts[0], int(parts[1]))
                out[key] = max(out.get(key, 0), int(parts[2]))
    return out


class StromCluster:
    """`n` strom server processes, each a controller voter and a broker (as the Java tests'
    ClusterUnderTest), data in `dir`/node-N."""

    name = "strom"

    def __init__(self, binary, dir, n=3, settings=()):
        self.binary = binary
        self.dir = Path(dir)
        self.n = n
        self.settings = list(settings)
        ports = free_ports(2 * n)
        self.ports = {i + 1: ports[2 * i] for i in range(n)}
        self.cports = {i + 1: ports[2 * i + 1] for i in range(n)}
        self.quorum = ",".join(f"{i}@127.0.0.1:{p}" for i, p in self.cports.items())
        self.procs = {}
        self.replication_factor = min(3, n)

    @property
    def bootstrap(self):
        return ",".join(f"127.0.0.1:{p}" for i, p in self.ports.items())

    def node_dir(self, i):
        return self.dir / f"node-{i}"

    def start_node(self, i, timeout=30.0):
        d = self.node_dir(i)
        if not (d / "meta.properties").exists():
            # Every node formatted with one cluster id before its dir holds anything else, as
            # Kafka's are with kafka-storage format (the Java tests' ClusterUnderTest likewise).
            if getattr(self, "cluster_id", None) is None:
                self.cluster_id = subprocess.run([self.binary, "random-uuid"], check=True,
                                                 capture_output=True, text=True).stdout.strip()
            subprocess.run([self.binary, "format", "--cluster-id", self.cluster_id, "--node-id",
                            str(i), "--data-dir", str(d)], check=True, capture_output=True)
        cmd = [self.binary, "server", "--node-id", i, "--listen", f"127.0.0.1:{self.ports[i]}",
               "--controller-listen", f"127.0.0.1:{self.cports[i]}",
               "--controller-quorum", self.quorum, "--data-dir", d]
        for s in self.settings:
            cmd += ["--set", s]
        p = Proc(cmd, d / "server.log",
                 env={"RUST_LOG": os.environ.get("RUST_LOG", "info"), "NO_COLOR": "1"})
        self.procs[i] = p
        return p

    def start(self):
        for i in range(1, self.n + 1):
            self.start_node(i)
        for i in range(1, self.n + 1):
            wait_until(f"strom node {i} listening", 30,
                       lambda i=i: self._check_alive(i) and port_accepts(self.ports[i]))
        return self

    def _check_alive(self, i):
        if not self.procs[i].alive():
            raise AssertionError(f"strom node {i} exited:\n{tail(self.procs[i].log)}")
        return True

    def kill_node(self, i):
        self.procs[i].kill()

    def restart_node(self, i):
        self.start_node(i)
        wait_until(f"strom node {i} listening again", 30,
                   lambda: self._check_alive(i) and port_accepts(self.ports[i]))
        wait_until(f"strom node {i} registered again", 60, lambda: self._registered() == self.n)

    def _registered(self):
        from kafka_helpers import admin_client
        admin = admin_client(self.bootstrap)
        try:
            return len(admin.describe_cluster()["brokers"])
        finally:
            admin.close()

    def logs(self, n=40):
        return "\n".join(f"--- node {i} ---\n{tail(p.log, n)}" for i, p in self.procs.items())

    def close(self):
        for p in self.procs.values():
            p.kill()


class KafkaRef:
    """Apache Kafka 4.4, one KRaft combined node, started by scripts/kafka-ref.sh run (so that
    its pid is ours)."""

    name = "kafka"

    def __init__(self, dir, props=()):
        self.dir = Path(dir)
        self.port = free_ports(1)[0]
        while port_accepts(self.port + 1):  # kafka-ref.sh's controller listens on PORT+1
            self.port = free_ports(1)[0]
        self.props = "".join(f"{p}\n" for p in props)
        self.proc = None
        self.replication_factor = 1
        self.n = 1

    @property
    def bootstrap(self):
        return f"127.0.0.1:{self.port}"

    def start(self):
        self.dir.mkdir(parents=True, exist_ok=True)
        self.proc = Proc([REPO / "scripts" / "kafka-ref.sh", "run", self.port, self.dir],
                         self.dir / "stdout.log", env={"KAFKA_REF_EXTRA_PROPS": self.props})
        wait_until("kafka listening", 120, lambda: self._alive() and port_accepts(self.port))
        return self

    def _alive(self):
        if not self.proc.alive():
            raise AssertionError(f"kafka exited:\n{tail(self.proc.log)}\n{self.logs()}")
        return True

    def logs(self, n=40):
        return tail(self.dir / "server.log", n)

    def close(self):
        if self.proc:
            self.proc.stop(timeout=20)


def build_apps():
    """Compiles tests/apps and copies its runtime jars; returns the classpath."""
    mvn = shutil.which("mvn")
    if not mvn or not shutil.which("java"):
        raise FileNotFoundError("mvn or java not installed")
    p = subprocess.run([mvn, "-q", "-B", "-ntp", "-Dstyle.color=never", "-f",
                        str(APPS / "pom.xml"), "package"],
                       capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        raise RuntimeError(f"mvn package tests/apps failed:\n{p.stdout}\n{p.stderr}")
    target = APPS / "target"
    return f"{target / 'classes'}:{target / 'deps'}/*"


def log4j_config(dir: Path, level: str) -> Path:
    """A log4j2 config for one child JVM: `level` for org.apache.kafka (DEBUG to compare a run
    on Strom with one on Kafka), WARN for the rest, on stderr (the child's log file)."""
    path = dir / f"log4j2-{level.lower()}.properties"
    path.write_text(f"""status = warn
appender.err.type = Console
appender.err.name = ERR
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p [%t] %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.err.ref = ERR
logger.kafka.name = org.apache.kafka
logger.kafka.level = {level}
logger.conn.name = org.apache.kafka.connect.runtime
logger.conn.level = {'INFO' if level == 'WARN' else level}
""")
    return path


def java_cmd(classpath, log4j, main, *args, heap="256m"):
    return ["java", f"-Xmx{heap}", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
            "-Xshare:auto", f"-Dlog4j2.configurationFile={log4j}", "-cp", classpath, main,
            *map(str, args)]


def new_tmp(prefix):
    return Path(tempfile.mkdtemp(prefix=prefix))
