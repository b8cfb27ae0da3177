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
