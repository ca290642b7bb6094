//! What the chaos harness's tests share: running `strom-chaos` with a hard time limit.
//!
//! `strom-chaos` starts the `strom` binary next to it (`target/<profile>/strom`), which a
//! workspace test run (`cargo test --workspace`, `make test`) builds; `cargo test -p
//! strom-chaos` alone needs `cargo build -p strom` first.

pub mod bounded;

/// `strom-chaos` of this build.
pub fn strom_chaos() -> std::process::Command {
    std::process::Command::new(env!("CARGO_BIN_EXE_strom-chaos"))
}
