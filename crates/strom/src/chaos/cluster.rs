//! A local cluster of `strom server` child processes (this same binary), as `dev-cluster`
//! starts, that can kill and restart single nodes, pause and resume them (SIGSTOP/SIGCONT), and
//! optionally run each node in its own network namespace (`strom chaos nemesis --net`). Every
//! child is killed when it is dropped.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context};

use super::procs::{free_ports, NodeProcs};

pub struct LocalCluster {
    exe: PathBuf,
    dir: PathBuf,
    broker_ports: Vec<u16>,
    controller_ports: Vec<u16>,
    set: Vec<String>,
    /// The nodes' processes: signals, pause/resume, kill, reaping; all killed on drop.
    pub procs: NodeProcs,
    /// Per node: the address it listens on and the network namespace it runs in (`--net`);
    /// empty for the default, every node on 127.0.0.1 in this namespace.
    placement: Vec<(String, String)>,
}

impl LocalCluster {
    /// Starts `nodes` nodes (ids 1..=nodes) with fresh data dirs under `dir`.
    pub fn start(dir: &Path, nodes: u16, set: &[String]) -> anyhow::Result<LocalCluster> {
        Self::start_placed(dir, nodes, set, Vec::new())
    }

    /// Like [`LocalCluster::start`], node `i` (1-based) listening on `placement[i-1].0` inside
    /// network namespace `placement[i-1].1` (started through `ip netns exec`, which execs, so
    /// the child's pid is the server's). An empty `placement` means 127.0.0.1 here.
    pub fn start_placed(
        dir: &Path,
        nodes: u16,
        set: &[String],
        placement: Vec<(String, String)>,
    ) -> anyhow::Result<LocalCluster> {
        if !placement.is_empty() && placement.len() != nodes as usize {
            bail!("a placement per node is needed");
        }
        if nodes == 0 {
            bail!("--nodes must be at least 1");
        }
        if dir.exists() {
            std::fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))?;
        }
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let ports = free_ports(2 * nodes as usize)?;
        let mut c = LocalCluster {
            exe: std::env::current_exe().context("locating the strom binary")?,
            dir: dir.to_path_buf(),
            broker_ports: ports[..nodes as usize].to_vec(),
            controller_ports: ports[nodes as usize..].to_vec(),
            set: set.to_vec(),
            procs: NodeProcs::new(dir.to_path_buf(), nodes as usize),
            placement,
        };
        let cluster_id = strom_broker::meta_properties::random_uuid();
        for id in 1..=nodes as i32 {
            crate::dev_cluster::format_node(&c.node_dir(id), id, &cluster_id)?;
            c.spawn(id)?;
        }
        Ok(c)
    }

    pub fn nodes(&self) -> i32 {
        self.procs.nodes()
    }

    pub fn node_dir(&self, id: i32) -> PathBuf {
        self.dir.join(format!("node-{id}"))
    }

    pub fn broker_addr(&self, id: i32) -> String {
        format!("{}:{}", self.host(id), self.broker_ports[(id - 1) as usize])
    }

    /// The address node `id` listens on.
    pub fn host(&self, id: i32) -> &str {
        self.placement
            .get((id - 1) as usize)
            .map_or("127.0.0.1", |(h, _)| h.as_str())
    }

    /// `host:port,...` of every node except `exclude`.
    pub fn bootstrap_without(&self, exclude: &[i32]) -> String {
        (1..=self.nodes())
            .filter(|id| !exclude.contains(id))
            .map(|id| self.broker_addr(id))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Starts node `id` (again), keeping its data dir.
    pub fn spawn(&mut self, id: i32) -> anyhow::Result<()> {
        let i = (id - 1) as usize;
        let quorum = (0..self.nodes() as usize)
            .map(|j| {
                let h = self.host(j as i32 + 1);
                format!("{}@{h}:{}", j + 1, self.controller_ports[j])
            })
            .collect::<Vec<_>>()
            .join(",");
        let dir = self.node_dir(id);
        std::fs::create_dir_all(&dir)?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("server.log"))?;
        let mut cmd = match self.placement.get(i) {
            Some((_, ns)) => {
                let mut c = Command::new("ip");
                c.arg("netns").arg("exec").arg(ns).arg(&self.exe);
                c
            }
            None => Command::new(&self.exe),
        };
        crate::dev_cluster::server_args(
            &mut cmd,
            id,
            &self.broker_addr(id),
            &format!("{}:{}", self.host(id), self.controller_ports[i]),
            &quorum,
            &dir,
            &self.set,
        );
        let child = cmd
            .stdout(log.try_clone()?)
            .stderr(log)
            .stdin(Stdio::null())
            .spawn()
            .with_context(|| format!("starting node {id}"))?;
        self.procs.set(id, child);
        Ok(())
    }
}
