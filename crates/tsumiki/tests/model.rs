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
    /// `apply_batch` over these keys: inserts of `value` (`Some`) or deletes (`None`).
    Batch(Vec<u16>, Option<u32>),
}

fn op(keys: u16) -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => (0..keys).prop_map(Op::Get),
        3 => (0..keys, any::<u32>()).prop_map(|(k, v)| Op::Upsert(k, v)),
        3 => (0..keys, any::<u32>()).prop_map(|(k, v)| Op::Insert(k, v)),
        2 => (0..keys, any::<u32>()).prop_map(|(k, v)| Op::Update(k, v)),
        4 => (0..keys).prop_map(Op::Delete),
        1 => (0..keys, proptest::option::of(0..keys)).prop_map(|(s, e)| Op::Scan(s, e)),
        1 => (proptest::collection::vec(0..keys, 0..48), proptest::option::of(any::<u32>()))
            .prop_map(|(ks, v)| Op::Batch(ks, v)),
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
            Op::Batch(ns, v) => batch(&tree, &mut model, ns, *v, &format!("op {i}")),
        }
    }
    let all: Vec<_> = tree.scan(b"", None).collect();
    let want: Vec<_> = model.into_iter().collect();
    assert_eq!(all, want, "final contents");
}

/// `apply_batch` of inserts (`Some(v)`) or deletes over keys `ns`, checked against and
/// applied to the model.
fn batch(tree: &BwTree<u32>, model: &mut BTreeMap<Vec<u8>, u32>, ns: &[u16], v: Option<u32>, what: &str) {
    let mut keys: Vec<Vec<u8>> = ns.iter().map(|n| k(*n)).collect();
    keys.sort();
    keys.dedup();
    let entries: Vec<(&[u8], Option<u32>)> = keys.iter().map(|key| (key.as_slice(), v)).collect();
    let mut added = vec![false; entries.len()];
    tree.apply_batch(&entries, &mut added).unwrap();
    for (key, added) in keys.iter().zip(added) {
        match v {
            Some(v) => {
                let absent = !model.contains_key(key);
                if absent {
                    model.insert(key.clone(), v);
                }
                assert_eq!(added, absent, "{what}: batch insert of {key:?}");
            }
            None => {
                model.remove(key);
                assert!(!added, "{what}: a delete is never added");
            }
        }
    }
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

// ----- bulk loading ------------------------------------------------------------------------

/// `get` of every key of the space (and a few outside it), full and partial `scan`s, and
/// `first_from` at the probes, against the model.
fn check_against(tree: &BwTree<u32>, model: &BTreeMap<Vec<u8>, u32>, space: u16, probes: &[u16], what: &str) {
    use std::ops::Bound::{Excluded, Included, Unbounded};
    let all: Vec<_> = tree.scan(b"", None).collect();
    let want: Vec<_> = model.iter().map(|(a, b)| (a.clone(), *b)).collect();
    assert_eq!(all, want, "{what}: full scan");
    for n in 0..space {
        assert_eq!(tree.get(&k(n)).unwrap(), model.get(&k(n)).copied(), "{what}: get {n}");
    }
    for key in model.keys() {
        assert_eq!(tree.get(key).unwrap(), model.get(key).copied(), "{what}: get {key:?}");
    }
    for p in probes.iter().map(|&p| k(p)).chain([Vec::new(), vec![0xff; 9], b"shared8_".to_vec()]) {
        for exclusive in [false, true] {
            let bound = if exclusive { Excluded(&p[..]) } else { Included(&p[..]) };
            let want = model.range::<[u8], _>((bound, Unbounded)).next().map(|(a, b)| (a.clone(), *b));
            assert_eq!(tree.first_from(&p, exclusive), want, "{what}: first_from {p:?} {exclusive}");
        }
        let got: Vec<_> = tree.scan(&p, None).take(5).collect();
        let want: Vec<_> =
            model.range::<[u8], _>((Included(&p[..]), Unbounded)).take(5).map(|(a, b)| (a.clone(), *b)).collect();
        assert_eq!(got, want, "{what}: scan from {p:?}");
    }
}

/// Bulk-loads `keys` (any order; sorted here), checks the tree, runs `ops`, checks again.
fn run_bulk(cfg: BwTreeConfig, keys: &[Vec<u8>], ops: &[Op], space: u16, probes: &[u16], name: &str) {
    let mut model: BTreeMap<Vec<u8>, u32> = BTreeMap::new();
    for (i, key) in keys.iter().enumerate() {
        model.insert(key.clone(), i as u32);
    }
    let tree = BwTree::from_sorted(cfg.clone(), model.iter().map(|(a, b)| (a, *b))).unwrap();
    assert_eq!(tree.config(), &cfg);
    let s = tree.stats();
    assert_eq!((s.splits, s.merges, s.consolidations, s.restarts), (0, 0, 0, 0), "{name}: {s:?}");
    // Leaves are filled to 7/8 of `leaf_max`.
    if model.len() <= cfg.leaf_max * 7 / 8 {
        assert_eq!(s.height, 1, "{name}: {} keys fit in one leaf", model.len());
    } else if model.len() > cfg.leaf_max {
        assert!(s.height >= 2, "{name}: {s:?}");
    }
    // Every page is reachable through the right links of its level (the listing walks
    // them), and exactly the last node of each level has no high key.
    let dump = tree.dump_structure();
    assert_eq!(dump.lines().count() as u64, s.pages_allocated, "{name}:\n{dump}");
    assert_eq!(dump.lines().filter(|l| l.contains(", None) size")).count(), s.height, "{name}:\n{dump}");
    check_against(&tree, &model, space, probes, &format!("{name} after load"));
    for (i, op) in ops.iter().enumerate() {
        match *op {
            Op::Batch(ref ns, v) => batch(&tree, &mut model, ns, v, &format!("{name} op {i}")),
            Op::Get(n) => assert_eq!(tree.get(&k(n)).unwrap(), model.get(&k(n)).copied(), "{name} op {i} {op:?}"),
            Op::Upsert(n, v) => {
                assert_eq!(tree.upsert(&k(n), v).unwrap(), model.insert(k(n), v).is_none(), "{name} op {i}")
            }
            Op::Insert(n, v) => {
                let absent = !model.contains_key(&k(n));
                if absent {
                    model.insert(k(n), v);
                }
                assert_eq!(tree.insert(&k(n), v).unwrap(), absent, "{name} op {i} {op:?}");
            }
            Op::Update(n, v) => {
                let present = model.contains_key(&k(n));
                if present {
                    model.insert(k(n), v);
                }
                assert_eq!(tree.update(&k(n), v).unwrap(), present, "{name} op {i} {op:?}");
            }
            Op::Delete(n) => assert_eq!(tree.delete(&k(n)).unwrap(), model.remove(&k(n)).is_some(), "{name} op {i}"),
            Op::Scan(..) => {}
        }
    }
    check_against(&tree, &model, space, probes, &format!("{name} after ops"));
}

const BULK_SPACE: u16 = 1200;

/// Key sets: exactly 0, 1, 4, 5 (tiny `leaf_max` and one over), 128, 129 (the default's)
/// or a random number of keys from `k`'s space (varying lengths, shared prefixes, the empty
/// key), sometimes plus arbitrary short byte strings.
fn bulk_keys() -> impl Strategy<Value = Vec<Vec<u8>>> {
    let count = prop_oneof![Just(0usize), Just(1), Just(4), Just(5), Just(128), Just(129), 0..BULK_SPACE as usize];
    let extra =
        prop_oneof![Just(Vec::new()), proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..12), 0..40)];
    (count, extra).prop_flat_map(|(n, extra)| {
        proptest::sample::subsequence((0..BULK_SPACE).collect::<Vec<_>>(), n)
            .prop_map(move |ns| ns.into_iter().map(k).chain(extra.iter().cloned()).collect::<Vec<_>>())
    })
}

fn bulk_cfgs() -> Vec<(String, BwTreeConfig)> {
    let medium =
        BwTreeConfig { leaf_max: 16, inner_max: 8, merge_threshold: 4, delta_threshold: 5, ..BwTreeConfig::default() };
    [("tiny", BwTreeConfig::tiny()), ("medium", medium), ("default", BwTreeConfig::default())]
        .into_iter()
        .flat_map(|(size, base)| common::variants(base).into_iter().map(move |(v, c)| (format!("{size}/{v}"), c)))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn bulk_load_matches_btreemap(
        keys in bulk_keys(),
        ops in proptest::collection::vec(op(BULK_SPACE), 0..if cfg!(miri) { 30 } else { 2500 }),
        probes in proptest::collection::vec(0..BULK_SPACE, 6),
    ) {
        for (name, cfg) in bulk_cfgs() {
            run_bulk(cfg, &keys, &ops, BULK_SPACE, &probes, &name);
        }
    }
}

/// The exact sizes around a leaf's capacity, with an empty op list and with deletes of every
/// key then reinserts: the tree shrinks to one leaf (merges, root collapses) and grows again.
#[test]
fn bulk_load_edge_sizes_then_shrink_and_regrow() {
    for (name, cfg) in bulk_cfgs() {
        let lm = cfg.leaf_max;
        for n in [0, 1, 2, lm - 1, lm, lm + 1, 2 * lm, 2 * lm + 1, lm * cfg.inner_max + 3] {
            let keys: Vec<Vec<u8>> = (0..n as u64).map(|i| common::key(i, 8)).collect();
            run_bulk(cfg.clone(), &keys, &[], 0, &[], &format!("{name} n={n}"));
        }
    }
    let n: u64 = if cfg!(miri) { 40 } else { 3000 };
    for (name, cfg) in common::variants(BwTreeConfig::tiny()) {
        let tree = BwTree::from_sorted(cfg, (0..n).map(|i| (common::key(i, 8), i))).unwrap();
        let h = tree.stats().height;
        assert!(h >= 4, "{name}: height {h}");
        for i in (0..n).rev() {
            assert!(tree.delete(&common::key(i, 8)).unwrap(), "{name} delete {i}");
        }
        for _ in 0..50 {
            tree.upsert(b"x", 0).unwrap();
            tree.delete(b"x").unwrap();
        }
        let s = tree.stats();
        assert!(s.merges > 10 && s.root_collapses >= 1 && s.height < h, "{name}: {s:?}");
        assert_eq!(tree.scan(b"", None).count(), 0, "{name}");
        for i in 0..n {
            assert!(tree.insert(&common::key(i * 7 % n, 8), i).unwrap(), "{name} reinsert {i}");
        }
        let s = tree.stats();
        assert!(s.splits > 10 && s.root_splits >= 1, "{name}: {s:?}");
        assert_eq!(tree.scan(b"", None).count() as u64, n, "{name}");
    }
}

#[test]
fn bulk_load_rejects_unsorted_duplicate_and_long_keys() {
    for (name, cfg) in bulk_cfgs() {
        let unsorted = BwTree::from_sorted(cfg.clone(), [(&b"a"[..], 1u32), (b"c", 2), (b"b", 3)]);
        assert_eq!(unsorted.err(), Some(IndexError::NotSorted { index: 2 }), "{name}");
        let dup = BwTree::from_sorted(cfg.clone(), [(&b"a"[..], 1u32), (b"b", 2), (b"b", 3)]);
        assert_eq!(dup.err(), Some(IndexError::NotSorted { index: 2 }), "{name}");
        // Prefix ties: "ab\0" > "ab" > "a", the empty key is the least.
        let ok = BwTree::from_sorted(cfg.clone(), [(&b""[..], 0u32), (b"a", 1), (b"ab", 2), (b"ab\0", 3)]).unwrap();
        assert_eq!(ok.scan(b"", None).count(), 4, "{name}");
        let tie = BwTree::from_sorted(cfg.clone(), [(&b"ab\0"[..], 1u32), (b"ab", 2)]);
        assert_eq!(tie.err(), Some(IndexError::NotSorted { index: 1 }), "{name}");
        let empty_twice = BwTree::from_sorted(cfg.clone(), [(&b""[..], 1u32), (b"", 2)]);
        assert_eq!(empty_twice.err(), Some(IndexError::NotSorted { index: 1 }), "{name}");

        // Far into the load (after many leaves), and the builder stays usable after a rejection.
        let mut b = tsumiki::index::BwTreeBuilder::new(cfg.clone()).unwrap();
        for i in 0..1000u64 {
            b.push(&common::key(i * 2, 8), i).unwrap();
        }
        assert_eq!(b.push(&common::key(1000, 8), 0), Err(IndexError::NotSorted { index: 1000 }), "{name}");
        assert_eq!(b.push(&common::key(1998, 8), 0), Err(IndexError::NotSorted { index: 1000 }), "{name}");
        let long = vec![0xffu8; MAX_KEY_LEN + 1];
        assert_eq!(b.push(&long, 0), Err(IndexError::KeyTooLong { len: MAX_KEY_LEN + 1, max: MAX_KEY_LEN }), "{name}");
        b.push(&vec![0xffu8; MAX_KEY_LEN], 7).unwrap();
        assert_eq!(b.len(), 1001);
        let tree = b.finish().unwrap();
        assert_eq!(tree.scan(b"", None).count(), 1001, "{name}");
        assert_eq!(tree.get(&vec![0xffu8; MAX_KEY_LEN]).unwrap(), Some(7), "{name}");
        assert_eq!(tree.get(&common::key(1000, 8)).unwrap(), Some(500), "{name}");
        assert_eq!(tree.get(&common::key(1001, 8)).unwrap(), None, "{name}");
        assert!(IndexError::NotSorted { index: 3 }.to_string().contains("not greater"));
    }
    assert!(matches!(
        tsumiki::index::BwTreeBuilder::<u8>::new(BwTreeConfig { leaf_max: 2, ..BwTreeConfig::default() }),
        Err(IndexError::InvalidConfig(_))
    ));
}

#[test]
fn bulk_load_of_nothing_is_an_empty_tree() {
    for (name, cfg) in bulk_cfgs() {
        let a = BwTree::<u32>::from_sorted(cfg.clone(), std::iter::empty::<(&[u8], u32)>()).unwrap();
        let b = BwTree::<u32>::with_config(cfg).unwrap();
        assert_eq!(a.dump_structure(), b.dump_structure(), "{name}");
        assert_eq!(a.stats(), b.stats(), "{name}");
        assert_eq!(a.scan(b"", None).count(), 0, "{name}");
        a.upsert(b"k", 1).unwrap();
        assert_eq!(a.get(b"k").unwrap(), Some(1), "{name}");
    }
}

// ----- cursors and append runs ---------------------------------------------------------------

/// A cursor's answers (`get`, `first_from` both ways, `insert`) against the model, with
/// ordinary writes in between so the cursor's leaf gains deltas, splits and merges; and a
/// `refresh` that reports no change must mean the answers are still the model's. Every
/// other cursor starts from the leaf the one before it ended at (`cursor_near`), a hint
/// the writes in between may have made stale (split, merged, or not covering the key).
/// At the end, `get_sorted` over every key (present or not) agrees with the model.
fn run_cursor(cfg: BwTreeConfig, ops: &[(Op, bool)]) {
    use std::ops::Bound::{Excluded, Included, Unbounded};
    let tree = BwTree::with_config(cfg).unwrap();
    let mut model: BTreeMap<Vec<u8>, u32> = BTreeMap::new();
    let mut hint = None;
    let next = |model: &BTreeMap<Vec<u8>, u32>, key: &[u8], exclusive: bool| {
        let b = if exclusive { Excluded(key) } else { Included(key) };
        model.range::<[u8], _>((b, Unbounded)).next().map(|(a, b)| (a.clone(), *b))
    };
    for (i, (op, via_cursor)) in ops.iter().enumerate() {
        let (n, v) = match *op {
            Op::Upsert(n, v) | Op::Insert(n, v) | Op::Update(n, v) => (n, v),
            Op::Get(n) | Op::Delete(n) | Op::Scan(n, _) => {
                assert_eq!(tree.delete(&k(n)).unwrap(), model.remove(&k(n)).is_some(), "op {i}");
                continue;
            }
            Op::Batch(..) => continue,
        };
        if !via_cursor {
            tree.upsert(&k(n), v).unwrap();
            model.insert(k(n), v);
            continue;
        }
        let key = k(n);
        let guard = crossbeam_epoch::pin();
        let mut at =
            if i % 2 == 0 { tree.cursor(&key, &guard) } else { tree.cursor_near(&key, hint.as_ref(), &guard).0 };
        hint = Some(at.hint());
        let seen = (at.get().copied(), at.first_from(false).map(|(a, b)| (a.to_vec(), *b)));
        assert_eq!(seen.0, model.get(&key).copied(), "op {i}: get");
        assert_eq!(seen.1, next(&model, &key, false), "op {i}: first_from");
        let excl = at.first_from(true).map(|(a, b)| (a.to_vec(), *b));
        assert_eq!(excl, next(&model, &key, true), "op {i}: first_from exclusive");
        // A write between the look and the insert, at the key's neighbour, sometimes in
        // the same leaf: `refresh` must notice whatever changes the answers.
        let other = k(n.wrapping_add(1) % 2000);
        if v % 3 == 0 && other != key {
            tree.upsert(&other, v).unwrap();
            model.insert(other, v);
        }
        if !at.refresh() {
            assert_eq!(at.get().copied(), seen.0, "op {i}: unchanged get");
            assert_eq!(at.first_from(false).map(|(a, b)| (a.to_vec(), *b)), seen.1, "op {i}: unchanged");
        }
        assert_eq!(at.first_from(false).map(|(a, b)| (a.to_vec(), *b)), next(&model, &key, false), "op {i}");
        let absent = !model.contains_key(&key);
        assert_eq!(at.insert(v), Ok(absent), "op {i}: insert");
        model.entry(key).or_insert(v);
    }
    let mut keys: Vec<Vec<u8>> = (0..2001).map(k).collect();
    keys.sort();
    keys.dedup();
    let guard = crossbeam_epoch::pin();
    let mut got = Vec::new();
    tree.get_sorted(keys.iter().map(Vec::as_slice), &guard, |key, v| got.push((key.to_vec(), v.copied())));
    let want: Vec<_> = keys.iter().map(|key| (key.clone(), model.get(key).copied())).collect();
    assert!(got == want, "get_sorted differs from the model");
    let all: Vec<_> = tree.scan(b"", None).collect();
    assert_eq!(all, model.into_iter().collect::<Vec<_>>(), "final contents");
}

/// Ascending appends (the runs that consolidate on a longer threshold) interleaved with
/// writes anywhere, checked by `get`, `first_from` and full scans as they go.
fn run_append_runs(cfg: BwTreeConfig, steps: &[(u8, u32)]) {
    let tree = BwTree::with_config(cfg).unwrap();
    let mut model: BTreeMap<Vec<u8>, u32> = BTreeMap::new();
    let mut top = 0u32;
    for (i, &(what, x)) in steps.iter().enumerate() {
        match what % 8 {
            0..=4 => {
                top += 1 + x % 3;
                let key = top.to_be_bytes();
                assert_eq!(tree.upsert(&key, x).unwrap(), model.insert(key.to_vec(), x).is_none(), "step {i}");
            }
            5 => {
                let key = (x % (top + 1)).to_be_bytes();
                assert_eq!(tree.upsert(&key, x).unwrap(), model.insert(key.to_vec(), x).is_none(), "step {i}");
            }
            6 => {
                let key = (x % (top + 1)).to_be_bytes();
                assert_eq!(tree.delete(&key).unwrap(), model.remove(&key[..]).is_some(), "step {i}");
            }
            _ => {
                let key = (x % (top + 2)).to_be_bytes();
                assert_eq!(tree.get(&key).unwrap(), model.get(&key[..]).copied(), "step {i}");
                let want = model.range(key.to_vec()..).next().map(|(a, b)| (a.clone(), *b));
                assert_eq!(tree.first_from(&key, false), want, "step {i}: first_from");
            }
        }
        if i % 256 == 255 {
            let got: Vec<_> = tree.scan(b"", None).collect();
            assert_eq!(got, model.iter().map(|(a, b)| (a.clone(), *b)).collect::<Vec<_>>(), "step {i}: scan");
        }
    }
    let got: Vec<_> = tree.scan(b"", None).collect();
    assert_eq!(got, model.into_iter().collect::<Vec<_>>(), "final contents");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn cursor_matches_btreemap(
        ops in proptest::collection::vec((write_op(300), any::<bool>()), 1..if cfg!(miri) { 40 } else { 2000 })
    ) {
        for (_, cfg) in common::variants(BwTreeConfig::tiny()) {
            run_cursor(cfg, &ops);
        }
        run_cursor(BwTreeConfig::default(), &ops);
    }

    #[test]
    fn append_runs_match_btreemap(
        steps in proptest::collection::vec((any::<u8>(), any::<u32>()), 1..if cfg!(miri) { 60 } else { 4000 })
    ) {
        for (_, cfg) in common::variants(BwTreeConfig::default()) {
            run_append_runs(cfg, &steps);
        }
        run_append_runs(BwTreeConfig { leaf_max: 64, merge_threshold: 8, ..BwTreeConfig::default() }, &steps);
    }
}
