//! `tsumiki bench wal`: paper 003's logging experiment. A fixed number of transactions
//! (100,000 by default) is split over the worker threads; each transaction reads and/or
//! updates 10 rows (R10, R5U5, U10) or updates one (U1) under strict 2PL, and its commit
//! record has the log volume of the paper's BEGIN, UPDATE... and END records of 512 bytes
//! each. Log modes: P-WAL and the shared WAL (both with LSNs: ELR, as in the paper), and
//! `raw-sync` / `raw-append`, programs that only write the same volume (the upper bound).

use std::path::{Path, PathBuf};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use clap::Args;
use indicatif::ProgressBar;
use rand::RngExt;
use serde::Serialize;
use tsumiki::cc::twopl::TwoPl;
use tsumiki::db::TypedDb;
use tsumiki::index::BwTreeConfig;
use tsumiki::storage::{DirStorage, NvmStorage, Storage, StorageFile};
use tsumiki::wal::format::{BLOCK, PAYLOAD, RECORD_HEADER};
use tsumiki::{Device, Durability, LogMode, LogOptions, Release, StoreOptions};

use super::cleanup::TempDir;
use super::plot::{self, Chart};
use super::schema::{Family, OutputArgs, Reporter, ResultRecord};
use super::workload::rng;
use super::{progress, report};

#[derive(Args, Debug, Clone, Serialize)]
pub struct WalArgs {
    /// Log modes, comma-separated: pwal, swal, raw-sync (preallocated files, a write and an
    /// fdatasync per commit or group), raw-append (a growing file).
    #[arg(long, default_value = "pwal,swal,raw-sync", value_delimiter = ',')]
    pub log: Vec<String>,
    /// Lock release: nlr (strict 2PL releases its locks once the commit is durable, as in
    /// paper 003; records are ordered by LSNs from a shared counter) or elr (paper 001's
    /// early release: acknowledged once every lane's durable LSN passes it).
    #[arg(long, default_value = "nlr")]
    pub release: String,
    /// Worker threads; a comma-separated list runs each count.
    #[arg(long, default_value = "1,2,4,8,16", value_delimiter = ',')]
    pub threads: Vec<usize>,
    /// Group commit sizes (records per flush); a comma-separated list runs each.
    #[arg(long, default_value = "1", value_delimiter = ',')]
    pub group: Vec<usize>,
    /// Transactions per run, split evenly over the threads.
    #[arg(long, default_value_t = 100_000)]
    pub txns: u64,
    /// Transaction mix: u1 (one update), r10, r5u5, u10.
    #[arg(long, default_value = "u1", value_delimiter = ',')]
    pub mix: Vec<String>,
    /// Log record size the volume is modelled on (paper 003: 512 bytes per record).
    #[arg(long, default_value_t = 512)]
    pub record_size: usize,
    /// Rows in the table.
    #[arg(long, default_value_t = 10_000)]
    pub rows: u64,
    /// Runs per setting; the reported tps is their median.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// file (fdatasync) or nvm (paper 001's emulation: a fixed latency per write, no sync).
    #[arg(long, default_value = "file")]
    pub device: String,
    /// NVM emulation: latency per write, in nanoseconds.
    #[arg(long, default_value_t = 50)]
    pub nvm_latency_ns: u64,
    /// Directory under which a fresh temporary directory holds the databases, removed
    /// afterwards and on Ctrl-C (default: the system temp dir).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Seed of the workload generator.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    #[command(flatten)]
    #[serde(flatten)]
    pub out: OutputArgs,
}

#[derive(Clone, Copy, Debug)]
struct Mix {
    reads: usize,
    updates: usize,
}

fn parse_mix(s: &str) -> Result<Mix, String> {
    Ok(match s {
        "u1" => Mix { reads: 0, updates: 1 },
        "r10" => Mix { reads: 10, updates: 0 },
        "r5u5" => Mix { reads: 5, updates: 5 },
        "u10" => Mix { reads: 0, updates: 10 },
        _ => return Err(format!("unknown mix {s:?}; known: u1, r10, r5u5, u10")),
    })
}

/// Per-entry bytes of a logged put besides the value: kind (1), lengths (8), 8-byte key.
const ENTRY_OVERHEAD: usize = 1 + 8 + 8;
/// Record bytes besides the entries: header, ordering key, entry count.
const RECORD_OVERHEAD: usize = RECORD_HEADER + 8 + 4;

/// The value size that gives a commit record the volume of `updates + 2` paper records
/// (BEGIN, the UPDATEs, END), and that volume.
fn volume(mix: Mix, record_size: usize) -> (usize, usize) {
    if mix.updates == 0 {
        return (record_size, 0); // read-only transactions write no log record
    }
    let target = (mix.updates + 2) * record_size;
    let value = (target.saturating_sub(RECORD_OVERHEAD) / mix.updates).saturating_sub(ENTRY_OVERHEAD).max(1);
    (value, RECORD_OVERHEAD + mix.updates * (ENTRY_OVERHEAD + value))
}

struct Setting<'a> {
    log: &'a str,
    threads: usize,
    group: usize,
    mix: Mix,
}

fn log_options(args: &WalArgs, mode: LogMode, group: usize) -> Result<LogOptions, String> {
    let release: Release = args.release.parse().map_err(|e| format!("--release: {e}"))?;
    let device = match args.device.as_str() {
        "file" => Device::File,
        "nvm" => Device::Nvm(Duration::from_nanos(args.nvm_latency_ns)),
        d => return Err(format!("unknown --device {d:?}; known: file, nvm")),
    };
    Ok(LogOptions {
        mode,
        release,
        group,
        device,
        durability: Durability::Sync,
        lsn_order: true,
        segment_size: 64 << 20,
        max_wait: Duration::from_micros(500),
        ..LogOptions::default()
    })
}

/// One timed run of the engine; returns (elapsed, syncs, CAS misses).
fn run_engine(
    args: &WalArgs,
    s: &Setting,
    dir: &Path,
    run: usize,
    bar: &ProgressBar,
) -> Result<(Duration, u64, u64), String> {
    let mode = if s.log == "pwal" { LogMode::PWal } else { LogMode::SWal };
    let opts = log_options(args, mode, s.group)?;
    let storage = DirStorage::new(dir).map_err(|e| e.to_string())?;
    let db = TypedDb::open_durable(
        TwoPl::no_wait(),
        BwTreeConfig::default(),
        std::sync::Arc::new(storage),
        opts,
        StoreOptions::default(),
        tsumiki::DEFAULT_CACHE_BYTES,
    )
    .map_err(|e| e.to_string())?;
    let (value_size, _) = volume(s.mix, args.record_size);
    let value = vec![b'w'; value_size];
    let mut loader = db.worker();
    let load = progress::bar(args.out.quiet, args.rows, format!("{} load", bar.prefix()), "rows");
    for chunk in (0..args.rows).collect::<Vec<_>>().chunks(1000) {
        let mut t = loader.begin();
        for &k in chunk {
            t.put(&k.to_be_bytes(), &value).map_err(|e| e.to_string())?;
        }
        t.commit().map_err(|e| e.to_string())?;
        load.inc(chunk.len() as u64);
    }
    load.finish_and_clear();
    drop(loader);
    let before = db.wal_stats().unwrap_or_default();
    let per_thread = args.txns / s.threads as u64;
    let elapsed = timed_threads(s.threads, |t, ready| {
        let mut r = rng(args.seed, run as u64, t as u64);
        let mut w = db.worker();
        let mut tickets = Vec::new();
        // Outside the timed part: the worker's first commit creates its lane
        // (a preallocated segment).
        loop {
            let mut txn = w.begin();
            match txn.put(&(t as u64 % args.rows).to_be_bytes(), &value).and_then(|()| txn.commit()) {
                Ok(()) => break,
                Err(e) if e.is_retryable() => std::thread::yield_now(),
                Err(e) => return Err(e.to_string()),
            }
        }
        ready();
        for i in 0..per_thread {
            if i % 1024 == 1023 {
                bar.inc(1024);
            }
            let keys: Vec<u64> = (0..s.mix.reads + s.mix.updates).map(|_| r.random_range(0..args.rows)).collect();
            let ticket = loop {
                let mut txn = w.begin();
                let mut res = Ok(());
                for (i, k) in keys.iter().enumerate() {
                    res = if i < s.mix.reads {
                        txn.get(&k.to_be_bytes()).map(|v| drop(std::hint::black_box(v)))
                    } else {
                        txn.put(&k.to_be_bytes(), &value)
                    };
                    if res.is_err() {
                        break;
                    }
                }
                let res = res.and_then(|()| {
                    if s.group > 1 {
                        txn.commit_deferred()
                    } else {
                        txn.commit().map(|()| tsumiki::CommitTicket::done())
                    }
                });
                match res {
                    Ok(t) => break t,
                    Err(e) if e.is_retryable() => std::thread::yield_now(),
                    Err(e) => return Err(e.to_string()),
                }
            };
            tickets.push(ticket);
            if tickets.len() >= s.group {
                for t in tickets.drain(..) {
                    t.wait().map_err(|e| e.to_string())?;
                }
            }
        }
        for t in tickets.drain(..) {
            t.wait().map_err(|e| e.to_string())?;
        }
        Ok(())
    })?;
    let after = db.wal_stats().unwrap_or_default();
    drop(db);
    Ok((elapsed, after.syncs - before.syncs, after.lsn_cas_misses - before.lsn_cas_misses))
}

/// The upper bound: each thread writes the same log volume to its own file, a commit (or
/// a group of them) per write, rounded to whole 4 KiB blocks, each followed by fdatasync.
fn run_raw(
    args: &WalArgs,
    s: &Setting,
    dir: &Path,
    preallocate: bool,
    bar: &ProgressBar,
) -> Result<(Duration, u64, u64), String> {
    let (_, bytes) = volume(s.mix, args.record_size);
    let per_thread = args.txns / s.threads as u64;
    let storage: Box<dyn Storage> = match args.device.as_str() {
        "nvm" => Box::new(NvmStorage::new(Duration::from_nanos(args.nvm_latency_ns))),
        _ => Box::new(DirStorage::new(dir).map_err(|e| e.to_string())?),
    };
    let group_bytes = bytes * s.group;
    let write_len = (group_bytes.div_ceil(PAYLOAD).max(1)) * BLOCK;
    let flushes = per_thread.div_ceil(s.group as u64);
    let files: Vec<Box<dyn StorageFile>> = (0..s.threads)
        .map(|t| {
            let f = storage.open(&format!("raw-{t}.log"), true).map_err(|e| e.to_string())?;
            if preallocate {
                let total = flushes * write_len as u64;
                let zeros = vec![0u8; 1 << 20];
                let mut off = 0;
                while off < total {
                    let n = (total - off).min(zeros.len() as u64) as usize;
                    f.write_at(&zeros[..n], off).map_err(|e| e.to_string())?;
                    off += n as u64;
                }
                f.sync_data().map_err(|e| e.to_string())?;
            }
            Ok(f)
        })
        .collect::<Result<_, String>>()?;
    let elapsed = timed_threads(s.threads, |t, ready| {
        let f = &files[t];
        let buf = vec![0xABu8; write_len];
        ready();
        for i in 0..flushes {
            f.write_at(&buf, i * write_len as u64).map_err(|e| e.to_string())?;
            f.sync_data().map_err(|e| e.to_string())?;
            if i % 64 == 63 {
                bar.inc(64 * s.group as u64);
            }
        }
        Ok(())
    })?;
    Ok((elapsed, flushes * s.threads as u64, 0))
}

/// Runs `work(t, ready)` on `threads` threads; each calls `ready()` once its untimed setup
/// is done. Returns the time from when all are ready until all have finished.
fn timed_threads<F>(threads: usize, work: F) -> Result<Duration, String>
where
    F: Fn(usize, &dyn Fn()) -> Result<(), String> + Sync,
{
    let barrier = Barrier::new(threads + 1);
    std::thread::scope(|sc| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (work, barrier) = (&work, &barrier);
                sc.spawn(move || {
                    work(t, &|| {
                        barrier.wait();
                    })
                })
            })
            .collect();
        barrier.wait();
        let t0 = Instant::now();
        for h in handles {
            h.join().map_err(|_| "a worker panicked".to_string())??;
        }
        Ok(t0.elapsed())
    })
}

pub fn run(args: &WalArgs) -> Result<(), String> {
    if args.threads.is_empty() || args.threads.contains(&0) || args.group.contains(&0) {
        return Err("--threads and --group must be at least 1".into());
    }
    if args.txns == 0 || args.rows == 0 || args.runs == 0 {
        return Err("--txns, --rows and --runs must be at least 1".into());
    }
    for l in &args.log {
        if !["pwal", "swal", "raw-sync", "raw-append"].contains(&l.as_str()) {
            return Err(format!("unknown --log {l:?}; known: pwal, swal, raw-sync, raw-append"));
        }
    }
    log_options(args, LogMode::PWal, 1)?;
    let mixes: Vec<(String, Mix)> =
        args.mix.iter().map(|m| parse_mix(m).map(|x| (m.clone(), x))).collect::<Result<_, _>>()?;
    let base = TempDir::new("tsumiki-bench-wal-", args.dir.as_deref())?;
    let mut reporter = Reporter::start(Family::Wal, &args.out, args)?;
    let mut rows = Vec::new();
    for (mix_name, mix) in &mixes {
        for &group in &args.group {
            for &threads in &args.threads {
                for log in &args.log {
                    let s = Setting { log, threads, group, mix: *mix };
                    let done = args.txns / threads as u64 * threads as u64;
                    let bar = progress::bar(
                        args.out.quiet,
                        done * args.runs as u64,
                        format!("{log} {mix_name} {threads}t group {group}"),
                        "txns",
                    );
                    let mut tps = Vec::new();
                    let (mut syncs, mut misses) = (0, 0);
                    for run in 0..args.runs {
                        let dir = base.path().join(format!("{log}-{threads}-{group}-{mix_name}-{run}"));
                        let r = match log.as_str() {
                            "raw-sync" => run_raw(args, &s, &dir, true, &bar),
                            "raw-append" => run_raw(args, &s, &dir, false, &bar),
                            _ => run_engine(args, &s, &dir, run, &bar),
                        };
                        let _ = std::fs::remove_dir_all(&dir);
                        let (elapsed, sy, mi) = r?;
                        tps.push(done as f64 / elapsed.as_secs_f64());
                        syncs += sy;
                        misses += mi;
                        bar.set_position(done * (run as u64 + 1));
                    }
                    bar.finish_and_clear();
                    let (_, median) = report::mean_median(&tps);
                    let (_, bytes) = volume(*mix, args.record_size);
                    let params = WalParams {
                        log: log.clone(),
                        release: (!log.starts_with("raw")).then(|| args.release.clone()),
                        device: args.device.clone(),
                        mix: mix_name.clone(),
                        threads,
                        group,
                        txns: done,
                        record_size: args.record_size,
                        rows: args.rows,
                        runs: args.runs,
                    };
                    let metrics = WalMetrics {
                        tps: median,
                        tps_runs: tps,
                        log_bytes_per_txn: bytes,
                        syncs_per_run: syncs / args.runs as u64,
                        lsn_cas_misses_per_run: misses / args.runs as u64,
                    };
                    let row = ResultRecord::new(Family::Wal, log.clone(), median, "tx/s", params, metrics);
                    reporter.row(&row)?;
                    rows.push(row);
                }
            }
        }
    }
    base.close()?;
    reporter.finish()?;
    if !args.out.json {
        let header = ["log", "mix", "threads", "group", "tps (median)", "syncs/run", "CAS misses/run"];
        let table: Vec<Vec<String>> = rows
            .iter()
            .map(|r| {
                vec![
                    r.params.log.clone(),
                    r.params.mix.clone(),
                    r.params.threads.to_string(),
                    r.params.group.to_string(),
                    format!("{:.0}", r.metrics.tps),
                    r.metrics.syncs_per_run.to_string(),
                    r.metrics.lsn_cas_misses_per_run.to_string(),
                ]
            })
            .collect();
        report::table(&header, &table);
    }
    if let Some(path) = &args.out.plot {
        plot_rows(path, args, &rows)?;
    }
    Ok(())
}

/// The parameters of one result row.
#[derive(Serialize, Debug)]
struct WalParams {
    /// pwal, swal, raw-sync, raw-append.
    log: String,
    /// The engine's lock release (null for the raw writers).
    release: Option<String>,
    device: String,
    mix: String,
    threads: usize,
    group: usize,
    /// Transactions per run (over all threads).
    txns: u64,
    record_size: usize,
    rows: u64,
    runs: usize,
}

/// What one row measured.
#[derive(Serialize, Debug)]
struct WalMetrics {
    /// Transactions per second, the median over runs.
    tps: f64,
    tps_runs: Vec<f64>,
    log_bytes_per_txn: usize,
    syncs_per_run: u64,
    lsn_cas_misses_per_run: u64,
}

type WalRow = ResultRecord<WalParams, WalMetrics>;

/// Throughput against threads (or, with one thread count, against the group size), one
/// line per log mode, one panel per mix: paper 003's figures.
fn plot_rows(path: &Path, args: &WalArgs, rows: &[WalRow]) -> Result<(), String> {
    let by_threads = args.threads.len() > 1 || args.group.len() <= 1;
    let mut charts: Vec<Chart> = Vec::new();
    for mix in &args.mix {
        let fixed = if by_threads {
            format!("group commit {}", args.group.iter().map(|g| g.to_string()).collect::<Vec<_>>().join("/"))
        } else {
            format!("{} threads", args.threads[0])
        };
        let caption = format!(
            "{mix}: {} txns per run, {}-byte log records, {fixed}, {} device, release {}; median of {} runs",
            args.txns, args.record_size, args.device, args.release, args.runs
        );
        let (x_label, legend) = if by_threads {
            ("worker threads", "log (group)")
        } else {
            ("group commit size (commits per flush)", "log")
        };
        let mut chart = Chart::new(caption, x_label, "throughput (committed tx/s)", legend);
        for r in rows.iter().filter(|r| &r.params.mix == mix) {
            let (name, x) = if by_threads {
                let name = if args.group.len() > 1 {
                    format!("{} g{}", r.params.log, r.params.group)
                } else {
                    r.params.log.clone()
                };
                (name, r.params.threads as f64)
            } else {
                (r.params.log.clone(), r.params.group as f64)
            };
            chart.push(&name, x, r.throughput);
        }
        charts.push(chart);
    }
    plot::write_svg(path, "tsumiki bench wal", &report::footer(), &charts)
}
