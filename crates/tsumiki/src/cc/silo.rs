//! Silo (Tu et al., SOSP 2013): optimistic concurrency control with epoch-based commit
//! TIDs.
//!
//! Each record has a TID word: lock (1 bit) | epoch (31 bits) | sequence (32 bits). A
//! background thread advances the global epoch every 40 ms. At commit the write set is
//! locked in address order (waiting is safe in a global order), the global epoch is read
//! (the serialization point), every read TID is checked unchanged and not locked by anyone
//! else, and the commit TID is the smallest one that is larger than every TID read or
//! written and than the worker's previous TID, and in the current epoch.

use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_epoch::Guard;

use super::{in_sorted_writes, Access, Backoff, Conflict, Protocol, UnlinkLatch, ValueCell, WriteEntry, WriteKind};

const LOCK: u64 = 1 << 63;
const EPOCH_SHIFT: u32 = 32;
/// Silo's epoch length.
pub const EPOCH_INTERVAL: Duration = Duration::from_millis(40);

/// A Silo record.
pub struct SiloRecord {
    tid: AtomicU64,
    value: ValueCell,
}

struct ReadEntry {
    rec: *const SiloRecord,
    tid: u64,
}

/// Per-transaction state of Silo.
pub struct SiloState {
    reads: Vec<ReadEntry>,
    locked: Vec<u64>,
}

// SAFETY: the raw pointers name records kept alive by the transaction's epoch guard; the
// state moves between threads only between transactions.
unsafe impl Send for SiloState {}

/// A Silo worker: the last TID it committed (commit TIDs of a worker only grow).
#[derive(Default)]
pub struct SiloWorker {
    last_tid: AtomicU64,
}

struct EpochShared {
    epoch: AtomicU64,
    stop: AtomicBool,
}

/// Silo, with its epoch-advancing thread (stopped when this is dropped).
pub struct Silo {
    shared: Arc<EpochShared>,
    ticker: Option<JoinHandle<()>>,
    /// Test only: skip read validation (a planted bug for the isolation checker).
    #[doc(hidden)]
    pub skip_validation: bool,
}

impl Default for Silo {
    fn default() -> Self {
        Self::new()
    }
}

impl Silo {
    /// Starts the epoch thread.
    pub fn new() -> Self {
        let shared = Arc::new(EpochShared { epoch: AtomicU64::new(1), stop: AtomicBool::new(false) });
        let s = Arc::clone(&shared);
        let ticker = std::thread::Builder::new()
            .name("tsumiki-silo-epoch".into())
            .spawn(move || {
                while !s.stop.load(Ordering::Acquire) {
                    std::thread::park_timeout(EPOCH_INTERVAL);
                    s.epoch.fetch_add(1, Ordering::AcqRel);
                }
            })
            .expect("spawn the Silo epoch thread");
        Silo { shared, ticker: Some(ticker), skip_validation: false }
    }

    /// The current global epoch.
    pub fn epoch(&self) -> u64 {
        self.shared.epoch.load(Ordering::Acquire)
    }

    fn lock_spin(&self, rec: &SiloRecord) -> Result<u64, Access> {
        let guard = &crossbeam_epoch::pin();
        let mut backoff = Backoff::new();
        loop {
            let w = rec.tid.load(Ordering::Acquire);
            if w & LOCK != 0 {
                if rec.value.is_removed(guard) {
                    return Err(Access::Removed);
                }
                backoff.snooze();
                continue;
            }
            if rec.tid.compare_exchange_weak(w, w | LOCK, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                return Ok(w);
            }
        }
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

impl Drop for Silo {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(t) = self.ticker.take() {
            t.thread().unpark();
            let _ = t.join();
        }
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
        SiloWorker::default()
    }

    fn new_txn_state(&self) -> SiloState {
        SiloState { reads: Vec::new(), locked: Vec::new() }
    }

    fn begin(&self, _worker: &SiloWorker, st: &mut SiloState) {
        st.reads.clear();
        st.locked.clear();
    }

    fn new_record(&self, _st: &mut SiloState) -> SiloRecord {
        SiloRecord { tid: AtomicU64::new(0), value: ValueCell::absent() }
    }

    fn new_sentinel(&self) -> SiloRecord {
        SiloRecord { tid: AtomicU64::new(0), value: ValueCell::absent() }
    }

    fn created(&self, st: &mut SiloState, rec: &SiloRecord) {
        // The creator read the key absent: the placeholder's initial TID.
        st.reads.push(ReadEntry { rec, tid: 0 });
    }

    fn read(
        &self,
        st: &mut SiloState,
        rec: &SiloRecord,
        out: Option<&mut Vec<u8>>,
        guard: &Guard,
    ) -> Result<bool, Access> {
        let mut backoff = Backoff::new();
        let mut out = out;
        loop {
            let t1 = rec.tid.load(Ordering::Acquire);
            if t1 & LOCK != 0 {
                if rec.value.is_removed(guard) {
                    return Err(Access::Removed);
                }
                backoff.snooze();
                continue;
            }
            let present = rec.value.load_into(out.as_deref_mut(), guard);
            let t2 = rec.tid.load(Ordering::Acquire);
            if t1 == t2 {
                st.reads.push(ReadEntry { rec, tid: t1 });
                return Ok(present);
            }
        }
    }

    fn write(&self, _st: &mut SiloState, _rec: &SiloRecord) -> Result<(), Access> {
        Ok(())
    }

    fn latch_gap(&self, _st: &mut SiloState, next: &SiloRecord) -> Result<(), Access> {
        self.lock_spin(next).map(|_| ())
    }

    fn is_fresh(&self, rec: &SiloRecord) -> bool {
        // Commit TIDs are at least 1 << 32; placeholders start at 0.
        rec.tid.load(Ordering::Acquire) & !LOCK == 0
    }

    fn unlatch_gap(&self, _st: &mut SiloState, next: &SiloRecord) {
        next.tid.fetch_and(!LOCK, Ordering::Release);
    }

    fn commit(
        &self,
        worker: &SiloWorker,
        st: &mut SiloState,
        writes: &mut [WriteEntry<SiloRecord>],
        guard: &Guard,
    ) -> Result<(), Conflict> {
        st.locked.clear();
        for (i, w) in writes.iter().enumerate() {
            // SAFETY: pinned by the transaction's guard.
            match self.lock_spin(unsafe { w.record() }) {
                Ok(t) => st.locked.push(t),
                Err(_) => {
                    unlock_prefix(writes, &st.locked, i);
                    return Err(Conflict::LockBusy);
                }
            }
        }
        // The serialization point: everything before is ordered before the epoch read.
        fence(Ordering::SeqCst);
        let mut floor = 0;
        if !self.skip_validation {
            for r in &st.reads {
                // SAFETY: pinned by the transaction's guard.
                let cur = unsafe { &*r.rec }.tid.load(Ordering::Acquire);
                if cur & !LOCK != r.tid || (cur & LOCK != 0 && !in_sorted_writes(writes, r.rec)) {
                    unlock_prefix(writes, &st.locked, writes.len());
                    return Err(Conflict::ReadValidation);
                }
            }
        }
        for r in &st.reads {
            floor = floor.max(r.tid);
        }
        for &t in &st.locked {
            floor = floor.max(t);
        }
        let tid = self.next_tid(worker, floor);
        for w in writes.iter_mut() {
            // SAFETY: pinned by the transaction's guard.
            let rec = unsafe { w.record() };
            if let WriteKind::Value(_) = w.kind {
                rec.value.store(w.kind.take_value(), guard);
            }
            rec.tid.store(tid, Ordering::Release);
        }
        Ok(())
    }

    fn abort(&self, _st: &mut SiloState, _writes: &[WriteEntry<SiloRecord>]) {}

    fn try_latch_absent(&self, rec: &SiloRecord) -> UnlinkLatch {
        let guard = &crossbeam_epoch::pin();
        let cur = rec.tid.load(Ordering::Acquire);
        if rec.value.is_present(guard) || rec.value.is_removed(guard) {
            return UnlinkLatch::NotAbsent;
        }
        if cur & LOCK != 0 || rec.tid.compare_exchange(cur, cur | LOCK, Ordering::Acquire, Ordering::Relaxed).is_err() {
            return UnlinkLatch::Busy;
        }
        if rec.value.is_present(guard) || rec.value.is_removed(guard) {
            rec.tid.store(cur, Ordering::Release);
            return UnlinkLatch::NotAbsent;
        }
        UnlinkLatch::Latched
    }

    fn latch_next(&self, next: &SiloRecord) -> Result<(), Access> {
        // No waiting: the unlinker already holds the record being unlinked, and a committer
        // that holds `next` may be waiting for that record.
        let cur = next.tid.load(Ordering::Acquire);
        if cur & LOCK == 0 && next.tid.compare_exchange(cur, cur | LOCK, Ordering::Acquire, Ordering::Relaxed).is_ok() {
            return Ok(());
        }
        let guard = &crossbeam_epoch::pin();
        Err(if next.value.is_removed(guard) { Access::Removed } else { Conflict::LockBusy.into() })
    }

    fn unlink(&self, worker: &SiloWorker, rec: &SiloRecord, next: &SiloRecord, guard: &Guard) {
        rec.value.mark_removed(guard);
        let floor = (rec.tid.load(Ordering::Acquire) & !LOCK).max(next.tid.load(Ordering::Acquire) & !LOCK);
        let tid = self.next_tid(worker, floor);
        next.tid.store(tid, Ordering::Release);
    }

    fn unlatch_next(&self, next: &SiloRecord) {
        next.tid.fetch_and(!LOCK, Ordering::Release);
    }

    fn unlatch_absent(&self, rec: &SiloRecord) {
        rec.tid.fetch_and(!LOCK, Ordering::Release);
    }
}

fn unlock_prefix(writes: &[WriteEntry<SiloRecord>], locked: &[u64], n: usize) {
    for (w, &t) in writes[..n].iter().zip(locked) {
        // SAFETY: pinned by the transaction's guard (held by the caller's caller).
        unsafe { w.record() }.tid.store(t, Ordering::Release);
    }
}
