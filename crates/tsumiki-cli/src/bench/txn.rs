//! `tsumiki bench txn`: one runner for every concurrency-control protocol and workload
//! (YCSB A-F with CCBench's knobs; paper 001's R-10, U-1, U-10, U-5/R-5; paper 000's batch
//! of short and long transactions). Each protocol is monomorphised into the runner.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use clap::Args;
use hdrhistogram::Histogram;
use indicatif::ProgressBar;
use rand::RngExt;
use serde::Serialize;
use tsumiki::cc::si::Si;
use tsumiki::cc::silo::Silo;
use tsumiki::cc::tictoc::TicToc;
use tsumiki::cc::twopl::TwoPl;
use tsumiki::cc::Protocol;
use tsumiki::db::{TypedDb, TypedTxn};
use tsumiki::index::BwTreeConfig;
use tsumiki::storage::DirStorage;
use tsumiki::{Cc, Device, Durability, Error, Gc, LockWait, LogMode, LogOptions, Release, StoreOptions};

use super::cleanup::TempDir;
use super::plot::{self, Chart};
use super::schema::{duration_secs, Family, Latency, OutputArgs, Reporter, ResultRecord};
use super::workload::{rng, KeyChooser};
use super::{progress, report};

#[derive(Args, Debug, Clone, Serialize)]
pub struct TxnArgs {
    /// ycsb-a (50% read, 50% update), ycsb-b (95/5), ycsb-c (read only), ycsb-d (read
    /// latest, 5% insert), ycsb-e (short scans, 5% insert), ycsb-f (read-modify-write),
    /// r10, u1, u10, u5r5 (paper 001), batch (paper 000: short and long transactions).
    #[arg(long, default_value = "ycsb-a")]
    pub workload: String,
    /// Protocols, comma-separated, or `all`: tictoc, silo, 2pl-nowait, 2pl-waitdie, mvcc-si.
    #[arg(long, default_value = "all", value_delimiter = ',')]
    pub cc: Vec<String>,
    /// MVCC-SI garbage collectors, comma-separated: none, aot, epo, epo-r (each runs once).
    #[arg(long, default_value = "epo-r", value_delimiter = ',')]
    pub gc: Vec<String>,
    /// Active-list refresh interval of EPO and EPO-R (and of AOT's oldest timestamp).
    #[arg(long, default_value = "100ms", value_parser = parse_duration)]
    #[serde(serialize_with = "duration_secs")]
    pub gc_refresh: Duration,
    /// Records loaded before the timed part (default: 1,000,000; batch: 10,000).
    #[arg(long)]
    pub records: Option<u64>,
    /// Operations per transaction (YCSB).
    #[arg(long, default_value_t = 10)]
    pub ops_per_txn: usize,
    /// Fraction of reads among YCSB operations (overrides the workload's).
    #[arg(long)]
    pub read_ratio: Option<f64>,
    /// YCSB writes read the record first (read-modify-write) instead of writing blindly.
    #[arg(long)]
    pub rmw: bool,
    /// Zipf skew of key choice (default: 0; batch: 0.8).
    #[arg(long)]
    pub skew: Option<f64>,
    /// Value size in bytes.
    #[arg(long, default_value_t = 100)]
    pub value_size: usize,
    /// batch: operations of a long transaction (short ones have 6).
    #[arg(long, default_value_t = 100)]
    pub long_ops: usize,
    /// batch: sleep inside each long transaction.
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    #[serde(serialize_with = "duration_secs")]
    pub long_sleep: Duration,
    /// Worker threads; a comma-separated list runs each count.
    #[arg(long, default_value = "2", value_delimiter = ',')]
    pub threads: Vec<usize>,
    /// Seconds per run (ignored when --txns-per-thread is given).
    #[arg(long, default_value = "3", value_parser = parse_duration)]
    #[serde(serialize_with = "duration_secs")]
    pub duration: Duration,
    /// Committed transactions per thread per run, instead of a duration.
    #[arg(long)]
    pub txns_per_thread: Option<u64>,
    /// Timed runs per protocol; throughput is their mean (the median is reported too).
    #[arg(long, default_value_t = 3)]
    pub runs: u64,
    /// Seed of the workload generator.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    #[command(flatten)]
    #[serde(flatten)]
    pub out: OutputArgs,
    /// Logging, comma-separated: none (in memory), pwal, swal. Each logged run opens a
    /// fresh database in a temporary directory (or under --dir).
    #[arg(long, default_value = "none", value_delimiter = ',')]
    pub log: Vec<String>,
    /// Lock release of logged runs, comma-separated: nlr, elr.
    #[arg(long, default_value = "nlr", value_delimiter = ',')]
    pub release: Vec<String>,
    /// Group commit sizes of logged runs, comma-separated (paper 001: 1 and 16). With a
    /// group above 1 each worker defers its commits and waits once per group.
    #[arg(long, default_value = "1", value_delimiter = ',')]
    pub group: Vec<usize>,
    /// Log device: file (fdatasync) or nvm (a fixed latency per write, no sync).
    #[arg(long, default_value = "file")]
    pub device: String,
    /// NVM emulation latency per write, in nanoseconds.
    #[arg(long, default_value_t = 50)]
    pub nvm_latency_ns: u64,
    /// What a commit waits for: sync, buffered, none.
    #[arg(long, default_value = "sync")]
    pub durability: String,
    /// Where logged databases are created, each in a fresh temporary directory removed
    /// afterwards (and on Ctrl-C) (default: the system temp dir).
    #[arg(long)]
    pub dir: Option<std::path::PathBuf>,
    /// Log bytes between checkpoints of logged runs (`StoreOptions::checkpoint_bytes`;
    /// 0: none while the run lasts), to see what checkpoints cost.
    #[arg(long, default_value_t = StoreOptions::default().checkpoint_bytes)]
    pub checkpoint_bytes: u64,
    /// Threads that prepare a checkpoint's pages beside its own
    /// (`StoreOptions::checkpoint_helpers`; 0: none).
    #[arg(long, default_value_t = 0)]
    pub checkpoint_helpers: usize,
    /// Synced logs through the OS page cache rather than with direct I/O
    /// (`LogOptions::direct_io`).
    #[arg(long)]
    pub no_direct_io: bool,
}

/// The checkpoint settings of logged runs, from the arguments.
fn store_options(args: &TxnArgs) -> StoreOptions {
    StoreOptions {
        checkpoint_bytes: args.checkpoint_bytes,
        checkpoint_helpers: args.checkpoint_helpers,
        ..StoreOptions::default()
    }
}

/// The log settings to run, from the arguments (`None`: in memory).
fn log_variants(args: &TxnArgs) -> Result<Vec<Option<LogOptions>>, String> {
    let device = match args.device.as_str() {
        "file" => Device::File,
        "nvm" => Device::Nvm(Duration::from_nanos(args.nvm_latency_ns)),
        d => return Err(format!("unknown --device {d:?}; known: file, nvm")),
    };
    let durability: Durability = args.durability.parse().map_err(|e| format!("--durability: {e}"))?;
    let mut out = Vec::new();
    for l in &args.log {
        let mode: LogMode = l.parse().map_err(|e| format!("--log: {e}"))?;
        if mode == LogMode::None {
            out.push(None);
            continue;
        }
        for r in &args.release {
            let release: Release = r.parse().map_err(|e| format!("--release: {e}"))?;
            for &group in &args.group {
                if group == 0 {
                    return Err("--group must be at least 1".into());
                }
                out.push(Some(LogOptions {
                    mode,
                    release,
                    group,
                    device,
                    durability,
                    direct_io: !args.no_direct_io,
                    ..LogOptions::default()
                }));
            }
        }
    }
    Ok(out)
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = s.split_at(s.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(s.len()));
    let n: f64 = num.parse().map_err(|_| format!("bad duration {s:?}: use e.g. 3, 3s, 100ms"))?;
    let secs = match unit {
        "" | "s" => n,
        "ms" => n / 1e3,
        "us" => n / 1e6,
        "m" | "min" => n * 60.0,
        _ => return Err(format!("bad duration unit in {s:?}: use s, ms, us or m")),
    };
    if !(secs >= 0.0 && secs.is_finite()) {
        return Err(format!("bad duration {s:?}"));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Workload {
    Ycsb(char),
    R10,
    U1,
    U10,
    U5R5,
    Batch,
}

impl Workload {
    fn parse(s: &str) -> Result<Self, String> {
        Ok(match s {
            "ycsb-a" | "ycsb-b" | "ycsb-c" | "ycsb-d" | "ycsb-e" | "ycsb-f" => {
                Workload::Ycsb(s.chars().last().unwrap())
            }
            "r10" => Workload::R10,
            "u1" => Workload::U1,
            "u10" => Workload::U10,
            "u5r5" => Workload::U5R5,
            "batch" => Workload::Batch,
            _ => return Err(format!("unknown workload {s:?}; known: ycsb-a..ycsb-f, r10, u1, u10, u5r5, batch")),
        })
    }
}

/// One operation of a pre-generated transaction.
#[derive(Clone, Copy, Debug)]
enum Op {
    Read(u64),
    Write(u64),
    /// Read, then write the same key.
    Rmw(u64),
    /// Insert a fresh key (numbered at run time).
    Insert,
    /// Read one of the most recently inserted keys: this many back from the newest.
    ReadLatest(u64),
    Scan(u64, u32),
}

#[derive(Clone, Debug)]
struct TxnSpec {
    ops: Vec<Op>,
    /// Sleep after this many operations (batch's long transactions).
    sleep_at: Option<usize>,
}

/// Everything a run needs, resolved from the arguments.
struct Plan {
    workload: Workload,
    name: String,
    records: u64,
    skew: f64,
    value_size: usize,
    ops_per_txn: usize,
    read_ratio: f64,
    rmw: bool,
    long_ops: usize,
    long_sleep: Duration,
}

/// Pre-generated transactions per thread (cycled in duration mode).
const SPECS_PER_THREAD: usize = 1 << 14;

impl Plan {
    fn new(args: &TxnArgs) -> Result<Self, String> {
        let workload = Workload::parse(&args.workload)?;
        let batch = workload == Workload::Batch;
        let default_read = match workload {
            Workload::Ycsb('a') | Workload::Ycsb('f') | Workload::Batch => 0.5,
            Workload::Ycsb('b') | Workload::Ycsb('d') | Workload::Ycsb('e') => 0.95,
            Workload::Ycsb(_) => 1.0,
            _ => 0.0,
        };
        let read_ratio = args.read_ratio.unwrap_or(default_read);
        if !(0.0..=1.0).contains(&read_ratio) {
            return Err(format!("--read-ratio {read_ratio} is not in [0, 1]"));
        }
        let records = args.records.unwrap_or(if batch { 10_000 } else { 1_000_000 });
        if records == 0 {
            return Err("--records must be at least 1".into());
        }
        if args.ops_per_txn == 0 || args.long_ops == 0 {
            return Err("--ops-per-txn and --long-ops must be at least 1".into());
        }
        if args.value_size > tsumiki::db::MAX_VALUE_LEN {
            return Err(format!("--value-size is above the limit of {} bytes", tsumiki::db::MAX_VALUE_LEN));
        }
        Ok(Plan {
            workload,
            name: args.workload.clone(),
            records,
            skew: args.skew.unwrap_or(if batch { 0.8 } else { 0.0 }),
            value_size: args.value_size,
            ops_per_txn: args.ops_per_txn,
            read_ratio,
            rmw: args.rmw || workload == Workload::Ycsb('f'),
            long_ops: args.long_ops,
            long_sleep: args.long_sleep,
        })
    }

    /// Thread `t` of `threads`: is it one of batch's short-transaction threads?
    fn short_thread(&self, t: usize, threads: usize) -> bool {
        t < threads.div_ceil(3)
    }

    fn specs(&self, seed: u64, run: u64, t: usize, threads: usize, n: usize) -> Result<Vec<TxnSpec>, String> {
        let mut r = rng(seed, run, t as u64);
        let keys = KeyChooser::new(self.records, self.skew)?;
        let latest = KeyChooser::new(self.records.min(1000), 0.99)?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let mut ops = Vec::new();
            let mut sleep_at = None;
            let distinct = |r: &mut rand::rngs::StdRng, ops: &[Op], k: &KeyChooser| loop {
                let key = k.pick(r) as u64;
                if !ops.iter().any(|o| matches!(o, Op::Read(x) | Op::Write(x) | Op::Rmw(x) if *x == key)) {
                    return key;
                }
            };
            match self.workload {
                Workload::R10 => (0..10).for_each(|_| ops.push(Op::Read(distinct(&mut r, &ops, &keys)))),
                Workload::U1 => ops.push(Op::Write(distinct(&mut r, &ops, &keys))),
                Workload::U10 => (0..10).for_each(|_| ops.push(Op::Write(distinct(&mut r, &ops, &keys)))),
                Workload::U5R5 => (0..5).for_each(|_| ops.push(Op::Rmw(distinct(&mut r, &ops, &keys)))),
                Workload::Batch => {
                    let long = !self.short_thread(t, threads);
                    let n = if long { self.long_ops.min(self.records as usize) } else { 6.min(self.records as usize) };
                    for _ in 0..n {
                        let k = distinct(&mut r, &ops, &keys);
                        ops.push(if r.random_bool(self.read_ratio) { Op::Read(k) } else { Op::Write(k) });
                    }
                    if long && !self.long_sleep.is_zero() {
                        sleep_at = Some(n / 2);
                    }
                }
                Workload::Ycsb(w) => {
                    let n = self.ops_per_txn.min(self.records as usize);
                    for _ in 0..n {
                        let read = r.random_bool(self.read_ratio);
                        ops.push(match (w, read) {
                            ('d', true) => Op::ReadLatest(latest.pick(&mut r) as u64),
                            ('d', false) | ('e', false) => Op::Insert,
                            ('e', true) => Op::Scan(keys.pick(&mut r) as u64, r.random_range(1..=100)),
                            (_, true) => Op::Read(distinct(&mut r, &ops, &keys)),
                            (_, false) if self.rmw => Op::Rmw(distinct(&mut r, &ops, &keys)),
                            (_, false) => Op::Write(distinct(&mut r, &ops, &keys)),
                        });
                    }
                }
            }
            out.push(TxnSpec { ops, sleep_at });
        }
        Ok(out)
    }
}

fn kb(n: u64) -> [u8; 8] {
    n.to_be_bytes()
}

/// Runs one transaction's operations. Reads copy each value into `buf` (reused: CCBench
/// copies the value into its read set, and allocates nothing per read).
fn execute<P: Protocol>(
    txn: &mut TypedTxn<'_, P>,
    spec: &TxnSpec,
    value: &[u8],
    next_key: &AtomicU64,
    sleep: Duration,
    buf: &mut Vec<u8>,
) -> Result<(), Error> {
    let mut read = |txn: &mut TypedTxn<'_, P>, k: u64| -> Result<(), Error> {
        buf.clear();
        std::hint::black_box(txn.get_into(&kb(k), buf)?);
        Ok(())
    };
    for (i, op) in spec.ops.iter().enumerate() {
        if spec.sleep_at == Some(i) {
            std::thread::sleep(sleep);
        }
        match *op {
            Op::Read(k) => read(txn, k)?,
            Op::Write(k) => txn.put(&kb(k), value)?,
            Op::Rmw(k) => {
                read(txn, k)?;
                txn.put(&kb(k), value)?;
            }
            Op::Insert => {
                let k = next_key.fetch_add(1, Ordering::Relaxed);
                txn.insert(&kb(k), value)?;
            }
            Op::ReadLatest(back) => {
                let newest = next_key.load(Ordering::Relaxed).saturating_sub(1);
                read(txn, newest.saturating_sub(back))?;
            }
            Op::Scan(k, n) => {
                for r in txn.scan(&kb(k), None).take(n as usize) {
                    std::hint::black_box(r?);
                }
            }
        }
    }
    Ok(())
}

struct RunResult {
    commits: u64,
    aborts: u64,
    elapsed: Duration,
    latency: Histogram<u64>,
}

/// The same backoff for every protocol and phase: retrying at once into the same hot
/// records only burns the CPU the holder needs.
fn retry_pause(attempt: u32) {
    if attempt > 8 {
        std::thread::sleep(Duration::from_micros(1 << (attempt - 8).min(10)));
    } else if attempt > 2 {
        std::thread::yield_now();
    }
}

/// Loads `records` keys in transactions of 1,000, each thread its own contiguous slice.
/// With slices interleaved every 1,000 keys, each transaction's insert at its end latched
/// the gap before its neighbour's first key while that neighbour committed: with eight
/// loaders truly in parallel (a 16-core machine) and retries at once, they aborted each
/// other in lock step and 1M records took minutes instead of a second.
fn load<P: Protocol>(db: &TypedDb<P>, records: u64, value: &[u8], bar: &ProgressBar) -> Result<(), String> {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()).min(8) as u64;
    let slice = records.div_ceil(threads);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || -> Result<(), Error> {
                    let mut w = db.worker();
                    let end = ((t + 1) * slice).min(records);
                    let mut k = t * slice;
                    while k < end {
                        let mut attempt = 0;
                        loop {
                            let mut txn = w.begin();
                            let r = (k..(k + 1000).min(end)).try_for_each(|i| txn.put(&kb(i), value));
                            match r.and_then(|()| txn.commit()) {
                                Ok(()) => break,
                                Err(e) if e.is_retryable() => {
                                    attempt += 1;
                                    retry_pause(attempt);
                                }
                                Err(e) => return Err(e),
                            }
                        }
                        bar.inc((k + 1000).min(end) - k);
                        k += 1000;
                    }
                    Ok(())
                })
            })
            .collect();
        handles.into_iter().try_for_each(|h| h.join().expect("loader thread").map_err(|e| e.to_string()))
    })
}

#[allow(clippy::too_many_arguments)]
fn run_once<P: Protocol>(
    db: &TypedDb<P>,
    plan: &Plan,
    args: &TxnArgs,
    group: usize,
    threads: usize,
    run: u64,
    label: &str,
    next_key: &AtomicU64,
) -> Result<RunResult, String> {
    let n_specs = args.txns_per_thread.map_or(SPECS_PER_THREAD, |n| (n as usize).min(SPECS_PER_THREAD));
    let specs: Vec<Vec<TxnSpec>> =
        (0..threads).map(|t| plan.specs(args.seed, run, t, threads, n_specs)).collect::<Result<_, _>>()?;
    let value = vec![b'v'; plan.value_size];
    let stop = AtomicBool::new(false);
    let committed = AtomicU64::new(0);
    let barrier = Barrier::new(threads + 1);
    let prefix = format!("{label} {threads}t run {}/{}", run + 1, args.runs);
    let bar = match args.txns_per_thread {
        Some(n) => progress::bar(args.out.quiet, n * threads as u64, prefix, "txns"),
        None => progress::spinner(args.out.quiet, prefix, "txns"),
    };
    std::thread::scope(|s| {
        let handles: Vec<_> = specs
            .iter()
            .map(|my| {
                let (stop, committed, barrier, value, next_key) = (&stop, &committed, &barrier, &value, next_key);
                s.spawn(move || {
                    let mut w = db.worker();
                    let mut hist = Histogram::<u64>::new_with_bounds(1, 600_000_000_000, 3).unwrap();
                    let (mut commits, mut aborts) = (0u64, 0u64);
                    let mut tickets = Vec::new();
                    let mut buf = Vec::new();
                    barrier.wait();
                    let mut i = 0usize;
                    loop {
                        if args.txns_per_thread.is_some_and(|n| commits >= n) || stop.load(Ordering::Relaxed) {
                            break;
                        }
                        let spec = &my[i % my.len()];
                        i += 1;
                        let start = Instant::now();
                        let mut attempt = 0u32;
                        let committed_now = loop {
                            let mut txn = w.begin();
                            let r = execute(&mut txn, spec, value, next_key, plan.long_sleep, &mut buf);
                            // A group of commits: deferred, then one wait for the group.
                            let r = if group > 1 {
                                r.and_then(|()| txn.commit_deferred()).map(|t| tickets.push(t))
                            } else {
                                r.and_then(|()| txn.commit())
                            };
                            match r {
                                Ok(()) => break true,
                                Err(e) if e.is_retryable() => {
                                    aborts += 1;
                                    attempt += 1;
                                    if stop.load(Ordering::Relaxed) {
                                        break false;
                                    }
                                    retry_pause(attempt);
                                }
                                Err(e) => panic!("transaction failed: {e}"),
                            }
                        };
                        if tickets.len() >= group {
                            for t in tickets.drain(..) {
                                t.wait().unwrap_or_else(|e| panic!("commit failed: {e}"));
                            }
                        }
                        if !committed_now {
                            break;
                        }
                        commits += 1;
                        hist.saturating_record(start.elapsed().as_nanos() as u64);
                        if commits % 256 == 0 {
                            committed.fetch_add(256, Ordering::Relaxed);
                        }
                    }
                    for t in tickets.drain(..) {
                        t.wait().unwrap_or_else(|e| panic!("commit failed: {e}"));
                    }
                    (commits, aborts, hist)
                })
            })
            .collect();
        barrier.wait();
        let t0 = Instant::now();
        if args.txns_per_thread.is_none() {
            while t0.elapsed() < args.duration {
                std::thread::sleep(Duration::from_millis(100).min(args.duration.saturating_sub(t0.elapsed())));
                bar.set_position(committed.load(Ordering::Relaxed));
            }
            stop.store(true, Ordering::Relaxed);
        } else {
            // The bar follows from a thread of its own: the main thread joins the workers
            // as soon as they finish, so the run's time is not rounded up to a poll.
            let (bar, committed, stop) = (&bar, &committed, &stop);
            s.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(100));
                    bar.set_position(committed.load(Ordering::Relaxed));
                }
            });
        }
        let mut out = RunResult {
            commits: 0,
            aborts: 0,
            elapsed: Duration::ZERO,
            latency: Histogram::new_with_bounds(1, 600_000_000_000, 3).unwrap(),
        };
        let joined: Vec<_> = handles.into_iter().map(|h| h.join()).collect();
        out.elapsed = t0.elapsed();
        // Also ends the bar's thread, before anything can return.
        stop.store(true, Ordering::Relaxed);
        bar.finish_and_clear();
        for j in joined {
            let (c, a, hist) = j.map_err(|_| "a worker thread panicked".to_string())?;
            out.commits += c;
            out.aborts += a;
            out.latency.add(hist).map_err(|e| e.to_string())?;
        }
        Ok(out)
    })
}

/// The parameters of one result row.
#[derive(Serialize, Debug)]
struct TxnParams {
    workload: String,
    cc: &'static str,
    /// MVCC-SI's garbage collector.
    gc: Option<&'static str>,
    /// `none` (in memory) or the log variant (`pwal-nlr`, `swal-elr-g16`...).
    log: String,
    threads: usize,
    records: u64,
    skew: f64,
    value_size: usize,
    ops_per_txn: usize,
    read_ratio: f64,
    rmw: bool,
    /// batch only.
    long_ops: Option<usize>,
    long_sleep_s: Option<f64>,
    /// Logged runs only.
    device: Option<String>,
    durability: Option<String>,
    direct_io: Option<bool>,
    group: Option<usize>,
    runs: u64,
    /// Each run's length, or `txns_per_thread` commits per thread.
    duration_s: Option<f64>,
    txns_per_thread: Option<u64>,
}

/// What one row measured.
#[derive(Serialize, Debug)]
struct TxnMetrics {
    /// Committed transactions per second, the mean over runs.
    tps: f64,
    tps_median: f64,
    tps_runs: Vec<f64>,
    /// Aborted attempts over all attempts.
    abort_rate: f64,
    commits: u64,
    aborts: u64,
    /// Commit latency (first attempt to commit, retries included), nanoseconds.
    latency_ns: Latency,
    gc: Option<GcMetrics>,
    wal: Option<WalMetrics>,
    /// Logged runs: what checkpoints cost during this row's runs.
    checkpoint: Option<CheckpointMetrics>,
    store: Option<StoreMetrics>,
}

/// What checkpoints cost during a row's runs, and how long committers waited for them.
#[derive(Serialize, Debug, Clone, Copy, Default)]
struct CheckpointMetrics {
    checkpoints: u64,
    /// CPU time of the checkpoints that ended during the runs (their threads and helpers).
    cpu_s: f64,
    /// Their wall-clock time.
    wall_s: f64,
    /// `cpu_s` per committed transaction, in microseconds.
    cpu_us_per_commit: f64,
    /// Committers' waits for checkpoints (`Wal::throttle`), and how many waited.
    stall_s: f64,
    stalls: u64,
}

/// The counters [`CheckpointMetrics`] is the difference of.
struct Checkpointing {
    checkpoints: u64,
    cpu_micros: u64,
    micros: u64,
    stall_micros: u64,
    stalls: u64,
}

impl Checkpointing {
    fn of<P: Protocol>(db: &TypedDb<P>) -> Checkpointing {
        let (w, s) = (db.wal_stats().unwrap_or_default(), db.store_stats().unwrap_or_default());
        Checkpointing {
            checkpoints: w.checkpoints,
            cpu_micros: s.checkpoint_cpu_micros,
            micros: s.checkpoint_micros,
            stall_micros: w.stall_micros,
            stalls: w.stalls,
        }
    }

    fn since(&self, before: &Checkpointing, commits: u64) -> CheckpointMetrics {
        let cpu_s = (self.cpu_micros - before.cpu_micros) as f64 / 1e6;
        CheckpointMetrics {
            checkpoints: self.checkpoints - before.checkpoints,
            cpu_s,
            wall_s: (self.micros - before.micros) as f64 / 1e6,
            cpu_us_per_commit: if commits == 0 { 0.0 } else { cpu_s * 1e6 / commits as f64 },
            stall_s: (self.stall_micros - before.stall_micros) as f64 / 1e6,
            stalls: self.stalls - before.stalls,
        }
    }
}

/// MVCC-SI's garbage collection counters (`GcStats`).
#[derive(Serialize, Debug)]
struct GcMetrics {
    reclaimed: u64,
    traversals: u64,
    empty_traversals: u64,
    unreclaimed: u64,
    chain_max: u64,
    chain_mean: f64,
    versions: i64,
    bytes: i64,
}

/// The log's counters since the database opened (`WalStats`).
#[derive(Serialize, Debug)]
struct WalMetrics {
    syncs: u64,
    lsn_cas_misses: u64,
    checkpoints: u64,
    stalls: u64,
    stall_micros: u64,
}

/// The page store's sizes (`StoreStats`).
#[derive(Serialize, Debug)]
struct StoreMetrics {
    live_bytes: u64,
    file_bytes: u64,
    written_bytes: u64,
}

type TxnRow = ResultRecord<TxnParams, TxnMetrics>;

/// Runs every thread count of one protocol; returns one row per thread count.
fn run_cc<P: Protocol>(
    db: TypedDb<P>,
    plan: &Plan,
    args: &TxnArgs,
    log: &Option<LogOptions>,
    gc_name: Option<&'static str>,
    gc_stats: impl Fn(&TypedDb<P>) -> Option<GcMetrics>,
    step: &str,
) -> Result<Vec<TxnRow>, String> {
    let value = vec![b'v'; plan.value_size];
    let name = db.protocol().name();
    let log_name = log.as_ref().map_or("none".to_string(), |l| l.name());
    let variant = variant_name(name, gc_name, &log_name);
    let label = format!("{step} {variant}");
    let bar = progress::bar(args.out.quiet, plan.records, format!("{label} load"), "records");
    load(&db, plan.records, &value, &bar)?;
    bar.finish_and_clear();
    // The load's log is checkpointed before the runs, so that its cost is not the first
    // row's (a no-op in memory).
    db.checkpoint().map_err(|e| format!("checkpoint after the load: {e}"))?;
    let next_key = AtomicU64::new(plan.records);
    let mut out = Vec::new();
    for &threads in &args.threads {
        let mut tps = Vec::new();
        let mut latency = Histogram::<u64>::new_with_bounds(1, 600_000_000_000, 3).unwrap();
        let (mut commits, mut aborts) = (0u64, 0u64);
        let before = Checkpointing::of(&db);
        for run in 0..args.runs {
            let group = log.as_ref().map_or(1, |l| l.group);
            let r = run_once(&db, plan, args, group, threads, run, &label, &next_key)?;
            tps.push(r.commits as f64 / r.elapsed.as_secs_f64());
            commits += r.commits;
            aborts += r.aborts;
            latency.add(&r.latency).map_err(|e| e.to_string())?;
        }
        let (mean, median) = report::mean_median(&tps);
        let batch = plan.workload == Workload::Batch;
        let checkpoint = log.as_ref().map(|_| Checkpointing::of(&db).since(&before, commits));
        let wal = db.wal_stats();
        let params = TxnParams {
            workload: plan.name.clone(),
            cc: name,
            gc: gc_name,
            log: log_name.clone(),
            threads,
            records: plan.records,
            skew: plan.skew,
            value_size: plan.value_size,
            ops_per_txn: plan.ops_per_txn,
            read_ratio: plan.read_ratio,
            rmw: plan.rmw,
            long_ops: batch.then_some(plan.long_ops),
            long_sleep_s: batch.then_some(plan.long_sleep.as_secs_f64()),
            device: log.as_ref().map(|_| args.device.clone()),
            durability: log.as_ref().map(|_| args.durability.clone()),
            direct_io: log.as_ref().map(|l| l.direct_io),
            group: log.as_ref().map(|l| l.group),
            runs: args.runs,
            duration_s: args.txns_per_thread.is_none().then_some(args.duration.as_secs_f64()),
            txns_per_thread: args.txns_per_thread,
        };
        let metrics = TxnMetrics {
            tps: mean,
            tps_median: median,
            tps_runs: tps,
            abort_rate: if commits + aborts == 0 { 0.0 } else { aborts as f64 / (commits + aborts) as f64 },
            commits,
            aborts,
            latency_ns: Latency::of(&latency),
            gc: gc_stats(&db),
            wal: wal.filter(|_| log.is_some()).map(|w| WalMetrics {
                syncs: w.syncs,
                lsn_cas_misses: w.lsn_cas_misses,
                checkpoints: w.checkpoints,
                stalls: w.stalls,
                stall_micros: w.stall_micros,
            }),
            checkpoint,
            store: db.store_stats().map(|s| StoreMetrics {
                live_bytes: s.live_bytes,
                file_bytes: s.file_bytes,
                written_bytes: s.written_bytes,
            }),
        };
        out.push(ResultRecord::new(Family::Txn, variant.clone(), mean, "tx/s", params, metrics));
    }
    Ok(out)
}

/// `tictoc`, `mvcc-si/epo-r`, `tictoc pwal-nlr-g16`: what a row's line is called.
fn variant_name(cc: &str, gc: Option<&str>, log: &str) -> String {
    let mut v = gc.map_or(cc.to_string(), |g| format!("{cc}/{g}"));
    if log != "none" {
        v = format!("{v} {log}");
    }
    v
}

fn no_stats<P: Protocol>(_: &TypedDb<P>) -> Option<GcMetrics> {
    None
}

fn si_stats(db: &TypedDb<Si>) -> Option<GcMetrics> {
    let s = db.protocol().gc_stats();
    Some(GcMetrics {
        reclaimed: s.reclaimed,
        traversals: s.traversals,
        empty_traversals: s.empty_traversals,
        unreclaimed: s.unreclaimed,
        chain_max: s.chain_max,
        chain_mean: s.chain_mean,
        versions: s.versions,
        bytes: s.bytes,
    })
}

/// An in-memory database, or a logged one in `dir` (checkpoints per `store`).
fn open_db<P: Protocol>(
    proto: P,
    index: &BwTreeConfig,
    log: &Option<LogOptions>,
    store: StoreOptions,
    dir: &std::path::Path,
) -> Result<TypedDb<P>, String> {
    match log {
        None => TypedDb::new(proto, index.clone()).map_err(|e| e.to_string()),
        Some(l) => {
            let storage = DirStorage::new(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            TypedDb::open_durable(
                proto,
                index.clone(),
                std::sync::Arc::new(storage),
                l.clone(),
                store,
                tsumiki::DEFAULT_CACHE_BYTES,
            )
            .map_err(|e| e.to_string())
        }
    }
}

pub fn run(args: &TxnArgs) -> Result<(), String> {
    let plan = Plan::new(args)?;
    if args.threads.is_empty() || args.threads.contains(&0) {
        return Err("--threads must be at least 1".into());
    }
    if args.runs == 0 {
        return Err("--runs must be at least 1".into());
    }
    let mut ccs = Vec::new();
    for name in &args.cc {
        if name == "all" {
            ccs.extend(Cc::ALL);
        } else {
            ccs.push(Cc::parse(name).ok_or_else(|| {
                format!("unknown protocol {name:?}; known: tictoc, silo, 2pl-nowait, 2pl-waitdie, mvcc-si, all")
            })?);
        }
    }
    let gcs: Vec<Gc> =
        args.gc.iter().map(|g| g.parse::<Gc>().map_err(|e| format!("--gc: {e}"))).collect::<Result<_, _>>()?;
    let index = BwTreeConfig::default();
    let logs = log_variants(args)?;
    let mut reporter = Reporter::start(Family::Txn, &args.out, args)?;
    // Every (protocol, log) pair that runs, the library's own rules deciding which exist.
    let store = store_options(args);
    let mut todo = Vec::new();
    for cc in ccs {
        for log in &logs {
            if let Some(l) = log {
                let opts = tsumiki::Options { cc, log: l.clone(), store, ..tsumiki::Options::default() };
                if let Err(e) = opts.validate() {
                    eprintln!("note: skipping {} under {}: {e}", l.name(), cc.name());
                    continue;
                }
            }
            todo.push((cc, log));
        }
    }
    let steps = todo.len();
    let mut results = Vec::new();
    for (n, (cc, log)) in todo.into_iter().enumerate() {
        let step = format!("[{}/{steps}]", n + 1);
        // Logged databases live in a temporary directory, removed afterwards or on Ctrl-C.
        let tmp = match log {
            Some(_) => Some(TempDir::new("tsumiki-bench-txn-", args.dir.as_deref())?),
            None => None,
        };
        let dir = tmp.as_ref().map_or_else(std::path::PathBuf::new, |t| t.path().join("db"));
        let rows = match cc {
            Cc::TicToc => {
                run_cc(open_db(TicToc::default(), &index, log, store, &dir)?, &plan, args, log, None, no_stats, &step)?
            }
            Cc::Silo => {
                run_cc(open_db(Silo::new(), &index, log, store, &dir)?, &plan, args, log, None, no_stats, &step)?
            }
            Cc::TwoPl(LockWait::NoWait) => {
                run_cc(open_db(TwoPl::no_wait(), &index, log, store, &dir)?, &plan, args, log, None, no_stats, &step)?
            }
            Cc::TwoPl(LockWait::WaitDie) => {
                run_cc(open_db(TwoPl::wait_die(), &index, log, store, &dir)?, &plan, args, log, None, no_stats, &step)?
            }
            Cc::MvccSi(_) => {
                let mut rows = Vec::new();
                for &gc in &gcs {
                    let dir = dir.join(gc.name());
                    let db = open_db(Si::new(gc, args.gc_refresh), &index, log, store, &dir)?;
                    rows.extend(run_cc(db, &plan, args, log, Some(gc.name()), si_stats, &step)?);
                }
                rows
            }
        };
        if let Some(t) = tmp {
            t.close()?;
        }
        for r in rows {
            reporter.row(&r)?;
            results.push(r);
        }
    }
    reporter.finish()?;
    if !args.out.json {
        print_table(&results);
    }
    if let Some(path) = &args.out.plot {
        plot_rows(path, &plan, args, &results)?;
    }
    Ok(())
}

fn print_table(results: &[TxnRow]) {
    let header = [
        "cc",
        "gc",
        "log",
        "workload",
        "threads",
        "tps",
        "median",
        "abort %",
        "p50 µs",
        "p99 µs",
        "versions",
        "unreclaimed",
        "ckpts",
        "ckpt µs/tx",
        "stall s",
    ];
    let rows: Vec<Vec<String>> = results
        .iter()
        .map(|r| {
            let (p, m) = (&r.params, &r.metrics);
            vec![
                p.cc.to_string(),
                p.gc.unwrap_or("-").to_string(),
                p.log.clone(),
                p.workload.clone(),
                p.threads.to_string(),
                format!("{:.0}", m.tps),
                format!("{:.0}", m.tps_median),
                format!("{:.2}", 100.0 * m.abort_rate),
                format!("{:.1}", m.latency_ns.at(50.0) as f64 / 1e3),
                format!("{:.1}", m.latency_ns.at(99.0) as f64 / 1e3),
                m.gc.as_ref().map_or("-".into(), |g| g.versions.to_string()),
                m.gc.as_ref().map_or("-".into(), |g| g.unreclaimed.to_string()),
                m.checkpoint.map_or("-".into(), |c| c.checkpoints.to_string()),
                m.checkpoint.map_or("-".into(), |c| format!("{:.2}", c.cpu_us_per_commit)),
                m.checkpoint.map_or("-".into(), |c| format!("{:.2}", c.stall_s)),
            ]
        })
        .collect();
    report::table(&header, &rows);
}

/// Throughput against threads, one line per protocol (and log variant), as papers 000 and
/// 001 draw it.
fn plot_rows(path: &std::path::Path, plan: &Plan, args: &TxnArgs, rows: &[TxnRow]) -> Result<(), String> {
    let length = match args.txns_per_thread {
        Some(n) => format!("{n} txns/thread"),
        None => format!("{} s", args.duration.as_secs_f64()),
    };
    let mut caption = format!(
        "{}: {} records, zipf {}, {} ops/txn, read ratio {}, {}-byte values; mean of {} run(s) of {length}",
        plan.name,
        plot::si(plan.records as f64),
        plan.skew,
        plan.ops_per_txn,
        plan.read_ratio,
        plan.value_size,
        args.runs,
    );
    if args.log.iter().any(|l| l != "none") {
        caption += &format!("; log on {}, {}", args.device, args.durability);
    }
    let mut chart = Chart::new(caption, "worker threads", "throughput (committed tx/s)", "protocol");
    for r in rows {
        chart.push(&r.variant, r.params.threads as f64, r.throughput);
    }
    plot::write_svg(path, &format!("tsumiki bench txn — {}", plan.name), &report::footer(), &[chart])
}
