//! The generic engine: one index of records, any [`Protocol`], monomorphized.

use std::collections::VecDeque;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use crossbeam_epoch::{self as epoch, Guard};
use crossbeam_utils::CachePadded;
use parking_lot::Mutex;

use hashbrown::HashTable;

use crate::cc::{
    addr_hash, Access, CommitFail, CommitLog, Conflict, KeyAt, NoLog, Protocol, UnlinkLatch, WriteEntry, WriteKind,
    WriteValue, KEEP_SET,
};
use crate::index::{BwTree, BwTreeBuilder, BwTreeConfig, Cursor, LeafHint, Leaves, MAX_KEY_LEN};
use crate::plants::Plants;
use crate::storage::Storage;
use crate::store::budget::CacheBudget;
use crate::store::pages::StoreStats;
use crate::store::{self, CommittedState, Durable, StoreOptions};
use crate::wal::{CommitMode, CommitTicket, Durability, Lane, LogOptions, Wal};

use super::residency::{Clock, Range, Residency, MAX_PIECES, RECORD_OVERHEAD};
use super::{Error, MAX_VALUE_LEN};

mod bulk;
mod cache;
mod checkpointer;
mod commit;
mod durable;
mod remove;
mod scan;
mod slots;
mod txn;
mod unlink;
pub(crate) use checkpointer::Checkpointer;
use unlink::LeafRun;

pub(crate) use scan::{successor_key, ScanCursor};
pub use scan::{Row, RowRef, TypedScan};
pub(crate) use txn::Home;
pub use txn::TypedTxn;
use txn::{collect_garbage, IndexEdit, LOAD_BATCH};

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

/// Where the last of a series of descents ended (a transaction's puts, a commit's unlinks in
/// key order): the next starts there when its key falls in that leaf, so keys that follow
/// each other skip the descent. Past a few misses in a row (random keys) the hint is tried
/// only now and then, since each miss costs a look at that leaf.
#[derive(Default)]
pub(crate) struct LeafTrail {
    hint: Option<LeafHint>,
    misses: u32,
}

impl LeafTrail {
    /// A cursor at `key`'s leaf, from the hint when it covers `key`.
    pub(crate) fn cursor<'g, 'k, V: Clone + Send + Sync + 'static>(
        &mut self,
        index: &'g BwTree<V>,
        key: &'k [u8],
        guard: &'g Guard,
    ) -> Cursor<'g, 'k, V> {
        let try_hint = self.misses < 4 || self.misses.is_multiple_of(64);
        // By reference: a hint holds a descent path of 520 bytes, and its copies were a
        // twentieth of an ascending fill's commit thread.
        let (at, hinted) = index.cursor_near(key, self.hint.as_ref().filter(|_| try_hint), guard);
        if !hinted {
            // A cursor placed by the hint is where the hint says.
            self.hint = Some(at.hint());
        }
        self.misses = if hinted { 0 } else { self.misses.saturating_add(1) };
        at
    }
}

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
    /// Transactions committed and aborted on this slot: counted per slot, which only its
    /// transaction writes, rather than on one line every committer would write.
    commits: AtomicU64,
    aborts: AtomicU64,
}

/// A pooled slot and the buffers its last transaction left.
type IdleSlot<P> = (Arc<Slot<P>>, Option<Box<TxnBufs<P>>>);

/// One shard of the idle-slot pool, on a line of its own.
type SlotShard<P> = CachePadded<Mutex<Vec<IdleSlot<P>>>>;

/// [`Slot::since`] of a slot with no transaction running.
const IDLE: u64 = u64::MAX;

/// Shards of the idle-slot pool: threads get shards in turn, so up to this many threads
/// each have one to themselves.
const SLOT_SHARDS: usize = 32;

/// Reusable buffers of one transaction at a time.
pub(crate) struct TxnBufs<P: Protocol> {
    st: P::TxnState,
    writes: Vec<WriteEntry<P::Record>>,
    /// The keys of `writes` and `created`, each once (see [`KeyAt`]).
    keys: Vec<u8>,
    /// Position in `writes` by record address, kept once `writes` outgrows a linear scan:
    /// a table of positions hashed by their entries' records, 5 bytes a slot where a map
    /// from address to position took 17.
    write_pos: HashTable<u32>,
    /// Placeholders this transaction put into the index that have no write-set entry
    /// marked [`WriteEntry::created`] (unlinked if they end absent): the key and the
    /// record. A put's placeholder moves to its entry at once.
    created: Vec<(KeyAt, *const P::Record)>,
    /// Value buffers of earlier write sets, reused so that a write allocates nothing in the
    /// steady state.
    spare: Vec<Vec<u8>>,
    /// A follower's key, copied out of the index without allocating.
    key_buf: Vec<u8>,
    /// A scan chunk's records as met in the index, and their keys (see `scan_chunk`).
    scan_recs: Vec<(u32, u32, *const P::Record)>,
    scan_keys: Vec<u8>,
    /// The index leaves a scan chunk's walk entered.
    scan_leaves: Leaves,
    /// The row buffer of the last scan that ended, lent to the next (see
    /// [`scan::ScanCursor`]): a scan of a few records then allocates nothing.
    scan_rows: scan::Rows,
    /// How many records the next scan reads first: as many as the last one returned
    /// (bounded), so that a scan that takes ten reads about ten, not a whole chunk.
    scan_first: usize,
    /// Key ranges a scan found empty to this transaction (see [`scan::Skips`]).
    skips: scan::Skips,
    /// The scans the last pops left, forward and backward, with the records they read
    /// and did not return yet: the next pop in that direction goes on from there (one
    /// descent per chunk, not per pop). Any write but the pop's own delete drops both.
    pops: [Option<scan::ScanCursor>; 2],
    /// Records scan chunks walked (what the skips save).
    #[cfg(test)]
    scan_walked: u64,
    /// Scan chunks read since the transaction began (a descent each).
    #[cfg(test)]
    scan_chunks: u64,
    /// The leaf the last put reached: the next put starts there when its key falls in it
    /// (an ascending fill skips the descent).
    put_trail: LeafTrail,
    /// Whether the last put made a new record: the next one then looks for its key's
    /// successor at once (what an insert needs) instead of first looking the key up.
    last_put_new: bool,
    /// [`Counters::ranges_evicted`] at the transaction's first write: while it is
    /// unchanged, no record of the write set left memory.
    evict_mark: u64,
    /// Position in `writes` by key (hashed on the arena's bytes, not copied), built only
    /// once a record of the write set may have left memory (see
    /// [`TypedTxn::own_rebound`]).
    key_pos: HashTable<u32>,
    key_hasher: std::hash::RandomState,
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

/// A write as the engine's callers ask for it (the write set keeps its own copies).
#[derive(Clone, Copy)]
enum Write<'v> {
    /// Set the value (`None` deletes).
    Value(Option<&'v [u8]>),
    /// Set the first value of a record this transaction just created: staged in the
    /// record's tail when it fits ([`WriteValue::Staged`]).
    New(&'v [u8]),
    /// Write the gap before the record (an insert next to it).
    Gap,
}

impl<P: Protocol> TxnBufs<P> {
    pub(crate) fn new(proto: &P) -> Self {
        TxnBufs {
            st: proto.new_txn_state(),
            writes: Vec::new(),
            keys: Vec::new(),
            write_pos: HashTable::new(),
            created: Vec::new(),
            spare: Vec::new(),
            key_buf: Vec::new(),
            scan_recs: Vec::new(),
            scan_keys: Vec::new(),
            scan_leaves: Leaves::default(),
            scan_rows: scan::Rows::default(),
            scan_first: scan::FIRST_CHUNK,
            skips: scan::Skips::default(),
            pops: [None, None],
            #[cfg(test)]
            scan_walked: 0,
            #[cfg(test)]
            scan_chunks: 0,
            put_trail: LeafTrail::default(),
            last_put_new: false,
            evict_mark: 0,
            key_pos: HashTable::new(),
            key_hasher: std::hash::RandomState::new(),
        }
    }

    fn clear(&mut self) {
        for w in self.writes.drain(..) {
            if let WriteKind::Value(Some(WriteValue::Owned(v))) = w.kind {
                Self::recycle(&mut self.spare, v);
            }
        }
        self.keys.clear();
        self.write_pos.clear();
        self.key_pos.clear();
        self.created.clear();
        self.skips = scan::Skips::default();
        self.pops = [None, None];
    }

    /// Whether the transaction's sets outgrew what the pool keeps: such buffers are
    /// dropped when their transaction ends, so that a huge transaction leaves no memory
    /// behind.
    fn is_huge(&self, proto: &P) -> bool {
        self.writes.capacity() > KEEP_SET
            || self.created.capacity() > KEEP_SET
            || proto.state_capacity(&self.st) > KEEP_SET
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

    /// The key of the write-set entry `i`.
    fn key_of(&self, i: usize) -> &[u8] {
        self.writes[i].key.of(&self.keys)
    }

    fn own(&self, rec: *const P::Record) -> Option<usize> {
        if self.writes.len() <= WRITE_SCAN_MAX {
            self.writes.iter().position(|w| w.rec == rec)
        } else {
            let writes = &self.writes;
            self.write_pos.find(addr_hash(rec as usize), |&i| writes[i as usize].rec == rec).map(|&i| i as usize)
        }
    }

    /// Records entry `i` under its key in `key_pos` (a later entry of the same key
    /// replaces an earlier one).
    fn index_key(&mut self, i: usize) {
        let (writes, keys, hasher) = (&self.writes, &self.keys, &self.key_hasher);
        let key = writes[i].key.of(keys);
        let entry = self.key_pos.entry(
            hasher.hash_one(key),
            |&j| writes[j as usize].key.of(keys) == key,
            |&j| hasher.hash_one(writes[j as usize].key.of(keys)),
        );
        match entry {
            hashbrown::hash_table::Entry::Occupied(mut o) => *o.get_mut() = i as u32,
            hashbrown::hash_table::Entry::Vacant(v) => {
                v.insert(i as u32);
            }
        }
    }

    /// The write-set entry of `key`, from `key_pos`.
    fn find_key(&self, key: &[u8]) -> Option<usize> {
        self.key_pos.find(self.key_hasher.hash_one(key), |&j| self.key_of(j as usize) == key).map(|&j| j as usize)
    }

    /// Records that the write-set entry `i` is at its place (see `write_pos`).
    fn index_write(&mut self, i: usize) {
        let writes = &self.writes;
        self.write_pos.insert_unique(addr_hash(writes[i].rec as usize), i as u32, |&j| {
            addr_hash(writes[j as usize].rec as usize)
        });
    }
}

/// Counters of one engine.
#[derive(Default)]
pub(crate) struct Counters {
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
    /// transaction then allocates no write set), in [`SLOT_SHARDS`] shards on lines of their
    /// own: a thread takes and returns slots in its own shard (see `take_slot`), so threads
    /// that each begin and end many transactions do not meet on one lock.
    free_slots: Box<[SlotShard<P>]>,
    /// Keys of deleted records whose unlink could not latch what it needed; retried later.
    pending_unlinks: Mutex<VecDeque<Box<[u8]>>>,
    /// Whether `pending_unlinks` may hold keys: checked by every commit without touching
    /// the mutex's cache line.
    has_pending: AtomicBool,
    /// Whether any record was allocated with a tail ([`crate::cc::alloc_new`]): reads then
    /// ask for a record's tail lines with its own. Without tails (values of up to 8 bytes,
    /// as YCSB's) a record is one line, and asking for more only costs bandwidth.
    tails: AtomicBool,
    /// On lines of their own: every commit writes one, and the flags beside them are read
    /// by every operation.
    pub(crate) counters: CachePadded<Counters>,
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
    /// The thread that takes checkpoints, started on first need; commits wake it when one
    /// is due.
    pub(crate) checkpointer: Checkpointer,
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

impl<P: Protocol> Engine<P> {
    pub(crate) fn new(proto: P, index: BwTreeConfig) -> Result<Self, Error> {
        let sentinel = Box::new(proto.new_sentinel());
        Ok(Engine {
            index: BwTree::with_config(index).map_err(Error::Index)?,
            sentinel,
            proto,
            free_slots: (0..SLOT_SHARDS).map(|_| CachePadded::new(Mutex::new(Vec::new()))).collect(),
            pending_unlinks: Mutex::new(VecDeque::new()),
            has_pending: AtomicBool::new(false),
            tails: AtomicBool::new(false),
            counters: CachePadded::new(Counters::default()),
            durable: None,
            slots: Mutex::new(Vec::new()),
            record_clock: AtomicU64::new(0),
            retired: Mutex::new(VecDeque::new()),
            has_retired: AtomicBool::new(false),
            gate: Gate(AtomicUsize::new(0)),
            checkpointer: Checkpointer::new(),
            checkpoint_slot: OnceLock::new(),
            checkpointing: Mutex::new(()),
            residency: None,
            read_only: false,
            reload_stamp: AtomicU64::new(0),
            cache_pressure: AtomicBool::new(false),
        })
    }
    /// The record stored under `key`. The caller runs a transaction (or has the engine to
    /// itself), which keeps every record it can load allocated (see [`Engine::retire`]).
    #[inline]
    fn lookup(&self, key: &[u8], guard: &Guard) -> Option<&P::Record> {
        self.index.get_pinned(key, guard).ok().flatten().map(|p| self.found(p.0))
    }

    /// The record a lookup found, its lines asked for.
    fn found(&self, p: *const P::Record) -> &P::Record {
        self.prefetch_record(p);
        // SAFETY: records are freed only after every transaction that began before they left
        // the index has ended; the caller's transaction is running.
        unsafe { &*p }
    }

    /// Asks for a record's lines and, where records have tails, its tail's: the value,
    /// when it is in the tail, arrives with the record instead of after it.
    #[inline]
    fn prefetch_record(&self, rec: *const P::Record) {
        if self.tails.load(Ordering::Relaxed) {
            crate::cc::prefetch_record(rec);
        } else {
            let at = rec.cast::<u8>();
            crate::prefetch::prefetch_at(at);
            crate::prefetch::prefetch_at(at.wrapping_add(std::mem::size_of::<P::Record>() - 1));
        }
    }

    /// Notes a new record's allocation (see [`Engine::tails`]); returns it.
    #[inline]
    fn allocated(&self, rec: *mut P::Record) -> *mut P::Record {
        // SAFETY: a live record just allocated by the caller.
        if !self.tails.load(Ordering::Relaxed) && P::value_cell(unsafe { &*rec }).is_some_and(|c| c.has_tail()) {
            self.tails.store(true, Ordering::Relaxed);
        }
        rec
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

    /// Whether `rec` is the sentinel (the gap owner after the last key).
    #[inline]
    fn is_sentinel(&self, rec: &P::Record) -> bool {
        std::ptr::eq(rec, &*self.sentinel)
    }

    /// The protocol.
    pub fn protocol(&self) -> &P {
        &self.proto
    }

    /// The index's structure modifications so far.
    pub(crate) fn index_stats(&self) -> crate::index::BwTreeStats {
        self.index.stats()
    }

    /// Number of keys in the index, including absent ones not unlinked yet (a full scan).
    pub(crate) fn index_len(&self) -> usize {
        self.index.scan(b"", None).count()
    }
}

/// Frees the records of an index no transaction can reach.
fn free_records<P: Protocol>(index: &BwTree<RecPtr<P::Record>>) {
    // Walked in place: a scan copied every key out of each leaf first (a tenth of the
    // close of a 1M-record database).
    index.walk(b"", None, &crossbeam_epoch::pin(), |_, p| {
        // SAFETY: the caller owns the index exclusively; each record is owned by its entry,
        // and the walk reads only the index's nodes, never a record.
        unsafe { crate::cc::free_record_of::<P>(p.0 as *mut P::Record) };
        true
    });
}

impl<P: Protocol> Drop for Engine<P> {
    fn drop(&mut self) {
        if let Some(d) = &self.durable {
            // Held lock words live in the records freed below.
            d.wal.release_all_held();
        }
        free_records::<P>(&self.index);
        for (_, p) in self.retired.get_mut().drain(..) {
            // SAFETY: as above; retired records are out of the index and owned by the list.
            unsafe { crate::cc::free_record_of::<P>(p.0 as *mut P::Record) };
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
