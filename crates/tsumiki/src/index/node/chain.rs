//! Reading a chain without changing it: lookups and routing through deltas, and
//! materialising a chain's entries (a leaf's merge of its data deltas over its base, the
//! consolidations, the bases they build).

use super::*;

/// Looks `key` up in a validated leaf chain.
///
/// A split delta makes the base under it stale at and above its separator, but not the data
/// deltas under it: with improvement (b) deltas land below the SMO run, and under a merge
/// that re-extended the range they may hold any key. A merge delta sends keys at or above its
/// separator to the absorbed base once this chain has nothing newer for them.
pub(crate) fn leaf_lookup<'g, V>(head: &'g Node<V>, key: &[u8], guard: &'g Guard) -> Option<&'g V> {
    let mut node = head;
    let mut right_base: Option<&'g Base<V>> = None;
    let mut cut = false;
    let kp = prefix(key);
    loop {
        match &node.kind {
            Kind::Upsert { key: k, val } if node.kp == kp && cmp_prefixed(kp, k, kp, key).is_eq() => return Some(val),
            Kind::Delete { key: k } if node.kp == kp && cmp_prefixed(kp, k, kp, key).is_eq() => return None,
            Kind::Split { sep, .. } if cmp_prefixed(kp, key, node.kp, sep).is_ge() => cut = true,
            Kind::Merge { sep, right_base: rb, .. }
                if right_base.is_none() && cmp_prefixed(kp, key, node.kp, sep).is_ge() =>
            {
                // SAFETY: the merged base lives as long as this merge delta.
                right_base = unsafe { &**rb }.as_base();
            }
            Kind::Base(b) => {
                if !cut {
                    if let Ok(i) = b.keys.search_record(key, &b.vals) {
                        return Some(&b.vals[i]);
                    }
                }
                let rb = right_base?;
                return rb.keys.search_record(key, &rb.vals).ok().map(|i| &rb.vals[i]);
            }
            _ => {}
        }
        // SAFETY: every delta has a non-null next protected by the same guard.
        node = unsafe { node_ref(node.next(guard)) };
    }
}

/// The child of a validated inner chain that covers `key`: the entry with the greatest
/// separator at or below `key`, where an entry exists if the newest delta naming its
/// separator inserted it (or, with no delta naming it, if the base holds it). These exact
/// map semantics never route through an entry that was deleted, so never to a page id that
/// may have been retired and reused.
pub(crate) fn inner_route<'g, V>(head: &'g Node<V>, key: &[u8], guard: &'g Guard) -> Pid {
    inner_route_hinted(head, key, guard).0
}

/// [`inner_route`], with the base and index of the entry the answer came from, when it came
/// from a base's own entry (whose [`Child`] hints then apply).
pub(crate) fn inner_route_hinted<'g, V>(
    head: &'g Node<V>,
    key: &[u8],
    guard: &'g Guard,
) -> (Pid, Option<(&'g Base<V>, usize)>) {
    // A consolidated node (nearly every one a descent meets) skips the chain walk, whose
    // table of decided separators alone, cleared on every call, was a fifth of its time.
    if let Kind::Base(b) = &head.kind {
        let i = b.child_index(key);
        return (b.children[i].pid, Some((b, i)));
    }
    inner_route_chain(head, key, guard)
}

/// [`inner_route_hinted`] through a chain of deltas.
#[inline(never)]
fn inner_route_chain<'g, V>(head: &'g Node<V>, key: &[u8], guard: &'g Guard) -> (Pid, Option<(&'g Base<V>, usize)>) {
    const MAX_DECIDED: usize = 32;
    // Separators (with prefixes) decided by a delta already seen; newer deltas win.
    let mut decided: [(u64, &[u8]); MAX_DECIDED] = [(0, &[]); MAX_DECIDED];
    let mut n_decided = 0;
    let is_decided = |decided: &[(u64, &[u8])], p: u64, k: &[u8]| {
        decided.iter().any(|&(dp, dk)| dp == p && cmp_prefixed(p, dk, p, k).is_eq())
    };
    let kp = prefix(key);
    // The greatest inserted separator <= key seen so far: (prefix, separator, child).
    let mut best: Option<(u64, &'g [u8], Pid)> = None;
    let mut node = head;
    let mut right_base: Option<&'g Base<V>> = None;
    let mut cut = false;
    loop {
        match &node.kind {
            Kind::IndexInsert { sep, .. } | Kind::IndexDelete { sep, .. } => {
                // The entry this delta decides: `Some(child)` if it exists, `None` if deleted.
                // A void (not MERGED) index-delete decides nothing.
                let entry = match &node.kind {
                    Kind::IndexInsert { child, .. } => Some(Some(*child)),
                    Kind::IndexDelete { state, .. } if state.get() == MERGED => Some(None),
                    _ => None,
                };
                if let Some(entry) = entry {
                    if !is_decided(&decided[..n_decided], node.kp, sep) {
                        if n_decided == MAX_DECIDED {
                            return (route_slow(head, key, guard), None);
                        }
                        decided[n_decided] = (node.kp, &sep[..]);
                        n_decided += 1;
                        if let Some(child) = entry {
                            if cmp_prefixed(node.kp, sep, kp, key).is_le()
                                && best.is_none_or(|(bp, b, _)| cmp_prefixed(node.kp, sep, bp, b).is_gt())
                            {
                                best = Some((node.kp, &sep[..], child));
                            }
                        }
                    }
                }
            }
            Kind::Split { sep, .. } if cmp_prefixed(kp, key, node.kp, sep).is_ge() => cut = true,
            Kind::Merge { sep, right_base: rb, .. }
                if right_base.is_none() && cmp_prefixed(kp, key, node.kp, sep).is_ge() =>
            {
                // SAFETY: the merged base lives as long as this merge delta.
                right_base = unsafe { &**rb }.as_base();
            }
            Kind::Base(b) => {
                let base = match right_base {
                    Some(rb) => rb,
                    None if cut => return (best.map(|(_, _, c)| c).unwrap_or_else(|| b.child_for(key)), None),
                    None => b,
                };
                if n_decided == 0 && best.is_none() {
                    // No delta above the base: its own answer, without reading the
                    // separator's bytes (two cache misses on every level of a descent).
                    let i = base.child_index(key);
                    return (base.children[i].pid, Some((base, i)));
                }
                // The base's greatest separator <= key that no delta decided.
                let mut i = match base.keys.search_beside(key, &base.children) {
                    Ok(i) => i + 1,
                    Err(i) => i,
                };
                while i > 0 {
                    i -= 1;
                    let (p, k) = (base.keys.prefix(i), base.keys.get(i));
                    if best.is_some_and(|(bp, b, _)| cmp_prefixed(p, k, bp, b).is_le()) {
                        break;
                    }
                    if !is_decided(&decided[..n_decided], p, k) {
                        return (base.children[i].pid, Some((base, i)));
                    }
                }
                return match best {
                    Some((_, _, c)) => (c, None),
                    None => (base.children[0].pid, Some((base, 0))),
                };
            }
            _ => {}
        }
        // SAFETY: every delta has a non-null next protected by the same guard.
        node = unsafe { node_ref(node.next(guard)) };
    }
}

/// `inner_route` for chains with very many index deltas: materialise the entries.
fn route_slow<'g, V>(head: &'g Node<V>, key: &[u8], guard: &'g Guard) -> Pid {
    let range = inspect_walk(head, guard).range;
    let entries = inner_entries(head, range, guard);
    let i = match entries.binary_search_by(|(k, _)| (*k).cmp(key)) {
        Ok(i) => i,
        Err(i) => i.saturating_sub(1),
    };
    entries[i].1
}

/// Deltas of a chain seldom exceed the consolidation threshold: keep them on the stack.
type DeltaVec<T> = SmallVec<[T; 16]>;

/// What a chain is made of, gathered newest-first.
struct Gathered<'g, V> {
    deltas: DeltaVec<&'g Node<V>>,
    left: &'g Base<V>,
    /// Bases absorbed by merges, sorted by low key.
    rights: SmallVec<[&'g Base<V>; 2]>,
    /// The lowest split separator in the chain: the left base's content at or above it is stale.
    cut: Option<&'g [u8]>,
}

impl<V> Gathered<'_, V> {
    /// How many records of the left base are still current (those below `cut`).
    fn left_len(&self) -> usize {
        match self.cut {
            Some(c) => match self.left.keys.search(c) {
                Ok(i) | Err(i) => i,
            },
            None => self.left.len(),
        }
    }
}

fn gather<'g, V>(head: &'g Node<V>, guard: &'g Guard) -> Gathered<'g, V> {
    let mut deltas = DeltaVec::new();
    let mut rights = SmallVec::new();
    let mut cut: Option<&'g [u8]> = None;
    let mut node = head;
    loop {
        match &node.kind {
            Kind::Base(b) => {
                rights.sort_by(|a: &&Base<V>, b: &&Base<V>| a.range.low.cmp(&b.range.low));
                return Gathered { deltas, left: b, rights, cut };
            }
            Kind::Split { sep, .. } => {
                if cut.is_none_or(|c| &sep[..] < c) {
                    cut = Some(&sep[..]);
                }
            }
            Kind::Merge { right_base, .. } => {
                // SAFETY: the merged base lives as long as this merge delta.
                let rb = unsafe { &**right_base };
                rights.push(rb.as_base().expect("merge points at a base"));
            }
            Kind::Remove { .. } => {}
            _ => deltas.push(node),
        }
        // SAFETY: every delta has a non-null next protected by the same guard.
        node = unsafe { node_ref(node.next(guard)) };
    }
}

/// A chain's data deltas: (prefix, key, value or `None` for a delete).
type DataDeltas<'g, V> = DeltaVec<(u64, &'g [u8], Option<&'g V>)>;

/// The chain's data deltas as (prefix, key, value or `None` for a delete), sorted by key,
/// one per key (the newest), restricted to the keys `keep` accepts.
fn newest_data_deltas<'g, V>(g: &Gathered<'g, V>, keep: impl Fn(u64, &[u8]) -> bool) -> DataDeltas<'g, V> {
    let mut ds = DataDeltas::new();
    newest_data_deltas_into(g, keep, &mut ds);
    ds
}

/// [`newest_data_deltas`] into `ds` (empty): an insert's successor search fills one on
/// its stack instead of copying a returned one (512 inline bytes).
fn newest_data_deltas_into<'g, V>(g: &Gathered<'g, V>, keep: impl Fn(u64, &[u8]) -> bool, ds: &mut DataDeltas<'g, V>) {
    // Gathered newest first; the stable sort keeps the newest first among equal keys.
    ds.extend(
        g.deltas
            .iter()
            .filter_map(|d| match &d.kind {
                Kind::Upsert { key, val } => Some((d.kp, &key[..], Some(val))),
                Kind::Delete { key } => Some((d.kp, &key[..], None)),
                _ => None,
            })
            .filter(|&(p, k, _)| keep(p, k)),
    );
    ds.sort_by(|a, b| cmp_prefixed(a.0, a.1, b.0, b.1));
    ds.dedup_by(|later, first| later.0 == first.0 && later.1 == first.1);
}

/// Calls `emit` on every record of a leaf chain within `range`, in key order: the base
/// records (below any split) and those of absorbed siblings, overridden by the newest delta
/// naming each key.
fn merge_leaf<'g, V>(
    head: &'g Node<V>,
    range: &Range,
    guard: &'g Guard,
    mut emit: impl FnMut(&'g [u8], &'g V),
) -> usize {
    let g = gather(head, guard);
    let ds = newest_data_deltas(&g, |_, _| true);

    let left = g.left;
    let base_iter = (0..g.left_len())
        .map(|i| (left.keys.prefix(i), left.keys.get(i), &left.vals[i]))
        .chain(g.rights.iter().flat_map(|b| (0..b.len()).map(move |i| (b.keys.prefix(i), b.keys.get(i), &b.vals[i]))));

    let mut emitted = 0;
    let mut out = |p: u64, k: &'g [u8], v: &'g V| {
        // Records a split moved right, or a merged sibling's beyond a later split, are not ours.
        if cmp_prefixed(p, k, range.low_p, &range.low).is_ge() && !range.beyond_prefixed(p, k) {
            emit(k, v);
            emitted += 1;
        }
    };
    let mut di = ds.iter().peekable();
    for (p, k, v) in base_iter {
        let mut take_base = true;
        while let Some(&&(dp, dk, dv)) = di.peek() {
            match cmp_prefixed(dp, dk, p, k) {
                CmpOrdering::Greater => break,
                ord => {
                    if let Some(dv) = dv {
                        out(dp, dk, dv);
                    }
                    di.next();
                    if ord.is_eq() {
                        take_base = false;
                        break;
                    }
                }
            }
        }
        if take_base {
            out(p, k, v);
        }
    }
    for &(dp, dk, dv) in di {
        if let Some(dv) = dv {
            out(dp, dk, dv);
        }
    }
    emitted
}

/// The first record of a leaf chain at or after `key` (strictly after when `exclusive`),
/// within `range`: exactly `leaf_entries(head, range, guard)` filtered by that bound and
/// taken first, but without materialising the leaf ([`leaf_walk_from`] stopped at once).
pub(crate) fn leaf_first_from<'g, V>(
    head: &'g Node<V>,
    range: &Range,
    key: &[u8],
    exclusive: bool,
    guard: &'g Guard,
) -> Option<(&'g [u8], &'g V)> {
    let mut found = None;
    leaf_walk_from(head, range, key, exclusive, guard, |k, v| {
        found = Some((k, v));
        false
    });
    found
}

/// Calls `f` on the records of a leaf chain at or after `key` (strictly after when
/// `exclusive`), within `range`, in key order, until `f` returns false. Returns whether
/// `f` stopped the walk (false: the leaf's records in range ran out). The records are
/// those of `leaf_entries(head, range, guard)` past the bound, borrowed from the chain.
///
/// Why: the transaction engine asks for a key's successor on every insert, and a scan
/// reads a few records from a random key; sorting a whole 128-record leaf into a `Vec`
/// for that dominated both profiles. This is `merge_leaf` with every source cut to its
/// suffix from `key`: the chain's data deltas above the bound (there are few, under the
/// consolidation threshold) are sorted on the stack, each base is entered by binary
/// search, and the merge goes only as far as `f` wants. Cost: O(d log d + log n + records
/// visited or skipped as deleted or out of range).
///
/// Equality with `merge_leaf` holds because its output is sorted (consolidation builds a
/// `KeyVec` from it), and because a base record and the delta overriding it have the same
/// key, so the bound keeps or drops both together.
pub(crate) fn leaf_walk_from<'g, V>(
    head: &'g Node<V>,
    range: &Range,
    key: &[u8],
    exclusive: bool,
    guard: &'g Guard,
    mut f: impl FnMut(&'g [u8], &'g V) -> bool,
) -> bool {
    let kp = prefix(key);
    // The bound, as merge_leaf's records are filtered: `k >= key`, or `k > key`.
    let wanted = |p: u64, k: &[u8]| match cmp_prefixed(p, k, kp, key) {
        CmpOrdering::Greater => true,
        CmpOrdering::Equal => !exclusive,
        CmpOrdering::Less => false,
    };
    // Where the suffix of a sorted base from the bound starts (the keys and values read
    // next prefetched with the search's own lines).
    let start = |b: &Base<V>| match b.keys.search_record(key, &b.vals) {
        Ok(i) if exclusive => i + 1,
        Ok(i) | Err(i) => i,
    };

    // The head of an append run holds the chain's greatest key (each insert below it is
    // above the one before, the first above the base's last key): a bound past it finds
    // nothing here, and the successor search of every ascending insert skips the walk.
    if let Kind::Upsert { key: hk, .. } = &head.kind {
        if head.appends && !wanted(head.kp, hk) {
            return false;
        }
    }
    let g = gather(head, guard);
    // As in merge_leaf, only those within the bound.
    let mut ds = DataDeltas::new();
    newest_data_deltas_into(&g, wanted, &mut ds);

    let left = g.left;
    let left_len = g.left_len();
    let base_iter =
        (start(left).min(left_len)..left_len).map(|i| (left.keys.prefix(i), left.keys.get(i), &left.vals[i])).chain(
            g.rights
                .iter()
                .flat_map(|b| (start(b)..b.len()).map(move |i| (b.keys.prefix(i), b.keys.get(i), &b.vals[i]))),
        );

    // merge_leaf's `out`: `Some(stopped)` ends the walk: `Some(false)` once past the high
    // key (records are sorted, so every later one is too), `Some(true)` when `f` stops it.
    let mut out = |p: u64, k: &'g [u8], v: &'g V| -> Option<bool> {
        if range.beyond_prefixed(p, k) {
            Some(false)
        } else if cmp_prefixed(p, k, range.low_p, &range.low).is_ge() && !f(k, v) {
            Some(true)
        } else {
            None
        }
    };
    // Walked by reference: moving the deltas' small vector into an iterator copied its
    // 512 inline bytes on every insert's successor search.
    let mut di = ds.iter().peekable();
    for (p, k, v) in base_iter {
        let mut take_base = true;
        while let Some(&&(dp, dk, dv)) = di.peek() {
            match cmp_prefixed(dp, dk, p, k) {
                CmpOrdering::Greater => break,
                ord => {
                    if let Some(dv) = dv {
                        if let Some(stopped) = out(dp, dk, dv) {
                            return stopped;
                        }
                    }
                    di.next();
                    if ord.is_eq() {
                        take_base = false;
                        break;
                    }
                }
            }
        }
        if take_base {
            if let Some(stopped) = out(p, k, v) {
                return stopped;
            }
        }
    }
    for &(dp, dk, dv) in di {
        if let Some(dv) = dv {
            if let Some(stopped) = out(dp, dk, dv) {
                return stopped;
            }
        }
    }
    false
}

/// Every record of a leaf chain, sorted, restricted to `range`.
pub(crate) fn leaf_entries<'g, V>(head: &'g Node<V>, range: &Range, guard: &'g Guard) -> Vec<(&'g [u8], &'g V)> {
    let mut out = Vec::new();
    merge_leaf(head, range, guard, |k, v| out.push((k, v)));
    out
}

/// A consolidated leaf base holding the records of `head`'s chain within `range`, with the
/// new base's range `new_range`.
pub(crate) fn consolidate_leaf<'g, V: Clone>(
    head: &'g Node<V>,
    range: &Range,
    guard: &'g Guard,
    new_range: Arc<Range>,
) -> Base<V> {
    if let Some(b) = consolidate_splice(head, range, guard, &new_range) {
        return b;
    }
    let mut keys = KeyVecBuilder::default();
    let mut vals = Vec::new();
    // Sized by the chain's entry count (exact for a whole node, an upper bound for a half),
    // with the base's mean key length.
    let base = chain_base(head, guard).as_base().expect("base");
    let n = head.size as usize;
    let mean_key = base.keys.data_len().div_ceil(base.len().max(1)).max(8);
    keys.reserve(n, n * mean_key);
    vals.reserve(n);
    merge_leaf(head, range, guard, |k, v| {
        keys.push(k);
        vals.push(v.clone());
    });
    Base { range: new_range, keys: keys.finish(), vals, children: Vec::new() }
}

/// A leaf's consolidated base with a sorted batch applied: an entry `(key, Some(v))` is
/// added if the leaf lacks the key (then `added[i]` is set), `(key, None)` removes the
/// key. Every key must lie in `range`. One pass of [`merge_leaf`] with the batch merged in.
pub(crate) fn consolidate_leaf_with<'g, V: Clone>(
    head: &'g Node<V>,
    range: &Range,
    guard: &'g Guard,
    new_range: Arc<Range>,
    batch: &[(&[u8], Option<V>)],
    added: &mut [bool],
) -> Base<V> {
    let mut keys = KeyVecBuilder::default();
    let mut vals = Vec::new();
    let base = chain_base(head, guard).as_base().expect("base");
    // Room for the inserts only: an eviction's batch deletes, and reserving for its
    // entries too left evicted leaves several times larger than their keys.
    let n = head.size as usize + batch.iter().filter(|(_, v)| v.is_some()).count();
    let mean_key = base.keys.data_len().div_ceil(base.len().max(1)).max(8);
    keys.reserve(n, n * mean_key);
    vals.reserve(n);
    let mut at = 0;
    merge_leaf(head, range, guard, |k, v| {
        while at < batch.len() && batch[at].0 < k {
            if let Some(nv) = &batch[at].1 {
                keys.push(batch[at].0);
                vals.push(nv.clone());
                added[at] = true;
            }
            at += 1;
        }
        if at < batch.len() && batch[at].0 == k {
            // Present: an insert leaves it, a delete drops it.
            let keep = batch[at].1.is_some();
            at += 1;
            if !keep {
                return;
            }
        }
        keys.push(k);
        vals.push(v.clone());
    });
    for (i, (k, v)) in batch.iter().enumerate().skip(at) {
        if let Some(nv) = v {
            keys.push(k);
            vals.push(nv.clone());
            added[i] = true;
        }
    }
    // Deletes that emptied most of the leaf (an eviction): it stays in memory until it
    // merges or fills again, at its size rather than its old one (the keys are packed at
    // their size anyway).
    if vals.len() < n / 2 {
        vals.shrink_to_fit();
    }
    Base { range: new_range, keys: keys.finish(), vals, children: Vec::new() }
}

/// The fast path of [`consolidate_leaf`]: when the chain is one base with data deltas only
/// (no split or merge), the new base is the old one with the deltas spliced in
/// ([`KeyVec::splice`]: the runs between them copied whole, a few `memcpy`s) instead of a
/// merge that pushes every key one by one (a random insert's largest cost, and an
/// ascending fill's). `None` when the chain is anything else.
fn consolidate_splice<'g, V: Clone>(
    head: &'g Node<V>,
    range: &Range,
    guard: &'g Guard,
    new_range: &Arc<Range>,
) -> Option<Base<V>> {
    let g = gather(head, guard);
    let base = g.left;
    if !g.rights.is_empty() || g.cut.is_some() || g.deltas.len() > 64 {
        return None;
    }
    let ds = newest_data_deltas(&g, |_, _| true);
    let n = base.len();
    let (&(fp, fk, _), &(lp, lk, _)) = (ds.first()?, ds.last()?);
    // Every record must lie in the range, as `merge_leaf` would keep it.
    let in_range =
        |p: u64, k: &[u8]| cmp_prefixed(p, k, range.low_p, &range.low).is_ge() && !range.beyond_prefixed(p, k);
    let base_in_range = n == 0
        || (in_range(base.keys.prefix(0), base.keys.get(0)) && in_range(base.keys.prefix(n - 1), base.keys.get(n - 1)));
    if !base_in_range || !in_range(fp, fk) || !in_range(lp, lk) {
        return None;
    }
    let mut edits: SmallVec<[KeyEdit<'g>; 16]> = SmallVec::new();
    let mut vals = Vec::with_capacity(n + ds.len());
    let mut at = 0;
    for &(_, k, v) in &ds {
        // Ascending, so each search could start at `at`; the fence makes a whole one cheap.
        match base.keys.search(k) {
            Ok(i) => {
                vals.extend_from_slice(&base.vals[at..i]);
                match v {
                    Some(v) => vals.push(v.clone()),
                    None => edits.push((i, None)),
                }
                at = i + 1;
            }
            Err(i) => {
                vals.extend_from_slice(&base.vals[at..i]);
                at = i;
                // A delete of a key the base lacks leaves nothing.
                if let Some(v) = v {
                    vals.push(v.clone());
                    edits.push((i, Some(k)));
                }
            }
        }
    }
    vals.extend_from_slice(&base.vals[at..]);
    let keys = if edits.is_empty() { base.keys.clone() } else { base.keys.splice(&edits) };
    Some(Base { range: Arc::clone(new_range), keys, vals, children: Vec::new() })
}

/// Every (separator, child) of an inner chain, sorted, restricted to `range`. Index-delete
/// deltas count only once MERGED.
pub(crate) fn inner_entries<'g, V>(head: &'g Node<V>, range: &Range, guard: &'g Guard) -> Vec<(&'g [u8], Pid)> {
    let g = gather(head, guard);
    let left_len = g.left_len();
    let mut map: std::collections::BTreeMap<&[u8], Pid> = (0..left_len)
        .map(|i| (g.left.keys.get(i), g.left.children[i].pid))
        .chain(g.rights.iter().flat_map(|b| (0..b.len()).map(move |i| (b.keys.get(i), b.children[i].pid))))
        .collect();
    for d in g.deltas.iter().rev() {
        match &d.kind {
            Kind::IndexInsert { sep, child, .. } => {
                map.insert(&sep[..], *child);
            }
            Kind::IndexDelete { sep, state, .. } if state.get() == MERGED => {
                map.remove(&sep[..]);
            }
            _ => {}
        }
    }
    map.into_iter().filter(|(k, _)| !range.below(k) && !range.beyond(k)).collect()
}

/// Builds a leaf base from sorted records.
pub(crate) fn leaf_base<V: Clone>(entries: &[(&[u8], &V)], range: Arc<Range>) -> Base<V> {
    let bytes = entries.iter().map(|(k, _)| k.len()).sum();
    let mut keys = KeyVecBuilder::with_capacity(entries.len(), bytes);
    let mut vals = Vec::with_capacity(entries.len());
    for (k, v) in entries {
        keys.push(k);
        vals.push((*v).clone());
    }
    Base { range, keys: keys.finish(), vals, children: Vec::new() }
}

/// Builds an inner base from sorted separators.
pub(crate) fn inner_base<V>(entries: &[(&[u8], Pid)], range: Arc<Range>) -> Base<V> {
    let bytes = entries.iter().map(|(k, _)| k.len()).sum();
    let mut keys = KeyVecBuilder::with_capacity(entries.len(), bytes);
    let mut children = Vec::with_capacity(entries.len());
    for (k, c) in entries {
        keys.push(k);
        children.push(Child::new(*c));
    }
    Base { range, keys: keys.finish(), vals: Vec::new(), children }
}

/// Frees a chain immediately (tree drop).
///
/// # Safety
/// No other thread may access the tree.
pub(crate) unsafe fn destroy_chain_now<V>(slot: &Atomic<Node<V>>) {
    // SAFETY: exclusive access, so an unprotected guard is fine.
    let guard = unsafe { crossbeam_epoch::unprotected() };
    if slot.load(Ordering::Relaxed, guard).is_null() {
        return;
    }
    let mut cur = slot.swap(Shared::null(), Ordering::Relaxed, guard).with_tag(0);
    while !cur.is_null() {
        // SAFETY: exclusive access; each node is owned by exactly one chain.
        let owned = unsafe { cur.into_owned() };
        let is_base = owned.is_base();
        cur = owned.next.load(Ordering::Relaxed, guard).with_tag(0);
        drop(owned);
        if is_base {
            break;
        }
    }
}
