//! A local cluster of `strom server` child processes (this same binary), as `dev-cluster`
//! starts, that can kill and restart single nodes. Every child is killed when it is dropped.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context};

pub struct LocalCluster {
    exe: PathBuf,
    dir: PathBuf,
    broker_ports: Vec<u16>,
    controller_ports: Vec<u16>,
    set: Vec<String>,
    children: Vec<Option<Child>>,
}

impl LocalCluster {
    /// Starts `nodes` nodes (ids 1..=nodes) with fresh data dirs under `dir`.
    pub fn start(dir: &Path, nodes: u16, set: &[String]) -> anyhow::Result<LocalCluster> {
        if nodes == 0 {
            bail!("--nodes must be at least 1");
        }
        if dir.exists() {
            std::fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))?;
        }
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut ports = Vec::new();
        // Hold every listener until all are chosen so that no port is handed out twice.
        let mut held = Vec::new();
        for _ in 0..2 * nodes {
            let l = TcpListener::bind("127.0.0.1:0")?;
            ports.push(l.local_addr()?.port());
            held.push(l);
        }
        drop(held);
        let mut c = LocalCluster {
            exe: std::env::current_exe().context("locating the strom binary")?,
            dir: dir.to_path_buf(),
            broker_ports: ports[..nodes as usize].to_vec(),
            controller_ports: ports[nodes as usize..].to_vec(),
            set: set.to_vec(),
            children: (0..nodes).map(|_| None).collect(),
        };
        for id in 1..=nodes as i32 {
            c.spawn(id)?;
        }
        Ok(c)
    }

    pub fn nodes(&self) -> i32 {
        self.children.len() as i32
    }

    pub fn node_dir(&self, id: i32) -> PathBuf {
        self.dir.join(format!("node-{id}"))
    }

    pub fn broker_addr(&self, id: i32) -> String {
        format!("127.0.0.1:{}", self.broker_ports[(id - 1) as usize])
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
        let quorum = (0..self.children.len())
            .map(|j| format!("{}@127.0.0.1:{}", j + 1, self.controller_ports[j]))
            .collect::<Vec<_>>()
            .join(",");
        let dir = self.node_dir(id);
        std::fs::create_dir_all(&dir)?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("server.log"))?;
        let mut cmd = Command::new(&self.exe);
        cmd.arg("server")
            .arg("--node-id")
            .arg(id.to_string())
            .arg("--listen")
            .arg(self.broker_addr(id))
            .arg("--controller-listen")
            .arg(format!("127.0.0.1:{}", self.controller_ports[i]))
            .arg("--controller-quorum")
            .arg(&quorum)
            .arg("--data-dir")
            .arg(&dir);
        for s in &self.set {
            cmd.arg("--set").arg(s);
        }
        let child = cmd
            .stdout(log.try_clone()?)
            .stderr(log)
            .stdin(Stdio::null())
            .spawn()
            .with_context(|| format!("starting node {id}"))?;
        self.children[i] = Some(child);
        Ok(())
    }

    /// The process id of node `id`, when it runs.
    pub fn pid(&self, id: i32) -> Option<u32> {
        self.children[(id - 1) as usize].as_ref().map(|c| c.id())
    }

    /// Reaps node `id` if it has exited; whether it had.
    pub fn try_reap(&mut self, id: i32) -> anyhow::Result<bool> {
        let slot = &mut self.children[(id - 1) as usize];
        let Some(c) = slot.as_mut() else {
            return Ok(true);
        };
        if c.try_wait()?.is_some() {
            *slot = None;
            return Ok(true);
        }
        Ok(false)
    }

    /// SIGKILLs node `id` and reaps it.
    pub fn kill(&mut self, id: i32) -> anyhow::Result<()> {
        let Some(mut c) = self.children[(id - 1) as usize].take() else {
            bail!("node {id} is not running");
        };
        c.kill().with_context(|| format!("killing node {id}"))?;
        let _ = c.wait();
        Ok(())
    }

    /// Fails if a node that should be running has exited.
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        for (i, c) in self.children.iter_mut().enumerate() {
            if let Some(c) = c {
                if let Ok(Some(status)) = c.try_wait() {
                    bail!(
                        "node {} exited ({status}); see {}",
                        i + 1,
                        self.dir
                            .join(format!("node-{}", i + 1))
                            .join("server.log")
                            .display()
                    );
                }
            }
        }
        Ok(())
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        // The data is thrown away: SIGKILL everything at once rather than wait for shutdowns.
        for c in self.children.iter_mut().flatten() {
            let _ = c.kill();
        }
        for c in self.children.iter_mut().flatten() {
            for _ in 0..50 {
                if matches!(c.try_wait(), Ok(Some(_))) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.wait();
        }
    }
}
