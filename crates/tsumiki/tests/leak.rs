//! No leak: after heavy concurrent churn (splits, merges, consolidations, root changes) and
//! dropping the tree, live heap memory returns to the baseline once the epoch garbage is
//! collected. A counting global allocator measures it.

mod common;

use std::sync::atomic::Ordering;

use common::{key, variants};
use tsumiki::index::{BwTree, BwTreeConfig};

#[path = "common/counting.rs"]
mod counting;
use counting::{Counting, LIVE};

#[global_allocator]
static ALLOC: Counting = Counting;

fn collect_garbage() {
    counting::collect_garbage(rounds());
}

fn rounds() -> usize {
    if cfg!(miri) {
        128
    } else {
        2048
    }
}

/// Live bytes above `baseline` after collecting (waiting up to 5 s for them to fall under
/// the 64 KiB the epoch collector may keep for itself).
fn live_after_drop(baseline: isize) -> isize {
    counting::live_after_collecting(
        baseline,
        64 * 1024,
        rounds(),
        std::time::Duration::from_secs(if cfg!(miri) { 0 } else { 5 }),
    )
}

/// The tests of this file measure one global counter: they must not run at once.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn memory_returns_to_baseline_after_churn_and_drop() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let n: u64 = if cfg!(miri) { 12 } else { 3000 };
    // Warm up the epoch machinery (its own thread-local and global structures).
    for _ in 0..4 {
        std::thread::spawn(collect_garbage).join().unwrap();
    }
    collect_garbage();
    let baseline = LIVE.load(Ordering::SeqCst);
    let mut peak = 0;
    for (name, cfg) in variants(BwTreeConfig::tiny()) {
        let tree = BwTree::with_config(cfg).unwrap();
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let tree = &tree;
                s.spawn(move || {
                    for round in 0..3u64 {
                        for i in 0..n {
                            tree.upsert(&key(i * 4 + t, 8), vec![round as u8; 16]).unwrap();
                        }
                        for i in 0..n {
                            if i % 3 != 0 {
                                tree.delete(&key(i * 4 + t, 8)).unwrap();
                            }
                        }
                        assert!(tree.scan(b"", None).count() > 0);
                    }
                });
            }
        });
        let s = tree.stats();
        assert!(s.splits > 10 && s.merges > 10 || cfg!(miri), "{name}: {s:?}");
        peak = peak.max(LIVE.load(Ordering::SeqCst) - baseline);
        drop(tree);
        let live = live_after_drop(baseline);
        // The epoch collector keeps a few bookkeeping blocks of its own; a leaked tree would
        // leave megabytes.
        // (Under Miri the garbage may need more epochs than we spend there; leaks are then
        // still reported by Miri itself at exit.)
        assert!(live < 64 * 1024 || cfg!(miri), "{name}: {live} bytes still live after drop (peak {peak})");
    }
    assert!(peak > 256 * 1024 || cfg!(miri), "the churn should have used real memory (peak {peak})");
}

/// A bulk-loaded tree (and an abandoned builder) frees everything: after drop alone, and
/// after writes that split, merge and consolidate its nodes.
#[test]
fn bulk_loaded_tree_frees_everything() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let n: u64 = if cfg!(miri) { 40 } else { 20_000 };
    for _ in 0..4 {
        std::thread::spawn(collect_garbage).join().unwrap();
    }
    collect_garbage();
    let baseline = LIVE.load(Ordering::SeqCst);
    for (name, cfg) in variants(BwTreeConfig::tiny()).into_iter().chain([("default", BwTreeConfig::default())]) {
        for churn in [false, true] {
            let tree = BwTree::from_sorted(cfg.clone(), (0..n).map(|i| (key(i * 2, 8), vec![i as u8; 16]))).unwrap();
            let loaded = LIVE.load(Ordering::SeqCst) - baseline;
            assert!(loaded > n as isize * 16 || cfg!(miri), "{name}: the tree should hold real memory ({loaded})");
            if churn {
                for i in 0..n {
                    tree.upsert(&key(i * 2 + 1, 8), vec![1; 8]).unwrap();
                }
                // Nine keys in ten: leaves fall under the merge threshold.
                for i in 0..2 * n {
                    if i % 10 != 0 {
                        tree.delete(&key(i, 8)).unwrap();
                    }
                }
                let s = tree.stats();
                assert!(s.splits > 0 && s.merges > 0 || cfg!(miri), "{name}: {s:?}");
            }
            drop(tree);
            let live = live_after_drop(baseline);
            assert!(live < 64 * 1024 || cfg!(miri), "{name} churn {churn}: {live} bytes still live after drop");
        }
        // A builder dropped half-way (leaves in the table, records still pending).
        let mut b = tsumiki::index::BwTreeBuilder::new(cfg.clone()).unwrap();
        for i in 0..n / 2 {
            b.push(&key(i, 8), vec![0u8; 16]).unwrap();
        }
        drop(b);
        let live = live_after_drop(baseline);
        assert!(live < 64 * 1024 || cfg!(miri), "{name}: abandoned builder leaves {live} bytes");
    }
}
