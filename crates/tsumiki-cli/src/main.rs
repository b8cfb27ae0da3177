//! The `tsumiki` command line: benchmarks that reproduce the papers' experiments against
//! real peers, and (later) tools for databases.

mod bench;
mod stats;

use clap::{Parser, Subcommand};

/// Every structure in a benchmark allocates through the same allocator. glibc's malloc
/// spends much of a write-heavy run trimming and refaulting its per-thread arenas, for every
/// structure alike; mimalloc is what embedders of a storage engine typically link (as RocksDB
/// does jemalloc), so the comparison measures the structures rather than glibc.
#[cfg(not(feature = "system-alloc"))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "tsumiki", version, about = "tsumiki: a transactional key-value engine — benchmarks and tools")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a benchmark.
    #[command(subcommand)]
    Bench(Box<bench::BenchCommand>),
    /// Show what a database directory holds, from its block trailers and page table.
    Stats(stats::StatsArgs),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench(b) => bench::run(*b),
        Command::Stats(a) => stats::run(&a),
    };
    if let Err(e) = result {
        eprintln!("tsumiki: error: {e}");
        std::process::exit(2);
    }
}
