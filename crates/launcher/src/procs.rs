//! The server processes of a local cluster, one slot per node id (1-based): what every cluster
//! of the launcher's users does with its children — signal, pause, kill, reap, check — and the
//! guarantee that none outlives the cluster (SIGKILL on drop).

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{LaunchError, Result};

/// `n` distinct loopback ports that are free now, below the kernel's ephemeral range (32768
/// and up on Linux): a port the kernel hands out with `:0` can be taken by any outgoing
/// connection (the clients', the nodes' own) before the node restarted on it binds it again, and
/// the node then fails with "Address already in use". Each call starts its scan at a different
/// place so that concurrent runs rarely probe the same ports; every port stays bound until all
/// are chosen.
pub fn free_ports(n: usize) -> Result<Vec<u16>> {
    const LOW: u32 = 10_000;
    const SPAN: u32 = 10_000;
    static CALLS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let seed = std::process::id()
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos())
        ^ CALLS
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            .wrapping_mul(7919);
    let start = seed % SPAN;
    let mut held = Vec::with_capacity(n.min(SPAN as usize));
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
        return Err(LaunchError::Invalid(format!(
            "fewer than {n} free loopback ports between {LOW} and {}",
            LOW + SPAN
        )));
    }
    held.iter()
        .map(|l| {
            Ok(l.local_addr()
                .map_err(LaunchError::io("local address"))?
                .port())
        })
        .collect()
}

pub struct NodeProcs {
    /// Where node `i`'s logs are, for error messages: `<dir>/node-<i>/server.log`.
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

    fn slot(&self, id: i32) -> Result<usize> {
        let i = usize::try_from(id - 1).map_err(|_| LaunchError::NotRunning(id))?;
        if i >= self.children.len() {
            return Err(LaunchError::Invalid(format!(
                "no node {id} in a cluster of {}",
                self.children.len()
            )));
        }
        Ok(i)
    }

    /// Records the process just started for node `id`.
    pub fn set(&mut self, id: i32, child: Child) {
        let i = (id - 1) as usize;
        self.children[i] = Some(child);
        self.paused[i] = false;
    }

    /// Takes node `id`'s process out of the cluster's care (the caller waits for it).
    pub fn take(&mut self, id: i32) -> Option<Child> {
        let i = self.slot(id).ok()?;
        self.paused[i] = false;
        self.children[i].take()
    }

    /// Whether node `id` has a running (possibly paused) process.
    pub fn is_running(&self, id: i32) -> bool {
        self.slot(id)
            .map(|i| self.children[i].is_some())
            .unwrap_or(false)
    }

    pub fn is_paused(&self, id: i32) -> bool {
        self.slot(id).map(|i| self.paused[i]).unwrap_or(false)
    }

    /// The process id of node `id`, when it runs.
    pub fn pid(&self, id: i32) -> Option<u32> {
        let i = self.slot(id).ok()?;
        self.children[i].as_ref().map(|c| c.id())
    }

    /// The log of node `id`.
    pub fn log_path(&self, id: i32) -> PathBuf {
        self.dir.join(format!("node-{id}")).join("server.log")
    }

    /// SIGSTOPs node `id`: the process keeps its sockets but answers nothing, like a long GC
    /// pause or a frozen VM.
    pub fn pause(&mut self, id: i32) -> Result<()> {
        self.signal(id, "STOP")?;
        self.paused[(id - 1) as usize] = true;
        Ok(())
    }

    /// SIGCONTs node `id` after [`NodeProcs::pause`].
    pub fn resume(&mut self, id: i32) -> Result<()> {
        self.signal(id, "CONT")?;
        self.paused[(id - 1) as usize] = false;
        Ok(())
    }

    /// Sends `sig` (STOP, CONT, TERM, ...) through kill(1): the workspace forbids `unsafe` and
    /// has no `nix`.
    pub fn signal(&self, id: i32, sig: &str) -> Result<()> {
        let pid = self.pid(id).ok_or(LaunchError::NotRunning(id))?;
        let status = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(pid.to_string())
            .stdin(Stdio::null())
            .status()
            .map_err(LaunchError::io(format!("running kill -{sig}")))?;
        if !status.success() {
            return Err(LaunchError::Signal {
                id,
                sig: sig.to_string(),
                pid,
                status,
            });
        }
        Ok(())
    }

    /// Reaps node `id` if it has exited; whether it had.
    pub fn try_reap(&mut self, id: i32) -> Result<bool> {
        let i = self.slot(id)?;
        let slot = &mut self.children[i];
        let Some(c) = slot.as_mut() else {
            return Ok(true);
        };
        if c.try_wait()
            .map_err(LaunchError::io(format!("waiting for node {id}")))?
            .is_some()
        {
            *slot = None;
            return Ok(true);
        }
        Ok(false)
    }

    /// SIGKILLs node `id` and reaps it.
    pub fn kill(&mut self, id: i32) -> Result<()> {
        let mut c = self.take(id).ok_or(LaunchError::NotRunning(id))?;
        c.kill()
            .map_err(LaunchError::io(format!("killing node {id}")))?;
        let _ = c.wait();
        Ok(())
    }

    /// SIGTERMs node `id` (a clean shutdown) and waits up to `grace` for it to exit, then
    /// SIGKILLs it; its exit status when it exited by itself.
    pub fn terminate(
        &mut self,
        id: i32,
        grace: Duration,
    ) -> Result<Option<std::process::ExitStatus>> {
        if self.is_paused(id) {
            self.resume(id)?;
        }
        self.signal(id, "TERM")?;
        let mut c = self.take(id).ok_or(LaunchError::NotRunning(id))?;
        Ok(wait_or_kill(&mut c, grace))
    }

    /// SIGTERMs every running node at once and waits up to `grace` for all, SIGKILLing those
    /// still running then.
    pub fn terminate_all(&mut self, grace: Duration) {
        for id in 1..=self.nodes() {
            if self.is_paused(id) {
                let _ = self.resume(id);
            }
            let _ = self.signal(id, "TERM");
        }
        let deadline = Instant::now() + grace;
        for c in self.children.iter_mut() {
            if let Some(mut child) = c.take() {
                wait_or_kill(
                    &mut child,
                    deadline.saturating_duration_since(Instant::now()),
                );
            }
        }
    }

    /// Fails if a node that should be running has exited.
    pub fn check_alive(&mut self) -> Result<()> {
        for i in 0..self.children.len() {
            if let Some(c) = &mut self.children[i] {
                if let Ok(Some(status)) = c.try_wait() {
                    let id = i as i32 + 1;
                    return Err(LaunchError::Exited {
                        id,
                        status,
                        log: self.log_path(id),
                    });
                }
            }
        }
        Ok(())
    }
}

fn wait_or_kill(c: &mut Child, grace: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + grace;
    loop {
        if let Ok(Some(st)) = c.try_wait() {
            return Some(st);
        }
        if Instant::now() >= deadline {
            let _ = c.kill();
            let _ = c.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Drop for NodeProcs {
    fn drop(&mut self) {
        // Whatever the owner did not stop itself is killed: SIGKILL everything at once rather
        // than wait for shutdowns one by one.
        for c in self.children.iter_mut().flatten() {
            let _ = c.kill();
        }
        for c in self.children.iter_mut().flatten() {
            let _ = c.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_ports_are_distinct_and_below_the_ephemeral_range() {
        let ports = free_ports(20).unwrap();
        let mut sorted = ports.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), 20);
        assert!(ports.iter().all(|&p| (10_000..20_000).contains(&p)));
    }

    #[test]
    fn signals_kill_and_reap_a_child() {
        let dir = tempfile::tempdir().unwrap();
        let mut procs = NodeProcs::new(dir.path().to_path_buf(), 2);
        let child = Command::new("sleep").arg("30").spawn().unwrap();
        procs.set(1, child);
        assert!(procs.is_running(1));
        assert!(!procs.is_running(2));
        assert!(matches!(procs.kill(2), Err(LaunchError::NotRunning(2))));
        procs.pause(1).unwrap();
        assert!(procs.is_paused(1));
        procs.resume(1).unwrap();
        assert!(!procs.try_reap(1).unwrap());
        procs.check_alive().unwrap();
        let st = procs.terminate(1, Duration::from_secs(5)).unwrap();
        assert!(st.is_some(), "sleep exits on SIGTERM");
        assert!(!procs.is_running(1));
        assert!(procs.pid(1).is_none());
        assert!(procs.pid(9).is_none());
    }

    #[test]
    fn an_exited_node_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let mut procs = NodeProcs::new(dir.path().to_path_buf(), 1);
        let mut child = Command::new("true").spawn().unwrap();
        let _ = child.wait();
        procs.set(1, child);
        assert!(matches!(
            procs.check_alive(),
            Err(LaunchError::Exited { id: 1, .. })
        ));
    }
}
