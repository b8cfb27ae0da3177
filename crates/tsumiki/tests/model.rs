//! The Bw-tree against `BTreeMap`: random operation sequences, every operation's reported
//! outcome and every scan compared, with tiny nodes so splits, merges, root growth and root
//! collapse happen all the time.

mod common;

use std::collections::BTreeMap;

use proptest::prelude::*;
use tsumiki::index::{BwTree, BwTreeConfig, IndexError, MAX_KEY_LEN};

#[derive(Debug, Clone)]
enum Op {
    Get(u16),
    Upsert(u16, u32),
    Insert(u16, u32),
    Update(u16, u32),
    Delete(u16),
    Scan(u16, Option<u16>),
}

fn op(keys: u16) -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => (0..keys).prop_map(Op::Get),
        3 => (0..keys, any::<u32>()).prop_map(|(k, v)| Op::Upsert(k, v)),
        3 => (0..keys, any::<u32>()).prop_map(|(k, v)| Op::Insert(k, v)),
        2 => (0..keys, any::<u32>()).prop_map(|(k, v)| Op::Update(k, v)),
        4 => (0..keys).prop_map(Op::Delete),
        1 => (0..keys, proptest::option::of(0..keys)).prop_map(|(s, e)| Op::Scan(s, e)),
    ]
}

fn k(n: u16) -> Vec<u8> {
    // Variable-length keys whose byte order differs from numeric order, plus the empty key.
    // The four shapes stress the 8-byte prefix comparisons: short keys, short keys that tie
    // with them on the zero-padded prefix ("12" and "12\0"), and long keys that all share
    // their first 8 bytes, with and without trailing zero bytes.
    if n == 0 {
        return Vec::new();
    }
    let d = format!("{}", u32::from(n / 4) * 7919 % 10007).into_bytes();
    match n % 4 {
        0 => d,
        1 => [&d[..], b"\0"].concat(),
        2 => [&b"shared8_"[..], &d].concat(),
        _ => [&b"shared8_"[..], &d, b"\0\0"].concat(),
    }
}

fn run(cfg: BwTreeConfig, ops: &[Op]) {
    let tree = BwTree::with_config(cfg).unwrap();
    let mut model: BTreeMap<Vec<u8>, u32> = BTreeMap::new();
    for (i, op) in ops.iter().enumerate() {
        match op {
            Op::Get(n) => assert_eq!(tree.get(&k(*n)).unwrap(), model.get(&k(*n)).copied(), "op {i} {op:?}"),
            Op::Upsert(n, v) => {
                assert_eq!(tree.upsert(&k(*n), *v).unwrap(), model.insert(k(*n), *v).is_none(), "op {i} {op:?}")
            }
            Op::Insert(n, v) => {
                let absent = !model.contains_key(&k(*n));
                if absent {
                    model.insert(k(*n), *v);
                }
                assert_eq!(tree.insert(&k(*n), *v).unwrap(), absent, "op {i} {op:?}");
            }
            Op::Update(n, v) => {
                let present = model.contains_key(&k(*n));
                if present {
                    model.insert(k(*n), *v);
                }
                assert_eq!(tree.update(&k(*n), *v).unwrap(), present, "op {i} {op:?}");
            }
            Op::Delete(n) => assert_eq!(tree.delete(&k(*n)).unwrap(), model.remove(&k(*n)).is_some(), "op {i} {op:?}"),
            Op::Scan(s, e) => {
                let (s, e) = (k(*s), e.map(k));
                let got: Vec<_> = tree.scan(&s, e.as_deref()).collect();
                let want: Vec<_> = model
                    .iter()
                    .filter(|(key, _)| **key >= s && e.as_ref().is_none_or(|e| *key < e))
                    .map(|(a, b)| (a.clone(), *b))
                    .collect();
                assert_eq!(got, want, "op {i} {op:?}");
            }
        }
    }
    let all: Vec<_> = tree.scan(b"", None).collect();
    let want: Vec<_> = model.into_iter().collect();
    assert_eq!(all, want, "final contents");
}

/// Writes only, and after every step `first_from` (and `first_from_with`) for the written
/// key, its neighbours and the fixed `probes`, both inclusive and exclusive, against the
/// model's `range`.
fn run_first_from(cfg: BwTreeConfig, ops: &[Op], probes: &[u16]) {
    use std::ops::Bound::{Excluded, Included, Unbounded};
    let tree = BwTree::with_config(cfg).unwrap();
    let mut model: BTreeMap<Vec<u8>, u32> = BTreeMap::new();
    for (i, op) in ops.iter().enumerate() {
        let n = match *op {
            Op::Upsert(n, v) => {
                tree.upsert(&k(n), v).unwrap();
                model.insert(k(n), v);
                n
            }
            Op::Insert(n, v) => {
                if tree.insert(&k(n), v).unwrap() {
                    model.insert(k(n), v);
                }
                n
            }
            Op::Delete(n) => {
                tree.delete(&k(n)).unwrap();
                model.remove(&k(n));
                n
            }
            _ => continue,
        };
        let near = [n, n.saturating_sub(1), n.saturating_add(1), n.saturating_add(4)];
        for key in near.iter().chain(probes).map(|&p| k(p)).chain([Vec::new(), vec![0xff; 9]]) {
            for exclusive in [false, true] {
                let want = if exclusive {
                    model.range::<[u8], _>((Excluded(&key[..]), Unbounded)).next()
                } else {
                    model.range::<[u8], _>((Included(&key[..]), Unbounded)).next()
                }
                .map(|(a, b)| (a.clone(), *b));
                assert_eq!(tree.first_from(&key, exclusive), want, "op {i} {op:?} probe {key:?} exclusive {exclusive}");
                let borrowed = tree.first_from_with(&key, exclusive, |r| r.map(|(a, b)| (a.to_vec(), *b)));
                assert_eq!(borrowed, want, "first_from_with: op {i} {op:?} probe {key:?}");
            }
        }
    }
}

/// Writes weighted so leaves fill, empty out and refill.
fn write_op(keys: u16) -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..keys, any::<u32>()).prop_map(|(k, v)| Op::Upsert(k, v)),
        2 => (0..keys, any::<u32>()).prop_map(|(k, v)| Op::Insert(k, v)),
        4 => (0..keys).prop_map(Op::Delete),
    ]
}

fn cases() -> u32 {
    if cfg!(miri) {
        2
    } else {
        64
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn tiny_nodes_match_btreemap(ops in proptest::collection::vec(op(200), 1..if cfg!(miri) { 60 } else { 3000 })) {
        for (_, cfg) in common::variants(BwTreeConfig::tiny()) {
            run(cfg, &ops);
        }
    }

    #[test]
    fn default_nodes_match_btreemap(ops in proptest::collection::vec(op(2000), 1..if cfg!(miri) { 60 } else { 3000 })) {
        for (_, cfg) in common::variants(BwTreeConfig { leaf_max: 16, inner_max: 8, merge_threshold: 4, delta_threshold: 5, ..BwTreeConfig::default() }) {
            run(cfg, &ops);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn first_from_matches_btreemap_tiny(
        ops in proptest::collection::vec(write_op(200), 1..if cfg!(miri) { 30 } else { 1000 }),
        probes in proptest::collection::vec(0..200u16, 4),
    ) {
        for (_, cfg) in common::variants(BwTreeConfig::tiny()) {
            run_first_from(cfg, &ops, &probes);
        }
    }

    #[test]
    fn first_from_matches_btreemap_default(
        ops in proptest::collection::vec(write_op(600), 1..if cfg!(miri) { 30 } else { 1500 }),
        probes in proptest::collection::vec(0..600u16, 4),
    ) {
        for (_, cfg) in common::variants(BwTreeConfig::default()) {
            run_first_from(cfg, &ops, &probes);
        }
    }
}

/// Grow to thousands of keys (many levels with tiny nodes), then delete everything: the
/// tree must collapse back to a single leaf and stay correct on the way.
#[test]
fn grow_then_shrink_changes_root() {
    let n: u64 = if cfg!(miri) { 40 } else { 4000 };
    for (name, cfg) in common::variants(BwTreeConfig::tiny()) {
        let tree = BwTree::with_config(cfg).unwrap();
        for i in 0..n {
            assert!(tree.insert(&common::key(i * 7 % n, 8), i).unwrap(), "{name}");
        }
        let s = tree.stats();
        let peak = s.height;
        assert!(s.height >= 3, "{name}: height {}", s.height);
        assert!(s.root_splits >= 2 && s.splits > 10, "{name}: {s:?}");
        assert_eq!(tree.scan(b"", None).count() as u64, n, "{name}");
        for i in 0..n {
            assert!(tree.delete(&common::key(i, 8)).unwrap(), "{name} delete {i}");
            if i % 97 == 0 {
                assert_eq!(tree.scan(b"", None).count() as u64, n - i - 1, "{name}");
            }
        }
        assert_eq!(tree.scan(b"", None).count(), 0, "{name}");
        // Touch the tree so the last consolidations and collapses run.
        for _ in 0..50 {
            tree.get(b"x").unwrap();
            tree.upsert(b"x", 0).unwrap();
            tree.delete(b"x").unwrap();
        }
        let s = tree.stats();
        assert!(s.merges > if cfg!(miri) { 0 } else { 10 }, "{name}: {s:?}");
        assert!(s.root_collapses >= 1, "{name}: {s:?}\n{}", tree.dump_structure());
        // Merges are event-driven (they happen when a consolidation finds a node under the
        // threshold), so some small nodes may remain; the tree must still have shrunk.
        assert!(s.height < peak, "{name}: {s:?}");
        if name == "paper" {
            assert!(s.height <= 2, "{name}: {s:?}\n{}", tree.dump_structure());
        }
    }
}

#[test]
fn key_length_limit_is_a_clear_error() {
    let tree = BwTree::new();
    let long = vec![7u8; MAX_KEY_LEN + 1];
    let err = IndexError::KeyTooLong { len: MAX_KEY_LEN + 1, max: MAX_KEY_LEN };
    assert_eq!(tree.upsert(&long, 1), Err(err.clone()));
    assert_eq!(tree.get(&long), Err(err.clone()));
    assert_eq!(tree.delete(&long), Err(err));
    let max = vec![7u8; MAX_KEY_LEN];
    assert_eq!(tree.upsert(&max, 1), Ok(true));
    assert_eq!(tree.get(&max), Ok(Some(1)));
    assert!(err_text(&tree).contains("longer than"));
}

fn err_text(tree: &BwTree<i32>) -> String {
    tree.insert(&[0u8; MAX_KEY_LEN + 5], 1).unwrap_err().to_string()
}

#[test]
fn bad_config_is_rejected() {
    for cfg in [
        BwTreeConfig { leaf_max: 2, ..BwTreeConfig::default() },
        BwTreeConfig { merge_threshold: 100, ..BwTreeConfig::default() },
        BwTreeConfig { delta_threshold: 0, ..BwTreeConfig::default() },
    ] {
        assert!(matches!(BwTree::<u8>::with_config(cfg), Err(IndexError::InvalidConfig(_))));
    }
}

/// Ascending loads take the append fast path of consolidation (the old base copied whole,
/// new keys pushed after it); interleaved overwrites of recent keys, deletes and reads of
/// every kind must still agree with the model at every step.
#[test]
fn ascending_appends_with_overwrites_and_deletes_match_the_model() {
    for (name, cfg) in common::variants(BwTreeConfig::default()) {
        let tree = BwTree::with_config(cfg).unwrap();
        let mut model = BTreeMap::new();
        for i in 0..20_000u32 {
            let key = i.to_be_bytes();
            tree.upsert(&key, i).unwrap();
            model.insert(key.to_vec(), i);
            if i % 7 == 3 {
                // Overwrite a recent key: not an append, so the general path runs.
                let back = (i - 2).to_be_bytes();
                tree.upsert(&back, i + 1_000_000).unwrap();
                model.insert(back.to_vec(), i + 1_000_000);
            }
            if i % 11 == 5 {
                let gone = (i - 4).to_be_bytes();
                assert_eq!(tree.delete(&gone).unwrap(), model.remove(&gone[..]).is_some());
            }
            if i % 97 == 0 {
                let got: Vec<(Vec<u8>, u32)> = tree.scan(b"", None).collect();
                let want: Vec<(Vec<u8>, u32)> = model.iter().map(|(k, v)| (k.clone(), *v)).collect();
                assert_eq!(got, want, "{name}: after {i}");
            }
        }
        for (k, v) in &model {
            assert_eq!(tree.get(k).unwrap(), Some(*v), "{name}");
        }
        assert_eq!(tree.scan(b"", None).count(), model.len(), "{name}");
    }
}
