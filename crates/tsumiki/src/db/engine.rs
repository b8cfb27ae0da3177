//! The generic engine: one index of records, any [`Protocol`], monomorphized.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use crossbeam_epoch::{self as epoch, Guard};
use parking_lot::Mutex;

use crate::cc::{
    Access, AddrMap, CommitFail, CommitLog, Conflict, NoLog, Protocol, UnlinkLatch, WriteEntry, WriteKind,
};
use crate::index::{BwTree, BwTreeBuilder, BwTreeConfig, Cursor, LeafHint, MAX_KEY_LEN};
use crate::store::pages::StoreStats;
use crate::store::{self, CommittedState, Durable};
use crate::wal::storage::Storage;
use crate::wal::{CommitTicket, Lane, LogMode, LogOptions, Release, Wal};

use super::residency::{Clock, Range, Residency, MAX_PIECES, RECORD_OVERHEAD};
use super::{Error, MAX_VALUE_LEN};

/// A record pointer as the index stores it. Records are freed only through the epoch after
/// they leave the index, so a pinned thread may dereference any pointer it loaded.
pub(crate) struct RecPtr<R>(*const R);

impl<R> Clone for RecPtr<R> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<R> Copy for RecPtr<R> {}
// SAFETY: records are `Send + Sync` (a `Protocol` bound); the pointer is only a name.
unsafe impl<R: Send + Sync> Send for RecPtr<R> {}
// SAFETY: as above.
unsafe impl<R: Send + Sync> Sync for RecPtr<R> {}

/// A worker slot: the protocol's per-worker state.
pub(crate) struct Slot<P: Protocol> {
    pub(crate) worker: P::Worker,
    /// The slot's log lane, made at its first logged commit.
    lane: OnceLock<Arc<Lane>>,
    /// The record clock when the slot's running transaction began ([`IDLE`] between
    /// transactions): records retired at or after it stay allocated (see [`Engine::retire`]).
    since: AtomicU64,
    /// Set from a commit's log append to the end of its install; a checkpoint waits for
    /// every slot to clear it before the lanes move to a new generation.
    committing: AtomicBool,
}

/// A pooled slot and the buffers its last transaction left.
type IdleSlot<P> = (Arc<Slot<P>>, Option<Box<TxnBufs<P>>>);

/// [`Slot::since`] of a slot with no transaction running.
const IDLE: u64 = u64::MAX;

/// Reusable buffers of one transaction at a time.
pub(crate) struct TxnBufs<P: Protocol> {
    st: P::TxnState,
    writes: Vec<WriteEntry<P::Record>>,
    /// Position in `writes` by record address, kept once `writes` outgrows a linear scan.
    write_pos: AddrMap<usize>,
    /// Placeholders this transaction put into the index (unlinked if they end absent):
    /// the record and its key's range in `created_keys`.
    created: Vec<(u32, u32, *const P::Record)>,
    created_keys: Vec<u8>,
    /// Key and value buffers of earlier write sets, reused so that a write allocates
    /// nothing in the steady state.
    spare: Vec<Vec<u8>>,
    /// A follower's key, copied out of the index without allocating.
    key_buf: Vec<u8>,
    /// The leaf the last put reached: the next put starts there when its key falls in it
    /// (an ascending fill skips the descent).
    leaf_hint: Option<LeafHint>,
    /// Puts in a row whose key was not in the hinted leaf: past a few (random keys), the
    /// hint is tried only now and then, since each miss costs a look at that leaf.
    hint_misses: u32,
    /// Whether the last put made a new record: the next one then looks for its key's
    /// successor at once (what an insert needs) instead of first looking the key up.
    last_put_new: bool,
    /// [`Counters::ranges_evicted`] at the transaction's first write: while it is
    /// unchanged, no record of the write set left memory.
    evict_mark: u64,
    /// Position in `writes` by key, built only once a record of the write set may have
    /// left memory (see [`TypedTxn::own_rebound`]).
    key_pos: std::collections::HashMap<Vec<u8>, usize>,
}

/// Where [`TypedTxn::place`] found or put a key's record.
enum Place<'a, R> {
    /// The key has a record (present or not).
    Existing(&'a R),
    /// A placeholder this transaction just put into the index.
    New(&'a R),
    /// Another transaction's record appeared meanwhile: look again.
    Retry,
}

// SAFETY: the raw pointers name records kept alive by the epoch while a transaction runs;
// between transactions the buffers hold none that are dereferenced.
unsafe impl<P: Protocol> Send for TxnBufs<P> {}

const WRITE_SCAN_MAX: usize = 8;
/// Spare write-set buffers kept between transactions, and the largest one kept.
const SPARE_MAX: usize = 4096;
const SPARE_BYTES: usize = 4096;
/// The largest write set whose buffers are kept for the next transaction.
const KEEP_ENTRIES: usize = 1 << 14;

/// A write as the engine's callers ask for it (the write set keeps its own copies).
#[derive(Clone, Copy)]
enum Write<'v> {
    /// Set the value (`None` deletes).
    Value(Option<&'v [u8]>),
    /// Write the gap before the record (an insert next to it).
    Gap,
}

impl<P: Protocol> TxnBufs<P> {
    pub(crate) fn new(proto: &P) -> Self {
        TxnBufs {
            st: proto.new_txn_state(),
            writes: Vec::new(),
            write_pos: AddrMap::default(),
            created: Vec::new(),
            created_keys: Vec::new(),
            spare: Vec::new(),
            key_buf: Vec::new(),
            leaf_hint: None,
            hint_misses: 0,
            last_put_new: false,
            evict_mark: 0,
            key_pos: std::collections::HashMap::new(),
        }
    }

    fn clear(&mut self) {
        for w in self.writes.drain(..) {
            Self::recycle(&mut self.spare, w.key);
            if let WriteKind::Value(Some(v)) = w.kind {
                Self::recycle(&mut self.spare, v);
            }
        }
        self.write_pos.clear();
        self.key_pos.clear();
        self.created.clear();
        self.created_keys.clear();
        // A huge transaction does not leave its write set's memory behind in the pool.
        if self.writes.capacity() > KEEP_ENTRIES {
            self.writes = Vec::new();
            self.write_pos = AddrMap::default();
            self.key_pos = std::collections::HashMap::new();
            self.created = Vec::new();
            self.created_keys = Vec::new();
        }
    }

    /// Keeps a small buffer for the next write set (bounded: a huge transaction does not
    /// leave its memory behind).
    fn recycle(spare: &mut Vec<Vec<u8>>, buf: Vec<u8>) {
        if spare.len() < SPARE_MAX && buf.capacity() <= SPARE_BYTES {
            spare.push(buf);
        }
    }

    /// A buffer holding a copy of `bytes`, reused when one is spare.
    fn copy_of(&mut self, bytes: &[u8]) -> Vec<u8> {
        let mut b = self.spare.pop().unwrap_or_default();
        b.clear();
        b.extend_from_slice(bytes);
        b
    }

    /// The placeholders this transaction created, with their keys.
    fn created(&self) -> impl Iterator<Item = (&[u8], *const P::Record)> {
        self.created.iter().map(|&(at, len, rec)| (&self.created_keys[at as usize..(at + len) as usize], rec))
    }

    fn own(&self, rec: *const P::Record) -> Option<usize> {
        if self.writes.len() <= WRITE_SCAN_MAX {
            self.writes.iter().position(|w| w.rec == rec)
        } else {
            self.write_pos.get(&(rec as usize)).copied()
        }
    }
}

/// Counters of one engine.
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) commits: AtomicU64,
    pub(crate) aborts: AtomicU64,
    pub(crate) unlinked: AtomicU64,
    /// Key ranges read from the pages, and those that left memory (with their records).
    pub(crate) ranges_loaded: AtomicU64,
    pub(crate) ranges_evicted: AtomicU64,
    pub(crate) records_evicted: AtomicU64,
}

/// The engine for one protocol.
pub struct Engine<P: Protocol> {
    index: BwTree<RecPtr<P::Record>>,
    sentinel: Box<P::Record>,
    pub(crate) proto: P,
    /// Idle slots, each with the buffers of its last transaction (reused: a pooled
    /// transaction then allocates no write set).
    free_slots: Mutex<Vec<IdleSlot<P>>>,
    /// Keys of deleted records whose unlink could not latch what it needed; retried later.
    pending_unlinks: Mutex<VecDeque<Box<[u8]>>>,
    /// Whether `pending_unlinks` may hold keys: checked by every commit without touching
    /// the mutex's cache line.
    has_pending: AtomicBool,
    pub(crate) counters: Counters,
    pub(crate) durable: Option<Durable>,
    /// Every slot ever made (slots are pooled, never dropped before the engine): scanned
    /// for the oldest running transaction before retired records are freed.
    slots: Mutex<Vec<Arc<Slot<P>>>>,
    /// Ticks at every record retirement; a transaction publishes its value at begin.
    record_clock: AtomicU64,
    /// Records out of the index, with the clock value of their retirement, waiting for
    /// every transaction that began before it to end. In clock order (the clock ticks
    /// under the mutex), so freeing stops at the first one still held: a long transaction
    /// (a checkpoint's slot) made a scan of the whole list per transaction end otherwise.
    retired: Mutex<VecDeque<(u64, RecPtr<P::Record>)>>,
    /// Whether `retired` may hold records (spares transactions its mutex).
    has_retired: AtomicBool,
    /// Closed (above zero) by a checkpoint while the lanes move to a new generation, and by
    /// a read-only transaction that runs alone ([`Engine::exclusive_reads`]): commits wait
    /// before their log append (see [`Slot::committing`]). A count, as both may hold it.
    gate: Gate,
    /// The thread that takes checkpoints; commits wake it when one is due.
    pub(crate) checkpointer: OnceLock<std::thread::Thread>,
    /// The slot checkpoints enter: never pooled, so a checkpoint never takes the slot a
    /// worker's next transaction would get (a commit is a barrier for the deferred commits
    /// of its own slot's lane).
    checkpoint_slot: OnceLock<Arc<Slot<P>>>,
    /// Held by the checkpoint that uses `checkpoint_slot` (an explicit one and the
    /// background thread's must not enter and leave the one slot at once).
    checkpointing: Mutex<()>,
    /// Databases with pages: which key ranges are in the index, and the cache budget
    /// (`None`: everything is in memory for good).
    residency: Option<Residency>,
    /// `Options::cache_bytes`, for [`open_durable`](Self::open_durable).
    pub(crate) cache_bytes: usize,
    /// `Options::read_only`: every write is refused.
    pub(crate) read_only: bool,
    /// The newest stamp of the records evicted so far: reloaded records start there
    /// ([`Protocol::new_loaded`]).
    reload_stamp: AtomicU64,
    /// Set when the records in memory pass the budget and none can leave before a
    /// checkpoint: makes one due.
    cache_pressure: AtomicBool,
}

/// The commit gate's count, on a cache line of its own: every commit reads it, and the
/// engine's fields beside it are written often.
#[repr(align(128))]
struct Gate(AtomicUsize);

impl std::ops::Deref for Gate {
    type Target = AtomicUsize;
    fn deref(&self) -> &AtomicUsize {
        &self.0
    }
}

/// The logging step of one commit: appends the record while the locks are held; under
/// NLR also makes it durable before the protocol installs anything.
struct LogHook<'w> {
    wal: &'w Wal,
    /// Marks the ranges of written keys dirty (databases with pages).
    residency: Option<&'w Residency>,
    guard: &'w Guard,
    lane: &'w Lane,
    private: bool,
    /// NLR group commit: locks stay held until the group is durable.
    hold: bool,
    kept: Vec<(*const AtomicU64, u64)>,
    /// Lane sequence number and LSN / timestamp of the appended record.
    done: Option<(u64, u64)>,
    err: Option<Error>,
}

impl<R> CommitLog<R> for LogHook<'_> {
    fn hold(&self) -> bool {
        self.hold
    }

    fn keep_locked(&mut self, word: &AtomicU64, release: u64) {
        self.kept.push((word, release));
    }

    fn log(&mut self, ts: u64, writes: &[WriteEntry<R>]) -> bool {
        if let Some(res) = self.residency {
            // The records are locked here, and checkpoints wait for this commit: the
            // generation is the one its record goes to.
            let generation = self.wal.generation();
            for w in writes.iter().filter(|w| matches!(w.kind, WriteKind::Value(_))) {
                res.mark_dirty(&w.key, generation, self.guard);
            }
        }
        let r = self.wal.append(self.lane, ts, writes).and_then(|(seq, order)| {
            self.done = Some((seq, order));
            if self.wal.opts.release == Release::Nlr && !self.hold {
                self.wal.flush_to(self.lane, seq, self.private)?;
            }
            Ok(())
        });
        match r {
            Ok(()) => true,
            Err(e) => {
                self.err = Some(e);
                false
            }
        }
    }
}

/// Records per chunk of the scan that rewrites every page (no readable log).
const CLOSE_CHUNK: usize = 4096;

/// The least replayed data recovery gathers before writing it to the pages (a tiny cache
/// would otherwise write a delta per record).
const MIN_REPLAY_BYTES: usize = 1 << 10;

/// What a checkpoint or close reads. Safe while transactions run: the caller is inside a
/// transaction's slot (or at close), so no record it meets is freed meanwhile.
impl<P: Protocol> CommittedState for Engine<P> {
    fn get_sorted<'k>(&self, keys: &mut dyn Iterator<Item = &'k [u8]>, f: &mut dyn FnMut(&'k [u8], Option<Vec<u8>>)) {
        let guard = epoch::pin();
        self.index.get_sorted(keys, &guard, |k, p| {
            // SAFETY: as in `lookup`: the record was in the index under this pin, and
            // records are freed only after every pin entered before they left it.
            f(k, p.and_then(|p| self.proto.committed_value(unsafe { &*p.0 }, &guard)))
        });
    }

    fn enter_helper(&self) {
        self.install_lock_waiter();
    }

    /// Every record's latest committed value, in key order, a chunk at a time (never a
    /// second copy of the database).
    fn scan(&self, f: &mut store::Loader<'_>) -> Result<(), Error> {
        let mut from: Vec<u8> = Vec::new();
        let mut first = true;
        loop {
            let guard = epoch::pin();
            // Resume after the last key written; it may have been deleted meanwhile (a
            // checkpoint runs beside transactions), so drop it by value, not by position.
            let chunk: Vec<(Vec<u8>, RecPtr<P::Record>)> =
                self.index.scan(&from, None).filter(|(k, _)| first || *k != from).take(CLOSE_CHUNK).collect();
            first = false;
            for (k, p) in &chunk {
                // SAFETY: the record was in the index under this pin, and records leave
                // the index before they are retired, retired records outlive every slot
                // entered before (the caller's is), and nothing is freed at close.
                if let Some(v) = self.proto.committed_value(unsafe { &*p.0 }, &guard) {
                    f(k, &v)?;
                }
            }
            match chunk.last() {
                Some((k, _)) if chunk.len() == CLOSE_CHUNK => from.clone_from(k),
                _ => return Ok(()),
            }
        }
    }
}

/// Records per chunk of a scan: each chunk is read, then its membership re-checked.
const SCAN_CHUNK: usize = 64;

impl<P: Protocol> Engine<P> {
    pub(crate) fn new(proto: P, index: BwTreeConfig) -> Result<Self, Error> {
        let sentinel = Box::new(proto.new_sentinel());
        Ok(Engine {
            index: BwTree::with_config(index).map_err(Error::Index)?,
            sentinel,
            proto,
            free_slots: Mutex::new(Vec::new()),
            pending_unlinks: Mutex::new(VecDeque::new()),
            has_pending: AtomicBool::new(false),
            counters: Counters::default(),
            durable: None,
            slots: Mutex::new(Vec::new()),
            record_clock: AtomicU64::new(0),
            retired: Mutex::new(VecDeque::new()),
            has_retired: AtomicBool::new(false),
            gate: Gate(AtomicUsize::new(0)),
            checkpointer: OnceLock::new(),
            checkpoint_slot: OnceLock::new(),
            checkpointing: Mutex::new(()),
            residency: None,
            cache_bytes: usize::MAX,
            read_only: false,
            reload_stamp: AtomicU64::new(0),
            cache_pressure: AtomicBool::new(false),
        })
    }

    /// Opens the database in `storage`: recovers what its files hold into this (empty)
    /// engine, bulk-loaded in key order, then starts a new log.
    pub(crate) fn open_durable(&mut self, storage: Arc<dyn Storage>, log: LogOptions) -> Result<(), Error> {
        let (unchecked_gaps, evict_dirty, evict_unmarked) =
            (log.lazy_gaps_unchecked_for_tests, log.evict_dirty_for_tests, log.evict_unmarked_for_tests);
        let (load_count_unchecked, lookup_pause) = (log.load_count_unchecked_for_tests, log.lookup_pause_for_tests);
        let scan_gap_unguarded = log.scan_gap_unguarded_for_tests;
        let proto = &self.proto;
        let mut builder = BwTreeBuilder::new(self.index.config().clone()).map_err(Error::Index)?;
        // Replay holds at most a quarter of the cache's worth of writes before it moves them
        // to the pages.
        let replay_bytes = (self.cache_bytes / 4).max(MIN_REPLAY_BYTES);
        let opened = store::open(
            storage,
            log,
            proto.name(),
            proto.can_hold_locks(),
            &mut |k, v| {
                let rec = Box::into_raw(Box::new(proto.new_loaded(v, 0)));
                builder.push(k, RecPtr(rec)).map_err(|e| {
                    // SAFETY: never published.
                    drop(unsafe { Box::from_raw(rec) });
                    Error::Corrupt(format!("the recovered state: {e}"))
                })
            },
            replay_bytes,
        );
        let index = builder.finish();
        let durable = match opened {
            Ok(d) => d,
            Err(e) => {
                // Records already loaded are freed with the partial tree.
                if let Ok(t) = index {
                    free_records(&t);
                }
                return Err(e);
            }
        };
        self.index = index.map_err(Error::Index)?;
        // Opened read-only on a full disk: a write is refused as by `Options::read_only`
        // (`Error::ReadOnly`), before the poisoned log would refuse its commit.
        self.read_only |= durable.read_only;
        if durable.lazy {
            let budget = store::records_budget(self.cache_bytes, replay_bytes);
            let mut r = Residency::new(durable.page_lows(), budget, unchecked_gaps);
            (r.evict_dirty, r.evict_unmarked) = (evict_dirty, evict_unmarked);
            (r.load_count_unchecked, r.lookup_pause) = (load_count_unchecked, lookup_pause);
            r.scan_gap_unguarded = scan_gap_unguarded;
            self.residency = Some(r);
        }
        self.durable = Some(durable);
        Ok(())
    }

    /// Flushes the log and writes the pages a clean exit leaves. No transaction may be
    /// running.
    pub(crate) fn close(&self) -> Result<(), Error> {
        let Some(d) = &self.durable else { return Ok(()) };
        d.close(self)
    }

    /// The page store's counters (databases opened with a path).
    pub(crate) fn store_stats(&self) -> Option<StoreStats> {
        self.durable.as_ref().map(|d| d.store_stats())
    }

    /// The record cache's counters.
    pub(crate) fn cache_stats(&self) -> Option<super::CacheStats> {
        let r = self.residency.as_ref()?;
        let guard = &epoch::pin();
        let (ranges, ranges_loaded) = r.counts(guard);
        let map_bytes = r.map_bytes(guard) + self.index.stats().mapping_table_bytes;
        Some(super::CacheStats {
            map_bytes,
            budget: r.budget,
            resident_bytes: r.resident(),
            ranges,
            ranges_loaded,
            loads: self.counters.ranges_loaded.load(Ordering::Relaxed),
            evictions: self.counters.ranges_evicted.load(Ordering::Relaxed),
            records_evicted: self.counters.records_evicted.load(Ordering::Relaxed),
        })
    }

    /// Whether `LogOptions::checkpoint_interval` passed with log written since the last one.
    pub(crate) fn checkpoint_due_by_time(&self) -> bool {
        self.durable.as_ref().is_some_and(|d| d.wal.checkpoint_due_by_time())
    }

    /// Deletes log segments kept for reuse once checkpoints stopped coming (see
    /// `Wal::release_idle_segments`).
    pub(crate) fn release_idle_segments(&self) {
        if let Some(d) = self.durable.as_ref() {
            d.wal.release_idle_segments();
        }
    }

    /// Holds a committer back, after its commit, while the log since the last checkpoint
    /// is far past what makes one due (see [`crate::wal::Wal::throttle`]).
    fn throttle_log(&self) {
        if let Some(d) = &self.durable {
            d.wal.throttle();
        }
    }

    /// Under NLR group commit, makes this thread's wait for a record's lock flush the
    /// pending group that holds it (otherwise the wait spins until some commit fills the
    /// group). Transactions, the checkpoint's thread and its helpers call it.
    #[inline]
    fn install_lock_waiter(&self) {
        if let Some(d) = self.durable.as_ref().filter(|d| d.wal.holds_locks()) {
            crate::cc::set_lock_waiter(Some(d.wal.clone()));
        }
    }

    /// Whether a checkpoint is due by log volume or cache pressure.
    pub(crate) fn checkpoint_due(&self) -> bool {
        self.durable.as_ref().is_some_and(|d| d.wal.checkpoint_due()) || self.cache_pressure.load(Ordering::Acquire)
    }

    /// Takes a checkpoint now, from outside any transaction.
    pub(crate) fn checkpoint_now(&self) -> Result<(), Error> {
        self.install_lock_waiter();
        let _one = self.checkpointing.lock();
        let slot = self.checkpoint_slot.get_or_init(|| self.new_slot()).clone();
        // Entered like a transaction: no record the checkpoint reads is freed meanwhile.
        self.enter(&slot);
        let r = self.checkpoint();
        self.leave(&slot);
        crate::cc::set_lock_waiter(None);
        r
    }

    /// Takes a checkpoint (see `store::Durable::checkpoint`); the caller's slot is entered.
    fn checkpoint(&self) -> Result<(), Error> {
        let Some(d) = &self.durable else { return Ok(()) };
        self.cache_pressure.store(false, Ordering::Release);
        d.checkpoint(|switch| self.exclusive_reads(switch), self)
    }

    /// Closes the commit gate and waits until no commit is past it.
    fn close_gate(&self) {
        self.gate.fetch_add(1, Ordering::SeqCst);
        let slots: Vec<Arc<Slot<P>>> = self.slots.lock().clone();
        for s in &slots {
            while s.committing.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
        }
    }

    /// Runs `f` while no transaction commits writes (the gate opens again when `f` ends,
    /// even by a panic): the state it reads cannot change, so an optimistic protocol's
    /// read-only transaction run inside validates. The fallback of [`crate::Db::view`] for
    /// long reads that keep meeting writers; a checkpoint's switch of generations.
    pub(crate) fn exclusive_reads<T>(&self, f: impl FnOnce() -> T) -> T {
        struct Open<'e>(&'e AtomicUsize);
        impl Drop for Open<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::Release);
            }
        }
        self.close_gate();
        let _open = Open(&self.gate.0);
        f()
    }

    /// Marks `slot` as committing, waiting while a checkpoint holds the gate. With
    /// [`close_gate`](Self::close_gate): each side sets its flag, then reads the other's
    /// (sequentially consistent), so either the commit waits or the checkpoint does.
    #[inline]
    fn enter_commit(&self, slot: &Slot<P>) {
        loop {
            slot.committing.store(true, Ordering::SeqCst);
            if self.gate.load(Ordering::SeqCst) == 0 {
                return;
            }
            slot.committing.store(false, Ordering::SeqCst);
            while self.gate.load(Ordering::Acquire) != 0 {
                std::thread::yield_now();
            }
        }
    }

    /// Marks the database closed without flushing or writing pages (a simulated
    /// crash for tests).
    pub(crate) fn abandon(&self) {
        if let Some(d) = &self.durable {
            d.abandon();
        }
    }

    pub(crate) fn take_slot(&self) -> (Arc<Slot<P>>, Box<TxnBufs<P>>) {
        if let Some((s, bufs)) = self.free_slots.lock().pop() {
            return (s, bufs.unwrap_or_else(|| Box::new(TxnBufs::new(&self.proto))));
        }
        (self.new_slot(), Box::new(TxnBufs::new(&self.proto)))
    }

    /// A new slot, known to reclamation and to the commit gate.
    fn new_slot(&self) -> Arc<Slot<P>> {
        let s = Arc::new(Slot {
            worker: self.proto.new_worker(),
            lane: OnceLock::new(),
            since: AtomicU64::new(IDLE),
            committing: AtomicBool::new(false),
        });
        self.slots.lock().push(Arc::clone(&s));
        s
    }

    /// Publishes the start of a transaction on `slot`: records retired from now on stay
    /// allocated until it ends. Re-checked like a hazard pointer: either a retirer's scan
    /// sees the published value, or this transaction reads a clock past the retirement
    /// (and so, through the clock, sees the record already out of the index).
    fn enter(&self, slot: &Slot<P>) {
        let mut c = self.record_clock.load(Ordering::SeqCst);
        loop {
            slot.since.store(c, Ordering::SeqCst);
            let now = self.record_clock.load(Ordering::SeqCst);
            if now == c {
                return;
            }
            c = now;
        }
    }

    /// Ends the transaction on `slot`, then frees what no running transaction can hold.
    fn leave(&self, slot: &Slot<P>) {
        slot.since.store(IDLE, Ordering::SeqCst);
        if self.has_retired.load(Ordering::Acquire) {
            self.reclaim();
        }
    }

    /// A record has left the index: it is freed once every transaction running now ended.
    /// Transactions hold records (read and write sets) across operations without an epoch
    /// pin, so that a long or idle transaction never stalls the epoch (index nodes and value
    /// buffers, which no transaction holds across operations, go through the epoch).
    fn retire(&self, rec: RecPtr<P::Record>) {
        let mut retired = self.retired.lock();
        let stamp = self.record_clock.fetch_add(1, Ordering::SeqCst);
        retired.push_back((stamp, rec));
        drop(retired);
        self.has_retired.store(true, Ordering::Release);
    }

    /// Frees the retired records older than every running transaction.
    fn reclaim(&self) {
        let Some(mut retired) = self.retired.try_lock() else { return };
        let oldest = self.slots.lock().iter().map(|s| s.since.load(Ordering::SeqCst)).min().unwrap_or(IDLE);
        while let Some(&(_, rec)) = retired.front().filter(|(stamp, _)| *stamp < oldest) {
            retired.pop_front();
            // SAFETY: out of the index since `stamp`; every transaction that could have
            // loaded it began before and has ended (`enter`); nothing else holds records.
            drop(unsafe { Box::from_raw(rec.0 as *mut P::Record) });
        }
        if retired.is_empty() {
            self.has_retired.store(false, Ordering::Release);
        }
    }

    pub(crate) fn return_slot(&self, slot: Arc<Slot<P>>, bufs: Option<Box<TxnBufs<P>>>) {
        self.free_slots.lock().push((slot, bufs));
    }

    /// The record stored under `key`. The caller runs a transaction (or has the engine to
    /// itself), which keeps every record it can load allocated (see [`Engine::retire`]).
    #[inline]
    fn lookup(&self, key: &[u8], _guard: &Guard) -> Option<&P::Record> {
        // SAFETY: records are freed only after every transaction that began before they left
        // the index has ended; the caller's transaction is running.
        self.index.get(key).ok().flatten().map(|p| unsafe { &*p.0 })
    }

    /// The first record at or after `key` (after, when `exclusive`), or the sentinel, and
    /// whether its key is `key` itself. Its key is copied into `key_out` when given (left
    /// empty for the sentinel): a buffer the caller reuses, so a lookup allocates nothing.
    #[inline]
    fn next_record(
        &self,
        key: &[u8],
        exclusive: bool,
        key_out: Option<&mut Vec<u8>>,
        _guard: &Guard,
    ) -> (bool, &P::Record) {
        self.index.first_from_with(key, exclusive, |found| self.found_record(key, found, key_out))
    }

    /// The first record at or past `stop` (`None`: the sentinel), its key into `nk`.
    fn record_at_or_past(&self, stop: Option<&[u8]>, nk: Option<&mut Vec<u8>>, guard: &Guard) -> &P::Record {
        match stop {
            Some(e) => self.next_record(e, false, nk, guard).1,
            None => &self.sentinel,
        }
    }

    /// [`Engine::next_record`] (not exclusive) from a cursor at `key`'s leaf: no descent.
    #[inline]
    fn next_record_at(
        &self,
        at: &Cursor<'_, '_, RecPtr<P::Record>>,
        key: &[u8],
        key_out: Option<&mut Vec<u8>>,
    ) -> (bool, &P::Record) {
        self.found_record(key, at.first_from(false), key_out)
    }

    /// What [`Engine::next_record`] makes of the index's answer.
    #[inline]
    fn found_record(
        &self,
        key: &[u8],
        found: Option<(&[u8], &RecPtr<P::Record>)>,
        key_out: Option<&mut Vec<u8>>,
    ) -> (bool, &P::Record) {
        if let Some(out) = key_out {
            out.clear();
            if let Some((k, _)) = found {
                out.extend_from_slice(k);
            }
        }
        match found {
            // SAFETY: as in `lookup`.
            Some((k, p)) => (k == key, unsafe { &*p.0 }),
            None => (false, &*self.sentinel),
        }
    }

    /// Whether every key range overlapping `from..=to` (`to` `None`: to the end) is in the
    /// index. If one is not, loads it and answers `false`: the caller looks again (a gap
    /// it found may have records in it now). See [`Residency`].
    #[inline]
    fn loaded(&self, from: &[u8], to: Option<&[u8]>) -> Result<bool, Error> {
        match &self.residency {
            Some(r) if !r.all_loaded() => self.load_first_missing(r, from, to),
            _ => Ok(true),
        }
    }

    /// The load count ([`Residency::load_count`]; 0 without ranges): taken before a lookup
    /// that may find a key missing.
    #[inline]
    fn load_count(&self) -> u64 {
        self.residency.as_ref().map_or(0, |r| r.load_count())
    }

    /// Whether a lookup made after [`load_count`](Self::load_count) said `since` still
    /// stands once its ranges were found loaded: no range came back in between (see
    /// [`Residency`]).
    #[inline]
    fn no_load_since(&self, since: u64) -> bool {
        self.residency.as_ref().is_none_or(|r| r.no_load_since(since))
    }

    /// Test only (`LogOptions::lookup_pause_for_tests`): waits between a lookup that found a
    /// key missing and the check of its range.
    #[inline]
    fn pause_after_miss(&self) {
        if self.residency.as_ref().is_some_and(|r| r.lookup_pause) {
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
    }

    /// [`loaded`](Self::loaded) when some range may be missing.
    #[cold]
    fn load_first_missing(&self, r: &Residency, from: &[u8], to: Option<&[u8]>) -> Result<bool, Error> {
        let guard = &epoch::pin();
        let Some(range) = r.first_missing(from, to, guard) else { return Ok(true) };
        let mut clock = r.lock.lock();
        if range.is_loaded() {
            return Ok(false);
        }
        let Some((low, high)) = r.bounds(range, guard) else { return Ok(false) };
        let d = self.durable.as_ref().expect("a database with ranges has files");
        let stamp = self.reload_stamp.load(Ordering::Acquire);
        let mut bytes = 0;
        let mut pending: Vec<(Vec<u8>, RecPtr<P::Record>)> = Vec::new();
        let mut loaded = d.load_range(&low, high.as_deref(), &mut |k, v| {
            pending.push((k.to_vec(), RecPtr(Box::into_raw(Box::new(self.proto.new_loaded(v, stamp))))));
            bytes += (k.len() + v.len() + RECORD_OVERHEAD) as i64;
            if pending.len() >= LOAD_BATCH {
                bytes -= self.insert_loaded(&mut pending)?;
            }
            Ok(())
        });
        if loaded.is_ok() {
            match self.insert_loaded(&mut pending) {
                Ok(b) => bytes -= b,
                Err(e) => loaded = Err(e),
            }
        }
        for (_, rec) in pending.drain(..) {
            // SAFETY: never published (a load that failed before inserting them).
            drop(unsafe { Box::from_raw(rec.0 as *mut P::Record) });
        }
        r.credit_range(range, bytes);
        collect_garbage(bytes as usize / RECORD_OVERHEAD);
        loaded?;
        r.mark_loaded(&mut clock, range);
        self.counters.ranges_loaded.fetch_add(1, Ordering::Relaxed);
        Ok(false)
    }

    /// Inserts loaded records (sorted, from one range) into the index as one batch, and
    /// frees those whose key is there already: a load that failed halfway (the same
    /// committed value), or an insert that placed it while the range was leaving (newer).
    /// Returns the bytes of the records freed. `pending` is empty after.
    fn insert_loaded(&self, pending: &mut Vec<(Vec<u8>, RecPtr<P::Record>)>) -> Result<i64, Error> {
        let batch: Vec<IndexEdit<'_, P::Record>> = pending.iter().map(|(k, p)| (k.as_slice(), Some(*p))).collect();
        let mut added = vec![false; batch.len()];
        let r = self.index.apply_batch(&batch, &mut added);
        drop(batch);
        let guard = &epoch::pin();
        let mut freed = 0;
        for ((k, p), added) in pending.drain(..).zip(added) {
            if !added {
                freed += self.record_bytes(&k, p, guard);
                // SAFETY: never published.
                drop(unsafe { Box::from_raw(p.0 as *mut P::Record) });
            }
        }
        r.map_err(Error::Index)?;
        Ok(freed)
    }

    /// Whether every range overlapping `from..end` (exclusive) is loaded, without loading
    /// any.
    fn covered(&self, from: &[u8], end: Option<&[u8]>) -> bool {
        match self.residency.as_ref().filter(|r| !r.all_loaded()) {
            Some(r) => r.covers(from, end, &epoch::pin()),
            None => true,
        }
    }

    /// Where a scan from `from` must stop this time: the start of the first key range
    /// before `end` that is not in the index (after loading the one `from` is in).
    fn scan_limit(&self, from: &[u8], end: Option<&[u8]>) -> Result<Option<Vec<u8>>, Error> {
        let Some(r) = self.residency.as_ref().filter(|r| !r.all_loaded()) else { return Ok(None) };
        loop {
            while !self.loaded(from, Some(from))? {}
            // Tests widen the window in which the range can leave again.
            self.pause_after_miss();
            let guard = &epoch::pin();
            match r.first_missing(from, end, guard) {
                None => return Ok(None),
                // The range `from` is in left again since it was loaded (another
                // transaction's eviction): its low is at or before `from`, and a scan
                // stopped there would start over below `from` (seen once in CI: a scan
                // returned the first keys of the database). Load it again.
                Some(m) if m.low() <= from => continue,
                Some(m) => return Ok(Some(m.low().to_vec()).filter(|l| end.is_none_or(|e| l.as_slice() < e))),
            }
        }
    }

    /// Evicts clean ranges while the records in memory pass the budget (CLOCK: a range
    /// touched since the hand last passed gets another round). Called after a
    /// transaction ends, inside its slot (which keeps the records it meets allocated), by
    /// one thread at a time; if nothing can leave before a checkpoint
    /// covers the ranges' last writes, one is made due.
    pub(crate) fn evict_over_budget(&self, worker: &P::Worker) {
        let Some(r) = self.residency.as_ref().filter(|r| r.over_budget()) else { return };
        let Some(mut clock) = r.lock.try_lock() else { return };
        let Some(d) = self.durable.as_ref() else { return };
        let covered = if r.evict_dirty { u64::MAX } else { d.covered() };
        let target = (r.budget as i64) / 10 * 9;
        let mut steps = 2 * r.len(&epoch::pin()) + 2;
        let mut blocked_by_dirt = false;
        while r.resident() > target && steps > 0 {
            steps -= 1;
            // One pin per range, not per pass: a pass may evict many ranges, and what they
            // retire (index nodes, range maps, values) is freed only once no pin older
            // than the retirement remains.
            let guard = &epoch::pin();
            let (range, low, high) = r.advance(&mut clock, guard);
            if !range.is_loaded() {
                continue;
            }
            // A range too large to leave at once is split first (written or not: a fresh
            // database is one range), and its lower part considered.
            // Cut into pieces of `split_at` records at once (one new range map).
            let split_at = r.split_records();
            // Counted, not measured: reading a record's value could wait for a 2PL writer,
            // who may itself be waiting for this lock to load a range (a deadlock CI met).
            let mut cuts: Vec<Vec<u8>> = Vec::new();
            let mut seen = 0;
            for (i, (k, _)) in self.index.scan(&low, high.as_deref()).enumerate() {
                if i > 0 && i % split_at == 0 {
                    if cuts.len() == MAX_PIECES {
                        break;
                    }
                    cuts.push(k);
                }
                seen = i + 1;
            }
            // A range of up to twice that leaves whole: a store page loaded again (up to
            // twice `PAGE_TARGET` bytes) would otherwise be split at each eviction, each
            // split a new map (when a split copied the whole map, a verify pass over 10M
            // records under 64 MiB took 80 s instead of 6 once its pages held 130 records).
            if seen <= 2 * split_at {
                cuts.clear();
            }
            // The pieces are new ranges the hand meets later: each gets its two visits
            // (CI met a pass that ran out of steps over the budget after many splits).
            steps += 2 * cuts.len();
            let (range, high) = match cuts.first() {
                Some(at) => (r.split(range, &cuts, split_at as f64 / seen as f64, guard), Some(at.clone())),
                None => (range.clone(), high),
            };
            if range.dirty() > covered {
                blocked_by_dirt = true;
                continue;
            }
            if range.take_reference() {
                continue;
            }
            self.evict_range(worker, r, &mut clock, &range, &low, high.as_deref(), covered, guard);
        }
        drop(clock);
        if r.over_budget() && blocked_by_dirt && !self.cache_pressure.swap(true, Ordering::AcqRel) {
            if let Some(t) = self.checkpointer.get() {
                t.unpark();
            }
        }
    }

    /// The memory counted for one record: key, value and [`RECORD_OVERHEAD`].
    fn record_bytes(&self, key: &[u8], p: RecPtr<P::Record>, guard: &Guard) -> i64 {
        // SAFETY: in the index under the caller's pin.
        let len = self.proto.committed_value(unsafe { &*p.0 }, guard).map_or(0, |v| v.len());
        (key.len() + len + RECORD_OVERHEAD) as i64
    }

    /// Takes the records of `range` (`low..high`) out of the index, if none is held and
    /// none was written since the checkpoint `covered` names. See [`Residency`] for the
    /// order of steps.
    #[allow(clippy::too_many_arguments)]
    fn evict_range(
        &self,
        worker: &P::Worker,
        r: &Residency,
        clock: &mut Clock,
        range: &Arc<Range>,
        low: &[u8],
        high: Option<&[u8]>,
        covered: u64,
        guard: &Guard,
    ) {
        r.mark_unloaded(clock, range);
        // The gap owner past the range: no insert enters the range's last gap meanwhile
        // (an insert latches the follower of its key; one that did before is in the scan).
        let gaps = self.proto.gap_protection();
        let next = loop {
            let next = match high {
                Some(h) if gaps => self.next_record(h, false, None, guard).1,
                _ => &*self.sentinel,
            };
            match self.proto.latch_next(next) {
                Ok(()) => break Some(next),
                Err(Access::Removed) => continue,
                Err(_) => break None,
            }
        };
        let Some(next) = next else {
            r.mark_kept(clock, range);
            return;
        };
        let recs: Vec<(Vec<u8>, RecPtr<P::Record>)> = self.index.scan(low, high).collect();
        let mut stamps = Vec::with_capacity(recs.len());
        for (_, p) in &recs {
            if r.evict_unmarked {
                break;
            }
            // SAFETY: in the index under this pin.
            let rec = unsafe { &*p.0 };
            // An insert in flight: its transaction would have to start over.
            if self.proto.is_fresh(rec) {
                break;
            }
            match self.proto.try_latch_evict(rec) {
                Some(s) => stamps.push(s),
                None => break,
            }
        }
        if r.evict_unmarked {
            // The planted bug: the records leave unmarked. They are leaked, not retired: a
            // transaction still holding one may unlink it, which retires it itself.
            for (k, _) in &recs {
                self.index.delete(k).ok();
            }
            self.proto.unlatch_next(next);
            r.debit_all(range);
            return;
        }
        // Written since the checkpoint (a writer marks the range while it holds the record,
        // so the latches above come after its mark), or held by someone: not now.
        if stamps.len() < recs.len() || range.dirty() > covered {
            for (_, p) in &recs[..stamps.len()] {
                // SAFETY: as above.
                self.proto.unlatch_evict(unsafe { &*p.0 });
            }
            self.proto.unlatch_next(next);
            r.mark_kept(clock, range);
            range.touch();
            return;
        }
        for (_, p) in &recs {
            // SAFETY: as above; latched by us, so it stays until retired below.
            self.proto.evict(worker, unsafe { &*p.0 }, guard);
        }
        // Counted before the records leave the index: a transaction that meets a reloaded
        // record of one of them sees the count moved past its mark (`own_rebound`).
        self.counters.ranges_evicted.fetch_add(1, Ordering::AcqRel);
        let batch: Vec<IndexEdit<'_, P::Record>> = recs.iter().map(|(k, _)| (k.as_slice(), None)).collect();
        let mut unused = vec![false; batch.len()];
        // Latched records stay in the index until they leave, and deletes need no memory:
        // an index error here would be a bug.
        self.index.apply_batch(&batch, &mut unused).expect("keys already in the index are valid");
        for (_, p) in &recs {
            self.retire(*p);
        }
        self.proto.unlatch_next(next);
        if let Some(&max) = stamps.iter().max() {
            self.reload_stamp.fetch_max(max, Ordering::AcqRel);
        }
        r.debit_all(range);
        self.reclaim();
        collect_garbage(recs.len());
        self.counters.records_evicted.fetch_add(recs.len() as u64, Ordering::Relaxed);
    }

    /// The low key of the next window of a reverse scan of `start..end`: the window
    /// ends at `end` and holds at most one leaf of the index and one key range of the
    /// cache, and it starts no lower than `start`. A hint only: the windows are read as
    /// forward scans, so any bounds that tile the range are right.
    fn window_low(&self, start: &[u8], end: Option<&[u8]>) -> Vec<u8> {
        let probe = key_at_or_above_all_below(end);
        let mut low = self.index.leaf_low(&probe);
        if let Some(r) = &self.residency {
            low = low.max(r.range_low_of(&probe, &epoch::pin()));
        }
        low.max(start.to_vec())
    }

    /// Whether `rec` is the sentinel (the gap owner after the last key).
    #[inline]
    fn is_sentinel(&self, rec: &P::Record) -> bool {
        std::ptr::eq(rec, &*self.sentinel)
    }

    /// The protocol.
    pub fn protocol(&self) -> &P {
        &self.proto
    }

    /// Number of keys in the index, including absent ones not unlinked yet (a full scan).
    pub(crate) fn index_len(&self) -> usize {
        self.index.scan(b"", None).count()
    }

    /// Unlinks a deleted (absent) record, if it can latch it and its follower now.
    fn try_unlink(&self, worker: &P::Worker, key: &[u8], rec: *const P::Record, guard: &Guard) -> bool {
        // SAFETY: pinned by `guard`.
        let r = unsafe { &*rec };
        match self.proto.try_latch_absent(r) {
            UnlinkLatch::Latched => {}
            UnlinkLatch::NotAbsent => return false,
            UnlinkLatch::Busy => {
                self.put_off_unlink(key);
                return false;
            }
        }
        let mut nk = Vec::new();
        loop {
            // The follower found stands only if no range came back since (see `Residency`).
            let since = self.load_count();
            let next = if self.proto.gap_protection() {
                self.next_record(key, true, self.residency.is_some().then_some(&mut nk), guard).1
            } else {
                &*self.sentinel
            };
            // The unlink hands the deleted record's gap to its follower; a range loaded
            // between them later would own part of that gap without what it was handed.
            // Wait until the ranges between are loaded (transactions load them).
            if let Some(res) = self.residency.as_ref().filter(|res| self.proto.gap_protection() && !res.all_loaded()) {
                if res.first_missing(key, (!self.is_sentinel(next)).then_some(nk.as_slice()), guard).is_some() {
                    self.proto.unlatch_absent(r);
                    self.put_off_unlink(key);
                    return false;
                }
            }
            match self.proto.latch_next(next) {
                Ok(()) => {}
                Err(Access::Removed) => continue,
                Err(Access::Conflict(_) | Access::Failed) => {
                    self.proto.unlatch_absent(r);
                    self.put_off_unlink(key);
                    return false;
                }
            }
            if self.proto.gap_protection()
                && (!std::ptr::eq(self.next_record(key, true, None, guard).1, next) || !self.no_load_since(since))
            {
                self.proto.unlatch_next(next);
                continue;
            }
            self.proto.unlink(worker, r, next, guard);
            let removed = self.index.delete(key).unwrap_or(false);
            // (The planted unmarked eviction takes records out from under their holders.)
            let planted = self.residency.as_ref().is_some_and(|r| r.evict_unmarked);
            debug_assert!(removed || planted, "a latched record stays in the index until its unlink");
            self.retire(RecPtr(rec));
            if let Some(res) = &self.residency {
                res.credit(key, -((key.len() + RECORD_OVERHEAD) as i64), guard);
            }
            self.counters.unlinked.fetch_add(1, Ordering::Relaxed);
            return true;
        }
    }

    /// Retries a few unlinks that were put off.
    fn put_off_unlink(&self, key: &[u8]) {
        self.pending_unlinks.lock().push_back(key.into());
        self.has_pending.store(true, Ordering::Release);
    }

    fn drain_pending_unlinks(&self, worker: &P::Worker, guard: &Guard) {
        if !self.has_pending.load(Ordering::Acquire) {
            return;
        }
        let batch: Vec<Box<[u8]>> = match self.pending_unlinks.try_lock() {
            // Oldest first: those are the likeliest to be unlinkable by now.
            Some(mut p) => {
                let n = p.len().min(8);
                let batch = p.drain(..n).collect();
                if p.is_empty() {
                    self.has_pending.store(false, Ordering::Release);
                }
                batch
            }
            None => return,
        };
        for key in batch {
            if let Some(rec) = self.lookup(&key, guard) {
                self.try_unlink(worker, &key, rec, guard);
            }
        }
    }
}

/// Frees the records of an index no transaction can reach.
fn free_records<R: Send + Sync + 'static>(index: &BwTree<RecPtr<R>>) {
    for (_, p) in index.scan(b"", None) {
        // SAFETY: the caller owns the index exclusively; each record is owned by its entry.
        drop(unsafe { Box::from_raw(p.0 as *mut R) });
    }
}

impl<P: Protocol> Drop for Engine<P> {
    fn drop(&mut self) {
        if let Some(d) = &self.durable {
            // Held lock words live in the records freed below.
            d.wal.release_all_held();
        }
        free_records(&self.index);
        for (_, p) in self.retired.get_mut().drain(..) {
            // SAFETY: as above; retired records are out of the index and owned by the list.
            drop(unsafe { Box::from_raw(p.0 as *mut P::Record) });
        }
    }
}

fn check_key(key: &[u8]) -> Result<(), Error> {
    if key.len() > MAX_KEY_LEN {
        return Err(Error::KeyTooLong { len: key.len(), max: MAX_KEY_LEN });
    }
    Ok(())
}

fn check_value(value: &[u8]) -> Result<(), Error> {
    if value.len() > MAX_VALUE_LEN {
        return Err(Error::ValueTooLong { len: value.len(), max: MAX_VALUE_LEN });
    }
    Ok(())
}

/// Where a transaction's buffers go back when it ends.
pub(crate) enum Home<'a, P: Protocol> {
    /// A [`super::TypedWorker`]'s: its buffers and slot are reused.
    Worker(&'a mut Option<Box<TxnBufs<P>>>),
    /// [`super::TypedDb::begin`]: the slot returns to the pool.
    Pool(Arc<Slot<P>>),
}

/// A transaction of the generic engine. See [`super::Txn`] for the documented API.
pub struct TypedTxn<'a, P: Protocol> {
    eng: &'a Engine<P>,
    slot: *const Slot<P>,
    bufs: Option<Box<TxnBufs<P>>>,
    home: Option<Home<'a, P>>,
    active: bool,
    /// Operations since the last explicit collection of epoch garbage.
    ops: u32,
    /// Why an operation returned [`Access::Failed`] (loading a page failed).
    failure: Option<Error>,
}

// SAFETY: a transaction holds no epoch guard (each operation pins its own) and no
// thread-local state; its raw pointers name records kept allocated while it runs (see
// `Engine::retire`) and its slot, kept alive by `home`. The C and Python bindings hold
// transactions across calls from any thread.
unsafe impl<P: Protocol> Send for TypedTxn<'_, P> {}

/// Operations between explicit epoch collections: crossbeam collects a few bags of garbage
/// every 128 outermost pins, slower than index operations make garbage, so a transaction
/// helps it along.
const OPS_PER_COLLECT: u32 = 32;

/// One entry of an index batch ([`BwTree::apply_batch`]): insert (where absent) or delete.
type IndexEdit<'k, R> = (&'k [u8], Option<RecPtr<R>>);

/// Records a load inserts into the index per batch.
const LOAD_BATCH: usize = 1024;

/// Hands the epoch collector enough turns to keep up with `writes` index changes made
/// under one pin (a range loaded or evicted). Each turn frees at most 8 bags of 64 deferred
/// destructions (crossbeam-epoch's `COLLECT_STEPS`), and a turn comes only every 32
/// operations ([`OPS_PER_COLLECT`]): without this, loads and evictions, which defer a few
/// nodes per record, outran collection and garbage grew without bound (gigabytes of
/// retired Bw-tree nodes under a cache of a few MiB).
fn collect_garbage(writes: usize) {
    let guard = epoch::pin();
    for _ in 0..writes / 128 + 1 {
        guard.flush();
    }
}

impl<'a, P: Protocol> TypedTxn<'a, P> {
    pub(crate) fn start(eng: &'a Engine<P>, slot: &Slot<P>, mut bufs: Box<TxnBufs<P>>, home: Home<'a, P>) -> Self {
        eng.enter(slot);
        bufs.clear();
        eng.proto.begin(&slot.worker, &mut bufs.st);
        TypedTxn { eng, slot, bufs: Some(bufs), home: Some(home), active: true, ops: 0, failure: None }
    }

    /// Pins the epoch for one operation. Under NLR group commit it also names this
    /// database to the thread's lock-wait hook (its waits flush this database's lanes).
    fn pin(&mut self) -> Guard {
        self.eng.install_lock_waiter();
        let guard = epoch::pin();
        self.ops += 1;
        if self.ops >= OPS_PER_COLLECT {
            self.ops = 0;
            guard.flush();
        }
        guard
    }

    fn worker(&self) -> &P::Worker {
        // SAFETY: the slot is kept alive by `home` (a worker's Arc or the pool Arc).
        unsafe { &(*self.slot).worker }
    }

    fn b(&mut self) -> &mut TxnBufs<P> {
        self.bufs.as_mut().expect("buffers present while the transaction lives")
    }

    fn check_active(&self) -> Result<(), Error> {
        if self.active {
            Ok(())
        } else {
            Err(Error::TxnFinished)
        }
    }

    /// [`check_active`](Self::check_active) for a write: also refused on a read-only
    /// database.
    fn check_writable(&self) -> Result<(), Error> {
        self.check_active()?;
        if self.eng.read_only {
            return Err(Error::ReadOnly);
        }
        Ok(())
    }

    /// Ends the transaction after a conflict met during an operation.
    fn fail<T>(&mut self, c: Conflict) -> Result<T, Error> {
        self.rollback();
        // NLR group commit: the conflict may be with held locks (this worker's own, or an
        // idle one's) that only a flush releases (Algorithm 3: flush early when a lock is
        // busy); a no-wait retry would otherwise meet them again.
        if let Some(d) = self.eng.durable.as_ref().filter(|d| d.wal.holds_locks()) {
            // SAFETY: the slot outlives the transaction (see `worker`).
            if let Some(lane) = unsafe { &*self.slot }.lane.get() {
                d.wal.flush_lane(lane, false)?;
            }
            crate::cc::LockWaiter::on_lock_wait(&*d.wal);
        }
        Err(Error::Conflict(c))
    }

    /// Ends the transaction after an operation failed with [`Access::Failed`].
    fn failed<T>(&mut self) -> Result<T, Error> {
        self.rollback();
        Err(self.failure.take().unwrap_or_else(|| Error::Corrupt("loading a page failed".into())))
    }

    /// [`Engine::loaded`] for an operation: a failure is kept for [`failed`](Self::failed).
    #[inline]
    fn loaded(&mut self, from: &[u8], to: Option<&[u8]>) -> Result<bool, Access> {
        self.eng.loaded(from, to).map_err(|e| match e {
            Error::Conflict(c) => Access::Conflict(c),
            e => {
                self.failure = Some(e);
                Access::Failed
            }
        })
    }

    /// Reads `rec`, the record of `key` (own write first). `Ok(None)`: absent.
    fn read_rec(&mut self, key: &[u8], rec: &P::Record, want: bool, guard: &Guard) -> Result<Option<Vec<u8>>, Access> {
        let eng = self.eng;
        if let Some(i) = self.own_rebound(key, rec)? {
            if let WriteKind::Value(v) = &self.b().writes[i].kind {
                return Ok(v.clone());
            }
        }
        let b = self.bufs.as_mut().expect("buffers");
        let mut value = Vec::new();
        let present = eng.proto.read(&mut b.st, rec, want.then_some(&mut value), guard)?;
        Ok(present.then_some(value))
    }

    /// Reads the gap where `key` would be. `Ok(Some(rec))`: the key exists after all.
    fn read_missing(&mut self, key: &[u8], since: u64, guard: &Guard) -> Result<Option<&'a P::Record>, Access> {
        let eng = self.eng;
        if !eng.proto.gap_protection() {
            // No follower to re-check: the load count vouches that the lookup (made after
            // `since`) saw the range whole.
            eng.pause_after_miss();
            return match self.loaded(key, Some(key))? {
                true if eng.no_load_since(since) => Ok(None),
                // Loaded just now, or came back since the lookup: the key may be there.
                _ => Err(Access::Removed),
            };
        }
        let mut nk = std::mem::take(&mut self.b().key_buf);
        let r = self.read_missing_with(key, &mut nk, guard);
        self.b().key_buf = nk;
        r
    }

    fn read_missing_with(
        &mut self,
        key: &[u8],
        nk: &mut Vec<u8>,
        guard: &Guard,
    ) -> Result<Option<&'a P::Record>, Access> {
        let eng = self.eng;
        loop {
            let since = eng.load_count();
            let (exact, next) = eng.next_record(key, false, Some(nk), guard);
            if exact {
                return Ok(Some(next));
            }
            eng.pause_after_miss();
            // The follower owns the gap only if nothing unloaded lies before it.
            if !self.loaded(key, (!eng.is_sentinel(next)).then_some(nk.as_slice()))? {
                continue;
            }
            match self.read_rec(nk, next, false, guard) {
                Ok(_) => {}
                Err(Access::Removed) => continue,
                Err(e) => return Err(e),
            }
            // Membership re-check: an insert that entered the index before this point has
            // to write `next` at its commit, which the read above then conflicts with. And
            // no range came back since the lookup (it could have left again by now).
            if std::ptr::eq(eng.next_record(key, false, None, guard).1, next) && eng.no_load_since(since) {
                return Ok(None);
            }
        }
    }

    /// The write-set entry of `rec`, the record of `key`. A record the transaction wrote
    /// may have left memory since (eviction takes records that are not locked, and the
    /// optimistic protocols lock only at commit) and `rec` be its reloaded successor: the
    /// entry then moves to `rec` (by key), so that the transaction reads its own write and
    /// writes the key once. Only when an eviction happened since the first write.
    fn own_rebound(&mut self, key: &[u8], rec: &P::Record) -> Result<Option<usize>, Access> {
        let p = rec as *const P::Record;
        let eng = self.eng;
        let b = self.bufs.as_mut().expect("buffers");
        if let Some(i) = b.own(p) {
            return Ok(Some(i));
        }
        if b.writes.is_empty()
            || eng.residency.is_none()
            || eng.is_sentinel(rec)
            || eng.counters.ranges_evicted.load(Ordering::Acquire) == b.evict_mark
        {
            return Ok(None);
        }
        let found = if b.writes.len() <= WRITE_SCAN_MAX {
            b.writes.iter().position(|w| w.key == key)
        } else {
            if b.key_pos.is_empty() {
                for (i, w) in b.writes.iter().enumerate() {
                    b.key_pos.insert(w.key.clone(), i);
                }
            }
            b.key_pos.get(key).copied()
        };
        let Some(i) = found else { return Ok(None) };
        eng.proto.write(&mut b.st, rec)?;
        let old = std::mem::replace(&mut b.writes[i].rec, p);
        if b.writes.len() > WRITE_SCAN_MAX {
            b.write_pos.remove(&(old as usize));
            b.write_pos.insert(p as usize, i);
        }
        Ok(Some(i))
    }

    /// Moves the write-set entries whose records left memory since they were written to
    /// their keys' records now (see [`own_rebound`](Self::own_rebound)), before commit
    /// locks them. A key that is gone meanwhile is a conflict.
    fn rebind_evicted(&mut self, guard: &Guard) -> Result<(), Access> {
        let eng = self.eng;
        if eng.residency.is_none() || eng.counters.ranges_evicted.load(Ordering::Acquire) == self.b().evict_mark {
            return Ok(());
        }
        for i in 0..self.b().writes.len() {
            let key = std::mem::take(&mut self.b().writes[i].key);
            let r = loop {
                match eng.lookup(&key, guard) {
                    Some(rec) if std::ptr::eq(rec, self.b().writes[i].rec) => break Ok(()),
                    Some(rec) => {
                        // SAFETY: records stay allocated while the transaction runs.
                        let rec: &'a P::Record = unsafe { &*(rec as *const P::Record) };
                        self.b().writes[i].key = key.clone();
                        break self.own_rebound(&key, rec).map(|_| ());
                    }
                    None => match self.loaded(&key, Some(&key)) {
                        Ok(true) => break Err(Access::Conflict(Conflict::WriteWrite)),
                        Ok(false) => continue,
                        Err(e) => break Err(e),
                    },
                }
            };
            self.b().writes[i].key = key;
            r?;
        }
        Ok(())
    }

    /// Adds (or upgrades) a write-set entry.
    fn add_write(&mut self, key: &[u8], rec: &P::Record, write: Write<'_>) -> Result<(), Access> {
        let p = rec as *const P::Record;
        let eng = self.eng;
        let own = self.own_rebound(key, rec)?;
        let b = self.b();
        let kind = |b: &mut TxnBufs<P>| match write {
            Write::Value(v) => WriteKind::Value(v.map(|v| b.copy_of(v))),
            Write::Gap => WriteKind::Gap,
        };
        if let Some(i) = own {
            if let Write::Value(_) = write {
                let new = kind(b);
                if let WriteKind::Value(Some(old)) = std::mem::replace(&mut b.writes[i].kind, new) {
                    TxnBufs::<P>::recycle(&mut b.spare, old);
                }
            }
            return Ok(());
        }
        eng.proto.write(&mut b.st, rec)?;
        if b.writes.is_empty() {
            b.evict_mark = eng.counters.ranges_evicted.load(Ordering::Acquire);
        }
        let (key, kind) = (b.copy_of(key), kind(b));
        if !b.key_pos.is_empty() {
            b.key_pos.insert(key.clone(), b.writes.len());
        }
        b.writes.push(WriteEntry { rec: p, key, kind });
        let n = b.writes.len();
        if n == WRITE_SCAN_MAX + 1 {
            for (i, w) in b.writes.iter().enumerate() {
                b.write_pos.insert(w.rec as usize, i);
            }
        } else if n > WRITE_SCAN_MAX + 1 {
            b.write_pos.insert(p as usize, n - 1);
        }
        Ok(())
    }

    /// Finds the record of `key`, or puts a placeholder for it into the index: one descent
    /// for a key that exists, and the follower found by the same descent for one that does
    /// not.
    fn place(&mut self, key: &[u8], guard: &Guard) -> Result<Place<'a, P::Record>, Access> {
        let since = self.eng.load_count();
        let mut at = self.eng.index.cursor(key, guard);
        self.place_at(&mut at, key, since, guard)
    }

    /// [`place`](Self::place) from a cursor at `key`'s leaf: the follower lookup, its
    /// re-check under the latch and the insert all start from that leaf. `since`: the load
    /// count taken before the cursor was placed.
    fn place_at(
        &mut self,
        at: &mut Cursor<'_, '_, RecPtr<P::Record>>,
        key: &[u8],
        since: u64,
        guard: &Guard,
    ) -> Result<Place<'a, P::Record>, Access> {
        let mut nk = std::mem::take(&mut self.b().key_buf);
        let r = self.place_with(at, key, since, &mut nk, guard);
        self.b().key_buf = nk;
        r
    }

    fn place_with(
        &mut self,
        at: &mut Cursor<'_, '_, RecPtr<P::Record>>,
        key: &[u8],
        mut since: u64,
        nk: &mut Vec<u8>,
        guard: &Guard,
    ) -> Result<Place<'a, P::Record>, Access> {
        let eng = self.eng;
        let mut first = true;
        loop {
            if !std::mem::take(&mut first) {
                since = eng.load_count();
                at.refresh();
            }
            let (exact, next) = eng.next_record_at(at, key, Some(nk));
            if exact {
                // SAFETY: records stay allocated while the transaction runs (`Engine::retire`).
                return Ok(Place::Existing(unsafe { &*(next as *const P::Record) }));
            }
            eng.pause_after_miss();
            // The key's range, and every one before its follower, must be in the index, and
            // have been since the lookup.
            if !self.loaded(key, (!eng.is_sentinel(next)).then_some(nk.as_slice()))? || !eng.no_load_since(since) {
                continue;
            }
            match eng.proto.latch_gap(&mut self.b().st, next) {
                Ok(()) => {}
                Err(Access::Removed) => continue,
                Err(e) => return Err(e),
            }
            // Unchanged leaf (the common case): the follower is still `next`.
            let (exact2, next2) = if at.refresh() { eng.next_record_at(at, key, None) } else { (false, next) };
            if !std::ptr::eq(next, next2) {
                eng.proto.unlatch_gap(&mut self.b().st, next);
                if exact2 {
                    // SAFETY: as above.
                    return Ok(Place::Existing(unsafe { &*(next2 as *const P::Record) }));
                }
                continue;
            }
            let rec = Box::into_raw(Box::new(eng.proto.new_record(&mut self.b().st)));
            let inserted = at.insert(RecPtr(rec)).unwrap_or(false);
            eng.proto.unlatch_gap(&mut self.b().st, next);
            if !inserted {
                // SAFETY: never published.
                drop(unsafe { Box::from_raw(rec) });
                return Ok(Place::Retry);
            }
            // SAFETY: published in the index; freed only after this transaction ended.
            let r: &'a P::Record = unsafe { &*rec };
            eng.proto.created(&mut self.b().st, r);
            let b = self.b();
            b.created.push((b.created_keys.len() as u32, key.len() as u32, rec));
            b.created_keys.extend_from_slice(key);
            if let Some(res) = &eng.residency {
                res.credit(key, (key.len() + RECORD_OVERHEAD) as i64, guard);
            }
            if !eng.proto.gap_protection() {
                return Ok(Place::New(r));
            }
            // A follower this transaction already wrote had the records beyond it written
            // then (see `gap_write_beyond`): walking them again made big transactions of
            // new keys quadratic.
            let walked = self.b().own(next as *const P::Record).is_some();
            self.add_write(nk, next, Write::Gap)?;
            if !walked && eng.proto.is_fresh(next) && !eng.is_sentinel(next) {
                self.gap_write_beyond(nk, guard)?;
            }
            return Ok(Place::New(r));
        }
    }

    /// Gap-writes the records after `key` up to and including the first one that has been
    /// committed (or the sentinel). Needed when the transaction makes a key present that
    /// an uncommitted placeholder stood for: readers that saw the gap before the placeholder
    /// existed relied on that farther record.
    fn gap_write_beyond(&mut self, key: &[u8], guard: &Guard) -> Result<(), Access> {
        let eng = self.eng;
        let mut at_key = key.to_vec();
        let mut k = Vec::new();
        loop {
            let since = eng.load_count();
            let (_, next) = eng.next_record(&at_key, true, Some(&mut k), guard);
            if !self.loaded(&at_key, (!eng.is_sentinel(next)).then_some(k.as_slice()))? || !eng.no_load_since(since) {
                continue;
            }
            if self.b().own(next as *const P::Record).is_some() {
                // Already in the write set: whenever a fresh record enters it, the records
                // beyond it up to a committed one are written too, and a record inserted
                // beyond it since then did not exist when a reader could have relied on it
                // for this gap (this one stood in between).
                return Ok(());
            }
            self.add_write(&k, next, Write::Gap)?;
            if eng.is_sentinel(next) || !eng.proto.is_fresh(next) {
                return Ok(());
            }
            std::mem::swap(&mut at_key, &mut k);
        }
    }

    /// A value write of an existing record; if that record is an uncommitted placeholder
    /// (someone else's insert, pending or aborted), the write is an insert into the gap it
    /// stands in, so the gap owner beyond it is written too.
    fn write_existing(
        &mut self,
        key: &[u8],
        rec: &P::Record,
        value: Option<&[u8]>,
        guard: &Guard,
    ) -> Result<(), Access> {
        let fresh = value.is_some() && self.eng.proto.gap_protection() && self.eng.proto.is_fresh(rec);
        self.add_write(key, rec, Write::Value(value))?;
        if fresh {
            self.gap_write_beyond(key, guard)?;
        }
        Ok(())
    }

    /// The value of `key`.
    pub fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        self.check_active()?;
        check_key(key)?;
        let guard = &self.pin();
        loop {
            let since = self.eng.load_count();
            let rec = match self.eng.lookup(key, guard) {
                Some(r) => r,
                None => match self.read_missing(key, since, guard) {
                    Ok(None) => return Ok(None),
                    Ok(Some(r)) => r,
                    Err(Access::Removed) => continue,
                    Err(Access::Conflict(c)) => return self.fail(c),
                    Err(Access::Failed) => return self.failed(),
                },
            };
            match self.read_rec(key, rec, true, guard) {
                Ok(v) => return Ok(v),
                Err(Access::Removed) => continue,
                Err(Access::Conflict(c)) => return self.fail(c),
                Err(Access::Failed) => return self.failed(),
            }
        }
    }

    /// Stores `value` under `key` (a blind write: nothing is read).
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), Error> {
        self.check_writable()?;
        check_key(key)?;
        check_value(value)?;
        let guard = &self.pin();
        let eng = self.eng;
        loop {
            // One descent serves both cases: an existing key (an update) is found by a plain
            // lookup in the leaf, cheaper than the successor search a new key needs; after
            // an insert, the next put is likely one too and goes to the successor search.
            let since = eng.load_count();
            let b = self.b();
            let try_hint = b.hint_misses < 4 || b.hint_misses.is_multiple_of(64);
            // By reference: a hint holds a descent path of 520 bytes, and its copies were a
            // twentieth of an ascending fill's commit thread.
            let (mut at, hinted) = eng.index.cursor_near(key, b.leaf_hint.as_ref().filter(|_| try_hint), guard);
            let b = self.b();
            if !hinted {
                // A cursor placed by the hint is where the hint says.
                b.leaf_hint = Some(at.hint());
            }
            b.hint_misses = if hinted { 0 } else { b.hint_misses.saturating_add(1) };
            let existing = if b.last_put_new { None } else { at.get() };
            if let Some(r) = existing {
                // SAFETY: records stay allocated while the transaction runs (`Engine::retire`).
                let r: &'a P::Record = unsafe { &*r.0 };
                match self.write_existing(key, r, Some(value), guard) {
                    Ok(()) => return Ok(()),
                    Err(Access::Removed) => continue,
                    Err(Access::Conflict(c)) => return self.fail(c),
                    Err(Access::Failed) => return self.failed(),
                }
            }
            let placed = self.place_at(&mut at, key, since, guard);
            self.b().last_put_new = matches!(placed, Ok(Place::New(_)));
            let step = match placed {
                Ok(Place::Existing(r)) => self.write_existing(key, r, Some(value), guard),
                Ok(Place::New(r)) => self.add_write(key, r, Write::Value(Some(value))),
                Ok(Place::Retry) => Err(Access::Removed),
                Err(e) => Err(e),
            };
            match step {
                Ok(()) => return Ok(()),
                Err(Access::Removed) => continue,
                Err(Access::Conflict(c)) => return self.fail(c),
                Err(Access::Failed) => return self.failed(),
            }
        }
    }

    /// Conditional write: `value` is `Some` for insert/update, `None` for delete; the write
    /// happens only if the key's presence is `want_present`. Returns whether it happened.
    fn write_if(&mut self, key: &[u8], value: Option<&[u8]>, want_present: bool) -> Result<bool, Error> {
        self.check_writable()?;
        check_key(key)?;
        if let Some(v) = value {
            check_value(v)?;
        }
        let guard = &self.pin();
        loop {
            let since = self.eng.load_count();
            let step = match self.eng.lookup(key, guard) {
                Some(rec) => match self.read_rec(key, rec, false, guard) {
                    Ok(cur) if cur.is_some() == want_present => {
                        self.write_existing(key, rec, value, guard).map(|()| true)
                    }
                    Ok(_) => Ok(false),
                    Err(e) => Err(e),
                },
                None if want_present => match self.read_missing(key, since, guard) {
                    Ok(None) => Ok(false),
                    Ok(Some(_)) => Err(Access::Removed), // appeared: look again
                    Err(e) => Err(e),
                },
                None => match self.place(key, guard) {
                    Ok(Place::New(rec)) => self.add_write(key, rec, Write::Value(value)).map(|()| true),
                    Ok(Place::Existing(_) | Place::Retry) => Err(Access::Removed), // look again
                    Err(e) => Err(e),
                },
            };
            match step {
                Ok(done) => return Ok(done),
                Err(Access::Removed) => continue,
                Err(Access::Conflict(c)) => return self.fail(c),
                Err(Access::Failed) => return self.failed(),
            }
        }
    }

    /// Inserts `key` only if it is absent; returns whether it did.
    pub fn insert(&mut self, key: &[u8], value: &[u8]) -> Result<bool, Error> {
        self.write_if(key, Some(value), false)
    }

    /// Replaces the value of `key` only if it is present; returns whether it did.
    pub fn update(&mut self, key: &[u8], value: &[u8]) -> Result<bool, Error> {
        self.write_if(key, Some(value), true)
    }

    /// Deletes `key` if present; returns whether it was.
    pub fn delete(&mut self, key: &[u8]) -> Result<bool, Error> {
        self.write_if(key, None, true)
    }

    /// Reads one chunk of a scan: up to [`SCAN_CHUNK`] present records from `from`
    /// (inclusive) to `end` (exclusive). Returns the records and the next chunk's start.
    fn scan_chunk(
        &mut self,
        from: &[u8],
        end: Option<&[u8]>,
        out: &mut Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<Option<Vec<u8>>, Error> {
        let eng = self.eng;
        let guard = &self.pin();
        'retry: loop {
            out.clear();
            // A chunk covers only key ranges in the index: it stops where one is not, and
            // the next chunk loads that one first.
            let limit = match eng.scan_limit(from, end) {
                Ok(l) => l,
                Err(Error::Conflict(c)) => return self.fail(c),
                Err(e) => {
                    self.failure = Some(e);
                    return self.failed();
                }
            };
            let stop = limit.as_deref().or(end);
            let since = eng.load_count();
            let recs: Vec<(Vec<u8>, RecPtr<P::Record>)> = eng.index.scan(from, stop).take(SCAN_CHUNK).collect();
            let last = recs.len() < SCAN_CHUNK;
            for (k, p) in &recs {
                // SAFETY: records stay allocated while the transaction runs (`Engine::retire`).
                let rec = unsafe { &*p.0 };
                match self.read_rec(k, rec, true, guard) {
                    Ok(Some(v)) => out.push((k.clone(), v)),
                    Ok(None) => {}
                    Err(Access::Removed) => continue 'retry,
                    Err(Access::Conflict(c)) => return self.fail(c),
                    Err(Access::Failed) => return self.failed(),
                }
            }
            let next_start = |recs: &[(Vec<u8>, RecPtr<P::Record>)]| match (last, &limit) {
                (false, _) => Some(successor_key(&recs[recs.len() - 1].0)),
                (true, l) => l.clone(),
            };
            // The ranges the chunk covers were all in the index while it was read (a range
            // that left meanwhile was marked before its records went, and one that came
            // back moved the load count).
            let reach = match (last, recs.last()) {
                (false, Some((k, _))) => Some(successor_key(k)),
                _ => stop.map(<[u8]>::to_vec),
            };
            eng.pause_after_miss();
            if !eng.covered(from, reach.as_deref()) || !eng.no_load_since(since) {
                continue 'retry;
            }
            if !eng.proto.gap_protection() {
                return Ok(next_start(&recs));
            }
            // The gap after the chunk belongs to the first record at or past its stop, also
            // when the chunk stops short of `end` at a range not in memory: the keys from
            // the last record read up to that range were read absent, and an insert there
            // writes (locks) that record. Left to the next chunk, an insert could commit in
            // between (a phantom, seen once in CI under 2PL with a tiny cache).
            //
            // That record is looked up on its own (a load here adds records at or past
            // `stop` only, outside the chunk): starting the chunk over after each load could
            // go on for long under a tiny cache, where other transactions evict what this
            // one loads.
            let unguarded = limit.is_some() && eng.residency.as_ref().is_some_and(|r| r.scan_gap_unguarded);
            let terminal = if last && !unguarded {
                let mut tk = Vec::new();
                loop {
                    let since = eng.load_count();
                    let t = eng.record_at_or_past(stop, Some(&mut tk), guard);
                    if let Some(e) = stop {
                        match self.loaded(e, (!eng.is_sentinel(t)).then_some(tk.as_slice())) {
                            Ok(true) => {}
                            Ok(false) => continue,
                            Err(Access::Conflict(c)) => return self.fail(c),
                            Err(_) => return self.failed(),
                        }
                    }
                    match self.read_rec(&tk, t, false, guard) {
                        Ok(_) => break Some((t as *const P::Record, since)),
                        Err(Access::Removed) => continue,
                        Err(Access::Conflict(c)) => return self.fail(c),
                        Err(Access::Failed) => return self.failed(),
                    }
                }
            } else {
                None
            };
            // Membership re-check, as for a missing key: the index must still hold exactly
            // the records read.
            let again = eng.index.scan(from, stop).take(SCAN_CHUNK).map(|(_, p)| p.0);
            if !again.eq(recs.iter().map(|(_, p)| p.0)) {
                continue 'retry;
            }
            if let Some((t, since)) = terminal {
                let t2 = eng.record_at_or_past(stop, None, guard) as *const P::Record;
                // And no range came back since the terminal lookup (it could have left
                // again by now, as for a missing key).
                if t != t2 || !eng.no_load_since(since) {
                    continue 'retry;
                }
            }
            return Ok(next_start(&recs));
        }
    }

    /// A forward scan of `start <= key < end` (no upper bound when `end` is `None`).
    pub fn scan(&mut self, start: &[u8], end: Option<&[u8]>) -> TypedScan<'_, 'a, P> {
        TypedScan { txn: self, cursor: ScanCursor::new(start.to_vec(), end.map(<[u8]>::to_vec), false) }
    }

    /// Commits; on a conflict the transaction is rolled back and `Error::Conflict` returned.
    /// Returns once the commit is durable (per the database's durability setting).
    pub fn commit(self) -> Result<(), Error> {
        let eng = self.eng;
        let r = self.commit_inner(false).and_then(CommitTicket::wait);
        eng.throttle_log();
        r
    }

    /// Commits without waiting for durability; see [`super::Txn::commit_deferred`].
    pub fn commit_deferred(self) -> Result<CommitTicket, Error> {
        let eng = self.eng;
        let r = self.commit_inner(true);
        eng.throttle_log();
        r
    }

    fn commit_inner(mut self, deferred: bool) -> Result<CommitTicket, Error> {
        self.check_active()?;
        let eng: &'a Engine<P> = self.eng;
        let worker = self.worker() as *const P::Worker;
        // SAFETY: the slot outlives the transaction (see `worker`).
        let worker = unsafe { &*worker };
        let guard = &self.pin();
        match self.rebind_evicted(guard) {
            Ok(()) => {}
            Err(Access::Conflict(c)) => return self.fail(c),
            Err(Access::Removed) => return self.fail(Conflict::WriteWrite),
            Err(Access::Failed) => return self.failed(),
        }
        let b = self.bufs.as_mut().expect("buffers");
        b.writes.sort_unstable_by_key(|w| w.rec as usize);
        let wal = eng.durable.as_ref().map(|d| &d.wal).filter(|w| w.opts.mode != LogMode::None);
        let logged = wal.is_some() && b.writes.iter().any(|w| matches!(w.kind, WriteKind::Value(_)));
        let mut ticket = CommitTicket::ready();
        if logged {
            let wal = wal.expect("logged implies a log");
            // SAFETY: as for `worker`.
            let slot = unsafe { &*self.slot };
            let lane = match wal.lane_for(&slot.lane) {
                Ok(l) => l,
                Err(e) => {
                    self.rollback();
                    return Err(e);
                }
            };
            let private = wal.opts.mode == LogMode::PWal;
            let hold = wal.holds_locks();
            let mut hook = LogHook {
                wal,
                residency: eng.residency.as_ref(),
                guard,
                lane: &lane,
                private,
                hold,
                kept: Vec::new(),
                done: None,
                err: None,
            };
            let b = self.bufs.as_mut().expect("buffers");
            eng.enter_commit(slot);
            let r = eng.proto.commit(worker, &mut b.st, &mut b.writes, guard, &mut hook);
            slot.committing.store(false, Ordering::Release);
            if r.is_ok() && hold {
                let (seq, order) = hook.done.expect("a logged commit appended its record");
                for &(word, release) in &hook.kept {
                    // SAFETY: the record is locked (so never unlinked) and pinned.
                    wal.hold_lock(&lane, seq, unsafe { &*word }, release);
                }
                let r = if deferred { wal.maybe_flush(&lane) } else { wal.flush_to(&lane, seq, true) };
                if let Err(e) = r {
                    hook.err = Some(e);
                }
                ticket = CommitTicket { wait: Some((wal.clone(), lane.clone(), seq, order)) };
            } else if r.is_ok() && wal.opts.release == Release::Elr {
                let (seq, lsn) = hook.done.expect("a logged commit appended its record");
                if deferred {
                    if let Err(e) = wal.maybe_flush(&lane) {
                        hook.err = Some(e);
                    }
                } else if let Err(e) = wal.flush_to(&lane, seq, private) {
                    hook.err = Some(e);
                }
                ticket = CommitTicket { wait: Some((wal.clone(), lane.clone(), seq, lsn)) };
            }
            match (r, hook.err.take()) {
                (Err(CommitFail::Conflict(c)), _) => return self.fail(c),
                (Err(CommitFail::Log), e) => {
                    // Nothing was installed: roll back.
                    self.rollback();
                    return Err(e.unwrap_or_else(|| wal.check().err().unwrap_or(Error::Poisoned(String::new()))));
                }
                (Ok(()), Some(e)) => {
                    // Installed and released (ELR), but the flush failed: never acknowledged,
                    // and the poisoned log refuses every later commit.
                    self.active = false;
                    return Err(e);
                }
                (Ok(()), None) => {}
            }
        } else {
            // SAFETY: as for `worker`.
            let slot = unsafe { &*self.slot };
            // Writes wait at the gate as logged ones do (an exclusive reader may hold it).
            let gated = !b.writes.is_empty();
            if gated {
                eng.enter_commit(slot);
            }
            let r = eng.proto.commit(worker, &mut b.st, &mut b.writes, guard, &mut NoLog);
            if gated {
                slot.committing.store(false, Ordering::Release);
            }
            match r {
                Err(CommitFail::Conflict(c)) => return self.fail(c),
                Err(CommitFail::Log) => unreachable!("NoLog never fails"),
                Ok(()) => {}
            }
            if let (Some(wal), Some(lane), false) = (wal, slot.lane.get(), deferred) {
                if let Some((seq, lsn)) = wal.pending_of(lane) {
                    ticket = CommitTicket { wait: Some((wal.clone(), lane.clone(), seq, lsn)) };
                }
            }
        }
        self.active = false;
        eng.counters.commits.fetch_add(1, Ordering::Relaxed);
        let b = self.bufs.as_mut().expect("buffers");
        // Deleted keys leave the index now (or soon, if a neighbour is busy).
        for w in &b.writes {
            if let WriteKind::Value(None) = w.kind {
                eng.try_unlink(worker, &w.key, w.rec, guard);
            }
        }
        for (key, rec) in b.created() {
            match b.writes.binary_search_by_key(&(rec as usize), |w| w.rec as usize) {
                Ok(i) => {
                    if let (Some(res), Some(v)) = (&eng.residency, b.writes[i].kind.value()) {
                        res.credit(key, v.len() as i64, guard);
                    }
                }
                Err(_) => {
                    eng.try_unlink(worker, key, rec, guard);
                }
            }
        }
        eng.drain_pending_unlinks(worker, guard);
        if logged && eng.checkpoint_due() {
            if let Some(t) = eng.checkpointer.get() {
                t.unpark();
            }
        }
        Ok(ticket)
    }

    /// Rolls back: nothing the transaction wrote becomes visible.
    pub fn abort(mut self) {
        if self.active {
            self.rollback();
        }
    }

    fn rollback(&mut self) {
        self.active = false;
        let eng = self.eng;
        let worker = self.worker() as *const P::Worker;
        // SAFETY: as in `commit`.
        let worker = unsafe { &*worker };
        let guard = &self.pin();
        let b = self.bufs.as_mut().expect("buffers");
        eng.proto.abort(&mut b.st, &b.writes);
        eng.counters.aborts.fetch_add(1, Ordering::Relaxed);
        for (key, rec) in b.created() {
            eng.try_unlink(worker, key, rec, guard);
        }
    }
}

impl<P: Protocol> Drop for TypedTxn<'_, P> {
    fn drop(&mut self) {
        if self.active {
            self.rollback();
        }
        if self.eng.durable.as_ref().is_some_and(|d| d.wal.holds_locks()) {
            crate::cc::set_lock_waiter(None);
        }
        // SAFETY: the slot outlives the transaction (see `worker`).
        let slot = unsafe { &*self.slot };
        // Still inside the slot: records are freed only once every slot entered before
        // their retirement is left (`Engine::reclaim`), so the records the eviction meets
        // in the index stay allocated while it reads and latches them.
        self.eng.evict_over_budget(&slot.worker);
        self.eng.leave(slot);
        let bufs = self.bufs.take();
        match self.home.take() {
            Some(Home::Worker(slot)) => *slot = bufs,
            Some(Home::Pool(s)) => self.eng.return_slot(s, bufs),
            None => {}
        }
    }
}

/// A key at or above every key below `end` (every key when `end` is `None`), and itself
/// below `end`: keys are at most [`MAX_KEY_LEN`] bytes, so one byte longer leaves no key
/// between it and `end`.
fn key_at_or_above_all_below(end: Option<&[u8]>) -> Vec<u8> {
    match end.map(<[u8]>::split_last) {
        None => vec![0xff; MAX_KEY_LEN + 1],
        Some(None) => Vec::new(),
        // Below "x\0" only "x" and what is below it.
        Some(Some((0, init))) => init.to_vec(),
        Some(Some((&b, init))) => {
            let mut k = init.to_vec();
            k.push(b - 1);
            k.resize(MAX_KEY_LEN + 1, 0xff);
            k
        }
    }
}

fn successor_key(k: &[u8]) -> Vec<u8> {
    let mut s = Vec::with_capacity(k.len() + 1);
    s.extend_from_slice(k);
    s.push(0);
    s
}

/// A record a scan returns: its key and value.
pub(crate) type Row = (Vec<u8>, Vec<u8>);

/// The iterator of [`TypedTxn::scan`].
pub struct TypedScan<'t, 'a, P: Protocol> {
    txn: &'t mut TypedTxn<'a, P>,
    cursor: ScanCursor,
}

impl<P: Protocol> Iterator for TypedScan<'_, '_, P> {
    type Item = Result<(Vec<u8>, Vec<u8>), Error>;

    fn next(&mut self) -> Option<Self::Item> {
        self.cursor.next(self.txn)
    }
}

/// Where a scan stands, apart from its transaction: each step borrows the transaction
/// only while it reads a chunk, so the transaction can serve other reads between steps.
pub(crate) struct ScanCursor {
    /// Forward: where the next chunk starts (`None` once the range is done).
    /// Reverse: the low end of the range.
    next: Option<Vec<u8>>,
    end: Option<Vec<u8>>,
    /// Records read and not yet returned, in the order they are returned.
    buf: Vec<(Vec<u8>, Vec<u8>)>,
    pos: usize,
    reverse: bool,
    /// A step has run.
    started: bool,
    /// The scan returned its last record, or an error: `None` from now on.
    done: bool,
}

impl ScanCursor {
    /// The records with `start <= key < end`, ascending or (`reverse`) descending.
    pub(crate) fn new(start: Vec<u8>, end: Option<Vec<u8>>, reverse: bool) -> Self {
        if end.as_ref().is_some_and(|e| *e <= start) {
            // Empty: nothing to read (and no window to list).
            return ScanCursor { next: None, end, buf: Vec::new(), pos: 0, reverse, started: false, done: true };
        }
        ScanCursor { next: Some(start), end, buf: Vec::new(), pos: 0, reverse, started: false, done: false }
    }

    /// Makes the scan descending. After a first step it goes on descending over what is
    /// left of the range (the records not returned yet).
    pub(crate) fn reverse(&mut self) {
        if self.started && !self.reverse && !self.done {
            let rest = if self.pos < self.buf.len() { Some(self.buf[self.pos].0.clone()) } else { self.next.take() };
            match rest {
                Some(start) => {
                    let end = self.end.take();
                    *self = ScanCursor::new(start, end, true);
                }
                None => self.done = true,
            }
        }
        self.reverse = true;
    }

    /// The next record of the scan, read through `txn`.
    pub(crate) fn next<P: Protocol>(&mut self, txn: &mut TypedTxn<'_, P>) -> Option<Result<Row, Error>> {
        loop {
            if self.pos < self.buf.len() {
                self.pos += 1;
                return Some(Ok(std::mem::take(&mut self.buf[self.pos - 1])));
            }
            if self.done {
                return None;
            }
            self.started = true;
            self.pos = 0;
            let step = match txn.check_active() {
                Ok(()) if self.reverse => self.step_back(txn),
                Ok(()) => self.step(txn),
                Err(e) => Err(e),
            };
            match step {
                Ok(true) => {}
                Ok(false) => {
                    self.done = true;
                    return None;
                }
                Err(e) => {
                    // The scan ends with its error (fused: `None` after it).
                    self.done = true;
                    return Some(Err(e));
                }
            }
        }
    }

    /// Reads the next chunk forward; `false` when the range is done.
    fn step<P: Protocol>(&mut self, txn: &mut TypedTxn<'_, P>) -> Result<bool, Error> {
        let Some(from) = self.next.take() else { return Ok(false) };
        self.next = txn.scan_chunk(&from, self.end.as_deref(), &mut self.buf)?;
        Ok(true)
    }

    /// Reads the next window backward: the whole window forward (the index links leaves
    /// to the right only), then reversed. A window ends where the previous one began and
    /// starts at the low key of the index leaf (or cache key range) below that
    /// ([`Engine::window_low`]): one descent per window. Each window is read as a forward
    /// scan of the transaction, so the windows together cover the range with the same
    /// protection (no phantoms) as a forward scan.
    fn step_back<P: Protocol>(&mut self, txn: &mut TypedTxn<'_, P>) -> Result<bool, Error> {
        let Some(start) = self.next.as_deref() else { return Ok(false) };
        if self.end.as_deref().is_some_and(|e| e <= start) {
            return Ok(false);
        }
        let low = txn.eng.window_low(start, self.end.as_deref());
        let high = self.end.take();
        self.buf.clear();
        let mut chunk = Vec::new();
        let mut from = Some(low.clone());
        while let Some(f) = from {
            from = txn.scan_chunk(&f, high.as_deref(), &mut chunk)?;
            self.buf.append(&mut chunk);
        }
        self.buf.reverse();
        self.end = Some(low);
        Ok(true)
    }
}
