//! The Rust API of issue 14 against a model: ranges of every shape, prefix and reverse
//! scans (in memory, and on a database whose cache holds a sliver of it, so that reverse
//! windows cross key ranges that are not in memory), reads inside scans, open modes and
//! backups.

use std::collections::BTreeMap;
use std::ops::Bound;

use rand::{RngExt, SeedableRng};
use tsumiki::{Db, Error, ErrorKind, OpenOptions, Options};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn random_key(rng: &mut rand::rngs::StdRng) -> Vec<u8> {
    let len = rng.random_range(0..4usize);
    // Few distinct bytes, 0x00 and 0xff among them: prefixes and bounds collide often.
    (0..len).map(|_| [0u8, 1, 0x7f, 0xfe, 0xff][rng.random_range(0..5usize)]).collect()
}

fn fill(db: &Db, rng: &mut rand::rngs::StdRng, n: usize) -> Model {
    let mut model = Model::new();
    for chunk in 0..n / 100 {
        db.run(|t| {
            for i in 0..100 {
                let mut k = random_key(rng);
                k.extend_from_slice(&((chunk * 100 + i) as u32 % 997).to_be_bytes());
                let v = format!("v{chunk}-{i}").into_bytes();
                t.put(&k, &v)?;
                model.insert(k, v);
            }
            Ok(())
        })
        .unwrap();
    }
    model
}

/// Every scan shape of `$txn` (a [`tsumiki::Txn`] or a snapshot's [`tsumiki::ReadTxn`]:
/// the same reads on two types) against `$model`: whole, reverse, random ranges both ways,
/// prefixes both ways, and reads inside a scan loop.
macro_rules! scans_agree {
    ($txn:expr, $model:expr, $rng:expr, $rounds:expr) => {{
        let (txn, model, rng) = ($txn, $model, $rng);
        let all: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        assert_eq!(txn.iter().collect::<Result<Vec<_>, _>>().unwrap(), all);
        let rev: Vec<_> = all.iter().rev().cloned().collect();
        assert_eq!(txn.iter().rev().collect::<Result<Vec<_>, _>>().unwrap(), rev);
        for _ in 0..$rounds {
            let (a, b) = (random_key(rng), random_key(rng));
            let bound = |k: Vec<u8>, r: u32| match r {
                0 => Bound::Included(k),
                1 => Bound::Excluded(k),
                _ => Bound::Unbounded,
            };
            let (lo, hi) = (bound(a.clone(), rng.random_range(0..3)), bound(b.clone(), rng.random_range(0..3)));
            let valid = match (&lo, &hi) {
                (Bound::Included(x) | Bound::Excluded(x), Bound::Included(y) | Bound::Excluded(y)) => x <= y,
                _ => true,
            };
            let want: Vec<_> = if valid && !matches!((&lo, &hi), (Bound::Excluded(x), Bound::Excluded(y)) if x == y) {
                model.range::<Vec<u8>, _>((lo.clone(), hi.clone())).map(|(k, v)| (k.clone(), v.clone())).collect()
            } else {
                Vec::new()
            };
            let got: Vec<_> = txn.range((lo.clone(), hi.clone())).collect::<Result<_, _>>().unwrap();
            assert_eq!(got, want, "range {lo:?}..{hi:?}");
            let got_rev: Vec<_> = txn.range((lo.clone(), hi.clone())).rev().collect::<Result<_, _>>().unwrap();
            assert_eq!(got_rev, want.iter().rev().cloned().collect::<Vec<_>>(), "reverse range {lo:?}..{hi:?}");
            let want_p: Vec<_> =
                model.iter().filter(|(k, _)| k.starts_with(&a)).map(|(k, v)| (k.clone(), v.clone())).collect();
            assert_eq!(txn.prefix(&a).collect::<Result<Vec<_>, _>>().unwrap(), want_p, "prefix {a:?}");
            let got_p: Vec<_> = txn.prefix(&a).rev().collect::<Result<_, _>>().unwrap();
            assert_eq!(got_p, want_p.iter().rev().cloned().collect::<Vec<_>>(), "reverse prefix {a:?}");
        }
        // A read inside a scan loop, through the same transaction.
        for row in txn.range(..).take(50) {
            let (k, v) = row.unwrap();
            assert_eq!(txn.get(&k).unwrap(), Some(v));
        }
    }};
}

fn check_scans(db: &Db, model: &Model, rng: &mut rand::rngs::StdRng, rounds: usize) {
    let txn = db.begin();
    scans_agree!(&txn, model, rng, rounds);
    txn.commit().unwrap();
}

/// Updates, inserts and deletes about a tenth of the keys (and keys new to the model), in
/// transactions of 100.
fn churn(db: &Db, model: &mut Model, rng: &mut rand::rngs::StdRng, round: usize) {
    let keys: Vec<Vec<u8>> = model.keys().cloned().collect();
    for _ in 0..10 {
        db.run(|t| {
            for i in 0..100 {
                match rng.random_range(0..3) {
                    0 => {
                        let k = &keys[rng.random_range(0..keys.len())];
                        t.delete(k)?;
                        model.remove(k);
                    }
                    1 => {
                        let k = &keys[rng.random_range(0..keys.len())];
                        let v = format!("u{round}-{i}").into_bytes();
                        t.put(k, &v)?;
                        model.insert(k.clone(), v);
                    }
                    _ => {
                        let mut k = random_key(rng);
                        k.extend_from_slice(&(1000 + rng.random_range(0..997u32)).to_be_bytes());
                        let v = format!("n{round}-{i}").into_bytes();
                        t.put(&k, &v)?;
                        model.insert(k, v);
                    }
                }
            }
            Ok(())
        })
        .unwrap();
    }
}

/// Snapshots (issue 36) see the state of the moment they began through every scan shape,
/// while later transactions update, insert and delete: each round opens one more, and all
/// of them are checked against their own model after every round. Under every protocol,
/// in memory and under a one-byte cache (scans cross ranges that are not in memory).
#[test]
fn snapshots_keep_their_state_through_every_scan() {
    snapshot_scans(&tsumiki::Cc::ALL, false, false);
}

/// The planted bug (`snapshot_reads_newest`: snapshots read each record's newest version)
/// fails the checks above.
#[test]
fn planted_snapshot_reading_newest_fails_the_scans() {
    for cc in [tsumiki::Cc::TicToc, tsumiki::Cc::Silo, tsumiki::Cc::TwoPl(tsumiki::LockWait::NoWait)] {
        let caught = std::panic::catch_unwind(|| snapshot_scans(&[cc], true, false)).is_err();
        assert!(caught, "{}: snapshots reading the newest versions passed the scans", cc.name());
    }
}

/// The planted bug (`snapshot_counts_newest`: a snapshot's count includes later commits)
/// fails the counts the same checks compare.
#[test]
fn planted_snapshot_counting_newest_fails_the_counts() {
    for cc in [tsumiki::Cc::TicToc, tsumiki::Cc::Silo, tsumiki::Cc::TwoPl(tsumiki::LockWait::NoWait)] {
        let caught = std::panic::catch_unwind(|| snapshot_scans(&[cc], false, true)).is_err();
        assert!(caught, "{}: snapshots counting later commits passed the counts", cc.name());
    }
}

/// Also the record count (`len`): each snapshot's, the database's, a transaction's with its
/// own writes, and (with files) after a clean close and after a crash.
fn snapshot_scans(ccs: &[tsumiki::Cc], newest: bool, count_newest: bool) {
    for &cc in ccs {
        for tiny in [false, true] {
            let mut rng = rand::rngs::StdRng::seed_from_u64(36);
            let dir = tempfile::tempdir().unwrap();
            let mut opts =
                Options { cache_bytes: if tiny { 1 } else { Options::default().cache_bytes }, ..Options::with_cc(cc) };
            opts.plants.snapshot_reads_newest = newest;
            opts.plants.snapshot_counts_newest = count_newest;
            let db = if tiny {
                Db::create(dir.path().join("db"), opts.clone()).unwrap()
            } else {
                Db::open_in_memory(opts.clone()).unwrap()
            };
            let mut model = fill(&db, &mut rng, 2000);
            let mut snaps = Vec::new();
            for round in 0..3 {
                snaps.push((db.begin_read(), model.clone()));
                churn(&db, &mut model, &mut rng, round);
                for (snap, seen) in &snaps {
                    scans_agree!(snap, seen, &mut rng, 20);
                    assert_eq!(snap.len().unwrap(), seen.len() as u64, "{}: a snapshot's count", cc.name());
                }
                assert_eq!(db.len().unwrap(), model.len() as u64, "{}: the count", cc.name());
            }
            drop(snaps);
            scans_agree!(&db.begin_read(), &model, &mut rng, 20);
            assert_eq!(db.snapshot_stats().open, 0, "{}", cc.name());
            // A transaction counts its own writes (by a scan).
            let mut t = db.begin();
            t.put(b"\xff\xff\xff\xff\xff new", b"").unwrap();
            let first = model.keys().next().unwrap().clone();
            t.delete(&first).unwrap();
            t.put(b"\xff\xff\xff\xff\xff other", b"").unwrap();
            assert_eq!(t.len().unwrap(), model.len() as u64 + 1, "{}: a transaction's count", cc.name());
            t.abort();
            if tiny {
                db.close().unwrap();
                let db = Db::open(dir.path().join("db"), opts.clone()).unwrap();
                assert_eq!(db.len().unwrap(), model.len() as u64, "{}: the count after a clean close", cc.name());
                churn(&db, &mut model, &mut rng, 9);
                db.abandon_for_tests();
                let db = Db::open(dir.path().join("db"), opts).unwrap();
                assert!(db.recovery_stats().unwrap().replayed);
                assert_eq!(db.len().unwrap(), model.len() as u64, "{}: the count after a crash", cc.name());
            }
        }
    }
}

#[test]
fn scans_agree_with_a_model_in_memory() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(14);
    let db = Db::open_in_memory(Options::default()).unwrap();
    let model = fill(&db, &mut rng, 3000);
    check_scans(&db, &model, &mut rng, 300);
}

#[test]
fn reverse_scans_cross_ranges_not_in_memory() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(41);
    let dir = tempfile::tempdir().unwrap();
    let opts = Options { cache_bytes: 1, ..Options::default() };
    let db = Db::create(dir.path().join("db"), opts.clone()).unwrap();
    let model = fill(&db, &mut rng, 20_000);
    db.close().unwrap();
    // Reopened: every key range starts on the pages, and a one-byte cache evicts after
    // each transaction.
    let db = Db::open(dir.path().join("db"), opts).unwrap();
    check_scans(&db, &model, &mut rng, 40);
    assert!(db.cache_stats().unwrap().loads > 0);
}

#[test]
fn open_modes_and_backups() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    assert!(matches!(Db::open(&path, Options::default()), Err(Error::NotFound(_))));
    assert!(!path.exists());
    std::fs::create_dir(&path).unwrap();
    assert!(matches!(Db::open(&path, Options::default()), Err(Error::NotFound(_))), "an empty directory");
    let db = Db::create(&path, Options::default()).unwrap();
    db.run(|t| t.put("k", "v")).unwrap();

    // A backup goes only into a missing or empty directory, and never touches others.
    let busy = dir.path().join("busy");
    std::fs::create_dir(&busy).unwrap();
    std::fs::write(busy.join("notes.txt"), "mine").unwrap();
    assert!(matches!(db.backup_to(&busy), Err(Error::Config(_))));
    assert_eq!(std::fs::read_to_string(busy.join("notes.txt")).unwrap(), "mine");
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    assert_eq!(db.backup_to(&empty).unwrap(), 1);
    assert!(matches!(db.backup_to(&empty), Err(Error::Config(_))), "a second backup into a database");
    db.close().unwrap();

    let copy = Db::open(&empty, Options { read_only: true, ..Options::default() }).unwrap();
    let mut t = copy.begin();
    assert_eq!(t.get("k").unwrap(), Some(b"v".to_vec()));
    assert_eq!(t.put("k", "w"), Err(Error::ReadOnly));
}

/// What an open did, for the open-flag table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// Opened, the key written before still there.
    Kept,
    /// Opened, and empty (new or emptied).
    Empty,
    /// Failed with this kind.
    Failed(ErrorKind),
}

/// The open-flag table (the same rows as the C library's and the Python module's tests,
/// and `db/open.rs`'s docs): flags (as dbm's) x what is at the path.
#[test]
fn open_flags_follow_one_table() {
    use ErrorKind::{AlreadyExists as Exists, NotFound as Missing};
    use Outcome::*;
    type Set = fn(&mut OpenOptions) -> &mut OpenOptions;
    // (flags, C flags / Python flag, [database, empty file, empty directory, nothing])
    let table: [(&str, Set, [Outcome; 4]); 6] = [
        ("O_RDONLY / 'r'", |o| o.read_only(true), [Kept, Failed(Missing), Failed(Missing), Failed(Missing)]),
        ("O_RDWR / 'w'", |o| o, [Kept, Failed(Missing), Failed(Missing), Failed(Missing)]),
        ("O_RDWR|O_CREAT / 'c'", |o| o.create(true), [Kept, Empty, Empty, Empty]),
        ("O_RDWR|O_CREAT|O_TRUNC / 'n'", |o| o.create(true).truncate(true), [Empty, Empty, Empty, Empty]),
        (
            "O_RDWR|O_CREAT|O_EXCL",
            |o| o.create(true).create_new(true),
            [Failed(Exists), Failed(Exists), Failed(Exists), Empty],
        ),
        ("O_RDWR|O_TRUNC", |o| o.truncate(true), [Empty, Failed(Missing), Failed(Missing), Failed(Missing)]),
    ];
    let dir = tempfile::tempdir().unwrap();
    for (i, (name, set, want)) in table.iter().enumerate() {
        for (j, situation) in ["database", "empty file", "empty directory", "nothing"].into_iter().enumerate() {
            let path = dir.path().join(format!("{i}-{j}"));
            match situation {
                "database" => {
                    let db = Db::create(&path, Options::default()).unwrap();
                    db.run(|t| t.put("k", "v")).unwrap();
                    db.close().unwrap();
                }
                "empty file" => std::fs::write(&path, b"").unwrap(),
                "empty directory" => std::fs::create_dir(&path).unwrap(),
                _ => {}
            }
            let got = match set(&mut OpenOptions::new()).mode(0o700).open(&path, Options::default()) {
                Ok(db) => {
                    let t = db.begin();
                    let r = if t.get("k").unwrap().is_some() { Kept } else { Empty };
                    assert_eq!(t.iter().count(), usize::from(r == Kept));
                    r
                }
                Err(e) => Failed(e.kind()),
            };
            assert_eq!(got, want[j], "{name} on {situation}: {got:?}");
            // A refused open changes nothing.
            match (situation, got) {
                ("empty file", Failed(_)) => assert!(path.is_file()),
                ("nothing", Failed(_)) => assert!(!path.exists()),
                _ => {}
            }
        }
    }
    // Truncating never empties what is not a tsumiki database, nor reads it read-only.
    let other = dir.path().join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("notes.txt"), "mine").unwrap();
    let e = OpenOptions::new().create(true).truncate(true).open(&other, Options::default()).err().unwrap();
    assert_eq!(e.kind(), ErrorKind::AlreadyExists, "{e}");
    assert_eq!(std::fs::read_to_string(other.join("notes.txt")).unwrap(), "mine");
    let e = OpenOptions::new().read_only(true).truncate(true).open(&other, Options::default()).err().unwrap();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    let file = dir.path().join("file");
    std::fs::write(&file, b"data").unwrap();
    let e = OpenOptions::new().create(true).open(&file, Options::default()).err().unwrap();
    assert_eq!(e.kind(), ErrorKind::AlreadyExists, "{e}");
    assert_eq!(std::fs::read(&file).unwrap(), b"data");
}

/// The directory an open creates gets the mode with x where r (before the umask).
#[cfg(unix)]
#[test]
fn open_options_mode_makes_a_searchable_directory() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let db = OpenOptions::new().create(true).mode(0o640).open(&path, Options::default()).unwrap();
    drop(db);
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode & 0o700, 0o700, "{mode:o}");
    assert_eq!(mode & 0o007, 0, "{mode:o}");
}

/// Every error has a stable kind and an errno the bindings use.
#[test]
fn errors_have_kinds_and_errnos() {
    let db = Db::open_in_memory(Options::default()).unwrap();
    let e = db.begin().put(vec![0; 5000], "v").unwrap_err();
    assert_eq!((e.kind(), e.errno()), (ErrorKind::KeyTooLong, libc::EINVAL));
    let dir = tempfile::tempdir().unwrap();
    let e = Db::open(dir.path().join("none"), Options::default()).err().unwrap();
    assert_eq!((e.kind(), e.errno()), (ErrorKind::NotFound, libc::ENOENT));
    let path = dir.path().join("db");
    let db = Db::create(&path, Options::default()).unwrap();
    let e = Db::create(&path, Options::default()).err().unwrap();
    assert_eq!((e.kind(), e.errno()), (ErrorKind::Locked, libc::EAGAIN), "{e:?}");
    drop(db);
    let e = Db::open(&path, Options { read_only: true, ..Options::default() }).unwrap().begin().put("k", "v");
    let e = e.unwrap_err();
    assert_eq!((e.kind(), e.errno()), (ErrorKind::ReadOnly, libc::EPERM));
    let e = Error::Corrupt(tsumiki::Corruption::in_file("MASTER", Some(4096), "bad checksum"));
    assert_eq!((e.kind(), e.errno()), (ErrorKind::Corrupt, libc::EIO));
    assert_eq!(e.to_string(), "corrupt database: MASTER at offset 4096: bad checksum");
}

/// A write set over the log record limit is its own kind (it was `Config`), and rolls
/// back only that transaction.
#[test]
fn a_transaction_over_the_record_limit_is_txn_too_large() {
    let disk = tsumiki::wal::storage::SimStorage::new(3);
    let db = Db::open_with_storage(std::sync::Arc::new(disk), Options::default()).unwrap();
    let value = vec![7u8; tsumiki::MAX_VALUE_LEN];
    let n = (tsumiki::MAX_TXN_BYTES as usize).div_ceil(value.len()) + 1;
    let e = db
        .run(|t| {
            for i in 0..n as u32 {
                t.put(i.to_be_bytes(), &value)?;
            }
            Ok(())
        })
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::TxnTooLarge, "{e:?}");
    assert!(matches!(e, Error::TxnTooLarge { max } if max == tsumiki::MAX_TXN_BYTES));
    assert_eq!(e.errno(), libc::EFBIG);
    assert_eq!(db.begin().get(0u32.to_be_bytes()).unwrap(), None, "rolled back");
    db.run(|t| t.put("small", "ok")).unwrap();
    db.close().unwrap();
}

/// An owned transaction moves between threads, sees its writes, and rolls back when
/// dropped; the database stays alive while it lives.
#[test]
fn owned_transactions_move_between_threads() {
    let db = std::sync::Arc::new(Db::open_in_memory(Options::default()).unwrap());
    let mut t = db.begin_owned();
    t.put("a", "1").unwrap();
    let t = std::thread::spawn(move || {
        assert_eq!(t.get("a").unwrap(), Some(b"1".to_vec()));
        t
    })
    .join()
    .unwrap();
    drop(t);
    assert_eq!(db.begin().get("a").unwrap(), None, "dropping rolled back");
    let mut t = db.begin_owned();
    t.with(|t| t.put("b", "2")).unwrap();
    let weak = std::sync::Arc::downgrade(&db);
    drop(db);
    assert!(weak.upgrade().is_some(), "the transaction keeps the database");
    assert_eq!(t.read(|t| t.iter().count()), 1);
    let db = t.db().clone();
    t.commit().unwrap();
    assert_eq!(db.begin().get("b").unwrap(), Some(b"2".to_vec()));
    let mut t = db.begin_owned();
    assert!(t.delete("b").unwrap());
    t.abort();
    assert_eq!(db.begin().get("b").unwrap(), Some(b"2".to_vec()));
}

/// The test hook the bindings' full-disk tests use: writes past the quota fail with the
/// operating system's ENOSPC, which poisons the database and reaches the caller.
#[test]
fn a_write_quota_fills_like_a_full_disk() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let quota = 8 << 20;
    let db =
        OpenOptions::new().create(true).write_quota_for_tests(Some(quota)).open(&path, Options::default()).unwrap();
    let value = vec![1u8; 64 << 10];
    let mut acked = 0u32;
    let e = loop {
        match db.run(|t| t.put(acked.to_be_bytes(), &value)) {
            Ok(()) => acked += 1,
            Err(e) => break e,
        }
        assert!(acked < 1000, "the quota never filled");
    };
    assert!(acked > 0, "the quota leaves room to create the database and commit");
    assert_eq!(e.kind(), ErrorKind::Poisoned, "{e:?}");
    assert_eq!(e.errno(), libc::ENOSPC, "{e:?}");
    assert_eq!(e.os_error().and_then(std::io::Error::raw_os_error), Some(libc::ENOSPC));
    let later = db.run(|t| t.put("later", "x")).unwrap_err();
    assert_eq!((later.kind(), later.errno()), (ErrorKind::Poisoned, libc::ENOSPC), "the first cause stays");
    drop(db);
    let db = OpenOptions::new().open(&path, Options::default()).unwrap();
    let t = db.begin();
    for i in 0..acked {
        assert_eq!(t.get(i.to_be_bytes()).unwrap().as_deref(), Some(&value[..]), "acknowledged key {i}");
    }
    eprintln!("{acked} commits of 64 KiB fit in the {quota}-byte quota");
}

/// A damaged page image is `Corrupt` naming its segment file and the offset in it.
#[test]
fn a_damaged_page_names_its_file_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let db = Db::create(&path, Options::default()).unwrap();
    db.run(|t| (0..2000u32).try_for_each(|i| t.put(i.to_be_bytes(), [7u8; 100]))).unwrap();
    db.close().unwrap();
    let seg = std::fs::read_dir(&path)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .find(|n| n.starts_with("pages-") && n.ends_with(".seg"))
        .expect("a page segment");
    let mut bytes = std::fs::read(path.join(&seg)).unwrap();
    // The first block holds the start of the first image written.
    bytes[100] ^= 0xff;
    std::fs::write(path.join(&seg), &bytes).unwrap();
    let e = Db::open(&path, Options::default()).and_then(|db| db.view(|r| r.iter().try_for_each(|x| x.map(drop))));
    match e {
        Err(Error::Corrupt(c)) => {
            assert_eq!(c.file.as_deref(), Some(seg.as_str()), "{c}");
            assert_eq!(c.offset, Some(0), "{c}");
            assert!(c.to_string().starts_with(&format!("{seg} at offset 0: ")), "{c}");
        }
        Err(e) => panic!("{e:?}"),
        Ok(()) => panic!("the damage went unnoticed"),
    }
}

/// The file `dbm_dirfno` hands out (the C library's lock file) is the database's own: a
/// check does not call it foreign.
#[test]
fn the_callers_lock_file_is_not_foreign() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    Db::create(&path, Options::default()).unwrap().close().unwrap();
    std::fs::write(path.join(tsumiki::wal::storage::CALLER_LOCK_FILE), b"").unwrap();
    std::fs::write(path.join("stray"), b"").unwrap();
    let r = tsumiki::check(&path).unwrap();
    let named = |n: &str| r.findings.iter().any(|f| format!("{f:?}").contains(n));
    assert!(named("stray"), "{:?}", r.findings);
    assert!(!named(tsumiki::wal::storage::CALLER_LOCK_FILE), "{:?}", r.findings);
}

/// Unsynced NLR logs may keep a commit and lose one it depended on, so recovery cannot add
/// up their inserts and removals: their master records say so, and the open after a crash
/// counts the keys again. Synced or ELR logs keep adding up.
#[test]
fn the_count_after_a_crash_of_every_log_setting() {
    use tsumiki::{Durability, LogOptions, Release};
    for release in [Release::Nlr, Release::Elr] {
        for durability in [Durability::Sync, Durability::Buffered, Durability::None] {
            let dir = tempfile::tempdir().unwrap();
            let opts =
                Options { log: LogOptions { release, durability, ..LogOptions::default() }, ..Options::default() };
            let db = Db::create(dir.path(), opts.clone()).unwrap();
            for i in 0..100u32 {
                db.run(|t| t.put(i.to_be_bytes(), b"v")).unwrap();
            }
            db.run(|t| (0..10u32).try_for_each(|i| t.delete(i.to_be_bytes()).map(drop))).unwrap();
            db.close().unwrap();
            let db = Db::open(dir.path(), opts.clone()).unwrap();
            db.run(|t| (100..150u32).try_for_each(|i| t.put(i.to_be_bytes(), b"v"))).unwrap();
            db.abandon_for_tests();
            let storage = tsumiki::storage::DirStorage::new(dir.path()).unwrap();
            let m = tsumiki::store::master::read_master(&storage).unwrap().unwrap();
            let replayable = release == Release::Elr || durability == Durability::Sync;
            assert_eq!((m.count, m.count_replayable), (Some(90), replayable), "{release:?} {durability:?}");
            drop(storage);
            let db = Db::open(dir.path(), opts).unwrap();
            let scanned = db.view(|r| r.iter().try_fold(0u64, |n, row| row.map(|_| n + 1))).unwrap();
            assert_eq!(db.len().unwrap(), scanned, "{release:?} {durability:?}");
        }
    }
}

/// `get_many` returns what a `get` per key returns, under every protocol, in memory and
/// from the pages through a one-byte cache: present, absent and repeated keys, batches
/// shorter and longer than its groups, a snapshot's state rather than the newest, and an
/// over-long key as an error.
#[test]
fn get_many_agrees_with_a_get_per_key() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(36);
    for cc in tsumiki::Cc::ALL {
        for tiny in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let opts =
                Options { cache_bytes: if tiny { 1 } else { Options::default().cache_bytes }, ..Options::with_cc(cc) };
            let db = Db::create(dir.path().join("db"), opts).unwrap();
            let model = fill(&db, &mut rng, 2000);
            let snap = db.begin_read();
            let mut keys: Vec<Vec<u8>> = model.keys().cloned().collect();
            keys.extend((0..300).map(|_| random_key(&mut rng))); // mostly absent
            for _ in 0..20 {
                let n = rng.random_range(0..40usize);
                let batch: Vec<&Vec<u8>> = (0..n).map(|_| &keys[rng.random_range(0..keys.len())]).collect();
                let want: Vec<Option<Vec<u8>>> = batch.iter().map(|k| model.get(*k).cloned()).collect();
                let txn = db.begin();
                assert_eq!(txn.get_many(&batch).unwrap(), want, "{} tiny={tiny}", cc.name());
                txn.commit().unwrap();
                let mut seen = Vec::new();
                snap.get_many_with(&batch, |i, v| seen.push((i, v.map(<[u8]>::to_vec)))).unwrap();
                assert_eq!(seen, want.into_iter().enumerate().collect::<Vec<_>>(), "{} tiny={tiny}", cc.name());
            }
            // Later writes: the snapshot keeps its state, a new transaction sees them.
            let first = model.keys().next().unwrap().clone();
            db.run(|t| t.put(&first, b"new")).unwrap();
            assert_eq!(snap.get_many(&[&first]).unwrap(), [model.get(&first).cloned()]);
            assert_eq!(db.begin().get_many(&[&first]).unwrap(), [Some(b"new".to_vec())]);
            let long = vec![1u8; 1 << 20];
            assert!(db.begin().get_many(&[&first, &long]).is_err(), "{}", cc.name());
        }
    }
}
