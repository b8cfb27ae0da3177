//! The mapping table: page id -> current head of that page's delta chain.
//!
//! Nodes never point at each other physically (except a merge delta at the base it absorbed);
//! they name page ids, and every structural change is one CAS on a slot here. The table is
//! two-level (a directory of lazily allocated segments) so it grows with the tree instead of
//! being a fixed array that can run out. Segment `k` holds `FIRST_SEG << k` slots, so a
//! small tree's table is a few KiB: fixed segments of 16K slots and a directory of 16K
//! entries were 256 KiB zeroed for every tree, a short-lived handle's open building three.

use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::Arc;

use crossbeam_epoch::{Atomic, Guard, Shared};
use crossbeam_queue::SegQueue;

use super::node::{destroy_chain_now, Kind, Node, TAG_CLAIMED};
pub(crate) use super::node::{Pid, NO_PID};

/// Slots of segment 0 (a power of two); each later segment doubles.
const FIRST_BITS: u32 = 8;
const FIRST_SEG: u64 = 1 << FIRST_BITS;
/// The most pages a tree can have (2^28); allocation beyond it fails and the SMO is skipped.
pub(crate) const MAX_PIDS: u64 = 1 << 28;
/// Segments enough for `MAX_PIDS`: those before segment `k` hold `FIRST_SEG * (2^k - 1)`.
const SEGMENTS: usize = (64 - ((MAX_PIDS - 1) / FIRST_SEG + 1).leading_zeros()) as usize;

/// The segment of `pid` and its slot in it.
#[inline]
fn place(pid: Pid) -> (usize, usize) {
    let k = 63 - ((pid >> FIRST_BITS) + 1).leading_zeros();
    (k as usize, (pid + FIRST_SEG - (FIRST_SEG << k)) as usize)
}

/// The slots of segment `k`.
const fn seg_len(k: usize) -> usize {
    (FIRST_SEG as usize) << k
}

struct Segment<V> {
    slots: Box<[Atomic<Node<V>>]>,
}

pub(crate) struct MappingTable<V> {
    dir: [AtomicPtr<Segment<V>>; SEGMENTS],
    next_pid: AtomicU64,
    /// Page ids whose node was merged away, returned here only after an epoch has passed,
    /// so no thread that could still hold the old id sees it reused.
    free: Arc<SegQueue<Pid>>,
}

impl<V> MappingTable<V> {
    pub(crate) fn new() -> Self {
        let dir = std::array::from_fn(|_| AtomicPtr::new(std::ptr::null_mut()));
        MappingTable { dir, next_pid: AtomicU64::new(0), free: Arc::new(SegQueue::new()) }
    }

    /// The slot of an allocated page id.
    #[inline]
    pub(crate) fn slot(&self, pid: Pid) -> &Atomic<Node<V>> {
        let (k, i) = place(pid);
        let seg = self.dir[k].load(Ordering::Acquire);
        debug_assert!(!seg.is_null(), "slot of an unallocated pid {pid}");
        // SAFETY: a pid is only handed out after its segment was installed (see `alloc`), and
        // segments are freed only in `Drop`, which has exclusive access.
        unsafe { &(*seg).slots[i] }
    }

    /// Allocates a page id whose slot is null. `None` when the table is full.
    pub(crate) fn alloc(&self) -> Option<Pid> {
        if let Some(pid) = self.free.pop() {
            return Some(pid);
        }
        let pid = self.next_pid.fetch_add(1, Ordering::Relaxed);
        if pid >= MAX_PIDS {
            self.next_pid.store(MAX_PIDS, Ordering::Relaxed);
            return None;
        }
        let (k, _) = place(pid);
        let entry = &self.dir[k];
        if entry.load(Ordering::Acquire).is_null() {
            let seg = Box::into_raw(Box::new(Segment { slots: (0..seg_len(k)).map(|_| Atomic::null()).collect() }));
            if entry.compare_exchange(std::ptr::null_mut(), seg, Ordering::AcqRel, Ordering::Acquire).is_err() {
                // SAFETY: `seg` was never published; another thread installed its own.
                drop(unsafe { Box::from_raw(seg) });
            }
        }
        Some(pid)
    }

    /// Returns a pid that was allocated but never made reachable: it can be reused at once.
    pub(crate) fn free_unpublished(&self, pid: Pid) {
        self.free.push(pid);
    }

    /// Returns a pid whose node was unlinked: reused only once current readers are gone.
    pub(crate) fn free_deferred(&self, pid: Pid, guard: &Guard) {
        let free = Arc::clone(&self.free);
        guard.defer(move || free.push(pid));
    }

    /// Bytes of the directory and the segments allocated.
    pub(crate) fn bytes(&self) -> u64 {
        let slots: usize = (0..SEGMENTS).filter(|&k| !self.dir[k].load(Ordering::Relaxed).is_null()).map(seg_len).sum();
        (std::mem::size_of::<Self>() + slots * std::mem::size_of::<Atomic<Node<V>>>()) as u64
    }

    /// Number of pids ever handed out (the high-water mark of the table).
    pub(crate) fn allocated(&self) -> u64 {
        self.next_pid.load(Ordering::Relaxed).min(MAX_PIDS)
    }
}

impl<V> Drop for MappingTable<V> {
    fn drop(&mut self) {
        // Only the slots of pids ever handed out can hold a chain: a small tree's drop
        // visits a few, not the whole first segment and directory (two of those were a
        // sixth of a short-lived handle's open and close).
        let allocated = self.allocated() as usize;
        let mut first = 0;
        for (k, entry) in self.dir.iter().enumerate() {
            let seg = entry.load(Ordering::Relaxed);
            let used = allocated.saturating_sub(first).min(seg_len(k));
            first += seg_len(k);
            if seg.is_null() {
                continue;
            }
            // SAFETY: `drop` has exclusive access; the segment came from `Box::into_raw`.
            let seg = unsafe { Box::from_raw(seg) };
            for slot in &seg.slots[..used] {
                // SAFETY: no other thread can reach the tree any more; each chain is owned by
                // exactly one slot (a merge delta does not own the base it points at).
                unsafe { destroy_chain_now(slot) };
            }
        }
    }
}

/// Defers destruction of a chain that was just unlinked from its slot (or from a numbered
/// delta's `next`), including what its merge deltas own.
///
/// # Safety
/// `head` must have been made unreachable for new readers by the caller's successful CAS,
/// and no other thread may retire the same chain.
pub(crate) unsafe fn retire_chain<V>(head: Shared<'_, Node<V>>, map: &MappingTable<V>, guard: &Guard) {
    let mut cur = head.with_tag(0);
    while !cur.is_null() {
        // SAFETY: nodes of the chain stay valid until the deferred destructions run.
        let node = unsafe { cur.deref() };
        let next = if node.pending.load(Ordering::Acquire) { claim_next(node, guard) } else { node.next(guard) };
        if let Kind::Merge { r_pid, .. } = &node.kind {
            // The absorbed sibling's slot still holds Remove -> base; both die with the merge.
            let slot = map.slot(*r_pid);
            let removed = slot.swap(Shared::null(), Ordering::AcqRel, guard);
            if !removed.is_null() {
                // SAFETY: the slot held the only reference besides this merge delta's.
                let base = unsafe { removed.deref() }.next(guard);
                // SAFETY: both were unlinked by the swap (the base is reachable only through
                // the Remove delta); readers that loaded them are pinned.
                unsafe {
                    guard.defer_destroy(removed);
                    guard.defer_destroy(base);
                }
            }
            map.free_deferred(*r_pid, guard);
        }
        let is_base = node.is_base();
        // SAFETY: unlinked by the caller; destroyed only after current readers unpin.
        unsafe { guard.defer_destroy(cur) };
        if is_base {
            break;
        }
        cur = next;
    }
}

/// Takes ownership of a pending numbered delta's `next` (see `TAG_CLAIMED`).
fn claim_next<'g, V>(node: &Node<V>, guard: &'g Guard) -> Shared<'g, Node<V>> {
    loop {
        super::sched::point();
        let v = node.next.load(Ordering::Acquire, guard);
        if v.tag() & TAG_CLAIMED != 0 {
            return v.with_tag(0);
        }
        if node
            .next
            .compare_exchange(v, v.with_tag(v.tag() | TAG_CLAIMED), Ordering::AcqRel, Ordering::Acquire, guard)
            .is_ok()
        {
            return v.with_tag(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pid_has_its_own_slot_within_the_segments() {
        assert_eq!(place(0), (0, 0));
        assert_eq!(place(FIRST_SEG - 1), (0, FIRST_SEG as usize - 1));
        assert_eq!(place(FIRST_SEG), (1, 0));
        assert_eq!(place(3 * FIRST_SEG - 1), (1, 2 * FIRST_SEG as usize - 1));
        assert_eq!(place(3 * FIRST_SEG), (2, 0));
        let (k, i) = place(MAX_PIDS - 1);
        assert!(k < SEGMENTS && i < seg_len(k), "the last pid is at ({k}, {i})");
        // Consecutive pids fill each segment in order, then start the next one.
        let mut at = (0, 0);
        for pid in 1..40 * FIRST_SEG {
            let next = place(pid);
            let expected = if at.1 + 1 == seg_len(at.0) { (at.0 + 1, 0) } else { (at.0, at.1 + 1) };
            assert_eq!(next, expected, "pid {pid}");
            at = next;
        }
    }

    #[test]
    fn a_table_of_a_few_pages_is_small_and_grows_by_segments() {
        let map: MappingTable<u64> = MappingTable::new();
        let empty = map.bytes();
        assert!(empty < 1024, "an empty table takes {empty} bytes");
        let pids: Vec<Pid> = (0..2 * FIRST_SEG).map(|_| map.alloc().expect("room")).collect();
        assert_eq!(pids, (0..2 * FIRST_SEG).collect::<Vec<_>>());
        let slot = std::mem::size_of::<Atomic<Node<u64>>>() as u64;
        assert_eq!(map.bytes(), empty + 3 * FIRST_SEG * slot, "segments 0 and 1");
        for &pid in &pids {
            let guard = &crossbeam_epoch::pin();
            assert!(map.slot(pid).load(Ordering::Acquire, guard).is_null());
        }
    }
}
