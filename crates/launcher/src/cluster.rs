//! A local cluster of `strom server` child processes, each a controller voter and a broker.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::procs::{free_ports, NodeProcs};
use crate::{LaunchError, Result};

/// Where the nodes listen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ports {
    /// Free loopback ports, chosen at launch ([`free_ports`]).
    Free,
    /// Node N's broker on `BASE+N-1`, its controller on `BASE+100+N-1` (`strom dev-cluster`).
    Base(u16),
}

/// What to launch.
#[derive(Debug, Clone)]
pub struct LaunchOptions {
    /// The `strom` binary (or a wrapper that execs it).
    pub exe: PathBuf,
    /// Node N's data dir is `dir/node-N`.
    pub dir: PathBuf,
    pub nodes: u16,
    /// `key=value` broker properties for every node (`--set`).
    pub set: Vec<String>,
    pub ports: Ports,
    /// Per node (`placement[N-1]`): the address it listens on and the network namespace it runs
    /// in (started through `ip netns exec`, which execs, so the child's pid is the server's).
    /// Empty: every node on 127.0.0.1 in this namespace.
    pub placement: Vec<(String, String)>,
    /// Remove `dir` first (a fresh cluster); otherwise the nodes start on the data they have.
    pub fresh: bool,
}

impl LaunchOptions {
    /// `nodes` fresh nodes of `exe` under `dir` on free loopback ports.
    pub fn new(exe: impl Into<PathBuf>, dir: impl Into<PathBuf>, nodes: u16) -> Self {
        Self {
            exe: exe.into(),
            dir: dir.into(),
            nodes,
            set: Vec::new(),
            ports: Ports::Free,
            placement: Vec::new(),
            fresh: true,
        }
    }

    pub fn set(mut self, set: &[String]) -> Self {
        self.set = set.to_vec();
        self
    }
}

/// Appends `server` and the flags of one node of a local cluster (a controller voter and a
/// broker) to `cmd`: this binary, or a wrapper that execs it (`ip netns exec NS strom`).
pub fn server_args(
    cmd: &mut Command,
    id: i32,
    listen: &str,
    controller_listen: &str,
    quorum: &str,
    dir: &Path,
    set: &[String],
) {
    cmd.arg("server")
        .arg("--node-id")
        .arg(id.to_string())
        .arg("--listen")
        .arg(listen)
        .arg("--controller-listen")
        .arg(controller_listen)
        .arg("--controller-quorum")
        .arg(quorum)
        .arg("--data-dir")
        .arg(dir);
    for s in set {
        cmd.arg("--set").arg(s);
    }
}

/// The `cluster.id` of a node dir's `meta.properties`, if it has one.
pub fn cluster_id_of(dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(dir.join("meta.properties")).ok()?;
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .find_map(|l| l.split_once('=').filter(|(k, _)| k.trim() == "cluster.id"))
        .map(|(_, v)| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

pub struct LocalCluster {
    exe: PathBuf,
    dir: PathBuf,
    broker_ports: Vec<u16>,
    controller_ports: Vec<u16>,
    set: Vec<String>,
    /// The nodes' processes: signals, pause/resume, kill, reaping; all killed on drop.
    pub procs: NodeProcs,
    placement: Vec<(String, String)>,
}

impl LocalCluster {
    /// Starts every node of `opts` (ids `1..=nodes`) without waiting for them.
    pub fn launch(opts: LaunchOptions) -> Result<LocalCluster> {
        let n = opts.nodes as usize;
        if n == 0 {
            return Err(LaunchError::Invalid(
                "a cluster needs at least one node".into(),
            ));
        }
        if !opts.placement.is_empty() && opts.placement.len() != n {
            return Err(LaunchError::Invalid(
                "a placement per node is needed".into(),
            ));
        }
        if opts.fresh && opts.dir.exists() {
            std::fs::remove_dir_all(&opts.dir)
                .map_err(LaunchError::io(format!("removing {}", opts.dir.display())))?;
        }
        std::fs::create_dir_all(&opts.dir)
            .map_err(LaunchError::io(format!("creating {}", opts.dir.display())))?;
        let (broker_ports, controller_ports) = match opts.ports {
            Ports::Free => {
                let ports = free_ports(2 * n)?;
                (ports[..n].to_vec(), ports[n..].to_vec())
            }
            Ports::Base(base) => {
                let port = |off: usize| {
                    u16::try_from(base as usize + off).map_err(|_| {
                        LaunchError::Invalid(format!(
                            "base port {base} leaves no room for {n} nodes"
                        ))
                    })
                };
                (
                    (0..n).map(port).collect::<Result<Vec<_>>>()?,
                    (0..n).map(|i| port(100 + i)).collect::<Result<Vec<_>>>()?,
                )
            }
        };
        let mut c = LocalCluster {
            exe: opts.exe,
            procs: NodeProcs::new(opts.dir.clone(), n),
            dir: opts.dir,
            broker_ports,
            controller_ports,
            set: opts.set,
            placement: opts.placement,
        };
        // Every node formatted with one cluster id before its dir holds anything else (a
        // server refuses a dir that is not formatted, as Kafka's nodes need
        // `kafka-storage format`): node 1's id from an earlier run, else a new one; dirs
        // already formatted for that cluster are kept.
        let cluster_id = match cluster_id_of(&c.node_dir(1)) {
            Some(id) => id,
            None => c.tool_output(&["random-uuid"])?.trim().to_string(),
        };
        for id in 1..=n as i32 {
            c.format(id, &cluster_id)?;
        }
        for id in 1..=n as i32 {
            c.spawn(id)?;
        }
        Ok(c)
    }

    /// Runs `strom ARGS` to completion and returns its standard output.
    fn tool_output(&self, args: &[&str]) -> Result<String> {
        let out = Command::new(&self.exe)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(LaunchError::io(format!(
                "running {} {args:?}",
                self.exe.display()
            )))?;
        if !out.status.success() {
            return Err(LaunchError::Invalid(format!(
                "{} {args:?} failed: {}",
                self.exe.display(),
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `strom format --ignore-formatted` of node `id`'s dirs for `cluster_id`.
    pub fn format(&self, id: i32, cluster_id: &str) -> Result<()> {
        let dir = self.node_dir(id);
        std::fs::create_dir_all(&dir)
            .map_err(LaunchError::io(format!("creating {}", dir.display())))?;
        let mut args = vec![
            "format".to_string(),
            "--cluster-id".into(),
            cluster_id.into(),
            "--ignore-formatted".into(),
            "--node-id".into(),
            id.to_string(),
            "--data-dir".into(),
            dir.to_string_lossy().into_owned(),
        ];
        for s in &self.set {
            args.push("--set".into());
            args.push(s.clone());
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.tool_output(&args).map(drop)
    }

    pub fn nodes(&self) -> i32 {
        self.procs.nodes()
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn node_dir(&self, id: i32) -> PathBuf {
        self.dir.join(format!("node-{id}"))
    }

    /// The address node `id` listens on.
    pub fn host(&self, id: i32) -> &str {
        self.placement
            .get((id - 1) as usize)
            .map_or("127.0.0.1", |(h, _)| h.as_str())
    }

    pub fn broker_port(&self, id: i32) -> u16 {
        self.broker_ports[(id - 1) as usize]
    }

    pub fn controller_port(&self, id: i32) -> u16 {
        self.controller_ports[(id - 1) as usize]
    }

    pub fn broker_addr(&self, id: i32) -> String {
        format!("{}:{}", self.host(id), self.broker_port(id))
    }

    pub fn controller_addr(&self, id: i32) -> String {
        format!("{}:{}", self.host(id), self.controller_port(id))
    }

    /// `host:port,...` of every node.
    pub fn bootstrap(&self) -> String {
        self.bootstrap_without(&[])
    }

    /// `host:port,...` of every node except `exclude`.
    pub fn bootstrap_without(&self, exclude: &[i32]) -> String {
        (1..=self.nodes())
            .filter(|id| !exclude.contains(id))
            .map(|id| self.broker_addr(id))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Kafka's `controller.quorum.voters` of the cluster: `1@host:port,...`.
    pub fn quorum(&self) -> String {
        (1..=self.nodes())
            .map(|id| format!("{id}@{}", self.controller_addr(id)))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The `key=value` properties every node starts with.
    pub fn settings(&self) -> &[String] {
        &self.set
    }

    /// Replaces the properties nodes start with from now on (a restarted node reads them).
    pub fn set_settings(&mut self, set: Vec<String>) {
        self.set = set;
    }

    /// Starts node `id` (again), keeping its data dir; its output is appended to its log.
    pub fn spawn(&mut self, id: i32) -> Result<()> {
        let dir = self.node_dir(id);
        std::fs::create_dir_all(&dir)
            .map_err(LaunchError::io(format!("creating {}", dir.display())))?;
        let log_path = dir.join("server.log");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(LaunchError::io(format!("opening {}", log_path.display())))?;
        let log2 = log
            .try_clone()
            .map_err(LaunchError::io("duplicating the log descriptor"))?;
        let mut cmd = match self.placement.get((id - 1) as usize) {
            Some((_, ns)) => {
                let mut c = Command::new("ip");
                c.arg("netns").arg("exec").arg(ns).arg(&self.exe);
                c
            }
            None => Command::new(&self.exe),
        };
        server_args(
            &mut cmd,
            id,
            &self.broker_addr(id),
            &self.controller_addr(id),
            &self.quorum(),
            &dir,
            &self.set,
        );
        let child = cmd
            .stdout(log2)
            .stderr(log)
            .stdin(Stdio::null())
            .spawn()
            .map_err(LaunchError::io(format!(
                "starting node {id} ({})",
                self.exe.display()
            )))?;
        self.procs.set(id, child);
        Ok(())
    }

    /// Waits until node `id` accepts TCP connections on its broker port (a broker listener
    /// accepts only once the node is registered and unfenced), failing early if it exits.
    pub fn wait_listening(&mut self, id: i32, limit: Duration) -> Result<()> {
        let addr = self.broker_addr(id);
        let deadline = Instant::now() + limit;
        loop {
            if std::net::TcpStream::connect(&addr).is_ok() {
                return Ok(());
            }
            self.procs.check_alive()?;
            if Instant::now() >= deadline {
                return Err(LaunchError::NotListening {
                    id,
                    addr,
                    secs: limit.as_secs(),
                    log: self.procs.log_path(id),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// [`LocalCluster::wait_listening`] for every running node.
    pub fn wait_listening_all(&mut self, limit: Duration) -> Result<()> {
        let deadline = Instant::now() + limit;
        for id in 1..=self.nodes() {
            if self.procs.is_running(id) {
                self.wait_listening(id, deadline.saturating_duration_since(Instant::now()))?;
            }
        }
        Ok(())
    }

    /// The last `lines` lines of every node's log, headed by the node id (for a failing
    /// test's output).
    pub fn log_tails(&self, lines: usize) -> String {
        (1..=self.nodes())
            .map(|id| {
                let log = std::fs::read_to_string(self.procs.log_path(id)).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(lines).collect();
                format!(
                    "--- node {id} ---\n{}",
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_ports_and_quorum() {
        let dir = tempfile::tempdir().unwrap();
        // `true` exits at once: the launcher only starts processes, it does not wait.
        let mut opts = LaunchOptions::new("true", dir.path().join("c"), 3);
        opts.ports = Ports::Base(19092);
        let mut c = LocalCluster::launch(opts).unwrap();
        assert_eq!(c.broker_addr(2), "127.0.0.1:19093");
        assert_eq!(c.controller_addr(3), "127.0.0.1:19194");
        assert_eq!(
            c.quorum(),
            "1@127.0.0.1:19192,2@127.0.0.1:19193,3@127.0.0.1:19194"
        );
        assert_eq!(c.bootstrap_without(&[1]), "127.0.0.1:19093,127.0.0.1:19094");
        assert!(c.node_dir(1).is_dir());
        let mut opts = LaunchOptions::new("true", dir.path().join("d"), 2);
        opts.ports = Ports::Base(u16::MAX - 50);
        assert!(LocalCluster::launch(opts).is_err());
        // `true` has exited by now, or will shortly.
        let deadline = Instant::now() + Duration::from_secs(5);
        while c.procs.check_alive().is_ok() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(matches!(
            c.procs.check_alive(),
            Err(LaunchError::Exited { .. })
        ));
    }

    #[test]
    fn a_node_that_never_listens_is_reported_with_its_log() {
        let dir = tempfile::tempdir().unwrap();
        // A binary whose tools work (the launcher formats every node first) but whose server
        // exits at once.
        let bin = dir.path().join("exits");
        std::fs::write(
            &bin,
            "#!/bin/sh\ncase \"$1\" in\n  random-uuid) echo AAAAAAAAAAAAAAAAAAAAAA ;;\n  format) ;;\n  *) exit 1 ;;\nesac\n",
        )
        .unwrap();
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let opts = LaunchOptions::new(bin.to_str().unwrap(), dir.path().join("c"), 1);
        let mut c = LocalCluster::launch(opts).unwrap();
        let e = c.wait_listening(1, Duration::from_secs(5)).unwrap_err();
        assert!(
            matches!(
                e,
                LaunchError::Exited { id: 1, .. } | LaunchError::NotListening { .. }
            ),
            "{e}"
        );
    }

    #[test]
    fn placement_must_cover_every_node() {
        let dir = tempfile::tempdir().unwrap();
        let mut opts = LaunchOptions::new("true", dir.path(), 2);
        opts.placement = vec![("10.0.0.1".into(), "ns1".into())];
        assert!(matches!(
            LocalCluster::launch(opts),
            Err(LaunchError::Invalid(_))
        ));
    }
}

#[cfg(test)]
mod format_tests {
    use super::*;

    #[test]
    fn cluster_id_read_from_meta_properties() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(cluster_id_of(dir.path()), None);
        std::fs::write(
            dir.path().join("meta.properties"),
            "#\n#Mon Dec 07\nnode.id=1\ncluster.id=AbCdEfGhIjKlMnOpQrStUv\nversion=1\n",
        )
        .unwrap();
        assert_eq!(
            cluster_id_of(dir.path()).as_deref(),
            Some("AbCdEfGhIjKlMnOpQrStUv")
        );
    }
}
