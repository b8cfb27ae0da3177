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
