//! The `tsumiki` command line: benchmarks that reproduce the papers' experiments against
//! real peers, and (later) tools for databases.

mod bench;

use clap::{Parser, Subcommand};

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
    Bench(bench::BenchCommand),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench(b) => bench::run(b),
    };
    if let Err(e) = result {
        eprintln!("tsumiki: error: {e}");
        std::process::exit(2);
    }
}
