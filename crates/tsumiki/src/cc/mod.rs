//! Concurrency control: one trait, [`Protocol`], and one module per protocol.
//!
//! The engine ([`crate::db`]) owns the index, the write set and the key-level logic (own
//! writes, inserts, deletes, scans, gap protection); a protocol owns what a record is and
//! how reading, writing, committing and aborting touch it. Every protocol is monomorphized
//! into the engine: the choice is made once per database, never per operation.
//!
//! # Phantoms: next-key gap protection
//! Under the single-version protocols (TicToc, Silo, 2PL) every record also guards the gap
//! of missing keys just before it; a sentinel record guards the gap after the last key.
//! - a read of a missing key reads the record that follows it (its value is ignored);
//! - a scan reads every record it passes, present or not, and the first one at or past its
//!   end;
//! - an insert of a new key writes the record that followed it (a "gap write"), and puts its
//!   placeholder into the index only while that follower is latched ([`Protocol::latch_gap`]),
//!   so the follower cannot change or gain a closer neighbour meanwhile;
//! - when that follower is itself an uncommitted placeholder ([`Protocol::is_fresh`]), the
//!   insert writes the records beyond it too, up to one that has been committed: a reader
//!   that saw the gap before the placeholder existed read that one; likewise a write that
//!   makes someone else's uncommitted (or aborted) placeholder present (both found by the
//!   isolation checker: without them, write skew through an insert committed under TicToc);
//! - a deleted record leaves the index latched together with its follower, whose timestamp
//!   is then raised past the removed one's ([`Protocol::unlink`]).
//!
//! A conflict on a gap is therefore an ordinary conflict on a record, handled by each
//! protocol's own rules (TicToc timestamps, Silo TIDs, 2PL next-key locks), and membership
//! is checked once more after the reads ([`crate::db`]): an insert that the reads missed must
//! then write a record they read.

pub mod occ;
pub mod si;
pub mod silo;
pub mod snapshot;
pub mod tictoc;
pub mod twopl;
mod value;

use crossbeam_epoch::Guard;

pub use snapshot::SnapshotStats;
pub use value::ValueCell;
pub(crate) use value::{alloc_loaded, alloc_new, free_record_of, prefetch_record};

pub use crate::error::Conflict;

/// Result of touching a record: it may have left the index meanwhile (the engine then looks
/// the key up again), or the transaction must abort.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// The record was unlinked from the index; look the key up again.
    Removed,
    /// The transaction conflicts and must abort.
    Conflict(Conflict),
    /// Reading the store failed (the error is kept by the transaction): it must abort.
    Failed,
}

impl From<Conflict> for Access {
    fn from(c: Conflict) -> Self {
        Access::Conflict(c)
    }
}

/// Outcome of [`Protocol::try_latch_absent`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnlinkLatch {
    /// Latched: the record is absent for every transaction and may leave the index.
    Latched,
    /// Present (or already gone): nothing to do.
    NotAbsent,
    /// Not now (held by someone, or still visible to a running transaction): try later.
    Busy,
}

/// One entry of a transaction's write set, as the engine hands it to [`Protocol::commit`].
pub struct WriteEntry<R> {
    /// The record; it stays allocated while the transaction runs.
    pub rec: *const R,
    /// The key (for logging and unlinking), in the write set's key arena.
    pub key: KeyAt,
    /// What the transaction writes.
    pub kind: WriteKind,
    /// Whether the record's committed value is present: set by [`Protocol::commit`] with
    /// the write locked, before logging (the log and the record count need it).
    pub present: bool,
    /// Whether the transaction put the record into the index (a placeholder it unlinks if
    /// the record ends absent).
    pub created: bool,
}

/// Where a key lies in a write set's key arena: one buffer holds every key of the write
/// set, so that a write costs no heap buffer of its own (a 1M-record transaction held a
/// 24-byte `Vec` header and a heap block per key). Offset and length share one word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyAt(u64);

const _: () = assert!(crate::limits::MAX_KEY_LEN < 1 << KeyAt::LEN_BITS);

/// The most entries a protocol's per-transaction sets keep for the next transaction
/// (a huge transaction's sets are dropped, not pooled: [`Protocol::state_capacity`]).
pub(crate) const KEEP_SET: usize = 1 << 14;

impl KeyAt {
    /// Bits of the length: enough for the longest key.
    const LEN_BITS: u32 = 13;

    /// Appends `key` (at most [`crate::limits::MAX_KEY_LEN`] bytes) to `arena`.
    #[inline]
    pub fn push(arena: &mut Vec<u8>, key: &[u8]) -> KeyAt {
        debug_assert!(key.len() <= crate::limits::MAX_KEY_LEN);
        let at = KeyAt(((arena.len() as u64) << Self::LEN_BITS) | key.len() as u64);
        arena.extend_from_slice(key);
        at
    }

    /// Orders keys by when they were pushed to their arena.
    #[inline]
    pub fn pushed(self) -> u64 {
        self.0
    }

    /// The key's bytes in the `arena` it was pushed to.
    #[inline]
    pub fn of(self, arena: &[u8]) -> &[u8] {
        let at = (self.0 >> Self::LEN_BITS) as usize;
        &arena[at..at + (self.0 & ((1 << Self::LEN_BITS) - 1)) as usize]
    }
}

impl WriteKind {
    /// The value to install: `Some(bytes)` for a put, `None` for a delete or a gap write.
    #[inline]
    pub(crate) fn value(&self) -> Option<&[u8]> {
        match self {
            WriteKind::Value(Some(v)) => Some(v),
            _ => None,
        }
    }
}

/// A value a transaction writes: a copy the write set owns, or the bytes it staged in the
/// tail of a record it created (`ValueCell::stage`), which the commit then
/// publishes in place, without copying it again: a big transaction of new keys holds
/// each value once, not twice (in its record's reserved tail and in the write set).
pub enum WriteValue {
    /// The write set's own copy.
    Owned(Vec<u8>),
    /// `len` bytes at `at`: the tail of a record this transaction created, which only it
    /// writes (the record stays allocated while the transaction runs).
    Staged {
        /// The tail's first byte.
        at: std::ptr::NonNull<u8>,
        /// The value's length.
        len: usize,
    },
}

impl WriteValue {
    /// The value's bytes.
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        match self {
            WriteValue::Owned(v) => v,
            // SAFETY: a staged value is in the tail of a record its transaction created;
            // the record stays allocated while the transaction runs, which outlives its
            // write set's entries, and no one else writes a staged tail.
            WriteValue::Staged { at, len } => unsafe { std::slice::from_raw_parts(at.as_ptr(), *len) },
        }
    }
}

impl std::ops::Deref for WriteValue {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl std::fmt::Debug for WriteValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.as_slice().fmt(f)
    }
}

impl PartialEq for WriteValue {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for WriteValue {}

/// What a write-set entry does to its record.
#[derive(Debug, PartialEq, Eq)]
pub enum WriteKind {
    /// Set the value (`None` deletes the key).
    Value(Option<WriteValue>),
    /// Only the gap before the record changes (an insert just before it): the value stays,
    /// but the record counts as written, so that readers of the gap conflict.
    Gap,
}

impl<R> WriteEntry<R> {
    /// Whether the write changes whether its key is present (an insert, or the delete of
    /// a present key). Valid once [`present`](Self::present) is set.
    #[inline]
    pub fn flips(&self) -> bool {
        matches!(&self.kind, WriteKind::Value(v) if v.is_some() != self.present)
    }

    /// The record.
    ///
    /// # Safety
    /// The caller runs inside the transaction this entry belongs to.
    #[inline]
    pub unsafe fn record<'g>(&self) -> &'g R {
        // SAFETY: a record is freed only after it left the index and every transaction that
        // began before that has ended (the engine's `retire`); this one is running.
        unsafe { &*self.rec }
    }
}

/// What `writes` change in the count of present keys (their [`WriteEntry::present`] set).
pub(crate) fn count_delta<R>(writes: &[WriteEntry<R>]) -> i64 {
    writes.iter().filter(|w| w.flips()).map(|w| if w.present { -1 } else { 1 }).sum()
}

/// Why [`Protocol::commit`] failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitFail {
    /// A conflict: the transaction is rolled back and may be retried.
    Conflict(Conflict),
    /// The commit record could not be logged (the log is poisoned).
    Log,
}

impl From<Conflict> for CommitFail {
    fn from(c: Conflict) -> Self {
        CommitFail::Conflict(c)
    }
}

/// The logging step of a commit, called by [`Protocol::commit`] once validation passed,
/// with the write locks held and before any write is installed. `ts` orders the
/// transaction after every one it depends on (TicToc `commit_ts`, Silo TID, the 2PL and
/// MVCC commit clocks). Returns false when the record could not be logged.
pub trait CommitLog<R> {
    /// Logs the transaction's writes.
    fn log(&mut self, ts: u64, writes: &[WriteEntry<R>]) -> bool;
    /// Whether the protocol must keep its write locks after installing (NLR group commit,
    /// paper 001's Algorithm 3): the log releases them once the group is durable.
    fn hold(&self) -> bool {
        false
    }
    /// Under [`hold`](Self::hold): the lock word `word` stays locked; the log stores
    /// `release` into it once the record is durable.
    fn keep_locked(&mut self, word: &std::sync::atomic::AtomicU64, release: u64) {
        let _ = (word, release);
    }
}

/// No logging (in-memory databases, read-only transactions).
pub struct NoLog;

impl<R> CommitLog<R> for NoLog {
    #[inline]
    fn log(&mut self, _ts: u64, _writes: &[WriteEntry<R>]) -> bool {
        true
    }
}

/// A concurrency-control protocol: the one contract every protocol implements.
///
/// Records are created by the engine through [`Protocol::new_record`], stored in the index
/// by pointer, and freed only through epoch reclamation after [`Protocol::unlink`].
/// Every method that receives `&Self::Record` may assume the caller is pinned.
pub trait Protocol: Send + Sync + Sized + 'static {
    /// The per-key record.
    type Record: Send + Sync + 'static;
    /// Per-transaction state (read set, locks held, timestamps); reused across transactions.
    type TxnState: Send;
    /// Per-worker (per-thread) state: a Silo worker's last TID, a published timestamp...
    type Worker: Send + Sync;

    /// Short name (`tictoc`, `silo`, `2pl-nowait`...).
    fn name(&self) -> &'static str;
    /// Whether the engine must protect gaps (single-version serializable protocols).
    fn gap_protection(&self) -> bool;
    /// Whether [`commit`](Self::commit) can keep its write locks for the log
    /// ([`CommitLog::hold`]: NLR group commit).
    fn can_hold_locks(&self) -> bool {
        false
    }

    /// A new worker slot.
    fn new_worker(&self) -> Self::Worker;
    /// A new, empty transaction state.
    fn new_txn_state(&self) -> Self::TxnState;
    /// Starts a transaction on `st` (cleared by the engine's last commit or abort).
    fn begin(&self, worker: &Self::Worker, st: &mut Self::TxnState);
    /// The entries `st`'s sets have room for: past a limit (`KEEP_SET`, 16,384) the engine
    /// drops the state at the transaction's end instead of pooling it.
    fn state_capacity(&self, _st: &Self::TxnState) -> usize {
        0
    }

    /// A record for a key that is being inserted: absent, and already owned by `st` where
    /// the protocol locks at write time.
    fn new_record(&self, st: &mut Self::TxnState) -> Self::Record;
    /// A record for the gap after the last key (never in the index, never unlinked).
    fn new_sentinel(&self) -> Self::Record;
    /// A record holding `value` as committed before every running transaction (recovered
    /// at open, or loaded from the pages). `stamp` is the newest timestamp (or TID) of the
    /// records evicted so far: a reloaded record starts there, so that no later writer of
    /// the key can order itself before a reader of the record that left.
    fn new_loaded(&self, value: &[u8], stamp: u64) -> Self::Record;
    /// [`new_loaded`](Self::new_loaded) with its cell left unwritten: the caller stores the
    /// value (into the record's own allocation, see `cc::alloc_loaded`). `None` where
    /// [`value_cell`](Self::value_cell) is.
    fn new_loaded_bare(&self, stamp: u64) -> Option<Self::Record> {
        let _ = stamp;
        None
    }
    /// The record's [`ValueCell`], where its value lives in one (`None`: records whose
    /// values live in versions of their own).
    fn value_cell(rec: &Self::Record) -> Option<&ValueCell> {
        let _ = rec;
        None
    }
    /// The latest committed value of `rec` (`None`: absent or removed), read whole while
    /// transactions run: for a checkpoint's snapshot, and at close. It may wait for a
    /// writer that is installing.
    fn committed_value(&self, rec: &Self::Record, guard: &Guard) -> Option<Vec<u8>>;
    /// `rec`, made by [`new_record`](Self::new_record) for `st`, is now in the index. The
    /// transaction read the key absent, so this records a read of the placeholder's initial
    /// state: another transaction that writes the placeholder first makes it conflict.
    fn created(&self, st: &mut Self::TxnState, rec: &Self::Record);

    /// Appends the committed value of `rec` to `out` (when given). Returns whether the key
    /// is present. Records the read in `st` as the protocol needs.
    fn read(
        &self,
        st: &mut Self::TxnState,
        rec: &Self::Record,
        out: Option<&mut Vec<u8>>,
        guard: &Guard,
    ) -> Result<bool, Access>;
    /// Loads what a [`read`](Self::read) of `rec` will load, without waiting for it: a scan
    /// calls it for every record of a chunk before reading them, so that their cache
    /// misses overlap instead of coming one after another. Reads nothing for the
    /// transaction; may do nothing.
    #[inline]
    fn prefetch(&self, rec: &Self::Record, guard: &Guard) {
        let _ = (rec, guard);
    }
    /// Opens a snapshot read transaction on `st` (see [`snapshot`]): returns the `T` its
    /// reads see. It never aborts, keeps no read set and holds no lock.
    fn snapshot_open(&self, worker: &Self::Worker, st: &mut Self::TxnState) -> u64;
    /// Closes the snapshot at `t` opened on `st`.
    fn snapshot_close(&self, st: &mut Self::TxnState, t: u64);
    /// Appends `rec`'s value as of the snapshot `t` to `out` (when given); returns whether
    /// the key was present then.
    fn snapshot_read(
        &self,
        st: &mut Self::TxnState,
        rec: &Self::Record,
        t: u64,
        out: Option<&mut Vec<u8>>,
        guard: &Guard,
    ) -> Result<bool, Access>;
    /// The number of present keys the snapshot at `t` sees, without a scan; `None` when
    /// the protocol keeps no count (the engine counts by a scan).
    fn snapshot_count(&self, t: u64) -> Option<u64> {
        let _ = t;
        None
    }
    /// Sets the number of present keys at open (before any commit), which commits then
    /// change.
    fn set_count(&self, n: u64) {
        let _ = n;
    }
    /// Adds `n` present keys to the count (a bulk load, while no transaction runs).
    fn add_count(&self, n: u64) {
        let _ = n;
    }
    /// Versions kept for snapshots.
    fn snapshot_stats(&self) -> SnapshotStats {
        SnapshotStats::default()
    }

    /// Called once per record, at the transaction's first write of it (2PL takes its
    /// exclusive lock here; the optimistic protocols do nothing until commit).
    fn write(&self, st: &mut Self::TxnState, rec: &Self::Record) -> Result<(), Access>;

    /// Before a new key's placeholder enters the index: makes sure no one else inserts next
    /// to, or unlinks, `next` (the record after the new key) until
    /// [`unlatch_gap`](Self::unlatch_gap). 2PL takes the exclusive lock it needs anyway.
    fn latch_gap(&self, st: &mut Self::TxnState, next: &Self::Record) -> Result<(), Access>;
    /// Whether `rec` was never written by a committed transaction: a placeholder whose
    /// creator has not committed (or aborted). An insert next to one must also write the
    /// gap owner beyond it, which readers before the placeholder existed relied on.
    /// Protocols whose gap locks exclude such readers return `false`. Timestamps cannot
    /// answer this: an unlink or a read may move them without a commit.
    fn is_fresh(&self, rec: &Self::Record) -> bool;
    /// Ends [`latch_gap`](Self::latch_gap).
    fn unlatch_gap(&self, st: &mut Self::TxnState, next: &Self::Record);

    /// Validates `writes` (sorted by the engine by record address), logs them through `log`
    /// ([`CommitLog`]) and applies them. On error the protocol has already released what
    /// commit took; the engine then calls [`abort`](Self::abort) for what the transaction
    /// held before.
    fn commit<L: CommitLog<Self::Record>>(
        &self,
        worker: &Self::Worker,
        st: &mut Self::TxnState,
        writes: &mut [WriteEntry<Self::Record>],
        guard: &Guard,
        log: &mut L,
    ) -> Result<(), CommitFail>;
    /// Releases whatever the transaction holds.
    fn abort(&self, st: &mut Self::TxnState, writes: &[WriteEntry<Self::Record>]);

    /// Tries to latch an absent record so that it can leave the index.
    fn try_latch_absent(&self, rec: &Self::Record) -> UnlinkLatch;
    /// Latches `next`, the follower of a record being unlinked, without waiting (the caller
    /// holds the record, and waiting could close a cycle with a committer).
    fn latch_next(&self, next: &Self::Record) -> Result<(), Access>;
    /// Marks `rec` removed, moves its gap into `next` (raising `next`'s timestamp past
    /// `rec`'s so that gap readers of either conflict with later inserts), and releases
    /// `next`. `rec` stays latched for good: whoever still holds it looks the key up again.
    fn unlink(&self, worker: &Self::Worker, rec: &Self::Record, next: &Self::Record, guard: &Guard);
    /// Releases `next` when an unlink is abandoned.
    fn unlatch_next(&self, next: &Self::Record);
    /// Releases `rec` when an unlink is abandoned.
    fn unlatch_absent(&self, rec: &Self::Record);

    /// Latches `rec` so that it can leave memory (its page is on disk): only if no one
    /// holds it and, under MVCC, no running snapshot needs an older version than its
    /// newest. Returns its stamp (newest timestamp or TID; see
    /// [`new_loaded`](Self::new_loaded)).
    fn try_latch_evict(&self, rec: &Self::Record) -> Option<u64>;
    /// Marks a record latched by [`try_latch_evict`](Self::try_latch_evict) removed for
    /// good and lets its value go: whoever still holds it looks the key up again, and the
    /// validation of a read of it fails.
    fn evict(&self, worker: &Self::Worker, rec: &Self::Record, guard: &Guard);
    /// Releases a latch of [`try_latch_evict`](Self::try_latch_evict) (eviction abandoned).
    fn unlatch_evict(&self, rec: &Self::Record);
}

/// Frees locks that only a log flush releases (NLR group commit, paper 001's Algorithm 3:
/// commits keep their write locks until their group is durable).
pub(crate) trait LockWaiter: Send + Sync {
    /// Called by a waiter before it yields: flushes the lanes of its database that hold
    /// locks, so that neither a cycle of holders nor an idle holder blocks anyone.
    fn on_lock_wait(&self);
}

thread_local! {
    /// The database of the transaction this thread runs, while its commits hold locks.
    /// Per thread and per database: two databases in one process never flush each other.
    static WAITER: std::cell::RefCell<Option<std::sync::Arc<dyn LockWaiter>>> =
        const { std::cell::RefCell::new(None) };
}

/// Names (or clears) the database whose lanes this thread's lock waits flush.
pub(crate) fn set_lock_waiter(w: Option<std::sync::Arc<dyn LockWaiter>>) {
    WAITER.with(|c| *c.borrow_mut() = w);
}

fn lock_wait_hook() {
    let w = WAITER.with(|c| c.borrow().clone());
    if let Some(w) = w {
        w.on_lock_wait();
    }
}

/// Spins briefly, then yields: lock holders are short, but on two cores the holder may be
/// descheduled, and spinning would only keep it off the CPU.
pub(crate) struct Backoff(u32);

impl Backoff {
    pub(crate) fn new() -> Self {
        Backoff(0)
    }

    pub(crate) fn snooze(&mut self) {
        if self.0 >= 6 {
            // Waiting for real: locks held for an NLR commit group may be what blocks us.
            lock_wait_hook();
        }
        if self.0 < 6 {
            for _ in 0..(1 << self.0) {
                std::hint::spin_loop();
            }
        } else {
            std::thread::yield_now();
        }
        self.0 = self.0.saturating_add(1);
    }
}

/// Whether every record address in `recs` is in `writes` (sorted by address): `recs`
/// sorted, then one pass over both. Validation collects the reads it found locked and asks
/// once at the end: a binary search per such read was half of the validation of a
/// transaction that read and deleted 300K records.
pub(crate) fn all_in_sorted_writes<R>(writes: &[WriteEntry<R>], recs: &mut [usize]) -> bool {
    recs.sort_unstable();
    let mut w = writes.iter().map(|w| w.rec as usize).peekable();
    recs.iter().all(|&r| {
        while w.next_if(|&a| a < r).is_some() {}
        w.peek() == Some(&r)
    })
}

/// A map keyed by record address. Addresses are not attacker-chosen, so a multiplicative
/// hash replaces SipHash, which was a visible share of big transactions' write path.
pub(crate) type AddrMap<V> = std::collections::HashMap<usize, V, std::hash::BuildHasherDefault<AddrHasher>>;

/// The hasher of [`AddrMap`]: Fibonacci hashing of one `usize`.
#[derive(Default)]
pub(crate) struct AddrHasher(u64);

impl std::hash::Hasher for AddrHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }

    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    #[inline]
    fn write_usize(&mut self, n: usize) {
        self.0 = addr_hash(n);
    }
}

/// The hash of a record's address (see [`AddrMap`]).
#[inline]
pub(crate) fn addr_hash(n: usize) -> u64 {
    // Records are 8-byte aligned: drop the zero bits, then spread the rest.
    ((n as u64) >> 3).wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(29)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys pushed to one arena come back whole, the empty and the longest included.
    #[test]
    fn keys_in_the_arena_come_back_whole() {
        let mut arena = Vec::new();
        let long = vec![7u8; crate::limits::MAX_KEY_LEN];
        let keys: [&[u8]; 4] = [b"", b"a", &long, b"zz"];
        let at: Vec<KeyAt> = keys.iter().map(|k| KeyAt::push(&mut arena, k)).collect();
        for (k, a) in keys.iter().zip(&at) {
            assert_eq!(a.of(&arena), *k);
        }
        assert_eq!(arena.len(), 3 + crate::limits::MAX_KEY_LEN);
    }

    /// The locked reads validation collects are all the transaction's own writes, or it
    /// fails: duplicates and any order allowed, one foreign record enough to fail.
    #[test]
    fn locked_reads_are_checked_against_the_write_set() {
        let writes: Vec<WriteEntry<u64>> = [8usize, 16, 32]
            .iter()
            .map(|&a| WriteEntry {
                rec: a as *const u64,
                key: KeyAt(0),
                kind: WriteKind::Gap,
                present: false,
                created: false,
            })
            .collect();
        assert!(all_in_sorted_writes(&writes, &mut []));
        assert!(all_in_sorted_writes(&writes, &mut [16, 8, 16, 32]));
        assert!(!all_in_sorted_writes(&writes, &mut [8, 24]));
        assert!(!all_in_sorted_writes(&writes, &mut [40]));
        assert!(!all_in_sorted_writes(&writes, &mut [4, 8]));
        assert!(!all_in_sorted_writes::<u64>(&[], &mut [8]));
    }
}
