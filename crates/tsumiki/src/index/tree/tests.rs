use super::*;

/// The `depth` of the head of `key`'s leaf chain.
fn head_depth(tree: &Tree<u64>, key: &[u8]) -> u16 {
    let guard = epoch::pin();
    let mut path = Path::new();
    let (_, head) = tree.descend(key, 0, &mut path, &guard, 0).expect("leaf level exists");
    // SAFETY: non-null head from `descend`, protected by `guard`.
    unsafe { node_ref(head) }.depth
}

/// The leaf covering `key`: its head and range.
fn leaf_of<'g>(tree: &Tree<u64>, key: &[u8], guard: &'g Guard) -> (&'g Node<u64>, &'g Range) {
    let mut path = Path::new();
    let (_, head) = tree.descend(key, 0, &mut path, guard, 0).expect("leaf level exists");
    // SAFETY: non-null head from `descend`, protected by `guard`.
    let h = unsafe { node_ref(head) };
    (h, tree.inspect(h, guard).range)
}

/// Deleting a leaf's last record leaves a delete delta over its base: the leaf itself
/// has nothing at or after that key, and `first_from` must move on to the next leaf.
#[test]
fn first_from_moves_right_past_a_deleted_last_record() {
    for numbered_deltas in [false, true] {
        for split_delta_at_head in [false, true] {
            let cfg = BwTreeConfig { numbered_deltas, split_delta_at_head, ..BwTreeConfig::default() };
            let tree = Tree::new(cfg.clone());
            let n = cfg.leaf_max as u64 * 3;
            for i in 0..n {
                tree.write(&(i * 2).to_be_bytes(), WriteOp::Upsert(i)).unwrap();
            }
            let guard = &epoch::pin();
            let (_, range) = leaf_of(&tree, &0u64.to_be_bytes(), guard);
            let high = u64::from_be_bytes(range.high.as_deref().expect("several leaves").try_into().unwrap());
            let last = high - 2;
            // A delete that happened to trigger a consolidation is redone, until one stays
            // a delta on the chain.
            let has_delete = |h: &Node<u64>| {
                let mut n = h;
                while !n.is_base() {
                    if matches!(n.kind, Kind::Delete { .. }) {
                        return true;
                    }
                    // SAFETY: deltas have a non-null next under `guard`.
                    n = unsafe { node_ref(n.next(guard)) };
                }
                false
            };
            for _ in 0..=cfg.delta_threshold {
                assert!(tree.write(&last.to_be_bytes(), WriteOp::Delete).unwrap());
                if has_delete(leaf_of(&tree, &0u64.to_be_bytes(), guard).0) {
                    break;
                }
                tree.write(&last.to_be_bytes(), WriteOp::Upsert(last / 2)).unwrap();
            }
            let (h, range) = leaf_of(&tree, &0u64.to_be_bytes(), guard);
            assert!(has_delete(h), "the delete is a delta on the leaf");
            let probe = (last - 1).to_be_bytes();
            assert_eq!(leaf_first_from(h, range, &probe, false, guard), None);
            assert_eq!(leaf_entries(h, range, guard).iter().find(|(k, _)| *k >= &probe[..]), None);
            let want = (&high.to_be_bytes()[..], &(high / 2));
            assert_eq!(tree.first_from(&probe, false, guard), Some(want));
            assert_eq!(tree.first_from(&(last - 2).to_be_bytes(), true, guard), Some(want));
            let before = (last - 2).to_be_bytes();
            assert_eq!(tree.first_from(&before, false, guard), Some((&before[..], &(last / 2 - 1))));
        }
    }
}

/// The successor search of an append run's head answers from the head alone: it must
/// agree with the whole chain's records for every bound below, at and above the run's
/// keys, inclusive and exclusive.
#[test]
fn first_from_on_an_append_run_agrees_with_the_chain() {
    let tree = Tree::new(BwTreeConfig::default());
    // A base of even keys (inserted descending: no run), consolidated by reads, then
    // ascending even keys above them: an append run of deltas.
    for i in (0..40u64).rev() {
        tree.write(&(i * 2).to_be_bytes(), WriteOp::Upsert(i)).unwrap();
    }
    let guard = &epoch::pin();
    for _ in 0..2 * READ_CONSOLIDATE_ONE {
        tree.get_pinned(&0u64.to_be_bytes(), guard).unwrap();
    }
    assert!(leaf_of(&tree, &0u64.to_be_bytes(), guard).0.is_base(), "reads consolidated the leaf");
    let mut run = 0;
    for i in 0..APPEND_RUN as u64 - 1 {
        tree.write(&(100 + i * 2).to_be_bytes(), WriteOp::Upsert(1000 + i)).unwrap();
        let (h, range) = leaf_of(&tree, &0u64.to_be_bytes(), guard);
        if !h.appends {
            continue;
        }
        run += 1;
        for probe in 0..=(100 + i * 2 + 2) {
            let key = probe.to_be_bytes();
            for exclusive in [false, true] {
                let want = leaf_entries(h, range, guard).into_iter().find(|(k, _)| {
                    if exclusive {
                        *k > &key[..]
                    } else {
                        *k >= &key[..]
                    }
                });
                assert_eq!(leaf_first_from(h, range, &key, exclusive, guard), want, "probe {probe} excl {exclusive}");
            }
        }
    }
    assert!(run >= 4, "the inserts formed an append run ({run} heads)");
}

/// A sequential load splits the leaf it appends to near the load's end, so the leaves it
/// leaves behind are nearly full; every record is still there, in order. So does a load of one
/// slice of the keys below another (`above`: a key above them all is there first, so the
/// load never reaches the rightmost leaf), as when several threads each load a slice.
#[test]
fn ascending_load_fills_leaves() {
    for (numbered_deltas, split_delta_at_head, above) in (0..8).map(|i| (i & 1 != 0, i & 2 != 0, i & 4 != 0)) {
        let cfg = BwTreeConfig { numbered_deltas, split_delta_at_head, ..BwTreeConfig::default() };
        let tree = Tree::new(cfg.clone());
        let n = cfg.leaf_max as u64 * if cfg!(miri) { 3 } else { 40 };
        if above {
            tree.write(&u64::MAX.to_be_bytes(), WriteOp::Upsert(0)).unwrap();
        }
        for i in 0..n {
            tree.write(&i.to_be_bytes(), WriteOp::Upsert(i)).unwrap();
        }
        let guard = &epoch::pin();
        let (mut at, mut leaves, mut seen, mut short) = (0u64.to_be_bytes().to_vec(), 0u64, 0u64, 0);
        loop {
            let (h, range) = leaf_of(&tree, &at, guard);
            let entries = leaf_entries(h, range, guard);
            for (k, v) in &entries {
                if seen == n {
                    assert_eq!((*k, **v), (&u64::MAX.to_be_bytes()[..], 0));
                    continue;
                }
                assert_eq!((*k, **v), (&seen.to_be_bytes()[..], seen));
                seen += 1;
            }
            leaves += 1;
            match &range.high {
                Some(h) => {
                    // Every leaf but the last holds about 90% of `leaf_max`, but for the
                    // first with a key above, which split in the middle: it held that key.
                    short += (seen < n && entries.len() * 10 < cfg.leaf_max * 8) as usize;
                    at = h.to_vec();
                }
                None => break,
            }
        }
        assert!(short <= above as usize, "{short} short leaves ({numbered_deltas} {split_delta_at_head} {above})");
        assert_eq!(seen, n);
        // The last leaf may be short, and so may the one with the key above.
        let partial = 1 + above as u64;
        assert!(leaves * cfg.leaf_max as u64 * 8 <= n * 10 + partial * cfg.leaf_max as u64 * 8, "{leaves} leaves");
    }
}

/// The room a leaf's base holds beyond its keys: the values' capacity over their length
/// (the keys are packed at their size).
fn slack(b: &Base<u64>) -> usize {
    8 * (b.vals.capacity() - b.vals.len())
}

/// What loads and evictions leave in memory: a batch that splits a leaf leaves the left
/// part as a base of its own keys (not the whole old base behind a split delta), and a
/// batch that deletes most of a leaf leaves it sized to what is left.
#[test]
fn batches_leave_leaves_sized_to_their_keys() {
    let cfg = BwTreeConfig::default();
    let tree = Tree::new(cfg.clone());
    let max = cfg.leaf_max as u64;
    // Every other key, written in order (several nearly full leaves), then the keys
    // between those of the first leaf in one batch: it splits, and not as a root nor
    // at an appending end.
    for i in 0..3 * max {
        tree.write(&(i * 2).to_be_bytes(), WriteOp::Upsert(i)).unwrap();
    }
    let guard = &epoch::pin();
    let first_high = leaf_of(&tree, &0u64.to_be_bytes(), guard).1.high.clone().expect("several leaves");
    let first_high = u64::from_be_bytes(first_high[..].try_into().unwrap());
    let odds: Vec<[u8; 8]> = (0..first_high / 2).map(|i| (i * 2 + 1).to_be_bytes()).collect();
    let b: Vec<(&[u8], Option<u64>)> = odds.iter().map(|k| (&k[..], Some(0))).collect();
    tree.apply_batch(&b, &mut vec![false; b.len()]).unwrap();
    let (h, range) = leaf_of(&tree, &0u64.to_be_bytes(), guard);
    assert!(range.high.as_deref() < Some(&first_high.to_be_bytes()[..]), "the batch split the leaf");
    let left = h.as_base().expect("the left part was consolidated after its split");
    assert_eq!(left.len(), leaf_entries(h, range, guard).len(), "its base holds only its keys");
    // Delete most of the left leaf's keys in one batch (not so many that it merges).
    let keep = cfg.merge_threshold as u64 + 4;
    let high = u64::from_be_bytes(range.high.as_deref().unwrap().try_into().unwrap());
    assert!(high > 2 * keep, "the left leaf holds more than twice what is kept");
    let gone: Vec<[u8; 8]> = (keep..high).map(|i| i.to_be_bytes()).collect();
    let b: Vec<(&[u8], Option<u64>)> = gone.iter().map(|k| (&k[..], None)).collect();
    tree.apply_batch(&b, &mut vec![false; b.len()]).unwrap();
    let (h, _) = leaf_of(&tree, &0u64.to_be_bytes(), guard);
    let base = h.as_base().expect("a batch leaves a base");
    assert_eq!(base.len() as u64, keep);
    assert!(slack(base) <= 64, "{} bytes of room left in a leaf of {keep} keys", slack(base));
}

/// Rewriting the same keys over and over must not let chain depths drift upwards, with
/// either consolidation rule: consolidations size their buffers by them.
#[test]
fn chain_depth_stays_bounded() {
    for numbered_deltas in [false, true] {
        let cfg = BwTreeConfig { numbered_deltas, ..BwTreeConfig::default() };
        let tree = Tree::new(cfg.clone());
        // Enough keys that the leaf neither merges nor splits: routine consolidations only.
        let keys = cfg.merge_threshold as u64 * 2;
        for i in 0..keys {
            tree.write(&i.to_be_bytes(), WriteOp::Upsert(i)).unwrap();
        }
        let writes: u64 = if cfg!(miri) { 300 } else { 2000 };
        for i in 0..writes {
            let key = (i % keys).to_be_bytes();
            tree.write(&key, WriteOp::Upsert(i)).unwrap();
            let depth = head_depth(&tree, &key) as usize;
            assert!(
                depth <= 2 * cfg.delta_threshold,
                "numbered_deltas {numbered_deltas}: depth {depth} after {i} writes"
            );
        }
    }
}

/// A helper that read a root split, was delayed while the split completed, its right
/// half merged back and the root collapsed to the same pid, must not grow a root over
/// that long-retired right half (the root word's generation and the checks in
/// `grow_root`). Found as a rare livelock in `stress::racing_smos_are_helped`.
#[test]
fn a_stale_root_split_grows_nothing() {
    let cfg =
        BwTreeConfig { leaf_max: 4, inner_max: 4, merge_threshold: 2, delta_threshold: 2, ..BwTreeConfig::default() };
    let tree = Tree::new(cfg);
    let guard = epoch::pin();
    let root = tree.root_pid();
    let key = |i: u64| i.to_be_bytes();
    // Fill the root leaf until it splits, and keep its split delta as a stalled helper would.
    let mut i = 0;
    let split = loop {
        tree.write(&key(i), WriteOp::Upsert(i)).unwrap();
        i += 1;
        // SAFETY: loaded under `guard`.
        let h = unsafe { node_ref(tree.load(root, &guard)) };
        if matches!(h.kind, Kind::Split { .. }) {
            break h;
        }
        assert!(i < 100, "the root leaf never split");
    };
    assert_ne!(tree.root_pid(), root, "the split grew a root");
    // Delete until the right half merges back and the root collapses to `root` again.
    for j in (1..i).rev() {
        tree.write(&key(j), WriteOp::Delete).unwrap();
        if tree.root_pid() == root {
            break;
        }
    }
    assert_eq!(tree.root_pid(), root, "the tree never collapsed back to its first root");
    assert!(tree.grow_root(root, split, &guard).is_err());
    assert_eq!(tree.root_pid(), root, "a stale split grew a new root");
    // The grow's winner may not have marked the split posted yet when the rest happens:
    // the split gone from the chain and its right half retired must refuse it too.
    let Kind::Split { posted, .. } = &split.kind else { unreachable!() };
    posted.store(false, Ordering::Release);
    assert!(tree.grow_root(root, split, &guard).is_err());
    assert_eq!(tree.root_pid(), root, "an unposted stale split grew a new root");
    assert_eq!(tree.get(&key(0)).unwrap(), Some(0));
}

/// An index-delete still PENDING when a number-0 delta consolidates the chain below it
/// is decided, not dropped: dropped, its merge would still commit and leave the parent
/// routing to the merged node once that is retired.
#[test]
fn consolidation_below_keeps_a_pending_index_delete() {
    let cfg = BwTreeConfig {
        leaf_max: 4,
        inner_max: 64,
        merge_threshold: 2,
        delta_threshold: 2,
        numbered_deltas: true,
        split_delta_at_head: false,
    };
    let tree = Tree::new(cfg);
    for i in 0..40u64 {
        tree.write(&i.to_be_bytes(), WriteOp::Upsert(i)).unwrap();
    }
    let guard = epoch::pin();
    let root = tree.root_pid();
    // Consolidate the root so the deltas below start numbering from its base.
    tree.consolidate(root, &Path::new(), &guard, 0);
    let head = tree.load(root, &guard);
    // SAFETY: loaded under `guard`.
    let h = unsafe { node_ref(head) };
    assert!(h.level == 1 && h.is_base(), "a two-level tree with a consolidated root");
    let entries = inner_entries(h, tree.inspect(h, &guard).range, &guard);
    assert!(entries.len() >= 4, "{entries:?}");
    let (sep, child): (Box<[u8]>, Pid) = (entries[2].0.into(), entries[2].1);
    let state = MergeState::new();
    let ip = tree.insert_point(root, head, &guard).unwrap();
    let del = Node::delta(1, Kind::IndexDelete { sep: sep.clone(), state: Arc::clone(&state) });
    let Ok(del) = tree.install(&ip, Owned::new(del), -1, &guard) else { panic!("install") };
    // A second delta takes number 0: its installer consolidates the chain below it.
    let ip = tree.insert_point(root, del, &guard).unwrap();
    let extra = Node::delta(1, Kind::IndexInsert { sep: entries[1].0[..].into(), child: entries[1].1 });
    let Ok(d) = tree.install(&ip, Owned::new(extra), 0, &guard) else { panic!("install") };
    // SAFETY: just installed, under `guard`.
    let dn = unsafe { node_ref(d) };
    assert_eq!(dn.num, 0);
    tree.consolidate_below(root, dn, &Path::new(), &guard, 0);
    // The merge's installer decides MERGED after its CAS, as in `help_remove`.
    assert_eq!(state.decide(MERGED), MERGED);
    // SAFETY: loaded under `guard`.
    let now = unsafe { node_ref(tree.load(root, &guard)) };
    assert_ne!(inner_route(now, &sep, &guard), child, "the parent still routes to the merged node");
}

/// A walk visits what a scan returns, from any start, stopping where told; the leaves it
/// notes change exactly when a record enters one of them (a write far away leaves them),
/// also when (b) keeps a split delta at the head and the write goes in below it.
#[test]
fn walk_matches_scan_and_notes_its_leaves() {
    for numbered_deltas in [false, true] {
        for split_delta_at_head in [false, true] {
            let cfg = BwTreeConfig { numbered_deltas, split_delta_at_head, ..BwTreeConfig::default() };
            walk_and_note(cfg);
        }
    }
}

fn walk_and_note(cfg: BwTreeConfig) {
    let tree = crate::index::BwTree::<u64>::with_config(cfg).unwrap();
    let n = 1000u64;
    for i in 0..n {
        tree.upsert(&(i * 2).to_be_bytes(), i).unwrap();
    }
    let guard = &epoch::pin();
    for start in [0u64, 1, 2, 500, 1001, 1998, 1999, 5000] {
        for take in [0usize, 1, 10, 200, 2000] {
            let mut walked = Vec::new();
            tree.walk(&start.to_be_bytes(), None, guard, |k, v| {
                if walked.len() == take {
                    return false;
                }
                walked.push((k.to_vec(), *v));
                walked.len() < take
            });
            let scanned: Vec<_> = tree.scan(&start.to_be_bytes(), None).take(take).collect();
            assert_eq!(walked, scanned, "walk from {start}, {take} records");
        }
    }
    let mut leaves = crate::index::Leaves::default();
    for (k, far) in [(121u64, 1901u64), (1201, 101), (1603, 1)] {
        let mut seen = 0;
        tree.walk_noting(&(k - 21).to_be_bytes(), Some(&(k + 19).to_be_bytes()), guard, &mut leaves, |_, _| {
            seen += 1;
            true
        });
        assert_eq!(seen, 20);
        assert!(tree.leaves_unchanged(&leaves, guard));
        // Far away: another leaf.
        tree.upsert(&far.to_be_bytes(), 0).unwrap();
        assert!(tree.leaves_unchanged(&leaves, guard), "a write at {far} after a walk near {k}");
        // Inside the walked range.
        tree.upsert(&k.to_be_bytes(), 0).unwrap();
        assert!(!tree.leaves_unchanged(&leaves, guard), "a write at {k}");
    }
}

/// A leaf chain that reads meet with `READ_CONSOLIDATE` deltas or more is consolidated by
/// the read, a point read or a walk, and reads the same records after; one with fewer is
/// left alone.
#[test]
fn reads_consolidate_a_leaf_left_with_deltas() {
    for walk in [false, true] {
        let tree = Tree::new(BwTreeConfig::default());
        for i in 0..50u64 {
            tree.write(&(i * 2).to_be_bytes(), WriteOp::Upsert(i)).unwrap();
        }
        // Deltas on top of one base: consolidate it first, then add one at a time.
        {
            let guard = &epoch::pin();
            let mut path = Path::new();
            let (pid, _) = tree.descend(&[0], 0, &mut path, guard, 0).unwrap();
            tree.consolidate(pid, &path, guard, 0);
        }
        assert_eq!(head_depth(&tree, &[0]), 0);
        let read = |tree: &Tree<u64>| {
            if walk {
                let mut n = 0;
                tree.walk(&[0], None, &epoch::pin(), None, |_, _| {
                    n += 1;
                    true
                });
                n
            } else {
                tree.get(&20u64.to_be_bytes()).unwrap().map_or(0, |v| v as usize)
            }
        };
        let want = if walk { 50 } else { 10 };
        let mut added = 0;
        while head_depth(&tree, &[0]) + 1 < READ_CONSOLIDATE as u16 {
            tree.write(&(1001 + added * 2u64).to_be_bytes(), WriteOp::Upsert(0)).unwrap();
            added += 1;
        }
        assert_eq!(read(&tree), want + if walk { added as usize } else { 0 });
        assert!(head_depth(&tree, &[0]) > 0, "walk={walk}: a chain under the threshold stays");
        tree.write(&(1001 + added * 2u64).to_be_bytes(), WriteOp::Upsert(0)).unwrap();
        added += 1;
        assert_eq!(head_depth(&tree, &[0]) as usize, READ_CONSOLIDATE);
        assert_eq!(read(&tree), want + if walk { added as usize } else { 0 });
        assert_eq!(head_depth(&tree, &[0]), 0, "walk={walk}: the read consolidated the chain");
        assert_eq!(read(&tree), want + if walk { added as usize } else { 0 });
        // A chain of one delta is consolidated by one read in `READ_CONSOLIDATE_ONE`.
        tree.write(&(1001 + added * 2u64).to_be_bytes(), WriteOp::Upsert(0)).unwrap();
        added += 1;
        assert_eq!(head_depth(&tree, &[0]), 1);
        let mut reads = 0;
        while head_depth(&tree, &[0]) > 0 {
            assert!(reads < READ_CONSOLIDATE_ONE, "walk={walk}: {reads} reads left one delta");
            assert_eq!(read(&tree), want + if walk { added as usize } else { 0 });
            reads += 1;
        }
    }
}

/// The leaf `key`'s descent ends at (pid and head), and the head of its parent's chain
/// (none while the root is a leaf).
fn leaf_and_parent<'g>(tree: &Tree<u64>, key: &[u8], guard: &'g Guard) -> (Pid, usize, Option<&'g Node<u64>>) {
    let mut path = Path::new();
    let (pid, head) = tree.descend(key, 0, &mut path, guard, 0).expect("leaf level exists");
    // SAFETY: loaded under `guard`.
    let parent = path.last().map(|p| unsafe { node_ref(tree.load(p, guard)) });
    (pid, head.as_raw() as usize, parent)
}

/// The parent's entry of the leaf a read descends to: its remembered address, and the
/// leaf's base now.
fn leaf_hint(tree: &Tree<u64>, key: &[u8], guard: &Guard) -> (usize, usize) {
    let (pid, head, parent) = leaf_and_parent(tree, key, guard);
    let b = chain_base(parent.expect("a tree of two levels"), guard).as_base().expect("a base");
    let child = b.children.iter().find(|c| c.pid == pid).expect("the parent names the leaf");
    (child.hinted_node(), head)
}

/// A descent remembers the base it found in the parent's entry (`Child`), and a read after
/// the leaf was consolidated remembers the new base: the prefetch of the next descent asks
/// for the right lines.
#[test]
fn descents_remember_the_child_base_and_refresh_it_after_a_consolidation() {
    let cfg = BwTreeConfig::default();
    let tree = Tree::new(cfg.clone());
    for i in 0..cfg.leaf_max as u64 * 4 {
        tree.write(&i.to_be_bytes(), WriteOp::Upsert(i)).unwrap();
    }
    let key = 5u64.to_be_bytes();
    // Reads consolidate what a write or the load left on the leaf; then its head is a base.
    let settle = |tree: &Tree<u64>| {
        for _ in 0..1000 {
            if head_depth(tree, &key) == 0 {
                return;
            }
            tree.get(&key).unwrap();
        }
        panic!("reads left the leaf's deltas");
    };
    settle(&tree);
    let guard = &epoch::pin();
    tree.get(&key).unwrap();
    let (hint, base) = leaf_hint(&tree, &key, guard);
    assert_eq!(hint, base, "the parent's entry names the leaf's base");
    // A write, and a consolidation by reads: a new base, which the next read notes.
    tree.write(&key, WriteOp::Upsert(7)).unwrap();
    settle(&tree);
    tree.get(&key).unwrap();
    let (hint2, base2) = leaf_hint(&tree, &key, guard);
    assert_ne!(base2, base, "the leaf has a new base");
    assert_eq!(hint2, base2, "a read after the consolidation names the new base");
    assert_eq!(tree.get(&key).unwrap(), Some(7));
}

/// The depth of the chain of the parent of `key`'s leaf (0 while the root is a leaf).
fn parent_depth(tree: &Tree<u64>, key: &[u8]) -> u16 {
    leaf_and_parent(tree, key, &epoch::pin()).2.map_or(0, |p| p.depth)
}

/// Splits leave index deltas on the parent, which every descent through it walks: reads
/// consolidate them, one read in `READ_CONSOLIDATE_ONE` that meets them.
#[test]
fn reads_consolidate_an_inner_node_with_deltas() {
    let cfg = BwTreeConfig::default();
    let tree = Tree::new(cfg.clone());
    let key = 0u64.to_be_bytes();
    // Keys added until a split leaves a delta on the parent (more splits follow the first).
    let i = load_until(&tree, |tree, i| parent_depth(tree, &key) > 0 && i >= cfg.leaf_max as u64 * 2);
    reads_consolidate_parent(&tree, &key);
    assert_eq!(tree.get(&(i - 1).to_be_bytes()).unwrap(), Some(i - 1));
}

/// Writes ascending keys from 0 until `done(tree, keys written)`; returns how many.
fn load_until(tree: &Tree<u64>, done: impl Fn(&Tree<u64>, u64) -> bool) -> u64 {
    let mut i = 0u64;
    while !done(tree, i) {
        tree.write(&i.to_be_bytes(), WriteOp::Upsert(i)).unwrap();
        i += 1;
        assert!(i < 100_000, "the load never made the case");
    }
    i
}

/// Reads `key` (holding 0) until the parent of its leaf has no deltas, within a few
/// rounds of `READ_CONSOLIDATE_ONE`.
fn reads_consolidate_parent(tree: &Tree<u64>, key: &[u8]) {
    let mut reads = 0;
    while parent_depth(tree, key) > 0 {
        assert!(reads < 4 * READ_CONSOLIDATE_ONE, "{reads} reads left the parent's deltas");
        assert_eq!(tree.get(key).unwrap(), Some(0));
        reads += 1;
    }
}

/// An inner node that split keeps its split delta on top until it is consolidated, and an
/// ascending load has moved on: no write comes its way again. Reads consolidate it too
/// (every descent walked the delta and the base's stale half: a twelfth of YCSB-A).
#[test]
fn reads_consolidate_an_inner_node_left_with_a_split() {
    let tree = Tree::new(BwTreeConfig::tiny());
    let key = 0u64.to_be_bytes();
    let i = load_until(&tree, |tree, _| leaf_and_parent(tree, &key, &epoch::pin()).2.is_some_and(|p| p.is_smo()));
    reads_consolidate_parent(&tree, &key);
    for k in 0..i {
        assert_eq!(tree.get(&k.to_be_bytes()).unwrap(), Some(k));
    }
}

/// `tail_low` names the `n`-th record below `end` in the leaf (or the leaf's low key when
/// it holds fewer), by index on a consolidated leaf and by walking a chain with deltas:
/// both agree with the leaf's records listed whole.
#[test]
fn tail_low_counts_back_from_the_end() {
    let cfg = BwTreeConfig::default();
    let tree = Tree::new(cfg.clone());
    let n = cfg.leaf_max as u64 * 3;
    for i in 0..n {
        tree.write(&(i * 2).to_be_bytes(), WriteOp::Upsert(i)).unwrap();
    }
    let guard = &epoch::pin();
    let mut checked = [0, 0];
    for with_deltas in [false, true] {
        if with_deltas {
            // Two deltas on every leaf: an insert and a delete (under the threshold).
            for i in (0..n).step_by(40) {
                tree.write(&(i * 2 + 1).to_be_bytes(), WriteOp::Upsert(i)).unwrap();
                tree.write(&(i * 2 + 6).to_be_bytes(), WriteOp::Delete).unwrap();
            }
        }
        for probe in (0..n * 2).step_by(37) {
            let key = probe.to_be_bytes();
            if !with_deltas {
                let mut path = Path::new();
                let (pid, _) = tree.descend(&key, 0, &mut path, guard, 0).unwrap();
                tree.consolidate(pid, &path, guard, 0);
            }
            let (h, range) = leaf_of(&tree, &key, guard);
            checked[usize::from(!h.is_base())] += 1;
            let records: Vec<Vec<u8>> = leaf_entries(h, range, guard).into_iter().map(|(k, _)| k.to_vec()).collect();
            for end in [None, Some(key.to_vec()), Some((probe + 1).to_be_bytes().to_vec())] {
                let below = records.iter().filter(|k| end.as_ref().is_none_or(|e| *k < e)).count();
                for want in [1, 2, 5, below.max(1), below + 1] {
                    let expected = if below >= want { records[below - want].clone() } else { range.low.to_vec() };
                    assert_eq!(
                        tree.tail_low(&key, end.as_deref(), want, guard),
                        expected,
                        "probe {probe}, end {end:?}, n {want}, deltas {with_deltas}"
                    );
                }
            }
        }
    }
    assert!(checked[0] > 0 && checked[1] > 0, "both consolidated leaves and chains were met: {checked:?}");
}
