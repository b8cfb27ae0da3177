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
