//! `strom`: one binary that is the broker, the metadata controller and the command-line tools.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{anyhow, bail, Context};
use clap::{Parser, Subcommand};
use strom_broker::config::{parse_properties, BrokerConfig};
use strom_broker::Server;

mod dev_cluster;

use strom_tools::{bench, cli, dump_log};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "strom",
    version,
    about = "A Kafka-compatible streaming platform"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a broker (and, in a single-node cluster, the metadata controller).
    Server(ServerArgs),
    /// Format the log directories of a node (like kafka-storage.sh format): takes the
    /// same flags as `server` and writes meta.properties with --cluster-id into every dir.
    Format(FormatArgs),
    /// Print a new random cluster id (like kafka-storage.sh random-uuid).
    RandomUuid,
    /// Start a local multi-node cluster on loopback (each node a controller voter and broker).
    DevCluster(dev_cluster::DevClusterArgs),
    /// Create, list, describe, alter and delete topics (like kafka-topics.sh).
    Topics(cli::topics::TopicsArgs),
    /// List, describe and delete consumer groups, reset their offsets (like
    /// kafka-consumer-groups.sh).
    Groups(cli::groups::GroupsArgs),
    /// List and describe transactions and producers, find and abort hanging transactions
    /// (like kafka-transactions.sh).
    Transactions(cli::transactions::TransactionsArgs),
    /// Produce lines from stdin (like kafka-console-producer.sh).
    Produce(cli::produce::ProduceArgs),
    /// Print records to stdout (like kafka-console-consumer.sh).
    Consume(cli::consume::ConsumeArgs),
    /// Print the contents of .log, .index, .timeindex and .snapshot files offline (like
    /// kafka-dump-log.sh).
    #[command(name = "dump-log")]
    DumpLog(dump_log::DumpLogArgs),
    /// Benchmark a broker (records/s, MB/s, latency percentiles).
    Bench(bench::BenchArgs),
}

#[derive(clap::Args)]
struct ServerArgs {
    /// This node's id (Kafka's node.id; default 1).
    #[arg(long)]
    node_id: Option<i32>,
    /// Address to accept Kafka clients on: a PLAINTEXT listener (Kafka's
    /// listeners=PLAINTEXT://HOST:PORT; default 127.0.0.1:9092).
    #[arg(long)]
    listen: Option<String>,
    /// Address clients are told to connect to (default: the listen address).
    #[arg(long)]
    advertised_listener: Option<String>,
    /// Directory for logs and metadata (Kafka's log.dirs; overridden by log.dirs / log.dir).
    /// It must be formatted (`strom format`), unless it does not exist yet: a fresh node
    /// creates and formats its dirs itself.
    #[arg(long, default_value = "./strom-data")]
    data_dir: PathBuf,
    /// This node's controller listener (cluster mode): the quorum's Raft traffic and the
    /// brokers' requests to the controller (Kafka's CONTROLLER listener). Default: this node's
    /// address in --controller-quorum.
    #[arg(long)]
    controller_listen: Option<String>,
    /// The controller voters, `1@HOST:PORT,2@HOST:PORT,3@HOST:PORT` (Kafka's
    /// controller.quorum.voters). Without it the node is a single-node cluster.
    #[arg(long)]
    controller_quorum: Option<String>,
    /// This broker's rack (broker.rack), for rack-aware replica placement.
    #[arg(long)]
    rack: Option<String>,
    /// A Kafka-style .properties file (e.g. Kafka's config/server.properties).
    #[arg(long)]
    config: Option<PathBuf>,
    /// A Kafka property, e.g. --set log.segment.bytes=1048576 (repeatable; wins over --config).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
}

#[derive(clap::Args)]
struct FormatArgs {
    /// The cluster id to format with (`strom random-uuid` makes one); every node of a cluster
    /// is formatted with the same.
    #[arg(long, short = 't')]
    cluster_id: String,
    /// Skip dirs that are already formatted (for this cluster and node) and format the others,
    /// rather than failing.
    #[arg(long)]
    ignore_formatted: bool,
    #[command(flatten)]
    server: ServerArgs,
}

/// `strom format` (Kafka's `kafka-storage format`): the node's dirs from the same flags and
/// properties `strom server` reads.
fn run_format(args: FormatArgs) -> anyhow::Result<()> {
    let props = server_properties(&args.server)?;
    let config = BrokerConfig::from_props(args.server.data_dir.clone(), props)?;
    let dirs = strom_broker::meta_properties::dirs_of(&config);
    let lines = strom_broker::meta_properties::format(
        &dirs,
        config.node_id,
        &args.cluster_id,
        args.ignore_formatted,
    )?;
    for line in lines {
        println!("{line}");
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Tools print their results; only the server logs its progress by default.
    let default_level = match &cli.command {
        Command::Server(_) => "info",
        _ => "warn",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level)),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Server(args) => run_server(args).await,
            Command::Format(args) => run_format(args),
            Command::RandomUuid => {
                println!("{}", strom_broker::meta_properties::random_uuid());
                Ok(())
            }
            Command::DevCluster(args) => dev_cluster::run(args).await,
            Command::Topics(args) => Ok(cli::topics::run(args).await?),
            Command::Groups(args) => Ok(cli::groups::run(args).await?),
            Command::Transactions(args) => Ok(cli::transactions::run(args).await?),
            Command::Produce(args) => Ok(cli::produce::run(args).await?),
            Command::Consume(args) => Ok(cli::consume::run(args).await?),
            Command::DumpLog(args) => Ok(dump_log::run(args)?),
            Command::Bench(args) => Ok(bench::run(args).await?),
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn split_host_port(addr: &str) -> anyhow::Result<(String, i32)> {
    let (host, port) = addr
        .rsplit_once(':')
        .ok_or_else(|| anyhow!("invalid advertised listener '{addr}' (expected HOST:PORT)"))?;
    let port: u16 = port
        .parse()
        .with_context(|| format!("invalid port in advertised listener '{addr}'"))?;
    Ok((host.to_string(), port as i32))
}

/// The Kafka properties of a server: the `--config` file, then `--set`, then the flags, which
/// are shorthands for Kafka's keys (`--listen` is `listeners=PLAINTEXT://...`,
/// `--controller-listen` adds a `CONTROLLER` listener named in `controller.listener.names`,
/// `--controller-quorum` is `controller.quorum.voters`, `--node-id` is `node.id`).
fn server_properties(args: &ServerArgs) -> anyhow::Result<BTreeMap<String, String>> {
    let mut props = BTreeMap::new();
    if let Some(path) = &args.config {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read config file {}", path.display()))?;
        props.extend(parse_properties(&text)?);
    }
    for kv in &args.set {
        let Some((k, v)) = kv.split_once('=') else {
            bail!("invalid --set '{kv}': expected KEY=VALUE");
        };
        props.insert(k.trim().to_string(), v.trim().to_string());
    }
    if let Some(id) = args.node_id {
        props.insert("node.id".into(), id.to_string());
    }
    if let Some(rack) = &args.rack {
        props.insert("broker.rack".into(), rack.clone());
    }
    if let Some(voters) = &args.controller_quorum {
        props.insert("controller.quorum.voters".into(), voters.clone());
    }
    let flags = args.listen.is_some() || args.controller_listen.is_some();
    if flags || !props.contains_key("listeners") {
        let listen = args.listen.as_deref().unwrap_or("127.0.0.1:9092");
        let mut listeners = format!("PLAINTEXT://{listen}");
        let controller = match &args.controller_listen {
            Some(a) => Some(a.clone()),
            // A voter listens where the quorum says it does.
            None if args.controller_quorum.is_some() => {
                let voters = strom_broker::config::parse_quorum_voters(
                    args.controller_quorum.as_deref().unwrap_or_default(),
                )?;
                let id = props
                    .get("node.id")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(1);
                let addr = voters
                    .get(&id)
                    .ok_or_else(|| anyhow!("--controller-quorum does not name this node ({id})"))?;
                Some(addr.to_string())
            }
            None => None,
        };
        if let Some(c) = controller {
            listeners.push_str(&format!(",CONTROLLER://{c}"));
            props.insert("controller.listener.names".into(), "CONTROLLER".into());
            if args.controller_quorum.is_none() && !props.contains_key("controller.quorum.voters") {
                bail!("--controller-listen needs --controller-quorum");
            }
        }
        props.insert("listeners".into(), listeners);
        if args.listen.is_some() {
            // The flag's listener replaces the file's, and so does its advertised address.
            props.remove("advertised.listeners");
            props.remove("inter.broker.listener.name");
        }
    }
    if let Some(a) = &args.advertised_listener {
        let (host, port) = split_host_port(a)?;
        props.insert(
            "advertised.listeners".into(),
            format!("PLAINTEXT://{host}:{port}"),
        );
    }
    Ok(props)
}

async fn run_server(args: ServerArgs) -> anyhow::Result<()> {
    let props = server_properties(&args)?;
    let config = BrokerConfig::from_props(args.data_dir.clone(), props)?;
    let node_id = config.node_id;
    let server = Server::start(config).await?;
    println!(
        "strom broker {} listening on {}",
        node_id,
        server.local_addr()
    );
    server.run(shutdown_signal()).await?;
    Ok(())
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
