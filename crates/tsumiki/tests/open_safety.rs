//! Opening never invents a state and never destroys what it cannot prove obsolete, never
//! follows a planted link, never creates anything for a refused configuration; and a tiny
//! database stays small on disk (issue 13, items 8 and 10).

use std::path::{Path, PathBuf};

use tsumiki::{Cc, Db, Error, LogOptions, Options, Release, StoreOptions};

fn key(i: u32) -> [u8; 4] {
    i.to_be_bytes()
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    v.sort();
    v
}

/// The page store's (first) segment file.
fn pages_of(dir: &Path) -> PathBuf {
    let n = names(dir).into_iter().find(|n| n.starts_with("pages-") && n.ends_with(".seg")).expect("a page segment");
    dir.join(n)
}

/// A closed database holding keys 0..n.
/// Its close writes the pages: a clean exit, no log kept.
fn closed_db(dir: &Path, n: u32) {
    let store = tsumiki::StoreOptions { close_keeps_short_log: false, ..Default::default() };
    let db = Db::create(dir, Options { store, ..Options::default() }).unwrap();
    for i in 0..n {
        db.run(|t| t.put(key(i), b"value")).unwrap();
    }
    db.close().unwrap();
}

fn count(dir: &Path) -> usize {
    let db = Db::create(dir, Options::default()).unwrap();
    let n = db.begin().iter().count();
    db.close().unwrap();
    n
}

fn is_corrupt<T>(r: Result<T, Error>) -> bool {
    matches!(r, Err(Error::Corrupt(_)))
}

#[test]
fn an_empty_damaged_or_foreign_page_segment_is_an_error_not_an_empty_database() {
    for damage in ["empty", "half", "other"] {
        let dir = tempfile::tempdir().unwrap();
        closed_db(dir.path(), 1000);
        let seg = pages_of(dir.path());
        let bytes = std::fs::read(&seg).unwrap();
        assert!(bytes.len() >= 2 * 4096, "the test needs a segment of several blocks");
        match damage {
            "empty" => std::fs::write(&seg, b"").unwrap(),
            "half" => std::fs::write(&seg, &bytes[..bytes.len() / 2 / 4096 * 4096]).unwrap(),
            _ => {
                // A valid segment of another database (same size, other content).
                let other = tempfile::tempdir().unwrap();
                let db = Db::create(other.path(), Options::default()).unwrap();
                for i in 0..1000 {
                    db.run(|t| t.put(key(i + 5000), b"value")).unwrap();
                }
                db.close().unwrap();
                std::fs::copy(pages_of(other.path()), &seg).unwrap();
            }
        }
        let r = Db::create(dir.path(), Options::default());
        assert!(is_corrupt(r), "{damage}: opened a state that never existed");
    }
}

#[test]
fn after_a_crash_a_lost_page_segment_is_an_error_not_the_logs_keys_alone() {
    let dir = tempfile::tempdir().unwrap();
    closed_db(dir.path(), 50);
    let db = Db::create(dir.path(), Options::default()).unwrap();
    for i in 50..60 {
        db.run(|t| t.put(key(i), b"later")).unwrap();
    }
    db.abandon_for_tests();
    std::fs::write(pages_of(dir.path()), b"").unwrap();
    assert!(is_corrupt(Db::create(dir.path(), Options::default())));
    std::fs::remove_file(pages_of(dir.path())).unwrap();
    assert!(is_corrupt(Db::create(dir.path(), Options::default())));
}

#[test]
fn an_older_master_put_back_is_refused_and_deletes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    closed_db(dir.path(), 20);
    let old_master = std::fs::read(dir.path().join("MASTER")).unwrap();
    let db = Db::create(dir.path(), Options::default()).unwrap();
    for i in 20..40 {
        db.run(|t| t.put(key(i), b"more")).unwrap();
    }
    db.close().unwrap();
    let real_master = std::fs::read(dir.path().join("MASTER")).unwrap();
    let before = names(dir.path());
    std::fs::write(dir.path().join("MASTER"), &old_master).unwrap();
    assert!(is_corrupt(Db::create(dir.path(), Options::default())));
    assert_eq!(names(dir.path()), before, "a refused open deleted files");
    std::fs::write(dir.path().join("MASTER"), &real_master).unwrap();
    assert_eq!(count(dir.path()), 40);
}

#[test]
fn an_older_master_put_back_after_a_crash_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    closed_db(dir.path(), 20);
    let old_master = std::fs::read(dir.path().join("MASTER")).unwrap();
    // A crash, then recovery: a new generation with a new table; then more logged work.
    let db = Db::create(dir.path(), Options::default()).unwrap();
    db.run(|t| t.put(key(100), b"x")).unwrap();
    db.abandon_for_tests();
    let db = Db::create(dir.path(), Options::default()).unwrap();
    db.run(|t| t.put(key(101), b"y")).unwrap();
    db.abandon_for_tests();
    let before = names(dir.path());
    std::fs::write(dir.path().join("MASTER"), &old_master).unwrap();
    assert!(is_corrupt(Db::create(dir.path(), Options::default())));
    assert_eq!(names(dir.path()), before, "a refused open deleted files");
}

/// A master record crafted with the last generation and no table: refused by its own
/// check (only generation 1 lacks a table); with one, refused as older than the store's
/// writes (or its logs). The logs stay.
#[test]
fn a_crafted_master_is_refused_and_the_logs_stay() {
    let dir = tempfile::tempdir().unwrap();
    closed_db(dir.path(), 10);
    let db = Db::create(dir.path(), Options::default()).unwrap();
    db.run(|t| t.put(key(500), b"logged")).unwrap();
    db.abandon_for_tests();
    let before = names(dir.path());
    let real = std::fs::read(dir.path().join("MASTER")).unwrap();
    let storage = tsumiki::storage::DirStorage::new(dir.path()).unwrap();
    let newest = tsumiki::store::master::read_master(&storage).unwrap().unwrap();
    drop(storage);
    for has_table in [false, true] {
        let mut crafted = newest;
        crafted.generation = u64::MAX;
        if !has_table {
            crafted.table = None;
        }
        let m = tsumiki::store::master::master_file(&crafted);
        std::fs::write(dir.path().join("MASTER"), &m).unwrap();
        assert!(is_corrupt(Db::create(dir.path(), Options::default())), "has_table {has_table}");
        assert_eq!(names(dir.path()), before, "a refused open deleted files");
    }
    std::fs::write(dir.path().join("MASTER"), &real).unwrap();
    assert_eq!(count(dir.path()), 11);
}

/// A master record crafted at a generation that cannot advance (`u64::MAX`), over a
/// cleanly closed database: refused at open, as it would be after a crash in that
/// generation (it used to open after the clean close, then never again after a crash).
#[test]
fn a_master_at_the_last_generation_is_refused_even_after_a_clean_close() {
    let dir = tempfile::tempdir().unwrap();
    closed_db(dir.path(), 10);
    let real = std::fs::read(dir.path().join("MASTER")).unwrap();
    let storage = tsumiki::wal::storage::DirStorage::new(dir.path()).unwrap();
    let newest = tsumiki::store::master::read_master(&storage).unwrap().unwrap();
    drop(storage);
    assert!(newest.last_exit);
    let before = names(dir.path());
    // (1 << 62: `master::MAX_GENERATION`.)
    for generation in [u64::MAX, u64::MAX - 1, (1u64 << 62) + 1] {
        let crafted = tsumiki::store::master::Master { generation, ..newest };
        std::fs::write(dir.path().join("MASTER"), tsumiki::store::master::master_file(&crafted)).unwrap();
        match Db::create(dir.path(), Options::default()) {
            Err(Error::Corrupt(m)) => assert!(m.contains("generation"), "{m}"),
            Err(e) => panic!("generation {generation}: {e}"),
            Ok(db) => {
                // What the crash case then met: a commit, a crash, and no open ever again.
                db.run(|t| t.put(key(77), b"x")).unwrap();
                db.abandon_for_tests();
                let again = Db::create(dir.path(), Options::default()).err();
                panic!("generation {generation} opened after a clean close; after a crash: {again:?}");
            }
        }
        assert_eq!(names(dir.path()), before, "a refused open deleted files");
    }
    std::fs::write(dir.path().join("MASTER"), &real).unwrap();
    assert_eq!(count(dir.path()), 10);
}

#[test]
fn planted_symlinks_are_never_followed() {
    let outside = tempfile::tempdir().unwrap();
    let victim = outside.path().join("victim");
    std::fs::write(&victim, b"precious").unwrap();
    // A link in place of the page segment: an error, and the target untouched.
    let dir = tempfile::tempdir().unwrap();
    closed_db(dir.path(), 10);
    let seg = pages_of(dir.path());
    std::fs::remove_file(&seg).unwrap();
    std::os::unix::fs::symlink(&victim, &seg).unwrap();
    assert!(Db::create(dir.path(), Options::default()).is_err());
    // Links at every name the database will create next (its temporary files, the next
    // page segments and the next generation's log segments): it works, and writes none
    // of them.
    let dir = tempfile::tempdir().unwrap();
    closed_db(dir.path(), 10);
    for n in ["MASTER.tmp", "pages-00000001.seg", "pages-00000002.seg"] {
        std::os::unix::fs::symlink(&victim, dir.path().join(n)).unwrap();
    }
    for lane in 0..2 {
        for seg in 0..3 {
            let n = format!("wal-0000000002-{lane:05}-{seg:08}.log");
            std::os::unix::fs::symlink(&victim, dir.path().join(n)).unwrap();
        }
    }
    let db = Db::create(dir.path(), Options::default()).unwrap();
    for i in 10..5000 {
        db.run(|t| t.put(key(i), [7u8; 100])).unwrap();
    }
    db.close().unwrap();
    assert_eq!(count(dir.path()), 5000);
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    assert!(std::fs::metadata(&victim).unwrap().is_file());
}

/// A file and a link put under an unused lane's log names while the database is open:
/// they hold nothing the store wrote, so the next checkpoint leaves them out instead of
/// failing on them (which poisoned the database, and it did not reopen until they were
/// removed); the database reopens with every commit after a crash, the link's target
/// untouched.
#[test]
fn files_planted_under_an_unused_lanes_names_while_open_are_left_out() {
    use tsumiki::wal::format::{parse_segment_name, segment_name};
    let outside = tempfile::tempdir().unwrap();
    let victim = outside.path().join("victim");
    std::fs::write(&victim, b"precious").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let db = Db::create(dir.path(), Options::default()).unwrap();
    for i in 0..100 {
        db.run(|t| t.put(key(i), b"before")).unwrap();
    }
    let g = names(dir.path()).iter().filter_map(|n| parse_segment_name(n)).map(|(g, _, _)| g).max().unwrap();
    std::fs::write(dir.path().join(segment_name(g, 7, 0)), vec![0x5a; 64 << 10]).unwrap();
    std::os::unix::fs::symlink(&victim, dir.path().join(segment_name(g, 8, 0))).unwrap();
    db.checkpoint().unwrap();
    for i in 100..200 {
        db.run(|t| t.put(key(i), b"after")).unwrap();
    }
    db.abandon_for_tests();
    assert_eq!(count(dir.path()), 200);
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    // Planted after the crash, in the generation recovery reads: left out too.
    let db = Db::create(dir.path(), Options::default()).unwrap();
    db.run(|t| t.put(key(200), b"x")).unwrap();
    let g = names(dir.path()).iter().filter_map(|n| parse_segment_name(n)).map(|(g, _, _)| g).max().unwrap();
    std::os::unix::fs::symlink(&victim, dir.path().join(segment_name(g, 9, 0))).unwrap();
    std::fs::write(dir.path().join(segment_name(g, 10, 0)), b"not a log").unwrap();
    db.abandon_for_tests();
    assert_eq!(count(dir.path()), 201);
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
}

#[test]
fn the_lock_is_not_a_file_that_can_be_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::create(dir.path(), Options::default()).unwrap();
    db.run(|t| t.put(b"k", b"v")).unwrap();
    for n in names(dir.path()) {
        assert_ne!(n, "LOCK", "the lock is on the directory, not a file");
    }
    let _ = std::fs::remove_file(dir.path().join("LOCK"));
    assert!(matches!(Db::create(dir.path(), Options::default()), Err(Error::Locked(_))));
    db.close().unwrap();
    assert_eq!(count(dir.path()), 1);
}

#[test]
fn refused_configurations_create_nothing() {
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("db");
    let bad = [
        Options { log: LogOptions { segment_size: 1000, ..LogOptions::default() }, ..Options::default() },
        Options { log: LogOptions { group: 0, ..LogOptions::default() }, ..Options::default() },
        Options { store: StoreOptions { checkpoint_helpers: 65, ..StoreOptions::default() }, ..Options::default() },
        Options { cc: Cc::Silo, log: LogOptions { group: 8, ..LogOptions::default() }, ..Options::default() },
    ];
    for o in bad {
        assert!(matches!(Db::create(&dir, o), Err(Error::Config(_))));
        assert!(!dir.exists(), "a refused configuration created the directory");
    }
    // The same refusal through the resolved commit mode the CLI uses.
    let o = Options { cc: Cc::Silo, log: LogOptions { group: 8, ..LogOptions::default() }, ..Options::default() };
    assert!(o.validate().is_err());
    let o = Options { cc: Cc::TwoPl(tsumiki::LockWait::WaitDie), log: o.log.clone(), ..Options::default() };
    assert!(o.validate().unwrap().policy.holds_locks, "2PL runs Algorithm 3");
    // An empty path is an error, not a database in the working directory.
    let cwd_lock = Path::new("LOCK").exists();
    assert!(matches!(Db::create("", Options::default()), Err(Error::Config(_))));
    assert_eq!(Path::new("LOCK").exists(), cwd_lock);
}

/// Disk usage in blocks actually allocated.
fn disk_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    // A file may go between the listing and its metadata (a checkpoint deletes old logs).
    std::fs::read_dir(dir).unwrap().filter_map(|e| e.ok()?.metadata().ok()).map(|m| m.blocks() * 512).sum()
}

#[test]
fn a_one_key_database_is_small_with_one_or_eight_workers() {
    for (threads, release) in [(1, Release::Nlr), (8, Release::Nlr), (8, Release::Elr)] {
        let dir = tempfile::tempdir().unwrap();
        let opts = Options { log: LogOptions { release, ..LogOptions::default() }, ..Options::default() };
        let db = Db::create(dir.path(), opts.clone()).unwrap();
        // Transactions open at once hold distinct worker slots, so each commits on a lane of
        // its own (P-WAL).
        let barrier = std::sync::Barrier::new(threads);
        std::thread::scope(|s| {
            for t in 0..threads {
                let (db, barrier) = (&db, &barrier);
                s.spawn(move || {
                    for _ in 0..3 {
                        let mut txn = db.begin();
                        txn.put(b"the key", [t as u8; 8]).unwrap();
                        barrier.wait();
                        match txn.commit() {
                            Ok(()) | Err(Error::Conflict(_)) => {}
                            Err(e) => panic!("{e}"),
                        }
                    }
                });
            }
        });
        // Give background segment preparation time to finish before measuring.
        std::thread::sleep(std::time::Duration::from_millis(200));
        let open = disk_bytes(dir.path());
        let lanes = db.wal_stats().unwrap().lanes;
        assert_eq!(lanes, threads as u64, "one lane per concurrent worker");
        db.close().unwrap();
        let closed = disk_bytes(dir.path());
        println!("{threads} workers ({release:?}): {open} bytes open, {closed} closed");
        assert!(open <= 4 << 20, "{threads} workers: {open} bytes while open");
        assert!(closed <= 4 << 20, "{threads} workers: {closed} bytes after close");
        assert_eq!(count(dir.path()), 1);
    }
}

/// The newest superblock lost (zeroed) after a reopen that wrote: the survivor says the
/// last exit was clean, yet its generation's logs hold commits. Opening must refuse
/// (deleting those logs, as a clean exit allows, would lose the commits) and delete nothing.
#[test]
fn a_clean_master_with_commits_logged_after_it_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    closed_db(dir.path(), 10);
    let db = Db::create(dir.path(), Options::default()).unwrap();
    db.run(|t| t.put(key(500), b"logged after the clean exit")).unwrap();
    db.abandon_for_tests();
    let path = dir.path().join("MASTER");
    let real = std::fs::read(&path).unwrap();
    let storage = tsumiki::storage::DirStorage::new(dir.path()).unwrap();
    let newest = tsumiki::store::master::read_master(&storage).unwrap().unwrap();
    assert!(!newest.last_exit);
    // Zero whichever superblock holds the newest record.
    let mut lost = real.clone();
    for slot in lost.chunks_mut(4096) {
        let mut one = vec![0u8; 8192];
        one[..4096].copy_from_slice(slot);
        std::fs::write(&path, &one).unwrap();
        if tsumiki::store::master::read_master(&storage).ok().flatten() == Some(newest) {
            slot.fill(0);
            break;
        }
    }
    std::fs::write(&path, &lost).unwrap();
    assert!(tsumiki::store::master::read_master(&storage).unwrap().unwrap().last_exit, "the survivor is the clean one");
    let before = names(dir.path());
    assert!(is_corrupt(Db::create(dir.path(), Options::default())));
    assert_eq!(names(dir.path()), before, "a refused open deleted files");
    std::fs::write(&path, &real).unwrap();
    assert_eq!(count(dir.path()), 11);
}
