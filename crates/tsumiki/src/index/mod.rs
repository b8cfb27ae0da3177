//! A lock-free Bw-tree: a concurrent ordered map from byte-string keys to values.
//!
//! This is the index of paper 002 (see `docs/design.md`): a mapping table virtualises page
//! references, updates prepend delta records with one CAS, chains are consolidated into
//! sorted base nodes, and nodes split and merge with B-link-style high keys and right
//! links, every half-finished structure change being finished by whichever thread meets it.
//! Memory is reclaimed through `crossbeam-epoch`.
//!
//! The paper's two improvements are options of [`BwTreeConfig`]:
//! - `numbered_deltas` (a): deltas are numbered, and only the thread whose delta reaches the
//!   threshold consolidates; it swaps the result in below its own delta, which cannot fail;
//! - `split_delta_at_head` (b): split (and merge) deltas stay at the head of the chain, so a
//!   thread learns a node's range from the head alone instead of walking the chain.
//!
//! ```
//! use tsumiki::index::BwTree;
//!
//! let tree = BwTree::new();
//! assert!(tree.insert(b"apple", 1).unwrap());
//! assert!(!tree.insert(b"apple", 2).unwrap()); // already there
//! tree.upsert(b"banana", 3).unwrap();
//! assert_eq!(tree.get(b"apple").unwrap(), Some(1));
//! let all: Vec<_> = tree.scan(b"", None).collect();
//! assert_eq!(all, vec![(b"apple".to_vec(), 1), (b"banana".to_vec(), 3)]);
//! ```

mod bulk;
// The lock-free Bw-tree: delta chains behind epoch-protected pointers.
#[allow(unsafe_code)]
mod mapping;
#[allow(unsafe_code)]
mod node;
mod sched;
#[cfg(feature = "shuttle")]
pub use sched::plant_nonatomic_install;
#[allow(unsafe_code)]
mod tree;

use crossbeam_epoch::{self as epoch, Guard};

pub(crate) use node::prefix;
pub use tree::LeafHint;
use tree::{LeafPos, Tree, WriteOp};

/// The longest key the tree accepts, in bytes.
pub use crate::limits::MAX_KEY_LEN;

pub use crate::error::IndexError;

/// Tuning knobs and the paper's optional improvements.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BwTreeConfig {
    /// Most records in a leaf base; a consolidation that yields more splits the leaf.
    pub leaf_max: usize,
    /// Most children of an inner base before it splits.
    pub inner_max: usize,
    /// A consolidated non-root node with fewer entries than this is merged into its left
    /// sibling. Must be at most half of `leaf_max` and `inner_max`, so halves of a split
    /// do not merge again at once.
    pub merge_threshold: usize,
    /// Delta-chain length that triggers consolidation.
    pub delta_threshold: usize,
    /// Improvement (a): numbered deltas; exactly one thread consolidates, and cannot fail.
    pub numbered_deltas: bool,
    /// Improvement (b): split and merge deltas stay at the chain head.
    pub split_delta_at_head: bool,
}

impl BwTreeConfig {
    /// The Bw-tree as the paper reproduced it: neither improvement.
    pub fn paper() -> Self {
        BwTreeConfig { numbered_deltas: false, split_delta_at_head: false, ..Self::default() }
    }

    /// Tiny nodes and short chains, so that every few writes split, merge or consolidate.
    /// For tests of the structure modifications.
    pub fn tiny() -> Self {
        BwTreeConfig { leaf_max: 4, inner_max: 4, merge_threshold: 2, delta_threshold: 2, ..Self::default() }
    }

    pub(crate) fn validate(&self) -> Result<(), IndexError> {
        let bad = |why: String| Err(IndexError::InvalidConfig(why));
        if self.leaf_max < 4 || self.inner_max < 4 {
            return bad(format!("leaf_max ({}) and inner_max ({}) must be at least 4", self.leaf_max, self.inner_max));
        }
        if self.leaf_max > 1 << 16 || self.inner_max > 1 << 16 {
            return bad("leaf_max and inner_max must be at most 65536".into());
        }
        if self.merge_threshold > self.leaf_max / 2 || self.merge_threshold > self.inner_max / 2 {
            return bad(format!("merge_threshold ({}) must be at most half of the node sizes", self.merge_threshold));
        }
        if self.delta_threshold == 0 || self.delta_threshold > 1024 {
            return bad(format!("delta_threshold ({}) must be in 1..=1024", self.delta_threshold));
        }
        Ok(())
    }
}

impl Default for BwTreeConfig {
    /// Both improvements on: the fastest configuration.
    fn default() -> Self {
        BwTreeConfig {
            leaf_max: 192,
            inner_max: 128,
            merge_threshold: 16,
            delta_threshold: 4,
            numbered_deltas: true,
            split_delta_at_head: true,
        }
    }
}

/// Counters of structure modifications since the tree was created.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BwTreeStats {
    /// Consolidations installed (slot CAS or, with numbered deltas, below a delta).
    pub consolidations: u64,
    /// Slot consolidations whose CAS lost to a concurrent change (not retried).
    pub failed_consolidations: u64,
    /// Split deltas installed.
    pub splits: u64,
    /// Merge deltas installed on left siblings.
    pub merges: u64,
    /// Merges abandoned because the node became its parent's first child.
    pub aborted_merges: u64,
    /// New roots grown by a root split.
    pub root_splits: u64,
    /// Roots with a single child replaced by that child.
    pub root_collapses: u64,
    /// Parent updates of splits finished by a thread that did not start the split.
    pub helped_splits: u64,
    /// Merges finished by a thread that did not start them.
    pub helped_merges: u64,
    /// Operations that restarted from the root.
    pub restarts: u64,
    /// Levels in the tree (1 = a single leaf).
    pub height: usize,
    /// Page ids ever allocated in the mapping table.
    pub pages_allocated: u64,
    /// Bytes the mapping table takes: its directory and the segments of slots allocated.
    pub mapping_table_bytes: u64,
}

/// A lock-free ordered map from byte-string keys (up to [`MAX_KEY_LEN`] bytes) to values.
///
/// All operations take `&self` and may run from any number of threads. Values are cloned out
/// on reads; use a cheap-to-clone `V` (an integer, an `Arc`).
pub struct BwTree<V> {
    tree: Tree<V>,
}

impl<V: Clone + Send + Sync + 'static> Default for BwTree<V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<V: Clone + Send + Sync + 'static> BwTree<V> {
    /// An empty tree with the default (optimized) configuration.
    pub fn new() -> Self {
        BwTree { tree: Tree::new(BwTreeConfig::default()) }
    }

    /// An empty tree with the given configuration.
    pub fn with_config(cfg: BwTreeConfig) -> Result<Self, IndexError> {
        cfg.validate()?;
        Ok(BwTree { tree: Tree::new(cfg) })
    }

    /// A tree holding `items`, whose keys must be strictly increasing, built bottom-up
    /// without a single insert (see [`BwTreeBuilder`], which this wraps).
    ///
    /// ```
    /// use tsumiki::index::{BwTree, BwTreeConfig};
    ///
    /// let tree = BwTree::from_sorted(BwTreeConfig::default(), [(b"a", 1), (b"b", 2)]).unwrap();
    /// assert_eq!(tree.get(b"b").unwrap(), Some(2));
    /// assert!(BwTree::from_sorted(BwTreeConfig::default(), [(b"b", 1), (b"a", 2)]).is_err());
    /// ```
    pub fn from_sorted<K: AsRef<[u8]>>(
        cfg: BwTreeConfig,
        items: impl IntoIterator<Item = (K, V)>,
    ) -> Result<Self, IndexError> {
        let mut b = BwTreeBuilder::new(cfg)?;
        for (k, v) in items {
            b.push(k.as_ref(), v)?;
        }
        b.finish()
    }

    /// The configuration the tree was built with.
    pub fn config(&self) -> &BwTreeConfig {
        &self.tree.cfg
    }

    /// The value stored under `key`.
    pub fn get(&self, key: &[u8]) -> Result<Option<V>, IndexError> {
        self.tree.get(key)
    }

    /// The value stored under `key`, borrowed for as long as `guard` pins the epoch: no
    /// second pin for a caller that holds one.
    pub fn get_pinned<'g>(&self, key: &[u8], guard: &'g Guard) -> Result<Option<&'g V>, IndexError> {
        self.tree.get_pinned(key, guard)
    }

    /// Stores `val` under `key` whether or not it exists. Returns `true` if the key was new,
    /// `false` if an existing value was replaced.
    pub fn upsert(&self, key: &[u8], val: V) -> Result<bool, IndexError> {
        self.tree.write(key, WriteOp::Upsert(val))
    }

    /// Stores `val` only if `key` is absent. Returns whether it was inserted.
    pub fn insert(&self, key: &[u8], val: V) -> Result<bool, IndexError> {
        self.tree.write(key, WriteOp::Insert(val))
    }

    /// Replaces the value of `key` only if it exists. Returns whether it was updated.
    pub fn update(&self, key: &[u8], val: V) -> Result<bool, IndexError> {
        self.tree.write(key, WriteOp::Update(val))
    }

    /// Removes `key` if it exists. Returns whether it was removed.
    pub fn delete(&self, key: &[u8]) -> Result<bool, IndexError> {
        self.tree.write(key, WriteOp::Delete)
    }

    /// Applies a batch of distinct keys in ascending order: `(key, Some(v))` inserts `v`
    /// where `key` is absent (then `added[i]` is set), `(key, None)` removes `key`. Each
    /// leaf the batch covers is rewritten once (one consolidation with the batch merged
    /// in) rather than once per key; every change is atomic on its own, as with
    /// [`insert`](Self::insert) and [`delete`](Self::delete), not the batch as a whole.
    ///
    /// # Panics
    /// If `added` is not as long as `batch` (debug builds also check the order).
    pub fn apply_batch(&self, batch: &[(&[u8], Option<V>)], added: &mut [bool]) -> Result<(), IndexError> {
        assert_eq!(batch.len(), added.len(), "one flag per entry");
        self.tree.apply_batch(batch, added)
    }

    /// A forward iterator over the records with `start <= key < end` (no upper bound when
    /// `end` is `None`), in key order.
    ///
    /// It walks leaf by leaf, taking a consolidated snapshot of each: every record present
    /// throughout the scan is returned exactly once, and records are sorted and unique.
    /// Keys longer than [`MAX_KEY_LEN`] cannot be stored, so a longer `start` or `end` is
    /// simply compared as given.
    pub fn scan(&self, start: &[u8], end: Option<&[u8]>) -> Scan<'_, V> {
        Scan {
            tree: &self.tree,
            guard: epoch::pin(),
            next_key: Some(start.into()),
            end: end.map(Into::into),
            buf: Vec::new(),
            leaves: 0,
        }
    }

    /// Calls `f` on the records with `start <= key < end` (no upper bound when `end` is
    /// `None`), in key order, until `f` returns false. The keys and values are borrowed
    /// from the tree's nodes while `guard` is pinned: nothing is copied or allocated, and
    /// a walk that stops after a few records reads only those (a [`scan`](Self::scan)
    /// copies each leaf it enters). Every record present throughout the walk is visited
    /// exactly once, in order.
    ///
    /// ```
    /// use tsumiki::index::BwTree;
    ///
    /// let tree = BwTree::new();
    /// for i in 0u32..100 {
    ///     tree.upsert(&i.to_be_bytes(), i).unwrap();
    /// }
    /// let guard = crossbeam_epoch::pin();
    /// let mut seen = Vec::new();
    /// tree.walk(&10u32.to_be_bytes(), None, &guard, |_, v| {
    ///     seen.push(*v);
    ///     seen.len() < 3
    /// });
    /// assert_eq!(seen, [10, 11, 12]);
    /// ```
    pub fn walk<'g>(&self, start: &[u8], end: Option<&[u8]>, guard: &'g Guard, f: impl FnMut(&'g [u8], &'g V) -> bool) {
        self.tree.walk(start, end, guard, None, f)
    }

    /// [`walk`](Self::walk), noting each leaf it enters in `leaves` (cleared first), for
    /// [`leaves_unchanged`](Self::leaves_unchanged).
    pub fn walk_noting<'g>(
        &self,
        start: &[u8],
        end: Option<&[u8]>,
        guard: &'g Guard,
        leaves: &mut Leaves,
        f: impl FnMut(&'g [u8], &'g V) -> bool,
    ) {
        leaves.0.clear();
        self.tree.walk(start, end, guard, Some(&mut leaves.0), f)
    }

    /// Whether the leaves a [`walk_noting`](Self::walk_noting) under the same pin `guard`
    /// entered are all unchanged: no record entered or left them since, so a walk now
    /// would visit the same records. False may also mean a change that moved no record
    /// (a consolidation): walk again to know.
    pub fn leaves_unchanged(&self, leaves: &Leaves, guard: &Guard) -> bool {
        self.tree.leaves_unchanged(&leaves.0, guard)
    }

    /// The first record with a key at or after `key` (strictly after when `exclusive` is
    /// set): one descent, without the copy of a whole leaf that a [`scan`](Self::scan) makes.
    /// Copies the key out; [`first_from_with`](Self::first_from_with) borrows it instead.
    pub fn first_from(&self, key: &[u8], exclusive: bool) -> Option<(Vec<u8>, V)> {
        self.first_from_with(key, exclusive, |r| r.map(|(k, v)| (k.to_vec(), v.clone())))
    }

    /// A low key for the last `n` records below `end` within the leaf covering `key`:
    /// the key of the `n`-th record from the last one below `end` in that leaf, or the
    /// leaf's low key when it holds fewer. A reverse scan that wants a few records reads
    /// that window instead of the whole leaf. (Records come and go meanwhile: a hint.)
    pub fn tail_low(&self, key: &[u8], end: Option<&[u8]>, n: usize) -> Vec<u8> {
        self.tree.tail_low(key, end, n.max(1), &epoch::pin())
    }

    /// Calls `f` with the first record at or after `key` (strictly after when `exclusive`
    /// is set), or `None` if there is none, and returns what `f` returns.
    ///
    /// The key and value are borrowed from the tree's nodes while the thread is pinned, so
    /// nothing is allocated or cloned: the leaf's deltas are merged with a binary search of
    /// its sorted base in place. The borrow ends with `f`; copy out what must outlive it.
    ///
    /// ```
    /// use tsumiki::index::BwTree;
    ///
    /// let tree = BwTree::new();
    /// tree.upsert(b"b", 2).unwrap();
    /// tree.upsert(b"d", 4).unwrap();
    /// assert_eq!(tree.first_from_with(b"b", true, |r| r.map(|(k, v)| (k.len(), *v))), Some((1, 4)));
    /// assert!(tree.first_from_with(b"d", true, |r| r.is_none()));
    /// ```
    pub fn first_from_with<R>(&self, key: &[u8], exclusive: bool, f: impl FnOnce(Option<(&[u8], &V)>) -> R) -> R {
        let guard = &epoch::pin();
        f(self.tree.first_from(key, exclusive, guard))
    }

    /// A cursor at the leaf covering `key`, for the caller's pin `guard`: a lookup, a
    /// successor search and an insert of that key then share one descent instead of one
    /// each. The transaction engine's insert path is its user.
    ///
    /// ```
    /// use tsumiki::index::BwTree;
    ///
    /// let tree = BwTree::new();
    /// tree.upsert(b"c", 3).unwrap();
    /// let guard = crossbeam_epoch::pin();
    /// let mut at = tree.cursor(b"b", &guard);
    /// assert_eq!(at.get(), None);
    /// assert_eq!(at.first_from(false).map(|(k, v)| (k.to_vec(), *v)), Some((b"c".to_vec(), 3)));
    /// assert_eq!(at.insert(2), Ok(true));
    /// assert_eq!(tree.get(b"b").unwrap(), Some(2));
    /// ```
    pub fn cursor<'g, 'k>(&'g self, key: &'k [u8], guard: &'g Guard) -> Cursor<'g, 'k, V> {
        self.cursor_near(key, None, guard).0
    }

    /// [`cursor`](Self::cursor), without the descent when `hint` (an earlier cursor's
    /// [`Cursor::hint`]) names a leaf that covers `key` now: sequential keys, as an
    /// ascending fill writes them, find their leaf with one mapping-table load. Also says
    /// whether the hint was used (a caller whose keys do not follow each other can stop
    /// passing one).
    pub fn cursor_near<'g, 'k>(
        &'g self,
        key: &'k [u8],
        hint: Option<&LeafHint>,
        guard: &'g Guard,
    ) -> (Cursor<'g, 'k, V>, bool) {
        let (pos, hinted) = self.tree.seek_near(key, hint, guard);
        (
            Cursor {
                tree: &self.tree,
                pos,
                key,
                guard,
                beyond: std::cell::Cell::new(false),
                absent_at: std::cell::Cell::new(0),
            },
            hinted,
        )
    }

    /// Looks up ascending `keys`, handing each key and its value (borrowed from the tree's
    /// nodes) to `f`, in order: keys that fall in one leaf share one descent. Each answer
    /// is as of the descent to its leaf (writes made since may be missed).
    ///
    /// ```
    /// # use tsumiki::index::BwTree;
    /// let tree: BwTree<u64> = BwTree::new();
    /// tree.upsert(b"a", 1).unwrap();
    /// tree.upsert(b"c", 3).unwrap();
    /// let guard = crossbeam_epoch::pin();
    /// let mut got = Vec::new();
    /// tree.get_sorted([&b"a"[..], b"b", b"c"].into_iter(), &guard, |k, v| got.push((k.to_vec(), v.copied())));
    /// assert_eq!(got, vec![(b"a".to_vec(), Some(1)), (b"b".to_vec(), None), (b"c".to_vec(), Some(3))]);
    /// ```
    pub fn get_sorted<'g, 'k>(
        &'g self,
        keys: impl Iterator<Item = &'k [u8]>,
        guard: &'g Guard,
        f: impl FnMut(&'k [u8], Option<&'g V>),
    ) {
        self.tree.get_sorted(keys, guard, f)
    }

    /// A human-readable listing of every node, level by level. For debugging and tests; call
    /// it only while no other thread modifies the tree.
    #[doc(hidden)]
    pub fn dump_structure(&self) -> String {
        self.tree.dump()
    }

    /// Counters of consolidations and structure modifications.
    pub fn stats(&self) -> BwTreeStats {
        self.tree.stats()
    }
}

/// Builds a [`BwTree`] from records given in strictly increasing key order (loading a
/// snapshot), much faster than inserting them: base nodes are built directly, bottom-up.
///
/// Leaves and inner nodes are filled to 7/8 of `leaf_max` / `inner_max` (never under
/// `merge_threshold`), so later inserts find room without splitting at once. Keys are
/// copied from the borrowed slices; values are moved in.
///
/// ```
/// use tsumiki::index::{BwTreeBuilder, BwTreeConfig};
///
/// let mut b = BwTreeBuilder::new(BwTreeConfig::default()).unwrap();
/// for i in 0u32..1000 {
///     b.push(&i.to_be_bytes(), i).unwrap();
/// }
/// assert!(b.push(&5u32.to_be_bytes(), 5).is_err()); // not sorted: rejected, not added
/// let tree = b.finish().unwrap();
/// assert_eq!(tree.get(&7u32.to_be_bytes()).unwrap(), Some(7));
/// tree.upsert(b"x", 1).unwrap(); // an ordinary tree from here on
/// ```
pub struct BwTreeBuilder<V> {
    inner: bulk::Builder<V>,
}

impl<V: Clone + Send + Sync + 'static> BwTreeBuilder<V> {
    /// A builder for a tree with configuration `cfg` (validated here).
    pub fn new(cfg: BwTreeConfig) -> Result<Self, IndexError> {
        cfg.validate()?;
        Ok(BwTreeBuilder { inner: bulk::Builder::new(cfg)? })
    }

    /// Adds a record. `key` must be greater than every key pushed before, else
    /// [`IndexError::NotSorted`]; a key over [`MAX_KEY_LEN`] is [`IndexError::KeyTooLong`].
    /// A rejected record is not added, and the builder stays usable.
    pub fn push(&mut self, key: &[u8], val: V) -> Result<(), IndexError> {
        self.inner.push(key, val)
    }

    /// Records pushed so far.
    pub fn len(&self) -> u64 {
        self.inner.len()
    }

    /// True when nothing was pushed yet.
    pub fn is_empty(&self) -> bool {
        self.inner.len() == 0
    }

    /// Builds the inner levels and returns the tree (with no records, the same as
    /// [`BwTree::with_config`]). Fails only with [`IndexError::TooManyPages`].
    pub fn finish(self) -> Result<BwTree<V>, IndexError> {
        Ok(BwTree { tree: self.inner.finish()? })
    }
}

/// The leaf that covered one key when the cursor was made or last refreshed (see
/// [`BwTree::cursor`]). Its answers are as of that moment; [`Cursor::refresh`] re-reads the
/// leaf (one mapping-table load, no descent unless the leaf no longer covers the key).
pub struct Cursor<'g, 'k, V> {
    tree: &'g Tree<V>,
    pos: LeafPos<'g, V>,
    key: &'k [u8],
    guard: &'g Guard,
    /// Whether an answer since the last refresh came from beyond the cursor's leaf.
    beyond: std::cell::Cell<bool>,
    /// The leaf head (its address) at which [`first_from`](Self::first_from) found the
    /// cursor's key absent: an insert at that same head needs no lookup of its own.
    absent_at: std::cell::Cell<usize>,
}

impl<'g, V: Clone + Send + Sync + 'static> Cursor<'g, '_, V> {
    /// Where the cursor is, to start a later [`BwTree::cursor_near`] from.
    pub fn hint(&self) -> LeafHint {
        Tree::hint_of(&self.pos)
    }

    /// The value stored under the cursor's key, borrowed from the tree's nodes.
    pub fn get(&self) -> Option<&'g V> {
        self.tree.get_at(&self.pos, self.key, self.guard)
    }

    /// The first record at or after the cursor's key (strictly after when `exclusive`),
    /// borrowed like [`BwTree::first_from_with`]'s. Descends again only when the answer
    /// lies beyond the cursor's leaf.
    pub fn first_from(&self, exclusive: bool) -> Option<(&'g [u8], &'g V)> {
        let (found, in_leaf) = self.tree.first_from_at(&self.pos, self.key, exclusive, self.guard);
        if !in_leaf {
            self.beyond.set(true);
        }
        if !exclusive && found.is_none_or(|(k, _)| k != self.key) {
            self.absent_at.set(self.pos.head_addr());
        }
        found
    }

    /// Re-reads the leaf, so that the next answers see writes made since. Returns whether
    /// they may differ from the answers given since the cursor was made or last refreshed:
    /// `false` when the leaf's head is the one they were read from and none of them came
    /// from a leaf further right.
    pub fn refresh(&mut self) -> bool {
        let changed = self.tree.reseek(&mut self.pos, self.key, self.guard);
        changed | self.beyond.replace(false)
    }

    /// Stores `val` under the cursor's key if it is absent, like [`BwTree::insert`]:
    /// returns whether it was inserted. The check and the insert are one atomic step at
    /// the leaf, whatever the cursor saw before.
    pub fn insert(&mut self, val: V) -> Result<bool, IndexError> {
        self.tree.write_at(&mut self.pos, self.key, WriteOp::Insert(val), self.absent_at.get(), self.guard)
    }

    /// Whether the cursor's leaf covers `key` now (a cursor for it would need no descent).
    pub fn covers(&self, key: &[u8]) -> bool {
        self.tree.pos_covers(&self.pos, key, self.guard)
    }

    /// Removes the cursor's key, like [`BwTree::delete`]: returns whether it was present.
    /// No descent unless the leaf no longer covers the key.
    pub fn delete(&mut self) -> Result<bool, IndexError> {
        self.tree.write_at(&mut self.pos, self.key, WriteOp::Delete, 0, self.guard)
    }
}

/// The leaves a walk entered, as [`BwTree::walk_noting`] notes them: their page ids and
/// the chains they had. Reused from walk to walk.
#[derive(Default)]
pub struct Leaves(Vec<(node::Pid, usize, usize)>);

/// Iterator returned by [`BwTree::scan`]. It keeps the calling thread pinned in the epoch
/// scheme (re-pinning every few leaves), so it is not `Send`.
pub struct Scan<'t, V> {
    tree: &'t Tree<V>,
    guard: Guard,
    /// Where the next leaf starts: the scan's start, then each leaf's high key.
    next_key: Option<Box<[u8]>>,
    end: Option<Box<[u8]>>,
    /// The current leaf's records, in reverse order.
    buf: Vec<(Box<[u8]>, V)>,
    leaves: usize,
}

impl<V: Clone + Send + Sync + 'static> Iterator for Scan<'_, V> {
    type Item = (Vec<u8>, V);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some((k, v)) = self.buf.pop() {
                return Some((k.into_vec(), v));
            }
            let key = self.next_key.take()?;
            if self.end.as_deref().is_some_and(|e| &key[..] >= e) {
                return None;
            }
            self.leaves += 1;
            if self.leaves.is_multiple_of(64) {
                // Long scans must not hold back memory reclamation for their whole length.
                self.guard.repin();
            }
            // The next leaf is found from the previous one's high key, which is exactly the
            // right sibling's low key, even if that sibling split or merged meanwhile.
            self.next_key = self.tree.leaf_snapshot(&key, &self.guard, self.end.as_deref(), &mut self.buf);
            // Handed out from the back.
            self.buf.reverse();
        }
    }
}
