//! Strict two-phase locking with a reader/writer lock per record, in two deadlock-free
//! flavours: NoWait (any conflict aborts) and WaitDie (an older transaction waits for a
//! younger holder; a younger one dies).
//!
//! The lock is one 64-bit word: writer (1 bit) | reader count (15 bits) | a timestamp (48
//! bits): the writer's, or, while readers hold it, a lower bound of the oldest reader's
//! (it only falls while readers come, and resets when the last leaves). Wait-die needs the
//! oldest holder; a bound that may be too old only makes a requester die more often, never
//! wait for a younger one, so no cycle of waits can form.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crossbeam_epoch::Guard;

use super::snapshot::{Chained, Order, SnapWorker, SnapshotStats, Snapshots};
use super::{
    count_delta, Access, AddrMap, Backoff, CommitFail, CommitLog, Conflict, Protocol, UnlinkLatch, ValueCell,
    WriteEntry, WriteKind,
};

const WRITER: u64 = 1 << 63;
const READER_SHIFT: u32 = 48;
const READER_MAX: u64 = (1 << 15) - 1;
const TS_MASK: u64 = (1 << READER_SHIFT) - 1;
/// Timestamp of maintenance latches: older than no one, so transactions wait for them.
const MAINT_TS: u64 = TS_MASK;
/// Set by a committer in its exclusive lock words before it draws its commit stamp, and
/// cleared when it releases them: snapshot readers wait while it is set (see
/// `cc::snapshot`). The top bit of the reader count, which is 0 under a writer.
const INSTALLING: u64 = 1 << 62;

#[inline]
fn readers(w: u64) -> u64 {
    (w >> READER_SHIFT) & READER_MAX
}

#[inline]
fn ts_of(w: u64) -> u64 {
    w & TS_MASK
}

/// Drops one reader from `rec`'s lock word (the last one clears it).
fn release_shared(rec: &TwoPlRecord) {
    let mut cur = rec.lock.load(Ordering::Relaxed);
    loop {
        let n = readers(cur);
        let new = if n <= 1 { 0 } else { ((n - 1) << READER_SHIFT) | ts_of(cur) };
        match rec.lock.compare_exchange_weak(cur, new, Ordering::Release, Ordering::Relaxed) {
            Ok(_) => return,
            Err(now) => cur = now,
        }
    }
}

/// A 2PL record.
pub struct TwoPlRecord {
    lock: AtomicU64,
    value: ValueCell,
}

impl Chained for TwoPlRecord {
    fn cell(&self) -> &ValueCell {
        &self.value
    }

    fn try_latch_sweep(&self) -> bool {
        self.lock.compare_exchange(0, WRITER | MAINT_TS, Ordering::Acquire, Ordering::Relaxed).is_ok()
    }

    fn unlatch_sweep(&self) {
        self.lock.store(0, Ordering::Release);
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Shared,
    Exclusive,
}

/// Per-transaction state of 2PL: its timestamp and the locks it holds.
pub struct TwoPlState {
    ts: u64,
    held: Vec<(*const TwoPlRecord, Mode)>,
    /// Index into `held` by record, once `held` is long enough for a scan to be slow.
    by_rec: AddrMap<usize>,
}

// SAFETY: the raw pointers name records kept allocated while the transaction runs; the
// state moves between threads only between transactions.
unsafe impl Send for TwoPlState {}

impl TwoPlState {
    const SCAN_MAX: usize = 16;

    fn mode(&self, rec: *const TwoPlRecord) -> Option<(usize, Mode)> {
        if self.held.len() <= Self::SCAN_MAX {
            self.held.iter().position(|&(r, _)| r == rec).map(|i| (i, self.held[i].1))
        } else {
            self.by_rec.get(&(rec as usize)).map(|&i| (i, self.held[i].1))
        }
    }

    fn push(&mut self, rec: *const TwoPlRecord, mode: Mode) {
        self.held.push((rec, mode));
        if self.held.len() == Self::SCAN_MAX + 1 {
            for (i, &(r, _)) in self.held.iter().enumerate() {
                self.by_rec.insert(r as usize, i);
            }
        } else if self.held.len() > Self::SCAN_MAX + 1 {
            self.by_rec.insert(rec as usize, self.held.len() - 1);
        }
    }
}

/// Strict 2PL; `wait_die` picks WaitDie over NoWait.
pub struct TwoPl {
    wait_die: bool,
    clock: AtomicU64,
    pub(crate) snaps: Snapshots,
}

impl TwoPl {
    /// NoWait: a lock conflict aborts at once.
    pub fn no_wait() -> Self {
        TwoPl { wait_die: false, clock: AtomicU64::new(1), snaps: Snapshots::default() }
    }

    /// WaitDie: older transactions wait, younger ones abort.
    pub fn wait_die() -> Self {
        TwoPl { wait_die: true, clock: AtomicU64::new(1), snaps: Snapshots::default() }
    }

    /// What a requester does when `cur` is held against it.
    fn on_busy(&self, st: &TwoPlState, rec: &TwoPlRecord, cur: u64, backoff: &mut Backoff) -> Result<(), Access> {
        if cur & WRITER != 0 {
            let guard = &crossbeam_epoch::pin();
            if rec.value.is_removed(guard) {
                return Err(Access::Removed);
            }
        }
        if !self.wait_die {
            return Err(Conflict::LockBusy.into());
        }
        if st.ts < ts_of(cur) {
            backoff.snooze();
            Ok(())
        } else {
            Err(Conflict::Died.into())
        }
    }

    fn lock_shared(&self, st: &mut TwoPlState, rec: &TwoPlRecord) -> Result<(), Access> {
        let mut backoff = Backoff::new();
        loop {
            let cur = rec.lock.load(Ordering::Acquire);
            if cur & WRITER != 0 {
                self.on_busy(st, rec, cur, &mut backoff)?;
                continue;
            }
            let n = readers(cur);
            if n == READER_MAX {
                backoff.snooze();
                continue;
            }
            let ts = if n == 0 { st.ts } else { ts_of(cur).min(st.ts) };
            let new = ((n + 1) << READER_SHIFT) | ts;
            if rec.lock.compare_exchange_weak(cur, new, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                st.push(rec, Mode::Shared);
                return Ok(());
            }
        }
    }

    fn lock_exclusive(&self, st: &mut TwoPlState, rec: &TwoPlRecord) -> Result<(), Access> {
        let held = st.mode(rec);
        if let Some((_, Mode::Exclusive)) = held {
            return Ok(());
        }
        let mut backoff = Backoff::new();
        let mine = WRITER | st.ts;
        loop {
            let cur = rec.lock.load(Ordering::Acquire);
            let can = cur == 0 || (held.is_some() && cur & WRITER == 0 && readers(cur) == 1);
            if can {
                if rec.lock.compare_exchange_weak(cur, mine, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                    match held {
                        Some((i, _)) => st.held[i].1 = Mode::Exclusive,
                        None => st.push(rec, Mode::Exclusive),
                    }
                    return Ok(());
                }
                continue;
            }
            self.on_busy(st, rec, cur, &mut backoff)?;
        }
    }

    fn release_all(&self, st: &mut TwoPlState) {
        self.release_all_but(st, |_| false);
    }

    /// Releases the transaction's locks, except the exclusive ones `keep` takes over.
    fn release_all_but(&self, st: &mut TwoPlState, mut keep: impl FnMut(&AtomicU64) -> bool) {
        for &(rec, mode) in &st.held {
            // SAFETY: records we hold locks on cannot be unlinked (that needs the lock),
            // and the transaction is still pinned.
            let rec = unsafe { &*rec };
            match mode {
                Mode::Exclusive if keep(&rec.lock) => {}
                Mode::Exclusive => rec.lock.store(0, Ordering::Release),
                Mode::Shared => release_shared(rec),
            }
        }
        st.held.clear();
        st.by_rec.clear();
    }
}

impl Protocol for TwoPl {
    type Record = TwoPlRecord;
    type TxnState = TwoPlState;
    type Worker = Arc<SnapWorker>;

    fn name(&self) -> &'static str {
        if self.wait_die {
            "2pl-waitdie"
        } else {
            "2pl-nowait"
        }
    }

    fn can_hold_locks(&self) -> bool {
        true
    }

    fn gap_protection(&self) -> bool {
        true
    }

    // No worker state: a 2PL committer's lock words tell snapshots all they need
    // (`INSTALLING`).
    fn new_worker(&self) -> Arc<SnapWorker> {
        self.snaps.new_worker()
    }

    fn new_txn_state(&self) -> TwoPlState {
        TwoPlState { ts: 0, held: Vec::new(), by_rec: AddrMap::default() }
    }

    fn begin(&self, _worker: &Arc<SnapWorker>, st: &mut TwoPlState) {
        st.ts = self.clock.fetch_add(1, Ordering::Relaxed) & TS_MASK;
        debug_assert!(st.held.is_empty());
    }

    fn state_capacity(&self, st: &TwoPlState) -> usize {
        st.held.capacity()
    }

    fn new_record(&self, st: &mut TwoPlState) -> TwoPlRecord {
        TwoPlRecord { lock: AtomicU64::new(WRITER | st.ts), value: ValueCell::absent() }
    }

    fn new_loaded(&self, value: &[u8], stamp: u64) -> TwoPlRecord {
        let r = self.new_loaded_bare(stamp).expect("2PL records have a cell");
        // SAFETY: the record is not published yet, and its cell is empty: nothing is deferred.
        r.value.store(Some(value), unsafe { crossbeam_epoch::unprotected() });
        r
    }

    fn new_loaded_bare(&self, _stamp: u64) -> Option<TwoPlRecord> {
        Some(TwoPlRecord { lock: AtomicU64::new(0), value: ValueCell::absent() })
    }

    fn value_cell(rec: &TwoPlRecord) -> Option<&ValueCell> {
        Some(&rec.value)
    }

    fn committed_value(&self, rec: &TwoPlRecord, guard: &Guard) -> Option<Vec<u8>> {
        // A shared lock for the read alone, as a maintenance reader (it does not lower the
        // word's oldest-reader timestamp): a writer installs under its exclusive lock.
        let mut backoff = Backoff::new();
        loop {
            let cur = rec.lock.load(Ordering::Acquire);
            if cur & WRITER != 0 || readers(cur) == READER_MAX {
                if rec.value.is_removed(guard) {
                    return None;
                }
                backoff.snooze();
                continue;
            }
            let n = readers(cur);
            let ts = if n == 0 { MAINT_TS } else { ts_of(cur) };
            let new = ((n + 1) << READER_SHIFT) | ts;
            if rec.lock.compare_exchange_weak(cur, new, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                break;
            }
        }
        let mut v = Vec::new();
        let present = rec.value.load_into(Some(&mut v), guard);
        release_shared(rec);
        present.then_some(v)
    }

    fn new_sentinel(&self) -> TwoPlRecord {
        TwoPlRecord { lock: AtomicU64::new(0), value: ValueCell::absent() }
    }

    fn created(&self, st: &mut TwoPlState, rec: &TwoPlRecord) {
        st.push(rec, Mode::Exclusive);
    }

    fn read(
        &self,
        st: &mut TwoPlState,
        rec: &TwoPlRecord,
        out: Option<&mut Vec<u8>>,
        guard: &Guard,
    ) -> Result<bool, Access> {
        if st.mode(rec).is_none() {
            self.lock_shared(st, rec)?;
        }
        Ok(rec.value.load_into(out, guard))
    }

    #[inline]
    fn prefetch(&self, rec: &TwoPlRecord, guard: &Guard) {
        rec.value.prefetch(guard);
    }

    fn snapshot_open(&self, _worker: &Arc<SnapWorker>, _st: &mut TwoPlState) -> u64 {
        self.snaps.open(Order::Clock(&self.clock))
    }

    fn snapshot_close(&self, _st: &mut TwoPlState, t: u64) {
        self.snaps.close_sweeping::<TwoPlRecord>(t);
    }

    fn snapshot_read(
        &self,
        _st: &mut TwoPlState,
        rec: &TwoPlRecord,
        t: u64,
        out: Option<&mut Vec<u8>>,
        guard: &Guard,
    ) -> Result<bool, Access> {
        // No lock: a writer's exclusive lock only says it may install later, with a stamp
        // above `t` unless it is marked installing already.
        let installing = || rec.lock.load(Ordering::Acquire) & (WRITER | INSTALLING) == WRITER | INSTALLING;
        self.snaps.read_when_free(&rec.value, t, out, guard, installing)
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

    fn write(&self, st: &mut TwoPlState, rec: &TwoPlRecord) -> Result<(), Access> {
        self.lock_exclusive(st, rec)
    }

    fn latch_gap(&self, st: &mut TwoPlState, next: &TwoPlRecord) -> Result<(), Access> {
        // The next-key lock, held to the end of the transaction.
        self.lock_exclusive(st, next)
    }

    fn is_fresh(&self, _rec: &TwoPlRecord) -> bool {
        // A placeholder is created under the next-key lock, which excludes every reader of
        // the gap until its creator ends.
        false
    }

    fn unlatch_gap(&self, _st: &mut TwoPlState, _next: &TwoPlRecord) {}

    fn commit<L: CommitLog<TwoPlRecord>>(
        &self,
        worker: &Arc<SnapWorker>,
        st: &mut TwoPlState,
        writes: &mut [WriteEntry<TwoPlRecord>],
        guard: &Guard,
        log: &mut L,
    ) -> Result<(), CommitFail> {
        for w in writes.iter().filter(|w| matches!(w.kind, WriteKind::Value(_))) {
            // SAFETY: records stay allocated while the transaction runs; we hold its exclusive lock.
            unsafe { w.record() }.lock.fetch_or(INSTALLING, Ordering::SeqCst);
        }
        let installs = writes.iter().any(|w| matches!(w.kind, WriteKind::Value(_)));
        // Before the clock is drawn (see `Snapshots::enter`).
        let _window = installs.then(|| self.snaps.enter(worker));
        for w in writes.iter_mut() {
            // SAFETY: records stay allocated while the transaction runs; we hold its exclusive lock.
            let rec = unsafe { w.record() };
            w.present = rec.value.is_present(guard);
            Snapshots::prefetch_head(&rec.value, guard);
        }
        // Every lock is held: a clock value taken now orders this commit after every one
        // it depends on (they released their locks, and took their value, before).
        let ts = self.clock.fetch_add(1, Ordering::SeqCst) & TS_MASK;
        if !log.log(ts, writes) {
            return Err(CommitFail::Log); // the engine's abort releases the locks
        }
        // A snapshot opened since the draw has `T` above `ts`: it needs the old values.
        let keep = self.snaps.any_open();
        for w in writes.iter_mut() {
            if let WriteKind::Value(_) = w.kind {
                // SAFETY: records stay allocated while the transaction runs; we hold its exclusive lock.
                self.snaps.store(unsafe { w.record() }, w.kind.value(), keep, ts + 1, guard);
            }
        }
        if installs {
            self.snaps.count(worker, count_delta(writes), keep, ts + 1);
        }
        if log.hold() {
            // NLR group commit: exclusive locks stay until the group is durable (shared
            // ones may go: the commit point has passed, and reads expose nothing).
            self.release_all_but(st, |word| {
                log.keep_locked(word, 0);
                true
            });
        } else {
            self.release_all(st);
        }
        self.snaps.sweep_if_due::<TwoPlRecord>();
        Ok(())
    }

    fn abort(&self, st: &mut TwoPlState, _writes: &[WriteEntry<TwoPlRecord>]) {
        self.release_all(st);
    }

    fn try_latch_absent(&self, rec: &TwoPlRecord) -> UnlinkLatch {
        let guard = &crossbeam_epoch::pin();
        if rec.value.is_present(guard) || rec.value.is_removed(guard) {
            return UnlinkLatch::NotAbsent;
        }
        if rec.lock.compare_exchange(0, WRITER | MAINT_TS, Ordering::Acquire, Ordering::Relaxed).is_err() {
            return UnlinkLatch::Busy;
        }
        if rec.value.is_present(guard) || rec.value.is_removed(guard) {
            rec.lock.store(0, Ordering::Release);
            return UnlinkLatch::NotAbsent;
        }
        if Snapshots::has_chain(&rec.value, guard) {
            // A snapshot may still see it present: it leaves after the sweep.
            rec.lock.store(0, Ordering::Release);
            return UnlinkLatch::Busy;
        }
        UnlinkLatch::Latched
    }

    fn latch_next(&self, next: &TwoPlRecord) -> Result<(), Access> {
        // Its holder may be a long transaction: do not wait, the unlink is retried later.
        match next.lock.compare_exchange(0, WRITER | MAINT_TS, Ordering::Acquire, Ordering::Relaxed) {
            Ok(_) => Ok(()),
            Err(_) => {
                let guard = &crossbeam_epoch::pin();
                Err(if next.value.is_removed(guard) { Access::Removed } else { Conflict::LockBusy.into() })
            }
        }
    }

    fn unlink(&self, _worker: &Arc<SnapWorker>, rec: &TwoPlRecord, next: &TwoPlRecord, guard: &Guard) {
        rec.value.mark_removed(guard);
        next.lock.store(0, Ordering::Release);
    }

    fn unlatch_next(&self, next: &TwoPlRecord) {
        next.lock.store(0, Ordering::Release);
    }

    fn unlatch_absent(&self, rec: &TwoPlRecord) {
        rec.lock.store(0, Ordering::Release);
    }

    fn try_latch_evict(&self, rec: &TwoPlRecord) -> Option<u64> {
        // No holder and no waiter's claim: removed records keep their lock for good.
        rec.lock.compare_exchange(0, WRITER | MAINT_TS, Ordering::Acquire, Ordering::Relaxed).ok()?;
        if Snapshots::has_chain(&rec.value, &crossbeam_epoch::pin()) {
            // A record with kept versions stays: reloaded, it would have no history.
            rec.lock.store(0, Ordering::Release);
            return None;
        }
        Some(0)
    }

    fn evict(&self, _worker: &Arc<SnapWorker>, rec: &TwoPlRecord, guard: &Guard) {
        rec.value.remove(guard);
    }

    fn unlatch_evict(&self, rec: &TwoPlRecord) {
        rec.lock.store(0, Ordering::Release);
    }
}
