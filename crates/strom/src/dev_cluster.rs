//! `strom dev-cluster`: a local cluster on loopback in one command, for experiments and tests.
//! Each node is a separate `strom server` process (this same binary), a controller voter and a
//! broker; their pids and ports are printed, and Ctrl-C / SIGTERM stops them all.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context};

#[derive(clap::Args)]
pub struct DevClusterArgs {
    /// Number of nodes (each a controller voter and a broker).
    #[arg(long, default_value_t = 3)]
    pub nodes: u16,
    /// Parent directory of the nodes' data dirs (node N uses DIR/node-N).
    #[arg(long, default_value = "./strom-dev-cluster")]
    pub data_dir: PathBuf,
    /// Node N's broker listens on BASE+N-1 and its controller on BASE+100+N-1.
    #[arg(long, default_value_t = 19092)]
    pub base_port: u16,
    /// Extra `--set key=value` for every node.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
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

/// Formats one node's data dir for `cluster_id` (`strom format --ignore-formatted`), before the
/// dir gets anything else (the node's `server.log`): a server refuses an existing dir that is
/// not formatted.
pub fn format_node(dir: &Path, id: i32, cluster_id: &str) -> anyhow::Result<()> {
    strom_broker::meta_properties::format(&[dir.to_path_buf()], id, cluster_id, true)
        .with_context(|| format!("formatting {}", dir.display()))?;
    Ok(())
}

struct Nodes(Vec<Child>);

impl Drop for Nodes {
    fn drop(&mut self) {
        for c in &mut self.0 {
            // SIGTERM first so every node shuts down cleanly; SIGKILL whatever is left.
            let _ = Command::new("kill").arg(c.id().to_string()).status();
        }
        for c in &mut self.0 {
            for _ in 0..100 {
                if matches!(c.try_wait(), Ok(Some(_))) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

pub async fn run(args: DevClusterArgs) -> anyhow::Result<()> {
    if args.nodes == 0 {
        bail!("--nodes must be at least 1");
    }
    let exe = std::env::current_exe().context("locating the strom binary")?;
    let quorum: Vec<String> = (0..args.nodes)
        .map(|i| format!("{}@127.0.0.1:{}", i + 1, args.base_port + 100 + i))
        .collect();
    let quorum = quorum.join(",");
    // Formatted as `strom format` does, with one cluster id: node 1's from an earlier run,
    // else a new one; dirs formatted already are kept as they are.
    let cluster_id = strom_broker::meta_properties::cluster_id_of(&args.data_dir.join("node-1"))
        .unwrap_or_else(strom_broker::meta_properties::random_uuid);
    let mut nodes = Nodes(Vec::new());
    for i in 0..args.nodes {
        let id = i + 1;
        let dir = args.data_dir.join(format!("node-{id}"));
        format_node(&dir, id.into(), &cluster_id)?;
        let log = std::fs::File::create(dir.join("server.log"))?;
        let mut cmd = Command::new(&exe);
        server_args(
            &mut cmd,
            id.into(),
            &format!("127.0.0.1:{}", args.base_port + i),
            &format!("127.0.0.1:{}", args.base_port + 100 + i),
            &quorum,
            &dir,
            &args.set,
        );
        let child = cmd
            .stdout(log.try_clone()?)
            .stderr(log)
            .stdin(Stdio::null())
            .spawn()
            .with_context(|| format!("starting node {id}"))?;
        println!(
            "node {id}: pid {} broker 127.0.0.1:{} controller 127.0.0.1:{} data {}",
            child.id(),
            args.base_port + i,
            args.base_port + 100 + i,
            dir.display()
        );
        nodes.0.push(child);
    }
    let bootstrap: Vec<String> = (0..args.nodes)
        .map(|i| format!("127.0.0.1:{}", args.base_port + i))
        .collect();
    println!("bootstrap.servers={}", bootstrap.join(","));
    println!("Ctrl-C stops the cluster.");
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = term.recv() => break,
            _ = tick.tick() => {
                for (i, c) in nodes.0.iter_mut().enumerate() {
                    if let Ok(Some(status)) = c.try_wait() {
                        bail!("node {} exited ({status}); see its server.log", i + 1);
                    }
                }
            }
        }
    }
    println!("stopping the cluster");
    drop(nodes);
    Ok(())
}
