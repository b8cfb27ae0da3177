//! Steady overwrites at scale (issue 13's space goal): fills `KEYS` keys of 4 + 100 bytes,
//! then two threads overwrite random keys one per transaction (buffered durability unless told) for
//! `SECS` seconds, and every 10 s prints the page store's files against the data, its live
//! images, the whole directory (pages, logs and all) and the logs alone against the data, and
//! the page store's write amplification so far (page-store bytes written per byte of
//! updates; the log excluded), and the parts of it that were deltas, cleaning and translation tables
//! (the rest: consolidated bases). The directory is sampled every quarter second for the
//! highest (each sample printed to stderr when `OVERWRITE_TRACE` is set).
//!
//!     cargo run --release -p tsumiki --example overwrite -- 1000000 600
//!
//! Arguments: keys (default 1,000,000), seconds (default 600), directory (default: a
//! temporary one; `-` for one), durability (`buffered`, the default, or `sync`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tsumiki::{Db, Durability, LogOptions, Options};

const VALUE: usize = 100;

fn main() {
    let mut args = std::env::args().skip(1);
    let keys: u32 = args.next().map_or(1_000_000, |a| a.parse().expect("keys: a number"));
    let secs: u64 = args.next().map_or(600, |a| a.parse().expect("seconds: a number"));
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let dir = args.next().filter(|a| a != "-").map_or_else(|| tmp.path().to_path_buf(), std::path::PathBuf::from);
    let durability = match args.next().as_deref() {
        None | Some("buffered") => Durability::Buffered,
        Some("sync") => Durability::Sync,
        Some(d) => panic!("durability: buffered or sync, not {d}"),
    };
    let log = LogOptions { durability, ..LogOptions::default() };
    let db = Db::create(&dir, Options { log, ..Options::default() }).expect("open");
    for chunk in (0..keys).collect::<Vec<_>>().chunks(1000) {
        db.run(|t| chunk.iter().try_for_each(|k| t.put(k.to_be_bytes(), [0; VALUE]))).expect("fill");
    }
    db.checkpoint().expect("checkpoint");
    let data = u64::from(keys) * (4 + VALUE as u64);
    let at_start = db.store_stats().expect("a store");
    let trace = std::env::var_os("OVERWRITE_TRACE").is_some();
    let updates = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let start = Instant::now();
    println!("{keys} keys, {data} bytes of data; then single-key overwrites from 2 threads for {secs} s");
    println!(
        "{:>6} {:>10} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}",
        "secs", "updates", "files/x", "live/x", "disk/x", "logs/x", "WA", "deltas", "cleaning", "tables"
    );
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let (db, updates, stop) = (&db, &updates, &stop);
            s.spawn(move || {
                let mut x: u64 = 0x9E37_79B9_7F4A_7C15 ^ (t + 1);
                let mut n = 0u8;
                while !stop.load(Ordering::Relaxed) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let k = ((x % u64::from(keys)) as u32).to_be_bytes();
                    n = n.wrapping_add(1);
                    if db.run(|txn| txn.put(k, [n; VALUE])).is_ok() {
                        updates.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
        let (mut peak, mut peak_dir, mut peak_at) = (0.0f64, 0.0f64, 0.0f64);
        let mut next_report = Duration::from_secs(10);
        while start.elapsed() < Duration::from_secs(secs) {
            std::thread::sleep(Duration::from_millis(250));
            let (all, logs) = dir_bytes(&dir);
            let (all_x, t) = (all as f64 / data as f64, start.elapsed().as_secs_f64());
            if all_x > peak_dir {
                (peak_dir, peak_at) = (all_x, t);
            }
            if trace {
                eprintln!("{t:.2} s: directory {all_x:.2}x, logs {:.2}x", logs as f64 / data as f64);
            }
            if start.elapsed() < next_report && start.elapsed() < Duration::from_secs(secs) {
                continue;
            }
            next_report += Duration::from_secs(10);
            let st = db.store_stats().expect("a store");
            let u = updates.load(Ordering::Relaxed);
            let files = st.file_bytes as f64 / data as f64;
            peak = peak.max(files);
            let updated = (u.max(1) * (4 + VALUE as u64)) as f64;
            let wa = (st.written_bytes - at_start.written_bytes) as f64 / updated;
            let deltas = (st.delta_bytes - at_start.delta_bytes) as f64 / updated;
            let cleaning = (st.relocated_bytes - at_start.relocated_bytes) as f64 / updated;
            let tables = (st.table_bytes - at_start.table_bytes) as f64 / updated;
            println!(
                "{:>6.0} {:>10} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2}",
                start.elapsed().as_secs_f64(),
                u,
                files,
                st.live_bytes as f64 / data as f64,
                all as f64 / data as f64,
                logs as f64 / data as f64,
                wa,
                deltas,
                cleaning,
                tables
            );
        }
        stop.store(true, Ordering::Relaxed);
        println!("highest sample: page store {peak:.2}x the data; whole directory (4 samples a second) {peak_dir:.2}x, at {peak_at:.1} s");
        let st = db.store_stats().expect("a store");
        let (bases, deltas) = (st.bases_written - at_start.bases_written, st.deltas_written - at_start.deltas_written);
        let delta_bytes = st.delta_bytes - at_start.delta_bytes;
        let base_bytes = (st.written_bytes - at_start.written_bytes)
            .saturating_sub(delta_bytes + st.table_bytes - at_start.table_bytes);
        println!(
            "{} pages; {bases} bases written ({} bytes each with their blocks' framing, cleaning's included), {deltas} deltas ({} bytes each)",
            st.pages,
            base_bytes / bases.max(1),
            delta_bytes / deltas.max(1)
        );
        let cpu_micros = (st.checkpoint_cpu_micros - at_start.checkpoint_cpu_micros) as f64;
        println!(
            "checkpoints' CPU {:.2} s ({:.2} us per update), wall {:.2} s",
            cpu_micros / 1e6,
            cpu_micros / updates.load(Ordering::Relaxed).max(1) as f64,
            (st.checkpoint_micros - at_start.checkpoint_micros) as f64 / 1e6
        );
        let w = db.wal_stats().expect("a log");
        println!(
            "{} checkpoints; {} commits held back ({} ms in all) while the log ran ahead of them",
            w.checkpoints,
            w.stalls,
            w.stall_micros / 1000
        );
    });
    db.close().expect("close");
}

/// Bytes of all files in `dir`, and of its log segments (`wal-*`).
fn dir_bytes(dir: &std::path::Path) -> (u64, u64) {
    let (mut all, mut logs) = (0, 0);
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let len = e.metadata().map_or(0, |m| m.len());
        all += len;
        if e.file_name().to_string_lossy().starts_with("wal-") {
            logs += len;
        }
    }
    (all, logs)
}
