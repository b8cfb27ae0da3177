//! Big transactions: one transaction inserting many new keys, in any order, commits in
//! about the time of as many single-key transactions (own-write lookups, gap writes and the
//! commit stay O(log n) per key), under every protocol.

use std::time::Instant;

use rand::seq::SliceRandom;
use rand::SeedableRng;
use tsumiki::{Cc, Db, Options};

fn keys(n: u32, order: &str) -> Vec<[u8; 4]> {
    let mut ks: Vec<[u8; 4]> = (0..n).map(|i| i.to_be_bytes()).collect();
    match order {
        "asc" => {}
        "desc" => ks.reverse(),
        _ => ks.shuffle(&mut rand::rngs::StdRng::seed_from_u64(7)),
    }
    ks
}

/// Inserts `n` keys in one transaction, then checks every key and the scan.
fn one_big(cc: Cc, n: u32, order: &str) -> f64 {
    let db = Db::open_in_memory(Options::with_cc(cc)).unwrap();
    let ks = keys(n, order);
    let t = Instant::now();
    let mut txn = db.begin();
    for k in &ks {
        txn.put(k, &k[..]).unwrap();
    }
    txn.commit().unwrap();
    let secs = t.elapsed().as_secs_f64();
    let txn = db.begin();
    let got: Vec<Vec<u8>> = txn.iter().map(|r| r.unwrap().1).collect();
    assert_eq!(got.len(), n as usize, "{} {order}: every key committed", cc.name());
    assert!(got.windows(2).all(|w| w[0] < w[1]), "{} {order}: scan in key order", cc.name());
    for k in ks.iter().step_by(97) {
        assert_eq!(txn.get(k).unwrap().as_deref(), Some(&k[..]));
    }
    txn.commit().unwrap();
    secs
}

fn singles(cc: Cc, n: u32, order: &str) -> f64 {
    let db = Db::open_in_memory(Options::with_cc(cc)).unwrap();
    let ks = keys(n, order);
    let t = Instant::now();
    for k in &ks {
        db.run(|txn| txn.put(k, &k[..])).unwrap();
    }
    t.elapsed().as_secs_f64()
}

#[test]
fn big_transactions_commit_in_any_key_order() {
    let full = if cfg!(tsumiki_unoptimized) { 5_000 } else { 100_000 };
    for cc in Cc::ALL {
        // The default protocol at full size; the others smaller, to keep the suite short
        // (the quadratic walk this guards against took 34 s at 8K keys).
        let n = if cc == Cc::TicToc { full } else { full / 5 };
        for order in ["asc", "desc", "random"] {
            let big = one_big(cc, n, order);
            let single = singles(cc, n, order);
            // Printed for the record (timing is not asserted: the machine is noisy).
            println!("{:12} {order:6} {n} keys: one transaction {big:.3} s, {n} transactions {single:.3} s", cc.name());
        }
    }
}

#[test]
fn a_big_transaction_aborts_cleanly() {
    let db = Db::open_in_memory(Options::default()).unwrap();
    let mut txn = db.begin();
    for k in keys(20_000, "random") {
        txn.put(k, b"x").unwrap();
    }
    txn.abort();
    let txn = db.begin();
    assert_eq!(txn.iter().count(), 0);
    txn.commit().unwrap();
}

#[test]
fn a_durable_big_transaction_commits_and_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let n = if cfg!(tsumiki_unoptimized) { 5_000 } else { 100_000 };
    let ks = keys(n, "random");
    let db = Db::create(dir.path(), Options::default()).unwrap();
    let t = Instant::now();
    let mut txn = db.begin();
    for k in &ks {
        txn.put(k, &k[..]).unwrap();
    }
    txn.commit().unwrap();
    println!("durable tictoc random {n} keys in one transaction: {:.3} s", t.elapsed().as_secs_f64());
    db.abandon_for_tests();
    let db = Db::create(dir.path(), Options::default()).unwrap();
    let txn = db.begin();
    assert_eq!(txn.iter().count(), n as usize, "recovered every key of the big commit");
    txn.commit().unwrap();
}

/// Power lost at every storage operation of a commit whose log record spans several flush
/// chunks (a flush seals and writes 1 MiB of blocks at a time): the recovered database
/// holds the commit whole or not at all (whole once it was acknowledged), and the commit
/// before it.
#[test]
fn power_lost_inside_a_flush_of_several_chunks_keeps_the_commit_whole_or_out() {
    use std::sync::Arc;
    use std::time::Duration;
    use tsumiki::storage::SimStorage;
    use tsumiki::{LogOptions, StoreOptions};

    let log = LogOptions { segment_size: 64 << 20, ..LogOptions::default() };
    // No checkpoint: the storage operations come in the same order in every run.
    let store = StoreOptions { checkpoint_bytes: 0, checkpoint_interval: Duration::ZERO, ..StoreOptions::default() };
    let opts = Options { cc: Cc::TicToc, log, store, ..Options::default() };
    // About 2.5 MiB of records in one commit: three chunks.
    let big: Vec<([u8; 4], Vec<u8>)> = (0..2_500u32).map(|i| (i.to_be_bytes(), vec![(i % 251) as u8; 1000])).collect();
    // Returns the operations before and after the big commit, and whether it was
    // acknowledged (a background thread's operations may shift the count from run to
    // run, so each run says for itself).
    let run = |disk: &SimStorage| -> (u64, u64, bool) {
        let Ok(db) = Db::open_with_storage(Arc::new(disk.clone()), opts.clone()) else { return (0, 0, false) };
        let _ = db.run(|t| t.put(b"first", b"1"));
        let before = disk.ops();
        let acked = db.run(|t| big.iter().try_for_each(|(k, v)| t.put(k, v))).is_ok();
        (before, disk.ops(), acked)
    };
    let (before, after, _) = run(&SimStorage::new(3));
    assert!(after > before + 2, "the big commit made several writes ({before} -> {after})");
    for crash_at in before..=after {
        let disk = SimStorage::new(3);
        disk.crash_after(crash_at);
        let (_, _, acked) = run(&disk);
        let image = disk.crash();
        let db = Db::open_with_storage(Arc::new(SimStorage::from_image(&image, 3)), opts.clone())
            .unwrap_or_else(|e| panic!("crash after operation {crash_at}: reopen: {e}"));
        let txn = db.begin();
        assert_eq!(txn.get(b"first").unwrap().as_deref(), Some(&b"1"[..]), "crash after {crash_at}");
        let present = big.iter().filter(|(k, v)| txn.get(k).unwrap().as_deref() == Some(&v[..])).count();
        // Once the commit returned (synced), power lost after it keeps it.
        assert!(
            present == big.len() || present == 0 && !acked,
            "crash after operation {crash_at} (acknowledged: {acked}): {present} of the big commit's {} records",
            big.len()
        );
    }
}

/// A commit deleting every other key (runs of unlinks in each leaf, which leave the index
/// together) and then a block of consecutive keys: every deleted record is out of the
/// index when the commit returns, and reads, scans and the count agree with the model.
#[test]
fn deletes_in_runs_leave_the_index_at_commit() {
    for cc in [Cc::TicToc, Cc::Silo, Cc::TwoPl(tsumiki::LockWait::NoWait), Cc::MvccSi(tsumiki::Gc::EpoR)] {
        let db = Db::open_in_memory(Options { cc, ..Options::default() }).unwrap();
        let n = 20_000u32;
        db.run(|t| (0..n).try_for_each(|i| t.put(i.to_be_bytes(), i.to_le_bytes()))).unwrap();
        let gone = |i: u32| i.is_multiple_of(2) || (5_000..9_000).contains(&i);
        db.run(|t| (0..n).filter(|&i| gone(i)).try_for_each(|i| t.delete(i.to_be_bytes()).map(|_| ()))).unwrap();
        let kept: Vec<u32> = (0..n).filter(|&i| !gone(i)).collect();
        assert_eq!(db.index_len(), kept.len(), "{cc:?}: deleted records left in the index");
        let txn = db.begin();
        for i in 0..n {
            let want = (!gone(i)).then(|| i.to_le_bytes().to_vec());
            assert_eq!(txn.get(i.to_be_bytes()).unwrap(), want, "{cc:?}: key {i}");
        }
        let scanned: Vec<Vec<u8>> = txn.iter().map(|r| r.unwrap().0).collect();
        assert_eq!(scanned, kept.iter().map(|i| i.to_be_bytes().to_vec()).collect::<Vec<_>>(), "{cc:?}");
        drop(txn);
        assert_eq!(db.len().unwrap(), kept.len() as u64, "{cc:?}");
    }
}

/// A value of `len` bytes, different for each key and tag.
fn staged_value(i: u32, tag: u8, len: usize) -> Vec<u8> {
    (0..len).map(|j| (i as usize * 31 + j) as u8 ^ tag).collect()
}

/// Values of new keys go into their records' tails at put time (staged, not copied into
/// the write set). Within the transaction, reads and scans of its own writes see them,
/// later writes of the same keys (shorter, longer than the tail, deleted, put again) win,
/// and after the commit and after a reopen (the log replayed) every key has its last
/// value. Under every protocol.
#[test]
fn staged_values_of_new_keys_read_back_before_and_after_commit() {
    for cc in [Cc::TicToc, Cc::Silo, Cc::TwoPl(tsumiki::LockWait::NoWait), Cc::MvccSi(tsumiki::Gc::EpoR)] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let db = Db::create(&path, Options { cc, ..Options::default() }).unwrap();
        let mut model = std::collections::BTreeMap::new();
        let mut txn = db.begin();
        for i in 0..3_000u32 {
            let v = staged_value(i, 1, 100 + (i % 120) as usize);
            txn.put(i.to_be_bytes(), &v).unwrap();
            model.insert(i.to_be_bytes().to_vec(), v);
        }
        for i in (0..3_000u32).step_by(7) {
            let k = i.to_be_bytes().to_vec();
            match i % 4 {
                0 => model.insert(k, staged_value(i, 2, 40)),
                1 => model.insert(k, staged_value(i, 3, 500)),
                2 => model.remove(&k),
                _ => model.insert(k, b"tiny".to_vec()),
            };
            match model.get(i.to_be_bytes().as_slice()) {
                Some(v) => txn.put(i.to_be_bytes(), v).unwrap(),
                None => {
                    txn.delete(i.to_be_bytes()).unwrap();
                }
            }
        }
        for i in (0..3_000u32).step_by(3) {
            assert_eq!(txn.get(i.to_be_bytes()).unwrap().as_ref(), model.get(i.to_be_bytes().as_slice()), "{cc:?} {i}");
        }
        let own: Vec<(Vec<u8>, Vec<u8>)> = txn.iter().map(|r| r.unwrap()).collect();
        assert!(own == model.clone().into_iter().collect::<Vec<_>>(), "{cc:?}: own scan");
        txn.commit().unwrap();
        let all = |db: &Db| db.begin().iter().map(|r| r.unwrap()).collect::<Vec<_>>();
        assert!(all(&db) == model.clone().into_iter().collect::<Vec<_>>(), "{cc:?}: after commit");
        drop(db);
        let db = Db::open(&path, Options { cc, ..Options::default() }).unwrap();
        assert!(all(&db) == model.into_iter().collect::<Vec<_>>(), "{cc:?}: reopened");
    }
}

/// A new key's creator stages its value in the record's tail; another transaction writes
/// the same key before the creator commits. Under TicToc and Silo the other commits (its
/// value must go elsewhere: publishing the staged tail for it, a planted bug, reads the
/// creator's bytes) and the creator aborts; under 2PL and SI the other fails. Whichever
/// committed is the value read, logged and recovered.
#[test]
fn a_staged_value_survives_another_commit_of_the_same_new_key() {
    for cc in [Cc::TicToc, Cc::Silo, Cc::TwoPl(tsumiki::LockWait::NoWait), Cc::MvccSi(tsumiki::Gc::EpoR)] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let db = Db::create(&path, Options { cc, ..Options::default() }).unwrap();
        let (a_val, b_val) = (staged_value(1, 0xa, 150), staged_value(2, 0xb, 150));
        let mut a = db.begin();
        a.put(b"key", &a_val).unwrap();
        let b_done = {
            let mut b = db.begin();
            b.put(b"key", &b_val).is_ok() && b.commit().is_ok()
        };
        if b_done {
            assert_eq!(db.begin().get(b"key").unwrap(), Some(b_val.clone()), "{cc:?}: B's commit");
        }
        let a_done = a.commit().is_ok();
        assert!(a_done || b_done, "{cc:?}: neither committed");
        let want = if a_done { a_val } else { b_val };
        assert_eq!(db.begin().get(b"key").unwrap(), Some(want.clone()), "{cc:?}: a {a_done}, b {b_done}");
        drop(db);
        let db = Db::open(&path, Options { cc, ..Options::default() }).unwrap();
        assert_eq!(db.begin().get(b"key").unwrap(), Some(want), "{cc:?}: reopened (a {a_done}, b {b_done})");
    }
}

/// The placeholders of a transaction's new keys leave the index when it rolls back, and
/// at commit those of keys it put and then deleted (a put's placeholder is named by its
/// write-set entry, not kept in a list of its own).
#[test]
fn placeholders_of_new_keys_leave_the_index_on_abort_and_when_deleted() {
    for cc in [Cc::TicToc, Cc::Silo, Cc::TwoPl(tsumiki::LockWait::NoWait), Cc::MvccSi(tsumiki::Gc::EpoR)] {
        let db = Db::open_in_memory(Options { cc, ..Options::default() }).unwrap();
        let n = 5_000u32;
        db.run(|t| (0..n).step_by(2).try_for_each(|i| t.put(i.to_be_bytes(), b"old"))).unwrap();
        let before = db.index_len();
        let mut t = db.begin();
        for i in 0..n {
            t.put(i.to_be_bytes(), b"new").unwrap();
        }
        t.abort();
        assert_eq!(db.index_len(), before, "{cc:?}: an aborted transaction left placeholders");
        db.run(|t| {
            for i in 0..n {
                t.put(i.to_be_bytes(), b"new")?;
            }
            (1..n).step_by(2).try_for_each(|i| t.delete(i.to_be_bytes()).map(|_| ()))
        })
        .unwrap();
        assert_eq!(db.index_len(), before, "{cc:?}: keys put and deleted in one transaction stayed");
        let txn = db.begin();
        assert_eq!(txn.iter().count(), before, "{cc:?}");
        assert_eq!(txn.get(1u32.to_be_bytes()).unwrap(), None, "{cc:?}");
        assert_eq!(txn.get(2u32.to_be_bytes()).unwrap().as_deref(), Some(&b"new"[..]), "{cc:?}");
    }
}
