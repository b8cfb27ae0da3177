//! `tsumiki bench cache`: a database many times larger than its cache (issue 13). Fills
//! `--records` records through the public `Db` API with `Options::cache_bytes` set, runs a
//! zipfian read / read-modify-write mix, closes, reopens, and checks every record against a
//! model. Reports throughput, the cache's counters and the process's resident memory
//! (sampled every 50 ms, and the kernel's high-water mark), so the bound "cache budget +
//! translation table + 10%" can be read off.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::time::{Duration, Instant};

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use rand::RngExt;
use serde_json::json;
use tsumiki::{Cc, Db, Durability, Error, Options};

use super::workload::{rng, KeyChooser};

#[derive(Args, Debug, Clone)]
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
    /// Where the database is created (default: the system temp dir).
    #[arg(long)]
    pub dir: Option<std::path::PathBuf>,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
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

/// Samples the resident set every 50 ms and keeps the largest seen per phase.
struct RssSampler {
    peak: AtomicU64,
    stop: AtomicBool,
}

impl RssSampler {
    fn take_peak(&self) -> u64 {
        self.peak.swap(rss().0, Ordering::Relaxed)
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

pub fn run(args: &CacheArgs) -> Result<(), String> {
    if args.key_size < 8 || args.value_size < 12 {
        return Err("--key-size must be at least 8 and --value-size at least 12".into());
    }
    let cc = Cc::parse(&args.cc).ok_or_else(|| format!("unknown --cc {:?}", args.cc))?;
    let durability = match args.durability.as_str() {
        "sync" => Durability::Sync,
        "buffered" => Durability::Buffered,
        "none" => Durability::None,
        d => return Err(format!("unknown --durability {d:?}; known: sync, buffered, none")),
    };
    let mut opts = Options::with_cc(cc);
    opts.cache_bytes = args.cache;
    opts.log.durability = durability;
    let tmp = tempfile::Builder::new()
        .prefix("tsumiki-bench-cache-")
        .tempdir_in(args.dir.clone().unwrap_or_else(std::env::temp_dir))
        .map_err(|e| format!("temporary directory: {e}"))?;
    let path = tmp.path().join("db");
    let n = args.records;
    // The model: each record's committed increments, modulo 256 (a lost or doubled
    // update shows as a counter that disagrees).
    let model: Vec<AtomicU8> = (0..n).map(|_| AtomicU8::new(0)).collect();
    let sampler = RssSampler { peak: AtomicU64::new(0), stop: AtomicBool::new(false) };
    let quiet = args.json;
    let style = ProgressStyle::with_template("{msg:>8} [{bar:40}] {pos}/{len} {per_sec} eta {eta}")
        .unwrap()
        .progress_chars("=> ");
    let e = |e: Error| e.to_string();
    std::thread::scope(|s| -> Result<(), String> {
        s.spawn(|| {
            while !sampler.stop.load(Ordering::Relaxed) {
                sampler.peak.fetch_max(rss().0, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        let result = (|| -> Result<(), String> {
            let (rss_before, _) = rss();
            let db = Db::create(&path, opts.clone()).map_err(e)?;
            let (rss_open, _) = rss();
            sampler.take_peak();

            // Fill.
            let bar = if quiet { ProgressBar::hidden() } else { ProgressBar::new(n) };
            bar.set_style(style.clone());
            bar.set_message("fill");
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
            let after_fill = db.cache_stats().unwrap();

            // The mix.
            let chooser = KeyChooser::new(n, args.skew)?;
            let stop = AtomicBool::new(false);
            let commits = AtomicU64::new(0);
            let aborts = AtomicU64::new(0);
            let bar = if quiet { ProgressBar::hidden() } else { ProgressBar::new(args.duration) };
            bar.set_style(style.clone());
            bar.set_message("mix (s)");
            let t = Instant::now();
            std::thread::scope(|s2| -> Result<(), String> {
                let handles: Vec<_> = (0..args.threads)
                    .map(|th| {
                        let (db, chooser, model, stop, commits, aborts) =
                            (&db, &chooser, &model, &stop, &commits, &aborts);
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
                                            .ok_or_else(|| Error::Corrupt(format!("key {j} is missing")))?;
                                        let c = counter_of(&got, j, args.value_size).map_err(Error::Corrupt)?;
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
                                aborts.fetch_add(tries - 1, Ordering::Relaxed);
                            }
                            Ok(())
                        })
                    })
                    .collect();
                while t.elapsed() < Duration::from_secs(args.duration) && !handles.iter().all(|h| h.is_finished()) {
                    std::thread::sleep(Duration::from_millis(100));
                    bar.set_position(t.elapsed().as_secs().min(args.duration));
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
            let after_mix = db.cache_stats().unwrap();
            let store = db.store_stats();
            let wal = db.wal_stats().unwrap_or_default();

            // Close, reopen, verify every record.
            let t = Instant::now();
            db.close().map_err(e)?;
            let close_secs = t.elapsed().as_secs_f64();
            let t = Instant::now();
            let db = Db::create(&path, opts.clone()).map_err(e)?;
            let reopen_secs = t.elapsed().as_secs_f64();
            let bar = if quiet { ProgressBar::hidden() } else { ProgressBar::new(n) };
            bar.set_style(style.clone());
            bar.set_message("verify");
            let t = Instant::now();
            let mut next = 0u64;
            let mut k = vec![0u8; args.key_size];
            let mut start = vec![0u8; args.key_size];
            key(&mut start, 0);
            while next < n {
                let chunk = 10_000u64.min(n - next);
                key(&mut k, next + chunk);
                let stop_key = if next + chunk < n { Some(k.clone()) } else { None };
                let mut txn = db.begin();
                for row in txn.scan(&start, stop_key.as_deref()) {
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
            let after_verify = db.cache_stats().unwrap();
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
            if args.json {
                println!(
                    "{}",
                    json!({
                        "bench": "cache", "records": n, "cache_bytes": args.cache, "key_size": args.key_size,
                        "value_size": args.value_size, "cc": args.cc, "durability": args.durability,
                        "threads": args.threads, "fill_on_main_thread": args.fill_on_main_thread, "skew": args.skew, "read_ratio": args.read_ratio,
                        "fill_secs": fill_secs, "fill_rps": n as f64 / fill_secs,
                        "mix_secs": mix_secs, "mix_tps": c as f64 / mix_secs, "mix_aborts": a,
                        "close_secs": close_secs, "reopen_secs": reopen_secs, "verify_secs": verify_secs,
                        "rss_before_open": rss_before, "rss_after_open": rss_open, "rss_peak_fill": fill_peak,
                        "rss_peak_mix": mix_peak, "rss_peak_verify": verify_peak, "rss_hwm": hwm,
                        "model_bytes": model_bytes, "store_pages": pages,
                        "table_bytes": table, "rss_bound": bound, "rss_db_share": db_share,
                        "checkpoints": wal.checkpoints, "log_segments_zeroed": wal.segments_zeroed,
                        "log_segments_reused": wal.segments_recycled,
                        "resident_after_fill": after_fill.resident_bytes, "resident_after_mix": after_mix.resident_bytes,
                        "resident_after_verify": after_verify.resident_bytes,
                        "ranges": after_mix.ranges, "loads": after_mix.loads + after_verify.loads,
                        "evictions": after_fill.evictions + after_mix.evictions + after_verify.evictions,
                        "verified": true,
                    })
                );
            } else {
                println!(
                    "bench cache: {n} records of {}+{} B ({} MiB raw) under a {} MiB cache, {} {}, {} threads, zipf {}",
                    args.key_size,
                    args.value_size,
                    mib(n * (args.key_size + args.value_size) as u64),
                    mib(args.cache as u64),
                    args.cc,
                    args.durability,
                    args.threads,
                    args.skew
                );
                super::report::table(
                    &["phase", "secs", "rate", "peak RSS MiB", "cache resident MiB", "ranges loaded/all"],
                    &[
                        vec![
                            "fill".into(),
                            format!("{fill_secs:.1}"),
                            format!("{:.0} rec/s", n as f64 / fill_secs),
                            mib(fill_peak),
                            mib(after_fill.resident_bytes.max(0) as u64),
                            format!("{}/{}", after_fill.ranges_loaded, after_fill.ranges),
                        ],
                        vec![
                            "mix".into(),
                            format!("{mix_secs:.1}"),
                            format!("{:.0} tx/s ({a} aborts)", c as f64 / mix_secs),
                            mib(mix_peak),
                            mib(after_mix.resident_bytes.max(0) as u64),
                            format!("{}/{}", after_mix.ranges_loaded, after_mix.ranges),
                        ],
                        vec![
                            "verify".into(),
                            format!("{verify_secs:.1}"),
                            format!("{:.0} rec/s", n as f64 / verify_secs),
                            mib(verify_peak),
                            mib(after_verify.resident_bytes.max(0) as u64),
                            format!("{}/{}", after_verify.ranges_loaded, after_verify.ranges),
                        ],
                    ],
                );
                println!(
                    "RSS: {} MiB before open, {} MiB after open, high-water {} MiB (the model is {} MiB of it); \
                     {} store pages; close {close_secs:.2} s, reopen {reopen_secs:.3} s; every record verified",
                    mib(rss_before),
                    mib(rss_open),
                    mib(hwm),
                    mib(model_bytes),
                    pages
                );
                println!(
                    "bound (cache + table) + 10%: ({} + {}) MiB + 10% = {} MiB; the database's share of the \
                     high-water (less before open and the model): {} MiB ({:.2}x the bound)",
                    mib(args.cache as u64),
                    mib(table),
                    mib(bound),
                    mib(db_share),
                    db_share as f64 / bound as f64
                );
                println!(
                    "until the end of the mix: {} checkpoints; log segments {} zero-filled, {} reused",
                    wal.checkpoints, wal.segments_zeroed, wal.segments_recycled
                );
            }
            Ok(())
        })();
        sampler.stop.store(true, Ordering::Relaxed);
        result
    })
}
