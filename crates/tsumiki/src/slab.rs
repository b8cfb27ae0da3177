//! Small blocks (the records of the single-version protocols with their values' tails, and
//! the index's key blocks) carved from 2 MiB chunks advised to transparent huge pages.
//!
//! A point read of a table bigger than the TLB's reach pays a TLB miss for every 4 KiB
//! page it touches, and its record and its leaf's keys are on pages of their own: 1M
//! records of 32 bytes span 8K pages, a TLB holds 1.5K. Allocators (glibc's, mimalloc's as
//! configured for small resident sets) hand out 4 KiB pages. A chunk here is one mapping of
//! 2 MiB, aligned to 2 MiB and advised `MADV_HUGEPAGE`, so the kernel backs it with one
//! huge page and a thousand chunks fit the TLB (CCBench's Silo and TicToc advise their
//! tuple table alike; RocksDB offers `memtable_huge_page_size` for its arena). Where THP is
//! off, the advice does nothing and the chunks are plain memory. The first few chunks are
//! not advised: a huge page is resident whole once touched, and a small database's blocks
//! cost few TLB misses anyway.
//!
//! Blocks come in size classes: steps of `GRAIN` bytes up to `SMALL`, then eight per
//! doubling up to `MAX_BLOCK`; a bigger or more aligned layout goes to the global
//! allocator. A class carves its blocks from 64 KiB runs of the newest chunk, so a class
//! with few blocks holds one run, not a chunk. Each thread keeps a list of free blocks per
//! class and trades them with the shared lists in batches (about `BATCH_BYTES`), so an
//! allocation or a free takes no lock and no atomic in the common case; a free may happen
//! on any thread (the epoch runs deferred frees where it collects).
//!
//! Chunks are kept for the process's life: freed blocks serve later allocations of their
//! class (of this or another database), and a run whose blocks are all free goes to any
//! class (`Class::scavenge`), so the memory held is about the peak of the live blocks and
//! their garbage, as with a heap that does not trim.

use std::alloc::Layout;
use std::cell::RefCell;
use std::ptr::NonNull;

use parking_lot::Mutex;

/// The size of a chunk and its alignment: one x86-64 huge page.
#[cfg(not(miri))]
const CHUNK: usize = 2 << 20;
/// Miri interprets every byte: small chunks keep its runs short.
#[cfg(miri)]
const CHUNK: usize = 64 << 10;
/// The step between the small size classes, and the alignment every block has.
pub(crate) const GRAIN: usize = 16;
/// The largest block of the small classes (a record with a 150-byte value is 192 bytes).
const SMALL: usize = 512;
const SMALL_CLASSES: usize = SMALL / GRAIN;
/// Classes per doubling above `SMALL`: a block wastes less than an eighth of itself.
const STEPS: usize = 8;
/// The largest block served here (a leaf's key block is 1-4 KiB).
pub(crate) const MAX_BLOCK: usize = 16 << 10;
const CLASSES: usize = SMALL_CLASSES + STEPS * (MAX_BLOCK.ilog2() - SMALL.ilog2()) as usize;
/// A class takes its blocks from runs of this many bytes, carved from the shared chunk, so
/// that a class with few blocks (a huge page is resident whole once touched) holds at most
/// one run, not a chunk.
const RUN: usize = 64 << 10;
/// About the bytes moved between a thread and the shared lists at once.
const BATCH_BYTES: usize = 4 << 10;
/// Blocks per batch: at most 32 (small records), at least 2 (the biggest key blocks).
const fn batch_of(class: usize) -> usize {
    let n = BATCH_BYTES / class_size(class);
    if n > 32 {
        32
    } else if n < 2 {
        2
    } else {
        n
    }
}

/// A free block, a run's or a chunk's start. A free block's first words link it: the next
/// block of its list, and at a batch's head in a class's shared list, the next batch and
/// the batch's length. Every block has room for three words (the smallest class is 32
/// bytes), so the lists allocate nothing.
#[derive(Clone, Copy, PartialEq)]
struct Block(NonNull<u8>);

// SAFETY: a `Block` is a handle on free memory that no one else references; moving it to
// another thread moves that ownership.
unsafe impl Send for Block {}

/// The smallest block: room for a free block's three link words.
const MIN_BLOCK: usize = 3 * std::mem::size_of::<usize>();

impl Block {
    fn addr(self) -> usize {
        self.0.as_ptr().addr()
    }

    /// Link word `i` of a free block.
    fn word<T>(self, i: usize) -> *mut T {
        self.0.as_ptr().cast::<usize>().wrapping_add(i).cast::<T>()
    }

    /// The next block of this free block's list.
    ///
    /// # Safety
    /// `self` is a free block of a list, owned by the caller (its thread's list, or a
    /// shared list under its lock).
    unsafe fn next(self) -> Option<Block> {
        // SAFETY: a free block's first word was written by `set_next` (blocks are at least
        // `MIN_BLOCK` bytes and 16-aligned).
        unsafe { self.word::<Option<Block>>(0).read() }
    }

    /// Links this free block to `next`.
    ///
    /// # Safety
    /// `self` is a free block owned by the caller.
    unsafe fn set_next(self, next: Option<Block>) {
        // SAFETY: the caller owns the block's bytes; the word is in bounds and aligned.
        unsafe { self.word::<Option<Block>>(0).write(next) }
    }
}

/// A list of free blocks of one class, linked through their first words.
#[derive(Clone, Copy)]
struct List {
    head: Option<Block>,
    len: usize,
}

impl List {
    const EMPTY: List = List { head: None, len: 0 };

    fn push(&mut self, b: Block) {
        // SAFETY: the block was just freed to this list's owner.
        unsafe { b.set_next(self.head) };
        self.head = Some(b);
        self.len += 1;
    }

    fn pop(&mut self) -> Option<Block> {
        let b = self.head?;
        // SAFETY: `b` is this list's, owned by its owner.
        self.head = unsafe { b.next() };
        self.len -= 1;
        Some(b)
    }

    /// Detaches the first `n` (`<= len`, `> 0`) blocks as a list of their own.
    fn split_front(&mut self, n: usize) -> List {
        let head = self.head;
        let mut last = head.expect("a non-empty list");
        for _ in 1..n {
            // SAFETY: `n <= len`: the first `n` blocks are linked.
            last = unsafe { last.next() }.expect("n <= len");
        }
        // SAFETY: as above; the list's own block.
        unsafe {
            self.head = last.next();
            last.set_next(None);
        }
        self.len -= n;
        List { head, len: n }
    }
}

/// The shared state of one size class.
struct Class {
    /// Free blocks in batches: the first batch's head. A batch's head holds the next batch
    /// in its second word and the batch's length in its third.
    batches: Option<Block>,
    /// Blocks in `batches`.
    free: usize,
    /// `free` at which the next scavenge looks for whole free runs.
    scavenge_at: usize,
    /// The part of the class's newest run not yet handed out: `left` bytes from `next`.
    next: Option<Block>,
    left: usize,
}

static SHARED: [Mutex<Class>; CLASSES] =
    [const { Mutex::new(Class { batches: None, free: 0, scavenge_at: 0, next: None, left: 0 }) }; CLASSES];

/// The part of the newest chunk not yet carved into runs: `.1` bytes from `.0`.
static CHUNK_LEFT: Mutex<(Option<Block>, usize)> = Mutex::new((None, 0));
/// Runs whose blocks were all free, for any class to carve again, linked through their
/// first words.
static FREE_RUNS: Mutex<List> = Mutex::new(List::EMPTY);
/// Runs given back to `FREE_RUNS` so far (a test's witness).
static RUNS_FREED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
/// Free bytes a class holds before it looks for whole free runs: a few runs' worth.
const SCAVENGE_BYTES: usize = 4 * RUN;

impl Class {
    /// Takes back a list of free blocks of `class` as a batch. When the class holds more
    /// free blocks than it did after its last scavenge (twice as many, and a few runs'
    /// worth), it gives every run whose blocks are all free to the other classes: a load
    /// whose leaves grow through the key-block classes leaves the smaller ones empty, and
    /// their memory would otherwise stay with them.
    fn give(&mut self, class: usize, batch: List) {
        self.push_batch(batch);
        if self.free >= self.scavenge_at && self.free * class_size(class) >= SCAVENGE_BYTES {
            self.scavenge(class);
        }
    }

    /// Adds a batch to the shared list.
    fn push_batch(&mut self, batch: List) {
        let Some(head) = batch.head else { return };
        // SAFETY: the batch's blocks are now this class's, under its lock; every block has
        // room for three words.
        unsafe {
            head.word::<Option<Block>>(1).write(self.batches);
            head.word::<usize>(2).write(batch.len);
        }
        self.batches = Some(head);
        self.free += batch.len;
    }

    /// Takes a batch of free blocks, if the class has one.
    fn take(&mut self) -> Option<List> {
        let head = self.batches?;
        // SAFETY: a batch's head, written by `give` under this lock.
        let (next, len) = unsafe { (head.word::<Option<Block>>(1).read(), head.word::<usize>(2).read()) };
        self.batches = next;
        self.free -= len;
        Some(List { head: Some(head), len })
    }

    /// Moves the runs whose every block is free to `FREE_RUNS` (see `give`).
    fn scavenge(&mut self, class: usize) {
        let per_run = RUN / class_size(class);
        let mut all = Vec::with_capacity(self.free);
        while let Some(mut batch) = self.take() {
            while let Some(b) = batch.pop() {
                all.push(b);
            }
        }
        all.sort_unstable_by_key(|b| b.addr());
        let mut kept = List::EMPTY;
        let mut runs = 0;
        for same_run in all.chunk_by(|a, b| a.addr() & !(RUN - 1) == b.addr() & !(RUN - 1)) {
            if same_run.len() == per_run {
                // Every block of the run, the first at its start (runs are carved from
                // their start): a pointer to the whole run. A run not yet carved to its end
                // never has them all.
                debug_assert_eq!(same_run[0].addr() % RUN, 0);
                FREE_RUNS.lock().push(same_run[0]);
                runs += 1;
            } else {
                // Highest first, so the list hands out the lowest addresses first.
                for &b in same_run.iter().rev() {
                    kept.push(b);
                }
            }
        }
        RUNS_FREED.fetch_add(runs, std::sync::atomic::Ordering::Relaxed);
        self.scavenge_at = 2 * kept.len;
        while kept.len > 0 {
            let batch = kept.split_front(batch_of(class).min(kept.len));
            self.push_batch(batch);
        }
    }
}

/// A thread's free blocks per class; given back to the shared lists when the thread ends.
struct Cache {
    lists: [List; CLASSES],
}

impl Drop for Cache {
    fn drop(&mut self) {
        for (class, list) in self.lists.iter_mut().enumerate() {
            if list.len > 0 {
                SHARED[class].lock().give(class, std::mem::replace(list, List::EMPTY));
            }
        }
    }
}

thread_local! {
    static CACHE: RefCell<Cache> = const { RefCell::new(Cache { lists: [List::EMPTY; CLASSES] }) };
}

/// Reports every slab allocation (`+size`) and free (`-size`) to a test's counting
/// allocator, so that its memory tests see slab blocks as heap bytes.
#[cfg(feature = "test-plants")]
static OBSERVER: std::sync::OnceLock<fn(isize)> = std::sync::OnceLock::new();

/// Has `f` called with `+size` on every slab allocation and `-size` on every free (the
/// memory tests' counting allocator; test builds only). The first call wins.
#[cfg(feature = "test-plants")]
pub fn observe(f: fn(isize)) {
    let _ = OBSERVER.set(f);
}

#[inline]
fn observed(_delta: isize) {
    #[cfg(feature = "test-plants")]
    if let Some(f) = OBSERVER.get() {
        f(_delta);
    }
}

/// Whether `layout` is served here (rather than by the global allocator).
#[inline]
pub(crate) fn serves(layout: Layout) -> bool {
    layout.size() <= MAX_BLOCK && layout.align() <= GRAIN && layout.size() > 0
}

/// The class of a size in `1..=MAX_BLOCK` (sizes under `MIN_BLOCK` share its class).
#[inline]
fn class_of(size: usize) -> usize {
    let size = size.max(MIN_BLOCK);
    if size <= SMALL {
        return (size - 1) / GRAIN;
    }
    let s = size - 1;
    let log = s.ilog2() as usize;
    let step = log - STEPS.ilog2() as usize;
    SMALL_CLASSES + (log - SMALL.ilog2() as usize) * STEPS + ((s >> step) & (STEPS - 1))
}

/// The size of the blocks of `class`.
const fn class_size(class: usize) -> usize {
    if class < SMALL_CLASSES {
        return (class + 1) * GRAIN;
    }
    let k = class - SMALL_CLASSES;
    let log = SMALL.ilog2() as usize + k / STEPS;
    (STEPS + k % STEPS + 1) << (log - STEPS.ilog2() as usize)
}

/// Allocates a block for `layout` (uninitialised). Free it with [`dealloc`] and the same
/// layout.
#[inline]
pub(crate) fn alloc(layout: Layout) -> NonNull<u8> {
    if !serves(layout) {
        // SAFETY: a non-zero size (records hold at least a word); checked for null below.
        let p = unsafe { std::alloc::alloc(layout) };
        return NonNull::new(p).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
    }
    observed(layout.size() as isize);
    let class = class_of(layout.size());
    let cached = CACHE.try_with(|cache| {
        let mut cache = cache.borrow_mut();
        let list = &mut cache.lists[class];
        if list.len == 0 {
            *list = refill(class);
        }
        list.pop()
    });
    match cached {
        Ok(Some(b)) => b.0,
        // The thread's cache is gone (a destructor allocating at thread exit).
        Ok(None) | Err(_) => {
            let mut one = refill(class);
            let b = one.pop().expect("refill gives at least one block");
            SHARED[class].lock().give(class, one);
            b.0
        }
    }
}

/// Frees a block from [`alloc`].
///
/// # Safety
/// `p` came from [`alloc`] with `layout`, is freed once, and nothing uses it after.
#[inline]
pub(crate) unsafe fn dealloc(p: NonNull<u8>, layout: Layout) {
    if !serves(layout) {
        // SAFETY: `alloc` took it from the global allocator with this layout.
        unsafe { std::alloc::dealloc(p.as_ptr(), layout) };
        return;
    }
    observed(-(layout.size() as isize));
    let class = class_of(layout.size());
    let kept = CACHE.try_with(|cache| {
        let mut cache = cache.borrow_mut();
        let list = &mut cache.lists[class];
        list.push(Block(p));
        if list.len >= 2 * batch_of(class) {
            let batch = list.split_front(batch_of(class));
            SHARED[class].lock().give(class, batch);
        }
    });
    if kept.is_err() {
        // At thread exit, after the cache is gone: straight to the shared lists.
        let mut one = List::EMPTY;
        one.push(Block(p));
        SHARED[class].lock().give(class, one);
    }
}

/// A batch of free blocks of `class`: a freed batch if there is one, else blocks carved
/// from the class's run (a new one when it is used up).
fn refill(class: usize) -> List {
    let size = class_size(class);
    let mut shared = SHARED[class].lock();
    if let Some(batch) = shared.take() {
        return batch;
    }
    let mut list = List::EMPTY;
    let mut carved = [None; 32];
    let n = batch_of(class);
    for slot in &mut carved[..n] {
        if shared.left < size {
            shared.next = Some(new_run());
            shared.left = RUN;
        }
        let at = shared.next.expect("set above").0;
        *slot = Some(Block(at));
        // SAFETY: `left >= size`, so `at + size` is within the run or one past its end.
        shared.next = Some(Block(unsafe { at.add(size) }));
        shared.left -= size;
    }
    // Pushed highest first: the lowest addresses are handed out first, so neighbours in
    // time share pages.
    for b in carved[..n].iter().rev().flatten() {
        list.push(*b);
    }
    list
}

/// A run of `RUN` bytes: one given back by a class, else from the newest chunk (a new one
/// when it is used up).
fn new_run() -> Block {
    if let Some(run) = FREE_RUNS.lock().pop() {
        return run;
    }
    let mut chunk = CHUNK_LEFT.lock();
    if chunk.1 < RUN {
        *chunk = (Some(new_chunk()), CHUNK);
    }
    let at = chunk.0.expect("set above").0;
    // SAFETY: `RUN <= chunk.1`: the run and the new start are within the chunk or one past it.
    chunk.0 = Some(Block(unsafe { at.add(RUN) }));
    chunk.1 -= RUN;
    Block(at)
}

/// Chunks mapped so far.
#[cfg(all(target_os = "linux", not(miri)))]
static MAPPED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
/// Chunks mapped before any is advised to huge pages (8 MiB).
#[cfg(all(target_os = "linux", not(miri)))]
const SMALL_PAGE_CHUNKS: usize = 4;

/// Maps a chunk of `CHUNK` bytes aligned to `CHUNK`, advised to huge pages after the first
/// `SMALL_PAGE_CHUNKS`.
#[cfg(all(target_os = "linux", not(miri)))]
fn new_chunk() -> Block {
    // Twice the size, then the unaligned ends given back: mmap aligns only to a page.
    let len = 2 * CHUNK;
    // SAFETY: an anonymous private mapping at an address of the kernel's choosing; no
    // existing memory is affected.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return heap_chunk();
    }
    let start = p as usize;
    let aligned = (start + CHUNK - 1) & !(CHUNK - 1);
    let head = aligned - start;
    let tail = len - head - CHUNK;
    // SAFETY: the head and the tail are parts of the mapping just made, used by no one; the
    // middle `CHUNK` bytes stay mapped. A failed unmap leaves memory mapped, nothing worse.
    unsafe {
        if head > 0 {
            libc::munmap(p, head);
        }
        if tail > 0 {
            libc::munmap((aligned + CHUNK) as *mut libc::c_void, tail);
        }
    }
    let chunk = (p as *mut u8).wrapping_add(head);
    // A huge page is resident whole once touched: a small database's blocks stay on small
    // pages, where the TLB misses they cost are few anyway.
    if MAPPED.fetch_add(1, std::sync::atomic::Ordering::Relaxed) >= SMALL_PAGE_CHUNKS {
        // SAFETY: advice on the chunk just mapped; a kernel without THP refuses it, harmlessly.
        unsafe { libc::madvise(chunk.cast(), CHUNK, libc::MADV_HUGEPAGE) };
    }
    Block(NonNull::new(chunk).expect("mmap returned a mapping"))
}

#[cfg(any(not(target_os = "linux"), miri))]
fn new_chunk() -> Block {
    heap_chunk()
}

/// A chunk from the global allocator (where mapping one failed, or under Miri).
fn heap_chunk() -> Block {
    let layout = Layout::from_size_align(CHUNK, CHUNK).expect("a power of two");
    // SAFETY: a non-zero size; checked for null below. Never freed (see the module).
    let p = unsafe { std::alloc::alloc(layout) };
    Block(NonNull::new(p).unwrap_or_else(|| std::alloc::handle_alloc_error(layout)))
}

/// An immutable byte buffer in a slab block: a `Box<[u8]>` on huge pages (the index's
/// key blocks).
pub(crate) struct SlabBytes {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: `SlabBytes` owns its bytes like a `Box<[u8]>`, and shares them only immutably.
unsafe impl Send for SlabBytes {}
// SAFETY: as above: `&SlabBytes` gives only `&[u8]`.
unsafe impl Sync for SlabBytes {}

impl SlabBytes {
    /// `len` bytes, zeroed, then written by `fill`.
    pub(crate) fn new(len: usize, fill: impl FnOnce(&mut [u8])) -> Self {
        if len == 0 {
            fill(&mut []);
            return SlabBytes { ptr: NonNull::dangling(), len };
        }
        let ptr = alloc(Self::layout(len));
        // SAFETY: a fresh block of at least `len` bytes, owned here; zeroed before the slice
        // is made, so every byte is initialised.
        let bytes = unsafe {
            std::ptr::write_bytes(ptr.as_ptr(), 0, len);
            std::slice::from_raw_parts_mut(ptr.as_ptr(), len)
        };
        fill(bytes);
        SlabBytes { ptr, len }
    }

    fn layout(len: usize) -> Layout {
        Layout::from_size_align(len, 1).expect("a buffer of at most isize::MAX bytes")
    }
}

impl std::ops::Deref for SlabBytes {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        // SAFETY: `len` initialised bytes at `ptr` (dangling only for 0), owned by `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl Clone for SlabBytes {
    fn clone(&self) -> Self {
        SlabBytes::new(self.len, |b| b.copy_from_slice(self))
    }
}

impl Drop for SlabBytes {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: allocated in `new` with this layout; dropped once.
            unsafe { dealloc(self.ptr, Self::layout(self.len)) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn layout(size: usize) -> Layout {
        Layout::from_size_align(size, 8).unwrap()
    }

    #[test]
    fn blocks_are_distinct_aligned_and_writable_and_freed_ones_are_reused() {
        let mut seen = HashSet::new();
        let mut live = Vec::new();
        for i in 0..200 {
            let size = [8, 48, 200, 513, 1500, 4000, MAX_BLOCK][i % 7];
            let p = alloc(layout(size));
            assert_eq!(p.as_ptr() as usize % GRAIN, 0);
            // SAFETY: a fresh block of `size` bytes.
            unsafe { std::ptr::write_bytes(p.as_ptr(), i as u8, size) };
            assert!(seen.insert(p.as_ptr() as usize), "a block handed out twice while live");
            live.push((p, size, i as u8));
        }
        for &(p, size, fill) in &live {
            // SAFETY: live blocks, written above and by no one else.
            let bytes = unsafe { std::slice::from_raw_parts(p.as_ptr(), size) };
            assert!(bytes.iter().all(|&b| b == fill), "a block overlaps another");
        }
        let (first, size, _) = live[0];
        // SAFETY: allocated above with this layout, freed once.
        unsafe { dealloc(first, layout(size)) };
        assert_eq!(alloc(layout(size)), first, "the last freed block of a class is the next handed out");
        for (p, size, _) in live {
            // SAFETY: as above.
            unsafe { dealloc(p, layout(size)) };
        }
    }

    #[test]
    fn blocks_freed_on_other_threads_come_back_through_the_shared_lists() {
        let size = 200;
        let batch = batch_of(class_of(size));
        let blocks: Vec<usize> = (0..4 * batch).map(|_| alloc(layout(size)).as_ptr() as usize).collect();
        let freed: HashSet<usize> = blocks.iter().copied().collect();
        std::thread::spawn(move || {
            for p in blocks {
                // SAFETY: allocated above with this layout, handed to this thread, freed once.
                unsafe { dealloc(NonNull::new(p as *mut u8).unwrap(), layout(size)) };
            }
        })
        .join()
        .unwrap();
        // The thread gave its cache back when it ended: the class's next batches are those.
        let again: HashSet<usize> = (0..4 * batch).map(|_| alloc(layout(size)).as_ptr() as usize).collect();
        assert!(again.iter().filter(|p| freed.contains(p)).count() >= 2 * batch, "freed blocks were not reused");
    }

    #[test]
    fn byte_buffers_hold_what_was_written_and_clone_apart() {
        for len in [0, 1, 100, 5000, MAX_BLOCK + 1] {
            let a = SlabBytes::new(len, |b| b.iter_mut().enumerate().for_each(|(i, x)| *x = i as u8));
            let b = a.clone();
            drop(a);
            assert_eq!(b.len(), len);
            assert!(b.iter().enumerate().all(|(i, &x)| x == i as u8));
        }
    }

    #[test]
    fn runs_whose_blocks_are_all_free_go_to_other_classes() {
        // Sizes no other test or index structure uses, in classes of 9 and 4 blocks a run.
        let (a, b) = (7000, 15000);
        let per_run = RUN / class_size(class_of(a));
        let before = RUNS_FREED.load(std::sync::atomic::Ordering::Relaxed);
        let blocks: Vec<usize> = (0..12 * per_run).map(|_| alloc(layout(a)).as_ptr() as usize).collect();
        let runs: HashSet<usize> = blocks.iter().map(|p| p & !(RUN - 1)).collect();
        std::thread::spawn(move || {
            for p in blocks {
                // SAFETY: allocated above with this layout, handed to this thread, freed once.
                unsafe { dealloc(NonNull::new(p as *mut u8).unwrap(), layout(a)) };
            }
        })
        .join()
        .unwrap();
        let freed = RUNS_FREED.load(std::sync::atomic::Ordering::Relaxed) - before;
        assert!(freed >= 8, "only {freed} whole free runs were given back");
        let reused = (0..8 * RUN / class_size(class_of(b)))
            .map(|_| alloc(layout(b)).as_ptr() as usize)
            .filter(|p| runs.contains(&(p & !(RUN - 1))))
            .count();
        assert!(reused > 0, "another class did not reuse the freed runs");
    }

    #[test]
    fn every_size_has_the_smallest_class_that_holds_it() {
        assert_eq!(class_size(CLASSES - 1), MAX_BLOCK);
        for size in 1..=MAX_BLOCK {
            let c = class_of(size);
            assert!(c < CLASSES && class_size(c) >= size.max(MIN_BLOCK), "size {size}: class {c}");
            assert!(class_size(c - 1) < size.max(MIN_BLOCK), "size {size}: class {c} is not the smallest");
            assert!(class_size(c) - size.max(MIN_BLOCK) < class_size(c) / STEPS + GRAIN, "size {size} wastes too much");
        }
    }

    #[test]
    fn big_or_overaligned_layouts_go_to_the_global_allocator() {
        assert!(serves(layout(MAX_BLOCK)));
        assert!(!serves(layout(MAX_BLOCK + 1)));
        assert!(!serves(Layout::from_size_align(64, 64).unwrap()));
        for l in [layout(MAX_BLOCK + 1), Layout::from_size_align(64, 64).unwrap()] {
            let p = alloc(l);
            assert_eq!(p.as_ptr() as usize % l.align(), 0);
            // SAFETY: allocated with `l`, freed once.
            unsafe { dealloc(p, l) };
        }
    }
}
