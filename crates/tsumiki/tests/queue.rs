//! A queue drained from both ends by concurrent transactions of many pops, with producers
//! adding records at both ends, under every protocol: each record is popped by exactly
//! one committed transaction, and none is lost. A transaction's pops in one direction go
//! on with the scan the pop before left (`db/engine/remove.rs`), so a record it read ahead
//! may be popped or joined by others before it pops it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use rand::{RngExt, SeedableRng};
use tsumiki::{Cc, Db, Error, Options};

const THREADS: u64 = 4;
const INITIAL: u64 = 3000;

/// Keys: the initial records in the middle, producers' records below and above them.
fn key(n: u64) -> [u8; 8] {
    n.to_be_bytes()
}

/// Runs the queue; returns each popped key with the transaction that popped it (more than
/// one on a double pop), and the keys put.
fn drain(cc: Cc, planted: bool, seed: u64) -> (HashMap<u64, Vec<u64>>, Vec<u64>) {
    let mut opts = Options::with_cc(cc);
    opts.plants.skip_validation = planted;
    let db = Db::open_in_memory(opts).unwrap();
    let base = 1u64 << 40;
    db.run(|t| (0..INITIAL).try_for_each(|i| t.put(key(base + i), [1]))).unwrap();
    let popped: Mutex<HashMap<u64, Vec<u64>>> = Mutex::new(HashMap::new());
    let put: Mutex<Vec<u64>> = Mutex::new((0..INITIAL).map(|i| base + i).collect());
    let txn_ids = AtomicU64::new(0);
    std::thread::scope(|s| {
        for th in 0..THREADS {
            let (db, popped, put, txn_ids) = (&db, &popped, &put, &txn_ids);
            s.spawn(move || {
                let mut rng = rand::rngs::StdRng::seed_from_u64(seed * 31 + th);
                let mut low = base - 1 - th * (1 << 20);
                let mut high = base + INITIAL + th * (1 << 20);
                for _ in 0..150 {
                    let id = txn_ids.fetch_add(1, Ordering::Relaxed);
                    let mut t = db.begin();
                    let (mut mine, mut added) = (Vec::new(), Vec::new());
                    let pops = rng.random_range(1..=24);
                    let r: Result<(), Error> = (|| {
                        for _ in 0..pops {
                            match rng.random_range(0..10) {
                                // A producer's record at the front or the back: the next
                                // pop in that direction must not miss it.
                                0 => {
                                    t.put(key(low), [2])?;
                                    added.push(low);
                                    low -= 1;
                                }
                                1 => {
                                    t.put(key(high), [2])?;
                                    added.push(high);
                                    high += 1;
                                }
                                n => {
                                    let row = if n < 6 { t.pop_first()? } else { t.pop_last()? };
                                    if let Some((k, _)) = row {
                                        mine.push(u64::from_be_bytes(k.try_into().unwrap()));
                                    }
                                }
                            }
                        }
                        Ok(())
                    })();
                    if r.is_ok() && t.commit().is_ok() {
                        let mut p = popped.lock().unwrap();
                        for k in mine {
                            p.entry(k).or_default().push(id);
                        }
                        put.lock().unwrap().extend(added);
                    }
                }
            });
        }
    });
    // What is left: popped by one last transaction, which must find every record not
    // popped yet.
    let rest: Vec<u64> = db
        .run(|t| {
            let mut rest = Vec::new();
            while let Some((k, _)) = t.pop_first()? {
                rest.push(u64::from_be_bytes(k.try_into().unwrap()));
            }
            Ok(rest)
        })
        .unwrap();
    let mut popped = popped.into_inner().unwrap();
    // The concurrent transactions did pop (the last one alone would pass the check).
    let by_many: usize = popped.values().map(Vec::len).sum();
    assert!(by_many >= 100, "{cc:?}: only {by_many} records popped concurrently");
    for k in rest {
        popped.entry(k).or_default().push(u64::MAX);
    }
    (popped, put.into_inner().unwrap())
}

/// Every key put popped exactly once, and nothing else popped.
fn check(popped: &HashMap<u64, Vec<u64>>, put: &[u64]) -> Result<(), String> {
    if let Some((k, by)) = popped.iter().find(|(_, by)| by.len() > 1) {
        return Err(format!("key {k:#x} popped by {} committed transactions ({by:?})", by.len()));
    }
    if let Some(k) = put.iter().find(|k| !popped.contains_key(k)) {
        return Err(format!("key {k:#x} was put and never popped"));
    }
    if popped.len() != put.len() {
        return Err(format!("{} keys popped, {} put", popped.len(), put.len()));
    }
    Ok(())
}

#[test]
fn every_record_is_popped_once_under_every_protocol() {
    for cc in Cc::ALL {
        for seed in 0..3 {
            let (popped, put) = drain(cc, false, seed);
            if let Err(e) = check(&popped, &put) {
                panic!("{cc:?} seed {seed}: {e}");
            }
        }
    }
}

/// With validation skipped, concurrent pops take the same record: the check sees it.
#[test]
fn planted_skipped_validation_pops_twice() {
    for cc in [Cc::TicToc, Cc::Silo] {
        let caught = (0..10).any(|seed| {
            let (popped, put) = drain(cc, true, seed);
            check(&popped, &put).is_err()
        });
        assert!(caught, "{cc:?}: no double pop in 10 runs with validation skipped");
    }
}
