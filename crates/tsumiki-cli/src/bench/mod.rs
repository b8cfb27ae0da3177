//! Benchmarks. One runner per benchmark family, one result format, every structure or
//! protocol behind one trait and monomorphised (no dynamic dispatch per operation).
//!
//! Every family shares: progress bars on standard error ([`progress`]), the output schema
//! (`--json` lines, `--csv FILE`: [`schema`]), `--plot FILE.svg` ([`plot`]), and temporary
//! databases removed on Ctrl-C ([`cleanup`]).

pub mod cache;
mod cleanup;
pub mod fill;
pub mod index;
pub mod kv;
mod plot;
mod progress;
mod report;
mod schema;
pub mod txn;
pub mod wal;
mod workload;

use clap::Subcommand;

/// `tsumiki bench ...`
#[derive(Subcommand)]
pub enum BenchCommand {
    /// A database many times larger than its cache (issue 13): fill, a zipfian
    /// read/update mix, reopen and verify against a model, with resident memory sampled.
    Cache(cache::CacheArgs),
    /// The fill benchmark of paper 004: inserting records in transactions of a fixed size,
    /// durable at every commit, against real peers (LevelDB, RocksDB, LMDB, SQLite, redb,
    /// fjall) and a raw write + fdatasync floor.
    Fill(fill::FillArgs),
    /// redb's engine comparison (24-byte random keys, 150-byte values): loads, durable and
    /// non-durable writes, len, random and range reads on 1 to 32 threads, removals, pops,
    /// retain and compaction, on tsumiki and every peer, with sizes on disk and peak RSS.
    Kv(kv::KvArgs),
    /// The index benchmark of paper 002: the Bw-tree against other concurrent ordered maps.
    Index(index::IndexArgs),
    /// The transaction benchmark (papers 000 and 001, YCSB): every concurrency-control
    /// protocol on the same workload.
    Txn(txn::TxnArgs),
    /// The logging benchmark of paper 003: P-WAL against a single WAL and a write-only
    /// upper bound.
    Wal(wal::WalArgs),
}

pub fn run(cmd: BenchCommand) -> Result<(), String> {
    cleanup::install_handler()?;
    let result = match cmd {
        BenchCommand::Cache(args) => cache::run(&args),
        BenchCommand::Fill(args) => fill::run(&args),
        BenchCommand::Index(args) => index::run(&args),
        BenchCommand::Kv(args) => kv::run(&args),
        BenchCommand::Txn(args) => txn::run(&args),
        BenchCommand::Wal(args) => wal::run(&args),
    };
    // An error caused by the Ctrl-C handler removing the files is not the run's outcome.
    cleanup::hold_if_interrupted();
    result
}
