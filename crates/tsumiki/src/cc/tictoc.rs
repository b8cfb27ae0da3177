//! TicToc (Yu et al., SIGMOD 2016; paper 001): optimistic concurrency control in which
//! each transaction computes its commit timestamp from the data it touched, with no shared
//! counter.
//!
//! Each record has one 64-bit word: lock (1 bit) | delta = rts - wts (15 bits) | wts (48
//! bits). A read copies the record with its `[wts, rts]`; at commit the write set is locked
//! in address order without waiting (a busy lock aborts), `commit_ts` is the largest of
//! every read `wts` and every written `rts + 1`, each read whose `rts` is below `commit_ts`
//! is extended by CAS (or the transaction aborts if the record changed), and the writes are
//! installed with `wts = rts = commit_ts`.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crossbeam_epoch::Guard;

use super::occ::{unlock_prefix, OccRecord, LOCK};
use super::snapshot::{Order, SnapWorker, SnapshotStats, Snapshots};
use super::{
    all_in_sorted_writes, count_delta, Access, CommitFail, CommitLog, Conflict, Protocol, UnlinkLatch, ValueCell,
    WriteEntry, WriteKind,
};

const DELTA_SHIFT: u32 = 48;
const DELTA_MAX: u64 = (1 << 15) - 1;
const WTS_MASK: u64 = (1 << DELTA_SHIFT) - 1;

#[inline]
fn wts(w: u64) -> u64 {
    w & WTS_MASK
}

#[inline]
fn rts(w: u64) -> u64 {
    wts(w) + ((w >> DELTA_SHIFT) & DELTA_MAX)
}

/// Packs `[wts, rts]` (unlocked). When `rts - wts` does not fit in 15 bits, `wts` is raised
/// so that it does, as TicToc's delta-overflow rule says: readers that saw the older `wts`
/// then fail validation, which is safe.
#[inline]
fn pack(wts: u64, rts: u64) -> u64 {
    debug_assert!(rts >= wts);
    let wts = wts.max(rts.saturating_sub(DELTA_MAX));
    ((rts - wts) << DELTA_SHIFT) | (wts & WTS_MASK)
}

/// A TicToc record: the word is lock(1) | delta(15) | wts(48).
pub type TicTocRecord = OccRecord;

struct ReadEntry {
    rec: *const TicTocRecord,
    wts: u64,
    rts: u64,
}

// SAFETY: the raw pointers name records kept allocated while the transaction runs; the
// state moves between threads only between transactions.
unsafe impl Send for TicTocState {}

/// Per-transaction state of TicToc: the read set, and the write-set locks taken at commit.
pub struct TicTocState {
    reads: Vec<ReadEntry>,
    /// Placeholders the transaction made, each read absent at [0, 0]: kept apart from
    /// `reads`, at 8 bytes instead of 24, since a transaction of 1M new keys makes 1M.
    created: Vec<*const TicTocRecord>,
    /// The word of each write-set record as locked, in write-set order.
    locked: Vec<u64>,
    /// Read records validation found locked: they must be the transaction's own writes.
    locked_reads: Vec<usize>,
}

/// TicToc. Timestamps live in the records; the protocol holds only what snapshot read
/// transactions need (each commit timestamp exceeds the floor they raise).
#[derive(Default)]
pub struct TicToc {
    /// Test only: skip read validation (a planted bug for the isolation checker).
    pub(crate) skip_validation: bool,
    pub(crate) snaps: Snapshots,
}

impl Protocol for TicToc {
    type Record = TicTocRecord;
    type TxnState = TicTocState;
    type Worker = Arc<SnapWorker>;

    fn name(&self) -> &'static str {
        "tictoc"
    }

    fn gap_protection(&self) -> bool {
        true
    }

    fn can_hold_locks(&self) -> bool {
        true
    }

    fn new_worker(&self) -> Arc<SnapWorker> {
        self.snaps.new_worker()
    }

    fn new_txn_state(&self) -> TicTocState {
        TicTocState { reads: Vec::new(), created: Vec::new(), locked: Vec::new(), locked_reads: Vec::new() }
    }

    fn begin(&self, _worker: &Arc<SnapWorker>, st: &mut TicTocState) {
        st.reads.clear();
        st.created.clear();
        st.locked.clear();
    }

    fn state_capacity(&self, st: &TicTocState) -> usize {
        st.reads.capacity() + st.created.capacity() + st.locked.capacity()
    }

    fn new_record(&self, _st: &mut TicTocState) -> TicTocRecord {
        // Absent at every time before its inserter commits, so [0, 0] is a true interval;
        // readers extend it like any other.
        OccRecord::absent()
    }

    fn new_sentinel(&self) -> TicTocRecord {
        OccRecord::absent()
    }

    fn new_loaded(&self, value: &[u8], stamp: u64) -> TicTocRecord {
        // At least 1: committed (placeholders have 0); at `stamp`, after every reader of an
        // evicted record.
        let ts = stamp.max(1);
        OccRecord::loaded(pack(ts, ts), value)
    }

    fn new_loaded_bare(&self, stamp: u64) -> Option<TicTocRecord> {
        let ts = stamp.max(1);
        Some(OccRecord::bare(pack(ts, ts)))
    }

    fn value_cell(rec: &TicTocRecord) -> Option<&ValueCell> {
        Some(&rec.value)
    }

    fn committed_value(&self, rec: &TicTocRecord, guard: &Guard) -> Option<Vec<u8>> {
        rec.committed_value(guard)
    }

    fn created(&self, st: &mut TicTocState, rec: &TicTocRecord) {
        // The creator read the key absent: at the placeholder's initial [0, 0].
        st.created.push(rec);
    }

    fn read(
        &self,
        st: &mut TicTocState,
        rec: &TicTocRecord,
        out: Option<&mut Vec<u8>>,
        guard: &Guard,
    ) -> Result<bool, Access> {
        let (w, present) = rec.read(out, guard)?;
        st.reads.push(ReadEntry { rec, wts: wts(w), rts: rts(w) });
        Ok(present)
    }

    #[inline]
    fn prefetch(&self, rec: &OccRecord, guard: &Guard) {
        rec.value.prefetch(guard);
    }

    fn snapshot_open(&self, _worker: &Arc<SnapWorker>, _st: &mut TicTocState) -> u64 {
        self.snaps.open(Order::Published)
    }

    fn snapshot_close(&self, _st: &mut TicTocState, t: u64) {
        self.snaps.close_sweeping::<OccRecord>(t);
    }

    #[inline]
    fn snapshot_read(
        &self,
        _st: &mut TicTocState,
        rec: &TicTocRecord,
        t: u64,
        out: Option<&mut Vec<u8>>,
        guard: &Guard,
    ) -> Result<bool, Access> {
        rec.read_at(&self.snaps, t, out, guard)
    }

    fn snapshot_count(&self, t: u64) -> Option<u64> {
        self.snaps.count_at(t)
    }

    fn set_count(&self, n: u64) {
        self.snaps.set_base(n);
    }

    fn add_count(&self, n: u64) {
        self.snaps.add_base(n);
    }

    fn snapshot_stats(&self) -> SnapshotStats {
        self.snaps.stats()
    }

    fn write(&self, _st: &mut TicTocState, _rec: &TicTocRecord) -> Result<(), Access> {
        Ok(())
    }

    fn latch_gap(&self, _st: &mut TicTocState, next: &TicTocRecord) -> Result<(), Access> {
        next.lock_spin().map(|_| ())
    }

    fn is_fresh(&self, rec: &TicTocRecord) -> bool {
        // Not `wts == 0`: an unlink that hands a placeholder its gap raises wts, and so
        // does a reader whose extension overflows the delta, with no commit in between.
        rec.value.is_unwritten()
    }

    fn unlatch_gap(&self, _st: &mut TicTocState, next: &TicTocRecord) {
        next.unlock();
    }

    fn commit<L: CommitLog<TicTocRecord>>(
        &self,
        worker: &Arc<SnapWorker>,
        st: &mut TicTocState,
        writes: &mut [WriteEntry<TicTocRecord>],
        guard: &Guard,
        log: &mut L,
    ) -> Result<(), CommitFail> {
        // Lock the write set in address order, without waiting.
        st.locked.clear();
        for (i, w) in writes.iter().enumerate() {
            // SAFETY: records stay allocated while the transaction runs (the engine's retire).
            let rec = unsafe { w.record() };
            let mut cur = rec.word.load(Ordering::Acquire);
            loop {
                if cur & LOCK != 0 {
                    unlock_prefix(writes, &st.locked, i);
                    return Err(Conflict::LockBusy.into());
                }
                // A failed CAS without the lock bit is a reader extending rts: try again.
                match rec.word.compare_exchange_weak(cur, cur | LOCK, Ordering::Acquire, Ordering::Relaxed) {
                    Ok(_) => break,
                    Err(now) => cur = now,
                }
            }
            st.locked.push(cur);
        }
        let installs = writes.iter().any(|w| matches!(w.kind, WriteKind::Value(_)));
        // Before the floor is read (see `Snapshots::enter`).
        let _window = installs.then(|| self.snaps.enter(worker));
        for w in writes.iter_mut() {
            // SAFETY: records stay allocated while the transaction runs; we hold its lock.
            let rec = unsafe { w.record() };
            w.present = rec.value.is_present(guard);
            Snapshots::prefetch_head(&rec.value, guard);
        }
        let mut commit_ts = 0;
        for &w in &st.locked {
            commit_ts = commit_ts.max(rts(w) + 1);
        }
        for r in &st.reads {
            commit_ts = commit_ts.max(r.wts);
        }
        // (`created` read at wts 0.)
        // Above every open snapshot's `T` (read with the write locks held: see
        // `cc::snapshot`). A read-only transaction installs nothing a snapshot could see.
        if !writes.is_empty() {
            commit_ts = commit_ts.max(self.snaps.floor() + 1);
        }
        if !self.skip_validation {
            st.locked_reads.clear();
            let created = st.created.iter().map(|&rec| ReadEntry { rec, wts: 0, rts: 0 });
            for r in st.reads.iter().map(|r| ReadEntry { ..*r }).chain(created) {
                if r.rts >= commit_ts {
                    continue;
                }
                // SAFETY: records stay allocated while the transaction runs (the engine's retire).
                let rec = unsafe { &*r.rec };
                loop {
                    let cur = rec.word.load(Ordering::Acquire);
                    if wts(cur) != r.wts {
                        unlock_prefix(writes, &st.locked, writes.len());
                        return Err(Conflict::ReadValidation.into());
                    }
                    if rts(cur) >= commit_ts {
                        break;
                    }
                    if cur & LOCK != 0 {
                        // Ours (asked below, all at once), it gets commit_ts anyway;
                        // someone else's fails the validation.
                        st.locked_reads.push(r.rec as usize);
                        break;
                    }
                    if rec
                        .word
                        .compare_exchange_weak(cur, pack(wts(cur), commit_ts), Ordering::AcqRel, Ordering::Relaxed)
                        .is_ok()
                    {
                        break;
                    }
                }
            }
            if !all_in_sorted_writes(writes, &mut st.locked_reads) {
                unlock_prefix(writes, &st.locked, writes.len());
                return Err(Conflict::ReadValidation.into());
            }
        }
        if !log.log(commit_ts, writes) {
            unlock_prefix(writes, &st.locked, writes.len());
            return Err(CommitFail::Log);
        }
        let hold = log.hold();
        if installs {
            let keep = self.snaps.begin_install(worker);
            for w in writes.iter() {
                if let WriteKind::Value(_) = w.kind {
                    // SAFETY: records stay allocated while the transaction runs (the engine's retire).
                    self.snaps.store(unsafe { w.record() }, w.kind.value(), keep, commit_ts, guard);
                }
            }
            // Before the locks go: a snapshot that opens after this commit returned sees it.
            self.snaps.publish(worker, commit_ts);
            self.snaps.count(worker, count_delta(writes), keep, commit_ts);
            self.snaps.end_install(worker);
        }
        for w in writes.iter_mut() {
            // SAFETY: records stay allocated while the transaction runs (the engine's retire).
            let rec = unsafe { w.record() };
            if hold {
                // Algorithm 3: readers keep waiting until the group is durable.
                log.keep_locked(&rec.word, pack(commit_ts, commit_ts));
                continue;
            }
            rec.word.store(pack(commit_ts, commit_ts), Ordering::Release);
        }
        self.snaps.sweep_if_due::<OccRecord>();
        Ok(())
    }

    fn abort(&self, _st: &mut TicTocState, _writes: &[WriteEntry<TicTocRecord>]) {
        // Locks are taken only inside `commit`, which releases them itself on failure.
    }

    fn try_latch_absent(&self, rec: &TicTocRecord) -> UnlinkLatch {
        rec.try_latch_absent()
    }

    fn latch_next(&self, next: &TicTocRecord) -> Result<(), Access> {
        // No waiting: the unlinker already holds the record being unlinked, and a committer
        // that holds `next` may be waiting for that record.
        next.try_lock()
    }

    fn unlink(&self, _worker: &Arc<SnapWorker>, rec: &TicTocRecord, next: &TicTocRecord, guard: &Guard) {
        rec.value.mark_removed(guard);
        let gone = rec.word.load(Ordering::Acquire) & !LOCK;
        let cur = next.word.load(Ordering::Acquire) & !LOCK;
        // Later inserts into the merged gap must commit after every reader of either gap.
        let ts = rts(gone).max(rts(cur)) + 1;
        next.word.store(pack(ts, ts), Ordering::Release);
    }

    fn unlatch_next(&self, next: &TicTocRecord) {
        next.unlock();
    }

    fn unlatch_absent(&self, rec: &TicTocRecord) {
        rec.unlock();
    }

    fn try_latch_evict(&self, rec: &TicTocRecord) -> Option<u64> {
        rec.try_latch_evict().map(rts)
    }

    fn evict(&self, _worker: &Arc<SnapWorker>, rec: &TicTocRecord, guard: &Guard) {
        rec.value.remove(guard);
    }

    fn unlatch_evict(&self, rec: &TicTocRecord) {
        rec.unlock();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pack_round_trips_and_handles_delta_overflow() {
        let w = pack(100, 150);
        assert_eq!((wts(w), rts(w)), (100, 150));
        let w = pack(5, 5 + DELTA_MAX + 10);
        assert_eq!(rts(w), 5 + DELTA_MAX + 10);
        assert_eq!(wts(w), 15, "wts is raised so that the delta fits");
        assert_eq!(w & LOCK, 0);
    }
}
