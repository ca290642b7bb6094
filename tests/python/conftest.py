"""Shared fixtures for the cross-client tests.

By default a fresh `strom server` is started for the test session on a free loopback
port with a temporary data directory (binary: $STROM_BIN, else target/debug/strom).
Set STROM_BOOTSTRAP=host:port to run the same tests against an already running broker
instead (for example Apache Kafka 4.4 started by scripts/kafka-ref.sh).
"""

import atexit
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_accepts(host, port, timeout=0.5):
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def strom_bin():
    b = os.environ.get("STROM_BIN")
    path = Path(b) if b else REPO_ROOT / "target" / "debug" / "strom"
    if not path.exists():
        pytest.fail(f"strom binary not found at {path}: run `cargo build -p strom` or set STROM_BIN")
    return str(path)


class StromProcess:
    """A `strom server` child process with its own data dir and log file."""

    def __init__(self, data_dir, port=None, extra_args=()):
        self.data_dir = Path(data_dir)
        self.port = port or free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.extra_args = list(extra_args)
        self.log_path = self.data_dir.parent / f"strom-{self.port}.log"
        self.proc = None
        self._log = None

    def start(self, timeout=30.0):
        # The server creates and formats a data dir that does not exist yet (a fresh node).
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")
        cmd = [strom_bin(), "server", "--listen", self.bootstrap,
               "--data-dir", str(self.data_dir), *self.extra_args]
        env = dict(os.environ)
        env.setdefault("RUST_LOG", "info")
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=env,
                                     start_new_session=True)
        _live.add(self)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"strom exited with code {self.proc.returncode} before listening on "
                    f"{self.bootstrap}:\n{self.log_tail()}")
            if port_accepts("127.0.0.1", self.port):
                return self
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"strom did not listen on {self.bootstrap} within {timeout}s:\n"
                           f"{self.log_tail()}")

    def stop(self, sig=signal.SIGTERM, timeout=20.0):
        """Send `sig` (default SIGTERM, a clean shutdown); SIGKILL if still alive after timeout.
        Returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(sig)
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self._kill_group()
                self.proc.wait()
        self._kill_group()  # anything the broker process left behind
        _live.discard(self)
        if self._log:
            self._log.close()
            self._log = None
        return self.proc.returncode

    def _kill_group(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def kill(self):
        return self.stop(signal.SIGKILL, timeout=10.0)

    def log_tail(self, lines=60):
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(text[-lines:])


_live = set()


@atexit.register
def _kill_leftovers():
    for p in list(_live):
        try:
            p.kill()
        except Exception:
            pass


class Broker:
    def __init__(self, bootstrap, strom=None):
        self.bootstrap = bootstrap
        self.strom = strom  # None when running against an external broker

    @property
    def external(self):
        return self.strom is None


@pytest.fixture(scope="session")
def broker():
    external = os.environ.get("STROM_BOOTSTRAP")
    if external:
        yield Broker(external)
        return
    tmp = tempfile.mkdtemp(prefix="strom-pytest-")
    strom = StromProcess(Path(tmp) / "data")
    try:
        strom.start()
        yield Broker(strom.bootstrap, strom)
    finally:
        strom.stop()  # SIGTERM, SIGKILL fallback
        if os.environ.get("STROM_KEEP_DATA"):
            print(f"strom data kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture
def bootstrap(broker):
    return broker.bootstrap


@pytest.fixture
def topic_name(request):
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:60]
    return f"py-{base}-{uuid.uuid4().hex[:8]}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Attach the tail of the strom log to failing tests."""
    outcome = yield
    rep = outcome.get_result()
    if rep.failed and "broker" in getattr(item, "fixturenames", ()):
        b = item.funcargs.get("broker")
        if b is not None and b.strom is not None:
            rep.sections.append(("strom log (tail)", b.strom.log_tail()))
