//! The value of a single-version record (TicToc, Silo, 2PL), and the allocation that holds
//! a record together with its first value.
//!
//! A read that finds a record in a leaf waits for the record's line, then, for a value over
//! [`INLINE_MAX`] bytes, for the value's buffer somewhere else in memory: two dependent
//! misses. A record made for a known value (an insert, a load from the pages, recovery) is
//! allocated with room for that value right after the record, its *tail*
//! ([`alloc_record`]). The first value stored that fits goes there, so a read asks for the
//! record and its value at once. The tail is written once, before the state that names it
//! is published, and never again: a later value goes to a heap buffer as before, so no
//! writer overwrites bytes a reader may be copying.

use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicU64, AtomicUsize, Ordering};

use crossbeam_epoch::{Atomic, Guard};

use super::{snapshot, Protocol};

/// The value of a single-version record. A value of up to `INLINE_MAX` (8) bytes sits in the
/// cell itself, so the record is its only allocation (a 4 + 8-byte record costs one 32-byte
/// block instead of two); a longer one is in the record's tail (see the module) or a pointer
/// to an immutable buffer, swapped whole by a writer and freed through the epoch. The buffer
/// is one allocation holding its length and the bytes (`HeapBuf`).
///
/// Writers hold the record's exclusive lock. Optimistic readers may see inline bytes torn
/// by a writer: they re-check the record's word after `ValueCell::load_into`, which ends
/// with an acquire fence, and `store` issues a release fence before it writes inline bytes,
/// so a reader that saw any of them also sees the writer's lock (the seqlock argument).
pub struct ValueCell {
    /// `UNWRITTEN`, `DELETED`, `REMOVED`, `INLINE | len << 3` (the bytes are in `inline`),
    /// a heap buffer's exposed address (`HeapBuf`, 8-aligned, so its low three bits are 0), or
    /// the record's tail `| FRESH` (nothing stored yet, the tail unused), `| STAGED` (the
    /// same, the tail its creator's, who may have staged its value there) or `| EMBEDDED`
    /// (the value is in the tail); `| TAILED` in every state of a record with a tail.
    state: AtomicUsize,
    inline: AtomicU64,
    /// Versions kept for open snapshots, newest first (null when none: see [`snapshot`]).
    pub(super) kept: Atomic<snapshot::Kept>,
}

/// How much of a value's buffer [`ValueCell::prefetch`] asks for (a 150-byte value and its
/// length; a longer one is copied at memory speed).
const PREFETCH_BYTES: usize = 256;

/// The longest value kept inline in its record.
pub(crate) const INLINE_MAX: usize = 8;
/// Absent, and no commit ever stored a value here: a placeholder whose creator has not
/// committed, or the sentinel. Kept apart from `DELETED` because a record's timestamps
/// can move without a commit (an unlink hands it a gap, a reader extends it), so they
/// cannot tell whether one did ([`super::Protocol::is_fresh`]). `FRESH` is the same with a tail.
const UNWRITTEN: usize = 0;
const REMOVED: usize = 1;
const INLINE: usize = 2;
/// Absent, stored so by a commit (a delete).
const DELETED: usize = 3;
/// The value is in the record's tail, whose header's address is the rest of the state.
const EMBEDDED: usize = 4;
/// Unwritten, and the record's tail (the rest of the state) is free for the first value.
const FRESH: usize = 5;
/// As `FRESH`, for a record an insert made ([`alloc_new`]): the tail belongs to the
/// transaction that created the record, which stages its value there before it commits
/// ([`ValueCell::stage`]) and publishes it in place. Another writer's value goes to the
/// heap, so staged bytes are never overwritten by anyone else.
const STAGED: usize = 6;
const TAG_MASK: usize = 7;
/// The record was allocated with a tail ([`free_record`] needs its layout). Set before
/// the record is published and carried by every later state; user-space addresses never
/// have this bit.
const TAILED: usize = 1 << 63;

/// A state word that names a heap buffer.
#[inline]
fn is_heap(state: usize) -> bool {
    state != UNWRITTEN && state & TAG_MASK == 0
}

/// The header before a tail's bytes.
#[repr(C)]
struct TailHeader {
    /// Bytes after the header.
    cap: u32,
    /// Bytes of the value stored there (written once, before `EMBEDDED` is published).
    len: u32,
}

/// A value's buffer off the record, for a value that neither fits inline nor in the tail:
/// one allocation holding the length (a `usize`), then the bytes, in a slab block (see
/// [`crate::slab`]; the global heap past its biggest class). Immutable once published; a
/// writer swaps the state to another buffer and frees this one through the epoch.
struct HeapBuf;

impl HeapBuf {
    const HEADER: usize = std::mem::size_of::<usize>();

    fn layout(len: usize) -> Layout {
        Layout::from_size_align(Self::HEADER + len, 8).expect("a value of at most MAX_VALUE_LEN bytes")
    }

    /// A buffer holding `v`; returns its state word (the exposed address).
    fn store(v: &[u8]) -> usize {
        let p = crate::slab::alloc(Self::layout(v.len())).as_ptr();
        // SAFETY: a fresh block of `HEADER + v.len()` bytes, 8-aligned; `v` does not overlap it.
        unsafe {
            p.cast::<usize>().write(v.len());
            std::ptr::copy_nonoverlapping(v.as_ptr(), p.add(Self::HEADER), v.len());
        }
        p.expose_provenance()
    }

    /// The bytes of the buffer a heap state names.
    ///
    /// # Safety
    /// `s` came from [`HeapBuf::store`] and the buffer is not freed for `'a` (the caller is
    /// pinned, or owns the record).
    unsafe fn bytes<'a>(s: usize) -> &'a [u8] {
        let p = std::ptr::with_exposed_provenance::<u8>(s);
        // SAFETY: the caller's contract: a live buffer, its length then its bytes, all
        // written before the state naming it was published.
        unsafe { std::slice::from_raw_parts(p.add(Self::HEADER), p.cast::<usize>().read()) }
    }

    /// Frees the buffer a heap state names.
    ///
    /// # Safety
    /// `s` came from [`HeapBuf::store`], is freed once, and no one can read it any more.
    unsafe fn free(s: usize) {
        let p = std::ptr::with_exposed_provenance_mut::<u8>(s);
        // SAFETY: a live buffer (the caller's contract) whose header holds its length.
        unsafe {
            let len = p.cast::<usize>().read();
            crate::slab::dealloc(NonNull::new_unchecked(p), Self::layout(len));
        }
    }

    /// Frees the buffer once every thread pinned now has unpinned.
    ///
    /// # Safety
    /// `s` came from [`HeapBuf::store`], is unreachable from now on, and is freed only here.
    unsafe fn defer_free(s: usize, guard: &Guard) {
        // SAFETY: readers that loaded `s` are pinned; the buffer is freed after them.
        unsafe { guard.defer_unchecked(move || HeapBuf::free(s)) };
    }
}

/// The bytes a state word names (heap or tail), if any.
///
/// # Safety
/// `s` (without `TAILED`) was loaded from a cell whose record the caller keeps alive
/// (pinned, or holding it), and the buffer it names may only be freed through the epoch.
#[inline]
unsafe fn bytes_of<'a>(s: usize) -> Option<&'a [u8]> {
    if is_heap(s) {
        // SAFETY: a heap state came from `HeapBuf::store` in `store`; the buffer is freed
        // only through the epoch after being replaced (the caller's contract).
        return Some(unsafe { HeapBuf::bytes(s) });
    }
    if s & TAG_MASK == EMBEDDED {
        let h = (s & !TAG_MASK) as *const TailHeader;
        // SAFETY: an `EMBEDDED` state names the header of its record's tail, whose `len`
        // bytes follow it, all written before the state was published and never after; the
        // tail lives as long as the record.
        return Some(unsafe { std::slice::from_raw_parts(h.add(1).cast::<u8>(), (*h).len as usize) });
    }
    None
}

impl ValueCell {
    pub(crate) fn absent() -> Self {
        ValueCell { state: AtomicUsize::new(UNWRITTEN), inline: AtomicU64::new(0), kept: Atomic::null() }
    }

    /// The state word without the `TAILED` bit.
    #[inline]
    fn load(&self, order: Ordering) -> usize {
        self.state.load(order) & !TAILED
    }

    /// Publishes `new` (with the `TAILED` bit as it was); returns the old state without it.
    /// Only the holder of the record's exclusive lock (or its creator) writes the state.
    #[inline]
    fn swap(&self, new: usize) -> usize {
        let tailed = self.state.load(Ordering::Relaxed) & TAILED;
        self.state.swap(new | tailed, Ordering::AcqRel) & !TAILED
    }

    /// Appends the value to `out`; returns whether it is present.
    #[inline]
    pub(crate) fn load_into(&self, out: Option<&mut Vec<u8>>, guard: &Guard) -> bool {
        let s = self.load(Ordering::Acquire);
        // SAFETY: `guard` is pinned, so a buffer replaced meanwhile stays allocated; the
        // caller holds the record.
        if let Some(bytes) = unsafe { bytes_of(s) } {
            if let Some(out) = out {
                out.extend_from_slice(bytes);
            }
            let _ = guard;
            return true;
        }
        if s & TAG_MASK != INLINE {
            return false;
        }
        if let Some(out) = out {
            let bytes = self.inline.load(Ordering::Relaxed).to_le_bytes();
            out.extend_from_slice(&bytes[..s >> 3]);
            // Orders the inline load before the caller's re-check of the record's word.
            fence(Ordering::Acquire);
        }
        true
    }

    /// Lends the value to `f` (`None`: absent). Only the holder of the record's exclusive
    /// lock calls this, so the value cannot change meanwhile.
    pub(crate) fn with_bytes<T>(&self, guard: &Guard, f: impl FnOnce(Option<&[u8]>) -> T) -> T {
        let s = self.load(Ordering::Acquire);
        // SAFETY: as in `load_into`; the lock holder is the only one who replaces it.
        if let Some(bytes) = unsafe { bytes_of(s) } {
            let r = f(Some(bytes));
            let _ = guard;
            return r;
        }
        if s & TAG_MASK != INLINE {
            return f(None);
        }
        let bytes = self.inline.load(Ordering::Relaxed).to_le_bytes();
        f(Some(&bytes[..s >> 3]))
    }

    /// Loads the cell's state and asks for its heap buffer's first lines (see
    /// [`super::Protocol::prefetch`]): the state load waits for the cell's miss (its caller
    /// has asked for the cell's line already), the buffer's lines do not wait. They are
    /// asked for blind, [`PREFETCH_BYTES`] from the buffer's start whatever its length:
    /// reading the length first would wait for the buffer's own miss. A tail came with the
    /// record's own lines ([`prefetch_record`]).
    #[inline]
    pub(crate) fn prefetch(&self, guard: &Guard) {
        let s = self.load(Ordering::Relaxed);
        if is_heap(s) {
            // A heap state is the buffer's address (its length, then its bytes).
            crate::prefetch::prefetch_span(s as *const u8, PREFETCH_BYTES);
        }
        let _ = guard;
    }

    #[inline]
    pub(crate) fn is_present(&self, _guard: &Guard) -> bool {
        let s = self.load(Ordering::Acquire);
        is_heap(s) || matches!(s & TAG_MASK, INLINE | EMBEDDED)
    }

    /// Whether no commit has stored a value (or a deletion) here yet.
    #[inline]
    pub(crate) fn is_unwritten(&self) -> bool {
        let s = self.load(Ordering::Acquire);
        s == UNWRITTEN || matches!(s & TAG_MASK, FRESH | STAGED)
    }

    /// Gives a new record's unused tail to its creator (see `STAGED`). Called before the
    /// record is published.
    fn reserve_tail_for_creator(&self) {
        let s = self.state.load(Ordering::Relaxed);
        if s & TAG_MASK == FRESH {
            // Not published yet: a plain store; the publication of the record orders it.
            self.state.store((s & !TAG_MASK) | STAGED, Ordering::Relaxed);
        }
    }

    /// Copies `value` into the tail of a record the calling transaction created
    /// ([`alloc_new`]) and returns it as staged there, if the tail is still its creator's
    /// (no commit stored a value yet) and holds it. The commit that installs it
    /// ([`store`](Self::store) with these very bytes) publishes the tail without a copy.
    /// Only the record's creator calls this, before it commits: no reader looks at an
    /// unpublished tail, and no other writer stores into a staged one. If another commit
    /// stored a value meanwhile (the state left `STAGED` under it), the bytes written
    /// here are unread, and the creator's install copies them to the heap.
    pub(crate) fn stage(&self, value: &[u8]) -> Option<super::WriteValue> {
        let s = self.load(Ordering::Acquire);
        if s & TAG_MASK != STAGED || value.len() <= INLINE_MAX || value.len() > tail_cap(s) {
            return None;
        }
        let at = tail_bytes(s);
        // SAFETY: a `STAGED` state names the tail of a record the caller created, `cap`
        // bytes after the header; only the creator writes them, and nothing reads them
        // until a state names them (`store` publishes them with release ordering).
        unsafe { std::ptr::copy_nonoverlapping(value.as_ptr(), at, value.len()) };
        Some(super::WriteValue::Staged { at: NonNull::new(at).expect("a tail is never null"), len: value.len() })
    }

    #[inline]
    pub(crate) fn is_removed(&self, _guard: &Guard) -> bool {
        self.load(Ordering::Acquire) == REMOVED
    }

    /// Replaces the value; only the holder of the record's exclusive lock calls this.
    pub(crate) fn store(&self, value: Option<&[u8]>, guard: &Guard) {
        let cur = self.load(Ordering::Relaxed);
        let new = match value {
            Some(v) if v.len() <= INLINE_MAX => {
                let mut bytes = [0u8; 8];
                bytes[..v.len()].copy_from_slice(v);
                // Pairs with the fence at the end of `load_into` (see the type's comment).
                fence(Ordering::Release);
                self.inline.store(u64::from_le_bytes(bytes), Ordering::Relaxed);
                INLINE | v.len() << 3
            }
            Some(v) if cur & TAG_MASK == STAGED && std::ptr::eq(v.as_ptr(), tail_bytes(cur)) => {
                let h = (cur & !TAG_MASK) as *mut TailHeader;
                debug_assert!(v.len() <= tail_cap(cur));
                // SAFETY: the creator's value, staged in this tail (`stage`), which no
                // state has named yet; the swap below publishes it (release).
                unsafe { (*h).len = v.len() as u32 };
                (cur & !TAG_MASK) | EMBEDDED
            }
            Some(v) if cur & TAG_MASK == FRESH && v.len() <= tail_cap(cur) => {
                let h = (cur & !TAG_MASK) as *mut TailHeader;
                // SAFETY: a `FRESH` state names its record's unused tail, `cap` bytes after
                // the header; no state has named its bytes yet, so no reader sees them
                // before the swap below publishes them (release).
                unsafe {
                    std::ptr::copy_nonoverlapping(v.as_ptr(), h.add(1).cast::<u8>(), v.len());
                    (*h).len = v.len() as u32;
                }
                (cur & !TAG_MASK) | EMBEDDED
            }
            Some(v) => HeapBuf::store(v),
            None => DELETED,
        };
        let old = self.swap(new);
        if is_heap(old) {
            // SAFETY: `old` came from `HeapBuf::store` in an earlier `store` and is
            // unreachable from now on; readers that loaded it are pinned.
            unsafe { HeapBuf::defer_free(old, guard) };
        }
    }

    /// Marks the record removed, letting its value go (the holder of its exclusive lock
    /// calls this: an eviction).
    pub(crate) fn remove(&self, guard: &Guard) {
        let old = self.swap(REMOVED);
        if is_heap(old) {
            // SAFETY: as in `store`.
            unsafe { HeapBuf::defer_free(old, guard) };
        }
    }

    /// Marks the (absent) record removed.
    pub(crate) fn mark_removed(&self, _guard: &Guard) {
        let old = self.swap(REMOVED);
        debug_assert!(!is_heap(old));
    }

    /// Whether the record was allocated with a tail.
    pub(crate) fn has_tail(&self) -> bool {
        self.state.load(Ordering::Relaxed) & TAILED != 0
    }

    /// Whether the value is in the record's tail (for tests).
    #[cfg(test)]
    pub(crate) fn is_embedded(&self) -> bool {
        self.load(Ordering::Acquire) & TAG_MASK == EMBEDDED
    }
}

impl Drop for ValueCell {
    fn drop(&mut self) {
        snapshot::drop_chain(&mut self.kept);
        let s = *self.state.get_mut() & !TAILED;
        if is_heap(s) {
            // SAFETY: `drop` has exclusive access and no reader can reach the record any
            // more; the state came from `HeapBuf::store` and is freed once.
            unsafe { HeapBuf::free(s) };
        }
    }
}

/// The capacity of the tail a `FRESH` or `STAGED` state names.
#[inline]
fn tail_cap(s: usize) -> usize {
    // SAFETY: a `FRESH` or `STAGED` state names its record's tail header, written at
    // allocation.
    unsafe { (*((s & !TAG_MASK) as *const TailHeader)).cap as usize }
}

/// The first byte of the tail a `FRESH` or `STAGED` state names (after its header).
#[inline]
fn tail_bytes(s: usize) -> *mut u8 {
    // In bounds: the header is followed by its `cap` bytes in the same allocation.
    ((s & !TAG_MASK) as *mut TailHeader).wrapping_add(1).cast::<u8>()
}

/// The layout of a record of type `R` with a tail of `cap` bytes, and the tail header's
/// offset in it.
fn tailed_layout<R>(cap: usize) -> (Layout, usize) {
    let tail = Layout::from_size_align(std::mem::size_of::<TailHeader>() + cap, std::mem::align_of::<TailHeader>())
        .expect("a tail of at most MAX_VALUE_LEN bytes");
    let (layout, offset) = Layout::new::<R>().extend(tail).expect("a record layout");
    (layout.pad_to_align(), offset)
}

/// Allocates `rec` (not yet published) with a tail of `tail` bytes when its cell (`cell`
/// gives it; `None` for a record that has none) can hold a value of that length there, and
/// alone otherwise, both in slab blocks. Free it with [`free_record`].
pub(crate) fn alloc_record<R>(rec: R, tail: usize, cell: impl Fn(&R) -> Option<&ValueCell>) -> *mut R {
    let wants_tail = tail > INLINE_MAX && tail <= u32::MAX as usize && cell(&rec).is_some();
    if !wants_tail {
        return alloc_plain(rec);
    }
    let (layout, offset) = tailed_layout::<R>(tail);
    let p = crate::slab::alloc(layout).as_ptr();
    // SAFETY: `p` is a fresh allocation of `layout`: an `R` at 0 and the header at `offset`,
    // both in bounds and aligned.
    unsafe {
        let r = p.cast::<R>();
        r.write(rec);
        let h = p.add(offset).cast::<TailHeader>();
        h.write(TailHeader { cap: tail as u32, len: 0 });
        let c = cell(&*r).expect("checked above");
        debug_assert_eq!(c.load(Ordering::Relaxed), UNWRITTEN, "a new record's cell is unwritten");
        // Not published yet: a plain store; the publication of the record orders it.
        c.state.store(h as usize | FRESH | TAILED, Ordering::Relaxed);
        r
    }
}

/// Frees a record made by [`alloc_record`] (dropping it first).
///
/// # Safety
/// `p` came from [`alloc_record`] with the same `cell`, is freed once, and no one can
/// reach it any more.
pub(crate) unsafe fn free_record<R>(p: *mut R, cell: impl Fn(&R) -> Option<&ValueCell>) {
    // SAFETY: the caller owns `p`, a live record.
    let tailed = cell(unsafe { &*p }).is_some_and(ValueCell::has_tail);
    let layout = if tailed {
        // The header's offset does not depend on the capacity.
        let (_, offset) = tailed_layout::<R>(0);
        // SAFETY: a tailed record has its header at `offset`, written at allocation.
        let cap = unsafe { (*p.cast::<u8>().add(offset).cast::<TailHeader>()).cap as usize };
        tailed_layout::<R>(cap).0
    } else {
        // Allocated by `alloc_plain` (`alloc_record` without a tail).
        Layout::new::<R>()
    };
    // SAFETY: `p` holds a live `R` and was allocated with `layout`.
    unsafe {
        std::ptr::drop_in_place(p);
        crate::slab::dealloc(NonNull::new_unchecked(p.cast::<u8>()), layout);
    }
}

/// Allocates `rec` alone, in a slab block (see [`crate::slab`]: records on huge pages);
/// [`free_record`] frees it.
fn alloc_plain<R>(rec: R) -> *mut R {
    let p = crate::slab::alloc(Layout::new::<R>()).as_ptr().cast::<R>();
    // SAFETY: a fresh block with `R`'s layout.
    unsafe { p.write(rec) };
    p
}

/// Asks for a record's lines and its tail's (a value of up to [`PREFETCH_BYTES`] less the
/// record): one wait for both when the value is in the tail, and no more than a record's
/// line when it is not.
#[inline]
pub(crate) fn prefetch_record<R>(p: *const R) {
    crate::prefetch::prefetch_span(p.cast::<u8>(), PREFETCH_BYTES);
}

/// A record for an insert of a `reserve`-byte value ([`Protocol::new_record`]), with room
/// for that value in its tail. Free it with [`free_record_of`].
pub(crate) fn alloc_new<P: Protocol>(proto: &P, st: &mut P::TxnState, reserve: usize) -> *mut P::Record {
    let p = alloc_record(proto.new_record(st), reserve, P::value_cell);
    // SAFETY: `p` is live and not published yet.
    if let Some(c) = P::value_cell(unsafe { &*p }) {
        c.reserve_tail_for_creator();
    }
    p
}

/// A record holding `value` as loaded ([`Protocol::new_loaded`]), the value in its tail
/// where the protocol keeps values in a cell. Free it with [`free_record_of`].
pub(crate) fn alloc_loaded<P: Protocol>(proto: &P, value: &[u8], stamp: u64) -> *mut P::Record {
    match proto.new_loaded_bare(stamp) {
        Some(rec) if value.len() > INLINE_MAX => {
            let p = alloc_record(rec, value.len(), P::value_cell);
            // SAFETY: `p` is live and not published; its cell is unwritten, so the store
            // defers nothing and needs no pin.
            unsafe {
                let cell = P::value_cell(&*p).expect("a bare loaded record has a cell");
                cell.store(Some(value), crossbeam_epoch::unprotected());
            }
            p
        }
        _ => alloc_plain(proto.new_loaded(value, stamp)),
    }
}

/// Frees a record made by [`alloc_new`] or [`alloc_loaded`].
///
/// # Safety
/// As [`free_record`]: freed once, reachable by no one.
pub(crate) unsafe fn free_record_of<P: Protocol>(p: *mut P::Record) {
    // SAFETY: forwarded from the caller.
    unsafe { free_record(p, P::value_cell) }
}

#[cfg(test)]
mod tests {
    use super::super::WriteValue;
    use super::*;

    struct Rec {
        word: AtomicU64,
        cell: ValueCell,
    }

    fn cell(r: &Rec) -> Option<&ValueCell> {
        Some(&r.cell)
    }

    fn read(c: &ValueCell) -> Option<Vec<u8>> {
        let mut v = Vec::new();
        c.load_into(Some(&mut v), &crossbeam_epoch::pin()).then_some(v)
    }

    #[test]
    fn first_value_in_the_tail_later_ones_on_the_heap() {
        let guard = &crossbeam_epoch::pin();
        let p = alloc_record(Rec { word: AtomicU64::new(7), cell: ValueCell::absent() }, 150, cell);
        // SAFETY: `p` is live until `free_record` below.
        let r = unsafe { &*p };
        assert!(r.cell.is_unwritten() && !r.cell.is_present(guard) && read(&r.cell).is_none());
        r.cell.store(Some(&[1; 150]), guard);
        assert!(r.cell.is_embedded() && !r.cell.is_unwritten());
        assert_eq!(read(&r.cell), Some(vec![1; 150]));
        r.cell.with_bytes(guard, |b| assert_eq!(b, Some(&[1u8; 150][..])));
        // The tail is never written again, even by a value that fits.
        r.cell.store(Some(&[2; 100]), guard);
        assert!(!r.cell.is_embedded());
        assert_eq!(read(&r.cell), Some(vec![2; 100]));
        r.cell.store(Some(b"short"), guard);
        assert_eq!(read(&r.cell), Some(b"short".to_vec()));
        r.cell.store(None, guard);
        assert_eq!(read(&r.cell), None);
        r.cell.remove(guard);
        assert!(r.cell.is_removed(guard) && r.cell.has_tail());
        assert_eq!(r.word.load(Ordering::Relaxed), 7);
        // SAFETY: allocated above with the same `cell`; not reachable by anyone else.
        unsafe { free_record(p, cell) };
    }

    /// A new record's creator stages its value in the tail and its install publishes it
    /// there, uncopied; a value another writer commits first goes to the heap and leaves
    /// the staged bytes alone, and the creator's later install copies those.
    #[test]
    fn a_creator_stages_its_value_in_the_tail_and_no_one_else_writes_there() {
        let guard = &crossbeam_epoch::pin();
        let new = || {
            let p = alloc_record(Rec { word: AtomicU64::new(0), cell: ValueCell::absent() }, 150, cell);
            // SAFETY: live and unpublished.
            unsafe { &*p }.cell.reserve_tail_for_creator();
            p
        };
        // Alone: staged, then published in place.
        let p = new();
        // SAFETY: live until freed below.
        let r = unsafe { &*p };
        assert!(r.cell.is_unwritten() && read(&r.cell).is_none());
        assert!(r.cell.stage(&[9; 151]).is_none(), "longer than the tail");
        assert!(r.cell.stage(b"short").is_none(), "inline");
        let staged = r.cell.stage(&[4; 150]).expect("fits");
        assert!(matches!(staged, WriteValue::Staged { .. }));
        assert!(read(&r.cell).is_none() && r.cell.is_unwritten(), "staged is not visible");
        let staged = r.cell.stage(&[5; 120]).expect("a second stage by the creator");
        r.cell.store(Some(&staged), guard);
        assert!(r.cell.is_embedded());
        assert_eq!(read(&r.cell), Some(vec![5; 120]));
        // SAFETY: allocated above; reachable by no one else.
        unsafe { free_record(p, cell) };
        // Another writer's commit first: to the heap, the staged bytes untouched.
        let p = new();
        // SAFETY: as above.
        let r = unsafe { &*p };
        let staged = r.cell.stage(&[6; 150]).expect("fits");
        r.cell.store(Some(&[7; 150]), guard);
        assert!(!r.cell.is_embedded(), "a writer other than the creator never uses a staged tail");
        assert_eq!(read(&r.cell), Some(vec![7; 150]));
        assert!(r.cell.stage(&[8; 150]).is_none(), "no staging once a commit stored a value");
        assert_eq!(&*staged, &[6; 150][..]);
        r.cell.store(Some(&staged), guard);
        assert_eq!(read(&r.cell), Some(vec![6; 150]));
        // SAFETY: as above.
        unsafe { free_record(p, cell) };
    }

    #[test]
    fn a_value_too_long_for_the_tail_goes_to_the_heap() {
        let guard = &crossbeam_epoch::pin();
        for (tail, len) in [(16, 17), (150, 4000), (150, 8), (8, 100), (0, 100)] {
            let p = alloc_record(Rec { word: AtomicU64::new(0), cell: ValueCell::absent() }, tail, cell);
            // SAFETY: live until freed below.
            let r = unsafe { &*p };
            r.cell.store(Some(&vec![3; len]), guard);
            assert!(!r.cell.is_embedded(), "tail {tail}, value {len}");
            assert_eq!(read(&r.cell), Some(vec![3; len]));
            // SAFETY: as above.
            unsafe { free_record(p, cell) };
        }
    }

    #[test]
    fn a_record_without_a_cell_or_freed_unwritten() {
        let p = alloc_record(Rec { word: AtomicU64::new(0), cell: ValueCell::absent() }, 64, |_| None);
        // SAFETY: live until freed below.
        assert!(!unsafe { &*p }.cell.has_tail(), "no cell named: a plain box");
        // SAFETY: a plain box, freed once.
        unsafe { free_record(p, |_: &Rec| None) };
        let p = alloc_record(Rec { word: AtomicU64::new(0), cell: ValueCell::absent() }, 64, cell);
        // SAFETY: live until freed below.
        let r = unsafe { &*p };
        assert!(r.cell.has_tail() && r.cell.is_unwritten() && !r.cell.is_embedded());
        r.cell.mark_removed(&crossbeam_epoch::pin());
        assert!(r.cell.has_tail() && r.cell.is_removed(&crossbeam_epoch::pin()), "TAILED outlives the state");
        // SAFETY: a tailed record never written: freed with its tail's layout.
        unsafe { free_record(p, cell) };
    }
}
