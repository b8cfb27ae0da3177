//! MVCC-SI version garbage collection (paper 000): a long reader keeps its snapshot while
//! writers churn; while it runs, chains stay short under EPO and EPO-R and grow under AOT;
//! after it ends, versions and heap memory return to the baseline. A counting global
//! allocator measures the heap.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tsumiki::{Cc, Db, Gc, Options};

#[path = "common/counting.rs"]
mod counting;
use counting::{Counting, LIVE};

#[global_allocator]
static ALLOC: Counting = Counting;

const KEYS: u64 = 16;
const REFRESH: Duration = Duration::from_millis(5);

fn kb(n: u64) -> [u8; 8] {
    n.to_be_bytes()
}

fn collect_garbage() {
    counting::collect_garbage(256);
}

/// Reads and rewrites every key once, after the active lists have gone stale, so that
/// every chain is pruned with a fresh list (a read prunes under EPO-R, a write under
/// AOT and EPO).
fn touch_all(db: &Db, value: u64) {
    std::thread::sleep(REFRESH * 3);
    for k in 0..KEYS {
        db.run(|t| t.update(kb(k), kb(value)).map(|_| ())).unwrap();
    }
}

/// Runs the scenario under `gc`; returns the versions held while the long reader was
/// active (after a pruning pass), and checks everything else.
fn long_reader_scenario(gc: Gc) -> i64 {
    let mut opts = Options::with_cc(Cc::MvccSi(gc));
    opts.gc_refresh = REFRESH;
    let db = Db::open_in_memory(opts).unwrap();
    db.run(|t| {
        for k in 0..KEYS {
            t.put(kb(k), kb(0))?;
        }
        Ok(())
    })
    .unwrap();
    touch_all(&db, 0);
    collect_garbage();
    let base_versions = db.gc_stats().unwrap().versions;
    let base_heap = LIVE.load(Ordering::SeqCst);

    // The long reader's snapshot: every key at 0.
    let reader = std::thread::scope(|s| {
        let (to_reader, reader_rx) = std::sync::mpsc::channel::<bool>();
        let (from_reader, main_rx) = std::sync::mpsc::channel::<()>();
        let db = &db;
        let reader = s.spawn(move || {
            let txn = db.begin();
            let snapshot: Vec<_> = (0..KEYS).map(|k| txn.get(kb(k)).unwrap()).collect();
            from_reader.send(()).unwrap();
            // Re-read on request, until told to finish.
            while let Ok(again) = reader_rx.recv() {
                let now: Vec<_> = (0..KEYS).map(|k| txn.get(kb(k)).unwrap()).collect();
                assert_eq!(now, snapshot, "{gc:?}: the long reader's snapshot changed");
                from_reader.send(()).unwrap();
                if !again {
                    break;
                }
            }
            txn.commit().unwrap();
        });
        main_rx.recv().unwrap();
        // Writers churn: two threads, many small updates.
        std::thread::scope(|w| {
            for t in 0..2u64 {
                w.spawn(move || {
                    for i in 0..3000u64 {
                        let k = (i * 7 + t) % KEYS;
                        db.run(|txn| {
                            let v = txn.get(kb(k))?.unwrap();
                            txn.put(kb(k), kb(u64::from_be_bytes(v.try_into().unwrap()) + 1))
                        })
                        .unwrap();
                    }
                });
            }
        });
        to_reader.send(true).unwrap();
        main_rx.recv().unwrap();
        touch_all(db, 1);
        let during = db.gc_stats().unwrap().versions;
        to_reader.send(false).unwrap();
        main_rx.recv().unwrap();
        reader.join().unwrap();
        during
    });

    // The reader is gone: a pruning pass brings versions back to the baseline.
    touch_all(&db, 2);
    touch_all(&db, 3);
    collect_garbage();
    let s = db.gc_stats().unwrap();
    if gc != Gc::None {
        assert!(
            s.versions <= base_versions + KEYS as i64,
            "{gc:?}: {} versions after the reader ended, baseline {base_versions}",
            s.versions
        );
        let heap = LIVE.load(Ordering::SeqCst) - base_heap;
        // Versions are about 50 bytes each: a leak of the 6000 churned ones would be 300 KB.
        assert!(heap < 64 * 1024, "{gc:?}: heap {heap} bytes above the baseline after the reader ended ({s:?})");
        assert!(s.reclaimed >= 6000, "{gc:?}: only {} versions reclaimed", s.reclaimed);
    }
    reader
}

#[test]
fn long_reader_keeps_snapshot_and_gc_bounds_chains() {
    let aot = long_reader_scenario(Gc::Aot);
    let epo = long_reader_scenario(Gc::Epo);
    let epo_r = long_reader_scenario(Gc::EpoR);
    let none = long_reader_scenario(Gc::None);
    println!("versions held with the long reader active: aot {aot} epo {epo} epo-r {epo_r} none {none}");
    // While the reader is active, AOT cannot reclaim anything newer than what the reader
    // sees: the churned versions stay. EPO and EPO-R keep about three per key (the reader's,
    // the list's newest, and the head).
    assert!(aot >= 6000, "AOT held only {aot} versions with a long reader active");
    assert!(none >= 6000, "no GC held only {none} versions");
    for (name, v) in [("EPO", epo), ("EPO-R", epo_r)] {
        assert!(v <= 4 * KEYS as i64, "{name} held {v} versions with a long reader active (AOT: {aot})");
    }
}
