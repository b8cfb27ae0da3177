//! A snapshot reader held open beside writers (issue 36): the writers' throughput with the
//! reader against the same run without it, the reader's aborts (none: a snapshot cannot
//! abort), the versions kept while it is open and after it ends.
//!
//! `cargo run --release --example long_reader -- [SECS] [WRITERS] [PROTOCOLS]`: each
//! protocol (`tictoc,silo,2pl-nowait,2pl-waitdie,mvcc-si` by default) runs `SECS` seconds
//! (20) of `WRITERS` threads (1) moving money between 100K accounts without a reader, and
//! `SECS` seconds with one snapshot held open and scanned again and again, in alternating
//! halves. On a 2-core
//! machine use one writer: the reader then has a core of its own, so the ratio shows what
//! the snapshot costs the writers rather than how the cores are shared. The engine's own
//! threads (the page store's checkpoints) need cores too: the last column shows how many
//! they used, and `LR_MEMORY=1` runs in memory, without them.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tsumiki::{Cc, Db, Durability, LogOptions, Options};

const ACCOUNTS: u32 = 100_000;

fn key(i: u32) -> [u8; 4] {
    i.to_be_bytes()
}

fn amount(v: &[u8]) -> u64 {
    u64::from_be_bytes(v.try_into().expect("8-byte balance"))
}

/// The resident set, from /proc (MiB).
fn rss_mib() -> f64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: f64 = s.split_whitespace().nth(1).and_then(|p| p.parse().ok()).unwrap_or(0.0);
    pages * 4096.0 / (1 << 20) as f64
}

/// CPU seconds the engine's own threads (named `tsumiki-...`: checkpoints, the page
/// store's segments) have used, from /proc: on a 2-core machine they share the cores with
/// the writer and the reader.
fn engine_cpu_secs() -> f64 {
    // SAFETY: sysconf only reads a constant of the system.
    let tick = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return 0.0 };
    let mut ticks = 0u64;
    for task in tasks.flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if !comm.starts_with("tsumiki-") {
            continue;
        }
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        // Fields after the name's closing parenthesis: utime and stime are the 12th and 13th.
        let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
        let f: Vec<u64> = rest.split_whitespace().skip(11).take(2).filter_map(|x| x.parse().ok()).collect();
        ticks += f.iter().sum::<u64>();
    }
    ticks as f64 / tick
}

struct Run {
    transfers: u64,
    /// CPU seconds of the engine's own threads during the run.
    engine_cpu: f64,
    scans: u64,
    /// Scans that failed (a snapshot never conflicts, so any error counts).
    failed: u64,
    max_versions: i64,
    max_bytes: i64,
}

fn run(db: &Db, secs: f64, writers: usize, reader: bool) -> Run {
    let stop = AtomicBool::new(false);
    let transfers = AtomicU64::new(0);
    let mut r = Run { transfers: 0, engine_cpu: 0.0, scans: 0, failed: 0, max_versions: 0, max_bytes: 0 };
    let cpu_before = engine_cpu_secs();
    std::thread::scope(|s| {
        for w in 0..writers as u64 {
            let (stop, transfers) = (&stop, &transfers);
            s.spawn(move || {
                let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ (w + 1);
                while !stop.load(Ordering::Relaxed) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let (a, b) = ((x % ACCOUNTS as u64) as u32, ((x >> 32) % ACCOUNTS as u64) as u32);
                    if a == b {
                        continue;
                    }
                    db.run(|t| {
                        let va = amount(&t.get(key(a))?.expect("account"));
                        let vb = amount(&t.get(key(b))?.expect("account"));
                        if va > 0 {
                            t.put(key(a), (va - 1).to_be_bytes())?;
                            t.put(key(b), (vb + 1).to_be_bytes())?;
                        }
                        Ok(())
                    })
                    .expect("transfer");
                    transfers.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        let end = Instant::now() + Duration::from_secs_f64(secs);
        if reader {
            let snap = db.begin_read();
            // `LR_IDLE=1`: the snapshot stays open but is not read, which separates what
            // keeping versions costs the writers from what sharing the cores costs them.
            let idle = std::env::var("LR_IDLE").is_ok_and(|v| v == "1");
            while idle && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(50));
                let st = db.snapshot_stats();
                r.max_versions = r.max_versions.max(st.versions);
                r.max_bytes = r.max_bytes.max(st.bytes);
            }
            while Instant::now() < end {
                let total: Result<u64, _> = snap.iter().map(|row| row.map(|(_, v)| amount(&v))).sum();
                match total {
                    Ok(t) => assert_eq!(t, ACCOUNTS as u64 * 100, "the snapshot saw one state"),
                    Err(e) => {
                        eprintln!("a snapshot scan failed: {e}");
                        r.failed += 1;
                    }
                }
                r.scans += 1;
                let st = db.snapshot_stats();
                r.max_versions = r.max_versions.max(st.versions);
                r.max_bytes = r.max_bytes.max(st.bytes);
            }
        } else {
            std::thread::sleep(end - Instant::now());
        }
        stop.store(true, Ordering::Relaxed);
    });
    r.transfers = transfers.into_inner();
    r.engine_cpu = engine_cpu_secs() - cpu_before;
    r
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let secs: f64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(20.0);
    let writers: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1);
    let which = args.get(3).cloned().unwrap_or_else(|| "tictoc,silo,2pl-nowait,2pl-waitdie,mvcc-si".into());
    println!("{secs} s per run, {writers} writer(s), {ACCOUNTS} accounts, commits unsynced");
    println!("protocol      transfers/s alone  with reader  ratio  scans  failed scans  versions max (MiB)  after  RSS MiB before/during/after  engine threads' cores alone/with");
    for name in which.split(',') {
        let cc: Cc = name.parse().expect("a protocol name");
        let dir = tempfile::tempdir().expect("temp dir");
        let opts = Options {
            log: LogOptions { durability: Durability::None, ..LogOptions::default() },
            ..Options::with_cc(cc)
        };
        // `LR_MEMORY=1`: in memory, without the page store's checkpoints, whose thread
        // shares the cores with the writer and the reader.
        let db = if std::env::var("LR_MEMORY").is_ok_and(|v| v == "1") {
            Db::open_in_memory(opts).expect("open in memory")
        } else {
            Db::create(dir.path().join("db"), opts).expect("create")
        };
        for chunk in (0..ACCOUNTS).collect::<Vec<_>>().chunks(10_000) {
            db.run(|t| chunk.iter().try_for_each(|&i| t.put(key(i), 100u64.to_be_bytes()))).expect("fill");
        }
        // Alternating halves (alone, with, alone, with), so that a drift over the run (the
        // log and pages growing, checkpoints) weighs on both sides alike.
        let alone1 = run(&db, secs / 2.0, writers, false);
        let rss_before = rss_mib();
        let with1 = run(&db, secs / 2.0, writers, true);
        let rss_during = rss_mib();
        let alone2 = run(&db, secs / 2.0, writers, false);
        let with2 = run(&db, secs / 2.0, writers, true);
        let alone = Run {
            transfers: alone1.transfers + alone2.transfers,
            engine_cpu: alone1.engine_cpu + alone2.engine_cpu,
            ..alone1
        };
        let with = Run {
            transfers: with1.transfers + with2.transfers,
            engine_cpu: with1.engine_cpu + with2.engine_cpu,
            scans: with1.scans + with2.scans,
            failed: with1.failed + with2.failed,
            max_versions: with1.max_versions.max(with2.max_versions),
            max_bytes: with1.max_bytes.max(with2.max_bytes),
        };
        // The sweep runs at the snapshot's close, and at later commits for busy records.
        let _ = run(&db, 0.2, writers, false);
        let after = db.snapshot_stats();
        let rss_after = rss_mib();
        println!(
            "{:<13} {:>17.0}  {:>11.0}  {:>5.2}  {:>5}  {:>12}  {:>8} ({:>6.1})  {:>5}  {:.0}/{:.0}/{:.0}  {:.2}/{:.2}",
            name,
            alone.transfers as f64 / secs,
            with.transfers as f64 / secs,
            with.transfers as f64 / alone.transfers.max(1) as f64,
            with.scans,
            with.failed,
            with.max_versions,
            with.max_bytes as f64 / (1 << 20) as f64,
            after.versions,
            rss_before,
            rss_during,
            rss_after,
            alone.engine_cpu / secs,
            with.engine_cpu / secs
        );
    }
}
