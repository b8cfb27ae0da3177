//! Checkpoints while open: the logs stop growing, recovery replays only what came after
//! the last checkpoint, and commits running beside a checkpoint are all kept (issue 13,
//! item 3). Power loss inside checkpoints is covered by `tests/crash.rs` (with a planted
//! bug), process kills by `tests/kill.rs`.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use tsumiki::{Cc, Db, Durability, Error, LogMode, LogOptions, Options, Release, StoreOptions};

fn disk_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    // A file may go between the listing and its metadata (a checkpoint deletes old logs).
    std::fs::read_dir(dir).unwrap().filter_map(|e| e.ok()?.metadata().ok()).map(|m| m.blocks() * 512).sum()
}

fn log_files(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().starts_with("wal-"))
        .count()
}

fn opts(cc: Cc, release: Release, checkpoint_bytes: u64) -> Options {
    let log = LogOptions { release, durability: Durability::Buffered, segment_size: 1 << 20, ..LogOptions::default() };
    let store = StoreOptions { checkpoint_bytes, ..StoreOptions::default() };
    Options { cc, log, store, ..Options::default() }
}

/// `opts` with a block per commit: synced durability (buffered commits share blocks, so
/// their log grows ~40x slower). The syncs are real: commits without them outrun the
/// background checkpoints the assertions count.
fn block_per_commit(cc: Cc, release: Release, checkpoint_bytes: u64) -> Options {
    let mut o = opts(cc, release, checkpoint_bytes);
    o.log.durability = Durability::Sync;
    o
}

#[test]
fn logs_stop_growing_and_recovery_replays_only_the_tail() {
    for release in [Release::Nlr, Release::Elr] {
        let dir = tempfile::tempdir().unwrap();
        let o = block_per_commit(Cc::TicToc, release, 256 << 10);
        let db = Db::create(dir.path(), o.clone()).unwrap();
        let mut model = BTreeMap::new();
        let mut peak = 0;
        for i in 0..30_000u32 {
            let k = (i % 2000).to_be_bytes();
            let v = vec![(i % 251) as u8; 64];
            db.run(|t| t.put(k, &v)).unwrap();
            model.insert(k.to_vec(), v);
            if i % 1000 == 0 {
                peak = peak.max(disk_bytes(dir.path()));
            }
        }
        let stats = db.wal_stats().unwrap();
        // 30,000 commits wrote ~120 MB of log blocks; without checkpoints all of it stays.
        assert!(stats.bytes > 100 << 20, "{stats:?}");
        assert!(stats.checkpoints >= 30, "{release:?}: {stats:?}");
        assert!(peak < 32 << 20, "{release:?}: {peak} bytes on disk at the peak");
        assert!(log_files(dir.path()) <= 64, "{release:?}: {} log files", log_files(dir.path()));
        // Each generation's lanes reuse the segments of the ones before instead of
        // zero-filling new ones (measured: ~4 reused and ~1.1 zero-filled per checkpoint;
        // without reuse every segment is zero-filled).
        assert!(stats.segments_recycled >= 2 * stats.checkpoints, "{release:?}: {stats:?}");
        assert!(stats.segments_zeroed <= 2 * stats.checkpoints + 8, "{release:?}: {stats:?}");
        db.abandon_for_tests();
        let db = Db::create(dir.path(), o).unwrap();
        let r = db.recovery_stats().unwrap();
        assert!(r.replayed);
        assert!(r.records_read <= 1500, "{release:?}: replayed {} records, not only the tail", r.records_read);
        let got: BTreeMap<Vec<u8>, Vec<u8>> = db.begin().iter().map(|r| r.unwrap()).collect();
        assert!(got == model, "{release:?}: the recovered state differs from the model");
        db.close().unwrap();
    }
}

/// Threads keep committing while checkpoints run (taken by their own commits and by an
/// explicit `checkpoint` call): after a crash every acknowledged increment is there, under
/// every protocol and both release modes, P-WAL and the shared WAL.
#[test]
fn commits_beside_checkpoints_are_all_kept() {
    for cc in Cc::ALL {
        for (mode, release) in
            [(LogMode::PWal, Release::Nlr), (LogMode::PWal, Release::Elr), (LogMode::SWal, Release::Elr)]
        {
            let dir = tempfile::tempdir().unwrap();
            let mut o = opts(cc, release, 64 << 10);
            o.log.mode = mode;
            let db = Db::create(dir.path(), o.clone()).unwrap();
            const THREADS: u64 = 3;
            let acked: Vec<AtomicU64> = (0..THREADS).map(|_| AtomicU64::new(0)).collect();
            std::thread::scope(|s| {
                for t in 0..THREADS {
                    let (db, acked) = (&db, &acked);
                    s.spawn(move || {
                        for i in 0..1500u64 {
                            // The thread's counter, and a shared key (conflicts).
                            let r = db.run(|txn| {
                                txn.put([b'c', t as u8], (i + 1).to_be_bytes())?;
                                txn.put(b"shared", [t as u8; 40])?;
                                txn.put([b'x', t as u8, (i % 50) as u8], [7u8; 100])
                            });
                            match r {
                                Ok(()) => acked[t as usize].store(i + 1, Ordering::Release),
                                Err(e) => panic!("{e}"),
                            }
                        }
                    });
                }
                s.spawn(|| {
                    for _ in 0..5 {
                        db.checkpoint().unwrap();
                        std::thread::sleep(std::time::Duration::from_millis(5));
                    }
                });
            });
            let cks = db.wal_stats().unwrap().checkpoints;
            assert!(cks >= 5, "{} {release:?}: {cks} checkpoints", cc.name());
            db.abandon_for_tests();
            let db = Db::create(dir.path(), o).unwrap();
            let txn = db.begin();
            for t in 0..THREADS {
                let v = txn.get([b'c', t as u8]).unwrap().expect("counter present");
                let n = u64::from_be_bytes(v.try_into().unwrap());
                assert_eq!(n, acked[t as usize].load(Ordering::Acquire), "{} {mode:?} {release:?}", cc.name());
            }
            txn.commit().unwrap();
            db.close().unwrap();
        }
    }
}

/// A transaction open across a checkpoint commits afterwards, and its write survives.
#[test]
fn a_transaction_open_across_a_checkpoint_commits() {
    let dir = tempfile::tempdir().unwrap();
    let o = opts(Cc::TicToc, Release::Nlr, 0);
    let db = Db::create(dir.path(), o.clone()).unwrap();
    db.run(|t| t.put(b"a", b"1")).unwrap();
    let mut txn = db.begin();
    assert_eq!(txn.get(b"a").unwrap().as_deref(), Some(&b"1"[..]));
    txn.put(b"b", b"2").unwrap();
    db.checkpoint().unwrap();
    txn.commit().unwrap();
    assert_eq!(db.wal_stats().unwrap().checkpoints, 1);
    db.abandon_for_tests();
    let db = Db::create(dir.path(), o).unwrap();
    let txn = db.begin();
    assert_eq!(txn.get(b"b").unwrap().as_deref(), Some(&b"2"[..]));
    txn.commit().unwrap();
    // Without files, a checkpoint is a no-op.
    let mem = Db::open_in_memory(Options::default()).unwrap();
    assert_eq!(mem.checkpoint(), Ok::<(), Error>(()));
}

/// A steady overwrite workload: the page store's files stay below twice the live data
/// and stop growing (cleaning frees and reuses segments), the log since the last
/// checkpoint stays bounded, and a reopen finds exactly the model. Prints the write
/// amplification (`--nocapture`).
#[test]
fn steady_overwrites_keep_the_page_store_bounded() {
    // Large transactions (every page changes between checkpoints: new bases) and single
    // updates (a few keys per page: deltas, consolidation, cleaning).
    for (per_txn, txns) in [(100, 200), (1, 1500)] {
        steady_overwrites(per_txn, txns);
    }
}

/// The logs on disk stay a fraction of the data: a checkpoint that rewrote most pages used
/// to push the next one four times as far (a quarter of the log's writes for its cost),
/// and a steady overwrite of 104 MB kept 544 MB of logs. Here each checkpoint rewrites
/// ~2 MB of pages, which would allow ~8 MiB of log per generation and ~16 MiB on disk;
/// the cap (`checkpoint_bytes`, here 1 MiB, above an eighth of the data) holds them to a
/// few generations of 1 MiB.
/// Puts keys `0..keys` with 100-byte values, 1,000 per transaction.
fn fill_keys(db: &Db, keys: u32) {
    for chunk in (0..keys).collect::<Vec<_>>().chunks(1000) {
        db.run(|t| chunk.iter().try_for_each(|k| t.put(k.to_be_bytes(), [0; 100]))).unwrap();
    }
}

/// Bytes of the log files in `dir`.
fn wal_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("wal-"))
        .map(|e| e.metadata().map_or(0, |m| m.len()))
        .sum()
}

#[test]
fn logs_on_disk_stay_a_fraction_of_the_data() {
    const KEYS: u32 = 20_000;
    let dir = tempfile::tempdir().unwrap();
    let mut o = block_per_commit(Cc::TicToc, Release::Nlr, 1 << 20);
    o.log.segment_size = 256 << 10;
    o.store.page_segment_size = 128 << 10;
    let db = Db::create(dir.path(), o).unwrap();
    fill_keys(&db, KEYS);
    let log_bytes = || wal_bytes(dir.path());
    let mut x: u64 = 0x9E37_79B9;
    let mut most = 0;
    for i in 0..1500u32 {
        let keys: Vec<[u8; 4]> = (0..100)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                ((x % KEYS as u64) as u32).to_be_bytes()
            })
            .collect();
        db.run(|t| keys.iter().try_for_each(|k| t.put(k, [i as u8; 100]))).unwrap();
        if i % 10 == 0 {
            most = most.max(log_bytes());
        }
    }
    let stats = db.wal_stats().unwrap();
    let store = db.store_stats().unwrap();
    println!(
        "logs on disk at most {most} bytes; {} checkpoints, {} log bytes in all, {} page-store bytes written",
        stats.checkpoints, stats.bytes, store.written_bytes
    );
    assert!(stats.checkpoints >= 5, "{stats:?}");
    // Measured 2.9-3.4 MiB with the cap (16-18 checkpoints, ~40 MB of page writes), 11.6
    // MiB without it (3 checkpoints, ~6 MB of page writes: the space costs writes).
    assert!(most <= 6 << 20, "the logs reached {most} bytes on disk beside {} bytes of data", KEYS * 104);
    db.close().unwrap();
}

/// Two threads commit a 4 KiB block each (syncs skipped, so the log grows at memory speed)
/// while every checkpoint waits 400 ms before it starts: the most bytes of log on disk, and
/// how many commits were held back.
fn outpaced_checkpoints(no_throttle: bool) -> (u64, u64) {
    const KEYS: u32 = 20_000;
    let dir = tempfile::tempdir().unwrap();
    let mut o = block_per_commit(Cc::TicToc, Release::Nlr, 1 << 20);
    o.plants.skip_sync = true;
    o.log.segment_size = 256 << 10;
    o.store.page_segment_size = 128 << 10;
    o.plants.checkpoint_delay = std::time::Duration::from_millis(400);
    o.plants.no_throttle = no_throttle;
    let db = Db::create(dir.path(), o).unwrap();
    fill_keys(&db, KEYS);
    let log_bytes = || wal_bytes(dir.path());
    let stop = std::sync::atomic::AtomicBool::new(false);
    let mut most = 0;
    std::thread::scope(|s| {
        for t in 0..2u32 {
            let (db, stop) = (&db, &stop);
            s.spawn(move || {
                let mut i = t;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    db.run(|txn| txn.put((i % KEYS).to_be_bytes(), [i as u8; 100])).unwrap();
                    i += 2;
                }
            });
        }
        let start = std::time::Instant::now();
        let ms = |n| std::time::Duration::from_millis(n);
        // At least 1.5 s; on a loaded machine, longer (up to 20 s) until the bounded run
        // has been held back at least once, or the unbounded one's logs passed 24 MiB
        // (without the wait they grow by hundreds of MB a second).
        let shown = |most: u64| match no_throttle {
            true => most > 24 << 20,
            false => db.wal_stats().unwrap().stalls > 0,
        };
        while start.elapsed() < ms(20_000) && most <= 64 << 20 && !(start.elapsed() >= ms(1500) && shown(most)) {
            most = most.max(log_bytes());
            std::thread::sleep(ms(2));
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    let stalls = db.wal_stats().unwrap().stalls;
    db.close().unwrap();
    (most, stalls)
}

/// Commits that outpace the checkpoints wait once the log since the last one is 1.5
/// times what makes one due, so the logs on disk stay bounded however slow checkpoints
/// are: the generation being checkpointed and the current one, at most 1.5 MiB each here
/// (a 1 MiB limit), with segment preparation and the reuse pool (measured 5.0 MB; without
/// the wait, 810 MB within the 1.5 s, so the run now stops at 64 MiB).
#[test]
fn logs_stay_bounded_when_commits_outpace_checkpoints() {
    let (most, stalls) = outpaced_checkpoints(false);
    println!("logs on disk at most {most} bytes; {stalls} commits held back");
    assert!(stalls > 0, "the log never ran ahead: the test no longer tests the bound");
    assert!(most <= 12 << 20, "the logs reached {most} bytes on disk");
}

/// The planted bug: without the wait, the same run's logs grow with the commits' lead.
#[test]
fn planted_unthrottled_log_is_caught() {
    let (most, _) = outpaced_checkpoints(true);
    println!("without the wait, logs on disk at most {most} bytes");
    assert!(most > 12 << 20, "the logs stayed at {most} bytes without the wait: the bound is not what holds them");
}

/// After one big transaction (about 6.6 MB of log against a 1 MiB limit), small commits
/// go on while its checkpoint runs (held 3 s after its switch): the current generation may
/// grow as large as the one being checkpointed, so none of them waits for it. (Before, each
/// waited up to a second once the new generation passed 1.5 MiB: bench kv's batch row,
/// right after its bulk load, spent 60% of its time there.)
#[test]
fn commits_after_a_big_transaction_do_not_wait_for_its_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = opts(Cc::TicToc, Release::Nlr, 1 << 20);
    o.plants.checkpoint_apply_delay = std::time::Duration::from_secs(3);
    let db = Db::create(dir.path(), o).unwrap();
    let big = 30_000u32;
    db.run(|t| (0..big).try_for_each(|k| t.put(k.to_be_bytes(), [1; 200]))).unwrap();
    let before = db.wal_stats().unwrap();
    // About 3.2 MB of log: past 1.5 times the limit, within the big generation.
    for k in big..big + 3000 {
        db.run(|t| t.put(k.to_be_bytes(), [2; 1000])).unwrap();
        let now = db.wal_stats().unwrap();
        if now.checkpoints > before.checkpoints {
            // The big checkpoint ended before the small commits did: nothing more to test.
            eprintln!("stopped after {} small commits: the checkpoint ended", k - big + 1);
            break;
        }
        assert_eq!(now.stalls, before.stalls, "commit {} waited for the big transaction's checkpoint", k - big);
    }
    let grew = db.wal_stats().unwrap().bytes - before.bytes;
    assert!(grew > 3 << 19, "the small commits logged only {grew} bytes: the test no longer passes the limit");
    db.close().unwrap();
}

/// A checkpoint's time is counted: CPU on its threads (with helpers too) and wall-clock,
/// both growing with each checkpoint that had work, what `bench txn` reports per commit.
#[test]
fn checkpoints_count_their_cpu_time() {
    for helpers in [0, 2] {
        let dir = tempfile::tempdir().unwrap();
        let mut o = opts(Cc::TicToc, Release::Nlr, 0);
        o.store.checkpoint_helpers = helpers;
        let db = Db::create(dir.path(), o).unwrap();
        let zero = db.store_stats().unwrap();
        assert_eq!((zero.checkpoint_cpu_micros, zero.checkpoint_micros), (0, 0));
        fill_keys(&db, 50_000);
        db.checkpoint().unwrap();
        let one = db.store_stats().unwrap();
        assert!(one.checkpoint_cpu_micros > 0 && one.checkpoint_micros > 0, "{one:?}");
        db.run(|t| (0..50_000u32).step_by(7).try_for_each(|k| t.put(k.to_be_bytes(), [9; 100]))).unwrap();
        db.checkpoint().unwrap();
        let two = db.store_stats().unwrap();
        assert!(two.checkpoint_cpu_micros > one.checkpoint_cpu_micros, "{one:?} then {two:?}");
        assert!(two.checkpoint_micros > one.checkpoint_micros, "{one:?} then {two:?}");
        db.close().unwrap();
    }
}

fn steady_overwrites(per_txn: usize, txns: usize) {
    const KEYS: u32 = 20_000;
    let dir = tempfile::tempdir().unwrap();
    let mut o = opts(Cc::TicToc, Release::Nlr, 256 << 10);
    o.store.page_segment_size = 128 << 10;
    let db = Db::create(dir.path(), o.clone()).unwrap();
    let mut model = BTreeMap::new();
    // Every key first, then random overwrites.
    for chunk in (0..KEYS).collect::<Vec<_>>().chunks(1000) {
        db.run(|t| chunk.iter().try_for_each(|k| t.put(k.to_be_bytes(), [0; 100]))).unwrap();
        for k in chunk {
            model.insert(k.to_be_bytes().to_vec(), vec![0; 100]);
        }
    }
    let mut x: u64 = 0x9E37_79B9;
    let mut user_bytes = 0u64;
    let mut peaks = Vec::new();
    for round in 1..=12u32 {
        for _ in 0..txns {
            let mut keys = Vec::new();
            for _ in 0..per_txn {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                keys.push(((x % KEYS as u64) as u32).to_be_bytes());
            }
            db.run(|t| keys.iter().try_for_each(|k| t.put(k, [round as u8; 100]))).unwrap();
            for k in keys {
                model.insert(k.to_vec(), vec![round as u8; 100]);
            }
        }
        user_bytes += (txns * per_txn * 104) as u64;
        // Sampled after a checkpoint of its own, not wherever the background one is.
        db.checkpoint().unwrap();
        peaks.push(db.store_stats().unwrap().file_bytes);
    }
    let s = db.store_stats().unwrap();
    let stats = db.wal_stats().unwrap();
    // The live data: every key, 4 + 100 bytes.
    let live = KEYS as u64 * 104;
    println!(
        "{per_txn} per txn: {} pages, {} segments ({} free), {} live image bytes, {} file bytes ({:.2}x the data); \
         written {} bytes for {} bytes of updates (write amplification {:.2}x, log excluded); \
         {} bases, {} deltas, {} pages relocated from {} segments; {} checkpoints",
        s.pages,
        s.segments,
        s.free_segments,
        s.live_bytes,
        s.file_bytes,
        s.file_bytes as f64 / live as f64,
        s.written_bytes,
        user_bytes,
        s.written_bytes as f64 / user_bytes as f64,
        s.bases_written,
        s.deltas_written,
        s.relocated_pages,
        s.segments_cleaned,
        stats.checkpoints
    );
    assert!(stats.checkpoints >= 3, "{stats:?}");
    // The goal: never above 2x the data (cleaning runs after a checkpoint's own writes and
    // skips segments whose cleaning would rewrite most pages; measured: 1.41x at the end
    // and at most 1.70x with 100 updates per transaction (1.23x before the logs' space
    // cap made checkpoints come every eighth of the data's size in log), 1.60x and at
    // most 1.73x with single updates).
    println!("file bytes after each round: {peaks:?}");
    assert!(s.file_bytes <= 2 * live, "the page store holds {} bytes for {live} bytes of data", s.file_bytes);
    assert!(peaks.iter().all(|&p| p <= 2 * live), "the page store passed 2x the data: {peaks:?}");
    // After a crash, and after a clean close, the state is the model's.
    db.abandon_for_tests();
    let db = Db::create(dir.path(), o.clone()).unwrap();
    let got: BTreeMap<Vec<u8>, Vec<u8>> = db.begin().iter().map(|r| r.unwrap()).collect();
    assert!(got == model, "the state recovered after a crash differs from the model");
    db.close().unwrap();
    let db = Db::create(dir.path(), o).unwrap();
    let again: BTreeMap<Vec<u8>, Vec<u8>> = db.begin().iter().map(|r| r.unwrap()).collect();
    assert!(again == model, "the state after a clean close differs from the model");
}

/// `checkpoint_interval`: a database written slowly (far below `checkpoint_bytes`) still
/// takes checkpoints once the interval passes, so its recovery replays only what came
/// after; an idle one takes none, and a zero interval disables the trigger.
#[test]
fn checkpoints_come_by_time_when_the_log_grows_slowly() {
    let checkpoints = |interval_ms: u64, commits: u32| {
        let dir = tempfile::tempdir().unwrap();
        let mut o = opts(Cc::TicToc, Release::Nlr, 0);
        o.store.checkpoint_interval = std::time::Duration::from_millis(interval_ms);
        let db = Db::create(dir.path(), o.clone()).unwrap();
        for i in 0..commits {
            db.run(|t| t.put(i.to_be_bytes(), b"v")).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        // Several intervals with nothing written: no further checkpoint.
        let after_writes = {
            std::thread::sleep(std::time::Duration::from_millis(3 * interval_ms.max(50)));
            db.wal_stats().unwrap().checkpoints
        };
        std::thread::sleep(std::time::Duration::from_millis(3 * interval_ms.max(50)));
        let idle = db.wal_stats().unwrap().checkpoints - after_writes;
        db.abandon_for_tests();
        let db = Db::create(dir.path(), o).unwrap();
        let replayed = db.recovery_stats().unwrap().records_applied;
        assert_eq!(db.begin().iter().count(), commits as usize);
        (after_writes, idle, replayed)
    };
    let (by_time, idle, replayed) = checkpoints(100, 25);
    assert!(by_time >= 2, "{by_time} checkpoints in 0.5 s of writes with a 100 ms interval");
    assert_eq!(idle, 0, "an idle database took {idle} checkpoints");
    assert_eq!(replayed, 0, "recovery replayed {replayed} records though a checkpoint followed the last write");
    let (never, _, replayed) = checkpoints(0, 10);
    assert_eq!((never, replayed), (0, 10), "a zero interval disables the trigger");
}

/// The checkpoint thread starts on first need: a short-lived handle (open, a commit,
/// close) never starts one; a commit once the database has been open a poll interval
/// starts it (checkpoints by time need it); a commit that makes a checkpoint due starts it
/// at once, and the checkpoint comes.
#[test]
fn the_checkpoint_thread_starts_when_needed() {
    let dir = tempfile::tempdir().unwrap();
    let o = block_per_commit(Cc::TicToc, Release::Nlr, 1 << 30);
    Db::create(dir.path(), o.clone()).unwrap().close().unwrap();
    for i in 0..5u32 {
        let db = Db::open(dir.path(), o.clone()).unwrap();
        db.run(|t| t.put(i.to_be_bytes(), b"v")).unwrap();
        assert!(!db.checkpoint_thread_started_for_tests(), "cycle {i}: a short-lived handle started the thread");
        db.close().unwrap();
    }
    let db = Db::open(dir.path(), o.clone()).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(30));
    assert!(!db.checkpoint_thread_started_for_tests(), "started with no commit");
    db.run(|t| t.put(b"later", b"v")).unwrap();
    assert!(db.checkpoint_thread_started_for_tests(), "a commit after the poll interval did not start the thread");
    db.close().unwrap();

    // Due at the first commit: the thread starts and takes the checkpoint.
    let db = Db::open(dir.path(), block_per_commit(Cc::TicToc, Release::Nlr, 16 << 10)).unwrap();
    db.run(|t| (0..200u32).try_for_each(|i| t.put(i.to_be_bytes(), [1u8; 200]))).unwrap();
    assert!(db.checkpoint_thread_started_for_tests());
    let start = std::time::Instant::now();
    while db.wal_stats().unwrap().checkpoints == 0 && start.elapsed() < std::time::Duration::from_secs(10) {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert!(db.wal_stats().unwrap().checkpoints >= 1, "{:?}", db.wal_stats());
    db.close().unwrap();
    let db = Db::open(dir.path(), o).unwrap();
    // Keys 0..5 of the cycles are among the 200.
    assert_eq!(db.begin().iter().count(), 200 + 1);
}

/// The log segments kept for reuse are deleted once checkpoints stop coming: a database
/// that goes idle after a burst keeps only its current generation's logs.
#[test]
fn an_idle_database_keeps_no_recycled_segments() {
    let generations = |dir: &Path| -> std::collections::BTreeSet<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| {
                let n = e.unwrap().file_name().to_string_lossy().into_owned();
                n.strip_prefix("wal-").map(|r| r[..10].to_string())
            })
            .collect()
    };
    let dir = tempfile::tempdir().unwrap();
    let mut o = block_per_commit(Cc::TicToc, Release::Nlr, 64 << 10);
    o.store.checkpoint_interval = std::time::Duration::from_millis(200);
    let db = Db::create(dir.path(), o).unwrap();
    for i in 0..2000u32 {
        db.run(|t| t.put((i % 100).to_be_bytes(), [7u8; 100])).unwrap();
    }
    assert!(db.wal_stats().unwrap().checkpoints >= 10, "{:?}", db.wal_stats());
    // Right after the burst, older generations' segments are kept for reuse.
    let busy = generations(dir.path());
    assert!(busy.len() >= 2, "generations on disk after the burst: {busy:?}");
    // Idle: one checkpoint by time for the last writes, then the kept segments go.
    let start = std::time::Instant::now();
    while generations(dir.path()).len() > 1 && start.elapsed() < std::time::Duration::from_secs(10) {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(generations(dir.path()).len(), 1, "{:?}", generations(dir.path()));
    db.close().unwrap();
}

/// Buffered commits share a lane's last block (each write rewrites it until full): 2,000
/// single-record commits grow the log by ~45 blocks, not 2,000, so no checkpoint comes
/// due at 1 MiB of log (a block each would have taken several), and a crash keeps them all
/// (written to the OS at each commit).
#[test]
fn buffered_commits_share_blocks() {
    for release in [Release::Nlr, Release::Elr] {
        let dir = tempfile::tempdir().unwrap();
        let o = opts(Cc::TicToc, release, 1 << 20);
        let db = Db::create(dir.path(), o.clone()).unwrap();
        for i in 0..2000u32 {
            db.run(|t| t.put(i.to_be_bytes(), [7u8; 64])).unwrap();
        }
        let stats = db.wal_stats().unwrap();
        assert!(stats.blocks_rewritten >= 1900, "{release:?}: {stats:?}");
        assert_eq!(stats.checkpoints, 0, "{release:?}: {stats:?}");
        db.abandon_for_tests();
        let db = Db::create(dir.path(), o).unwrap();
        assert_eq!(db.begin().iter().count(), 2000, "{release:?}");
        db.close().unwrap();
    }
}

/// Synced commits on real files write with direct I/O, so a checkpoint takes the ended
/// lanes from the copies kept as they were written (counted), not from the device; with
/// direct I/O off it reads the files. Either way every commit is there after a crash.
#[test]
fn checkpoints_take_direct_lanes_from_memory() {
    for direct_io in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let mut o = block_per_commit(Cc::TicToc, Release::Nlr, 256 << 10);
        o.log.direct_io = direct_io;
        let db = Db::create(dir.path(), o.clone()).unwrap();
        let mut model = BTreeMap::new();
        for i in 0..3000u32 {
            let (k, v) = ((i % 500).to_be_bytes(), i.to_be_bytes());
            db.run(|t| t.put(k, v)).unwrap();
            model.insert(k.to_vec(), v.to_vec());
        }
        db.checkpoint().unwrap();
        let stats = db.wal_stats().unwrap();
        assert!(stats.checkpoints >= 2, "{stats:?}");
        if direct_io {
            assert!(stats.lanes_echoed >= stats.checkpoints - 1, "direct: {stats:?}");
        } else {
            assert_eq!(stats.lanes_echoed, 0, "buffered writes: {stats:?}");
        }
        db.abandon_for_tests();
        let db = Db::create(dir.path(), o).unwrap();
        let got: BTreeMap<Vec<u8>, Vec<u8>> = db.begin().iter().map(|r| r.unwrap()).collect();
        assert_eq!(got, model, "direct I/O {direct_io}");
        db.close().unwrap();
    }
}

/// Four threads overwrite the same keys, each on its lane; checkpoints with `helpers`
/// threads (the lanes read back in parallel) and the close write the pages. Returns
/// whether the reopened database holds what it held before the close.
fn lanes_read_back(helpers: usize, plants: tsumiki::plants::Plants) -> bool {
    let dir = tempfile::tempdir().unwrap();
    let store = StoreOptions {
        checkpoint_bytes: 0,
        checkpoint_interval: std::time::Duration::ZERO,
        checkpoint_helpers: helpers,
        close_keeps_short_log: false,
        ..StoreOptions::default()
    };
    let log = LogOptions { durability: Durability::Buffered, ..LogOptions::default() };
    let opts = Options { cc: Cc::TicToc, log, store, plants, ..Options::default() };
    let db = Db::create(dir.path(), opts.clone()).unwrap();
    for round in 0..3u64 {
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let db = &db;
                s.spawn(move || {
                    for i in 0..300u64 {
                        db.run(|txn| {
                            for j in 0..5 {
                                let k = (t * 7 + i * 13 + j * 31 + round) % 200;
                                txn.put(format!("k{k:03}"), format!("{round}-{t}-{i}-{j}"))?;
                            }
                            Ok(())
                        })
                        .unwrap();
                    }
                });
            }
        });
        db.checkpoint().unwrap();
    }
    db.run(|txn| (0..50).try_for_each(|k| txn.put(format!("k{k:03}"), "last"))).unwrap();
    let before: BTreeMap<Vec<u8>, Vec<u8>> = db.begin().iter().map(|r| r.unwrap()).collect();
    assert!(db.wal_stats().unwrap().lanes >= 2, "the threads logged on several lanes");
    db.close().unwrap();
    let db = Db::open(dir.path(), Options { plants: tsumiki::plants::Plants::NONE, ..opts }).unwrap();
    let after: BTreeMap<Vec<u8>, Vec<u8>> = db.begin().iter().map(|r| r.unwrap()).collect();
    before == after
}

#[test]
fn lanes_read_back_in_parallel_keep_each_keys_last_write() {
    use tsumiki::plants::Plants;
    assert!(lanes_read_back(3, Plants::NONE), "with helpers");
    assert!(lanes_read_back(0, Plants::NONE), "without helpers");
    let planted = Plants { first_logged_value: true, ..Plants::NONE };
    assert!(!lanes_read_back(3, planted), "keeping a key's first logged write went unnoticed");
}

/// Deleting most records shrinks the page store by itself, without `tsumiki compact`: the
/// checkpoints after the deletes rewrite the pages whose delete markers remove most of their base (the
/// store's mean record size each, from the database's count). Before, every base stayed
/// whole beside its markers: 4x the records left after deleting three in four.
#[test]
fn checkpoints_reclaim_pages_emptied_by_deletes() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::create(dir.path(), Options::default()).unwrap();
    let n = 40_000u32;
    let key = |i: u32| format!("key{:08}", i.wrapping_mul(2_654_435_761)).into_bytes();
    let value = [b'v'; 150];
    for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
        db.run(|t| chunk.iter().try_for_each(|&i| t.put(key(i), value))).unwrap();
    }
    db.checkpoint().unwrap();
    let full = db.store_stats().unwrap().live_bytes;
    for chunk in (0..n).filter(|i| i % 4 != 0).collect::<Vec<_>>().chunks(1000) {
        db.run(|t| chunk.iter().try_for_each(|&i| t.delete(key(i)).map(drop))).unwrap();
    }
    // The checkpoint that applies the deletes finds the pages due, the next rewrites them
    // (a small store: all at once).
    db.checkpoint().unwrap();
    db.checkpoint().unwrap();
    let left = db.store_stats().unwrap().live_bytes;
    assert!(left * 10 < full * 4, "live images {full} -> {left} bytes after deleting 3/4 of the records");
    db.close().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    assert_eq!(db.len().unwrap(), u64::from(n / 4));
    let reopened = db.store_stats().unwrap().live_bytes;
    assert!(reopened * 10 < full * 4, "live images {full} -> {reopened} bytes after a reopen");
}

/// The write that ends a lane at a checkpoint's switch uses the segment prepared ahead of
/// it and prepares none after its own (nothing would use it: the lane's end block tells
/// recovery it is whole). Segments of one block of records (8 KiB), so each synced commit
/// starts a new one: every segment prepared then holds a block, but the one prepared ahead
/// for the open lane.
#[test]
fn a_lanes_end_prepares_no_segment_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let log = LogOptions { durability: Durability::Sync, segment_size: 8192, ..LogOptions::default() };
    let o = Options { log, ..Options::default() };
    let db = Db::create(dir.path(), o).unwrap();
    for i in 0..5u32 {
        db.run(|t| t.put(i.to_be_bytes(), [7u8; 100])).unwrap();
    }
    db.checkpoint().unwrap();
    // The blocks written: the old lane's (its commits' and its end block), and the new
    // generation's lane's first. Before, the switch dropped the old lane's prepared
    // segment and made it again for the end block, and prepared one more after it.
    let s = db.wal_stats().unwrap();
    let want = s.bytes / 4096 + 1;
    let prepared = |db: &Db| {
        let s = db.wal_stats().unwrap();
        s.segments_zeroed + s.segments_recycled
    };
    // The new lane's segment ahead is prepared in the background.
    let start = std::time::Instant::now();
    while prepared(&db) < want && start.elapsed() < std::time::Duration::from_secs(10) {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert_eq!(prepared(&db), want, "{s:?}");
    db.run(|t| t.put(9u32.to_be_bytes(), [7u8; 100])).unwrap();
    db.close().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    assert_eq!(db.begin_read().len().unwrap(), 6);
    db.close().unwrap();
}
