//! `strom dev-cluster`: a local cluster on loopback in one command, for experiments and tests.
//! Each node is a separate `strom server` process (this same binary), a controller voter and a
//! broker, started through `strom_launcher` (the launcher the chaos harness and the integration
//! tests use too); their pids and ports are printed, and Ctrl-C / SIGTERM stops them all.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use strom_launcher::{LaunchOptions, LocalCluster, Ports};

#[derive(clap::Args)]
pub struct DevClusterArgs {
    /// Number of nodes (each a controller voter and a broker).
    #[arg(long, default_value_t = 3)]
    pub nodes: u16,
    /// Parent directory of the nodes' data dirs (node N uses DIR/node-N); kept across runs.
    #[arg(long, default_value = "./strom-dev-cluster")]
    pub data_dir: PathBuf,
    /// Node N's broker listens on BASE+N-1 and its controller on BASE+100+N-1.
    #[arg(long, default_value_t = 19092)]
    pub base_port: u16,
    /// Extra `--set key=value` for every node.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
}

/// How long the nodes get to shut down cleanly (controlled shutdown) before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(10);

pub async fn run(args: DevClusterArgs) -> anyhow::Result<()> {
    if args.nodes == 0 {
        bail!("--nodes must be at least 1");
    }
    let exe = std::env::current_exe().context("locating the strom binary")?;
    let mut opts = LaunchOptions::new(exe, &args.data_dir, args.nodes).set(&args.set);
    opts.ports = Ports::Base(args.base_port);
    opts.fresh = false;
    let mut cluster = LocalCluster::launch(opts)?;
    for id in 1..=cluster.nodes() {
        println!(
            "node {id}: pid {} broker {} controller {} data {}",
            cluster.procs.pid(id).unwrap_or(0),
            cluster.broker_addr(id),
            cluster.controller_addr(id),
            cluster.node_dir(id).display()
        );
    }
    println!("bootstrap.servers={}", cluster.bootstrap());
    println!("Ctrl-C stops the cluster.");
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    let result = loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break Ok(()),
            _ = term.recv() => break Ok(()),
            _ = tick.tick() => {
                if let Err(e) = cluster.procs.check_alive() {
                    break Err(e.into());
                }
            }
        }
    };
    println!("stopping the cluster");
    // SIGTERM every node so that each shuts down cleanly; SIGKILL whatever is left.
    tokio::task::spawn_blocking(move || cluster.procs.terminate_all(STOP_GRACE)).await?;
    result
}
