//! `tsumiki bench fill`: paper 004's fill experiment against real peers. Insert `--records`
//! records with 4-byte big-endian keys, `--per-txn` per transaction, in ascending or
//! seeded random order, durable at every commit (each engine's own setting) or not.
//!
//! Each (engine, round) runs in its own child process (this binary re-run with a hidden
//! `--child ENGINE`), so that peak RSS and the device bytes of `/proc/self/io` belong to one
//! engine alone. Rounds alternate the engines (round 1 runs each once, then round 2...), so
//! a slow phase of the machine touches every engine alike; medians over rounds are reported.
//! `--per-txn` takes a list (paper 004 fills with 1 and 100 records per transaction): each
//! size runs every engine, and the plot draws records/s against the transaction size.
//!
//! The parent creates one temporary directory (removed at the end and on Ctrl-C, when it
//! also sends SIGTERM to its running child) and each child fills a directory inside it.

pub(crate) mod peers;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use clap::Args;
use indicatif::ProgressBar;
use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};

use self::peers::{match_engine, Batch, FillConfig, FillEngine, ENGINES};
use super::cleanup::{wait_child, TempDir};
use super::plot::{self, Chart};
use super::schema::{Family, OutputArgs, Reporter, ResultRecord};
use super::workload::rng;
use super::{progress, report};

#[derive(Args, Debug, Clone, Serialize)]
pub struct FillArgs {
    /// Records to insert.
    #[arg(long, default_value_t = 1_000_000)]
    pub records: u64,
    /// Records per transaction; a comma-separated list runs each size (paper 004: 1,100).
    #[arg(long, default_value = "100", value_delimiter = ',')]
    pub per_txn: Vec<usize>,
    /// Key order: asc (0, 1, 2, ...) or random (a seeded permutation of 0..records).
    #[arg(long, default_value = "asc", value_parser = ["asc", "random"])]
    pub order: String,
    /// Bytes per value (its content derived from the key number).
    #[arg(long, default_value_t = 8)]
    pub value_size: usize,
    /// Durable at every commit, by each engine's own setting (the default).
    #[arg(long, overrides_with = "no_sync")]
    pub sync: bool,
    /// Not durable at commit: the engines' buffered settings (see each peer).
    #[arg(long, overrides_with = "sync")]
    pub no_sync: bool,
    /// Engines, comma-separated: tsumiki, leveldb, rocksdb, lmdb, sqlite, redb, fjall, raw
    /// (a preallocated file: one 4 KiB write and an fdatasync per transaction), raw-direct
    /// (the same with direct I/O), or all (every one built in).
    #[arg(long, default_value = "all", value_delimiter = ',')]
    pub engine: Vec<String>,
    /// Rounds; each runs every engine once, and the medians over rounds are reported.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Seed of the random key order.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Directory under which each fill gets a fresh temporary directory (default: the
    /// system temp dir). It should be on the device being measured, not a tmpfs.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Also measure reopening after a crash: per engine and round, one more child fills a
    /// database and is killed with SIGKILL right after its last commit returns; another
    /// then opens it, times the open and the read of the last key, and checks the first
    /// and last records (with `--sync` only: they must be durable).
    #[arg(long)]
    pub crash: bool,
    #[command(flatten)]
    #[serde(flatten)]
    pub out: OutputArgs,
    /// tsumiki's synced log through the OS page cache rather than with direct I/O
    /// (`LogOptions::direct_io`).
    #[arg(long)]
    pub no_direct_io: bool,
    /// Internal: with `--child`, the crash measure's phase (`fill` then SIGKILL, or
    /// `reopen`) in the database directory `--crash-dir`.
    #[arg(long, hide = true, value_parser = ["fill", "reopen"])]
    #[serde(skip)]
    pub crash_phase: Option<String>,
    /// Internal: the database directory of a crash phase.
    #[arg(long, hide = true)]
    #[serde(skip)]
    pub crash_dir: Option<PathBuf>,
    /// Internal: run one fill of this engine and print its measurements as one JSON line.
    #[arg(long, hide = true)]
    #[serde(skip)]
    pub child: Option<String>,
    /// Internal: the progress bar's label in a child.
    #[arg(long, hide = true, default_value = "")]
    #[serde(skip)]
    pub label: String,
}

impl FillArgs {
    /// The configuration of a fill of `per_txn` records per transaction.
    fn config(&self, per_txn: usize) -> FillConfig {
        FillConfig {
            sync: !self.no_sync,
            records: self.records,
            per_txn,
            value_size: self.value_size,
            direct_io: !self.no_direct_io,
            cache_bytes: None,
        }
    }

    /// A child's one transaction size.
    fn child_per_txn(&self) -> Result<usize, String> {
        match self.per_txn[..] {
            [n] => Ok(n),
            _ => Err("a child fill takes one --per-txn".into()),
        }
    }
}

pub fn run(args: &FillArgs) -> Result<(), String> {
    if args.records == 0 || args.per_txn.is_empty() || args.per_txn.contains(&0) || args.rounds == 0 {
        return Err("--records, --per-txn and --rounds must be at least 1".into());
    }
    if args.records > 1 << 32 {
        return Err("--records: keys are 4-byte integers, so at most 4294967296".into());
    }
    if args.crash && args.no_sync {
        return Err("--crash needs --sync: the records read back after the kill must be durable".into());
    }
    if let Some(engine) = &args.child {
        let line = match (&args.crash_phase, &args.crash_dir) {
            (Some(phase), Some(dir)) => serde_json::to_string(&run_crash_child(engine, phase, dir, args)?),
            _ => serde_json::to_string(&run_child(engine, args)?),
        };
        println!("{}", line.map_err(|e| format!("encoding the result: {e}"))?);
        return Ok(());
    }
    let engines = select_engines(&args.engine)?;
    let exe = std::env::current_exe().map_err(|e| format!("finding this binary: {e}"))?;
    let mut reporter = Reporter::start(Family::Fill, &args.out, args)?;
    // Every child fills a directory of its own inside this one.
    let base = TempDir::new("tsumiki-bench-fill-", args.dir.as_deref())?;
    let mut rows = Vec::new();
    for &per_txn in &args.per_txn {
        let mut runs: Vec<Vec<FillResult>> = (0..engines.len()).map(|_| Vec::new()).collect();
        for round in 0..args.rounds {
            for (i, engine) in engines.iter().enumerate() {
                let label = format!("{per_txn}/txn round {}/{} {engine}", round + 1, args.rounds);
                let mut r: FillResult = spawn_child(&exe, engine, per_txn, &label, &[], base.path(), args)?;
                if args.crash {
                    r.crash_reopen_s = Some(crash_reopen(&exe, engine, per_txn, &label, base.path(), args)?);
                }
                runs[i].push(r);
            }
        }
        for (engine, r) in engines.iter().zip(&runs) {
            let row = summarize(engine, per_txn, r, args);
            reporter.row(&row)?;
            rows.push(row);
        }
    }
    base.close()?;
    reporter.finish()?;
    if !args.out.json {
        print_table(&rows, args);
    }
    if let Some(path) = &args.out.plot {
        plot_rows(path, args, &rows)?;
    }
    Ok(())
}

/// The engines to run, in [`ENGINES`] order for `all` (skipping, with a note, those not
/// built in) and in the given order otherwise.
fn select_engines(list: &[String]) -> Result<Vec<&'static str>, String> {
    let mut out = Vec::new();
    for name in list {
        if name == "all" {
            for e in ENGINES {
                match peers::missing(e) {
                    Some(why) => eprintln!("note: skipping {why}"),
                    None if !out.contains(&e) => out.push(e),
                    None => {}
                }
            }
            continue;
        }
        let e = ENGINES
            .iter()
            .find(|e| **e == name.as_str())
            .ok_or_else(|| format!("unknown --engine {name:?}; known: {}, all", ENGINES.join(", ")))?;
        if let Some(why) = peers::missing(e) {
            return Err(why);
        }
        if !out.contains(e) {
            out.push(*e);
        }
    }
    if out.is_empty() {
        return Err("no engine to run".into());
    }
    Ok(out)
}

/// Runs one fill in a child process (with `extra` arguments, its directory under `base`)
/// and returns its result line. The child's progress bar goes to the inherited stderr.
fn spawn_child<T: for<'de> Deserialize<'de>>(
    exe: &Path,
    engine: &str,
    per_txn: usize,
    label: &str,
    extra: &[&std::ffi::OsStr],
    base: &Path,
    args: &FillArgs,
) -> Result<T, String> {
    let child = child_command(exe, engine, per_txn, label, extra, base, args)
        .spawn()
        .map_err(|e| format!("running {}: {e}", exe.display()))?;
    let out = wait_child(child).map_err(|e| format!("{label}: waiting for the child: {e}"))?;
    if !out.status.success() {
        return Err(format!("{label}: the child process failed ({})", out.status));
    }
    result_line(&out.stdout, label)
}

/// The command line of a child.
fn child_command(
    exe: &Path,
    engine: &str,
    per_txn: usize,
    label: &str,
    extra: &[&std::ffi::OsStr],
    base: &Path,
    args: &FillArgs,
) -> Command {
    let mut cmd = Command::new(exe);
    cmd.args(["bench", "fill", "--child", engine, "--label", label])
        .args(extra)
        .args(["--records", &args.records.to_string()])
        .args(["--per-txn", &per_txn.to_string()])
        .args(["--order", &args.order])
        .args(["--value-size", &args.value_size.to_string()])
        .arg(if args.no_sync { "--no-sync" } else { "--sync" })
        .args(args.no_direct_io.then_some("--no-direct-io"))
        .args(args.out.quiet.then_some("--quiet"))
        .args(["--seed", &args.seed.to_string()])
        .arg("--dir")
        .arg(base);
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::inherit());
    cmd
}

/// The last JSON line a child printed.
pub(super) fn result_line<T: for<'de> Deserialize<'de>>(stdout: &[u8], label: &str) -> Result<T, String> {
    let text = String::from_utf8_lossy(stdout);
    let line = text.lines().rev().find(|l| l.starts_with('{')).ok_or_else(|| format!("{label}: no result line"))?;
    serde_json::from_str(line).map_err(|e| format!("{label}: bad result line {line:?}: {e}"))
}

/// The crash measure: a child fills a database in a directory this process owns and is
/// killed by SIGKILL after its last commit; another child reopens it. Returns the reopen
/// time (open and the read of the last key).
fn crash_reopen(
    exe: &Path,
    engine: &str,
    per_txn: usize,
    label: &str,
    base: &Path,
    args: &FillArgs,
) -> Result<f64, String> {
    use std::os::unix::process::ExitStatusExt;
    let tmp = TempDir::new(&format!("tsumiki-crash-{engine}-"), Some(base))?;
    let dir = tmp.path().as_os_str();
    let label = format!("{label} (killed)");
    let phase = |p: &'static str| [std::ffi::OsStr::new("--crash-phase"), p.as_ref(), "--crash-dir".as_ref(), dir];
    let child = child_command(exe, engine, per_txn, &label, &phase("fill"), base, args)
        .spawn()
        .map_err(|e| format!("running {}: {e}", exe.display()))?;
    let out = wait_child(child).map_err(|e| format!("{label}: waiting for the child: {e}"))?;
    if out.status.signal() != Some(libc::SIGKILL) {
        return Err(format!("{label}: the child was to be killed after its fill, but ended with {}", out.status));
    }
    let r: ReopenResult =
        spawn_child(exe, engine, per_txn, &format!("{label}, reopened"), &phase("reopen"), base, args)?;
    tmp.close()?;
    Ok(r.reopen_s)
}

/// What a crash phase's reopen child reports.
#[derive(Serialize, Deserialize, Debug)]
struct ReopenResult {
    engine: String,
    reopen_s: f64,
}

/// A crash phase in `dir`: `fill` (then SIGKILL, before any close) or `reopen`.
fn run_crash_child(engine: &str, phase: &str, dir: &Path, args: &FillArgs) -> Result<ReopenResult, String> {
    let records = Records::new(args.records, &args.order, args.value_size, args.seed);
    let cfg = args.config(args.child_per_txn()?);
    let db_dir = dir.join("db");
    if phase == "fill" {
        let bar = progress::bar(args.out.quiet, args.records, args.label.clone(), "records");
        std::fs::create_dir(&db_dir).map_err(|e| format!("creating {}: {e}", db_dir.display()))?;
        let r = crash_fill(engine, &db_dir, &cfg, &records, &bar);
        bar.finish_and_clear();
        return Err(r.err().unwrap_or_else(|| "the fill was not killed".into()));
    }
    let reopen_s = match_engine!(engine, E => reopen_and_check::<E>(&db_dir, &cfg, &records))?;
    Ok(ReopenResult { engine: engine.to_string(), reopen_s })
}

/// Fills `dir`, then kills this process with SIGKILL while the database is open (no close,
/// no destructor runs): returns only on an error.
fn crash_fill(engine: &str, dir: &Path, cfg: &FillConfig, records: &Records, bar: &ProgressBar) -> Result<(), String> {
    match_engine!(engine, E => {
        let mut db = E::open(dir, cfg)?;
        for batch in records.batches(cfg.per_txn) {
            db.write_batch(&batch)?;
            bar.inc(batch.len() as u64);
        }
        // SAFETY: a plain system call; the process ends here, as in a crash.
        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        // Reached only if the signal was not delivered: keep `db` open until here.
        db.get(&records.keys[0]).map(|_| ())
    })
}

/// Opens `dir`, reads the last key written (timed with the open), checks the first and the
/// last records, and closes it. Returns the time.
fn reopen_and_check<E: FillEngine>(dir: &Path, cfg: &FillConfig, records: &Records) -> Result<f64, String> {
    let (first, last) = (0, records.keys.len() - 1);
    let t = Instant::now();
    let mut db = E::open(dir, cfg)?;
    let got = db.get(&records.keys[last])?;
    let reopen_s = t.elapsed().as_secs_f64();
    for (i, got) in [(last, got), (first, db.get(&records.keys[first])?)] {
        let want: Vec<u8> = value_of(u32::from_be_bytes(records.keys[i]), records.value_size).collect();
        if got.as_deref() != Some(&want[..]) {
            return Err(format!("after reopen, record {i} reads {got:?}, not {want:?}"));
        }
    }
    db.close()?;
    Ok(reopen_s)
}

/// The records of one fill: keys in insertion order and their values, side by side.
pub struct Records {
    keys: Vec<[u8; 4]>,
    values: Vec<u8>,
    value_size: usize,
}

impl Records {
    /// Generates the keys (`asc`, or a permutation by `seed`) and values. The value of key
    /// number k repeats k times the 64-bit golden ratio, little-endian, so every value is
    /// checkable and values do not compress to nothing.
    pub fn new(n: u64, order: &str, value_size: usize, seed: u64) -> Self {
        let mut nums: Vec<u32> = (0..n).map(|k| k as u32).collect();
        if order == "random" {
            nums.shuffle(&mut rng(seed, 0, 0));
        }
        let mut values = Vec::with_capacity(nums.len() * value_size);
        for &k in &nums {
            values.extend(value_of(k, value_size));
        }
        Records { keys: nums.iter().map(|k| k.to_be_bytes()).collect(), values, value_size }
    }

    fn batches(&self, per_txn: usize) -> impl Iterator<Item = Batch<'_>> {
        let vs = self.value_size;
        self.keys.chunks(per_txn).enumerate().map(move |(i, keys)| {
            let at = i * per_txn * vs;
            Batch { keys, values: &self.values[at..at + keys.len() * vs], value_size: vs }
        })
    }
}

fn value_of(k: u32, size: usize) -> impl Iterator<Item = u8> {
    let word = (u64::from(k) + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15).to_le_bytes();
    (0..size).map(move |i| word[i % 8])
}

/// One fill's measurements, as a child reports them (one JSON line to the parent).
#[derive(Serialize, Deserialize, Debug)]
pub struct FillResult {
    pub records: u64,
    pub txns: u64,
    pub fill_s: f64,
    /// The open of the empty database (a fresh directory).
    #[serde(default)]
    pub open_s: f64,
    /// `write_bytes` of /proc/self/io over the timed fill.
    pub write_bytes: u64,
    /// `wchar` of /proc/self/io over the timed fill: bytes handed to write calls.
    pub wchar: u64,
    pub close_s: f64,
    pub reopen_s: f64,
    pub disk_bytes: u64,
    pub peak_rss_bytes: u64,
    /// [`FillEngine::log_blocks`] over the timed fill.
    pub log_blocks: Option<u64>,
    /// Set by the parent with `--crash`: the reopen after a SIGKILL.
    #[serde(default)]
    pub crash_reopen_s: Option<f64>,
}

/// The child: one fill in a fresh temporary directory (under the parent's), removed
/// afterwards and on Ctrl-C.
fn run_child(engine: &str, args: &FillArgs) -> Result<FillResult, String> {
    let cfg = args.config(args.child_per_txn()?);
    let label = if args.label.is_empty() { engine.to_string() } else { args.label.clone() };
    // Generating the records (a shuffle of millions) takes a moment: shown as a phase.
    let bar = progress::spinner(args.out.quiet, format!("{label} generating"), "");
    let records = Records::new(args.records, &args.order, args.value_size, args.seed);
    bar.finish_and_clear();
    let tmp = TempDir::new(&format!("tsumiki-fill-{engine}-"), args.dir.as_deref())?;
    let bar = progress::bar(args.out.quiet, args.records, label, "records");
    let r = fill_engine(engine, tmp.path(), &cfg, &records, &bar);
    bar.finish_and_clear();
    let r = r?;
    tmp.close()?;
    Ok(r)
}

/// Runs one fill of `engine` in `dir` in this process.
pub fn fill_engine(
    engine: &str,
    dir: &Path,
    cfg: &FillConfig,
    records: &Records,
    bar: &ProgressBar,
) -> Result<FillResult, String> {
    if let Some(why) = peers::missing(engine) {
        return Err(why);
    }
    match_engine!(engine, E => fill::<E>(dir, cfg, records, bar))
}

/// The one runner: open, the batch loop, close (each timed), size on disk, reopen and
/// read back the last key written (timed), then check the first and last records.
fn fill<E: FillEngine>(
    dir: &Path,
    cfg: &FillConfig,
    records: &Records,
    bar: &ProgressBar,
) -> Result<FillResult, String> {
    let db_dir = dir.join("db");
    std::fs::create_dir(&db_dir).map_err(|e| format!("creating {}: {e}", db_dir.display()))?;
    let t_open = Instant::now();
    let mut db = E::open(&db_dir, cfg)?;
    let open_s = t_open.elapsed().as_secs_f64();
    // Progress is counted in steps, so that a tiny transaction does not pay for the bar.
    let step = 1024u64.max(cfg.per_txn as u64);
    let (mut done, mut shown, mut txns) = (0u64, 0u64, 0u64);
    let (io_before, wchar_before) = (write_bytes()?, wchar()?);
    let log_before = db.log_blocks();
    let t0 = Instant::now();
    for batch in records.batches(cfg.per_txn) {
        db.write_batch(&batch)?;
        txns += 1;
        done += batch.len() as u64;
        if done - shown >= step {
            bar.inc(done - shown);
            shown = done;
        }
    }
    let fill_s = t0.elapsed().as_secs_f64();
    let (io_after, wchar_after) = (write_bytes()?, wchar()?);
    let log_blocks = db.log_blocks().zip(log_before).map(|(a, b)| a - b);
    bar.inc(done - shown);
    let t1 = Instant::now();
    db.close()?;
    let close_s = t1.elapsed().as_secs_f64();
    let disk_bytes = dir_bytes(&db_dir)?;
    let reopen_s = reopen_and_check::<E>(&db_dir, cfg, records)?;
    Ok(FillResult {
        records: done,
        txns,
        fill_s,
        open_s,
        write_bytes: io_after.saturating_sub(io_before),
        wchar: wchar_after.saturating_sub(wchar_before),
        close_s,
        reopen_s,
        disk_bytes,
        peak_rss_bytes: peak_rss()?,
        log_blocks,
        crash_reopen_s: None,
    })
}

/// Bytes this process has caused to be sent to the block layer (`write_bytes` of
/// /proc/self/io; counted when pages are dirtied, so later writeback counts too). Kernels
/// with large page-cache folios (ext4 since 6.x) count the whole folio a write dirties, so
/// a 4 KiB write into a file written in large pieces can count hundreds of KiB.
fn write_bytes() -> Result<u64, String> {
    proc_field("/proc/self/io", "write_bytes:").map(|v| v.unwrap_or(0))
}

/// Bytes this process has passed to write calls (`wchar` of /proc/self/io): the logical
/// volume, whatever the page cache makes of it (stores through mmap are not counted).
fn wchar() -> Result<u64, String> {
    proc_field("/proc/self/io", "wchar:").map(|v| v.unwrap_or(0))
}

/// The peak resident set of this process (VmHWM of /proc/self/status), in bytes.
pub(super) fn peak_rss() -> Result<u64, String> {
    proc_field("/proc/self/status", "VmHWM:").map(|v| v.unwrap_or(0) * 1024)
}

fn proc_field(path: &str, field: &str) -> Result<Option<u64>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("reading {path}: {e}"))?;
    Ok(text
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok()))
}

/// Space the directory's files take on the device (allocated blocks, as `du`: LMDB's map
/// and the raw file's preallocation count for what they occupy, not their length).
pub(super) fn dir_bytes(dir: &Path) -> Result<u64, String> {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    for entry in std::fs::read_dir(dir).map_err(|e| format!("reading {}: {e}", dir.display()))? {
        let entry = entry.map_err(|e| format!("reading {}: {e}", dir.display()))?;
        // An open database's background threads rename and remove files while this walks:
        // one gone between the listing and its stat holds no bytes.
        let meta = match entry.metadata() {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(format!("{}: {e}", entry.path().display())),
        };
        total += if meta.is_dir() { dir_bytes(&entry.path())? } else { meta.blocks() * 512 };
    }
    Ok(total)
}

/// The parameters of one result row.
#[derive(Serialize, Debug)]
struct FillParams {
    engine: String,
    records: u64,
    per_txn: usize,
    sync: bool,
    order: String,
    value_size: usize,
    rounds: usize,
    direct_io: bool,
}

/// What one row measured: medians over the rounds, and each round's rates.
#[derive(Serialize, Debug)]
struct FillMetrics {
    txns: u64,
    tx_per_s: f64,
    rec_per_s: f64,
    /// Transactions per second over the open, the fill and the close together.
    tx_per_s_whole: f64,
    tx_per_s_runs: Vec<f64>,
    rec_per_s_runs: Vec<f64>,
    /// Device bytes (`write_bytes` of /proc/self/io) per commit.
    bytes_per_commit: f64,
    /// Bytes handed to write calls (`wchar`) per commit.
    wchar_per_commit: f64,
    log_blocks_per_commit: Option<f64>,
    peak_rss_bytes: u64,
    close_s: f64,
    reopen_s: f64,
    crash_reopen_s: Option<f64>,
    disk_bytes: u64,
}

type FillRow = ResultRecord<FillParams, FillMetrics>;

/// One engine's row at one transaction size: the medians over its rounds.
fn summarize(engine: &str, per_txn: usize, runs: &[FillResult], args: &FillArgs) -> FillRow {
    let col = |f: &dyn Fn(&FillResult) -> f64| runs.iter().map(f).collect::<Vec<f64>>();
    let median = |xs: &[f64]| report::mean_median(xs).1;
    let tx = col(&|r| r.txns as f64 / r.fill_s);
    let rec = col(&|r| r.records as f64 / r.fill_s);
    let whole = col(&|r| r.txns as f64 / (r.open_s + r.fill_s + r.close_s));
    let bpc = col(&|r| r.write_bytes as f64 / r.txns as f64);
    let wpc = col(&|r| r.wchar as f64 / r.txns as f64);
    let lpc: Option<Vec<f64>> = runs.iter().map(|r| Some(r.log_blocks? as f64 / r.txns as f64)).collect();
    let crash: Option<Vec<f64>> = runs.iter().map(|r| r.crash_reopen_s).collect();
    let params = FillParams {
        engine: engine.to_string(),
        records: args.records,
        per_txn,
        sync: !args.no_sync,
        order: args.order.clone(),
        value_size: args.value_size,
        rounds: args.rounds,
        direct_io: !args.no_direct_io,
    };
    let metrics = FillMetrics {
        txns: runs.first().map_or(0, |r| r.txns),
        tx_per_s: median(&tx),
        rec_per_s: median(&rec),
        tx_per_s_whole: median(&whole),
        tx_per_s_runs: tx,
        rec_per_s_runs: rec,
        bytes_per_commit: median(&bpc),
        wchar_per_commit: median(&wpc),
        log_blocks_per_commit: lpc.map(|l| median(&l)),
        peak_rss_bytes: median(&col(&|r| r.peak_rss_bytes as f64)) as u64,
        close_s: median(&col(&|r| r.close_s)),
        reopen_s: median(&col(&|r| r.reopen_s)),
        crash_reopen_s: crash.filter(|_| args.crash).map(|c| median(&c)),
        disk_bytes: median(&col(&|r| r.disk_bytes as f64)) as u64,
    };
    let rate = metrics.rec_per_s;
    ResultRecord::new(Family::Fill, engine.to_string(), rate, "records/s", params, metrics)
}

fn print_table(rows: &[FillRow], args: &FillArgs) {
    println!(
        "fill: {} records, {} keys, {}-byte values, {}, median of {} round(s)",
        args.records,
        args.order,
        args.value_size,
        if args.no_sync { "no sync" } else { "sync at every commit" },
        args.rounds
    );
    let mut header = vec![
        "engine",
        "per txn",
        "tx/s",
        "rec/s",
        "tx/s open+close",
        "bytes/commit",
        "wchar/commit",
        "log blocks/commit",
        "peak RSS MiB",
        "close s",
        "reopen s",
        "disk MiB",
    ];
    if args.crash {
        header.push("reopen after kill s");
    }
    let mib = |v: u64| format!("{:.1}", v as f64 / (1 << 20) as f64);
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let m = &r.metrics;
            vec![
                r.params.engine.clone(),
                r.params.per_txn.to_string(),
                format!("{:.0}", m.tx_per_s),
                format!("{:.0}", m.rec_per_s),
                format!("{:.0}", m.tx_per_s_whole),
                format!("{:.0}", m.bytes_per_commit),
                format!("{:.0}", m.wchar_per_commit),
                m.log_blocks_per_commit.map_or_else(|| "-".into(), |l| format!("{l:.3}")),
                mib(m.peak_rss_bytes),
                format!("{:.3}", m.close_s),
                format!("{:.3}", m.reopen_s),
                mib(m.disk_bytes),
            ]
            .into_iter()
            .chain(args.crash.then(|| format!("{:.3}", m.crash_reopen_s.unwrap_or(0.0))))
            .collect()
        })
        .collect();
    report::table(&header, &table);
}

/// Records per second against records per transaction, one line per engine (paper 004's
/// fill at 1 and 100 records per transaction); bars when one size ran.
fn plot_rows(path: &Path, args: &FillArgs, rows: &[FillRow]) -> Result<(), String> {
    let caption = format!(
        "{} records, {} 4-byte keys, {}-byte values, {}; median of {} round(s)",
        plot::si(args.records as f64),
        args.order,
        args.value_size,
        if args.no_sync { "no sync" } else { "durable at every commit" },
        args.rounds
    );
    let mut chart = Chart::new(caption, "records per transaction", "throughput (records/s)", "engine");
    for r in rows {
        chart.push(&r.variant, r.params.per_txn as f64, r.throughput);
    }
    plot::write_svg(path, "tsumiki bench fill", &report::footer(), &[chart])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small fill through the runner for tsumiki and the raw floor: every record and
    /// transaction counted, device bytes written (synced), the database read back.
    #[test]
    fn small_fills_count_every_record() {
        for order in ["asc", "random"] {
            let records = Records::new(2_000, order, 8, 7);
            for engine in ["tsumiki", "raw", "raw-direct"] {
                let tmp = tempfile::tempdir().unwrap();
                let cfg = FillConfig {
                    sync: true,
                    records: 2_000,
                    per_txn: 100,
                    value_size: 8,
                    direct_io: true,
                    cache_bytes: None,
                };
                let r = fill_engine(engine, tmp.path(), &cfg, &records, &ProgressBar::hidden()).unwrap();
                assert_eq!((r.records, r.txns), (2_000, 20), "{engine} {order}");
                assert!(
                    r.fill_s > 0.0 && r.open_s > 0.0 && r.peak_rss_bytes > 0 && r.disk_bytes > 0,
                    "{engine}: {r:?}"
                );
            }
        }
    }

    #[test]
    fn random_order_is_a_permutation() {
        let r = Records::new(1_000, "random", 3, 1);
        let mut nums: Vec<u32> = r.keys.iter().map(|k| u32::from_be_bytes(*k)).collect();
        assert_ne!(nums, (0..1_000).collect::<Vec<_>>());
        nums.sort_unstable();
        assert_eq!(nums, (0..1_000).collect::<Vec<_>>());
        assert_eq!(r.values.len(), 3_000);
    }
}
