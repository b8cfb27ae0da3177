//! The page store's unit tests.

use super::*;
use crate::storage::DirStorage;

fn key(i: u64) -> Vec<u8> {
    format!("key{i:08}").into_bytes()
}

/// The store's whole state.
fn contents(store: &PageStore) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut got = BTreeMap::new();
    store
        .load_all(&[], &mut |k, v| {
            got.insert(k.to_vec(), v.to_vec());
            Ok(())
        })
        .unwrap();
    got
}

/// Passes touching hundreds of pages (prepared by helper threads, in chunks, ahead of
/// the appends) and a page with more changes than a helper prepares (read a batch at
/// a time by the pass) leave the pages equal to a model, through deltas,
/// consolidations, splits and emptied pages, and after reopening from the table.
#[test]
fn passes_prepared_by_helpers_agree_with_a_model() {
    let dir = tempfile::tempdir().unwrap();
    let storage: Arc<dyn Storage> = Arc::new(DirStorage::new(dir.path()).unwrap());
    let mut store = PageStore::open(storage.clone(), 1 << 20, None, false).unwrap();
    store.set_helpers(3);
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = (0..40_000).map(|i| (key(i * 2), vec![b'a'; 40])).collect();
    store
        .rebuild(1, &mut |f| {
            for (k, v) in &model {
                f(k, v)?;
            }
            Ok(())
        })
        .unwrap();
    let mut table = store.write_table().unwrap();
    store.commit();
    assert!(store.pages.len() > 2 * PARALLEL_MIN_PAGES, "{} pages", store.pages.len());
    let mut rng = crate::storage::SimRng::new(7);
    for gen in 2..12u64 {
        let mut changes: BTreeMap<Vec<u8>, Option<Vec<u8>>> = BTreeMap::new();
        for _ in 0..10_000 {
            let k = key(rng.below(80_000));
            let v = match rng.below(4) {
                0 => None,
                n => Some(vec![b'a' + gen as u8; 10 * n as usize]),
            };
            changes.insert(k, v);
        }
        if gen == 5 {
            // Past what a helper prepares, all in the last page.
            for i in 0..3 * PREPARE_MAX_CHANGES as u64 {
                changes.insert(format!("zz{i:06}").into_bytes(), Some(vec![b'z'; 30]));
            }
        }
        for (k, v) in &changes {
            match v {
                Some(v) => model.insert(k.clone(), v.clone()),
                None => model.remove(k),
            };
        }
        let changes: Vec<Change> = changes.into_iter().collect();
        store.apply(gen, &changes.as_slice(), None).unwrap();
        table = store.write_table().unwrap();
        store.commit();
        assert_eq!(contents(&store), model, "after generation {gen}");
    }
    drop(store);
    let store = PageStore::open(storage, 1 << 20, Some(table), false).unwrap();
    assert_eq!(contents(&store), model, "reopened");
}

/// Consecutive page ids (a fill's pages) get delta limits spread over 1/2..3/2 of
/// the base's share, so they do not all consolidate in the same checkpoint.
#[test]
fn delta_limits_spread_over_consecutive_pages() {
    let base = 8 * PAGE_TARGET as u64;
    let nominal = base * DELTA_SHARE.0 / DELTA_SHARE.1;
    let limits: Vec<u64> = (1..=1000).map(|pid| delta_limit(pid, base)).collect();
    assert!(limits.iter().all(|&l| l >= nominal / 2 && l < nominal * 3 / 2), "{limits:?}");
    // Each tenth of the range holds some pages (a constant factor fails this).
    let mut tenths = [0u32; 10];
    for &l in &limits {
        tenths[((l - nominal / 2) * 10 / nominal) as usize] += 1;
    }
    assert!(tenths.iter().all(|&n| n >= 50), "{tenths:?}");
    // Small bases keep the floor.
    assert_eq!(delta_limit(7, 0), PAGE_TARGET as u64 / 8);
}

/// The byte counters split what was written: every table image's length in
/// `table_bytes`, every delta's in `delta_bytes` (bases count in neither), all within
/// `written_bytes`.
#[test]
fn stats_count_delta_and_table_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let storage: Arc<dyn Storage> = Arc::new(DirStorage::new(dir.path()).unwrap());
    let mut store = PageStore::open(storage, 1 << 20, None, false).unwrap();
    store
        .rebuild(1, &mut |f| {
            for i in 0..2_000 {
                f(&key(i), &[b'a'; 40])?;
            }
            Ok(())
        })
        .unwrap();
    let mut tables = u64::from(store.write_table().unwrap().len);
    store.commit();
    let after_rebuild = store.stats();
    assert_eq!((after_rebuild.delta_bytes, after_rebuild.table_bytes), (0, tables));
    assert!(after_rebuild.bases_written > 1);
    // One small change per generation: a delta each time, until the page consolidates.
    let mut deltas = 0;
    for gen in 2..5u64 {
        let changes: Vec<Change> = vec![(key(7), Some(vec![b'b' + gen as u8; 40]))];
        let before = store.stats();
        store.apply(gen, &changes.as_slice(), None).unwrap();
        tables += u64::from(store.write_table().unwrap().len);
        store.commit();
        let s = store.stats();
        assert_eq!(s.deltas_written - before.deltas_written, 1, "generation {gen}");
        assert!(s.delta_bytes - before.delta_bytes > 40, "generation {gen}: {s:?}");
        deltas += s.delta_bytes - before.delta_bytes;
    }
    let s = store.stats();
    assert_eq!((s.delta_bytes, s.table_bytes, s.relocated_bytes), (deltas, tables, 0));
    assert!(s.delta_bytes + s.table_bytes < s.written_bytes, "{s:?}");
}

/// The value of the records the deletion tests fill their stores with.
const VALUE: [u8; 150] = [b'v'; 150];

/// A store in `dir` (segments of `segment` bytes) holding `key(0..n)` with [`VALUE`], its
/// table written and current; with its storage and that table.
fn filled_store(dir: &std::path::Path, segment: u64, n: u64) -> (Arc<dyn Storage>, PageStore, ImageRef) {
    let storage: Arc<dyn Storage> = Arc::new(DirStorage::new(dir).unwrap());
    let mut store = PageStore::open(storage.clone(), segment, None, false).unwrap();
    store.rebuild(1, &mut |f| (0..n).try_for_each(|i| f(&key(i), &VALUE))).unwrap();
    let table = store.write_table().unwrap();
    store.commit();
    (storage, store, table)
}

/// Deletes that leave pages mostly empty get those pages rewritten, after one wave and a
/// few at a time: each marker counts the base entry it removes (`Page::dead`), which the
/// table keeps across a reopen, and the next checkpoint rewrites the pages that are due
/// (this store is small enough to take them at once). Counting only the markers' own
/// bytes kept every base whole: 2x to 10x the remaining data.
#[test]
fn mostly_deleted_pages_are_rewritten() {
    let dir = tempfile::tempdir().unwrap();
    let n = 20_000u64;
    let (storage, mut store, mut table) = filled_store(dir.path(), 1 << 20, n);
    let value = VALUE;
    let entry = (key(0).len() + value.len()) as f64;
    let mut left = n;
    // A wave of deletes (three in four records), then a few per page per generation
    // (half of what is left, over ten generations), with a reopen half-way.
    let waves: Vec<Vec<u64>> = std::iter::once((0..n).filter(|i| i % 4 != 0).collect())
        .chain((0..10u64).map(|w| (0..n).filter(|i| i % 4 == 0 && (i / 4) % 20 == 2 * w).collect()))
        .collect();
    for (gen, (w, gone)) in (2..).zip(waves.iter().enumerate()) {
        let changes: Vec<Change> = gone.iter().map(|&i| (key(i), None)).collect();
        store.set_records(Some(left));
        store.apply(gen, &changes.as_slice(), None).unwrap();
        table = store.write_table().unwrap();
        store.commit();
        left -= gone.len() as u64;
        let live = store.live_bytes() as f64 / (left as f64 * entry);
        // The wave's pages are due at the next checkpoint (the next trickle's).
        assert!(w == 0 || live < 1.6, "after wave {w}: live images {live:.2}x the {left} records left");
        if w == 5 {
            // Mid-way, pages carry dead bytes: the table keeps them.
            assert!(store.pages.iter().any(|p| p.dead > 0));
            drop(store);
            store = PageStore::open(storage.clone(), 1 << 20, Some(table), false).unwrap();
        }
    }
    let want: BTreeMap<Vec<u8>, Vec<u8>> =
        (0..n).filter(|i| i % 4 == 0 && (i / 4) % 20 % 2 == 1).map(|i| (key(i), value.to_vec())).collect();
    assert_eq!(contents(&store), want);
    drop(store);
    let store = PageStore::open(storage, 1 << 20, Some(table), false).unwrap();
    assert_eq!(contents(&store), want, "reopened");
}

/// The pages a mass delete leaves mostly dead are rewritten at cleaning's pace: each
/// checkpoint after the wave (none with changes) writes at most an eighth of the live
/// data (and two segments of slack) for them, and a few checkpoints reach the data left.
/// Rewriting them all in the checkpoint after the wave slowed the commits beside it.
#[test]
fn reclaiming_dead_pages_is_paced() {
    let dir = tempfile::tempdir().unwrap();
    let segment = 64u64 << 10;
    let n = 20_000u64;
    let (_, mut store, _) = filled_store(dir.path(), segment, n);
    let value = VALUE;
    let changes: Vec<Change> = (0..n).filter(|i| i % 4 != 0).map(|i| (key(i), None)).collect();
    store.set_records(Some(n));
    store.apply(2, &changes.as_slice(), None).unwrap();
    store.write_table().unwrap();
    store.commit();
    let left = (n / 4) as f64 * (key(0).len() + value.len()) as f64;
    let none: &[Change] = &[];
    let mut rounds = 0;
    while store.live_bytes() as f64 > 1.6 * left {
        rounds += 1;
        assert!(rounds <= 16, "live images still {:.2}x the data left", store.live_bytes() as f64 / left);
        let (live, before) = (store.live_bytes(), store.stats().written_bytes);
        store.set_records(Some(n / 4));
        store.apply(2 + rounds, &none, None).unwrap();
        store.write_pending().unwrap();
        let wrote = store.stats().written_bytes - before;
        assert!(
            wrote <= live / RELOCATION_SHARE + 2 * segment + PAGE_TARGET as u64 * 2,
            "checkpoint {rounds} after the wave wrote {wrote} bytes of {live} live"
        );
        store.write_table().unwrap();
        store.commit();
    }
    assert!(rounds >= 2, "a store of {} live bytes was reclaimed at once", store.live_bytes());
}

/// Pages that deletes left small are merged as they are reclaimed: after deleting nine
/// records in ten, the pages number about what the records left fill, not what they
/// filled before, with the changes that fall in merged pages (updates, inserts) applied,
/// and the same after a reopen.
#[test]
fn pages_left_small_by_deletes_are_merged() {
    let dir = tempfile::tempdir().unwrap();
    let n = 20_000u64;
    let (storage, mut store, _) = filled_store(dir.path(), 1 << 20, n);
    let value = VALUE;
    let pages_full = store.pages.len();
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = (0..n).map(|i| (key(i), value.to_vec())).collect();
    let gone: Vec<Change> = (0..n).filter(|i| i % 10 != 0).map(|i| (key(i), None)).collect();
    // Then, while the pages are reclaimed: every hundredth record updated, one in fifty
    // of the deleted ones back, and a key that never was after every fiftieth.
    let edits: Vec<Change> = (0..n)
        .flat_map(|i| {
            let mut e = Vec::new();
            match i % 100 {
                0 => e.push((key(i), Some(b"new".to_vec()))),
                5 | 55 => e.push((key(i), Some(value.to_vec()))),
                _ => {}
            }
            if i % 50 == 0 {
                e.push((format!("key{i:08}x").into_bytes(), Some(b"between".to_vec())));
            }
            e
        })
        .collect();
    let mut table = None;
    for (gen, changes) in (2..).zip([gone, edits, vec![], vec![], vec![]]) {
        for (k, v) in &changes {
            match v {
                Some(v) => model.insert(k.clone(), v.clone()),
                None => model.remove(k),
            };
        }
        store.set_records(Some(model.len() as u64));
        store.apply(gen, &changes.as_slice(), None).unwrap();
        table = Some(store.write_table().unwrap());
        store.commit();
    }
    let live = store.live_bytes();
    let data: usize = model.iter().map(|(k, v)| k.len() + v.len()).sum();
    assert!(live < 2 * data as u64, "live images {live} bytes for {data} bytes of records");
    let pages = store.pages.len() as u64;
    assert!(
        pages <= 2 * live.div_ceil(PAGE_TARGET as u64) + 2,
        "{pages} pages for {live} live bytes ({pages_full} before the deletes)"
    );
    assert_eq!(contents(&store), model);
    drop(store);
    let store = PageStore::open(storage, 1 << 20, table, false).unwrap();
    assert_eq!(contents(&store), model, "reopened");
}

/// A page reclaimed next to a small page that an earlier checkpoint left alone takes it
/// in: deletes empty one page, its reclaim leaves it small beside full neighbours, then
/// deletes empty the next page, whose reclaim merges the two.
#[test]
fn a_reclaimed_page_takes_in_the_small_page_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let n = 5_000u64;
    let (_, mut store, _) = filled_store(dir.path(), 1 << 20, n);
    let value = VALUE;
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = (0..n).map(|i| (key(i), value.to_vec())).collect();
    // All but two records of the page at `at` deleted, then a checkpoint with no change.
    let mut empty_page = |store: &mut PageStore, at: usize, gen: u64| {
        let (low, high) = (store.pages[at].low.clone(), store.pages[at + 1].low.clone());
        let gone: Vec<Change> = model.range(low..high).skip(2).map(|(k, _)| (k.clone(), None)).collect::<Vec<_>>();
        gone.iter().for_each(|(k, _)| drop(model.remove(k)));
        for (g, changes) in [(gen, gone), (gen + 1, Vec::new())] {
            store.set_records(Some(model.len() as u64));
            store.apply(g, &changes.as_slice(), None).unwrap();
            store.write_table().unwrap();
            store.commit();
        }
        store.pages.len()
    };
    let pages = store.pages.len();
    assert_eq!(empty_page(&mut store, 3, 2), pages, "a small page alone beside full ones stays");
    assert_eq!(empty_page(&mut store, 4, 4), pages - 1, "the next page's reclaim takes it in");
    assert_eq!(contents(&store), model);
}

/// Dead bytes are estimates: markers of absent keys, counted at a mean entry far above the
/// real one, make every full page look due and nearly empty. The reclaim then merges
/// runs of full pages (at most `MERGE_MAX_PAGES` at once) and splits them again: the
/// records are all there, and the pages are about as many as before.
#[test]
fn wrong_dead_estimates_rewrite_full_pages_without_loss() {
    let dir = tempfile::tempdir().unwrap();
    let n = 20_000u64;
    let (_, mut store, _) = filled_store(dir.path(), 1 << 20, n);
    let pages = store.pages.len();
    let absent: Vec<Change> = (0..n).step_by(40).map(|i| (format!("key{i:08}z").into_bytes(), None)).collect();
    for (gen, changes) in (2..).zip([absent, Vec::new()]) {
        // A count of one: each marker is taken to remove all the store's bytes.
        store.set_records(Some(1));
        store.apply(gen, &changes.as_slice(), None).unwrap();
        store.write_table().unwrap();
        store.commit();
    }
    assert!(store.stats().relocated_pages >= pages as u64 / 2, "{:?}", store.stats());
    let after = store.pages.len();
    assert!(after * 10 >= pages * 9, "{pages} full pages became {after}");
    let want: BTreeMap<Vec<u8>, Vec<u8>> = (0..n).map(|i| (key(i), VALUE.to_vec())).collect();
    assert_eq!(contents(&store), want);
}
