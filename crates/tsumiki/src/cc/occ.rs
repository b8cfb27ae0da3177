//! The record the optimistic protocols share: one 64-bit word whose top bit is a lock (the
//! rest is TicToc's timestamps or Silo's TID) and a `ValueCell`. Reading it consistently,
//! locking it, and the latches of inserts and unlinks are the same for both.

use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_epoch::Guard;

use super::snapshot::{Chained, Snapshots};
use super::{Access, Backoff, Conflict, UnlinkLatch, ValueCell, WriteEntry};

/// The lock bit of the word.
pub(crate) const LOCK: u64 = 1 << 63;

/// A record of TicToc or Silo.
pub struct OccRecord {
    pub(crate) word: AtomicU64,
    pub(crate) value: ValueCell,
}

impl OccRecord {
    /// An absent record whose word is 0 (a placeholder, or the sentinel).
    pub(crate) fn absent() -> Self {
        OccRecord { word: AtomicU64::new(0), value: ValueCell::absent() }
    }

    /// A committed record with word `word` whose value the caller stores next.
    pub(crate) fn bare(word: u64) -> Self {
        OccRecord { word: AtomicU64::new(word), value: ValueCell::absent() }
    }

    /// A committed record with word `word` holding `value`.
    pub(crate) fn loaded(word: u64, value: &[u8]) -> Self {
        let r = Self::bare(word);
        // SAFETY: the record is not published yet, and its cell is empty: nothing is deferred.
        r.value.store(Some(value), unsafe { crossbeam_epoch::unprotected() });
        r
    }

    /// The installed value, read consistently (waiting while a committer installs).
    pub(crate) fn committed_value(&self, guard: &Guard) -> Option<Vec<u8>> {
        let mut v = Vec::new();
        match self.read(Some(&mut v), guard) {
            Ok((_, true)) => Some(v),
            Ok((_, false)) | Err(_) => None,
        }
    }

    /// Removed records stay locked for good; anyone who meets the lock checks this.
    fn removed_or(&self, other: Access) -> Access {
        let guard = &crossbeam_epoch::pin();
        if self.value.is_removed(guard) {
            Access::Removed
        } else {
            other
        }
    }

    /// Appends the value to `out` (when given) and returns the word it belongs to,
    /// waiting while a writer holds the lock. Returns `(word, present)`.
    #[inline]
    pub(crate) fn read(&self, mut out: Option<&mut Vec<u8>>, guard: &Guard) -> Result<(u64, bool), Access> {
        let mut backoff = Backoff::new();
        // The value is appended to `out`: a retry drops what a torn attempt appended.
        let base = out.as_deref().map_or(0, Vec::len);
        loop {
            let w1 = self.word.load(Ordering::Acquire);
            if w1 & LOCK != 0 {
                if self.value.is_removed(guard) {
                    return Err(Access::Removed);
                }
                backoff.snooze();
                continue;
            }
            if let Some(out) = out.as_deref_mut() {
                out.truncate(base);
            }
            let present = self.value.load_into(out.as_deref_mut(), guard);
            // The value load is Acquire, so this load cannot move before it: an unchanged
            // word means no writer touched the record in between.
            if self.word.load(Ordering::Acquire) == w1 {
                return Ok((w1, present));
            }
        }
    }

    /// A snapshot's read at `t` (see [`super::snapshot`]): waits while the record is
    /// locked (a writer whose stamp may be `<= t` installs under the lock).
    #[inline]
    pub(crate) fn read_at(
        &self,
        snaps: &Snapshots,
        t: u64,
        out: Option<&mut Vec<u8>>,
        guard: &Guard,
    ) -> Result<bool, Access> {
        snaps.read_when_free(&self.value, t, out, guard, || self.word.load(Ordering::Acquire) & LOCK != 0)
    }

    /// Takes the lock, waiting for a holder; returns the word as it was.
    pub(crate) fn lock_spin(&self) -> Result<u64, Access> {
        let mut backoff = Backoff::new();
        loop {
            let w = self.word.load(Ordering::Acquire);
            if w & LOCK != 0 {
                if self.value.is_removed(&crossbeam_epoch::pin()) {
                    return Err(Access::Removed);
                }
                backoff.snooze();
                continue;
            }
            if self.word.compare_exchange_weak(w, w | LOCK, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                return Ok(w);
            }
        }
    }

    /// Takes the lock without waiting.
    pub(crate) fn try_lock(&self) -> Result<(), Access> {
        let cur = self.word.load(Ordering::Acquire);
        if cur & LOCK == 0 && self.word.compare_exchange(cur, cur | LOCK, Ordering::Acquire, Ordering::Relaxed).is_ok()
        {
            return Ok(());
        }
        Err(self.removed_or(Conflict::LockBusy.into()))
    }

    /// Releases the lock, keeping the word.
    pub(crate) fn unlock(&self) {
        self.word.fetch_and(!LOCK, Ordering::Release);
    }

    /// Locks the record for an unlink if it is absent.
    pub(crate) fn try_latch_absent(&self) -> UnlinkLatch {
        let guard = &crossbeam_epoch::pin();
        let cur = self.word.load(Ordering::Acquire);
        if self.value.is_present(guard) || self.value.is_removed(guard) {
            return UnlinkLatch::NotAbsent;
        }
        if cur & LOCK != 0 || self.word.compare_exchange(cur, cur | LOCK, Ordering::Acquire, Ordering::Relaxed).is_err()
        {
            return UnlinkLatch::Busy;
        }
        if self.value.is_present(guard) || self.value.is_removed(guard) {
            self.word.store(cur, Ordering::Release);
            return UnlinkLatch::NotAbsent;
        }
        if Snapshots::has_chain(&self.value, guard) {
            // A snapshot may still see it present: it leaves after the sweep.
            self.word.store(cur, Ordering::Release);
            return UnlinkLatch::Busy;
        }
        UnlinkLatch::Latched
    }
}

impl Chained for OccRecord {
    fn cell(&self) -> &ValueCell {
        &self.value
    }

    fn try_latch_sweep(&self) -> bool {
        let cur = self.word.load(Ordering::Acquire);
        cur & LOCK == 0 && self.word.compare_exchange(cur, cur | LOCK, Ordering::Acquire, Ordering::Relaxed).is_ok()
    }

    fn unlatch_sweep(&self) {
        self.unlock();
    }
}

impl OccRecord {
    /// Locks the record for an eviction if no one holds it; returns its word.
    pub(crate) fn try_latch_evict(&self) -> Option<u64> {
        let cur = self.word.load(Ordering::Acquire);
        if cur & LOCK != 0 || self.word.compare_exchange(cur, cur | LOCK, Ordering::Acquire, Ordering::Relaxed).is_err()
        {
            return None;
        }
        let guard = &crossbeam_epoch::pin();
        if self.value.is_removed(guard) || Snapshots::has_chain(&self.value, guard) {
            // A record with kept versions stays: reloaded, it would have no history.
            self.word.store(cur, Ordering::Release);
            return None;
        }
        Some(cur)
    }
}

/// Restores the first `n` locked words of a write set (`locked[i]` is entry `i`'s word as
/// it was before the lock).
pub(crate) fn unlock_prefix(writes: &[WriteEntry<OccRecord>], locked: &[u64], n: usize) {
    for (w, &word) in writes[..n].iter().zip(locked) {
        // SAFETY: records stay allocated while their transaction runs (the engine's retire).
        unsafe { w.record() }.word.store(word, Ordering::Release);
    }
}
