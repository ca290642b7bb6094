//! Apache Kafka 4.4 as the other side of a comparison: a local cluster of combined KRaft nodes
//! (each a controller voter and a broker) run from the Maven Central jars, with the same
//! kill / restart surface as [`strom_launcher::LocalCluster`]. Also finds (or fetches) the jars
//! that the Java producer needs.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use strom_launcher::{free_ports, NodeProcs};

pub const KAFKA_VERSION: &str = "4.4.0";

/// The directory holding Kafka 4.4's jars (broker, tools and kafka-clients): `explicit`, else
/// `$STROM_KAFKA_LIBS`, else `./.cache/kafka-4.4/libs` (where `scripts/kafka-ref.sh fetch` puts
/// them), else `~/.cache/strom/kafka-4.4.0/libs`, fetched there with Maven when missing.
pub fn kafka_libs(explicit: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(p) = explicit {
        if !p.is_dir() {
            bail!("--kafka-libs {}: not a directory", p.display());
        }
        return Ok(p.to_path_buf());
    }
    if let Some(p) = std::env::var_os("STROM_KAFKA_LIBS") {
        return Ok(PathBuf::from(p));
    }
    let repo = PathBuf::from(".cache/kafka-4.4/libs");
    if repo.join(".complete").exists() {
        return Ok(repo);
    }
    let home = std::env::var_os("HOME").context("HOME is not set; pass --kafka-libs")?;
    let cache = PathBuf::from(home).join(format!(".cache/strom/kafka-{KAFKA_VERSION}"));
    let libs = cache.join("libs");
    if libs.join(".complete").exists() {
        return Ok(libs);
    }
    std::fs::create_dir_all(&cache)?;
    let dep = |g: &str, a: &str, v: &str| {
        format!("<dependency><groupId>{g}</groupId><artifactId>{a}</artifactId><version>{v}</version></dependency>")
    };
    let pom = format!(
        "<project xmlns=\"http://maven.apache.org/POM/4.0.0\"><modelVersion>4.0.0</modelVersion>\
         <groupId>dev.strom</groupId><artifactId>kafka-libs</artifactId><version>1</version>\
         <packaging>pom</packaging><dependencies>{}{}{}{}{}</dependencies></project>\n",
        dep("org.apache.kafka", "kafka_2.13", KAFKA_VERSION),
        dep("org.apache.kafka", "kafka-tools", KAFKA_VERSION),
        dep("org.apache.kafka", "kafka-storage", KAFKA_VERSION),
        dep("org.apache.logging.log4j", "log4j-slf4j-impl", "2.24.3"),
        dep("org.apache.logging.log4j", "log4j-core", "2.24.3"),
    );
    std::fs::write(cache.join("pom.xml"), pom)?;
    eprintln!(
        "fetching Kafka {KAFKA_VERSION} jars with Maven into {}",
        libs.display()
    );
    let status = Command::new("mvn")
        .args(["-q", "-B", "-ntp", "-f"])
        .arg(cache.join("pom.xml"))
        .arg("dependency:copy-dependencies")
        .arg(format!("-DoutputDirectory={}", libs.display()))
        .arg("-DincludeScope=runtime")
        .status()
        .context("running mvn (is Maven installed? or pass --kafka-libs)")?;
    if !status.success() {
        bail!("mvn could not fetch the Kafka jars ({status})");
    }
    std::fs::write(libs.join(".complete"), b"")?;
    Ok(libs)
}

pub struct KafkaCluster {
    libs: PathBuf,
    dir: PathBuf,
    broker_ports: Vec<u16>,
    /// The JVMs: signals, kill, reaping; all killed on drop.
    pub procs: NodeProcs,
}

impl KafkaCluster {
    /// Formats and starts `nodes` Kafka nodes (ids 1..=nodes) under `dir`; `set` holds extra
    /// `key=value` broker configs (the same names Strom uses).
    pub fn start(
        dir: &Path,
        nodes: u16,
        libs: &Path,
        set: &[String],
    ) -> anyhow::Result<KafkaCluster> {
        if dir.exists() {
            std::fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))?;
        }
        std::fs::create_dir_all(dir)?;
        let ports = free_ports(2 * nodes as usize)?;
        let (broker_ports, controller_ports) = ports.split_at(nodes as usize);
        let voters = controller_ports
            .iter()
            .enumerate()
            .map(|(i, p)| format!("{}@127.0.0.1:{p}", i + 1))
            .collect::<Vec<_>>()
            .join(",");
        let cluster_id = kafka_uuid();
        let mut c = KafkaCluster {
            libs: libs.to_path_buf(),
            dir: dir.to_path_buf(),
            broker_ports: broker_ports.to_vec(),
            procs: NodeProcs::new(dir.to_path_buf(), nodes as usize),
        };
        for id in 1..=nodes as i32 {
            let node_dir = c.node_dir(id);
            std::fs::create_dir_all(&node_dir)?;
            let i = (id - 1) as usize;
            let mut props = format!(
                "process.roles=broker,controller\nnode.id={id}\n\
                 controller.quorum.voters={voters}\n\
                 listeners=PLAINTEXT://127.0.0.1:{bp},CONTROLLER://127.0.0.1:{cp}\n\
                 advertised.listeners=PLAINTEXT://127.0.0.1:{bp}\n\
                 inter.broker.listener.name=PLAINTEXT\ncontroller.listener.names=CONTROLLER\n\
                 listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT\n\
                 log.dirs={logs}\nnum.partitions=1\ngroup.initial.rebalance.delay.ms=0\n",
                bp = broker_ports[i],
                cp = controller_ports[i],
                logs = node_dir.join("data").display(),
            );
            for s in set {
                props.push_str(s);
                props.push('\n');
            }
            std::fs::write(node_dir.join("server.properties"), props)?;
            std::fs::write(
                node_dir.join("log4j2.properties"),
                format!(
                    "appender.file.type = File\nappender.file.name = FILE\n\
                     appender.file.fileName = {}\nappender.file.layout.type = PatternLayout\n\
                     appender.file.layout.pattern = [%d] %p %m (%c)%n\n\
                     rootLogger.level = INFO\nrootLogger.appenderRef.file.ref = FILE\n",
                    node_dir.join("server.log").display()
                ),
            )?;
            let out = c
                .java(id)
                .arg("kafka.tools.StorageTool")
                .arg("format")
                .arg("-t")
                .arg(&cluster_id)
                .arg("-c")
                .arg(node_dir.join("server.properties"))
                .output()
                .context("running Kafka's StorageTool (is Java installed?)")?;
            if !out.status.success() {
                bail!(
                    "formatting Kafka node {id} failed: {}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
        for id in 1..=nodes as i32 {
            c.spawn(id)?;
        }
        // Kafka opens its broker port only after it has caught up with the metadata log.
        for id in 1..=nodes as i32 {
            c.wait_listening(id, Duration::from_secs(90))?;
        }
        Ok(c)
    }

    fn java(&self, id: i32) -> Command {
        let node_dir = self.node_dir(id);
        let mut cmd = Command::new("java");
        cmd.args(["-Xmx512m", "-Xms256m", "-XX:+UseG1GC"])
            .arg(format!(
                "-Dlog4j2.configurationFile={}",
                node_dir.join("log4j2.properties").display()
            ))
            .arg("-cp")
            .arg(format!("{}/*", self.libs.display()));
        cmd
    }

    pub fn nodes(&self) -> i32 {
        self.procs.nodes()
    }

    pub fn node_dir(&self, id: i32) -> PathBuf {
        self.dir.join(format!("node-{id}"))
    }

    /// Where node `id` keeps partition `topic-p`.
    pub fn partition_dir(&self, id: i32, topic: &str, p: i32) -> PathBuf {
        self.node_dir(id).join("data").join(format!("{topic}-{p}"))
    }

    pub fn broker_addr(&self, id: i32) -> String {
        format!("127.0.0.1:{}", self.broker_ports[(id - 1) as usize])
    }

    /// Starts node `id` (again), keeping its data.
    pub fn spawn(&mut self, id: i32) -> anyhow::Result<()> {
        let node_dir = self.node_dir(id);
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(node_dir.join("stdout.log"))?;
        let child = self
            .java(id)
            .arg("kafka.Kafka")
            .arg(node_dir.join("server.properties"))
            .stdout(out.try_clone()?)
            .stderr(out)
            .stdin(Stdio::null())
            .spawn()
            .with_context(|| format!("starting Kafka node {id}"))?;
        self.procs.set(id, child);
        Ok(())
    }

    fn wait_listening(&mut self, id: i32, limit: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + limit;
        let addr = self.broker_addr(id);
        while std::net::TcpStream::connect(&addr).is_err() {
            self.procs.check_alive()?;
            if Instant::now() > deadline {
                bail!("Kafka node {id} did not listen on {addr} within {limit:?}");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(())
    }
}

/// A random cluster id as Kafka writes one: 16 random bytes in URL-safe base64 without
/// padding, never starting with '-' (Kafka's Uuid.randomUuid avoids those for command lines).
fn kafka_uuid() -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    loop {
        let bytes = *uuid::Uuid::new_v4().as_bytes();
        let mut s = String::with_capacity(22);
        for chunk in bytes.chunks(3) {
            let b = [
                chunk[0],
                *chunk.get(1).unwrap_or(&0),
                *chunk.get(2).unwrap_or(&0),
            ];
            let n = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
            let chars = chunk.len() + 1;
            for k in 0..chars {
                s.push(A[(n >> (18 - 6 * k) & 63) as usize] as char);
            }
        }
        if !s.starts_with('-') {
            return s;
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn kafka_uuid_is_22_url_safe_chars() {
        for _ in 0..100 {
            let s = super::kafka_uuid();
            assert_eq!(s.len(), 22, "{s}");
            assert!(!s.starts_with('-'));
            assert!(s
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
        }
    }
}
