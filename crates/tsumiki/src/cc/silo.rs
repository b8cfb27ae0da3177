//! Silo (Tu et al., SOSP 2013): optimistic concurrency control with epoch-based commit
//! TIDs.
//!
//! Each record has a TID word: lock (1 bit) | epoch (31 bits) | sequence (32 bits). A
//! background thread advances the global epoch every 40 ms. At commit the write set is
//! locked in address order (waiting is safe in a global order), the global epoch is read
//! (the serialization point), every read TID is checked unchanged and not locked by anyone
//! else, and the commit TID is the smallest one that is larger than every TID read or
//! written and than the worker's previous TID, and in the current epoch.

use crate::background::Background;
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_epoch::Guard;

use super::occ::{unlock_prefix, OccRecord, LOCK};
use super::snapshot::{Order, SnapWorker, SnapshotStats, Snapshots};
use super::{
    all_in_sorted_writes, count_delta, Access, CommitFail, CommitLog, Conflict, Protocol, UnlinkLatch, ValueCell,
    WriteEntry, WriteKind,
};

const EPOCH_SHIFT: u32 = 32;
/// Silo's epoch length.
pub const EPOCH_INTERVAL: Duration = Duration::from_millis(40);

/// A Silo record: the word is the TID, lock(1) | epoch(31) | sequence(32).
pub type SiloRecord = OccRecord;

struct ReadEntry {
    rec: *const SiloRecord,
    tid: u64,
}

/// Per-transaction state of Silo.
pub struct SiloState {
    reads: Vec<ReadEntry>,
    /// Placeholders the transaction made, each read absent at TID 0: kept apart from
    /// `reads`, at 8 bytes instead of 16 (a transaction of 1M new keys makes 1M).
    created: Vec<*const SiloRecord>,
    locked: Vec<u64>,
    /// Read records validation found locked: they must be the transaction's own writes.
    locked_reads: Vec<usize>,
}

// SAFETY: the raw pointers name records kept allocated while the transaction runs; the
// state moves between threads only between transactions.
unsafe impl Send for SiloState {}

/// A Silo worker: the last TID it committed (commit TIDs of a worker only grow), and its
/// part in snapshots.
pub struct SiloWorker {
    last_tid: AtomicU64,
    snap: Arc<SnapWorker>,
}

struct EpochShared {
    epoch: AtomicU64,
}

/// Silo, with its epoch-advancing thread (stopped when this is dropped).
pub struct Silo {
    shared: Arc<EpochShared>,
    /// The epoch thread, stopped and joined on drop.
    _ticker: Background,
    /// Test only: skip read validation (a planted bug for the isolation checker).
    pub(crate) skip_validation: bool,
    pub(crate) snaps: Snapshots,
}

impl Default for Silo {
    fn default() -> Self {
        Self::new()
    }
}

impl Silo {
    /// Starts the epoch thread.
    pub fn new() -> Self {
        let shared = Arc::new(EpochShared { epoch: AtomicU64::new(1) });
        let s = Arc::clone(&shared);
        let ticker = Background::every("tsumiki-silo-epoch", EPOCH_INTERVAL, move || {
            s.epoch.fetch_add(1, Ordering::AcqRel);
            true
        })
        .expect("spawn the Silo epoch thread");
        Silo { shared, _ticker: ticker, skip_validation: false, snaps: Snapshots::default() }
    }

    /// The current global epoch.
    pub fn epoch(&self) -> u64 {
        self.shared.epoch.load(Ordering::Acquire)
    }

    /// A TID above `floor` and the worker's last one, in the current epoch.
    fn next_tid(&self, worker: &SiloWorker, floor: u64) -> u64 {
        let e = self.epoch();
        let floor = floor.max(worker.last_tid.load(Ordering::Relaxed));
        let tid = (floor + 1).max(e << EPOCH_SHIFT);
        worker.last_tid.store(tid, Ordering::Relaxed);
        tid
    }
}

impl Protocol for Silo {
    type Record = SiloRecord;
    type TxnState = SiloState;
    type Worker = SiloWorker;

    fn name(&self) -> &'static str {
        "silo"
    }

    fn gap_protection(&self) -> bool {
        true
    }

    fn new_worker(&self) -> SiloWorker {
        SiloWorker { last_tid: AtomicU64::new(0), snap: self.snaps.new_worker() }
    }

    fn new_txn_state(&self) -> SiloState {
        SiloState { reads: Vec::new(), created: Vec::new(), locked: Vec::new(), locked_reads: Vec::new() }
    }

    fn begin(&self, _worker: &SiloWorker, st: &mut SiloState) {
        st.reads.clear();
        st.created.clear();
        st.locked.clear();
    }

    fn state_capacity(&self, st: &SiloState) -> usize {
        st.reads.capacity() + st.created.capacity() + st.locked.capacity()
    }

    fn new_record(&self, _st: &mut SiloState) -> SiloRecord {
        OccRecord::absent()
    }

    fn new_sentinel(&self) -> SiloRecord {
        OccRecord::absent()
    }

    fn new_loaded(&self, value: &[u8], stamp: u64) -> SiloRecord {
        // At least TID 1: committed (placeholders have 0); `stamp`: every TID an evicted
        // record had, so that TIDs of a key only grow.
        OccRecord::loaded(stamp.max(1), value)
    }

    fn new_loaded_bare(&self, stamp: u64) -> Option<SiloRecord> {
        Some(OccRecord::bare(stamp.max(1)))
    }

    fn value_cell(rec: &SiloRecord) -> Option<&ValueCell> {
        Some(&rec.value)
    }

    fn committed_value(&self, rec: &SiloRecord, guard: &Guard) -> Option<Vec<u8>> {
        rec.committed_value(guard)
    }

    fn created(&self, st: &mut SiloState, rec: &SiloRecord) {
        // The creator read the key absent: the placeholder's initial TID.
        st.created.push(rec);
    }

    fn read(
        &self,
        st: &mut SiloState,
        rec: &SiloRecord,
        out: Option<&mut Vec<u8>>,
        guard: &Guard,
    ) -> Result<bool, Access> {
        let (tid, present) = rec.read(out, guard)?;
        st.reads.push(ReadEntry { rec, tid });
        Ok(present)
    }

    #[inline]
    fn prefetch(&self, rec: &OccRecord, guard: &Guard) {
        rec.value.prefetch(guard);
    }

    fn snapshot_open(&self, _worker: &SiloWorker, _st: &mut SiloState) -> u64 {
        self.snaps.open(Order::Counter)
    }

    fn snapshot_close(&self, _st: &mut SiloState, t: u64) {
        self.snaps.close_sweeping::<OccRecord>(t);
    }

    #[inline]
    fn snapshot_read(
        &self,
        _st: &mut SiloState,
        rec: &SiloRecord,
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

    fn write(&self, _st: &mut SiloState, _rec: &SiloRecord) -> Result<(), Access> {
        Ok(())
    }

    fn latch_gap(&self, _st: &mut SiloState, next: &SiloRecord) -> Result<(), Access> {
        next.lock_spin().map(|_| ())
    }

    fn is_fresh(&self, rec: &SiloRecord) -> bool {
        // Not `TID == 0`: an unlink that hands a placeholder its gap gives it a TID with
        // no commit in between.
        rec.value.is_unwritten()
    }

    fn unlatch_gap(&self, _st: &mut SiloState, next: &SiloRecord) {
        next.unlock();
    }

    fn commit<L: CommitLog<SiloRecord>>(
        &self,
        worker: &SiloWorker,
        st: &mut SiloState,
        writes: &mut [WriteEntry<SiloRecord>],
        guard: &Guard,
        log: &mut L,
    ) -> Result<(), CommitFail> {
        st.locked.clear();
        for (i, w) in writes.iter().enumerate() {
            // SAFETY: records stay allocated while the transaction runs (the engine's retire).
            match unsafe { w.record() }.lock_spin() {
                Ok(t) => st.locked.push(t),
                Err(_) => {
                    unlock_prefix(writes, &st.locked, i);
                    return Err(Conflict::LockBusy.into());
                }
            }
        }
        let installs = writes.iter().any(|w| matches!(w.kind, WriteKind::Value(_)));
        // Before the stamp is drawn (see `Snapshots::enter`).
        let _window = installs.then(|| self.snaps.enter(&worker.snap));
        for w in writes.iter_mut() {
            // SAFETY: records stay allocated while the transaction runs; we hold its lock.
            let rec = unsafe { w.record() };
            w.present = rec.value.is_present(guard);
            Snapshots::prefetch_head(&rec.value, guard);
        }
        // The serialization point: everything before is ordered before the epoch read.
        fence(Ordering::SeqCst);
        // The snapshot stamp, drawn here while a snapshot is open (see `cc::snapshot`); a
        // commit that draws none is seen by every snapshot that opens after this point.
        let stamp = if installs && self.snaps.any_open() { self.snaps.next_stamp() } else { 0 };
        let mut floor = 0;
        if !self.skip_validation {
            st.locked_reads.clear();
            let created = st.created.iter().map(|&rec| ReadEntry { rec, tid: 0 });
            for r in st.reads.iter().map(|r| ReadEntry { ..*r }).chain(created) {
                // SAFETY: records stay allocated while the transaction runs (the engine's retire).
                let cur = unsafe { &*r.rec }.word.load(Ordering::Acquire);
                if cur & !LOCK != r.tid {
                    unlock_prefix(writes, &st.locked, writes.len());
                    return Err(Conflict::ReadValidation.into());
                }
                if cur & LOCK != 0 {
                    // Ours, or the validation fails: asked below, all at once.
                    st.locked_reads.push(r.rec as usize);
                }
            }
            if !all_in_sorted_writes(writes, &mut st.locked_reads) {
                unlock_prefix(writes, &st.locked, writes.len());
                return Err(Conflict::ReadValidation.into());
            }
        }
        for r in &st.reads {
            floor = floor.max(r.tid);
        }
        for &t in &st.locked {
            floor = floor.max(t);
        }
        let tid = self.next_tid(worker, floor);
        if !log.log(tid, writes) {
            unlock_prefix(writes, &st.locked, writes.len());
            return Err(CommitFail::Log);
        }
        let keep = installs && self.snaps.begin_install(&worker.snap);
        for w in writes.iter_mut() {
            // SAFETY: records stay allocated while the transaction runs (the engine's retire).
            let rec = unsafe { w.record() };
            if let WriteKind::Value(_) = w.kind {
                self.snaps.store(rec, w.kind.value(), keep, stamp, guard);
            }
            rec.word.store(tid, Ordering::Release);
        }
        if installs {
            self.snaps.count(&worker.snap, count_delta(writes), keep, stamp);
            self.snaps.end_install(&worker.snap);
        }
        self.snaps.sweep_if_due::<OccRecord>();
        Ok(())
    }

    fn abort(&self, _st: &mut SiloState, _writes: &[WriteEntry<SiloRecord>]) {}

    fn try_latch_absent(&self, rec: &SiloRecord) -> UnlinkLatch {
        rec.try_latch_absent()
    }

    fn latch_next(&self, next: &SiloRecord) -> Result<(), Access> {
        // No waiting: the unlinker already holds the record being unlinked, and a committer
        // that holds `next` may be waiting for that record.
        next.try_lock()
    }

    fn unlink(&self, worker: &SiloWorker, rec: &SiloRecord, next: &SiloRecord, guard: &Guard) {
        rec.value.mark_removed(guard);
        let floor = (rec.word.load(Ordering::Acquire) & !LOCK).max(next.word.load(Ordering::Acquire) & !LOCK);
        let tid = self.next_tid(worker, floor);
        next.word.store(tid, Ordering::Release);
    }

    fn unlatch_next(&self, next: &SiloRecord) {
        next.unlock();
    }

    fn unlatch_absent(&self, rec: &SiloRecord) {
        rec.unlock();
    }

    fn try_latch_evict(&self, rec: &SiloRecord) -> Option<u64> {
        rec.try_latch_evict()
    }

    fn evict(&self, _worker: &SiloWorker, rec: &SiloRecord, guard: &Guard) {
        rec.value.remove(guard);
    }

    fn unlatch_evict(&self, rec: &SiloRecord) {
        rec.unlock();
    }
}
