//! Cache-line prefetches: hints that start a load without waiting for it, so that misses
//! on independent addresses overlap (the index's descent, a scan's records).

/// Asks for the cache line holding `*x` (nothing when `None`), without waiting for it.
#[inline(always)]
pub(crate) fn prefetch<T>(x: Option<&T>) {
    if let Some(x) = x {
        prefetch_at((x as *const T).cast());
    }
}

/// Asks for the cache line holding address `p`, without waiting for it.
#[inline(always)]
#[allow(unsafe_code)] // the intrinsic
pub(crate) fn prefetch_at(p: *const u8) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: a prefetch is a hint: it reads nothing the program sees and never faults,
    // whatever the address; SSE is in every x86-64 CPU.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast())
    };
    #[cfg(any(not(target_arch = "x86_64"), miri))]
    let _ = p;
}

/// Asks for every cache line of the `len` bytes from `start` (none when `len` is 0).
#[inline(always)]
pub(crate) fn prefetch_span(start: *const u8, len: usize) {
    for offset in (0..len).step_by(64) {
        prefetch_at(start.wrapping_add(offset));
    }
    if len > 0 {
        // The last line, when the span starts past a line's beginning.
        prefetch_at(start.wrapping_add(len - 1));
    }
}
