//! A global allocator that counts live heap bytes, for the memory tests. Each test binary
//! that uses it declares `#[global_allocator] static ALLOC: Counting = Counting;`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering};

/// Forwards to the system allocator, counting bytes in [`LIVE`].
pub struct Counting;

/// Live heap bytes (allocated minus freed) since the start of the process.
pub static LIVE: AtomicIsize = AtomicIsize::new(0);

/// The highest [`LIVE`] seen since the last [`reset_peak`].
pub static PEAK: AtomicIsize = AtomicIsize::new(0);

/// Starts a new peak from the live bytes now; returns them.
#[allow(dead_code)]
pub fn reset_peak() -> isize {
    let live = LIVE.load(Ordering::SeqCst);
    PEAK.store(live, Ordering::SeqCst);
    live
}

/// Counts `delta` live bytes.
fn count(delta: isize) {
    let live = LIVE.fetch_add(delta, Ordering::Relaxed) + delta;
    PEAK.fetch_max(live, Ordering::Relaxed);
}

/// Whether the engine's slab (records and key blocks, on chunks of their own) reports its
/// blocks to [`count`] yet: they are heap bytes to these tests.
static SLAB_OBSERVED: AtomicBool = AtomicBool::new(false);

// SAFETY: forwards to the system allocator, only counting bytes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if !SLAB_OBSERVED.load(Ordering::Relaxed) && !SLAB_OBSERVED.swap(true, Ordering::Relaxed) {
            // Before the engine's first allocation, which comes after the process's first.
            tsumiki::slab::observe(count);
        }
        count(l.size() as isize);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(p, l) }
    }
}

/// Runs deferred epoch destructions `rounds` times, so that garbage is actually freed.
pub fn collect_garbage(rounds: usize) {
    for _ in 0..rounds {
        crossbeam_epoch::pin().flush();
    }
}

/// Live bytes above `baseline` once garbage is collected: collects until they fall under
/// `bound` or `patience` runs out, and returns the last figure. A scoped thread's
/// thread-local destructors (which hand the epoch collector its last bag of garbage) may
/// still run after `thread::scope` returns, so on a loaded machine one round can come too
/// early; a real leak stays above the bound however long we wait.
#[allow(dead_code)]
pub fn live_after_collecting(baseline: isize, bound: isize, rounds: usize, patience: std::time::Duration) -> isize {
    let deadline = std::time::Instant::now() + patience;
    loop {
        collect_garbage(rounds);
        let live = LIVE.load(Ordering::SeqCst) - baseline;
        if live < bound || std::time::Instant::now() >= deadline {
            return live;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}
