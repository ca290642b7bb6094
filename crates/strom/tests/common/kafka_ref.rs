//! Apache Kafka 4.4 as the oracle of a test: whether its jars and Java are here, and a single
//! Kafka broker started by `scripts/kafka-ref.sh` (killed on drop).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Kafka 4.4's jars (`make kafka-ref-fetch`).
pub fn libs() -> PathBuf {
    repo_root().join(".cache/kafka-4.4/libs")
}

/// Java and Kafka 4.4's jars, or why not.
pub fn oracle_available() -> Result<(), String> {
    if !libs().join("kafka-tools-4.4.0.jar").exists() {
        return Err(format!(
            "Kafka 4.4 jars not found in {} (run `make kafka-ref-fetch`)",
            libs().display()
        ));
    }
    match Command::new("java").arg("-version").output() {
        Ok(o) if o.status.success() => Ok(()),
        _ => Err("`java` is not installed".into()),
    }
}

/// A Kafka 4.4 broker started by `scripts/kafka-ref.sh`, killed on drop.
pub struct KafkaRef {
    pid: String,
    pub port: u16,
    _dir: tempfile::TempDir,
}

impl KafkaRef {
    pub fn start() -> KafkaRef {
        Self::start_with_props("")
    }

    /// A broker with extra `server.properties` lines (`key=value\n...`; later lines win).
    pub fn start_with_props(props: &str) -> KafkaRef {
        let dir = tempfile::tempdir().expect("tempdir");
        // The controller listens on port + 1.
        let port = loop {
            let p = super::free_port();
            if std::net::TcpListener::bind(("127.0.0.1", p + 1)).is_ok() {
                break p;
            }
        };
        let mut cmd = Command::new(repo_root().join("scripts/kafka-ref.sh"));
        if !props.is_empty() {
            cmd.env("KAFKA_REF_EXTRA_PROPS", props);
        }
        let out = cmd
            .arg("start")
            .arg(port.to_string())
            .arg(dir.path())
            .stderr(Stdio::inherit())
            .output()
            .expect("run scripts/kafka-ref.sh");
        assert!(out.status.success(), "kafka-ref.sh start failed");
        let pid = String::from_utf8_lossy(&out.stdout).trim().to_string();
        KafkaRef {
            pid,
            port,
            _dir: dir,
        }
    }

    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The broker's log dir (`log.dirs`).
    pub fn data_dir(&self) -> PathBuf {
        self._dir.path().join("data")
    }

    /// The broker's log4j output.
    pub fn server_log(&self) -> PathBuf {
        self._dir.path().join("server.log")
    }
}

impl Drop for KafkaRef {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg("-9").arg(&self.pid).status();
    }
}
