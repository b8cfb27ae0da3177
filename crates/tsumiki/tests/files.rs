//! Real files: modes, the lock file, reopen after a clean close.

use std::os::unix::fs::PermissionsExt;

use std::sync::Arc;

use tsumiki::storage::SimStorage;
use tsumiki::{Db, Error, Options};

#[test]
fn files_are_private_locked_and_reopenable() {
    let dir = std::env::temp_dir().join(format!("tsumiki-files-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let db = Db::create(&dir, Options::default()).unwrap();
    for i in 0..100u32 {
        db.run(|t| t.put(i.to_be_bytes(), b"v")).unwrap();
    }
    assert!(matches!(Db::create(&dir, Options::default()), Err(Error::Locked(_))));
    for e in std::fs::read_dir(&dir).unwrap() {
        let e = e.unwrap();
        let mode = e.metadata().unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{:?} has mode {mode:o}", e.file_name());
    }
    assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o077, 0, "directory private");
    let stats = db.wal_stats().unwrap();
    assert!(stats.syncs >= 100, "a sync per commit by default: {stats:?}");
    db.close().unwrap();
    let db = Db::create(&dir, Options::default()).unwrap();
    assert!(!db.recovery_stats().unwrap().replayed);
    assert_eq!(db.begin().iter().count(), 100);
    drop(db);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A session that commits nothing closes without writing to the page store, and every
/// later open still finds the data; a session that commits after one writes its pages.
#[test]
fn reopen_chains_keep_data_with_and_without_commits() {
    let dir = tempfile::tempdir().unwrap();
    // Every close after a commit writes the pages (no short log kept: see `resume.rs`).
    let store = tsumiki::StoreOptions { close_keeps_short_log: false, ..Default::default() };
    let opts = Options { store, ..Options::default() };
    // The page store's files and their contents.
    let snaps = || {
        let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.starts_with("pages-"))
            .map(|n| (n.clone(), std::fs::read(dir.path().join(&n)).unwrap()))
            .collect();
        v.sort();
        v
    };
    let db = Db::create(dir.path(), opts.clone()).unwrap();
    db.close().unwrap(); // an empty database, nothing committed
    let db = Db::create(dir.path(), opts.clone()).unwrap();
    assert_eq!(db.begin().iter().count(), 0);
    for i in 0..1000u32 {
        db.run(|t| t.put(i.to_be_bytes(), i.to_le_bytes())).unwrap();
    }
    db.close().unwrap();
    let after_writes = snaps();
    assert_eq!(after_writes.len(), 1, "one page segment");
    for round in 0..3 {
        let db = Db::create(dir.path(), opts.clone()).unwrap();
        let t = db.begin();
        assert_eq!(t.iter().count(), 1000, "round {round}");
        assert_eq!(t.get(999u32.to_be_bytes()).unwrap(), Some(999u32.to_le_bytes().to_vec()));
        t.commit().unwrap();
        db.close().unwrap();
        assert!(snaps() == after_writes, "a read-only session wrote to the page store");
    }
    let db = Db::create(dir.path(), opts.clone()).unwrap();
    db.run(|t| t.delete(0u32.to_be_bytes())).unwrap();
    db.close().unwrap();
    assert!(snaps() != after_writes, "a session with a commit writes its pages");
    let db = Db::create(dir.path(), opts.clone()).unwrap();
    assert_eq!(db.begin().iter().count(), 999);
    // A crash after a read-only session: recovery still finds everything.
    db.abandon_for_tests();
    let db = Db::create(dir.path(), opts.clone()).unwrap();
    assert_eq!(db.begin().iter().count(), 999);
}

/// Measures the replay rate of recovery (`cargo test --release --test files -- --ignored
/// --nocapture`): one million one-put commits, abandoned, then reopened.
#[test]
#[ignore]
fn replay_rate() {
    use tsumiki::{Durability, LogOptions, Release};
    let n: u64 = std::env::var("TSUMIKI_REPLAY_TXNS").ok().and_then(|v| v.parse().ok()).unwrap_or(1_000_000);
    let dir = std::env::temp_dir().join(format!("tsumiki-replay-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let log = LogOptions {
        durability: Durability::Buffered,
        release: Release::Elr,
        group: 256,
        segment_size: 64 << 20,
        ..LogOptions::default()
    };
    let opts = Options { log, ..Options::default() };
    let db = Db::create(&dir, opts.clone()).unwrap();
    let mut tickets = Vec::new();
    for i in 0..n {
        let mut t = db.begin();
        t.put((i % 100_000).to_be_bytes(), [1u8; 100]).unwrap();
        tickets.push(t.commit_deferred().unwrap());
        if tickets.len() == 256 {
            tickets.drain(..).for_each(|t| t.wait().unwrap());
        }
    }
    tickets.drain(..).for_each(|t| t.wait().unwrap());
    db.abandon_for_tests();
    let t0 = std::time::Instant::now();
    let db = Db::create(&dir, opts).unwrap();
    let open = t0.elapsed();
    let s = db.recovery_stats().unwrap();
    println!(
        "records read {} applied {} keys {}: replay {:?} = {:.2} M records/s; whole open (replay, index load, new snapshot) {:?}",
        s.records_read,
        s.records_applied,
        s.keys,
        s.replay_time,
        s.records_read as f64 / s.replay_time.as_secs_f64() / 1e6,
        open
    );
    assert_eq!(s.records_applied, n);
    drop(db);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `tsumiki::inspect` (what `tsumiki stats` prints) reads the trailers: the commits a
/// crash left in the logs, then the page segments' live bytes after a clean close; it
/// refuses a database open elsewhere and a directory that holds none.
#[test]
fn inspect_reports_what_the_trailers_say() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::create(dir.path(), Options::default()).unwrap();
    for i in 0..50u32 {
        db.run(|t| t.put(i.to_be_bytes(), b"value")).unwrap();
    }
    assert!(matches!(tsumiki::inspect(dir.path()), Err(tsumiki::Error::Locked(_))));
    db.abandon_for_tests();
    let r = tsumiki::inspect(dir.path()).unwrap();
    assert!(!r.last_exit);
    let logs: Vec<_> = r.files.iter().filter(|f| f.log.is_some()).collect();
    assert_eq!(logs.iter().map(|f| f.records).sum::<u64>(), 50, "{r:?}");
    assert!(logs.iter().all(|f| f.bad_blocks == 0 && (f.valid_blocks == 0 || f.flushes > 0)), "{r:?}");
    let db = Db::create(dir.path(), Options::default()).unwrap();
    db.close().unwrap();
    let db = Db::create(dir.path(), Options::default()).unwrap();
    let live = db.store_stats().unwrap().live_bytes;
    db.close().unwrap();
    let r = tsumiki::inspect(dir.path()).unwrap();
    assert!(r.last_exit);
    assert!(r.files.iter().all(|f| f.log.is_none()), "a clean close leaves no log: {r:?}");
    assert_eq!(r.files.iter().filter_map(|f| f.live).map(|l| l.0).sum::<u64>(), live);
    let empty = tempfile::tempdir().unwrap();
    assert!(tsumiki::inspect(empty.path()).is_err());
    assert!(tsumiki::inspect(&empty.path().join("nothing")).is_err());
}

/// A short-lived handle that only reads writes nothing: after a clean close, an open, a
/// read and a close leave every file as it was, byte for byte, and add none; the next
/// commit still marks the exit unclean first (a crash after it replays the log).
#[test]
fn an_open_that_commits_nothing_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::create(dir.path(), Options::default()).unwrap();
    for i in 0..100u32 {
        db.run(|t| t.put(i.to_be_bytes(), b"v")).unwrap();
    }
    db.close().unwrap();
    let snapshot = || {
        let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (e.file_name().into_string().unwrap(), std::fs::read(e.path()).unwrap())
            })
            .collect();
        files.sort();
        files
    };
    let before = snapshot();
    for _ in 0..3 {
        let db = Db::open(dir.path(), Options::default()).unwrap();
        assert_eq!(db.begin().get(5u32.to_be_bytes()).unwrap().as_deref(), Some(&b"v"[..]));
        db.close().unwrap();
    }
    assert!(before == snapshot(), "an open that commits nothing changed the directory");
    drop(dir);
    // A commit after such an open, then a power loss: the deferred master record went
    // first, so the commit is replayed.
    let disk = SimStorage::new(11);
    let db = Db::open_with_storage(Arc::new(disk.clone()), Options::default()).unwrap();
    db.run(|t| t.put(b"before", b"v")).unwrap();
    db.close().unwrap();
    let db = Db::open_with_storage(Arc::new(disk.clone()), Options::default()).unwrap();
    db.run(|t| t.put(b"after", b"x")).unwrap();
    let image = disk.crash();
    drop(db);
    let db = Db::open_with_storage(Arc::new(SimStorage::from_image(&image, 12)), Options::default()).unwrap();
    assert!(db.recovery_stats().unwrap().replayed);
    assert_eq!(db.begin().get(b"after").unwrap().as_deref(), Some(&b"x"[..]));
    assert_eq!(db.begin().get(b"before").unwrap().as_deref(), Some(&b"v"[..]));
}
