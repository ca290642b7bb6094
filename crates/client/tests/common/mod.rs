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
        let port = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
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

    pub fn log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("broker.log")).unwrap_or_default()
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- broker log\n{}", self.log());
        }
    }
}
