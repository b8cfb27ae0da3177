//! The checker's unit tests: healthy databases stay healthy, and damage is found.

use std::path::{Path, PathBuf};

use super::layout::*;
use super::*;
use crate::block::PAYLOAD;
use crate::store::master::SLOT_LEN;
use crate::{Db, Options};

fn filled(records: u32, close: bool) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::create(dir.path(), full_close()).unwrap();
    for chunk in (0..records).collect::<Vec<_>>().chunks(500) {
        db.run(|t| {
            for &i in chunk {
                t.put(i.to_be_bytes(), [i as u8; 24])?;
            }
            Ok(())
        })
        .unwrap();
    }
    if close {
        db.close().unwrap();
    } else {
        db.abandon_for_tests();
    }
    dir
}

/// Options whose every close writes the pages (a short log is never kept): the checks of
/// a clean exit's pages.
fn full_close() -> Options {
    let store = crate::StoreOptions { close_keeps_short_log: false, ..crate::StoreOptions::default() };
    Options { store, ..Options::default() }
}

fn flip(path: &Path, at: u64) {
    let mut b = std::fs::read(path).unwrap();
    b[at as usize] ^= 0x10;
    std::fs::write(path, b).unwrap();
}

fn damage(r: &CheckReport) -> Vec<&Finding> {
    r.findings.iter().filter(|f| f.severity == Severity::Damage).collect()
}

#[test]
fn a_closed_and_a_crashed_database_are_healthy() {
    let dir = filled(3000, true);
    let r = check(dir.path()).unwrap();
    assert!(r.is_healthy(), "{:?}", r.findings);
    assert_eq!(r.records, 3000);
    assert_eq!((r.key_bytes, r.value_bytes), (4 * 3000, 24 * 3000));
    assert!(r.last_exit && r.pages > 1 && r.images > r.pages, "{r:?}");
    let dir = filled(700, false);
    let r = check(dir.path()).unwrap();
    assert!(r.is_healthy(), "{:?}", r.findings);
    assert!(!r.last_exit && r.log_records == 2 && r.log_lanes >= 1, "{r:?}");
}

/// A clean exit's record count must match the pages: a master record rewritten with
/// another count is damage.
#[test]
fn a_master_record_counting_wrong_is_damage() {
    let dir = filled(3000, true);
    let r = check(dir.path()).unwrap();
    assert_eq!(r.count, Some(3000));
    let storage = crate::storage::DirStorage::new(dir.path()).unwrap();
    let m = crate::store::master::read_master(&storage).unwrap().unwrap();
    crate::store::master::write_master(&storage, &crate::store::master::Master { count: Some(2999), ..m }).unwrap();
    drop(storage);
    let r = check(dir.path()).unwrap();
    assert!(damage(&r).iter().any(|f| f.what.contains("counts 2999 records, the pages hold 3000")), "{:?}", r.findings);
    // A count too low never panics: once commits take it below zero, it is counted by a
    // scan (and a checkpoint records none, for the next open to count again).
    let storage = crate::storage::DirStorage::new(dir.path()).unwrap();
    crate::store::master::write_master(&storage, &crate::store::master::Master { count: Some(1), ..m }).unwrap();
    drop(storage);
    let db = Db::open(dir.path(), Options::default()).unwrap();
    assert_eq!(db.len().unwrap(), 1, "the count is taken as recorded");
    db.run(|t| (0..5u32).try_for_each(|i| t.delete(i.to_be_bytes()).map(drop))).unwrap();
    assert_eq!(db.len().unwrap(), 2995, "below zero: a scan");
    db.checkpoint().unwrap();
    db.close().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    assert_eq!(db.len().unwrap(), 2995, "counted again at open");
    db.close().unwrap();
    assert_eq!(check(dir.path()).unwrap().count, Some(2995));
}

#[test]
fn the_check_writes_nothing_and_refuses_an_open_database() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::create(dir.path(), Options::default()).unwrap();
    assert!(matches!(check(dir.path()), Err(Error::Locked(_))));
    db.close().unwrap();
    let before: Vec<(String, Vec<u8>)> = {
        let mut v: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (e.file_name().into_string().unwrap(), std::fs::read(e.path()).unwrap())
            })
            .collect();
        v.sort();
        v
    };
    check(dir.path()).unwrap();
    let mut after: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (e.file_name().into_string().unwrap(), std::fs::read(e.path()).unwrap())
        })
        .collect();
    after.sort();
    assert_eq!(before, after);
    assert!(matches!(check(&dir.path().join("none")), Err(Error::NotFound(_))));
    let empty = tempfile::tempdir().unwrap();
    assert!(matches!(check(empty.path()), Err(Error::NotFound(_))));
}

/// A flipped bit anywhere in MASTER (a sample of every superblock field and padding)
/// is damage.
#[test]
fn any_flipped_byte_of_master_is_damage() {
    let dir = filled(10, true);
    let path = dir.path().join(MASTER);
    for at in (0..SLOT_LEN as u64 + 8).chain([100, 4000]).flat_map(|o| [o, o + BLOCK as u64]) {
        flip(&path, at);
        let r = check(dir.path()).unwrap();
        assert!(damage(&r).iter().any(|f| f.file == MASTER), "byte {at}: {:?}", r.findings);
        flip(&path, at);
    }
    assert!(check(dir.path()).unwrap().is_healthy());
}

/// Every block of every page segment: a flipped byte in a block an image of the table
/// uses is damage naming that segment; elsewhere at least a warning.
#[test]
fn a_flipped_byte_in_any_page_block_is_found() {
    let dir = filled(3000, true);
    let mut segs: Vec<PathBuf> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_str().unwrap().starts_with("pages-"))
        .collect();
    segs.sort();
    assert!(!segs.is_empty());
    let mut checked = 0;
    for seg in &segs {
        let name = seg.file_name().unwrap().to_str().unwrap().to_string();
        let blocks = std::fs::metadata(seg).unwrap().len() / BLOCK as u64;
        for b in 0..blocks {
            for at in [b * BLOCK as u64 + 50, b * BLOCK as u64 + PAYLOAD as u64 + 10] {
                flip(seg, at);
                let r = check(dir.path()).unwrap();
                assert!(!r.findings.is_empty(), "{name} byte {at}");
                assert!(r.findings.iter().all(|f| f.file == name), "{name} byte {at}: {:?}", r.findings);
                // A store written by one close uses every block it wrote.
                assert!(!r.is_healthy(), "{name} byte {at}: {:?}", r.findings);
                flip(seg, at);
                checked += 1;
            }
        }
    }
    assert!(checked > 4);
    assert!(check(dir.path()).unwrap().is_healthy());
}

/// No false alarm through what a database's life leaves on disk: many checkpoints
/// (table deltas, milestones), cleaning (segments freed and reused), recycled log
/// segments, crashes with logs of one or two generations, under NLR and ELR; and
/// the record count matches after each close.
#[test]
fn healthy_through_checkpoints_cleaning_and_crashes() {
    use crate::{LogOptions, Release, StoreOptions};
    use std::collections::BTreeMap;
    for release in [Release::Nlr, Release::Elr] {
        let dir = tempfile::tempdir().unwrap();
        let log = LogOptions { release, segment_size: 64 << 10, ..LogOptions::default() };
        let store = StoreOptions {
            checkpoint_bytes: 128 << 10,
            page_segment_size: 32 << 10,
            // Each close writes the pages (their count is checked after it).
            close_keeps_short_log: false,
            ..StoreOptions::default()
        };
        let opts = Options { log, store, ..Options::default() };
        let mut model: BTreeMap<Vec<u8>, usize> = BTreeMap::new();
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..8 {
            let db = Db::create(dir.path(), opts.clone()).unwrap();
            for _ in 0..30 {
                let ops: Vec<(Vec<u8>, Option<usize>)> = (0..150)
                    .map(|_| {
                        let k = format!("k{:05}", next() % 4000).into_bytes();
                        let r = next();
                        (k, (r % 5 != 0).then_some((r >> 8) as usize % 120))
                    })
                    .collect();
                db.run(|t| {
                    for (k, v) in &ops {
                        match v {
                            Some(n) => t.put(k, vec![*n as u8; *n])?,
                            None => drop(t.delete(k)?),
                        }
                    }
                    Ok(())
                })
                .unwrap();
                for (k, v) in ops {
                    match v {
                        Some(n) => model.insert(k, n),
                        None => model.remove(&k),
                    };
                }
            }
            if round % 2 == 1 {
                db.checkpoint().unwrap();
            }
            let crash = round % 3 == 1;
            if crash {
                db.abandon_for_tests();
            } else {
                db.close().unwrap();
            }
            let r = check(dir.path()).unwrap();
            assert!(r.is_healthy(), "{release:?} round {round}: {:#?}", r.findings);
            if !crash {
                assert_eq!(r.records, model.len() as u64, "{release:?} round {round}");
                assert_eq!(r.value_bytes, model.values().sum::<usize>() as u64);
            }
        }
    }
}

#[test]
fn the_decoders_refuse_what_the_store_would() {
    // Entries out of order, a tombstone count past the bytes, a varint overflow.
    let mut img = vec![0u8; IMAGE_HEADER];
    img[IMAGE_HEADER - 4..].copy_from_slice(&2u32.to_le_bytes());
    let mut ok = img.clone();
    ok.extend_from_slice(&[0, 1, 2, b'b', 9, 0, 1, 0, b'c']);
    let mut seen = Vec::new();
    for_each_entry(&ok, |k, v| {
        seen.push((k.to_vec(), v.map(<[u8]>::to_vec)));
        Ok(())
    })
    .unwrap();
    assert_eq!(seen, vec![(b"b".to_vec(), Some(vec![9])), (b"c".to_vec(), None)]);
    let mut swapped = img.clone();
    swapped.extend_from_slice(&[0, 1, 2, b'c', 9, 0, 1, 0, b'b']);
    assert!(for_each_entry(&swapped, |_, _| Ok(())).unwrap_err().to_string().contains("out of order"));
    let mut short = img.clone();
    short.extend_from_slice(&[0, 1, 9, b'b', 1]);
    assert!(for_each_entry(&short, |_, _| Ok(())).is_err());
    let mut trailing = ok.clone();
    trailing.push(0);
    assert!(for_each_entry(&trailing, |_, _| Ok(())).is_err());
    // A table announcing more pages than its bytes hold; out of order; duplicate ids.
    assert!(decode_table(&u32::MAX.to_le_bytes(), None).is_err());
    let page = |pid: u64, low: &[u8]| TablePage { pid, low: low.to_vec(), chain: Vec::new() };
    assert!(check_page_list(&[page(0, b""), page(1, b"b")], 2).is_ok());
    assert!(check_page_list(&[page(0, b""), page(1, b"b"), page(2, b"a")], 3).is_err());
    assert!(check_page_list(&[page(0, b""), page(0, b"b")], 3).is_err());
    assert!(check_page_list(&[page(0, b""), page(5, b"b")], 3).is_err());
    assert!(check_page_list(&[page(0, b"a")], 3).is_err());
}
