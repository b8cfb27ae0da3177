//! MVCC snapshot isolation, as paper 000 section 3.3 specifies it.
//!
//! Each record has a latch and `latest`, the newest version of a singly linked
//! newest-to-oldest chain. A version holds its value, a status (PENDING, COMMITTING,
//! COMMITTED, ABORTED) and a commit timestamp. Timestamps come from one counter: a
//! transaction begins at the counter's value and commits at a `fetch_add`. A read returns
//! the committed version with the largest commit timestamp below the reader's begin
//! timestamp; a write puts a PENDING version at the head, and aborts if the head is another
//! transaction's pending version or a version committed since the writer began
//! (first-committer-wins). Every record access holds the latch.
//!
//! COMMITTING closes a race the paper's description leaves open: a transaction marks its
//! versions COMMITTING before it takes its commit timestamp, so a reader that began later
//! waits for the outcome instead of skipping a version it should see.
//!
//! Garbage collection ([`crate::mvcc::Gc`]) prunes chains on reads or writes; unlinked
//! versions are freed through the epoch.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicI64, AtomicPtr, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_epoch::Guard;
use parking_lot::Mutex;

use super::{Access, Backoff, CommitFail, CommitLog, Conflict, Protocol, UnlinkLatch, WriteEntry, WriteKind};
use crate::mvcc::{keep_plan, Gc, GcStats};

const PENDING: u8 = 0;
const COMMITTING: u8 = 1;
const COMMITTED: u8 = 2;
const ABORTED: u8 = 3;

const FREE: u8 = 0;
const HELD: u8 = 1;
const REMOVED: u8 = 2;

/// Marks a worker with no transaction running.
const IDLE: u64 = u64::MAX;

struct Version {
    prev: AtomicPtr<Version>,
    status: AtomicU8,
    commit_ts: AtomicU64,
    /// Written once by the owner before it publishes COMMITTED; read only after that.
    value: UnsafeCell<Option<Box<[u8]>>>,
}

/// Whether the newest committed version from `v` down holds a value (aborted ones
/// skipped; none: absent). Called by a committer for the versions below its own.
fn committed_present(mut v: *mut Version) -> bool {
    while !v.is_null() {
        // SAFETY: versions below a pending one stay while it is unsettled (pruning keeps
        // the newest committed version, which every later snapshot reads).
        let r = unsafe { &*v };
        match r.status.load(Ordering::Acquire) {
            ABORTED => v = r.prev.load(Ordering::Acquire),
            // SAFETY: committed: the value was written before the Acquire load above saw it.
            _ => return unsafe { &*r.value.get() }.is_some(),
        }
    }
    false
}

// SAFETY: `value` is written only by the owning transaction before its Release store of
// COMMITTED, and read by others only after an Acquire load of COMMITTED.
unsafe impl Sync for Version {}
// SAFETY: as above; a version moves between threads only through the chain.
unsafe impl Send for Version {}

impl Version {
    fn bytes(&self) -> i64 {
        // SAFETY: called by the owner, or under the latch after COMMITTED (see `Sync`).
        let len = unsafe { (*self.value.get()).as_ref().map_or(0, |v| v.len()) };
        (std::mem::size_of::<Version>() + len) as i64
    }
}

/// An MVCC record.
pub struct SiRecord {
    latch: AtomicU8,
    latest: AtomicPtr<Version>,
}

impl SiRecord {
    fn lock(&self) -> Result<(), Access> {
        let mut backoff = Backoff::new();
        loop {
            match self.latch.compare_exchange_weak(FREE, HELD, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => return Ok(()),
                Err(REMOVED) => return Err(Access::Removed),
                Err(_) => backoff.snooze(),
            }
        }
    }

    fn unlock(&self) {
        self.latch.store(FREE, Ordering::Release);
    }
}

impl Drop for SiRecord {
    fn drop(&mut self) {
        let mut v = *self.latest.get_mut();
        while !v.is_null() {
            // SAFETY: `drop` has exclusive access; the chain owns its versions.
            let b = unsafe { Box::from_raw(v) };
            v = b.prev.load(Ordering::Relaxed);
        }
    }
}

#[derive(Default)]
struct WorkerStats {
    reclaimed: AtomicU64,
    empty: AtomicU64,
    traversals: AtomicU64,
    unreclaimed: AtomicU64,
    chain_max: AtomicU64,
    chain_sum: AtomicU64,
    chain_count: AtomicU64,
    versions: AtomicI64,
    bytes: AtomicI64,
}

struct ActiveList {
    /// Descending; the first entry is the build timestamp (or, for AOT, the only one: the
    /// oldest active timestamp).
    ts: Vec<u64>,
    built: Option<Instant>,
}

/// An MVCC worker: its published begin timestamp, its cached active list, its counters.
pub struct SiWorker {
    active: Arc<AtomicU64>,
    list: Mutex<ActiveList>,
    stats: Arc<WorkerStats>,
}

/// Per-transaction state of MVCC-SI.
pub struct SiState {
    begin: u64,
    worker: *const SiWorker,
    installed: Vec<(*const SiRecord, *mut Version)>,
    active: Vec<u64>,
    chain: Vec<*mut Version>,
    states: Vec<(Option<u64>, bool)>,
    keep: Vec<bool>,
}

// SAFETY: the raw pointers name the worker slot (alive while the transaction runs) and
// records and versions kept alive by the epoch guard; the state moves between threads
// only between transactions.
unsafe impl Send for SiState {}

/// MVCC with snapshot isolation and a version garbage collector.
pub struct Si {
    /// Test only: writes skip the first-committer-wins check (a planted bug).
    pub(crate) skip_validation: bool,
    gc: Gc,
    refresh: Duration,
    clock: AtomicU64,
    workers: Mutex<Vec<(Arc<AtomicU64>, Arc<WorkerStats>)>>,
}

impl Si {
    /// SI with collector `gc`, whose workers rebuild their active lists every `refresh`.
    pub fn new(gc: Gc, refresh: Duration) -> Self {
        Si { skip_validation: false, gc, refresh, clock: AtomicU64::new(1), workers: Mutex::new(Vec::new()) }
    }

    /// The collector.
    pub fn gc(&self) -> Gc {
        self.gc
    }

    /// Counters summed over every worker.
    pub fn gc_stats(&self) -> GcStats {
        let mut s = GcStats::default();
        let (mut sum, mut count) = (0u64, 0u64);
        for (_, w) in self.workers.lock().iter() {
            s.reclaimed += w.reclaimed.load(Ordering::Relaxed);
            s.empty_traversals += w.empty.load(Ordering::Relaxed);
            s.traversals += w.traversals.load(Ordering::Relaxed);
            s.unreclaimed += w.unreclaimed.load(Ordering::Relaxed);
            s.chain_max = s.chain_max.max(w.chain_max.load(Ordering::Relaxed));
            sum += w.chain_sum.load(Ordering::Relaxed);
            count += w.chain_count.load(Ordering::Relaxed);
            s.versions += w.versions.load(Ordering::Relaxed);
            s.bytes += w.bytes.load(Ordering::Relaxed);
        }
        s.chain_mean = if count == 0 { 0.0 } else { sum as f64 / count as f64 };
        s
    }

    /// The oldest timestamp a running transaction may read at (or the clock, if none).
    fn oldest_active(&self) -> u64 {
        let now = self.clock.load(Ordering::SeqCst);
        self.workers.lock().iter().map(|(a, _)| a.load(Ordering::SeqCst)).fold(now, u64::min)
    }

    /// The active timestamps, newest first, headed by the build timestamp.
    fn build_list(&self, out: &mut Vec<u64>) {
        out.clear();
        // The clock first: a transaction missed by the scan below began after this point.
        let now = self.clock.load(Ordering::SeqCst);
        out.push(now);
        for (a, _) in self.workers.lock().iter() {
            let t = a.load(Ordering::SeqCst);
            if t != IDLE {
                out.push(t);
            }
        }
        out.sort_unstable_by(|a, b| b.cmp(a));
        out.dedup();
        if self.gc == Gc::Aot {
            let oldest = *out.last().expect("not empty");
            out.clear();
            out.push(oldest);
        }
    }

    fn stats<'a>(&self, st: &'a SiState) -> &'a WorkerStats {
        // SAFETY: the worker slot outlives the transaction.
        unsafe { &(*st.worker).stats }
    }

    /// Prunes `rec`'s chain (latched by the caller) with the transaction's active list.
    fn prune(&self, st: &mut SiState, rec: &SiRecord, guard: &Guard) {
        st.chain.clear();
        st.states.clear();
        let mut v = rec.latest.load(Ordering::Acquire);
        while !v.is_null() {
            // SAFETY: chain versions are freed only through the epoch after being unlinked
            // under the latch, which we hold.
            let r = unsafe { &*v };
            let status = r.status.load(Ordering::Acquire);
            let ts = (status == COMMITTED).then(|| r.commit_ts.load(Ordering::Acquire));
            st.chain.push(v);
            st.states.push((ts, status == ABORTED));
            v = r.prev.load(Ordering::Acquire);
        }
        keep_plan(&st.states, &st.active, self.gc == Gc::EpoR, &mut st.keep);
        let stats = self.stats(st);
        stats.traversals.fetch_add(1, Ordering::Relaxed);
        let mut reclaimed = 0u64;
        let mut freed_bytes = 0i64;
        // Relink the kept versions, newest first.
        let mut link: &AtomicPtr<Version> = &rec.latest;
        for (&v, &keep) in st.chain.iter().zip(&st.keep) {
            if keep {
                link.store(v, Ordering::Release);
                // SAFETY: as above.
                link = unsafe { &(*v).prev };
            } else {
                reclaimed += 1;
                // SAFETY: as above; `v` is committed or aborted, so no one writes its value.
                freed_bytes += unsafe { (*v).bytes() };
                let p = v as usize;
                // SAFETY: unlinked under the latch; readers of the chain hold the latch, and
                // pinned threads that copied the pointer earlier are covered by the epoch.
                unsafe { guard.defer_unchecked(move || drop(Box::from_raw(p as *mut Version))) };
            }
        }
        link.store(std::ptr::null_mut(), Ordering::Release);
        let kept = st.keep.iter().filter(|&&k| k).count() as u64;
        stats.unreclaimed.fetch_add(kept.saturating_sub(1), Ordering::Relaxed);
        self.note_chain_len(stats, st.chain.len() as u64);
        if reclaimed == 0 {
            stats.empty.fetch_add(1, Ordering::Relaxed);
        } else {
            stats.reclaimed.fetch_add(reclaimed, Ordering::Relaxed);
            stats.versions.fetch_sub(reclaimed as i64, Ordering::Relaxed);
            stats.bytes.fetch_sub(freed_bytes, Ordering::Relaxed);
        }
    }

    fn note_chain(&self, st: &SiState, len: u64) {
        self.note_chain_len(self.stats(st), len);
    }

    fn note_chain_len(&self, s: &WorkerStats, len: u64) {
        s.chain_sum.fetch_add(len, Ordering::Relaxed);
        s.chain_count.fetch_add(1, Ordering::Relaxed);
        if len > s.chain_max.load(Ordering::Relaxed) {
            s.chain_max.fetch_max(len, Ordering::Relaxed);
        }
    }

    fn end(&self, st: &mut SiState) {
        st.installed.clear();
        // SAFETY: the worker slot outlives the transaction.
        unsafe { &*st.worker }.active.store(IDLE, Ordering::SeqCst);
    }
}

/// Waits while `v` is COMMITTING; returns its settled status.
fn settled(v: &Version) -> u8 {
    let mut backoff = Backoff::new();
    loop {
        let s = v.status.load(Ordering::Acquire);
        if s != COMMITTING {
            return s;
        }
        backoff.snooze();
    }
}

impl Protocol for Si {
    type Record = SiRecord;
    type TxnState = SiState;
    type Worker = SiWorker;

    fn name(&self) -> &'static str {
        "mvcc-si"
    }

    fn gap_protection(&self) -> bool {
        false
    }

    fn new_worker(&self) -> SiWorker {
        let active = Arc::new(AtomicU64::new(IDLE));
        let stats = Arc::new(WorkerStats::default());
        self.workers.lock().push((Arc::clone(&active), Arc::clone(&stats)));
        SiWorker { active, list: Mutex::new(ActiveList { ts: Vec::new(), built: None }), stats }
    }

    fn new_txn_state(&self) -> SiState {
        SiState {
            begin: 0,
            worker: std::ptr::null(),
            installed: Vec::new(),
            active: Vec::new(),
            chain: Vec::new(),
            states: Vec::new(),
            keep: Vec::new(),
        }
    }

    fn begin(&self, worker: &SiWorker, st: &mut SiState) {
        // Publish before use, and make sure no commit slipped in between: a list builder
        // then either sees this timestamp or read a clock value no newer than it.
        let mut c = self.clock.load(Ordering::SeqCst);
        loop {
            worker.active.store(c, Ordering::SeqCst);
            let again = self.clock.load(Ordering::SeqCst);
            if again == c {
                break;
            }
            c = again;
        }
        st.begin = c;
        st.worker = worker;
        st.installed.clear();
        if self.gc != Gc::None {
            let mut list = worker.list.lock();
            if list.built.is_none_or(|b| b.elapsed() >= self.refresh) {
                self.build_list(&mut list.ts);
                list.built = Some(Instant::now());
            }
            st.active.clone_from(&list.ts);
        }
    }

    fn state_capacity(&self, st: &SiState) -> usize {
        st.installed.capacity() + st.chain.capacity()
    }

    fn snapshot_open(&self, worker: &SiWorker, st: &mut SiState) -> u64 {
        // Every MVCC-SI transaction reads a snapshot already: the one it began at.
        self.begin(worker, st);
        st.begin
    }

    fn snapshot_close(&self, st: &mut SiState, _t: u64) {
        self.abort(st, &[]);
    }

    fn snapshot_read(
        &self,
        st: &mut SiState,
        rec: &SiRecord,
        _t: u64,
        out: Option<&mut Vec<u8>>,
        guard: &Guard,
    ) -> Result<bool, Access> {
        self.read(st, rec, out, guard)
    }

    fn new_record(&self, _st: &mut SiState) -> SiRecord {
        SiRecord { latch: AtomicU8::new(FREE), latest: AtomicPtr::new(std::ptr::null_mut()) }
    }

    fn new_loaded(&self, value: &[u8], _stamp: u64) -> SiRecord {
        // Timestamp 0 even after evictions: a record leaves only when its newest version is
        // older than every running snapshot, so every snapshot from then on sees it.
        let v = Box::into_raw(Box::new(Version {
            prev: AtomicPtr::new(std::ptr::null_mut()),
            status: AtomicU8::new(COMMITTED),
            // Below every begin timestamp of this process (the clock starts at 1).
            commit_ts: AtomicU64::new(0),
            value: UnsafeCell::new(Some(value.into())),
        }));
        SiRecord { latch: AtomicU8::new(FREE), latest: AtomicPtr::new(v) }
    }

    fn committed_value(&self, rec: &SiRecord, _guard: &Guard) -> Option<Vec<u8>> {
        // The latch keeps the chain stable (garbage collection prunes under it).
        rec.lock().ok()?;
        let mut v = rec.latest.load(Ordering::Acquire);
        let mut out = None;
        while !v.is_null() {
            // SAFETY: the chain is latched, so its versions stay allocated.
            let r = unsafe { &*v };
            if r.status.load(Ordering::Acquire) == COMMITTED {
                // SAFETY: committed versions are immutable.
                out = unsafe { (*r.value.get()).as_deref().map(<[u8]>::to_vec) };
                break;
            }
            v = r.prev.load(Ordering::Acquire);
        }
        rec.unlock();
        out
    }

    fn new_sentinel(&self) -> SiRecord {
        self.new_record(&mut self.new_txn_state())
    }

    fn created(&self, _st: &mut SiState, _rec: &SiRecord) {}

    fn read(&self, st: &mut SiState, rec: &SiRecord, out: Option<&mut Vec<u8>>, guard: &Guard) -> Result<bool, Access> {
        rec.lock()?;
        let mut v = rec.latest.load(Ordering::Acquire);
        let mut len = 0u64;
        let mut found = None;
        while !v.is_null() {
            len += 1;
            // SAFETY: under the latch (see `prune`).
            let r = unsafe { &*v };
            if settled(r) == COMMITTED && r.commit_ts.load(Ordering::Acquire) < st.begin {
                found = Some(r);
                break;
            }
            v = r.prev.load(Ordering::Acquire);
        }
        // SAFETY: COMMITTED was loaded with Acquire above; the owner no longer writes it.
        let value = found.and_then(|r| unsafe { (*r.value.get()).as_deref() });
        let present = value.is_some();
        if let (Some(out), Some(v)) = (out, value) {
            out.extend_from_slice(v);
        }
        if self.gc.on_read() {
            self.prune(st, rec, guard);
        } else {
            self.note_chain(st, len);
        }
        rec.unlock();
        Ok(present)
    }

    fn write(&self, st: &mut SiState, rec: &SiRecord) -> Result<(), Access> {
        rec.lock()?;
        let head = rec.latest.load(Ordering::Acquire);
        let mut v = head;
        let mut len = 0u64;
        while !v.is_null() {
            len += 1;
            // SAFETY: under the latch.
            let r = unsafe { &*v };
            match r.status.load(Ordering::Acquire) {
                ABORTED => v = r.prev.load(Ordering::Acquire),
                COMMITTED if r.commit_ts.load(Ordering::Acquire) < st.begin => break,
                // The planted bug skips first-committer-wins, not the pending check: a
                // write over another's pending version would be a dirty write.
                COMMITTED if self.skip_validation => break,
                _ => {
                    // Another writer's pending version, or one committed after we began.
                    rec.unlock();
                    return Err(Conflict::WriteWrite.into());
                }
            }
        }
        let new = Box::into_raw(Box::new(Version {
            prev: AtomicPtr::new(head),
            status: AtomicU8::new(PENDING),
            commit_ts: AtomicU64::new(0),
            value: UnsafeCell::new(None),
        }));
        rec.latest.store(new, Ordering::Release);
        st.installed.push((rec, new));
        let stats = self.stats(st);
        stats.versions.fetch_add(1, Ordering::Relaxed);
        stats.bytes.fetch_add(std::mem::size_of::<Version>() as i64, Ordering::Relaxed);
        if self.gc.on_write() {
            self.prune(st, rec, &crossbeam_epoch::pin());
        } else {
            self.note_chain(st, len + 1);
        }
        rec.unlock();
        Ok(())
    }

    fn latch_gap(&self, _st: &mut SiState, _next: &SiRecord) -> Result<(), Access> {
        Ok(())
    }

    fn is_fresh(&self, _rec: &SiRecord) -> bool {
        false
    }

    fn unlatch_gap(&self, _st: &mut SiState, _next: &SiRecord) {}

    fn commit<L: CommitLog<SiRecord>>(
        &self,
        _worker: &SiWorker,
        st: &mut SiState,
        writes: &mut [WriteEntry<SiRecord>],
        _guard: &Guard,
        log: &mut L,
    ) -> Result<(), CommitFail> {
        if !st.installed.is_empty() {
            let stats = self.stats(st);
            for &(rec, v) in &st.installed {
                let i = writes
                    .binary_search_by_key(&(rec as usize), |w| w.rec as usize)
                    .expect("installed versions are in the write set");
                // The version below ours that counts: first-committer-wins left no other
                // writer's above it.
                // SAFETY: our own version, linked under the record's latch.
                writes[i].present = committed_present(unsafe { &*v }.prev.load(Ordering::Acquire));
                if let WriteKind::Value(Some(val)) = &writes[i].kind {
                    stats.bytes.fetch_add(val.len() as i64, Ordering::Relaxed);
                    // SAFETY: our own PENDING version: no one else reads or writes its value.
                    unsafe { *(*v).value.get() = Some(val.as_slice().into()) };
                }
                // SAFETY: our own version: pruning keeps unsettled versions, so it lives until we settle it.
                unsafe { &*v }.status.store(COMMITTING, Ordering::SeqCst);
            }
            let ts = self.clock.fetch_add(1, Ordering::SeqCst);
            // COMMITTING versions hold back readers and writers until this returns.
            if !log.log(ts, writes) {
                return Err(CommitFail::Log); // the engine's abort marks them ABORTED
            }
            for &(_, v) in &st.installed {
                // SAFETY: as above.
                let r = unsafe { &*v };
                r.commit_ts.store(ts, Ordering::Release);
                r.status.store(COMMITTED, Ordering::Release);
            }
        }
        self.end(st);
        Ok(())
    }

    fn abort(&self, st: &mut SiState, _writes: &[WriteEntry<SiRecord>]) {
        for &(_, v) in &st.installed {
            // SAFETY: our own version: pruning keeps unsettled versions, so it lives until we settle it.
            unsafe { &*v }.status.store(ABORTED, Ordering::Release);
        }
        if !st.worker.is_null() {
            self.end(st);
        }
    }

    fn try_latch_absent(&self, rec: &SiRecord) -> UnlinkLatch {
        if rec.latch.compare_exchange(FREE, HELD, Ordering::Acquire, Ordering::Relaxed).is_err() {
            return if rec.latch.load(Ordering::Relaxed) == REMOVED {
                UnlinkLatch::NotAbsent
            } else {
                UnlinkLatch::Busy
            };
        }
        let mut v = rec.latest.load(Ordering::Acquire);
        let verdict = loop {
            if v.is_null() {
                // Empty, or only aborted versions: absent for everyone.
                break UnlinkLatch::Latched;
            }
            // SAFETY: under the latch.
            let r = unsafe { &*v };
            match r.status.load(Ordering::Acquire) {
                ABORTED => v = r.prev.load(Ordering::Acquire),
                COMMITTED => {
                    // SAFETY: COMMITTED, loaded with Acquire.
                    let tombstone = unsafe { (*r.value.get()).is_none() };
                    break if !tombstone {
                        UnlinkLatch::NotAbsent
                    } else if r.commit_ts.load(Ordering::Acquire) < self.oldest_active() {
                        UnlinkLatch::Latched
                    } else {
                        // Someone may still read an older version: later.
                        UnlinkLatch::Busy
                    };
                }
                _ => break UnlinkLatch::Busy,
            }
        };
        if verdict != UnlinkLatch::Latched {
            rec.unlock();
        }
        verdict
    }

    fn latch_next(&self, _next: &SiRecord) -> Result<(), Access> {
        Ok(())
    }

    fn unlink(&self, worker: &SiWorker, rec: &SiRecord, _next: &SiRecord, _guard: &Guard) {
        remove_chain(worker, rec);
    }

    fn unlatch_next(&self, _next: &SiRecord) {}

    fn unlatch_absent(&self, rec: &SiRecord) {
        rec.unlock();
    }

    fn try_latch_evict(&self, rec: &SiRecord) -> Option<u64> {
        if rec.latch.compare_exchange(FREE, HELD, Ordering::Acquire, Ordering::Relaxed).is_err() {
            return None;
        }
        let mut v = rec.latest.load(Ordering::Acquire);
        let stamp = loop {
            if v.is_null() {
                break Some(0);
            }
            // SAFETY: under the latch.
            let r = unsafe { &*v };
            match r.status.load(Ordering::Acquire) {
                ABORTED => v = r.prev.load(Ordering::Acquire),
                COMMITTED => {
                    let ts = r.commit_ts.load(Ordering::Acquire);
                    // Older versions are then garbage for every snapshot.
                    break (ts < self.oldest_active()).then_some(ts);
                }
                _ => break None,
            }
        };
        if stamp.is_none() {
            rec.unlock();
        }
        stamp
    }

    fn evict(&self, worker: &SiWorker, rec: &SiRecord, _guard: &Guard) {
        remove_chain(worker, rec);
    }

    fn unlatch_evict(&self, rec: &SiRecord) {
        rec.unlock();
    }
}

/// Marks a latched record removed for good and takes its versions out of the statistics
/// (the chain goes with the record, freed through the epoch with it).
fn remove_chain(worker: &SiWorker, rec: &SiRecord) {
    rec.latch.store(REMOVED, Ordering::Release);
    let (mut n, mut bytes) = (0i64, 0i64);
    let mut v = rec.latest.load(Ordering::Acquire);
    while !v.is_null() {
        // SAFETY: latched for good; settled versions only.
        let r = unsafe { &*v };
        n += 1;
        bytes += r.bytes();
        v = r.prev.load(Ordering::Acquire);
    }
    worker.stats.versions.fetch_sub(n, Ordering::Relaxed);
    worker.stats.bytes.fetch_sub(bytes, Ordering::Relaxed);
}
