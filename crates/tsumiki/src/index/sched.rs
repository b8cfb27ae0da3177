//! Scheduling points for the shuttle model checker.
//!
//! Every shared-memory step of the Bw-tree protocols (a load or CAS of a mapping-table slot
//! or of a delta's `next` pointer) calls [`point`] first. In normal builds it compiles to
//! nothing; with the `shuttle` feature it yields to shuttle's scheduler, so shuttle can
//! explore the interleavings of those steps across threads.

/// Marks a point where another thread may run before this one continues.
#[inline(always)]
pub(crate) fn point() {
    #[cfg(feature = "shuttle")]
    shuttle::thread::yield_now();
}

#[cfg(feature = "shuttle")]
std::thread_local! {
    /// The planted bug of [`plant_nonatomic_install`]. Per OS thread: shuttle runs every
    /// thread of one test on the test's own OS thread, so a plant reaches that test's model
    /// threads and no other test running beside it.
    static PLANTED_NONATOMIC_INSTALL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Test only (shuttle builds): replaces the delta-install CAS by a racy check-then-store on
/// this thread, so a test can show that the shuttle tests catch a broken CAS protocol.
#[cfg(feature = "shuttle")]
#[doc(hidden)]
pub fn plant_nonatomic_install(on: bool) {
    PLANTED_NONATOMIC_INSTALL.with(|p| p.set(on));
}

/// Whether [`plant_nonatomic_install`] is on for this thread.
#[cfg(feature = "shuttle")]
#[inline]
pub(crate) fn planted_nonatomic_install() -> bool {
    PLANTED_NONATOMIC_INSTALL.with(|p| p.get())
}
