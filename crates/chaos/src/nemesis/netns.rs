//! `--net`: the test network. One network namespace per node, each joined to a bridge in this
//! (the root) namespace by a veth pair, and link cuts made of blackhole routes. Owns creating
//! and removing all of it: [`NetLab`]'s `Drop` deletes the namespaces and the bridge, so an
//! error, Ctrl-C or SIGTERM (the command's future is dropped) leaves nothing behind.
//!
//! Addressing: 10.77.S.0/24 with S picked per run, node i at 10.77.S.i, the bridge (and so
//! this command's clients) at 10.77.S.254. Nodes reach each other across the bridge (layer 2,
//! no forwarding needed); a cut between two hosts is a `blackhole` route to the other in each
//! of them, so packets in both directions are dropped: established connections hang until
//! their timeouts, new ones fail, as in a real partition.

use std::collections::BTreeSet;
use std::process::{Command, Stdio};

use anyhow::{bail, Context};

/// The root namespace, where the bridge and the clients are, as a "host" of a cut.
pub const CLIENTS: i32 = 0;

pub struct NetLab {
    pub run_id: String,
    bridge: String,
    subnet: u8,
    namespaces: Vec<String>,
    /// Cut links, each pair (a, b) with a < b; hosts are node ids or [`CLIENTS`].
    cuts: BTreeSet<(i32, i32)>,
}

/// Fails unless this process is root and `ip` runs: namespaces and veths need CAP_NET_ADMIN.
pub fn check_prerequisites() -> anyhow::Result<()> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let uid = status
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .and_then(|l| l.split_whitespace().nth(2))
        .unwrap_or("");
    if uid != "0" {
        bail!("--net needs root (network namespaces and veth links); run as root or drop --net");
    }
    let ok = Command::new("ip")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok {
        bail!("--net needs the `ip` command (iproute2)");
    }
    Ok(())
}

fn ip(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running ip {}", args.join(" ")))?;
    if !out.status.success() {
        bail!(
            "ip {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

impl NetLab {
    /// Creates the bridge and `nodes` namespaces. Names carry a per-run id so that parallel
    /// runs do not collide; the subnet is one no interface here uses yet.
    pub fn create(nodes: i32) -> anyhow::Result<NetLab> {
        check_prerequisites()?;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let id = (std::process::id() ^ nanos.rotate_left(11)) & 0xff_ffff;
        let run_id = format!("{id:06x}");
        let used = Command::new("ip")
            .args(["-o", "-4", "addr"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        let subnet = (0..250u32)
            .map(|k| ((id + k) % 250 + 1) as u8)
            .find(|s| !used.contains(&format!("10.77.{s}.")))
            .context("no free 10.77.x.0/24 subnet")?;
        let mut lab = NetLab {
            bridge: format!("stbr{run_id}"),
            run_id,
            subnet,
            namespaces: Vec::new(),
            cuts: BTreeSet::new(),
        };
        // On an error part-way, dropping `lab` removes what was made so far.
        ip(&["link", "add", &lab.bridge, "type", "bridge"])?;
        let bridge_addr = format!("{}/24", lab.addr(CLIENTS));
        ip(&["addr", "add", &bridge_addr, "dev", &lab.bridge])?;
        ip(&["link", "set", &lab.bridge, "up"])?;
        for i in 1..=nodes {
            let ns = format!("strom-{}-n{i}", lab.run_id);
            ip(&["netns", "add", &ns])?;
            lab.namespaces.push(ns.clone());
            let outer = format!("st{}n{i}", lab.run_id);
            let inner = format!("st{}i{i}", lab.run_id);
            ip(&[
                "link", "add", &outer, "type", "veth", "peer", "name", &inner,
            ])?;
            ip(&["link", "set", &inner, "netns", &ns])?;
            ip(&["link", "set", &outer, "master", &lab.bridge, "up"])?;
            let addr = format!("{}/24", lab.addr(i));
            for args in [
                vec!["link", "set", "lo", "up"],
                vec!["addr", "add", &addr, "dev", &inner],
                vec!["link", "set", &inner, "up"],
            ] {
                let mut a = vec!["netns", "exec", &ns, "ip"];
                a.extend(args);
                ip(&a)?;
            }
        }
        Ok(lab)
    }

    /// The address of node `id`, or of the bridge for [`CLIENTS`].
    pub fn addr(&self, id: i32) -> String {
        let host = if id == CLIENTS { 254 } else { id };
        format!("10.77.{}.{host}", self.subnet)
    }

    /// (listen address, namespace) per node, for [`strom_launcher::LocalCluster`].
    pub fn placement(&self) -> Vec<(String, String)> {
        self.namespaces
            .iter()
            .enumerate()
            .map(|(i, ns)| (self.addr(i as i32 + 1), ns.clone()))
            .collect()
    }

    /// `ip route add|del blackhole <to>/32`, in `host`'s namespace.
    fn route(&self, op: &str, host: i32, to: i32) -> anyhow::Result<()> {
        let dst = format!("{}/32", self.addr(to));
        if host == CLIENTS {
            ip(&["route", op, "blackhole", &dst])
        } else {
            let ns = &self.namespaces[(host - 1) as usize];
            ip(&["netns", "exec", ns, "ip", "route", op, "blackhole", &dst])
        }
    }

    /// Cuts the link between hosts `a` and `b` (node ids or [`CLIENTS`]), both directions.
    pub fn cut(&mut self, a: i32, b: i32) -> anyhow::Result<()> {
        let key = (a.min(b), a.max(b));
        if a == b || self.cuts.contains(&key) {
            return Ok(());
        }
        self.cuts.insert(key);
        self.route("add", a, b)?;
        self.route("add", b, a)
    }

    /// Restores every cut link.
    pub fn heal(&mut self) -> anyhow::Result<()> {
        let mut first_err = None;
        for (a, b) in std::mem::take(&mut self.cuts) {
            for (h, to) in [(a, b), (b, a)] {
                if let Err(e) = self.route("del", h, to) {
                    first_err.get_or_insert(e);
                }
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    pub fn has_cuts(&self) -> bool {
        !self.cuts.is_empty()
    }

    pub fn namespaces(&self) -> &[String] {
        &self.namespaces
    }
}

impl Drop for NetLab {
    fn drop(&mut self) {
        // The root namespace's routes would outlive the run; the namespaces take theirs (and
        // the veth ends inside them, whose peers then vanish too) when deleted.
        for (a, b) in std::mem::take(&mut self.cuts) {
            if a == CLIENTS {
                let _ = self.route("del", CLIENTS, b);
            }
        }
        for ns in &self.namespaces {
            let _ = ip(&["netns", "del", ns]);
        }
        let _ = ip(&["link", "del", &self.bridge]);
    }
}
