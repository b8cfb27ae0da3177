//! The database tools: `dump`, `load`, `check`, `get`, `put`, `delete`, `scan` and
//! `compact`. Exit codes: 0 success; 1 a negative answer (`get`/`delete`: no such key;
//! `check`: damage found; `load`: the dump is damaged or truncated); 2 anything else
//! (usage, a missing or locked database, I/O).

mod check;
pub(crate) mod compact;
mod dump;
mod format;
mod kv;

use std::io::IsTerminal;
use std::ops::Bound;
use std::path::Path;

use indicatif::{ProgressBar, ProgressStyle};
use tsumiki::{Db, Error, Options};

/// The tools' subcommands (flattened into `tsumiki`'s own).
#[derive(clap::Subcommand)]
pub enum ToolCommand {
    /// Write every record of a database to a dump file (or standard output).
    #[command(after_help = dump::DUMP_HELP)]
    Dump(dump::DumpArgs),
    /// Read a dump into a new or empty database (or, with --merge, any database).
    #[command(after_help = dump::LOAD_HELP)]
    Load(dump::LoadArgs),
    /// Verify every checksum and structure of a database's files, changing nothing.
    #[command(after_help = check::HELP)]
    Check(check::CheckArgs),
    /// Print the value of a key (exit code 1 if there is none).
    #[command(after_help = kv::GET_HELP)]
    Get(kv::GetArgs),
    /// Store a value under a key (one durable transaction).
    #[command(after_help = kv::PUT_HELP)]
    Put(kv::PutArgs),
    /// Delete a key (exit code 1 if there was none).
    #[command(after_help = kv::DELETE_HELP)]
    Delete(kv::DeleteArgs),
    /// Print the records of a key range, in key order (or reversed).
    #[command(after_help = kv::SCAN_HELP)]
    Scan(kv::ScanArgs),
    /// Reclaim space: rewrite the database into a fresh copy and swap it in atomically.
    #[command(after_help = compact::HELP)]
    Compact(compact::CompactArgs),
}

/// Runs a tool; returns the process's exit code (errors are printed here).
pub fn run(cmd: ToolCommand) -> i32 {
    let r = match cmd {
        ToolCommand::Dump(a) => dump::dump(&a),
        ToolCommand::Load(a) => dump::load(&a),
        ToolCommand::Check(a) => check::run(&a),
        ToolCommand::Get(a) => kv::get(&a),
        ToolCommand::Put(a) => kv::put(&a),
        ToolCommand::Delete(a) => kv::delete(&a),
        ToolCommand::Scan(a) => kv::scan(&a),
        ToolCommand::Compact(a) => compact::run(&a),
    };
    match r {
        Ok(code) => code,
        Err(f) => {
            eprintln!("tsumiki: error: {}", f.message);
            f.code
        }
    }
}

/// A tool's failure: the message and the exit code.
pub struct Failure {
    /// What went wrong (printed after `tsumiki: error: `).
    pub message: String,
    /// The exit code.
    pub code: i32,
}

impl Failure {
    /// An error with exit code 2.
    pub fn new(message: impl Into<String>) -> Failure {
        Failure { message: message.into(), code: 2 }
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        Failure::new(e.to_string())
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Failure {
        Failure::new(e.to_string())
    }
}

/// A tool's result: an exit code, or a failure.
pub type Outcome = Result<i32, Failure>;

/// Opens the existing database in `dir` (read-only: writes refused). A missing one is an
/// error that says how to make one.
pub fn open_existing(dir: &Path, read_only: bool) -> Result<Db, Failure> {
    let opts = Options { read_only, ..Options::default() };
    Db::open(dir, opts).map_err(|e| match e {
        Error::NotFound(_) => Failure::new(format!(
            "{} holds no tsumiki database (`tsumiki put --create` or `tsumiki load` makes one)",
            dir.display()
        )),
        e => Failure::new(format!("{}: {e}", dir.display())),
    })
}

/// A progress bar on standard error: `len` bytes or a spinner counting records; hidden
/// with `quiet` or when standard error is not a terminal.
pub fn progress(quiet: bool, len: Option<u64>, what: &str) -> ProgressBar {
    if quiet || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = match len {
        Some(n) => ProgressBar::new(n).with_style(
            ProgressStyle::with_template(&format!(
                "{what} [{{elapsed_precise}}] {{wide_bar}} {{bytes}}/{{total_bytes}} ({{bytes_per_sec}}, {{eta}} left) {{msg}}"
            ))
            .expect("a valid template"),
        ),
        None => ProgressBar::new_spinner().with_style(
            ProgressStyle::with_template(&format!("{what} [{{elapsed_precise}}] {{spinner}} {{human_pos}} records {{msg}}"))
                .expect("a valid template"),
        ),
    };
    bar.enable_steady_tick(std::time::Duration::from_millis(200));
    bar
}

/// Records per read transaction of [`scan_chunks`], and the bytes of keys and values one
/// gathers at most (beyond one record).
const CHUNK_RECORDS: usize = 16 << 10;
const CHUNK_BYTES: usize = 8 << 20;

/// Calls `f` with each record between `lo` and `hi` in key order (`reverse`: descending)
/// until it returns `false`. The records are read in read-only transactions of at most
/// [`CHUNK_RECORDS`] records or [`CHUNK_BYTES`] bytes, each starting after the last
/// record of the one before: memory stays bounded, and, since this process holds the
/// database's lock and writes nothing meanwhile, the chunks together are one consistent
/// state. A chunk that a transaction retries is gathered again before `f` sees it.
pub fn scan_chunks(
    db: &Db,
    mut lo: Bound<Vec<u8>>,
    mut hi: Bound<Vec<u8>>,
    reverse: bool,
    mut f: impl FnMut(&[u8], &[u8]) -> Result<bool, Failure>,
) -> Result<(), Failure> {
    loop {
        let (chunk, full) = db.view(|r| {
            let scan = r.range((lo.clone(), hi.clone()));
            let scan = if reverse { scan.rev() } else { scan };
            let (mut out, mut bytes) = (Vec::new(), 0usize);
            for row in scan {
                let (k, v) = row?;
                bytes += k.len() + v.len();
                out.push((k, v));
                if out.len() >= CHUNK_RECORDS || bytes >= CHUNK_BYTES {
                    return Ok((out, true));
                }
            }
            Ok((out, false))
        })?;
        for (k, v) in &chunk {
            if !f(k, v)? {
                return Ok(());
            }
        }
        match chunk.into_iter().last() {
            Some((last, _)) if full => {
                if reverse {
                    hi = Bound::Excluded(last);
                } else {
                    lo = Bound::Excluded(last);
                }
            }
            _ => return Ok(()),
        }
    }
}

/// Total bytes of the files directly in `dir`.
pub fn dir_bytes(dir: &Path) -> std::io::Result<u64> {
    let mut n = 0;
    for e in std::fs::read_dir(dir)? {
        let m = e?.metadata()?;
        if m.is_file() {
            n += m.len();
        }
    }
    Ok(n)
}
