//! Nodes of the Bw-tree: base pages and the delta records prepended to them.
//!
//! A logical node is a chain reached from its mapping-table slot: zero or more deltas, then
//! one base node. Data deltas (`Upsert`, `Delete` in leaves; `IndexInsert`, `IndexDelete`
//! in inner nodes) change content; SMO deltas (`Split`, `Merge`, `Remove`) change the node's
//! key range. Everything reachable from a slot is immutable except `next` pointers, which the
//! two optional improvements CAS (see `tree.rs`), and the atomic flags noted below.

use std::cmp::Ordering as CmpOrdering;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;

use crossbeam_epoch::{Atomic, Guard, Shared};
use smallvec::SmallVec;

/// A page id: an index into the mapping table (`mapping.rs`, which stores nodes: it
/// depends on this file, never the reverse).
pub(crate) type Pid = u64;
/// "No page": the right sibling of the rightmost node of a level.
pub(crate) const NO_PID: Pid = u64::MAX;

/// Tag on a `next` pointer: the chain below is being consolidated by a slot CAS; no data
/// delta may be installed there any more (improvement (b) only).
pub(crate) const TAG_FROZEN: usize = 1;
/// Tag on a numbered delta's `next`: the chain was retired and the retirer owns what `next`
/// points at, so the delta's pending consolidation must not swap it (improvement (a) only).
pub(crate) const TAG_CLAIMED: usize = 2;

/// The key range a node covers, and its right sibling.
#[derive(Debug)]
pub(crate) struct Range {
    /// Inclusive lower bound; the empty key is the minimum of all byte strings.
    pub low: Box<[u8]>,
    /// Exclusive upper bound; `None` is +infinity.
    pub high: Option<Box<[u8]>>,
    /// Right sibling at the same level (`NO_PID` for the rightmost node).
    pub right: Pid,
    low_p: u64,
    high_p: u64,
}

impl Range {
    pub(crate) fn new(low: Box<[u8]>, high: Option<Box<[u8]>>, right: Pid) -> Self {
        let low_p = prefix(&low);
        let high_p = high.as_deref().map_or(u64::MAX, prefix);
        Range { low, high, right, low_p, high_p }
    }

    /// True when `key` lies at or above the high key, so it belongs to a node further right.
    #[inline]
    pub(crate) fn beyond(&self, key: &[u8]) -> bool {
        self.beyond_prefixed(prefix(key), key)
    }

    /// `beyond` for a key whose prefix `kp` is known.
    #[inline]
    pub(crate) fn beyond_prefixed(&self, kp: u64, key: &[u8]) -> bool {
        match &self.high {
            None => false,
            Some(h) => cmp_prefixed(kp, key, self.high_p, h) != CmpOrdering::Less,
        }
    }

    /// `(prefix(low), prefix(high))`, with `u64::MAX` for no high key.
    #[inline]
    pub(crate) fn prefix_bounds(&self) -> (u64, u64) {
        (self.low_p, self.high_p)
    }

    /// True when `key` lies below the low key.
    #[inline]
    pub(crate) fn below(&self, key: &[u8]) -> bool {
        cmp_prefixed(prefix(key), key, self.low_p, &self.low) == CmpOrdering::Less
    }
}

/// Merge decision shared by a `Remove` delta, the parent's `IndexDelete` and the left
/// sibling's `Merge` delta. It moves once from PENDING to MERGED or ABORTED; every thread
/// interprets the three deltas through it, so all agree whether the merge happened.
pub(crate) struct MergeState {
    state: AtomicU8,
    /// A key below the merged node's low key, in its left sibling's range when the merge was
    /// committed: descending to it and moving right finds whichever node must take the
    /// `Merge` delta, even after the parent itself changed or went away.
    left_low: std::sync::OnceLock<Box<[u8]>>,
    /// Set once the `Merge` delta is in the left sibling's chain: by its installer after the
    /// CAS, and by any consolidation about to absorb it before that consolidation's CAS.
    /// A helper reads it after reading the chain it would CAS against, so it never posts the
    /// merge a second time (say after the left node absorbed R and split at R's key again).
    posted: AtomicBool,
}

pub(crate) const PENDING: u8 = 0;
pub(crate) const MERGED: u8 = 1;
pub(crate) const ABORTED: u8 = 2;

impl MergeState {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(MergeState {
            state: AtomicU8::new(PENDING),
            left_low: std::sync::OnceLock::new(),
            posted: AtomicBool::new(false),
        })
    }
    #[inline]
    pub(crate) fn get(&self) -> u8 {
        self.state.load(Ordering::Acquire)
    }
    /// Moves PENDING to `to`; returns the final state either way.
    pub(crate) fn decide(&self, to: u8) -> u8 {
        match self.state.compare_exchange(PENDING, to, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => to,
            Err(now) => now,
        }
    }
    /// Records a key of the left sibling (the first one recorded wins; any is good).
    pub(crate) fn set_left_low(&self, key: &[u8]) {
        let _ = self.left_low.set(key.into());
    }
    pub(crate) fn set_posted(&self) {
        self.posted.store(true, Ordering::SeqCst);
    }
    pub(crate) fn posted(&self) -> bool {
        self.posted.load(Ordering::SeqCst)
    }
    pub(crate) fn left_low(&self) -> Option<&[u8]> {
        self.left_low.get().map(|k| &k[..])
    }
}

/// The first 8 bytes of a key, big-endian and zero-padded. Order-preserving: if
/// `prefix(a) < prefix(b)` then `a < b`, so searches compare these integers and touch the
/// key bytes only on a tie.
#[inline]
pub(crate) fn prefix(key: &[u8]) -> u64 {
    match key.first_chunk::<8>() {
        Some(b) => u64::from_be_bytes(*b),
        // A loop, not a variable-length copy, which would be a call to memcpy.
        None => key.iter().enumerate().fold(0, |p, (i, &c)| p | (c as u64) << (56 - 8 * i)),
    }
}

/// Compares two keys given with their prefixes, touching the bytes only on a prefix tie.
#[inline]
pub(crate) fn cmp_prefixed(ap: u64, a: &[u8], bp: u64, b: &[u8]) -> CmpOrdering {
    match ap.cmp(&bp) {
        // Equal prefixes of keys no longer than the prefix: the shorter key is smaller.
        CmpOrdering::Equal if a.len() <= 8 && b.len() <= 8 => a.len().cmp(&b.len()),
        CmpOrdering::Equal => a.cmp(b),
        o => o,
    }
}

/// Every `FENCE_STRIDE`-th prefix is copied into `KeyVec::fence`.
const FENCE_STRIDE: usize = 8;

/// Sorted keys stored contiguously, with their prefixes in a dense array for the search.
///
/// A search first narrows down with `fence`, every 8th prefix (for a 128-key node, 16
/// prefixes in two cache lines), then binary-searches one run of 8 prefixes: about three
/// cache misses instead of the five of a plain binary search over the whole array, and the
/// descent is bound by cache misses.
///
/// Prefix truncation: once built (`finish`), if some key is longer than a prefix (8 bytes)
/// and all keys share their first `skip` bytes, the
/// stored prefixes are those of the bytes after them, so keys with a long common start
/// (64-byte keys that differ in their last 8 bytes) still compare as integers; a search
/// compares the shared bytes once.
#[derive(Default, Clone)]
pub(crate) struct KeyVec {
    prefixes: Vec<u64>,
    fence: Vec<u64>,
    data: Vec<u8>,
    ends: Vec<u32>,
    skip: usize,
}

impl KeyVec {
    pub(crate) fn with_capacity(n: usize, bytes: usize) -> Self {
        let mut kv = KeyVec::default();
        kv.reserve(n, bytes);
        kv
    }
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.ends.len()
    }
    #[inline]
    pub(crate) fn get(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.data[start..self.ends[i] as usize]
    }
    /// `prefix` of key `i` (of the whole key, whatever the truncation).
    #[inline]
    pub(crate) fn prefix(&self, i: usize) -> u64 {
        if self.skip == 0 {
            self.prefixes[i]
        } else {
            prefix(self.get(i))
        }
    }
    /// Bytes of room beyond the keys held.
    #[cfg(test)]
    pub(crate) fn spare_bytes(&self) -> usize {
        (self.data.capacity() - self.data.len())
            + 8 * (self.prefixes.capacity() - self.prefixes.len())
            + 4 * (self.ends.capacity() - self.ends.len())
    }

    /// Gives back the room beyond the keys held.
    pub(crate) fn shrink_to_fit(&mut self) {
        self.prefixes.shrink_to_fit();
        self.fence.shrink_to_fit();
        self.data.shrink_to_fit();
        self.ends.shrink_to_fit();
    }
    pub(crate) fn reserve(&mut self, n: usize, bytes: usize) {
        self.prefixes.reserve(n);
        self.fence.reserve(n.div_ceil(FENCE_STRIDE));
        self.data.reserve(bytes);
        self.ends.reserve(n);
    }
    /// A copy with room for `n` more keys of `bytes` bytes in all: one allocation per
    /// array, where a clone followed by `reserve` reallocates each.
    pub(crate) fn clone_with_room(&self, n: usize, bytes: usize) -> Self {
        fn grown<T: Copy>(v: &[T], extra: usize) -> Vec<T> {
            let mut out = Vec::with_capacity(v.len() + extra);
            out.extend_from_slice(v);
            out
        }
        KeyVec {
            prefixes: grown(&self.prefixes, n),
            fence: grown(&self.fence, n.div_ceil(FENCE_STRIDE) + 1),
            data: grown(&self.data, bytes),
            ends: grown(&self.ends, n),
            skip: self.skip,
        }
    }
    /// Appends a key greater than every key so far. Call `finish` after the last one.
    pub(crate) fn push(&mut self, key: &[u8]) {
        debug_assert_eq!(self.skip, 0, "push after finish");
        let p = prefix(key);
        if self.prefixes.len().is_multiple_of(FENCE_STRIDE) {
            self.fence.push(p);
        }
        self.prefixes.push(p);
        self.data.extend_from_slice(key);
        self.ends.push(self.data.len() as u32);
    }
    /// Truncates the common start of all keys out of the prefixes (see the type's doc).
    pub(crate) fn finish(&mut self) {
        let n = self.len();
        // Keys that fit in a prefix never tie on it: truncation would only add a compare of
        // the common start (a memcmp call) to every search.
        if n < 2 || self.longest_key() <= 8 {
            return;
        }
        let (first, last) = (self.get(0), self.get(n - 1));
        // Sorted keys: what the first and last share, every key shares.
        let skip = first.iter().zip(last).take_while(|(a, b)| a == b).count();
        if skip == 0 {
            return;
        }
        for i in 0..n {
            let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
            let p = prefix(&self.data[start + skip..self.ends[i] as usize]);
            self.prefixes[i] = p;
            if i.is_multiple_of(FENCE_STRIDE) {
                self.fence[i / FENCE_STRIDE] = p;
            }
        }
        self.skip = skip;
    }
    fn longest_key(&self) -> usize {
        let mut start = 0;
        let mut longest = 0;
        for &end in &self.ends {
            longest = longest.max(end as usize - start);
            start = end as usize;
        }
        longest
    }
    /// `Ok(i)` if `key` is at `i`, else `Err(i)` where it would be inserted.
    #[inline]
    pub(crate) fn search(&self, key: &[u8]) -> Result<usize, usize> {
        let rest = if self.skip == 0 {
            key
        } else {
            // Every key starts with `common`: a key that does not is below or above them all.
            let common = &self.data[..self.skip];
            match key[..key.len().min(self.skip)].cmp(common) {
                CmpOrdering::Less => return Err(0),
                CmpOrdering::Greater => return Err(self.len()),
                CmpOrdering::Equal => key.get(self.skip..).ok_or(0usize)?,
            }
        };
        let kp = prefix(rest);
        // fence[j] = prefixes[8j] and prefixes are sorted, so: every index up to 8(j-1)
        // with fence[j-1] < kp holds a smaller key, and every index from 8j with
        // fence[j] > kp a greater one. The answer lies between.
        let below = self.fence.partition_point(|&f| f < kp);
        let upto = below + self.fence[below..].partition_point(|&f| f == kp);
        let mut lo = if below == 0 { 0 } else { (below - 1) * FENCE_STRIDE + 1 };
        let mut hi = (upto * FENCE_STRIDE).min(self.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            let ord = match self.prefixes[mid].cmp(&kp) {
                CmpOrdering::Equal => cmp_prefixed(kp, &self.get(mid)[self.skip..], kp, rest),
                o => o,
            };
            match ord {
                CmpOrdering::Less => lo = mid + 1,
                CmpOrdering::Greater => hi = mid,
                CmpOrdering::Equal => return Ok(mid),
            }
        }
        Err(lo)
    }
}

/// A base page: sorted records (leaf) or separators with children (inner).
pub(crate) struct Base<V> {
    pub range: Arc<Range>,
    pub keys: KeyVec,
    /// Leaf values, parallel to `keys`.
    pub vals: Vec<V>,
    /// Inner children: `children[i]` covers `[keys[i], keys[i+1])`; `keys[0]` is the low key.
    pub children: Vec<Pid>,
}

impl<V> Base<V> {
    pub(crate) fn len(&self) -> usize {
        self.keys.len()
    }
    /// The child of an inner base covering `key` (which the caller validated is in range).
    #[inline]
    pub(crate) fn child_for(&self, key: &[u8]) -> Pid {
        let i = match self.keys.search(key) {
            Ok(i) => i,
            Err(i) => i.saturating_sub(1),
        };
        self.children[i]
    }
}

pub(crate) enum Kind<V> {
    Base(Base<V>),
    Upsert {
        key: Box<[u8]>,
        val: V,
    },
    Delete {
        key: Box<[u8]>,
    },
    /// Parent half of a split: the entry `sep -> child` exists.
    IndexInsert {
        sep: Box<[u8]>,
        child: Pid,
    },
    /// Parent half of a merge: the entry `sep` is gone, so its keys go to the entry below.
    /// Void unless `state` is MERGED.
    IndexDelete {
        sep: Box<[u8]>,
        state: Arc<MergeState>,
    },
    /// Keys at or above `sep` moved to the new right sibling `right`; `range` is this node's
    /// range after the split. `posted` once the parent was seen to route `sep` to `right`
    /// (a split, once complete, stays complete: later visitors skip the parent check).
    Split {
        sep: Box<[u8]>,
        right: Pid,
        range: Arc<Range>,
        posted: AtomicBool,
    },
    /// This node absorbed its right sibling `r_pid`, whose frozen base is `right_base`.
    /// Only posted once the merge is decided (MERGED), so it is always valid.
    Merge {
        sep: Box<[u8]>,
        right_base: *const Node<V>,
        r_pid: Pid,
        range: Arc<Range>,
        state: Arc<MergeState>,
    },
    /// The node is frozen: being merged into its left sibling, or (`collapse`) a root with one
    /// child being replaced by that child. Always installed directly on a base.
    Remove {
        state: Arc<MergeState>,
        collapse: bool,
    },
}

pub(crate) struct Node<V> {
    /// The next node of the chain (null for a base). Tags: `TAG_FROZEN`, `TAG_CLAIMED`.
    pub next: Atomic<Node<V>>,
    /// 0 for leaves.
    pub level: u16,
    /// Deltas from this one down to the base (0 for a base); saturates.
    pub depth: u16,
    /// Improvement (a): data deltas are numbered modulo the threshold; number 0 consolidates.
    pub num: u16,
    /// `prefix` of a delta's key or separator, compared before the key itself.
    pub kp: u64,
    /// Entries of the logical node as of this delta (records of a leaf, children of an inner
    /// node); approximate under a merge. Lets numbered mode notice underflow and overflow.
    pub size: u32,
    /// Improvement (a): set on a number-0 delta until its installer swapped its `next` for
    /// the consolidated base (or gave up).
    pub pending: AtomicBool,
    /// Improvement (a): this upsert's key is above every key below it in the chain, and so
    /// is each delta's down to the base (an append run, numbered to a longer threshold).
    pub appends: bool,
    /// Data deltas: the range of the base under them, kept alive by that base (or by a
    /// successor base sharing the same `Arc<Range>`), so improvement (b) can validate a key
    /// against the head alone.
    pub base_range: *const Range,
    /// The prefixes of the low and high keys of the range this node reports (a base's or
    /// SMO delta's own; a data delta's base's), or `NO_BOUNDS`. A key whose prefix lies
    /// strictly between them is in range without loading the `Range`: a cache miss saved
    /// on every level of every descent.
    pub bounds: (u64, u64),
    pub kind: Kind<V>,
}

/// `Node::bounds` of a node that reports no range: no prefix lies strictly inside.
pub(crate) const NO_BOUNDS: (u64, u64) = (0, 0);

// SAFETY: the raw pointers in a node (`base_range`, a merge delta's `right_base`) point at
// immutable data kept alive by the epoch scheme exactly as long as the node itself; sharing
// them across threads is as safe as sharing `&Range` / `&Node`.
unsafe impl<V: Send + Sync> Send for Node<V> {}
// SAFETY: see `Send`; all mutation goes through atomics.
unsafe impl<V: Send + Sync> Sync for Node<V> {}

impl<V> Node<V> {
    pub(crate) fn base(level: u16, base: Base<V>) -> Self {
        Node {
            next: Atomic::null(),
            level,
            depth: 0,
            num: 0,
            kp: 0,
            size: base.len() as u32,
            pending: AtomicBool::new(false),
            appends: false,
            base_range: std::ptr::null(),
            bounds: base.range.prefix_bounds(),
            kind: Kind::Base(base),
        }
    }

    pub(crate) fn delta(level: u16, kind: Kind<V>) -> Self {
        let kp = match &kind {
            Kind::Upsert { key, .. } | Kind::Delete { key } => prefix(key),
            Kind::IndexInsert { sep, .. }
            | Kind::IndexDelete { sep, .. }
            | Kind::Split { sep, .. }
            | Kind::Merge { sep, .. } => prefix(sep),
            Kind::Base(_) | Kind::Remove { .. } => 0,
        };
        let bounds = match &kind {
            Kind::Split { range, .. } | Kind::Merge { range, .. } => range.prefix_bounds(),
            _ => NO_BOUNDS,
        };
        Node {
            next: Atomic::null(),
            level,
            depth: 0,
            num: 0,
            kp,
            size: 0,
            pending: AtomicBool::new(false),
            appends: false,
            base_range: std::ptr::null(),
            bounds,
            kind,
        }
    }

    #[inline]
    pub(crate) fn is_base(&self) -> bool {
        matches!(self.kind, Kind::Base(_))
    }

    #[inline]
    pub(crate) fn is_smo(&self) -> bool {
        matches!(self.kind, Kind::Split { .. } | Kind::Merge { .. } | Kind::Remove { .. })
    }

    #[inline]
    pub(crate) fn as_base(&self) -> Option<&Base<V>> {
        match &self.kind {
            Kind::Base(b) => Some(b),
            _ => None,
        }
    }

    /// Follows `next`, ignoring tags.
    #[inline]
    pub(crate) fn next<'g>(&self, guard: &'g Guard) -> Shared<'g, Node<V>> {
        super::sched::point();
        self.next.load(Ordering::Acquire, guard).with_tag(0)
    }
}

/// Dereferences a non-null shared node.
///
/// # Safety
/// `s` must be non-null and protected by `guard` (loaded from a slot or chain while pinned).
#[inline]
pub(crate) unsafe fn node_ref<'g, V>(s: Shared<'g, Node<V>>) -> &'g Node<V> {
    // SAFETY: the caller guarantees `s` is non-null and epoch-protected.
    unsafe { s.deref() }
}

/// The base at the bottom of the chain starting at `node`.
pub(crate) fn chain_base<'g, V>(mut node: &'g Node<V>, guard: &'g Guard) -> &'g Node<V> {
    while !node.is_base() {
        // SAFETY: every delta has a non-null `next`, protected by the same guard.
        node = unsafe { node_ref(node.next(guard)) };
    }
    node
}

/// What validation learns about a chain: its topmost SMO delta (if any), its current range,
/// and the node whose `bounds` are that range's prefixes.
pub(crate) struct Inspected<'g, V> {
    pub smo: Option<&'g Node<V>>,
    pub range: &'g Range,
    pub holder: &'g Node<V>,
}

impl<V> Inspected<'_, V> {
    /// True when `key` (with prefix `kp`) is surely in range, decided from prefixes alone.
    #[inline]
    pub(crate) fn surely_inside(&self, kp: u64) -> bool {
        let (lo, hi) = self.holder.bounds;
        lo < kp && kp < hi
    }
}

/// The topmost SMO delta of a chain (if any) and the node's current range, found by
/// walking the chain (the paper's ValidateNode).
pub(crate) fn inspect_walk<'g, V>(head: &'g Node<V>, guard: &'g Guard) -> Inspected<'g, V> {
    let mut node = head;
    loop {
        match &node.kind {
            Kind::Base(b) => return Inspected { smo: None, range: &b.range, holder: node },
            Kind::Split { range, .. } | Kind::Merge { range, .. } => {
                return Inspected { smo: Some(node), range, holder: node }
            }
            Kind::Remove { .. } => {
                let base = chain_base(node, guard);
                return Inspected { smo: Some(node), range: &base.as_base().expect("base").range, holder: base };
            }
            _ => {}
        }
        // SAFETY: deltas always have a non-null next under the same guard.
        node = unsafe { node_ref(node.next(guard)) };
    }
}

/// Improvement (b): SMO deltas are always at the head, so the head alone tells the range.
pub(crate) fn inspect_head<'g, V>(head: &'g Node<V>, guard: &'g Guard) -> Inspected<'g, V> {
    match &head.kind {
        Kind::Base(b) => Inspected { smo: None, range: &b.range, holder: head },
        Kind::Split { range, .. } | Kind::Merge { range, .. } => Inspected { smo: Some(head), range, holder: head },
        Kind::Remove { .. } => {
            let base = chain_base(head, guard);
            Inspected { smo: Some(head), range: &base.as_base().expect("base").range, holder: base }
        }
        // SAFETY: a data delta's `base_range` is kept alive by its chain's base (module doc).
        _ => Inspected { smo: None, range: unsafe { &*head.base_range }, holder: head },
    }
}

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
                    if let Ok(i) = b.keys.search(key) {
                        return Some(&b.vals[i]);
                    }
                }
                let rb = right_base?;
                return rb.keys.search(key).ok().map(|i| &rb.vals[i]);
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
                            return route_slow(head, key, guard);
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
                    None if cut => return best.map(|(_, _, c)| c).unwrap_or_else(|| b.child_for(key)),
                    None => b,
                };
                // The base's greatest separator <= key that no delta decided.
                let mut i = match base.keys.search(key) {
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
                        return base.children[i];
                    }
                }
                return best.map(|(_, _, c)| c).unwrap_or_else(|| base.children[0]);
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
/// taken first, but without materialising the leaf.
///
/// Why: the transaction engine asks for a key's successor on every insert, and sorting a
/// whole 128-record leaf into a `Vec` for one answer dominated the insert profile. This is
/// `merge_leaf` with every source cut to its suffix from `key`: the chain's data deltas
/// above the bound (there are few, under the consolidation threshold) are sorted on the
/// stack, each base is entered by binary search, and the merge stops at the first record
/// it would emit. Cost: O(d log d + log n + records skipped as deleted or out of range).
///
/// Equality with `merge_leaf` holds because its output is sorted (consolidation builds a
/// `KeyVec` from it), and because a base record and the delta overriding it have the same
/// key, so the bound keeps or drops both together.
pub(crate) fn leaf_first_from<'g, V>(
    head: &'g Node<V>,
    range: &Range,
    key: &[u8],
    exclusive: bool,
    guard: &'g Guard,
) -> Option<(&'g [u8], &'g V)> {
    let kp = prefix(key);
    // The bound, as merge_leaf's records are filtered: `k >= key`, or `k > key`.
    let wanted = |p: u64, k: &[u8]| match cmp_prefixed(p, k, kp, key) {
        CmpOrdering::Greater => true,
        CmpOrdering::Equal => !exclusive,
        CmpOrdering::Less => false,
    };
    // Where the suffix of a sorted base from the bound starts.
    let start = |b: &Base<V>| match b.keys.search(key) {
        Ok(i) if exclusive => i + 1,
        Ok(i) | Err(i) => i,
    };

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

    // merge_leaf's `out`: `Some(Some(record))` for the first record in range, `Some(None)`
    // once past the high key (records are sorted, so every later one is too).
    let out = |p: u64, k: &'g [u8], v: &'g V| -> Option<Option<(&'g [u8], &'g V)>> {
        if range.beyond_prefixed(p, k) {
            Some(None)
        } else if cmp_prefixed(p, k, range.low_p, &range.low).is_ge() {
            Some(Some((k, v)))
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
                        if let Some(found) = out(dp, dk, dv) {
                            return found;
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
            if let Some(found) = out(p, k, v) {
                return found;
            }
        }
    }
    for &(dp, dk, dv) in di {
        if let Some(dv) = dv {
            if let Some(found) = out(dp, dk, dv) {
                return found;
            }
        }
    }
    None
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
    if let Some(b) = consolidate_appends(head, range, guard, &new_range) {
        return b;
    }
    let mut keys = KeyVec::default();
    let mut vals = Vec::new();
    // Sized by the chain's entry count (exact for a whole node, an upper bound for a half),
    // with the base's mean key length.
    let base = chain_base(head, guard).as_base().expect("base");
    let n = head.size as usize;
    let mean_key = base.keys.data.len().div_ceil(base.len().max(1)).max(8);
    keys.reserve(n, n * mean_key);
    vals.reserve(n);
    merge_leaf(head, range, guard, |k, v| {
        keys.push(k);
        vals.push(v.clone());
    });
    keys.finish();
    Base { range: new_range, keys, vals, children: Vec::new() }
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
    let mut keys = KeyVec::default();
    let mut vals = Vec::new();
    let base = chain_base(head, guard).as_base().expect("base");
    // Room for the inserts only: an eviction's batch deletes, and reserving for its
    // entries too left evicted leaves several times larger than their keys.
    let n = head.size as usize + batch.iter().filter(|(_, v)| v.is_some()).count();
    let mean_key = base.keys.data.len().div_ceil(base.len().max(1)).max(8);
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
    keys.finish();
    // Deletes that emptied most of the leaf (an eviction): it stays in memory until it
    // merges or fills again, at its size rather than its old one.
    if vals.len() < n / 2 {
        keys.shrink_to_fit();
        vals.shrink_to_fit();
    }
    Base { range: new_range, keys, vals, children: Vec::new() }
}

/// The ascending-insert fast path of [`consolidate_leaf`]: when the chain is one base with
/// only upserts of keys above its last key (a bulk load in key order), the new base is the
/// old one copied whole (a few `memcpy`s) with the new keys pushed after it, instead of a
/// merge that pushes every key one by one (the fill profile's largest cost). `None` when
/// the chain is anything else.
fn consolidate_appends<'g, V: Clone>(
    head: &'g Node<V>,
    range: &Range,
    guard: &'g Guard,
    new_range: &Arc<Range>,
) -> Option<Base<V>> {
    let g = gather(head, guard);
    let base = g.left;
    if !g.rights.is_empty() || g.cut.is_some() || base.keys.skip != 0 || g.deltas.len() > 64 {
        return None;
    }
    let mut ds: SmallVec<[(u64, &'g [u8], &'g V); 16]> = SmallVec::new();
    for (p, k, v) in newest_data_deltas(&g, |_, _| true) {
        ds.push((p, k, v?)); // a delete: not an append
    }
    let n = base.len();
    let (&(fp, fk, _), &(lp, lk, _)) = (ds.first()?, ds.last()?);
    let above_base = n == 0 || cmp_prefixed(fp, fk, base.keys.prefix(n - 1), base.keys.get(n - 1)).is_gt();
    // Every record must lie in the range, as `merge_leaf` would keep it.
    let in_range =
        |p: u64, k: &[u8]| cmp_prefixed(p, k, range.low_p, &range.low).is_ge() && !range.beyond_prefixed(p, k);
    let base_in_range = n == 0
        || (in_range(base.keys.prefix(0), base.keys.get(0)) && in_range(base.keys.prefix(n - 1), base.keys.get(n - 1)));
    if !above_base || !base_in_range || !in_range(fp, fk) || !in_range(lp, lk) {
        return None;
    }
    let mut keys = base.keys.clone_with_room(ds.len(), ds.iter().map(|d| d.1.len()).sum());
    let mut vals = Vec::with_capacity(n + ds.len());
    vals.extend_from_slice(&base.vals);
    for &(_, k, v) in &ds {
        keys.push(k);
        vals.push(v.clone());
    }
    keys.finish();
    Some(Base { range: Arc::clone(new_range), keys, vals, children: Vec::new() })
}

/// Every (separator, child) of an inner chain, sorted, restricted to `range`. Index-delete
/// deltas count only once MERGED.
pub(crate) fn inner_entries<'g, V>(head: &'g Node<V>, range: &Range, guard: &'g Guard) -> Vec<(&'g [u8], Pid)> {
    let g = gather(head, guard);
    let left_len = g.left_len();
    let mut map: std::collections::BTreeMap<&[u8], Pid> = (0..left_len)
        .map(|i| (g.left.keys.get(i), g.left.children[i]))
        .chain(g.rights.iter().flat_map(|b| (0..b.len()).map(move |i| (b.keys.get(i), b.children[i]))))
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
    let mut keys = KeyVec::with_capacity(entries.len(), bytes);
    let mut vals = Vec::with_capacity(entries.len());
    for (k, v) in entries {
        keys.push(k);
        vals.push((*v).clone());
    }
    keys.finish();
    Base { range, keys, vals, children: Vec::new() }
}

/// Builds an inner base from sorted separators.
pub(crate) fn inner_base<V>(entries: &[(&[u8], Pid)], range: Arc<Range>) -> Base<V> {
    let bytes = entries.iter().map(|(k, _)| k.len()).sum();
    let mut keys = KeyVec::with_capacity(entries.len(), bytes);
    let mut children = Vec::with_capacity(entries.len());
    for (k, c) in entries {
        keys.push(k);
        children.push(*c);
    }
    keys.finish();
    Base { range, keys, vals: Vec::new(), children }
}

/// Frees a chain immediately (tree drop).
///
/// # Safety
/// No other thread may access the tree.
pub(crate) unsafe fn destroy_chain_now<V>(slot: &Atomic<Node<V>>) {
    // SAFETY: exclusive access, so an unprotected guard is fine.
    let guard = unsafe { crossbeam_epoch::unprotected() };
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Short keys, keys tying on the zero-padded prefix, and long keys sharing one prefix.
    fn any_key() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            proptest::collection::vec(prop_oneof![Just(0u8), Just(1u8), Just(255u8), any::<u8>()], 0..10),
            proptest::collection::vec(any::<u8>(), 0..3).prop_map(|t| [&b"samepref"[..], &t].concat()),
        ]
    }

    /// A hand-built chain: boxed nodes linked through raw pointers, freed together on drop
    /// (`Atomic` owns nothing, so each node is dropped exactly once, by its box).
    struct Chain {
        // Boxed so a node's address stays put while the vector grows: deltas point at it.
        #[allow(clippy::vec_box)]
        nodes: Vec<Box<Node<u32>>>,
    }

    impl Chain {
        fn new(base: Base<u32>) -> Self {
            Chain { nodes: vec![Box::new(Node::base(0, base))] }
        }
        /// Prepends a delta to the chain.
        fn push(&mut self, kind: Kind<u32>) {
            let node = Node::delta(0, kind);
            let below: *const Node<u32> = &**self.nodes.last().expect("a base");
            node.next.store(Shared::from(below), Ordering::Relaxed);
            self.nodes.push(Box::new(node));
        }
        fn head(&self) -> &Node<u32> {
            self.nodes.last().expect("a base")
        }
    }

    /// 48 distinct keys in byte order: short keys, keys tying with them on the zero-padded
    /// prefix, and long keys sharing their first 8 bytes.
    fn domain() -> Vec<Vec<u8>> {
        let mut d: Vec<Vec<u8>> = (0..48u8)
            .map(|n| match n % 3 {
                0 => vec![n],
                1 => vec![n, 0],
                _ => [&b"samepref"[..], &[n]].concat(),
            })
            .collect();
        d.sort();
        d
    }

    fn range(d: &[Vec<u8>], low: usize, high: Option<usize>) -> Arc<Range> {
        Arc::new(Range::new(d[low].clone().into(), high.map(|h| d[h].clone().into()), 7))
    }

    fn leaf(d: &[Vec<u8>], keys: &[usize], range: Arc<Range>) -> Base<u32> {
        let mut keys: Vec<usize> =
            keys.iter().copied().filter(|&k| !range.below(&d[k]) && !range.beyond(&d[k])).collect();
        keys.sort();
        keys.dedup();
        let vals: Vec<u32> = keys.iter().map(|&k| 1000 + k as u32).collect();
        let entries: Vec<(&[u8], &u32)> = keys.iter().zip(&vals).map(|(&k, v)| (&d[k][..], v)).collect();
        leaf_base(&entries, range)
    }

    /// Data deltas: (is upsert, key index, value).
    fn push_data(c: &mut Chain, d: &[Vec<u8>], ops: &[(bool, usize, u32)]) {
        for &(up, k, v) in ops {
            let key: Box<[u8]> = d[k].clone().into();
            c.push(if up { Kind::Upsert { key, val: v } } else { Kind::Delete { key } });
        }
    }

    /// `leaf_first_from` agrees with the first record of `leaf_entries` past the bound, for
    /// every probe (each key of the domain, a key between each pair, the empty key).
    fn check_chain(c: &Chain, d: &[Vec<u8>]) -> Result<(), TestCaseError> {
        let guard = crossbeam_epoch::pin();
        let head = c.head();
        let range = inspect_walk(head, &guard).range;
        let all = leaf_entries(head, range, &guard);
        let probes = std::iter::once(Vec::new()).chain(d.iter().flat_map(|k| [k.clone(), [&k[..], &[0, 0]].concat()]));
        for probe in probes {
            for exclusive in [false, true] {
                let want =
                    all.iter().copied().find(|(k, _)| if exclusive { *k > &probe[..] } else { *k >= &probe[..] });
                let got = leaf_first_from(head, range, &probe, exclusive, &guard);
                prop_assert_eq!(got, want, "probe {:?} exclusive {}", probe, exclusive);
            }
        }
        Ok(())
    }

    /// Chains over a base with deltas above and below split and merge deltas.
    /// Data deltas: (is upsert, key index, value), oldest first.
    type Ops = Vec<(bool, usize, u32)>;

    /// Left base keys, right base keys, the three range cuts, the shape, the delta groups.
    type ChainSpec = (Vec<usize>, Vec<usize>, [usize; 3], u8, [Ops; 3]);

    fn any_chain() -> impl Strategy<Value = ChainSpec> {
        let ops = || proptest::collection::vec((any::<bool>(), 0..48usize, any::<u32>()), 0..5);
        (
            proptest::collection::vec(0..48usize, 0..30),
            proptest::collection::vec(0..48usize, 0..30),
            [0..48usize, 0..48usize, 0..48usize],
            0..5u8,
            [ops(), ops(), ops()],
        )
    }

    /// Leaf `[d[lo], d[hi])` (or open-ended) with, per `shape`: 0 no SMO, 1 a split at `s`,
    /// 2 a merge with the right sibling `[d[mid], d[hi])`, 3 that merge then a split at `s`,
    /// 4 a split at `s` then the new right half merged back. Data deltas go below, between
    /// and above the SMO deltas (as improvement (b) and the paper's layout both allow).
    fn build(
        d: &[Vec<u8>],
        left_keys: &[usize],
        right_keys: &[usize],
        cuts: [usize; 3],
        shape: u8,
        ops: &[Ops; 3],
    ) -> Chain {
        let mut cuts = cuts;
        cuts.sort();
        let [lo, mid, s] = cuts;
        // An open high key half the time; a key of 47 is the domain's greatest.
        let hi = if cuts[2].is_multiple_of(2) { None } else { Some(47) };
        match shape {
            1 => {
                let mut c = Chain::new(leaf(d, left_keys, range(d, lo, hi)));
                push_data(&mut c, d, &ops[0]);
                c.push(Kind::Split {
                    sep: d[s].clone().into(),
                    right: 9,
                    range: range(d, lo, Some(s)),
                    posted: AtomicBool::new(false),
                });
                push_data(&mut c, d, &ops[1]);
                c
            }
            2 | 3 => {
                let right = Box::new(Node::base(0, leaf(d, right_keys, range(d, mid, hi))));
                let mut c = Chain::new(leaf(d, left_keys, range(d, lo, Some(mid))));
                push_data(&mut c, d, &ops[0]);
                c.push(Kind::Merge {
                    sep: d[mid].clone().into(),
                    right_base: &*right,
                    r_pid: 9,
                    range: range(d, lo, hi),
                    state: MergeState::new(),
                });
                push_data(&mut c, d, &ops[1]);
                if shape == 3 {
                    c.push(Kind::Split {
                        sep: d[s].clone().into(),
                        right: 9,
                        range: range(d, lo, Some(s)),
                        posted: AtomicBool::new(false),
                    });
                    push_data(&mut c, d, &ops[2]);
                }
                // Kept alive (and dropped) with the chain, like R's slot does.
                c.nodes.insert(0, right);
                c
            }
            4 => {
                let right = Box::new(Node::base(0, leaf(d, right_keys, range(d, mid, hi))));
                let mut c = Chain::new(leaf(d, left_keys, range(d, lo, hi)));
                push_data(&mut c, d, &ops[0]);
                c.push(Kind::Split {
                    sep: d[mid].clone().into(),
                    right: 9,
                    range: range(d, lo, Some(mid)),
                    posted: AtomicBool::new(false),
                });
                push_data(&mut c, d, &ops[1]);
                c.push(Kind::Merge {
                    sep: d[mid].clone().into(),
                    right_base: &*right,
                    r_pid: 9,
                    range: range(d, lo, hi),
                    state: MergeState::new(),
                });
                push_data(&mut c, d, &ops[2]);
                c.nodes.insert(0, right);
                c
            }
            _ => {
                let mut c = Chain::new(leaf(d, left_keys, range(d, lo, hi)));
                push_data(&mut c, d, &ops[0]);
                c
            }
        }
    }

    /// Fixed cases: upserts above and below base records, deletes hiding base records, a
    /// delete of the leaf's last record (nothing at or after it: the tree moves right), and
    /// stale records beyond a split.
    #[test]
    fn leaf_first_from_fixed_chains() {
        let d = domain();
        let base: Vec<usize> = (10..30).step_by(2).collect(); // 10, 12, .., 28
        let mut c = Chain::new(leaf(&d, &base, range(&d, 5, Some(35))));
        push_data(&mut c, &d, &[(true, 6, 1), (true, 31, 2), (false, 10, 0), (false, 12, 0), (true, 14, 3)]);
        push_data(&mut c, &d, &[(false, 28, 0), (true, 13, 4), (false, 13, 0), (false, 31, 0)]);
        let guard = crossbeam_epoch::pin();
        let (h, r) = (c.head(), inspect_walk(c.head(), &guard).range);
        let first = |k: usize, ex: bool| leaf_first_from(h, r, &d[k], ex, &guard).map(|(k, v)| (k.to_vec(), *v));
        assert_eq!(first(5, false), Some((d[6].clone(), 1)), "an upsert below the base");
        assert_eq!(first(6, true), Some((d[14].clone(), 3)), "deletes hide 10 and 12; 13 came and went");
        assert_eq!(first(15, false), Some((d[16].clone(), 1016)), "a base record");
        assert_eq!(first(26, true), None, "the last record (28) and the upsert above (31) deleted");
        assert_eq!(first(28, false), None);
        drop(guard);
        check_chain(&c, &d).unwrap();

        // A split at 20: base records 20.. moved right; a delta at 22 under it is stale too.
        let mut c = Chain::new(leaf(&d, &base, range(&d, 5, None)));
        push_data(&mut c, &d, &[(true, 23, 5)]);
        c.push(Kind::Split {
            sep: d[20].clone().into(),
            right: 9,
            range: range(&d, 5, Some(20)),
            posted: AtomicBool::new(false),
        });
        let guard = crossbeam_epoch::pin();
        let (h, r) = (c.head(), inspect_walk(c.head(), &guard).range);
        assert_eq!(leaf_first_from(h, r, &d[19], false, &guard), None);
        assert_eq!(leaf_first_from(h, r, &d[18], false, &guard).map(|(_, v)| *v), Some(1018));
        drop(guard);
        check_chain(&c, &d).unwrap();
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: if cfg!(miri) { 4 } else { 512 }, ..ProptestConfig::default() })]

        /// `leaf_first_from` against `leaf_entries` on random chains.
        #[test]
        fn leaf_first_from_matches_leaf_entries(
            (left_keys, right_keys, cuts, shape, ops) in any_chain()
        ) {
            let d = domain();
            let c = build(&d, &left_keys, &right_keys, cuts, shape, &ops);
            check_chain(&c, &d)?;
        }

        /// The fence-narrowed search agrees with a plain binary search, and prefix
        /// comparison agrees with byte-string order.
        #[test]
        fn keyvec_search_matches_sorted_vec(
            common in proptest::collection::vec(prop_oneof![Just(0u8), Just(7u8), any::<u8>()], 0..20),
            keys in proptest::collection::vec(any_key(), 0..300),
            probes in proptest::collection::vec(any_key(), 1..50),
        ) {
            // Keys with a shared start (truncated prefixes), probes with and without it.
            let mut keys: Vec<Vec<u8>> = keys.into_iter().map(|k| [&common[..], &k].concat()).collect();
            keys.sort();
            keys.dedup();
            let probes: Vec<Vec<u8>> = probes
                .iter()
                .flat_map(|p| [p.clone(), [&common[..], p].concat(), common[..common.len() / 2].to_vec()])
                .collect();
            let mut kv = KeyVec::default();
            for k in &keys {
                kv.push(k);
            }
            for finished in [false, true] {
                if finished {
                    kv.finish();
                }
                for probe in probes.iter().chain(keys.iter()) {
                    prop_assert_eq!(kv.search(probe), keys.binary_search(probe), "probe {:?}", probe);
                }
                for (i, k) in keys.iter().enumerate() {
                    prop_assert_eq!(kv.prefix(i), prefix(k));
                }
            }
            for w in keys.windows(2) {
                prop_assert_eq!(cmp_prefixed(prefix(&w[0]), &w[0], prefix(&w[1]), &w[1]), CmpOrdering::Less);
            }
        }
    }
}
