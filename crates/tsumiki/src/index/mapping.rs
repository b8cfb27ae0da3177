//! The mapping table: page id -> current head of that page's delta chain.
//!
//! Nodes never point at each other physically (except a merge delta at the base it absorbed);
//! they name page ids, and every structural change is one CAS on a slot here. The table is
//! two-level (a directory of lazily allocated segments) so it grows with the tree instead of
//! being a fixed array that can run out.

use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::Arc;

use crossbeam_epoch::{Atomic, Guard};
use crossbeam_queue::SegQueue;

use super::node::{destroy_chain_now, Node};

/// A page id: an index into the mapping table.
pub(crate) type Pid = u64;
/// "No page": the right sibling of the rightmost node of a level.
pub(crate) const NO_PID: Pid = u64::MAX;

const SEG_BITS: u32 = 14;
const SEG_LEN: usize = 1 << SEG_BITS;
const DIR_LEN: usize = 1 << 14;
/// The most pages a tree can have (2^28); allocation beyond it fails and the SMO is skipped.
pub(crate) const MAX_PIDS: u64 = (SEG_LEN * DIR_LEN) as u64;

struct Segment<V> {
    slots: Box<[Atomic<Node<V>>]>,
}

pub(crate) struct MappingTable<V> {
    dir: Box<[AtomicPtr<Segment<V>>]>,
    next_pid: AtomicU64,
    /// Page ids whose node was merged away, returned here only after an epoch has passed,
    /// so no thread that could still hold the old id sees it reused.
    free: Arc<SegQueue<Pid>>,
}

impl<V> MappingTable<V> {
    pub(crate) fn new() -> Self {
        let dir = (0..DIR_LEN).map(|_| AtomicPtr::new(std::ptr::null_mut())).collect();
        MappingTable { dir, next_pid: AtomicU64::new(0), free: Arc::new(SegQueue::new()) }
    }

    /// The slot of an allocated page id.
    #[inline]
    pub(crate) fn slot(&self, pid: Pid) -> &Atomic<Node<V>> {
        let seg = self.dir[(pid >> SEG_BITS) as usize].load(Ordering::Acquire);
        debug_assert!(!seg.is_null(), "slot of an unallocated pid {pid}");
        // SAFETY: a pid is only handed out after its segment was installed (see `alloc`), and
        // segments are freed only in `Drop`, which has exclusive access.
        unsafe { &(*seg).slots[(pid as usize) & (SEG_LEN - 1)] }
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
        let entry = &self.dir[(pid >> SEG_BITS) as usize];
        if entry.load(Ordering::Acquire).is_null() {
            let seg = Box::into_raw(Box::new(Segment { slots: (0..SEG_LEN).map(|_| Atomic::null()).collect() }));
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
        let segments = self.dir.iter().filter(|e| !e.load(Ordering::Relaxed).is_null()).count();
        let slot = std::mem::size_of::<Atomic<Node<V>>>();
        (DIR_LEN * std::mem::size_of::<AtomicPtr<Segment<V>>>() + segments * SEG_LEN * slot) as u64
    }

    /// Number of pids ever handed out (the high-water mark of the table).
    pub(crate) fn allocated(&self) -> u64 {
        self.next_pid.load(Ordering::Relaxed).min(MAX_PIDS)
    }
}

impl<V> Drop for MappingTable<V> {
    fn drop(&mut self) {
        for entry in self.dir.iter() {
            let seg = entry.load(Ordering::Relaxed);
            if seg.is_null() {
                continue;
            }
            // SAFETY: `drop` has exclusive access; the segment came from `Box::into_raw`.
            let seg = unsafe { Box::from_raw(seg) };
            for slot in seg.slots.iter() {
                // SAFETY: no other thread can reach the tree any more; each chain is owned by
                // exactly one slot (a merge delta does not own the base it points at).
                unsafe { destroy_chain_now(slot) };
            }
        }
    }
}
