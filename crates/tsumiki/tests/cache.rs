//! The record cache: with `cache_bytes` far below the data, key ranges leave memory once a
//! checkpoint covers them and load again when used. Results must match a model under every
//! protocol, concurrent transfers must stay consistent while ranges leave under them, and
//! a planted bug (ranges evicted before their last writes reach the pages) must be caught.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use tsumiki::plants::Plants;
use tsumiki::{Cc, Db, Durability, Error, LogOptions, Options, StoreOptions};

fn key(n: u64) -> Vec<u8> {
    format!("k{n:06}").into_bytes()
}

fn value(n: u64, round: u64, len: usize) -> Vec<u8> {
    let mut v = format!("{n}-{round}-").into_bytes();
    v.resize(len, b'.');
    v
}

/// A small cache, frequent checkpoints, buffered commits (the test is about the cache).
fn opts(cc: Cc, cache_bytes: usize, evict_dirty: bool) -> Options {
    let log = LogOptions { durability: Durability::Buffered, ..LogOptions::default() };
    let store = StoreOptions { checkpoint_bytes: 256 << 10, ..StoreOptions::default() };
    let plants = Plants { evict_dirty, ..Plants::NONE };
    Options { cc, cache_bytes, log, store, plants, ..Options::default() }
}

fn dump(db: &Db) -> BTreeMap<Vec<u8>, Vec<u8>> {
    db.run(|t| t.iter().collect::<Result<BTreeMap<_, _>, Error>>()).unwrap()
}

/// Fills a database through a 64 KiB cache (about a twentieth of the data), then runs
/// random reads, writes, inserts, deletes and scans against a model, with checkpoints
/// along the way; the state must match after a clean close and after a crash too.
fn model_run(cc: Cc, evict_dirty: bool) -> Result<(), String> {
    let dir = tempfile::tempdir().unwrap();
    let budget = 64 << 10;
    let db = Db::create(dir.path(), opts(cc, budget, evict_dirty)).unwrap();
    let mut model = BTreeMap::new();
    for chunk in (0..4000u64).collect::<Vec<_>>().chunks(100) {
        db.run(|t| {
            for &i in chunk {
                t.put(key(i * 2), value(i, 0, 300))?;
            }
            Ok(())
        })
        .unwrap();
        for &i in chunk {
            model.insert(key(i * 2), value(i, 0, 300));
        }
        if chunk[0] % 1000 == 0 {
            db.checkpoint().unwrap();
        }
    }
    let mut rng = StdRng::seed_from_u64(11);
    for round in 1..=1500u64 {
        let k = rng.random_range(0..8200u64);
        let kk = key(k);
        let op = rng.random_range(0..6);
        let end = key(k + rng.random_range(1..300u64));
        let r = db.run(|t| {
            Ok(match op {
                0 => (t.get(&kk)? == model.get(&kk).cloned(), None),
                1 => {
                    t.put(&kk, value(k, round, 200))?;
                    (true, Some(Some(value(k, round, 200))))
                }
                2 => (t.insert(&kk, value(k, round, 100))? != model.contains_key(&kk), None),
                3 => (t.delete(&kk)? == model.contains_key(&kk), Some(None)),
                4 => {
                    let did = t.update(&kk, value(k, round, 50))?;
                    (did == model.contains_key(&kk), did.then(|| Some(value(k, round, 50))))
                }
                _ => {
                    let got: Vec<_> = t.range(&kk..&end).collect::<Result<_, _>>()?;
                    let want: Vec<_> =
                        model.range(kk.clone()..end.clone()).map(|(k, v)| (k.clone(), v.clone())).collect();
                    (got == want, None)
                }
            })
        });
        let (agrees, change) = r.map_err(|e| format!("{cc:?}: round {round}: {e}"))?;
        if !agrees {
            return Err(format!("{cc:?}: round {round}: operation {op} on key {k} disagrees with the model"));
        }
        match (op, change) {
            (2, _) => {
                model.entry(kk).or_insert_with(|| value(k, round, 100));
            }
            (_, Some(Some(v))) => {
                model.insert(kk, v);
            }
            (_, Some(None)) => {
                model.remove(&kk);
            }
            _ => {}
        }
        if round % 300 == 0 {
            db.checkpoint().unwrap();
        }
    }
    let st = db.cache_stats().unwrap();
    assert!(st.evictions > 20 && st.loads > 20, "{cc:?}: the cache was not exercised: {st:?}");
    if dump(&db) != model {
        return Err(format!("{cc:?}: the whole state after the random operations"));
    }
    // Once a checkpoint covers everything, the next transaction's end brings the records
    // in memory back under the budget.
    db.checkpoint().unwrap();
    db.run(|t| t.get(key(0))).unwrap();
    let st = db.cache_stats().unwrap();
    assert!(st.resident_bytes <= budget as i64, "{cc:?}: {st:?}");
    db.close().unwrap();
    let db = Db::create(dir.path(), opts(cc, budget, false)).unwrap();
    if dump(&db) != model {
        return Err(format!("{cc:?}: the state after a clean close"));
    }
    db.run(|t| t.put(key(1), b"after the close")).unwrap();
    model.insert(key(1), b"after the close".to_vec());
    db.abandon_for_tests();
    let db = Db::create(dir.path(), opts(cc, budget, false)).unwrap();
    if dump(&db) != model {
        return Err(format!("{cc:?}: the state after a crash"));
    }
    db.close().unwrap();
    Ok(())
}

#[test]
fn databases_twenty_times_their_cache_agree_with_a_model() {
    for cc in Cc::ALL {
        model_run(cc, false).unwrap();
    }
}

#[test]
fn planted_eviction_of_dirty_ranges_is_caught() {
    for cc in [Cc::TicToc, Cc::TwoPl(tsumiki::LockWait::NoWait), Cc::MvccSi(tsumiki::Gc::default())] {
        assert!(model_run(cc, true).is_err(), "{cc:?}: evicting unwritten changes went unnoticed");
    }
}

const ACCOUNTS: u64 = 2000;
const START: u64 = 1000;

#[path = "common/bank.rs"]
mod bank;
use bank::{audit, balance};

fn account(b: u64) -> Vec<u8> {
    bank::account(b, 200)
}

/// Transfers and audits (full scans) on four threads through a cache of a tenth of the
/// accounts: ranges leave and load while transactions hold their records; every committed
/// audit must see the total.
fn bank(cc: Cc) -> Result<(), String> {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::create(dir.path(), opts(cc, 64 << 10, false)).unwrap();
    for chunk in (0..ACCOUNTS).collect::<Vec<_>>().chunks(200) {
        db.run(|t| {
            for &a in chunk {
                t.put(key(a), account(START))?;
            }
            Ok(())
        })
        .unwrap();
    }
    let bad = AtomicU64::new(0);
    let barrier = Barrier::new(4);
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let (db, bad, barrier) = (&db, &bad, &barrier);
            s.spawn(move || {
                let mut rng = StdRng::seed_from_u64(t + 300);
                barrier.wait();
                for _ in 0..400 {
                    if rng.random_range(0..40) == 0 {
                        if audit(db) != ACCOUNTS * START {
                            bad.fetch_add(1, Ordering::Relaxed);
                        }
                        continue;
                    }
                    let (a, b) = (rng.random_range(0..ACCOUNTS), rng.random_range(0..ACCOUNTS));
                    if a == b {
                        continue;
                    }
                    db.run(|t| {
                        let (va, vb) = (t.get(key(a))?.expect("open"), t.get(key(b))?.expect("open"));
                        let amount = rng.random_range(0..=balance(&va).min(50));
                        t.put(key(a), account(balance(&va) - amount))?;
                        t.put(key(b), account(balance(&vb) + amount))
                    })
                    .unwrap();
                }
            });
        }
    });
    let st = db.cache_stats().unwrap();
    assert!(st.evictions > 10, "{cc:?}: the cache was not exercised: {st:?}");
    let bad = bad.into_inner();
    if bad > 0 {
        return Err(format!("{cc:?}: {bad} committed audits saw a wrong total"));
    }
    let sum: u64 = dump(&db).values().map(|v| balance(v)).sum();
    if sum != ACCOUNTS * START {
        return Err(format!("{cc:?}: final total {sum}"));
    }
    Ok(())
}

#[test]
fn transfers_stay_consistent_while_ranges_leave_and_load() {
    for cc in Cc::ALL {
        bank(cc).unwrap();
    }
}

/// Scans under a cache of one byte, while a writer inserts new keys into the gaps: every
/// key range leaves after each transaction, so a scan reads range by range, each chunk
/// stopping where the next range is not in memory. A writer's transaction inserts one new
/// key or deletes one, and sets a counter to the number of such keys present; a committed
/// scan that read the counter as `n` must have seen exactly `n` of them. A chunk that left
/// the gap before an unloaded range unguarded until the next chunk let an insert into it
/// commit between the two (a phantom: CI met it once as a 2PL wait-die dependency cycle).
fn phantoms(cc: Cc, unguarded: bool, scanning: Duration) -> Result<(), String> {
    const PRESENT: u64 = 64;
    let dir = tempfile::tempdir().unwrap();
    let mut o = opts(cc, 1, false);
    o.store.checkpoint_bytes = 8 << 10;
    o.plants.scan_gap_unguarded = unguarded;
    // The planted run writes faster.
    let think = if unguarded { 200 } else { 2000 };
    let db = Db::create(dir.path(), o).unwrap();
    db.run(|t| {
        for n in 0..PRESENT {
            t.put(key(2 * n), b"present")?;
        }
        t.put(b"z-count", 0u64.to_be_bytes())
    })
    .unwrap();
    let (bad, committed, attempts) = (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
    let finished = AtomicU64::new(0);
    std::thread::scope(|s| {
        let (db, bad, committed, attempts) = (&db, &bad, &committed, &attempts);
        let finished = &finished;
        s.spawn(move || {
            let mut rng = StdRng::seed_from_u64(7);
            let mut present = vec![false; PRESENT as usize];
            let mut count = 0u64;
            while finished.load(Ordering::Relaxed) < 2 {
                // An odd key goes in, or out again: the gaps keep changing.
                let n = rng.random_range(0..PRESENT) as usize;
                let now = if present[n] { count - 1 } else { count + 1 };
                db.run(|t| {
                    if present[n] {
                        t.delete(key(2 * n as u64 + 1))?;
                    } else {
                        t.put(key(2 * n as u64 + 1), b"new")?;
                    }
                    t.put(b"z-count", now.to_be_bytes())
                })
                .unwrap();
                present[n] = !present[n];
                count = now;
                // Pauses let the optimistic protocols' long scans commit too.
                std::thread::sleep(Duration::from_micros(rng.random_range(0..think)));
            }
        });
        for _ in 0..2 {
            s.spawn(move || {
                // The writer stops once both scanners ended, even by a panic.
                struct Finished<'a>(&'a AtomicU64);
                impl Drop for Finished<'_> {
                    fn drop(&mut self) {
                        self.0.fetch_add(1, Ordering::Relaxed);
                    }
                }
                let _finished = Finished(finished);
                let deadline = std::time::Instant::now() + scanning;
                while std::time::Instant::now() < deadline && !(unguarded && bad.load(Ordering::Relaxed) > 0) {
                    attempts.fetch_add(1, Ordering::Relaxed);
                    let t = db.begin();
                    let read = (|| {
                        let rows = t.range(b"k"..b"l").collect::<Result<Vec<_>, Error>>()?;
                        let seen = rows.iter().filter(|(_, v)| v != b"present").count() as u64;
                        let count = u64::from_be_bytes(t.get(b"z-count")?.unwrap().try_into().unwrap());
                        Ok::<_, Error>((seen, count))
                    })();
                    match read.and_then(|r| t.commit().map(|()| r)) {
                        Ok((seen, count)) => {
                            committed.fetch_add(1, Ordering::Relaxed);
                            if seen != count {
                                bad.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        Err(e) if e.is_retryable() => {}
                        Err(e) => panic!("{e}"),
                    }
                }
            });
        }
    });
    let st = db.cache_stats().unwrap();
    assert!(st.evictions > 10, "{cc:?}: the cache was not exercised: {st:?}");
    let committed = committed.into_inner();
    let attempts = attempts.into_inner();
    eprintln!("{cc:?}: {committed} of {attempts}, bad {}", bad.load(Ordering::Relaxed));
    assert!(committed >= 10, "{cc:?}: only {committed} of {attempts} scans committed");
    match bad.into_inner() {
        0 => Ok(()),
        n => Err(format!("{cc:?}: {n} of {committed} committed scans disagreed with the count")),
    }
}

#[test]
fn scans_see_no_phantoms_while_ranges_leave_and_load() {
    for cc in Cc::ALL {
        phantoms(cc, false, Duration::from_secs(3)).unwrap();
    }
}

/// The planted bug: the gap before a range not in memory is left unguarded between two
/// chunks. 2PL NoWait's scans commit most often; up to 120 s, stopping at the first
/// phantom (here within 3-5 s; one CI run beside the other tests saw none in 40 s).
#[test]
fn planted_unguarded_scan_gap_is_caught() {
    let r = phantoms(Cc::TwoPl(tsumiki::LockWait::NoWait), true, Duration::from_secs(120));
    assert!(r.is_err(), "an unguarded gap between scan chunks went unnoticed");
}

/// Pages read back after a reopen leave memory whole: a range of up to twice the split
/// size is not cut (each cut publishes a new range map: a verify pass over 10M records
/// took 80 s instead of 6 when every eviction of a loaded page split it and a split
/// copied the whole map).
#[test]
fn reloaded_pages_leave_without_splitting() {
    let dir = tempfile::tempdir().unwrap();
    let n = 20_000u64;
    {
        let db = Db::create(dir.path(), Options::default()).unwrap();
        for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
            db.run(|t| chunk.iter().try_for_each(|&i| t.put(key(i), value(i, 0, 48)))).unwrap();
        }
        db.close().unwrap();
    }
    // 512 KiB: ranges split at 128 records; the pages hold more, and at most twice that.
    let db = Db::create(dir.path(), opts(Cc::TicToc, 512 << 10, false)).unwrap();
    let pages = db.store_stats().unwrap().pages as usize;
    let per_page = n as usize / pages;
    assert!((129..=256).contains(&per_page), "{per_page} records a page: the test needs 129..=256");
    for _ in 0..2 {
        assert_eq!(dump(&db).len(), n as usize);
    }
    let cache = db.cache_stats().unwrap();
    assert!(cache.evictions > pages as u64, "{} evictions of {pages} pages", cache.evictions);
    assert!(cache.ranges <= pages + 1, "{} ranges for {pages} pages", cache.ranges);
    db.close().unwrap();
}

/// The records leave a checkpoint's three buffers (a sixteenth of the cache each) room in
/// the cache: the buffers came on top of it before, and the resident set passed the
/// bound of cache, translation table and 10%.
#[test]
fn records_leave_room_for_the_checkpoint_buffers() {
    let dir = tempfile::tempdir().unwrap();
    let cache = 1 << 20;
    let db = Db::create(dir.path(), opts(Cc::TicToc, cache, false)).unwrap();
    for chunk in (0..20_000u64).collect::<Vec<_>>().chunks(500) {
        db.run(|t| chunk.iter().try_for_each(|&i| t.put(key(i), value(i, 0, 100)))).unwrap();
    }
    db.checkpoint().unwrap();
    assert_eq!(dump(&db).len(), 20_000);
    let c = db.cache_stats().unwrap();
    assert_eq!(c.budget, cache / 16 * 13);
    assert!(c.evictions > 0 && c.resident_bytes <= c.budget as i64, "{c:?}");
    db.close().unwrap();
}

/// A transaction whose write set is past the size it scans (it then finds a key's entry
/// by hashing the key) reads its own writes back after every record it wrote left memory
/// under it, rewrites them, and commits each key's last value.
#[test]
fn a_big_write_set_keeps_its_writes_of_evicted_records() {
    let n = 40u64;
    for cc in [Cc::TicToc, Cc::Silo] {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::create(dir.path(), opts(cc, 1, false)).unwrap();
        db.run(|t| (0..n).try_for_each(|i| t.put(key(i), value(i, 0, 100)))).unwrap();
        let (written, evicted) = (Barrier::new(2), Barrier::new(2));
        let evictions = std::thread::scope(|s| {
            let writer = s.spawn(|| {
                let mut t = db.begin();
                for i in 0..n {
                    t.put(key(i), value(i, 1, 100)).unwrap();
                }
                written.wait();
                evicted.wait();
                for i in 0..n {
                    assert_eq!(t.get(key(i)).unwrap(), Some(value(i, 1, 100)), "{cc:?}: own write of key {i}");
                    t.put(key(i), value(i, 2, 100)).unwrap();
                    assert_eq!(t.get(key(i)).unwrap(), Some(value(i, 2, 100)), "{cc:?}: rewrite of key {i}");
                }
                t.commit().unwrap();
            });
            written.wait();
            let before = db.cache_stats().unwrap().evictions;
            db.checkpoint().unwrap();
            db.run(|t| t.get(key(n + 1))).unwrap();
            let evictions = db.cache_stats().unwrap().evictions - before;
            evicted.wait();
            writer.join().unwrap();
            evictions
        });
        assert!(evictions > 0, "{cc:?}: nothing left memory under the writer");
        let want: BTreeMap<_, _> = (0..n).map(|i| (key(i), value(i, 2, 100))).collect();
        assert_eq!(dump(&db), want, "{cc:?}");
        db.close().unwrap();
    }
}
