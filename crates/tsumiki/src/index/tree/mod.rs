//! The Bw-tree operations and structure modifications (paper 002).
//!
//! Protocol summary (docs/design.md has the long form):
//! - Data deltas are CAS-installed at the chain head, or, with improvement (b), behind the
//!   run of SMO deltas at the head, so SMO deltas always stay on top.
//! - Split: build the right sibling Q from a freshly consolidated base, CAS a `Split` delta
//!   on that exact base, then post `IndexInsert` on the parent (or grow a new root).
//! - Merge: CAS `Remove` on a freshly consolidated small node R, post `IndexDelete` on the
//!   parent (the commit point, decided through `MergeState`), then a `Merge` delta on the
//!   left sibling. R's content is reached through that delta until the left consolidates.
//! - Any thread that meets an unfinished split or merge helps finish it; helping recurses
//!   up to `MAX_HELP` levels, beyond which the thread restarts from the root instead.
//! - Consolidation replaces a chain by one base with a slot CAS, not retried on failure;
//!   with improvement (a), the thread whose numbered delta hits the threshold consolidates
//!   the chain below it and swaps it under that delta, which cannot fail.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crossbeam_epoch::{self as epoch, Atomic, Guard, Owned, Shared};
use crossbeam_utils::CachePadded;

use super::mapping::{retire_chain, MappingTable, Pid, NO_PID};
use super::node::*;
use super::sched;
use super::{BwTreeConfig, BwTreeStats, IndexError, MAX_KEY_LEN};

const MAX_HEIGHT: usize = 64;
const MAX_HELP: u32 = 6;

/// The pids visited on the way down, one per level above the current node.
#[derive(Clone, Copy)]
pub(crate) struct Path {
    pids: [Pid; MAX_HEIGHT],
    len: usize,
}

impl Path {
    pub(crate) fn new() -> Self {
        Path { pids: [NO_PID; MAX_HEIGHT], len: 0 }
    }
    fn clear(&mut self) {
        self.len = 0;
    }
    fn push(&mut self, pid: Pid) -> bool {
        if self.len == MAX_HEIGHT {
            return false;
        }
        self.pids[self.len] = pid;
        self.len += 1;
        true
    }
    fn last(&self) -> Option<Pid> {
        self.len.checked_sub(1).map(|i| self.pids[i])
    }
    fn with(mut self, pid: Pid) -> Path {
        self.push(pid);
        self
    }
    fn parent(&self) -> Path {
        let mut p = *self;
        p.len = p.len.saturating_sub(1);
        p
    }
}

/// Where a thread's last descent ended (a leaf's pid and the path above it): its next
/// seek starts there when the key falls in that leaf, so sequential keys skip the descent.
#[derive(Clone, Copy)]
pub struct LeafHint {
    pid: Pid,
    path: Path,
}

/// The leaf a descent reached for a key: its pid, the head seen and the path above it.
/// Valid under the guard it was found with (a pid is reused only after an epoch passes).
pub(crate) struct LeafPos<'g, V> {
    pid: Pid,
    head: Shared<'g, Node<V>>,
    path: Path,
}

impl<V> LeafPos<'_, V> {
    /// The address of the leaf head the position was read from.
    pub(crate) fn head_addr(&self) -> usize {
        self.head.as_raw() as usize
    }
}

/// Deltas of an append run between consolidations (see [`Tree::install`]).
const APPEND_RUN: usize = 32;

/// Whether `delta` (not yet installed) extends an append run on `below`: an upsert whose key
/// is above the key of `below` (an append run itself) or above every key of the base
/// `below`.
fn extends_append_run<V>(delta: &Node<V>, below: &Node<V>) -> bool {
    let Kind::Upsert { key, .. } = &delta.kind else { return false };
    match &below.kind {
        Kind::Upsert { key: k, .. } => below.appends && cmp_prefixed(delta.kp, key, below.kp, k).is_gt(),
        Kind::Base(b) => {
            let n = b.len();
            n == 0 || cmp_prefixed(delta.kp, key, b.keys.prefix(n - 1), b.keys.get(n - 1)).is_gt()
        }
        _ => false,
    }
}

/// Something changed under the operation: start again from the root.
pub(crate) struct Restart;

#[derive(Default)]
pub(crate) struct Counters {
    pub consolidations: AtomicU64,
    pub failed_consolidations: AtomicU64,
    pub splits: AtomicU64,
    pub merges: AtomicU64,
    pub aborted_merges: AtomicU64,
    pub root_splits: AtomicU64,
    pub root_collapses: AtomicU64,
    pub helped_splits: AtomicU64,
    pub helped_merges: AtomicU64,
    pub restarts: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

pub(crate) enum WriteOp<V> {
    Upsert(V),
    Insert(V),
    Update(V),
    Delete,
}

/// Where a data delta goes: the slot (head CAS) or, under improvement (b), the `next` of
/// the last SMO delta at the head. `expected` is the value the CAS must still find there.
struct InsertPoint<'g, V> {
    at: &'g Atomic<Node<V>>,
    expected: Shared<'g, Node<V>>,
}

/// The root word: the root's pid in the low 32 bits (pids are below 2^28) and a generation
/// in the high 32, bumped by every root change. A root CAS against a word read earlier then
/// fails even when the root went away and came back to the same pid: a helper finishing a
/// root split late would otherwise grow a root over a right half long since merged back
/// and retired.
fn root_pid(word: u64) -> Pid {
    word & 0xffff_ffff
}

/// The root word after `word` that names `pid`.
fn next_root(word: u64, pid: Pid) -> u64 {
    ((word >> 32).wrapping_add(1) << 32) | pid
}

pub(crate) struct Tree<V> {
    pub(crate) map: MappingTable<V>,
    /// See [`root_pid`].
    pub(crate) root: AtomicU64,
    pub(crate) cfg: BwTreeConfig,
    /// On lines of their own: structure changes write them, and `root` and `cfg` beside
    /// them are read by every descent.
    pub(crate) counters: CachePadded<Counters>,
}

impl<V: Clone + Send + Sync + 'static> Tree<V> {
    pub(crate) fn new(cfg: BwTreeConfig) -> Self {
        let map = MappingTable::new();
        let pid = map.alloc().expect("empty table has room");
        let range = Arc::new(Range::new(Box::from(&b""[..]), None, NO_PID));
        let base = Base { range, keys: KeyVec::default(), vals: Vec::new(), children: Vec::new() };
        map.slot(pid).store(Owned::new(Node::base(0, base)), Ordering::Release);
        Tree { map, root: AtomicU64::new(pid), cfg, counters: CachePadded::new(Counters::default()) }
    }

    /// The root's pid now.
    #[inline]
    fn root_pid(&self) -> Pid {
        root_pid(self.root.load(Ordering::Acquire))
    }

    #[inline]
    fn load<'g>(&self, pid: Pid, guard: &'g Guard) -> Shared<'g, Node<V>> {
        sched::point();
        self.map.slot(pid).load(Ordering::Acquire, guard)
    }

    /// The topmost SMO delta and the current range of a chain.
    #[inline]
    fn inspect<'g>(&self, head: &'g Node<V>, guard: &'g Guard) -> Inspected<'g, V> {
        if self.cfg.split_delta_at_head {
            inspect_head(head, guard)
        } else {
            inspect_walk(head, guard)
        }
    }

    // ----- descent ---------------------------------------------------------------------

    /// Descends from the root to the node at `level` covering `key`, recording the path.
    /// `None` when the tree is not that tall, or (while helping) after too many restarts.
    pub(crate) fn descend<'g>(
        &self,
        key: &[u8],
        level: u16,
        path: &mut Path,
        guard: &'g Guard,
        help: u32,
    ) -> Option<(Pid, Shared<'g, Node<V>>)> {
        let mut restarts = 0u32;
        'restart: loop {
            if restarts > 0 {
                bump(&self.counters.restarts);
                if help > 0 && restarts > 64 {
                    return None;
                }
            }
            restarts += 1;
            path.clear();
            let mut pid = self.root_pid();
            let root_head = self.load(pid, guard);
            // SAFETY: loaded under `guard`; null means the root pid was just retired.
            let Some(rh) = (unsafe { root_head.as_ref() }) else { continue 'restart };
            let mut lvl = rh.level;
            if lvl < level {
                return None;
            }
            // The parent's entry for `pid`, when the route came from one (`Child`).
            let mut entry: Option<&Child> = None;
            loop {
                let (p, head) = match self.settle(pid, lvl, key, path, guard, help) {
                    Ok(x) => x,
                    Err(Restart) => continue 'restart,
                };
                // SAFETY: `settle` returns a non-null head protected by `guard`.
                let h = unsafe { node_ref(head) };
                if let Some(c) = entry.filter(|_| p == pid) {
                    c.remember(h);
                }
                if lvl == level {
                    return Some((p, head));
                }
                if help == 0 && h.depth > 0 && one_delta_turn() && self.consolidate(p, path, guard, 0) {
                    // An inner node's deltas (a child's split or merge, or its own split)
                    // cost every descent through it a miss per delta, and the base's entry
                    // hints: one read in `READ_CONSOLIDATE_ONE` that meets them consolidates
                    // the node (a split delta once its parent knows the new sibling).
                    pid = p;
                    continue;
                }
                let (child, from) = inner_route_hinted(h, key, guard);
                if !path.push(p) {
                    continue 'restart;
                }
                entry = from.map(|(b, i)| {
                    // The child's lines on their way while its slot loads.
                    let high = if h.bounds == NO_BOUNDS { 0 } else { h.bounds.1 };
                    let (kp, low, high) = b.keys.interpolation(key, i, high).unwrap_or((0, 0, 0));
                    let entry_size = if lvl == 1 { std::mem::size_of::<V>() } else { std::mem::size_of::<Child>() };
                    b.children[i].prefetch::<V>(kp, low, high, entry_size, lvl == 1 && key.len() > 8);
                    &b.children[i]
                });
                pid = child;
                lvl -= 1;
            }
        }
    }

    /// Validates that `pid` (at `level`) covers `key`: helps unfinished SMOs met there,
    /// follows right-sibling links past concurrent splits (B-link), and, in the paper's
    /// configuration, consolidates a chain found over the threshold.
    fn settle<'g>(
        &self,
        mut pid: Pid,
        level: u16,
        key: &[u8],
        path: &Path,
        guard: &'g Guard,
        help: u32,
    ) -> Result<(Pid, Shared<'g, Node<V>>), Restart> {
        let mut consolidated = false;
        loop {
            let head = self.load(pid, guard);
            // SAFETY: loaded under `guard`.
            let Some(h) = (unsafe { head.as_ref() }) else {
                // Routed to a node already merged away and retired: the parent still routes
                // by a stale index-delete (its left node merged on too). Consolidating the
                // parent applies every delete exactly.
                self.repair_parent(path, guard, help);
                return Err(Restart);
            };
            prefetch_node(h);
            if h.level != level {
                return Err(Restart);
            }
            let seen = self.inspect(h, guard);
            if let Some(s) = seen.smo {
                match &s.kind {
                    Kind::Remove { state, .. } => {
                        if help < MAX_HELP {
                            self.help_remove(pid, head, guard, help + 1, false);
                        }
                        if state.get() == MERGED {
                            self.repair_parent(path, guard, help);
                        }
                        return Err(Restart);
                    }
                    Kind::Split { .. } if help < MAX_HELP => {
                        self.help_split(pid, s, path, guard, help + 1, false)?;
                    }
                    _ => {}
                }
            }
            let range = seen.range;
            if seen.surely_inside(prefix(key)) {
                // In range: no need to load the `Range` itself.
            } else if range.below(key) {
                return Err(Restart);
            } else if range.beyond(key) {
                if range.right == NO_PID {
                    return Err(Restart);
                }
                pid = range.right;
                continue;
            }
            if !self.cfg.numbered_deltas && !consolidated && h.depth as usize >= self.cfg.delta_threshold {
                // The paper: every thread that visits an over-long chain tries to consolidate.
                consolidated = true;
                if self.consolidate(pid, path, guard, help) {
                    continue;
                }
            }
            return Ok((pid, head));
        }
    }

    /// Consolidates the parent we descended from (see `settle`).
    fn repair_parent(&self, path: &Path, guard: &Guard, help: u32) {
        if let Some(parent) = path.last() {
            if help < MAX_HELP {
                self.consolidate(parent, &path.parent(), guard, help + 1);
            }
        }
    }

    // ----- installing deltas -----------------------------------------------------------

    fn insert_point<'g>(&'g self, pid: Pid, head: Shared<'g, Node<V>>, guard: &'g Guard) -> Option<InsertPoint<'g, V>> {
        // SAFETY: `head` is non-null and protected by `guard` (callers got it from `settle`).
        let h = unsafe { node_ref(head) };
        if !self.cfg.split_delta_at_head || !h.is_smo() {
            return Some(InsertPoint { at: self.map.slot(pid), expected: head });
        }
        let mut last = h;
        loop {
            let next = last.next(guard);
            // SAFETY: SMO deltas always have a non-null next.
            let n = unsafe { node_ref(next) };
            if !n.is_smo() {
                break;
            }
            last = n;
        }
        sched::point();
        let expected = last.next.load(Ordering::Acquire, guard);
        if expected.tag() & TAG_FROZEN != 0 {
            return None;
        }
        Some(InsertPoint { at: &last.next, expected })
    }

    /// CAS-installs a data delta at `ip`, numbering it from what it lands on; `grow` is the
    /// change in the node's entry count (+1, 0 or -1).
    fn install<'g>(
        &self,
        ip: &InsertPoint<'g, V>,
        mut delta: Owned<Node<V>>,
        grow: i32,
        guard: &'g Guard,
    ) -> Result<Shared<'g, Node<V>>, Owned<Node<V>>> {
        // SAFETY: `expected` is the non-null current value at the insert point, under `guard`.
        let below = unsafe { node_ref(ip.expected) };
        // With (a), a number-0 delta's chain is consolidated below it after it was built,
        // leaving its `depth` stale; counting from its base again keeps depths bounded.
        let below_depth = if self.cfg.numbered_deltas && below.num == 0 && !below.is_base()
            // SAFETY: a delta's next is non-null, under `guard`.
            && unsafe { node_ref(below.next(guard)) }.is_base()
        {
            1
        } else {
            below.depth
        };
        delta.depth = below_depth.saturating_add(1);
        delta.size = below.size.saturating_add_signed(grow);
        (delta.base_range, delta.bounds) = match &below.kind {
            Kind::Base(b) => (Arc::as_ptr(&b.range), b.range.prefix_bounds()),
            // Only without (b), where a data delta's range is found by walking anyway.
            _ if below.is_smo() => (below.base_range, NO_BOUNDS),
            _ => (below.base_range, below.bounds),
        };
        if self.cfg.numbered_deltas {
            // An append run (ascending inserts at a leaf's end) is consolidated every
            // `APPEND_RUN` deltas rather than every `delta_threshold`: each consolidation
            // copies the whole leaf, and a lookup passes a run's deltas at one compare each.
            delta.appends = extends_append_run(&delta, below);
            let limit = if delta.appends { APPEND_RUN.max(self.cfg.delta_threshold) } else { self.cfg.delta_threshold };
            let n = below.num as usize + 1;
            let n = if n >= limit { 0 } else { n };
            delta.num = n as u16;
            delta.pending.store(n == 0, Ordering::Relaxed);
        }
        delta.next.store(ip.expected, Ordering::Relaxed);
        sched::point();
        #[cfg(feature = "shuttle")]
        if sched::planted_nonatomic_install() {
            // Test-only planted bug: a check-then-store instead of a CAS, so concurrent
            // installs can overwrite each other. The shuttle tests must catch it.
            if ip.at.load(Ordering::Acquire, guard) != ip.expected {
                return Err(delta);
            }
            sched::point();
            let d = delta.into_shared(guard);
            ip.at.store(d, Ordering::Release);
            return Ok(d);
        }
        ip.at.compare_exchange(ip.expected, delta, Ordering::AcqRel, Ordering::Acquire, guard).map_err(|e| e.new)
    }

    /// CAS-installs an SMO delta directly on `head` at the slot.
    fn install_smo<'g>(
        &self,
        pid: Pid,
        head: Shared<'g, Node<V>>,
        delta: Owned<Node<V>>,
        guard: &'g Guard,
    ) -> Result<Shared<'g, Node<V>>, Owned<Node<V>>> {
        // SAFETY: `head` is non-null under `guard`.
        let h = unsafe { node_ref(head) };
        let mut delta = delta;
        delta.depth = h.depth.saturating_add(1);
        delta.num = h.num;
        delta.size = h.size;
        delta.base_range = h.base_range;
        delta.next.store(head, Ordering::Relaxed);
        sched::point();
        self.map.slot(pid).compare_exchange(head, delta, Ordering::AcqRel, Ordering::Acquire, guard).map_err(|e| e.new)
    }

    /// Follow-up after a data delta landed: consolidation by the configured rule.
    fn after_install(&self, pid: Pid, delta: Shared<'_, Node<V>>, path: &Path, guard: &Guard, help: u32) {
        // SAFETY: just installed, protected by `guard`.
        let d = unsafe { node_ref(delta) };
        if self.cfg.numbered_deltas {
            if d.num == 0 {
                self.consolidate_below(pid, d, path, guard, help);
            } else if self.crossed_size_limit(d, guard) {
                // Only number-0 deltas consolidate routinely, so a node that just over- or
                // underflowed is consolidated now to split or merge promptly.
                self.consolidate(pid, path, guard, help);
            }
        } else if d.depth as usize >= self.cfg.delta_threshold {
            self.consolidate(pid, path, guard, help);
        }
    }

    // ----- leaf operations -------------------------------------------------------------

    pub(crate) fn get(&self, key: &[u8]) -> Result<Option<V>, IndexError> {
        Ok(self.get_pinned(key, &epoch::pin())?.cloned())
    }

    /// [`get`](Self::get) under the caller's pin, borrowing the value.
    pub(crate) fn get_pinned<'g>(&self, key: &[u8], guard: &'g Guard) -> Result<Option<&'g V>, IndexError> {
        check_key(key)?;
        let mut path = Path::new();
        let (pid, head) = self.descend(key, 0, &mut path, guard, 0).expect("leaf level exists");
        // SAFETY: non-null head from `settle`, protected by `guard`.
        let h = unsafe { node_ref(head) };
        self.consolidate_for_reads(pid, h, &path, guard);
        // The chain as loaded: it answers as of its load even if just replaced.
        Ok(leaf_lookup(h, key, guard))
    }

    /// Consolidates the leaf chain `head` (of `pid`) that a read met with
    /// [`READ_CONSOLIDATE`] deltas or more, or with one delta at one such read in
    /// [`READ_CONSOLIDATE_ONE`]; returns whether it did. Writers consolidate at
    /// `delta_threshold`, so a leaf that stops being written keeps up to that many deltas,
    /// each a cache miss for every read of it: read-mostly leaves then pay for one
    /// consolidation instead. A single delta is left to most reads: a leaf being inserted
    /// into gets one after each insert, and consolidating it at every read that follows
    /// would copy the leaf once per insert; a leaf that is only read now is met again soon.
    #[inline]
    fn consolidate_for_reads(&self, pid: Pid, head: &Node<V>, path: &Path, guard: &Guard) -> bool {
        head.level == 0
            && (head.depth as usize >= READ_CONSOLIDATE || (head.depth == 1 && one_delta_turn()))
            && self.consolidate(pid, path, guard, 0)
    }

    /// Applies a write; returns whether it took effect (for upsert: whether the key was new).
    pub(crate) fn write(&self, key: &[u8], op: WriteOp<V>) -> Result<bool, IndexError> {
        check_key(key)?;
        let guard = &epoch::pin();
        let mut pos = self.seek(key, guard);
        self.write_at(&mut pos, key, op, 0, guard)
    }

    /// The leaf covering `key`: one descent, whose result the `_at` operations reuse.
    pub(crate) fn seek<'g>(&self, key: &[u8], guard: &'g Guard) -> LeafPos<'g, V> {
        let mut path = Path::new();
        let (pid, head) = self.descend(key, 0, &mut path, guard, 0).expect("leaf level exists");
        LeafPos { pid, head, path }
    }

    /// [`seek`](Self::seek), starting from `hint`'s leaf when that leaf covers `key` now
    /// (its current head is a leaf whose range holds `key`, with no structure change
    /// under way): what a descent would end with, since in a B-link tree the node whose
    /// range holds a key is the right one however it was reached.
    /// Also says whether the hint was used.
    pub(crate) fn seek_near<'g>(
        &self,
        key: &[u8],
        hint: Option<&LeafHint>,
        guard: &'g Guard,
    ) -> (LeafPos<'g, V>, bool) {
        if let Some(h) = hint {
            let head = self.load(h.pid, guard);
            if self.covers(head, key, guard) {
                return (LeafPos { pid: h.pid, head, path: h.path }, true);
            }
        }
        (self.seek(key, guard), false)
    }

    /// Whether `head` (null, or loaded under `guard`) is a leaf with no structure change
    /// under way (none, or a split already posted to the parent) whose range holds `key`.
    fn covers(&self, head: Shared<'_, Node<V>>, key: &[u8], guard: &Guard) -> bool {
        // SAFETY: loaded under `guard`; null is handled.
        let Some(h) = (unsafe { head.as_ref() }) else { return false };
        if h.level != 0 {
            return false;
        }
        let seen = self.inspect(h, guard);
        // A completed split leaves this node's range as the split delta says: what a
        // descent would find too (it only checks the posting, already done).
        let settled = match seen.smo.map(|s| &s.kind) {
            None => true,
            Some(Kind::Split { posted, .. }) => posted.load(Ordering::Acquire),
            Some(_) => false,
        };
        settled && (seen.surely_inside(prefix(key)) || !(seen.range.below(key) || seen.range.beyond(key)))
    }

    /// Whether `pos`'s leaf covers `key` (see [`covers`](Self::covers)).
    pub(crate) fn pos_covers(&self, pos: &LeafPos<'_, V>, key: &[u8], guard: &Guard) -> bool {
        self.covers(pos.head, key, guard)
    }

    /// Where `pos` is, for [`seek_near`](Self::seek_near).
    pub(crate) fn hint_of(pos: &LeafPos<'_, V>) -> LeafHint {
        LeafHint { pid: pos.pid, path: pos.path }
    }

    /// Brings `pos` up to date for `key`: re-validates its leaf from the mapping table (moving
    /// right past a split), or descends again when the leaf no longer covers `key`.
    /// Returns whether the leaf may have changed: `false` means the same head is still
    /// installed and it is not an SMO delta (with improvement (b), data deltas go in under
    /// those), so every answer at `pos` is as before (a head cannot be freed and reused
    /// while `guard` is pinned).
    pub(crate) fn reseek<'g>(&self, pos: &mut LeafPos<'g, V>, key: &[u8], guard: &'g Guard) -> bool {
        let before = (pos.pid, pos.head);
        match self.settle(pos.pid, 0, key, &pos.path, guard, 0) {
            Ok((p, h)) => (pos.pid, pos.head) = (p, h),
            Err(Restart) => {
                bump(&self.counters.restarts);
                *pos = self.seek(key, guard);
            }
        }
        // SAFETY: a non-null head from `settle`, protected by `guard`.
        (pos.pid, pos.head) != before || unsafe { node_ref(pos.head) }.is_smo()
    }

    /// Looks up ascending `keys` one after another, handing each key and its value to `f`:
    /// keys that fall in the leaf of the one before reuse that leaf (no descent). Each
    /// answer is the leaf as of its descent: a write made since may be missed, one made
    /// before it never is.
    pub(crate) fn get_sorted<'g, 'k>(
        &self,
        keys: impl Iterator<Item = &'k [u8]>,
        guard: &'g Guard,
        mut f: impl FnMut(&'k [u8], Option<&'g V>),
    ) {
        let mut pos: Option<LeafPos<'g, V>> = None;
        for key in keys {
            if !pos.as_ref().is_some_and(|p| self.covers(p.head, key, guard)) {
                pos = Some(self.seek(key, guard));
            }
            f(key, self.get_at(pos.as_ref().expect("set above"), key, guard));
        }
    }

    /// The value of `key` in the leaf at `pos` (which must cover `key`).
    pub(crate) fn get_at<'g>(&self, pos: &LeafPos<'g, V>, key: &[u8], guard: &'g Guard) -> Option<&'g V> {
        // SAFETY: `pos.head` is a non-null head from `settle`, protected by `guard`.
        leaf_lookup(unsafe { node_ref(pos.head) }, key, guard)
    }

    /// [`first_from`](Self::first_from) starting at the leaf of `pos` (which must cover
    /// `key`): no descent unless the answer lies in a leaf further right.
    /// Also says whether the answer came from that leaf alone (`false`: leaves further
    /// right were read, which a later look at this leaf does not cover).
    pub(crate) fn first_from_at<'g>(
        &self,
        pos: &LeafPos<'g, V>,
        key: &[u8],
        exclusive: bool,
        guard: &'g Guard,
    ) -> (Option<(&'g [u8], &'g V)>, bool) {
        // SAFETY: `pos.head` is a non-null head from `settle`, protected by `guard`.
        let h = unsafe { node_ref(pos.head) };
        let range = self.inspect(h, guard).range;
        if let Some(found) = leaf_first_from(h, range, key, exclusive, guard) {
            return (Some(found), true);
        }
        match range.high.as_deref() {
            // The rightmost leaf: nothing lies beyond it.
            None => (None, true),
            Some(high) => (self.first_from_beyond(key, exclusive, high, guard), false),
        }
    }

    /// [`write`](Self::write) at the leaf of `pos` (which must cover `key`); `pos` follows
    /// the leaf if the write had to re-validate it. `absent_at`: the address of a head of
    /// this leaf whose chain the caller found without `key` (0: none), so that a write
    /// installed on that very head skips its own lookup.
    pub(crate) fn write_at<'g>(
        &self,
        pos: &mut LeafPos<'g, V>,
        key: &[u8],
        op: WriteOp<V>,
        absent_at: usize,
        guard: &'g Guard,
    ) -> Result<bool, IndexError> {
        check_key(key)?;
        let (pid, head, path) = (&mut pos.pid, &mut pos.head, &mut pos.path);
        let stores = !matches!(op, WriteOp::Delete);
        let (val, need) = match op {
            WriteOp::Upsert(v) => (Some(v), None),
            WriteOp::Insert(v) => (Some(v), Some(false)),
            WriteOp::Update(v) => (Some(v), Some(true)),
            WriteOp::Delete => (None, Some(true)),
        };
        let mut delta = Some(Owned::new(Node::delta(
            0,
            match val {
                Some(v) => Kind::Upsert { key: key.into(), val: v },
                None => Kind::Delete { key: key.into() },
            },
        )));
        loop {
            match self.insert_point(*pid, *head, guard) {
                None => {
                    // A consolidation froze the chain under the SMO run: help it finish.
                    self.consolidate(*pid, path, guard, 0);
                }
                Some(ip) => {
                    // Decide after fixing the insert point: the CAS then proves no delta
                    // landed in between, so the existence check is exact. The caller's
                    // check stands in for it when the CAS expects the head it was made on
                    // (no SMO run above the insert point; nodes are not reused while
                    // `guard` pins them, so the address names that head).
                    let known_absent = absent_at != 0 && absent_at == head.as_raw() as usize && ip.expected == *head;
                    // SAFETY: non-null head under `guard`.
                    let exists = !known_absent && leaf_lookup(unsafe { node_ref(*head) }, key, guard).is_some();
                    if need.is_some_and(|n| n != exists) {
                        return Ok(false);
                    }
                    // The node's entry count changes by (present after) - (present before).
                    let grow = stores as i32 - exists as i32;
                    match self.install(&ip, delta.take().expect("delta"), grow, guard) {
                        Ok(d) => {
                            self.after_install(*pid, d, path, guard, 0);
                            return Ok(need.is_some() || !exists);
                        }
                        Err(d) => delta = Some(d),
                    }
                }
            }
            match self.settle(*pid, 0, key, path, guard, 0) {
                Ok((p, h)) => (*pid, *head) = (p, h),
                Err(Restart) => {
                    bump(&self.counters.restarts);
                    (*pid, *head) = self.descend(key, 0, path, guard, 0).expect("leaf level exists");
                }
            }
        }
    }

    /// Applies a batch sorted by key (unique keys): `(key, Some(v))` inserts `v` where the
    /// key is absent (`added[i]` says so), `(key, None)` deletes the key. Each leaf the batch
    /// covers is rewritten once, as a consolidation with the batch's entries merged in (one
    /// slot CAS, then the split or merge the new size calls for), instead of a delta and a
    /// descent per key: a cache loads and evicts key ranges of a hundred records or more at
    /// a time. A leaf with a structure change under way, or a lost CAS, takes the key
    /// through [`write`](Self::write) instead, so every call makes progress.
    pub(crate) fn apply_batch(&self, batch: &[(&[u8], Option<V>)], added: &mut [bool]) -> Result<(), IndexError> {
        debug_assert_eq!(batch.len(), added.len());
        debug_assert!(batch.windows(2).all(|w| w[0].0 < w[1].0), "a batch is sorted and unique");
        for (k, _) in batch {
            check_key(k)?;
        }
        let guard = &epoch::pin();
        let mut at = 0;
        while at < batch.len() {
            if let Some(n) = self.rebase_leaf(&batch[at..], &mut added[at..], guard) {
                at += n;
                continue;
            }
            let (k, v) = &batch[at];
            added[at] = match v {
                Some(v) => self.write(k, WriteOp::Insert(v.clone()))?,
                None => {
                    self.write(k, WriteOp::Delete)?;
                    false
                }
            };
            at += 1;
        }
        Ok(())
    }

    /// [`apply_batch`](Self::apply_batch) on the leaf covering `batch[0]`'s key: how many
    /// entries it took (at least one), or `None` if the leaf has an SMO delta or the CAS
    /// lost.
    fn rebase_leaf(&self, batch: &[(&[u8], Option<V>)], added: &mut [bool], guard: &Guard) -> Option<usize> {
        let mut path = Path::new();
        let (pid, head) = self.descend(batch[0].0, 0, &mut path, guard, 0)?;
        // SAFETY: `descend` returns a non-null head protected by `guard`.
        let h = unsafe { node_ref(head) };
        let Inspected { smo, range, .. } = self.inspect(h, guard);
        if smo.is_some() || range.beyond(batch[0].0) {
            return None;
        }
        // At most twice a full leaf, so one split brings both halves under the maximum.
        let room = (2 * self.cfg.leaf_max).saturating_sub(h.size as usize).max(1);
        let n = batch.partition_point(|(k, _)| !range.beyond(k)).min(room);
        let new_range = Arc::clone(&chain_base(h, guard).as_base().expect("base").range);
        let base = consolidate_leaf_with(h, range, guard, new_range, &batch[..n], &mut added[..n]);
        let new = Owned::new(Node::base(0, base));
        sched::point();
        match self.map.slot(pid).compare_exchange(head, new, Ordering::AcqRel, Ordering::Acquire, guard) {
            Ok(nb) => {
                bump(&self.counters.consolidations);
                // SAFETY: our CAS unlinked `head`; only the CAS winner retires a chain.
                unsafe { retire_chain(head, &self.map, guard) };
                self.after_consolidation(pid, nb, &path, guard, 0, None);
                // SAFETY: installed by our CAS, under `guard`.
                if unsafe { node_ref(nb) }.size as usize > self.cfg.leaf_max {
                    // Split: the left half's base still holds the right half's keys, behind
                    // the split delta, until it is consolidated. A loaded range that is
                    // only read kept them for as long as it stayed in memory. (A split by
                    // writes is left as it was: the next writes consolidate it.)
                    self.consolidate(pid, &path, guard, 0);
                }
                Some(n)
            }
            Err(_) => {
                added[..n].fill(false);
                None
            }
        }
    }

    // ----- scans -----------------------------------------------------------------------

    /// A consolidated copy of the leaf covering `key`, its high key and its right sibling.
    pub(crate) fn leaf_snapshot(
        &self,
        key: &[u8],
        guard: &Guard,
        hi: Option<&[u8]>,
        out: &mut Vec<(Box<[u8]>, V)>,
    ) -> Option<Box<[u8]>> {
        let mut path = Path::new();
        let (_, head) = self.descend(key, 0, &mut path, guard, 0).expect("leaf level exists");
        // SAFETY: non-null head from `descend`.
        let h = unsafe { node_ref(head) };
        let range = self.inspect(h, guard).range;
        for (k, v) in leaf_entries(h, range, guard) {
            // The leaf may have absorbed its left part since the previous step: skip what
            // was already returned.
            if k < key {
                continue;
            }
            if hi.is_some_and(|e| k >= e) {
                break;
            }
            out.push((k.into(), v.clone()));
        }
        range.high.clone()
    }

    /// Calls `f` on every record with `start <= key < end` (no upper bound when `end` is
    /// `None`), in key order, until it returns false: one descent, then each leaf entered
    /// from the previous one's high key (exactly the right sibling's low key, even if that
    /// sibling split or merged meanwhile). Keys and values are borrowed from the nodes,
    /// valid while `guard` stays pinned; nothing is copied or allocated.
    pub(crate) fn walk<'g>(
        &self,
        start: &[u8],
        end: Option<&[u8]>,
        guard: &'g Guard,
        mut leaves: Option<&mut Vec<(Pid, usize, usize)>>,
        mut f: impl FnMut(&'g [u8], &'g V) -> bool,
    ) {
        let mut at = start;
        loop {
            if end.is_some_and(|e| at >= e) {
                return;
            }
            let mut path = Path::new();
            let (mut pid, mut head) = self.descend(at, 0, &mut path, guard, 0).expect("leaf level exists");
            // SAFETY: non-null head from `descend`.
            if self.consolidate_for_reads(pid, unsafe { node_ref(head) }, &path, guard) {
                // Walk the new base (its pointer is what the membership check notes).
                let (p2, h2) = self.descend(at, 0, &mut path, guard, 0).expect("leaf level exists");
                (pid, head) = (p2, h2);
            }
            if let Some(l) = leaves.as_deref_mut() {
                l.push((pid, head.as_raw() as usize, self.data_head(head, guard)));
            }
            // SAFETY: non-null head from `descend`.
            let h = unsafe { node_ref(head) };
            let range = self.inspect(h, guard).range;
            // Bounded by `at`: the leaf may have absorbed its left part since the previous
            // step, and what lies below `at` was visited already.
            let stopped = leaf_walk_from(h, range, at, false, guard, |k, v| end.is_none_or(|e| k < e) && f(k, v));
            if stopped {
                return;
            }
            // The range lives as long as the chain reporting it, so under `guard`.
            match range.high.as_deref() {
                Some(high) => at = high,
                None => return,
            }
        }
    }

    /// Whether every leaf a [`walk`](Self::walk) recorded still has the chain it had: then
    /// none of them changed since (a write, a consolidation, a split or a merge installs a
    /// new head), and a walk now would visit the same records. The caller stayed pinned
    /// since the walk, so no head it saw was freed and reused.
    pub(crate) fn leaves_unchanged(&self, leaves: &[(Pid, usize, usize)], guard: &Guard) -> bool {
        leaves.iter().all(|&(pid, head, data)| {
            let now = self.load(pid, guard);
            now.as_raw() as usize == head && self.data_head(now, guard) == data
        })
    }

    /// Where the chain's data deltas begin, below the structure-change deltas that (b)
    /// keeps at its head: a write installs its delta there (see `insert_point`), leaving
    /// the head as it was.
    fn data_head(&self, head: Shared<'_, Node<V>>, guard: &Guard) -> usize {
        // SAFETY: `head` is a non-null chain head loaded under `guard`.
        let mut n = unsafe { node_ref(head) };
        if !self.cfg.split_delta_at_head || !n.is_smo() {
            return head.as_raw() as usize;
        }
        loop {
            // SAFETY: SMO deltas always have a non-null next, under `guard`.
            let next = unsafe { node_ref(n.next(guard)) };
            if !next.is_smo() {
                return n.next.load(Ordering::Acquire, guard).as_raw() as usize;
            }
            n = next;
        }
    }

    /// See [`BwTree::tail_low`](super::BwTree::tail_low).
    pub(crate) fn tail_low(&self, key: &[u8], end: Option<&[u8]>, n: usize, guard: &Guard) -> Vec<u8> {
        let mut path = Path::new();
        let (_, head) = self.descend(key, 0, &mut path, guard, 0).expect("leaf level exists");
        // SAFETY: non-null head from `descend`.
        let h = unsafe { node_ref(head) };
        let range = self.inspect(h, guard).range;
        if let Some(b) = h.as_base() {
            // A consolidated leaf (no deltas, its records all in its range): the key `n`
            // below `end` by index, where the walk below compared every key of the leaf (a
            // third of a reverse pop).
            let upto = match end {
                Some(e) => match b.keys.search(e) {
                    Ok(i) | Err(i) => i,
                },
                None => b.len(),
            };
            return if upto >= n { b.keys.get(upto - n).to_vec() } else { range.low.to_vec() };
        }
        // The last `n` keys below `end`, in a ring.
        let mut ring: Vec<&[u8]> = Vec::with_capacity(n);
        let mut next = 0;
        leaf_walk_from(h, range, &range.low, false, guard, |k, _| {
            if end.is_some_and(|e| k >= e) {
                return false;
            }
            if ring.len() < n {
                ring.push(k);
            } else {
                ring[next] = k;
                next = (next + 1) % n;
            }
            true
        });
        match ring.len() == n {
            true => ring[next].to_vec(),
            false => range.low.to_vec(),
        }
    }

    /// The first record whose key is at or after `key` (strictly after when `exclusive`),
    /// walking right across leaves that hold nothing in range. The key and value are
    /// borrowed from the tree's nodes, valid while `guard` stays pinned.
    pub(crate) fn first_from<'g>(&self, key: &[u8], exclusive: bool, guard: &'g Guard) -> Option<(&'g [u8], &'g V)> {
        self.first_from_beyond(key, exclusive, key, guard)
    }

    /// [`first_from`](Self::first_from), starting the walk at the leaf covering `at`.
    fn first_from_beyond<'g: 'a, 'a>(
        &self,
        key: &[u8],
        exclusive: bool,
        mut at: &'a [u8],
        guard: &'g Guard,
    ) -> Option<(&'g [u8], &'g V)> {
        loop {
            let mut path = Path::new();
            let (_, head) = self.descend(at, 0, &mut path, guard, 0).expect("leaf level exists");
            // SAFETY: non-null head from `descend`.
            let h = unsafe { node_ref(head) };
            let range = self.inspect(h, guard).range;
            // Bounded by the caller's `key`, not `at`: a leaf reached by moving right may have
            // absorbed its left neighbour meanwhile, and records below `key` are not wanted.
            if let Some(found) = leaf_first_from(h, range, key, exclusive, guard) {
                return Some(found);
            }
            // The range lives as long as the chain reporting it, so under `guard`.
            at = range.high.as_deref()?;
        }
    }

    /// A line per node, level by level from the root (quiescent trees only; for tests).
    pub(crate) fn dump(&self) -> String {
        let guard = &epoch::pin();
        let mut out = String::new();
        let mut first = self.root_pid();
        loop {
            let mut pid = first;
            let mut next_first = None;
            while pid != NO_PID {
                // SAFETY: loaded under `guard`.
                let Some(h) = (unsafe { self.load(pid, guard).as_ref() }) else { break };
                let Inspected { smo, range, .. } = self.inspect(h, guard);
                let kinds: Vec<&str> = {
                    let mut v = Vec::new();
                    let mut n = h;
                    loop {
                        v.push(match &n.kind {
                            Kind::Base(_) => "base",
                            Kind::Upsert { .. } => "upsert",
                            Kind::Delete { .. } => "delete",
                            Kind::IndexInsert { .. } => "idx-ins",
                            Kind::IndexDelete { .. } => "idx-del",
                            Kind::Split { .. } => "split",
                            Kind::Merge { .. } => "merge",
                            Kind::Remove { .. } => "remove",
                        });
                        if n.is_base() {
                            break;
                        }
                        // SAFETY: deltas have a non-null next.
                        n = unsafe { node_ref(n.next(guard)) };
                    }
                    v
                };
                let size = if h.level == 0 {
                    leaf_entries(h, range, guard).len()
                } else {
                    inner_entries(h, range, guard).len()
                };
                if h.level > 0 && next_first.is_none() {
                    next_first = Some(inner_route(h, &range.low, guard));
                }
                out.push_str(&format!(
                    "L{} pid {pid} [{:?}, {:?}) size {size} smo {} chain {kinds:?}\n",
                    h.level,
                    String::from_utf8_lossy(&range.low),
                    range.high.as_ref().map(|k| String::from_utf8_lossy(k).into_owned()),
                    smo.is_some()
                ));
                pid = range.right;
            }
            match next_first {
                Some(p) => first = p,
                None => return out,
            }
        }
    }

    pub(crate) fn stats(&self) -> BwTreeStats {
        let c = &self.counters;
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let guard = epoch::pin();
        let root = self.load(self.root_pid(), &guard);
        // SAFETY: loaded under `guard`.
        let height = unsafe { root.as_ref() }.map_or(0, |r| r.level as usize + 1);
        BwTreeStats {
            consolidations: g(&c.consolidations),
            failed_consolidations: g(&c.failed_consolidations),
            splits: g(&c.splits),
            merges: g(&c.merges),
            aborted_merges: g(&c.aborted_merges),
            root_splits: g(&c.root_splits),
            root_collapses: g(&c.root_collapses),
            helped_splits: g(&c.helped_splits),
            helped_merges: g(&c.helped_merges),
            restarts: g(&c.restarts),
            height,
            pages_allocated: self.map.allocated(),
            mapping_table_bytes: self.map.bytes(),
        }
    }
}

/// Deltas on a leaf chain past which a read consolidates it (see
/// `Tree::consolidate_for_reads`).
const READ_CONSOLIDATE: usize = 2;

/// One in this many reads that meet a leaf chain of a single delta consolidates it.
const READ_CONSOLIDATE_ONE: u32 = 8;

/// Whether this read is the thread's turn to consolidate a chain of one delta (every
/// [`READ_CONSOLIDATE_ONE`]-th such read of the thread).
fn one_delta_turn() -> bool {
    thread_local! {
        static MET: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
    }
    MET.with(|m| {
        let n = m.get().wrapping_add(1);
        m.set(n);
        n % READ_CONSOLIDATE_ONE == 0
    })
}

fn check_key(key: &[u8]) -> Result<(), IndexError> {
    if key.len() > MAX_KEY_LEN {
        return Err(IndexError::KeyTooLong { len: key.len(), max: MAX_KEY_LEN });
    }
    Ok(())
}

mod smo;
#[cfg(test)]
mod tests;
