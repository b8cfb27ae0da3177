//! The Rust API of issue 14 against a model: ranges of every shape, prefix and reverse
//! scans (in memory, and on a database whose cache holds a sliver of it, so that reverse
//! windows cross key ranges that are not in memory), reads inside scans, open modes and
//! backups.

use std::collections::BTreeMap;
use std::ops::Bound;

use rand::{RngExt, SeedableRng};
use tsumiki::{Db, Error, Options};

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

fn check_scans(db: &Db, model: &Model, rng: &mut rand::rngs::StdRng, rounds: usize) {
    let txn = db.begin();
    let all: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(txn.iter().collect::<Result<Vec<_>, _>>().unwrap(), all);
    let rev: Vec<_> = all.iter().rev().cloned().collect();
    assert_eq!(txn.iter().rev().collect::<Result<Vec<_>, _>>().unwrap(), rev);
    for _ in 0..rounds {
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
    txn.commit().unwrap();
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
