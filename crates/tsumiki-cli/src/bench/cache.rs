//! `tsumiki bench cache`: a database many times larger than its cache (issue 13). Fills
//! `--records` records through the public `Db` API with `Options::cache_bytes` set, runs a
//! zipfian read / read-modify-write mix, closes, reopens, and checks every record against a
//! model. Reports throughput, the cache's counters and the process's resident memory
//! (sampled every 50 ms, and the kernel's high-water mark), so the bound "cache budget +
//! translation table + 10%" can be read off. The plot draws the run against time: each
//! phase's rate, and the resident set beside that bound.

use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::time::{Duration, Instant};

use clap::Args;
use parking_lot::Mutex;
use rand::RngExt;
use serde::Serialize;
use tsumiki::{Cc, Db, Durability, Error, Options};

use super::cleanup::TempDir;
use super::plot::{self, Chart, HLine, XAxis};
use super::progress;
use super::schema::{Family, OutputArgs, Reporter, ResultRecord};
use super::workload::{rng, KeyChooser};

#[derive(Args, Debug, Clone, Serialize)]
pub struct CacheArgs {
    /// Records filled before the mix.
    #[arg(long, default_value_t = 10_000_000)]
    pub records: u64,
    /// Cache budget (`Options::cache_bytes`): bytes, or with a K/M/G suffix (binary).
    #[arg(long, default_value = "64M", value_parser = parse_bytes)]
    pub cache: usize,
    /// Fill on the main thread, which then waits idle through the mix (by default the fill
    /// runs on a thread of its own that ends first: see the note in `run`).
    #[arg(long)]
    pub fill_on_main_thread: bool,
    /// Key size in bytes (at least 8; the key number is its last 8 bytes).
    #[arg(long, default_value_t = 16)]
    pub key_size: usize,
    /// Value size in bytes (at least 12: the key number and an update counter).
    #[arg(long, default_value_t = 48)]
    pub value_size: usize,
    /// Records per fill transaction.
    #[arg(long, default_value_t = 1000)]
    pub batch: u64,
    /// Concurrency control: tictoc, silo, 2pl-nowait, 2pl-waitdie, mvcc-si.
    #[arg(long, default_value = "tictoc")]
    pub cc: String,
    /// What a commit waits for: sync, buffered, none.
    #[arg(long, default_value = "sync")]
    pub durability: String,
    /// Worker threads of the mix.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Seconds of the mix.
    #[arg(long, default_value_t = 30)]
    pub duration: u64,
    /// Zipf skew of the mix's key choice.
    #[arg(long, default_value_t = 0.9)]
    pub skew: f64,
    /// Fraction of reads in the mix; the rest read, increment and write a record's counter.
    #[arg(long, default_value_t = 0.5)]
    pub read_ratio: f64,
    /// Operations per mix transaction.
    #[arg(long, default_value_t = 4)]
    pub ops_per_txn: usize,
    /// Seed of the workload generator.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Where the database is created, in a fresh temporary directory removed afterwards
    /// and on Ctrl-C (default: the system temp dir).
    #[arg(long)]
    pub dir: Option<std::path::PathBuf>,
    #[command(flatten)]
    #[serde(flatten)]
    pub out: OutputArgs,
}

fn parse_bytes(s: &str) -> Result<usize, String> {
    let s = s.trim();
    let (num, mul) = match s.char_indices().last() {
        Some((i, 'K' | 'k')) => (&s[..i], 1usize << 10),
        Some((i, 'M' | 'm')) => (&s[..i], 1 << 20),
        Some((i, 'G' | 'g')) => (&s[..i], 1 << 30),
        _ => (s, 1),
    };
    let n: usize = num.trim().parse().map_err(|_| format!("bad size {s:?}: expected e.g. 65536, 64K, 64M, 1G"))?;
    n.checked_mul(mul).ok_or_else(|| format!("size {s:?} is too large"))
}

/// The process's resident set and its high-water mark, in bytes (Linux `/proc`).
fn rss() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Samples the resident set every 50 ms and keeps the largest seen per phase; every
/// 200 ms it also records the phase's progress counter for the plot.
struct RssSampler {
    peak: AtomicU64,
    stop: AtomicBool,
    /// The running phase (an index into [`PHASES`]; past the end: none).
    phase: AtomicU8,
    /// Records filled or verified, or transactions committed, in the running phase.
    done: AtomicU64,
    timeline: Mutex<Vec<Sample>>,
}

/// The phases drawn, and the unit of their progress counters.
const PHASES: [(&str, &str); 3] = [("fill", "records/s"), ("mix", "tx/s"), ("verify", "records/s")];
const NO_PHASE: u8 = PHASES.len() as u8;

/// One point of the timeline: seconds since the start, phase, its counter, resident bytes.
#[derive(Clone, Copy)]
struct Sample {
    t: f64,
    phase: u8,
    done: u64,
    rss: u64,
}

impl RssSampler {
    fn take_peak(&self) -> u64 {
        self.peak.swap(rss().0, Ordering::Relaxed)
    }

    /// Starts phase `p` (its counter from 0).
    fn enter(&self, p: u8) {
        self.phase.store(NO_PHASE, Ordering::Relaxed);
        self.done.store(0, Ordering::Relaxed);
        self.phase.store(p, Ordering::Relaxed);
    }

    /// Samples until `stop`.
    fn sample(&self) {
        let t0 = Instant::now();
        let mut last = Instant::now() - Duration::from_secs(1);
        while !self.stop.load(Ordering::Relaxed) {
            let now = rss().0;
            self.peak.fetch_max(now, Ordering::Relaxed);
            if last.elapsed() >= Duration::from_millis(200) {
                last = Instant::now();
                let phase = self.phase.load(Ordering::Relaxed);
                let done = self.done.load(Ordering::Relaxed);
                self.timeline.lock().push(Sample { t: t0.elapsed().as_secs_f64(), phase, done, rss: now });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn key(buf: &mut [u8], i: u64) {
    let n = buf.len();
    buf[..n - 8].fill(b'k');
    buf[n - 8..].copy_from_slice(&i.to_be_bytes());
}

/// A value: the key number, the update counter, filler.
fn value(buf: &mut [u8], i: u64, counter: u32) {
    buf[..8].copy_from_slice(&i.to_le_bytes());
    buf[8..12].copy_from_slice(&counter.to_le_bytes());
    buf[12..].fill(b'v');
}

/// Decodes a value read for key `i`: its counter, or an error if it belongs elsewhere.
fn counter_of(v: &[u8], i: u64, size: usize) -> Result<u32, String> {
    if v.len() != size || v[..8] != i.to_le_bytes() {
        return Err(format!("key {i}: read a value of {} bytes that belongs to another key", v.len()));
    }
    Ok(u32::from_le_bytes(v[8..12].try_into().unwrap()))
}

fn mib(b: u64) -> String {
    format!("{:.1}", b as f64 / (1 << 20) as f64)
}

/// The parameters of the run.
#[derive(Serialize, Debug)]
struct CacheParams {
    records: u64,
    cache_bytes: usize,
    key_size: usize,
    value_size: usize,
    batch: u64,
    cc: String,
    durability: String,
    threads: usize,
    duration_s: u64,
    skew: f64,
    read_ratio: f64,
    ops_per_txn: usize,
    fill_on_main_thread: bool,
}

/// What the run measured: each phase's time and rate, the resident set, the cache.
#[derive(Serialize, Debug)]
struct CacheMetrics {
    fill_secs: f64,
    fill_rps: f64,
    mix_secs: f64,
    mix_tps: f64,
    mix_commits: u64,
    mix_aborts: u64,
    close_secs: f64,
    reopen_secs: f64,
    verify_secs: f64,
    verify_rps: f64,
    /// Resident bytes: before and after the open, the peaks of each phase, the high-water.
    rss_before_open: u64,
    rss_after_open: u64,
    rss_peak_fill: u64,
    rss_peak_mix: u64,
    rss_peak_verify: u64,
    rss_hwm: u64,
    /// The model's bytes (one per record), part of the high-water.
    model_bytes: u64,
    store_pages: u64,
    /// The translation table: the store's pages, the ranges' map, the index's mapping table.
    table_bytes: u64,
    /// (cache + table) + 10%: what the database's share must stay under.
    rss_bound: u64,
    /// The high-water less the resident set before the open and the model.
    rss_db_share: u64,
    checkpoints: u64,
    log_segments_zeroed: u64,
    log_segments_reused: u64,
    resident_after_fill: i64,
    resident_after_mix: i64,
    resident_after_verify: i64,
    ranges: usize,
    ranges_loaded_after_fill: usize,
    ranges_loaded_after_mix: usize,
    ranges_loaded_after_verify: usize,
    loads: u64,
    evictions: u64,
    /// Every record read back after the reopen matched the model.
    verified: bool,
}

pub fn run(args: &CacheArgs) -> Result<(), String> {
    if args.key_size < 8 || args.value_size < 12 {
        return Err("--key-size must be at least 8 and --value-size at least 12".into());
    }
    let cc: Cc = args.cc.parse().map_err(|e| format!("--cc: {e}"))?;
    let durability: Durability = args.durability.parse().map_err(|e| format!("--durability: {e}"))?;
    let mut opts = Options::with_cc(cc);
    opts.cache_bytes = args.cache;
    opts.log.durability = durability;
    let mut reporter = Reporter::start(Family::Cache, &args.out, args)?;
    let tmp = TempDir::new("tsumiki-bench-cache-", args.dir.as_deref())?;
    let path = tmp.path().join("db");
    let n = args.records;
    // The model: each record's committed increments, modulo 256 (a lost or doubled
    // update shows as a counter that disagrees).
    let model: Vec<AtomicU8> = (0..n).map(|_| AtomicU8::new(0)).collect();
    let sampler = RssSampler {
        peak: AtomicU64::new(0),
        stop: AtomicBool::new(false),
        phase: AtomicU8::new(NO_PHASE),
        done: AtomicU64::new(0),
        timeline: Mutex::new(Vec::new()),
    };
    let quiet = args.out.quiet;
    let e = |e: Error| e.to_string();
    let row = std::thread::scope(|s| -> Result<CacheRow, String> {
        s.spawn(|| sampler.sample());
        let result = (|| -> Result<CacheRow, String> {
            let (rss_before, _) = rss();
            let db = Db::create(&path, opts.clone()).map_err(e)?;
            let (rss_open, _) = rss();
            sampler.take_peak();

            // Fill.
            let bar = progress::bar(quiet, n, "fill", "records");
            sampler.enter(0);
            let t = Instant::now();
            // The fill runs on a thread of its own, which ends before the mix (a loader), unless
            // `--fill-on-main-thread`: mimalloc returns a freed block to the heap of the thread
            // that allocated it, and an idle thread never takes back what other threads freed
            // into its pages. The mix evicts what the fill cached, so a filling thread left
            // idle kept ~8 MiB more resident at 10M records under 64 MiB (0.98-1.02x the
            // bound against 0.93-0.95x).
            let fill = || -> Result<(), String> {
                let (mut k, mut v) = (vec![0u8; args.key_size], vec![0u8; args.value_size]);
                let mut i = 0;
                while i < n {
                    let end = (i + args.batch).min(n);
                    db.run(|txn| {
                        for j in i..end {
                            key(&mut k, j);
                            value(&mut v, j, 0);
                            txn.put(&k, &v)?;
                        }
                        Ok(())
                    })
                    .map_err(e)?;
                    bar.inc(end - i);
                    sampler.done.fetch_add(end - i, Ordering::Relaxed);
                    i = end;
                }
                Ok(())
            };
            if args.fill_on_main_thread {
                fill()?;
            } else {
                std::thread::scope(|fs| fs.spawn(fill).join()).map_err(|_| "the fill panicked".to_string())??;
            }
            let fill_secs = t.elapsed().as_secs_f64();
            bar.finish_and_clear();
            let fill_peak = sampler.take_peak();
            let after_fill = db.cache_stats().unwrap_or_default();

            // The mix.
            let chooser = KeyChooser::new(n, args.skew)?;
            let stop = AtomicBool::new(false);
            let commits = AtomicU64::new(0);
            let aborts = AtomicU64::new(0);
            let bar = progress::spinner(quiet, format!("mix, {} s", args.duration), "txns");
            sampler.enter(1);
            let t = Instant::now();
            std::thread::scope(|s2| -> Result<(), String> {
                let handles: Vec<_> = (0..args.threads)
                    .map(|th| {
                        let (db, chooser, model, stop, commits, aborts, done) =
                            (&db, &chooser, &model, &stop, &commits, &aborts, &sampler.done);
                        s2.spawn(move || -> Result<(), String> {
                            let mut r = rng(args.seed, 1, th as u64);
                            let (mut k, mut v) = (vec![0u8; args.key_size], vec![0u8; args.value_size]);
                            let mut ops = Vec::with_capacity(args.ops_per_txn);
                            let mut written = Vec::new();
                            while !stop.load(Ordering::Relaxed) {
                                ops.clear();
                                for _ in 0..args.ops_per_txn {
                                    ops.push((chooser.pick(&mut r) as u64, r.random::<f64>() < args.read_ratio));
                                }
                                let mut tries = 0;
                                db.run(|txn| {
                                    tries += 1;
                                    written.clear();
                                    for &(j, read) in &ops {
                                        key(&mut k, j);
                                        let got = txn
                                            .get(&k)?
                                            .ok_or_else(|| Error::Corrupt(format!("key {j} is missing").into()))?;
                                        let c = counter_of(&got, j, args.value_size)
                                            .map_err(|m| Error::Corrupt(m.into()))?;
                                        if !read {
                                            value(&mut v, j, c.wrapping_add(1));
                                            txn.put(&k, &v)?;
                                            written.push(j);
                                        }
                                    }
                                    Ok(())
                                })
                                .map_err(e)?;
                                for &j in &written {
                                    model[j as usize].fetch_add(1, Ordering::Relaxed);
                                }
                                commits.fetch_add(1, Ordering::Relaxed);
                                done.fetch_add(1, Ordering::Relaxed);
                                aborts.fetch_add(tries - 1, Ordering::Relaxed);
                            }
                            Ok(())
                        })
                    })
                    .collect();
                while t.elapsed() < Duration::from_secs(args.duration) && !handles.iter().all(|h| h.is_finished()) {
                    std::thread::sleep(Duration::from_millis(100));
                    bar.set_position(commits.load(Ordering::Relaxed));
                }
                stop.store(true, Ordering::Relaxed);
                for h in handles {
                    h.join().map_err(|_| "a mix thread panicked".to_string())??;
                }
                Ok(())
            })?;
            let mix_secs = t.elapsed().as_secs_f64();
            bar.finish_and_clear();
            let mix_peak = sampler.take_peak();
            let after_mix = db.cache_stats().unwrap_or_default();
            let store = db.store_stats();
            let wal = db.wal_stats().unwrap_or_default();

            // Close, reopen, verify every record.
            sampler.enter(NO_PHASE);
            let bar = progress::spinner(quiet, "close and reopen", "");
            let t = Instant::now();
            db.close().map_err(e)?;
            let close_secs = t.elapsed().as_secs_f64();
            let t = Instant::now();
            let db = Db::open(&path, opts.clone()).map_err(e)?;
            let reopen_secs = t.elapsed().as_secs_f64();
            bar.finish_and_clear();
            let bar = progress::bar(quiet, n, "verify", "records");
            sampler.enter(2);
            let t = Instant::now();
            let mut next = 0u64;
            let mut k = vec![0u8; args.key_size];
            let mut start = vec![0u8; args.key_size];
            key(&mut start, 0);
            while next < n {
                let chunk = 10_000u64.min(n - next);
                key(&mut k, next + chunk);
                let stop_key = if next + chunk < n { Some(k.clone()) } else { None };
                let txn = db.begin();
                let end = stop_key.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
                for row in txn.range((Bound::Included(start.as_slice()), end)) {
                    let (key_bytes, val) = row.map_err(e)?;
                    if key_bytes.len() != args.key_size || key_bytes[args.key_size - 8..] != next.to_be_bytes() {
                        return Err(format!("verify: expected key {next}, found {key_bytes:?}"));
                    }
                    let c = counter_of(&val, next, args.value_size)?;
                    let want = model[next as usize].load(Ordering::Relaxed);
                    if c as u8 != want {
                        return Err(format!("verify: key {next} has counter {c}, the model {want} (mod 256)"));
                    }
                    next += 1;
                }
                txn.commit().map_err(e)?;
                bar.set_position(next);
                sampler.done.store(next, Ordering::Relaxed);
                if next < n {
                    let expected = stop_key.as_deref().unwrap();
                    if next != u64::from_be_bytes(expected[args.key_size - 8..].try_into().unwrap()) {
                        return Err(format!("verify: key {next} is missing"));
                    }
                }
                key(&mut start, next);
            }
            let verify_secs = t.elapsed().as_secs_f64();
            bar.finish_and_clear();
            let verify_peak = sampler.take_peak();
            let after_verify = db.cache_stats().unwrap_or_default();
            let verify_table = db.store_stats().map_or(0, |s| s.table_memory);
            db.close().map_err(e)?;
            let (_, hwm) = rss();
            let model_bytes = n;
            let c = commits.load(Ordering::Relaxed);
            let a = aborts.load(Ordering::Relaxed);
            let pages = store.as_ref().map_or(0, |s| s.pages);
            // Issue 13's bound on the resident set: (cache + translation table) + 10%. The
            // table: the store's pages, the ranges' map and the index's mapping table, the
            // largest seen at the ends of the phases.
            let maps = [&after_fill, &after_mix, &after_verify].iter().map(|c| c.map_bytes).max().unwrap_or(0);
            let table = maps + store.as_ref().map_or(0, |s| s.table_memory).max(verify_table);
            let bound = (args.cache as u64 + table) * 11 / 10;
            let db_share = hwm.saturating_sub(rss_before).saturating_sub(model_bytes);
            let params = CacheParams {
                records: n,
                cache_bytes: args.cache,
                key_size: args.key_size,
                value_size: args.value_size,
                batch: args.batch,
                cc: args.cc.clone(),
                durability: args.durability.clone(),
                threads: args.threads,
                duration_s: args.duration,
                skew: args.skew,
                read_ratio: args.read_ratio,
                ops_per_txn: args.ops_per_txn,
                fill_on_main_thread: args.fill_on_main_thread,
            };
            let metrics = CacheMetrics {
                fill_secs,
                fill_rps: n as f64 / fill_secs,
                mix_secs,
                mix_tps: c as f64 / mix_secs,
                mix_commits: c,
                mix_aborts: a,
                close_secs,
                reopen_secs,
                verify_secs,
                verify_rps: n as f64 / verify_secs,
                rss_before_open: rss_before,
                rss_after_open: rss_open,
                rss_peak_fill: fill_peak,
                rss_peak_mix: mix_peak,
                rss_peak_verify: verify_peak,
                rss_hwm: hwm,
                model_bytes,
                store_pages: pages,
                table_bytes: table,
                rss_bound: bound,
                rss_db_share: db_share,
                checkpoints: wal.checkpoints,
                log_segments_zeroed: wal.segments_zeroed,
                log_segments_reused: wal.segments_recycled,
                resident_after_fill: after_fill.resident_bytes,
                resident_after_mix: after_mix.resident_bytes,
                resident_after_verify: after_verify.resident_bytes,
                ranges: after_mix.ranges,
                ranges_loaded_after_fill: after_fill.ranges_loaded,
                ranges_loaded_after_mix: after_mix.ranges_loaded,
                ranges_loaded_after_verify: after_verify.ranges_loaded,
                loads: after_mix.loads + after_verify.loads,
                evictions: after_fill.evictions + after_mix.evictions + after_verify.evictions,
                verified: true,
            };
            Ok(ResultRecord::new(Family::Cache, args.cc.clone(), metrics.mix_tps, "tx/s", params, metrics))
        })();
        sampler.stop.store(true, Ordering::Relaxed);
        result
    })?;
    tmp.close()?;
    reporter.row(&row)?;
    reporter.finish()?;
    if !args.out.json {
        print_table(&row);
    }
    if let Some(path) = &args.out.plot {
        plot_timeline(path, &row, &sampler.timeline.lock())?;
    }
    Ok(())
}

type CacheRow = ResultRecord<CacheParams, CacheMetrics>;

fn print_table(row: &CacheRow) {
    let (p, m) = (&row.params, &row.metrics);
    println!(
        "bench cache: {} records of {}+{} B ({} MiB raw) under a {} MiB cache, {} {}, {} threads, zipf {}",
        p.records,
        p.key_size,
        p.value_size,
        mib(p.records * (p.key_size + p.value_size) as u64),
        mib(p.cache_bytes as u64),
        p.cc,
        p.durability,
        p.threads,
        p.skew
    );
    let resident = |b: i64| mib(b.max(0) as u64);
    super::report::table(
        &["phase", "secs", "rate", "peak RSS MiB", "cache resident MiB", "ranges loaded/all"],
        &[
            vec![
                "fill".into(),
                format!("{:.1}", m.fill_secs),
                format!("{:.0} rec/s", m.fill_rps),
                mib(m.rss_peak_fill),
                resident(m.resident_after_fill),
                format!("{}/{}", m.ranges_loaded_after_fill, m.ranges),
            ],
            vec![
                "mix".into(),
                format!("{:.1}", m.mix_secs),
                format!("{:.0} tx/s ({} aborts)", m.mix_tps, m.mix_aborts),
                mib(m.rss_peak_mix),
                resident(m.resident_after_mix),
                format!("{}/{}", m.ranges_loaded_after_mix, m.ranges),
            ],
            vec![
                "verify".into(),
                format!("{:.1}", m.verify_secs),
                format!("{:.0} rec/s", m.verify_rps),
                mib(m.rss_peak_verify),
                resident(m.resident_after_verify),
                format!("{}/{}", m.ranges_loaded_after_verify, m.ranges),
            ],
        ],
    );
    println!(
        "RSS: {} MiB before open, {} MiB after open, high-water {} MiB (the model is {} MiB of it); \
         {} store pages; close {:.2} s, reopen {:.3} s; every record verified",
        mib(m.rss_before_open),
        mib(m.rss_after_open),
        mib(m.rss_hwm),
        mib(m.model_bytes),
        m.store_pages,
        m.close_secs,
        m.reopen_secs,
    );
    println!(
        "bound (cache + table) + 10%: ({} + {}) MiB + 10% = {} MiB; the database's share of the \
         high-water (less before open and the model): {} MiB ({:.2}x the bound)",
        mib(p.cache_bytes as u64),
        mib(m.table_bytes),
        mib(m.rss_bound),
        mib(m.rss_db_share),
        m.rss_db_share as f64 / m.rss_bound as f64
    );
    println!(
        "until the end of the mix: {} checkpoints; log segments {} zero-filled, {} reused",
        m.checkpoints, m.log_segments_zeroed, m.log_segments_reused
    );
}

/// The run against time: each phase's rate (top), and the resident set beside the bound
/// and the cache budget (bottom).
fn plot_timeline(path: &std::path::Path, row: &CacheRow, samples: &[Sample]) -> Result<(), String> {
    let (p, m) = (&row.params, &row.metrics);
    let caption = format!(
        "{} records of {}+{} B, {} MiB cache, {} {}, {} threads, zipf {}, {}% reads",
        plot::si(p.records as f64),
        p.key_size,
        p.value_size,
        mib(p.cache_bytes as u64),
        p.cc,
        p.durability,
        p.threads,
        p.skew,
        (p.read_ratio * 100.0).round()
    );
    let mut rates = Chart::new(caption, "time (s)", "rate (records/s or tx/s)", "phase");
    rates.x = XAxis::Linear;
    for w in samples.windows(2) {
        let (a, b) = (w[0], w[1]);
        if a.phase == b.phase && (a.phase as usize) < PHASES.len() && b.t > a.t {
            let (name, unit) = PHASES[a.phase as usize];
            let rate = b.done.saturating_sub(a.done) as f64 / (b.t - a.t);
            rates.push(&format!("{name} ({unit})"), b.t, rate);
        }
    }
    let mut memory = Chart::new(
        "resident set; its bound: the resident set before the open + the model (1 byte per record) \
         + (cache budget + translation table) x 1.1",
        "time (s)",
        "resident memory (MiB)",
        "memory",
    );
    memory.x = XAxis::Linear;
    for s in samples {
        memory.push("resident set", s.t, s.rss as f64 / (1 << 20) as f64);
    }
    let base = (m.rss_before_open + m.model_bytes) as f64 / (1 << 20) as f64;
    memory.hlines.push(HLine { name: "resident set bound".into(), y: base + m.rss_bound as f64 / (1 << 20) as f64 });
    memory.hlines.push(HLine { name: "cache budget".into(), y: p.cache_bytes as f64 / (1 << 20) as f64 });
    plot::write_svg(path, "tsumiki bench cache", &super::report::footer(), &[rates, memory])
}
