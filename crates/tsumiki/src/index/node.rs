//! Nodes of the Bw-tree: base pages and the delta records prepended to them.
//!
//! A logical node is a chain reached from its mapping-table slot: zero or more deltas, then
//! one base node. Data deltas (`Upsert`, `Delete` in leaves; `IndexInsert`, `IndexDelete`
//! in inner nodes) change content; SMO deltas (`Split`, `Merge`, `Remove`) change the node's
//! key range. Everything reachable from a slot is immutable except `next` pointers, which the
//! two optional improvements CAS (see `tree.rs`), and the atomic flags noted below.

use std::cmp::Ordering as CmpOrdering;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;

use crossbeam_epoch::{Atomic, Guard, Shared};
use smallvec::SmallVec;

use crate::prefetch::{prefetch_at, prefetch_span};

mod chain;
mod keys;
pub(crate) use chain::*;
pub(crate) use keys::*;

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

/// A base page: sorted records (leaf) or separators with children (inner).
pub(crate) struct Base<V> {
    pub range: Arc<Range>,
    pub keys: KeyVec,
    /// Leaf values, parallel to `keys`.
    pub vals: Vec<V>,
    /// Inner children: `children[i]` covers `[keys[i], keys[i+1])`; `keys[0]` is the low key.
    pub children: Vec<Child>,
}

/// An inner base's entry for a child: its pid, and where the child's base was last seen.
///
/// The addresses let a descent ask for the child's lines while it loads the child's mapping
/// slot: the node, and, at the position the key's prefix interpolates to between the
/// child's bounds, its prefixes, key ends and entries (values or children). The misses of a
/// level then overlap instead of following one another (slot, node, then the run the fence
/// names). They are only prefetch addresses, never dereferenced: a stale one (the child
/// consolidated, its old base freed) or a poor guess (keys far from uniform) costs useless
/// prefetches, nothing else. Readers refresh them when the slot's head is a base at another
/// address, so they change only when the child is consolidated. Beside the pid, so the
/// search's prefetch of the entry brings them.
pub(crate) struct Child {
    pub pid: Pid,
    /// The base node's address (0: not seen yet).
    node: AtomicUsize,
    /// The keys' block address, with their count (`pack_hint`).
    keys: AtomicUsize,
    /// The address of the base's first value or child entry, with the keys' mean length
    /// (`pack_hint`).
    entries: AtomicUsize,
}

/// Bits of an address in a word of `Child`, whose top bits hold a count.
const HINT_ADDR_BITS: u32 = 48;

/// `addr` with `count` (saturated) in the top bits, which user-space addresses leave clear;
/// `None` for an address that does not.
fn pack_hint(addr: usize, count: usize) -> Option<usize> {
    let max = (1 << (usize::BITS - HINT_ADDR_BITS)) - 1;
    (addr >> HINT_ADDR_BITS == 0).then(|| addr | count.min(max) << HINT_ADDR_BITS)
}

/// The address (without provenance: only ever prefetched) and count of a packed word.
fn unpack_hint(word: usize) -> (*const u8, usize) {
    (std::ptr::without_provenance(word & ((1 << HINT_ADDR_BITS) - 1)), word >> HINT_ADDR_BITS)
}

impl Child {
    /// An entry for `pid`, its node's address not known yet.
    pub(crate) fn new(pid: Pid) -> Self {
        Child { pid, node: AtomicUsize::new(0), keys: AtomicUsize::new(0), entries: AtomicUsize::new(0) }
    }

    /// Remembers `head`, the child's node now, if it is a base seen at another address.
    #[inline]
    pub(crate) fn remember<V>(&self, head: &Node<V>) {
        let at = (head as *const Node<V>).addr();
        let Kind::Base(b) = &head.kind else { return };
        if self.node.load(Ordering::Relaxed) == at {
            return;
        }
        let entries = if b.children.is_empty() { b.vals.as_ptr().addr() } else { b.children.as_ptr().addr() };
        let mean_len = b.keys.data_len().checked_div(b.len()).unwrap_or(0);
        let (Some(keys), Some(entries)) = (pack_hint(b.keys.block_addr(), b.len()), pack_hint(entries, mean_len))
        else {
            return;
        };
        self.keys.store(keys, Ordering::Relaxed);
        self.entries.store(entries, Ordering::Relaxed);
        self.node.store(at, Ordering::Relaxed);
    }

    /// The base node address remembered (0: none yet).
    #[cfg(test)]
    pub(crate) fn hinted_node(&self) -> usize {
        self.node.load(Ordering::Relaxed)
    }

    /// Asks for the lines a search of the child for a key of prefix `kp` will read: its
    /// node, and, around the index `kp` interpolates to between `low` and `high` (the
    /// prefixes of the child's bounds), its prefixes, key ends and entries (`entry_size`
    /// bytes each), and with `key_bytes` (a record lookup by a key longer than a prefix,
    /// which compares the bytes of the key it finds) the keys' bytes there.
    #[inline]
    pub(crate) fn prefetch<V>(&self, kp: u64, low: u64, high: u64, entry_size: usize, key_bytes: bool) {
        let node = self.node.load(Ordering::Relaxed);
        if node == 0 {
            return;
        }
        // Addresses without provenance: never dereferenced, only prefetched.
        prefetch_span(std::ptr::without_provenance(node), std::mem::size_of::<Node<V>>());
        let (block, n) = unpack_hint(self.keys.load(Ordering::Relaxed));
        if n == 0 || high <= low || kp < low {
            return;
        }
        // In floating point: a 128-bit division would cost more than the rest of the level.
        let g = (((kp - low) as f64 / (high - low) as f64 * n as f64) as usize).min(n - 1);
        // Four keys either side of the guess (a guess is off by a few keys): a run of the
        // fence (8 prefixes or more), two lines of prefixes.
        let (first, last) = (g.saturating_sub(4), (g + 4).min(n - 1));
        prefetch_at(block.wrapping_add(KeyVec::prefix_offset(first)));
        prefetch_at(block.wrapping_add(KeyVec::prefix_offset(last)));
        prefetch_at(block.wrapping_add(KeyVec::end_offset(n, g)));
        let (entries, mean_len) = unpack_hint(self.entries.load(Ordering::Relaxed));
        prefetch_span(entries.wrapping_add(entry_size * first), entry_size * (last + 1 - first));
        if key_bytes {
            // Their bytes at the mean length, in at most 4 lines.
            let from = KeyVec::data_offset(n) + first * mean_len;
            prefetch_span(block.wrapping_add(from), (9 * mean_len).min(256));
        }
    }
}

impl<V> Base<V> {
    pub(crate) fn len(&self) -> usize {
        self.keys.len()
    }
    /// The index of an inner base's entry covering `key` (which the caller validated is
    /// in range): its greatest separator at or below `key`.
    #[inline]
    pub(crate) fn child_index(&self, key: &[u8]) -> usize {
        match self.keys.search_beside(key, &self.children) {
            Ok(i) => i,
            Err(i) => i.saturating_sub(1),
        }
    }

    /// The child of an inner base covering `key` (which the caller validated is in range).
    #[inline]
    pub(crate) fn child_for(&self, key: &[u8]) -> Pid {
        self.children[self.child_index(key)].pid
    }
}

// A base inline, not boxed: its fence shares the node's cache lines, fetched together
// (`prefetch_node`); a box would add a serial miss to every level of every descent. Deltas
// pay the size (336 bytes a node), but live only until the next consolidation.
#[allow(clippy::large_enum_variant)]
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

/// Asks for every cache line of `node` at once (a base's fence is in them), so that they
/// arrive together rather than one by one as its fields are read.
#[inline(always)]
pub(crate) fn prefetch_node<V>(node: &Node<V>) {
    prefetch_span((node as *const Node<V>).cast(), std::mem::size_of::<Node<V>>());
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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
    }
}
