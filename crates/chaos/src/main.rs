//! `strom-chaos`: the fault-injection harness's command (see the library's page). It starts
//! `strom server` processes of the `strom` binary next to it (or `--strom PATH`).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use strom_chaos::ChaosCommand;

#[derive(Parser)]
#[command(
    name = "strom-chaos",
    version,
    about = "Fault-injection experiments on local Strom and Apache Kafka clusters"
)]
struct Cli {
    /// The `strom` binary whose servers the experiments start (default: the one next to
    /// strom-chaos).
    #[arg(long, global = true, value_name = "PATH")]
    strom: Option<PathBuf>,
    #[command(subcommand)]
    command: ChaosCommand,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The nemesis makes the clients retry all the time by design: their retry warnings would
    // drown the run's own log of faults.
    let default_level = match &cli.command {
        ChaosCommand::Nemesis(_) => "warn,strom_client=error",
        _ => "warn",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level)),
        )
        .with_writer(std::io::stderr)
        .init();
    if let Some(p) = cli.strom {
        strom_chaos::set_strom_exe(p);
    }
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
    match runtime.block_on(strom_chaos::run(cli.command)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
