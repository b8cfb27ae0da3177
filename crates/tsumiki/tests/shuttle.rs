//! Model checking of the Bw-tree's CAS protocols with shuttle. Built with the `shuttle`
//! feature, every slot and `next`-pointer access of the tree is a scheduling point, and
//! shuttle's randomized and PCT schedulers explore interleavings of delta installs,
//! consolidations, splits, merges and their helping across threads.
//!
//! Run: `cargo test -p tsumiki --release --features shuttle --test shuttle`.
#![cfg(feature = "shuttle")]

mod common;

use common::{key, variants};
use shuttle::thread;
use std::sync::Arc;
use tsumiki::index::{BwTree, BwTreeConfig};

const ITERATIONS: usize = 300;

/// Two threads insert interleaved keys into one tiny leaf: installs race, the leaf
/// consolidates and splits (growing a root) while the other thread installs deltas.
fn insert_race(cfg: BwTreeConfig) {
    let tree = Arc::new(BwTree::with_config(cfg).unwrap());
    let hs: Vec<_> = (0..2u64)
        .map(|t| {
            let tree = Arc::clone(&tree);
            thread::spawn(move || {
                for i in 0..6u64 {
                    assert!(tree.insert(&key(i * 2 + t, 8), i).unwrap());
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    let got: Vec<Vec<u8>> = tree.scan(b"", None).map(|(k, _)| k).collect();
    let want: Vec<Vec<u8>> = (0..12u64).map(|i| key(i, 8)).collect();
    assert_eq!(got, want);
}

/// Deletes race with inserts on neighbouring leaves, so merges (remove, parent index-delete,
/// merge delta) interleave with splits and with each other, and threads help.
fn merge_split_race(cfg: BwTreeConfig) {
    let tree = Arc::new(BwTree::with_config(cfg).unwrap());
    for i in 0..16u64 {
        tree.insert(&key(i, 8), i).unwrap();
    }
    let deleter = {
        let tree = Arc::clone(&tree);
        thread::spawn(move || {
            for i in 0..10u64 {
                assert!(tree.delete(&key(i, 8)).unwrap());
            }
        })
    };
    let inserter = {
        let tree = Arc::clone(&tree);
        thread::spawn(move || {
            for i in 16..24u64 {
                assert!(tree.insert(&key(i, 8), i).unwrap());
            }
        })
    };
    let reader = {
        let tree = Arc::clone(&tree);
        thread::spawn(move || {
            // Keys 10..16 are never touched: every read and scan must see them.
            for i in 10..16u64 {
                assert_eq!(tree.get(&key(i, 8)).unwrap(), Some(i));
            }
            let seen: Vec<Vec<u8>> = tree.scan(&key(10, 8), Some(&key(16, 8))).map(|(k, _)| k).collect();
            assert_eq!(seen, (10..16u64).map(|i| key(i, 8)).collect::<Vec<_>>());
        })
    };
    for h in [deleter, inserter, reader] {
        h.join().unwrap();
    }
    let got: Vec<Vec<u8>> = tree.scan(b"", None).map(|(k, _)| k).collect();
    assert_eq!(got, (10..24u64).map(|i| key(i, 8)).collect::<Vec<_>>());
}

/// A batch rewriting leaves (loads and evictions of a cache) races single inserts and
/// deletes on the same leaves: every change lands exactly once.
fn batch_race(cfg: BwTreeConfig) {
    let tree = Arc::new(BwTree::with_config(cfg).unwrap());
    for i in (0..24u64).step_by(3) {
        tree.insert(&key(i, 8), i).unwrap();
    }
    let batcher = {
        let tree = Arc::clone(&tree);
        thread::spawn(move || {
            // Keys 1, 4, 7, ... inserted as one batch, then keys 0, 6, 12, 18 deleted as one.
            let keys: Vec<Vec<u8>> = (0..8u64).map(|i| key(i * 3 + 1, 8)).collect();
            let batch: Vec<(&[u8], Option<u64>)> =
                keys.iter().zip(0..).map(|(k, i)| (k.as_slice(), Some(i * 3 + 1))).collect();
            let mut added = vec![false; batch.len()];
            tree.apply_batch(&batch, &mut added).unwrap();
            assert!(added.iter().all(|a| *a), "absent keys are added");
            let gone: Vec<Vec<u8>> = (0..4u64).map(|i| key(i * 6, 8)).collect();
            let batch: Vec<(&[u8], Option<u64>)> = gone.iter().map(|k| (k.as_slice(), None)).collect();
            tree.apply_batch(&batch, &mut vec![false; batch.len()]).unwrap();
        })
    };
    let writer = {
        let tree = Arc::clone(&tree);
        thread::spawn(move || {
            for i in (0..8u64).map(|i| i * 3 + 2) {
                assert!(tree.insert(&key(i, 8), i).unwrap());
            }
            for i in [3u64, 9, 15, 21] {
                assert!(tree.delete(&key(i, 8)).unwrap());
            }
        })
    };
    for h in [batcher, writer] {
        h.join().unwrap();
    }
    let got: Vec<(Vec<u8>, u64)> = tree.scan(b"", None).collect();
    let want: Vec<(Vec<u8>, u64)> = (0..24u64).filter(|i| i % 3 != 0).map(|i| (key(i, 8), i)).collect();
    assert_eq!(got, want);
}

/// With the planted non-atomic install, shuttle must find a lost update.
/// Ignored in the plain run: a lost install leaves freed nodes in the epoch collector's
/// global garbage, which crashes whatever test of the same process collects it next. CI runs
/// it alone: `cargo test -p tsumiki-db --release --features shuttle --test shuttle --
/// --ignored --exact shuttle_catches_planted_bug`.
#[test]
#[ignore = "run alone (the plant corrupts the process's epoch garbage): -- --ignored --exact"]
fn shuttle_catches_planted_bug() {
    tsumiki::index::plant_nonatomic_install(true);
    let caught = std::panic::catch_unwind(|| {
        shuttle::check_random(|| insert_race(BwTreeConfig::tiny()), ITERATIONS);
    });
    tsumiki::index::plant_nonatomic_install(false);
    assert!(caught.is_err(), "shuttle did not catch the planted non-atomic delta install");
}

/// Explores `scenario` for every improvement combination, with the random scheduler or
/// with PCT (depth 3).
/// Two threads insert the same keys through cursors that first looked each key up (an
/// insert at the head where that lookup found the key absent skips its own lookup): every
/// key is inserted by exactly one of them, and holds that one's value, while the leaf
/// consolidates and splits under both.
fn cursor_insert_race(cfg: BwTreeConfig) {
    let tree = Arc::new(BwTree::with_config(cfg).unwrap());
    let hs: Vec<_> = (0..2u64)
        .map(|t| {
            let tree = Arc::clone(&tree);
            thread::spawn(move || {
                (0..6u64)
                    .map(|i| {
                        let k = key(i, 8);
                        let guard = crossbeam_epoch::pin();
                        let mut c = tree.cursor(&k, &guard);
                        let _ = c.first_from(false);
                        c.insert(t * 100 + i).unwrap()
                    })
                    .collect::<Vec<bool>>()
            })
        })
        .collect();
    let won: Vec<Vec<bool>> = hs.into_iter().map(|h| h.join().unwrap()).collect();
    for i in 0..6u64 {
        assert!(won[0][i as usize] != won[1][i as usize], "key {i}: inserted by both or neither: {won:?}");
        let t = if won[0][i as usize] { 0 } else { 1 };
        assert_eq!(tree.get(&key(i, 8)).unwrap(), Some(t * 100 + i));
    }
}

fn explore(scenario: fn(BwTreeConfig), pct: bool) {
    for (_, cfg) in variants(BwTreeConfig::tiny()) {
        let run = move || scenario(cfg.clone());
        if pct {
            shuttle::check_pct(run, ITERATIONS, 3);
        } else {
            shuttle::check_random(run, ITERATIONS);
        }
    }
}

#[test]
fn shuttle_insert_race_random() {
    explore(insert_race, false);
}

#[test]
fn shuttle_insert_race_pct() {
    explore(insert_race, true);
}

#[test]
fn shuttle_merge_split_race_random() {
    explore(merge_split_race, false);
}

#[test]
fn shuttle_merge_split_race_pct() {
    explore(merge_split_race, true);
}

#[test]
fn shuttle_cursor_insert_race_random() {
    explore(cursor_insert_race, false);
}

#[test]
fn shuttle_cursor_insert_race_pct() {
    explore(cursor_insert_race, true);
}

#[test]
fn shuttle_batch_race_random() {
    explore(batch_race, false);
}

#[test]
fn shuttle_batch_race_pct() {
    explore(batch_race, true);
}
