//! A full disk (issue 13): filling it ends in a clear error that poisons the database;
//! opening needs no free space (the database opens read-only and can be read); once space
//! is freed it opens for writing with every acknowledged commit. The disk is `SimStorage`
//! with a capacity, which reports `ENOSPC` (`StorageFull`) like a full file system.

use std::sync::Arc;

use tsumiki::storage::SimStorage;
use tsumiki::{Db, Error, ErrorKind, LogOptions, Options, StoreOptions};

fn opts() -> Options {
    // Small segments and checkpoints, so that both meet the full disk.
    let log = LogOptions { segment_size: 256 << 10, ..LogOptions::default() };
    // Every close writes the pages: a clean database's open then needs nothing written.
    let store = StoreOptions { checkpoint_bytes: 512 << 10, close_keeps_short_log: false, ..StoreOptions::default() };
    Options { log, store, ..Options::default() }
}

fn key(i: u32) -> [u8; 4] {
    i.to_be_bytes()
}

fn value(i: u32) -> Vec<u8> {
    vec![(i % 251) as u8; 200]
}

/// Commits until the disk is full; returns how many were acknowledged.
fn fill_until_full(db: &Db) -> u32 {
    let mut acked = 0;
    loop {
        match db.run(|t| t.put(key(acked), value(acked))) {
            Ok(()) => acked += 1,
            Err(e @ Error::Poisoned(_)) => {
                assert!(e.to_string().contains("full"), "the error says the disk is full: {e}");
                // The first failure's cause is kept, for the bindings' errno (ENOSPC).
                assert_eq!(e.kind(), ErrorKind::Poisoned);
                assert_eq!(e.io_kind(), Some(std::io::ErrorKind::StorageFull), "{e:?}");
                assert_eq!(e.errno(), libc::ENOSPC, "{e:?}");
                let Error::Poisoned(p) = &e else { unreachable!() };
                assert!(p.source.is_some() && !p.context.is_empty(), "{p:?}");
                // Poisoned for good: later commits are refused too.
                assert!(matches!(db.run(|t| t.put(b"later", b"x")), Err(Error::Poisoned(_))));
                return acked;
            }
            Err(e) => panic!("unexpected error: {e}"),
        }
        assert!(acked < 1_000_000, "the disk never filled");
    }
}

fn check_all(db: &Db, acked: u32) {
    let t = db.begin();
    for i in 0..acked {
        assert_eq!(t.get(key(i)).unwrap(), Some(value(i)), "acknowledged key {i}");
    }
    t.commit().unwrap();
}

/// `read_only`: whether opening must find the disk too full to recover (a crash left logs
/// to replay into the pages), so that writes are refused as read-only.
fn opens_read_only_then_writable(image_disk: SimStorage, acked: u32, read_only: bool) {
    // Exactly full: not one more byte fits.
    image_disk.set_capacity(Some(image_disk.used()));
    let db = Db::open_with_storage(Arc::new(image_disk.clone()), opts()).expect("opens on a full disk");
    check_all(&db, acked);
    // A write is refused with a clear error: the database is read-only (recovery could
    // not write its pages), or the log cannot grow (the master record, written in place,
    // needed no space). Either way no later commit is acknowledged, and closing writes
    // nothing.
    // A database opened read-only says so (`ReadOnly`, as `Options::read_only` does), not
    // that it is poisoned.
    match db.run(|t| t.put(b"new", b"x")) {
        Err(Error::ReadOnly) => {}
        // The message names the failed write and keeps its cause (ENOSPC).
        Err(Error::Poisoned(m)) if !read_only => assert!(m.to_string().contains("disk full"), "{m}"),
        other => panic!("a write on a full disk: {other:?}"),
    }
    assert!(matches!(db.run(|t| t.put(b"new", b"x")), Err(Error::ReadOnly | Error::Poisoned(_))));
    match db.close() {
        Ok(()) | Err(Error::Poisoned(_)) => {}
        Err(e) => panic!("closing on a full disk: {e}"),
    }
    // Space is freed: writable again, nothing lost.
    image_disk.set_capacity(None);
    let db = Db::open_with_storage(Arc::new(image_disk), opts()).unwrap();
    check_all(&db, acked);
    db.run(|t| t.put(b"new", b"x")).unwrap();
    db.close().unwrap();
}

#[test]
fn a_full_disk_poisons_then_opens_read_only_after_a_crash() {
    let disk = SimStorage::new(7);
    let db = Db::open_with_storage(Arc::new(disk.clone()), opts()).unwrap();
    for i in 0..100 {
        db.run(|t| t.put(key(i), value(i))).unwrap();
    }
    disk.set_capacity(Some(disk.used() + (2 << 20)));
    let acked = fill_until_full(&db);
    assert!(acked > 100);
    let image = disk.crash();
    drop(db);
    opens_read_only_then_writable(SimStorage::from_image(&image, 8), acked, true);
}

#[test]
fn a_clean_database_opens_read_only_on_a_full_disk() {
    let disk = SimStorage::new(9);
    let db = Db::open_with_storage(Arc::new(disk.clone()), opts()).unwrap();
    for i in 0..2000 {
        db.run(|t| t.put(key(i), value(i))).unwrap();
    }
    db.close().unwrap();
    opens_read_only_then_writable(disk, 2000, false);
}
