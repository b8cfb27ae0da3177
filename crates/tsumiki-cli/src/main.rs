//! The `tsumiki` command line: benchmarks that reproduce the papers' experiments against
//! real peers, and tools for databases (dump, load, check, stats, get/put/delete/scan,
//! compact).

mod bench;
mod stats;
mod tools;

use clap::{Parser, Subcommand};

/// Every structure in a benchmark allocates through the same allocator. glibc's malloc
/// spends much of a write-heavy run trimming and refaulting its per-thread arenas, for every
/// structure alike; mimalloc is what embedders of a storage engine typically link (as RocksDB
/// does jemalloc), so the comparison measures the structures rather than glibc.
#[cfg(not(feature = "system-alloc"))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's options, by their numbers in the bundled mimalloc 3 header
/// (`libmimalloc-sys` 0.1.49, `c_src/mimalloc/v3/include/mimalloc.h`, `mi_option_e`).
#[cfg(not(feature = "system-alloc"))]
const MI_OPTION_ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;
#[cfg(not(feature = "system-alloc"))]
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Freed memory goes back to the system within a millisecond, and arenas are committed as
/// they are used rather than whole. mimalloc's defaults (a 10 ms purge delay, arenas
/// committed eagerly on Linux) kept the resident set of `bench cache` at twice the live
/// heap (3M records under a 16 MiB cache: 148 MiB peak in the fill, 64 MiB with these),
/// and resident memory is what that benchmark measures, for every engine alike.
/// Set from the program's constructors, before the Rust runtime's first allocation
/// reserves an arena (an option set in `main` comes after that arena, committed whole).
#[cfg(all(not(feature = "system-alloc"), target_os = "linux"))]
#[used]
#[link_section = ".init_array"]
static CONFIGURE_ALLOCATOR: extern "C" fn() = configure_allocator;

#[cfg(not(feature = "system-alloc"))]
extern "C" fn configure_allocator() {
    // SAFETY: plain option setters of the C library, called before any thread is started.
    unsafe {
        libmimalloc_sys::mi_option_set(MI_OPTION_ARENA_EAGER_COMMIT, 0);
        libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 1);
    }
}

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
    #[command(after_help = stats::HELP)]
    Stats(stats::StatsArgs),
    // The database tools (dump, load, check, get, put, delete, scan, compact).
    #[command(flatten)]
    Tools(tools::ToolCommand),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench(b) => bench::run(*b),
        Command::Stats(a) => stats::run(&a),
        Command::Tools(t) => std::process::exit(tools::run(t)),
    };
    if let Err(e) = result {
        eprintln!("tsumiki: error: {e}");
        std::process::exit(2);
    }
}
