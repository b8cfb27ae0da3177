//! `tsumiki bench txn`: one runner for every concurrency-control protocol and workload
//! (YCSB A-F with CCBench's knobs; paper 001's R-10, U-1, U-10, U-5/R-5; paper 000's batch
//! of short and long transactions). Each protocol is monomorphised into the runner.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use clap::Args;
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use rand::RngExt;
use serde_json::{json, Value};
use tsumiki::cc::si::Si;
use tsumiki::cc::silo::Silo;
use tsumiki::cc::tictoc::TicToc;
use tsumiki::cc::twopl::TwoPl;
use tsumiki::cc::Protocol;
use tsumiki::db::{TypedDb, TypedTxn};
use tsumiki::index::BwTreeConfig;
use tsumiki::wal::storage::DirStorage;
use tsumiki::{Cc, Device, Durability, Error, Gc, LockWait, LogMode, LogOptions, Release};

use super::report;
use super::workload::{rng, KeyChooser};

#[derive(Args, Debug, Clone)]
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
    pub long_sleep: Duration,
    /// Worker threads; a comma-separated list runs each count.
    #[arg(long, default_value = "2", value_delimiter = ',')]
    pub threads: Vec<usize>,
    /// Seconds per run (ignored when --txns-per-thread is given).
    #[arg(long, default_value = "3", value_parser = parse_duration)]
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
    /// Print one JSON object per protocol instead of a table.
    #[arg(long)]
    pub json: bool,
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
    /// Where logged databases are created (default: the system temp dir).
    #[arg(long)]
    pub dir: Option<std::path::PathBuf>,
    /// Log bytes between checkpoints of logged runs (`LogOptions::checkpoint_bytes`;
    /// 0: none while the run lasts), to see what checkpoints cost.
    #[arg(long, default_value_t = LogOptions::default().checkpoint_bytes)]
    pub checkpoint_bytes: u64,
    /// Threads that prepare a checkpoint's pages beside its own
    /// (`LogOptions::checkpoint_helpers`; 0: none).
    #[arg(long, default_value_t = 0)]
    pub checkpoint_helpers: usize,
    /// Synced logs through the OS page cache rather than with direct I/O
    /// (`LogOptions::direct_io`).
    #[arg(long)]
    pub no_direct_io: bool,
}

/// The log settings to run, from the arguments (`None`: in memory).
fn log_variants(args: &TxnArgs) -> Result<Vec<Option<LogOptions>>, String> {
    let device = match args.device.as_str() {
        "file" => Device::File,
        "nvm" => Device::Nvm(Duration::from_nanos(args.nvm_latency_ns)),
        d => return Err(format!("unknown --device {d:?}; known: file, nvm")),
    };
    let durability = match args.durability.as_str() {
        "sync" => Durability::Sync,
        "buffered" => Durability::Buffered,
        "none" => Durability::None,
        d => return Err(format!("unknown --durability {d:?}; known: sync, buffered, none")),
    };
    let mut out = Vec::new();
    for l in &args.log {
        let mode = match l.as_str() {
            "none" => {
                out.push(None);
                continue;
            }
            "pwal" => LogMode::PWal,
            "swal" => LogMode::SWal,
            _ => return Err(format!("unknown --log {l:?}; known: none, pwal, swal")),
        };
        for r in &args.release {
            let release = match r.as_str() {
                "nlr" => Release::Nlr,
                "elr" => Release::Elr,
                _ => return Err(format!("unknown --release {r:?}; known: nlr, elr")),
            };
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
                    checkpoint_bytes: args.checkpoint_bytes,
                    checkpoint_helpers: args.checkpoint_helpers,
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

/// Runs one transaction's operations.
fn execute<P: Protocol>(
    txn: &mut TypedTxn<'_, P>,
    spec: &TxnSpec,
    value: &[u8],
    next_key: &AtomicU64,
    sleep: Duration,
) -> Result<(), Error> {
    for (i, op) in spec.ops.iter().enumerate() {
        if spec.sleep_at == Some(i) {
            std::thread::sleep(sleep);
        }
        match *op {
            Op::Read(k) => {
                std::hint::black_box(txn.get(&kb(k))?);
            }
            Op::Write(k) => txn.put(&kb(k), value)?,
            Op::Rmw(k) => {
                std::hint::black_box(txn.get(&kb(k))?);
                txn.put(&kb(k), value)?;
            }
            Op::Insert => {
                let k = next_key.fetch_add(1, Ordering::Relaxed);
                txn.insert(&kb(k), value)?;
            }
            Op::ReadLatest(back) => {
                let newest = next_key.load(Ordering::Relaxed).saturating_sub(1);
                std::hint::black_box(txn.get(&kb(newest.saturating_sub(back)))?);
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
fn load<P: Protocol>(db: &TypedDb<P>, records: u64, value: &[u8]) -> Result<(), String> {
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
    let bar = if args.json { ProgressBar::hidden() } else { ProgressBar::new_spinner() };
    bar.set_style(ProgressStyle::with_template("{prefix:>36} {spinner} {pos} txns {per_sec}").unwrap());
    bar.set_prefix(format!("{label} {threads}t run {}/{}", run + 1, args.runs));
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
                            let r = execute(&mut txn, spec, value, next_key, plan.long_sleep);
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
        }
        let mut out = RunResult {
            commits: 0,
            aborts: 0,
            elapsed: Duration::ZERO,
            latency: Histogram::new_with_bounds(1, 600_000_000_000, 3).unwrap(),
        };
        for h in handles {
            let (c, a, hist) = h.join().map_err(|_| "a worker thread panicked".to_string())?;
            out.commits += c;
            out.aborts += a;
            out.latency.add(hist).map_err(|e| e.to_string())?;
        }
        out.elapsed = t0.elapsed();
        bar.finish_and_clear();
        Ok(out)
    })
}

/// Runs every thread count of one protocol; returns one JSON object per thread count.
fn run_cc<P: Protocol>(
    db: TypedDb<P>,
    plan: &Plan,
    args: &TxnArgs,
    log: &Option<LogOptions>,
    gc_name: Option<&str>,
    gc_stats: impl Fn(&TypedDb<P>) -> Value,
) -> Result<Vec<Value>, String> {
    let value = vec![b'v'; plan.value_size];
    load(&db, plan.records, &value)?;
    let next_key = AtomicU64::new(plan.records);
    let name = db.protocol().name();
    let log_name = log.as_ref().map_or("none".to_string(), |l| l.name());
    let label = gc_name.map_or(name.to_string(), |g| format!("{name}/{g}")) + " " + &log_name;
    let mut out = Vec::new();
    for &threads in &args.threads {
        let mut tps = Vec::new();
        let mut latency = Histogram::<u64>::new_with_bounds(1, 600_000_000_000, 3).unwrap();
        let (mut commits, mut aborts) = (0u64, 0u64);
        for run in 0..args.runs {
            let group = log.as_ref().map_or(1, |l| l.group);
            let r = run_once(&db, plan, args, group, threads, run, &label, &next_key)?;
            tps.push(r.commits as f64 / r.elapsed.as_secs_f64());
            commits += r.commits;
            aborts += r.aborts;
            latency.add(&r.latency).map_err(|e| e.to_string())?;
        }
        let (mean, median) = report::mean_median(&tps);
        let mut v = json!({
            "cc": name,
            "gc": gc_name,
            "workload": plan.name,
            "threads": threads,
            "tps": mean,
            "tps_median": median,
            "tps_runs": tps,
            "abort_rate": if commits + aborts == 0 { 0.0 } else { aborts as f64 / (commits + aborts) as f64 },
            "commits": commits,
            "aborts": aborts,
            "records": plan.records,
            "skew": plan.skew,
            "value_size": plan.value_size,
            "ops_per_txn": plan.ops_per_txn,
            "read_ratio": plan.read_ratio,
            "rmw": plan.rmw,
            "latency_ns": report::latency_json(&latency),
        });
        if plan.workload == Workload::Batch {
            v["long_ops"] = json!(plan.long_ops);
            v["long_sleep_s"] = json!(plan.long_sleep.as_secs_f64());
        }
        v["gc_stats"] = gc_stats(&db);
        v["log"] = json!(log_name);
        if let (Some(l), Some(w)) = (log, db.wal_stats()) {
            v["device"] = json!(args.device);
            v["durability"] = json!(args.durability);
            v["direct_io"] = json!(l.direct_io);
            v["group"] = json!(l.group);
            v["syncs"] = json!(w.syncs);
            v["lsn_cas_misses"] = json!(w.lsn_cas_misses);
            v["checkpoints"] = json!(w.checkpoints);
            v["stalls"] = json!(w.stalls);
            v["stall_micros"] = json!(w.stall_micros);
        }
        if let Some(s) = db.store_stats() {
            v["store_live_bytes"] = json!(s.live_bytes);
            v["store_file_bytes"] = json!(s.file_bytes);
            v["store_written_bytes"] = json!(s.written_bytes);
        }
        out.push(v);
    }
    Ok(out)
}

fn no_stats<P: Protocol>(_: &TypedDb<P>) -> Value {
    Value::Null
}

fn si_stats(db: &TypedDb<Si>) -> Value {
    let s = db.protocol().gc_stats();
    json!({
        "reclaimed": s.reclaimed,
        "traversals": s.traversals,
        "empty_traversals": s.empty_traversals,
        "unreclaimed": s.unreclaimed,
        "chain_max": s.chain_max,
        "chain_mean": s.chain_mean,
        "versions": s.versions,
        "bytes": s.bytes,
    })
}

/// An in-memory database, or a logged one in `dir`.
fn open_db<P: Protocol>(
    proto: P,
    index: &BwTreeConfig,
    log: &Option<LogOptions>,
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
    let gcs: Vec<Gc> = args
        .gc
        .iter()
        .map(|g| Gc::parse(g).ok_or_else(|| format!("unknown gc {g:?}; known: none, aot, epo, epo-r")))
        .collect::<Result<_, _>>()?;
    let index = BwTreeConfig::default();
    let logs = log_variants(args)?;
    let base = args.dir.clone().unwrap_or_else(std::env::temp_dir);
    let mut results = Vec::new();
    let mut n = 0;
    for cc in ccs {
        for log in &logs {
            if let Some(l) = log {
                // The library's own rules decide which variants exist for this protocol.
                let opts = tsumiki::Options { cc, log: l.clone(), ..tsumiki::Options::default() };
                if let Err(e) = opts.validate() {
                    eprintln!("note: skipping {} under {}: {e}", l.name(), cc.name());
                    continue;
                }
            }
            n += 1;
            let dir = base.join(format!("tsumiki-bench-txn-{}-{n}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            let rows = match cc {
                Cc::TicToc => run_cc(open_db(TicToc::default(), &index, log, &dir)?, &plan, args, log, None, no_stats)?,
                Cc::Silo => run_cc(open_db(Silo::new(), &index, log, &dir)?, &plan, args, log, None, no_stats)?,
                Cc::TwoPl(LockWait::NoWait) => {
                    run_cc(open_db(TwoPl::no_wait(), &index, log, &dir)?, &plan, args, log, None, no_stats)?
                }
                Cc::TwoPl(LockWait::WaitDie) => {
                    run_cc(open_db(TwoPl::wait_die(), &index, log, &dir)?, &plan, args, log, None, no_stats)?
                }
                Cc::MvccSi(_) => {
                    let mut rows = Vec::new();
                    for &gc in &gcs {
                        let dir = dir.join(gc.name());
                        let db = open_db(Si::new(gc, args.gc_refresh), &index, log, &dir)?;
                        rows.extend(run_cc(db, &plan, args, log, Some(gc.name()), si_stats)?);
                    }
                    rows
                }
            };
            let _ = std::fs::remove_dir_all(&dir);
            for r in rows {
                if args.json {
                    println!("{r}");
                }
                results.push(r);
            }
        }
    }
    if !args.json {
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
        ];
        let rows: Vec<Vec<String>> = results
            .iter()
            .map(|r| {
                let g = &r["gc_stats"];
                vec![
                    r["cc"].as_str().unwrap_or("").to_string(),
                    r["gc"].as_str().unwrap_or("-").to_string(),
                    r["log"].as_str().unwrap_or("-").to_string(),
                    r["workload"].as_str().unwrap_or("").to_string(),
                    r["threads"].to_string(),
                    format!("{:.0}", r["tps"].as_f64().unwrap_or(0.0)),
                    format!("{:.0}", r["tps_median"].as_f64().unwrap_or(0.0)),
                    format!("{:.2}", 100.0 * r["abort_rate"].as_f64().unwrap_or(0.0)),
                    format!("{:.1}", r["latency_ns"]["50"].as_f64().unwrap_or(0.0) / 1e3),
                    format!("{:.1}", r["latency_ns"]["99"].as_f64().unwrap_or(0.0) / 1e3),
                    if g.is_null() { "-".into() } else { g["versions"].to_string() },
                    if g.is_null() { "-".into() } else { g["unreclaimed"].to_string() },
                ]
            })
            .collect();
        report::table(&header, &rows);
    }
    Ok(())
}
