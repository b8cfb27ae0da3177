//! One transaction at a time against a `BTreeMap`: puts, deletes, pops from either end
//! (a scan and a delete, or `pop_first`/`pop_last`), retains over ranges, forward and
//! reverse range scans that stop early, commits and aborts, under every protocol. Each read must show the committed state with the transaction's own writes
//! over it, however the scans before it left their skips (`db/engine/scan.rs`: ranges a
//! scan found empty to the transaction, gone past by the next scan from there).

use std::collections::BTreeMap;
use std::ops::Bound;

use proptest::prelude::*;
use tsumiki::{Cc, Db, Gc, LockWait, Options, Txn};

#[derive(Debug, Clone)]
enum Op {
    Put(u16),
    Delete(u16),
    /// Pop the first (`false`) or last record: a scan, then a delete of what it returned.
    Pop(bool),
    /// The same through `pop_first`/`pop_last`.
    PopNative(bool),
    /// `retain_in` over `[start, end)`, keeping the records whose value's first byte is
    /// not a multiple of `m`.
    Retain {
        start: Option<u16>,
        end: Option<u16>,
        m: u8,
    },
    /// A scan of `[start, end)` taking at most `take` records, reversed or not.
    Scan {
        start: Option<u16>,
        end: Option<u16>,
        take: usize,
        rev: bool,
    },
    Commit,
    Abort,
}

fn op(keys: u16) -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..keys).prop_map(Op::Put),
        2 => (0..keys).prop_map(Op::Delete),
        5 => any::<bool>().prop_map(Op::Pop),
        5 => any::<bool>().prop_map(Op::PopNative),
        1 => (proptest::option::of(0..keys), proptest::option::of(0..keys), 2..6u8)
            .prop_map(|(start, end, m)| Op::Retain { start, end, m }),
        2 => (proptest::option::of(0..keys), proptest::option::of(0..keys), 1..12usize, any::<bool>())
            .prop_map(|(start, end, take, rev)| Op::Scan { start, end, take, rev }),
        1 => Just(Op::Commit),
        1 => Just(Op::Abort),
    ]
}

fn k(n: u16) -> Vec<u8> {
    n.to_be_bytes().to_vec()
}

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn bound(n: Option<u16>, included: bool) -> Bound<Vec<u8>> {
    match n {
        None => Bound::Unbounded,
        Some(n) if included => Bound::Included(k(n)),
        Some(n) => Bound::Excluded(k(n)),
    }
}

fn scan(t: &Txn<'_>, start: Option<u16>, end: Option<u16>, take: usize, rev: bool) -> Vec<Vec<u8>> {
    let s = t.range((bound(start, true), bound(end, false)));
    let s = if rev { s.rev() } else { s };
    s.take(take).map(|r| r.unwrap().0).collect()
}

fn model_scan(m: &Model, start: Option<u16>, end: Option<u16>, take: usize, rev: bool) -> Vec<Vec<u8>> {
    if let (Some(s), Some(e)) = (start, end) {
        if e <= s {
            return Vec::new();
        }
    }
    let r = m.range((bound(start, true), bound(end, false))).map(|(k, _)| k.clone());
    if rev {
        r.rev().take(take).collect()
    } else {
        r.take(take).collect()
    }
}

/// `dir`: a database in files with a one-byte cache, so that key ranges leave memory
/// between the transaction's scans and come back.
fn run(cc: Cc, ops: &[Op], initial: u16, dir: Option<&std::path::Path>) {
    let db = match dir {
        None => Db::open_in_memory(Options { cc, ..Options::default() }).unwrap(),
        Some(d) => Db::create(d, Options { cc, cache_bytes: 1, ..Options::default() }).unwrap(),
    };
    let mut committed = Model::new();
    {
        let mut t = db.begin();
        for n in (0..initial).step_by(2) {
            t.put(k(n), [n as u8]).unwrap();
            committed.insert(k(n), vec![n as u8]);
        }
        t.commit().unwrap();
    }
    // An `Option` so that a commit ends before the next transaction begins (under
    // MVCC-SI a transaction begun first would not see it).
    let mut slot = Some(db.begin());
    let mut own = committed.clone();
    for (i, op) in ops.iter().enumerate() {
        let t = slot.as_mut().unwrap();
        match *op {
            Op::Put(n) => {
                let v = vec![i as u8, n as u8];
                t.put(k(n), &v).unwrap();
                own.insert(k(n), v);
            }
            Op::Delete(n) => {
                assert_eq!(t.delete(k(n)).unwrap(), own.remove(&k(n)).is_some(), "op {i} {op:?}");
            }
            Op::Pop(last) => {
                let got = scan(t, None, None, 1, last);
                let want = model_scan(&own, None, None, 1, last);
                assert_eq!(got, want, "op {i} {op:?}");
                if let Some(key) = got.first() {
                    assert!(t.delete(key).unwrap(), "op {i} {op:?}");
                    own.remove(key);
                }
            }
            Op::PopNative(last) => {
                let got = if last { t.pop_last() } else { t.pop_first() }.unwrap();
                let want = if last { own.pop_last() } else { own.pop_first() };
                assert_eq!(got, want, "op {i} {op:?}");
            }
            Op::Retain { start, end, m } => {
                let keep = |v: &[u8]| !v[0].is_multiple_of(m);
                let got = t.retain_in((bound(start, true), bound(end, false)), |_, v| keep(v)).unwrap();
                let doomed: Vec<Vec<u8>> = model_scan(&own, start, end, usize::MAX, false)
                    .into_iter()
                    .filter(|key| !keep(&own[key]))
                    .collect();
                assert_eq!(got, doomed.len() as u64, "op {i} {op:?}");
                for key in doomed {
                    own.remove(&key);
                }
            }
            Op::Scan { start, end, take, rev } => {
                assert_eq!(scan(t, start, end, take, rev), model_scan(&own, start, end, take, rev), "op {i} {op:?}");
            }
            Op::Commit => {
                slot.take().unwrap().commit().unwrap();
                slot = Some(db.begin());
                committed = own.clone();
            }
            Op::Abort => {
                slot.take().unwrap().abort();
                slot = Some(db.begin());
                own = committed.clone();
            }
        }
    }
    slot.take().unwrap().commit().unwrap();
    let all: Vec<Vec<u8>> = db.view(|r| r.iter().map(|x| x.map(|x| x.0)).collect()).unwrap();
    assert_eq!(all, own.keys().cloned().collect::<Vec<_>>());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: if cfg!(miri) { 2 } else { 48 }, ..ProptestConfig::default() })]

    #[test]
    fn a_transaction_reads_its_own_writes_through_pops_and_scans(
        ops in proptest::collection::vec(op(600), 1..if cfg!(miri) { 40 } else { 600 }),
        initial in 0..600u16,
    ) {
        for cc in [Cc::TicToc, Cc::Silo, Cc::TwoPl(LockWait::NoWait), Cc::MvccSi(Gc::EpoR)] {
            run(cc, &ops, initial, None);
        }
        if !cfg!(miri) {
            let dir = tempfile::tempdir().unwrap();
            run(Cc::TicToc, &ops, initial, Some(dir.path()));
        }
    }
}
