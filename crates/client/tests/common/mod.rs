//! Spawns the `strom` binary as a broker on a free loopback port with a temporary data
//! directory; the process is killed when the [`Broker`] is dropped.

#![allow(dead_code)]

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The strom binary: `$STROM_BIN`, else `target/debug/strom` of this workspace.
pub fn strom_bin() -> PathBuf {
    if let Ok(p) = std::env::var("STROM_BIN") {
        return PathBuf::from(p);
    }
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    target.join("debug/strom")
}

pub struct Broker {
    child: Child,
    _dir: tempfile::TempDir,
    pub port: u16,
}

impl Broker {
    pub fn start() -> Broker {
        Self::start_with(&[])
    }

    /// Extra `--set key=value` settings.
    pub fn start_with(settings: &[&str]) -> Broker {
        let bin = strom_bin();
        assert!(
            bin.exists(),
            "{} not found: build it with `cargo build -p strom` or set STROM_BIN",
            bin.display()
        );
        let dir = tempfile::Builder::new()
            .prefix("strom-client-it-")
            .tempdir()
            .unwrap();
        let port = free_port();
        let mut cmd = Command::new(&bin);
        cmd.arg("server")
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--data-dir")
            .arg(dir.path().join("data"));
        for s in settings {
            cmd.arg("--set").arg(s);
        }
        let log = std::fs::File::create(dir.path().join("broker.log")).unwrap();
        let child = cmd
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("spawn strom server");
        let mut b = Broker {
            child,
            _dir: dir,
            port,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(st)) = b.child.try_wait() {
                panic!("broker exited early with {st}: {}", b.log());
            }
            assert!(
                Instant::now() < deadline,
                "broker did not start: {}",
                b.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        b
    }

    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The broker's `--data-dir`.
    pub fn data_dir(&self) -> PathBuf {
        self._dir.path().join("data")
    }

    /// The broker's process id (for `kill -STOP` / `-CONT`).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` (e.g. "STOP", "CONT") to the broker process.
    pub fn signal(&self, signal: &str) {
        let st = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid().to_string())
            .status()
            .expect("kill");
        assert!(st.success(), "kill -{signal} failed");
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("broker.log")).unwrap_or_default()
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        // Whether the broker was still running when the test ended (a CI run saw a broker's
        // port refuse connections right after it started, with nothing in its log; its exit
        // status says whether a signal ended it).
        let exited = self.child.try_wait().ok().flatten();
        // A stopped process cannot be reaped until continued.
        let _ = Command::new("kill")
            .arg("-CONT")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!(
                "--- broker pid {} (exited before the end of the test: {exited:?}) log\n{}",
                self.child.id(),
                self.log()
            );
        }
    }
}

/// One batch as `strom dump-log` prints it: the `key: value` pairs of its line.
#[derive(Debug, Clone)]
pub struct DumpedBatch(pub std::collections::HashMap<String, String>);

impl DumpedBatch {
    pub fn get(&self, key: &str) -> i64 {
        self.0
            .get(key)
            .unwrap_or_else(|| panic!("no {key} in {:?}", self.0))
            .parse()
            .unwrap()
    }
}

/// Runs `strom dump-log --files <log>` and parses its batch lines.
pub fn dump_log(log: &std::path::Path) -> Vec<DumpedBatch> {
    let out = Command::new(strom_bin())
        .arg("dump-log")
        .arg("--files")
        .arg(log)
        .output()
        .expect("run strom dump-log");
    assert!(
        out.status.success(),
        "dump-log failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("baseOffset:"))
        .map(|l| {
            let toks: Vec<&str> = l.split_whitespace().collect();
            let mut m = std::collections::HashMap::new();
            let mut i = 0;
            while i + 1 < toks.len() {
                if let Some(k) = toks[i].strip_suffix(':') {
                    m.insert(k.to_string(), toks[i + 1].to_string());
                    i += 2;
                } else {
                    i += 1;
                }
            }
            DumpedBatch(m)
        })
        .collect()
}

/// A loopback port that was free a moment ago, below Linux's ephemeral range (32768+): a port
/// the OS hands out for `:0` can be taken by any outgoing connection of a concurrent test before
/// the broker binds it. `pair` also needs `port + 1` free (Kafka's controller listener in
/// `scripts/kafka-ref.sh`). Ports are handed out from a per-process starting point.
pub fn free_port_with(pair: bool) -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const LOW: u32 = 20_000;
    const SPAN: u32 = 12_000;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let start = (std::process::id() % 600) * 20 + 7;
    for _ in 0..SPAN {
        let port = (LOW + (start + NEXT.fetch_add(1, Ordering::Relaxed)) % SPAN) as u16;
        let free = |p: u16| TcpListener::bind(("127.0.0.1", p)).is_ok();
        if free(port) && (!pair || free(port + 1)) {
            if pair {
                NEXT.fetch_add(1, Ordering::Relaxed);
            }
            return port;
        }
    }
    panic!("no free loopback port below the ephemeral range");
}

pub fn free_port() -> u16 {
    free_port_with(false)
}
