//! Benchmarks. One runner per benchmark family, one result format, every structure or
//! protocol behind one trait and monomorphised (no dynamic dispatch per operation).

pub mod index;
mod report;
mod workload;

use clap::Subcommand;

/// `tsumiki bench ...`
#[derive(Subcommand)]
pub enum BenchCommand {
    /// The index benchmark of paper 002: the Bw-tree against other concurrent ordered maps.
    Index(index::IndexArgs),
}

pub fn run(cmd: BenchCommand) -> Result<(), String> {
    match cmd {
        BenchCommand::Index(args) => index::run(&args),
    }
}
