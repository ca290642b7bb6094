//! The server processes of a local test cluster, one slot per node id (1-based): what both
//! the Strom and the Kafka clusters of `strom chaos` do with their children — signal, pause,
//! kill, reap, check — and the guarantee that none outlives the cluster (SIGKILL on drop).

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context};

/// `n` distinct loopback ports that are free now, below the kernel's ephemeral range (32768
/// and up on Linux): a port the kernel hands out with `:0` can be taken by any outgoing
/// connection (the clients', the nodes' own) before the node restarted on it binds it again, and
/// the node then fails with "Address already in use". Each run starts its scan at a different
/// place so that concurrent runs rarely probe the same ports; every port stays bound until all
/// are chosen.
pub fn free_ports(n: usize) -> anyhow::Result<Vec<u16>> {
    const LOW: u32 = 10_000;
    const SPAN: u32 = 10_000;
    let seed = std::process::id()
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
    let start = seed % SPAN;
    let mut held = Vec::with_capacity(n);
    for k in 0..SPAN {
        if held.len() == n {
            break;
        }
        let port = (LOW + (start + k) % SPAN) as u16;
        if let Ok(l) = TcpListener::bind(("127.0.0.1", port)) {
            held.push(l);
        }
    }
    if held.len() < n {
        bail!(
            "fewer than {n} free loopback ports between {LOW} and {}",
            LOW + SPAN
        );
    }
    held.iter().map(|l| Ok(l.local_addr()?.port())).collect()
}

pub struct NodeProcs {
    /// Where node `i`'s logs are, for error messages: `<dir>/node-<i>`.
    dir: PathBuf,
    children: Vec<Option<Child>>,
    /// Per node: stopped with SIGSTOP and not yet continued.
    paused: Vec<bool>,
}

impl NodeProcs {
    pub fn new(dir: PathBuf, nodes: usize) -> NodeProcs {
        NodeProcs {
            dir,
            children: (0..nodes).map(|_| None).collect(),
            paused: vec![false; nodes],
        }
    }

    pub fn nodes(&self) -> i32 {
        self.children.len() as i32
    }

    /// Records the process just started for node `id`.
    pub fn set(&mut self, id: i32, child: Child) {
        let i = (id - 1) as usize;
        self.children[i] = Some(child);
        self.paused[i] = false;
    }

    /// Whether node `id` has a running (possibly paused) process.
    pub fn is_running(&self, id: i32) -> bool {
        self.children[(id - 1) as usize].is_some()
    }

    pub fn is_paused(&self, id: i32) -> bool {
        self.paused[(id - 1) as usize]
    }

    /// The process id of node `id`, when it runs.
    pub fn pid(&self, id: i32) -> Option<u32> {
        self.children[(id - 1) as usize].as_ref().map(|c| c.id())
    }

    /// SIGSTOPs node `id`: the process keeps its sockets but answers nothing, like a long GC
    /// pause or a frozen VM.
    pub fn pause(&mut self, id: i32) -> anyhow::Result<()> {
        self.signal(id, "STOP")?;
        self.paused[(id - 1) as usize] = true;
        Ok(())
    }

    /// SIGCONTs node `id` after [`NodeProcs::pause`].
    pub fn resume(&mut self, id: i32) -> anyhow::Result<()> {
        self.signal(id, "CONT")?;
        self.paused[(id - 1) as usize] = false;
        Ok(())
    }

    /// Sends `sig` (STOP, CONT, TERM, ...) through kill(1): the workspace forbids `unsafe` and
    /// has no `nix`.
    pub fn signal(&self, id: i32, sig: &str) -> anyhow::Result<()> {
        let Some(pid) = self.pid(id) else {
            bail!("node {id} is not running");
        };
        let st = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(pid.to_string())
            .stdin(Stdio::null())
            .status()
            .with_context(|| format!("running kill -{sig}"))?;
        if !st.success() {
            bail!("kill -{sig} {pid} (node {id}) failed: {st}");
        }
        Ok(())
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
                        "node {} exited ({status}); see the logs in {}",
                        i + 1,
                        self.dir.join(format!("node-{}", i + 1)).display()
                    );
                }
            }
        }
        Ok(())
    }
}

impl Drop for NodeProcs {
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
