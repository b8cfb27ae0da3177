//! Snapshot read transactions under the single-version protocols (TicToc, Silo, 2PL):
//! versions kept beside a record only while an open snapshot may need them.
//!
//! # The stamp, and why a snapshot is consistent
//! A snapshot at `T` sees exactly the committed writers whose *stamp* is at most `T`. That
//! set is one state of a serial order when every dependency (write-read, write-write,
//! read-write) goes from a writer with a lower or equal stamp to one with a higher or equal
//! stamp: then no writer outside the set precedes one inside it. Per protocol:
//! - **TicToc**: the commit timestamp. A reader's `commit_ts` is at least the `wts` it read;
//!   a writer's exceeds the `rts` it overwrote, which every validated reader of the old
//!   version extended to its own `commit_ts`. Real time is *not* such an order: a TicToc
//!   reader may commit after a writer of what it read, with a lower timestamp.
//! - **Silo**: a counter drawn at the serialization point (write locks held, before
//!   validation), only while snapshots are open: a reader validated after its draw, before
//!   the overwriting writer locked; a writer drew after the one it depends on installed.
//! - **2PL**: its commit clock, drawn with every lock held (the lock point).
//!
//! `T` is the newest stamp of the commits already acknowledged (a snapshot sees every commit
//! that returned before it began). A writer whose stamp is at most `T` may still be
//! installing; it holds its write locks since before its stamp was known, so the snapshot,
//! which reads after choosing `T`, finds its records locked (2PL: marked installing) and
//! waits. A writer that locks later gets a stamp above `T`: TicToc commits above a *floor*
//! that each snapshot raises to its `T`, Silo's and 2PL's counters have passed `T`.
//!
//! # Versions
//! While any snapshot is open, a writer installs with its stamp and keeps the record's
//! history in a chain beside the value ([`Kept`]: newest first, the value as of a stamp; the
//! oldest, at stamp 0, is the value from before any open snapshot). A reader at `T` takes
//! the first version with stamp `<= T`. The chain's head repeats the record's value, so a
//! reader that meets a chain never reads the value cell. Writes when no snapshot is open
//! (*bare*) touch no chain: a snapshot that opens waits for the bare installs in flight
//! (each worker's flag, set before it reads the count of open snapshots: a Dekker pair with
//! the count) before it picks `T`, so it sees them whole and below `T`.
//!
//! Each keeping write prunes its record's chain with paper 000's EPO rule (as
//! `crate::mvcc::keep_plan` applies it to MVCC-SI): only the version each open snapshot sees survives, beside
//! the new head and the one below it (a snapshot that opens after the writer read the list
//! of open snapshots sees one of those two). So a record holds at most one version per open
//! snapshot plus two, however long a reader stays open. A chain is emptied only by a sweep
//! (when the last snapshot closes), which also forgets the record: records with a chain are
//! never unlinked or evicted (a snapshot may still see their older values), so the sweep's
//! list of them never names a freed record.

use std::sync::atomic::{fence, AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use crossbeam_epoch::{Atomic, Guard, Owned, Shared};
use parking_lot::{Mutex, RwLock};

use super::{Backoff, ValueCell};

/// A version kept for snapshots: the record's value as of `stamp` (`None`: absent).
pub(crate) struct Kept {
    stamp: u64,
    value: Option<Box<[u8]>>,
    next: Atomic<Kept>,
}

impl Kept {
    fn bytes(&self) -> i64 {
        (std::mem::size_of::<Kept>() + self.value.as_ref().map_or(0, |v| v.len())) as i64
    }
}

/// Frees a chain no one can reach any more (a record being dropped).
pub(crate) fn drop_chain(head: &mut Atomic<Kept>) {
    // SAFETY: the caller has the chain to itself (the record is being dropped), so no
    // reader is left and every node is owned by its predecessor's `next`.
    let guard = unsafe { crossbeam_epoch::unprotected() };
    let mut cur = head.swap(Shared::null(), Ordering::Relaxed, guard);
    while !cur.is_null() {
        // SAFETY: as above; each node is converted back to an owner once.
        let node = unsafe { cur.into_owned() };
        cur = node.next.load(Ordering::Relaxed, guard);
    }
}

/// What a snapshot reader needs of a record: its value cell, and a latch for sweeps.
pub(crate) trait Chained: Send + Sync + 'static {
    /// The record's value cell (with its chain).
    fn cell(&self) -> &ValueCell;
    /// Latches the record without waiting (a sweep skips it when busy).
    fn try_latch_sweep(&self) -> bool;
    /// Ends [`try_latch_sweep`](Self::try_latch_sweep).
    fn unlatch_sweep(&self);
}

/// A worker's part in the Dekker pair with snapshots that open, and (TicToc) the newest
/// stamp it installed.
#[derive(Default)]
pub struct SnapWorker {
    installing: AtomicBool,
    last: AtomicU64,
}

/// How a protocol's snapshots pick `T`.
#[derive(Clone, Copy)]
pub(crate) enum Order<'a> {
    /// TicToc: the newest stamp any worker published, which then becomes the floor.
    Published,
    /// Silo: the snapshot counter.
    Counter,
    /// 2PL: the protocol's commit clock (stamps are its values plus one).
    Clock(&'a AtomicU64),
}

/// The count of open snapshots, on a line of its own: every commit reads it.
#[repr(align(128))]
struct OpenCount(AtomicU64);

/// Open snapshots and the versions kept for them, one per database.
pub(crate) struct Snapshots {
    open: OpenCount,
    /// Silo: the stamp counter; TicToc: the floor every commit timestamp exceeds.
    clock: AtomicU64,
    workers: Mutex<Vec<Arc<SnapWorker>>>,
    /// The `T` of every open snapshot (a multiset).
    open_ts: Mutex<Vec<u64>>,
    /// Odd while a snapshot registers: a writer that reads the list meanwhile prunes nothing.
    list_version: AtomicU64,
    /// The open snapshots' `T`, distinct, descending.
    list: RwLock<Arc<[u64]>>,
    /// Records with a chain (addresses), for the sweep.
    chained: Mutex<Vec<usize>>,
    sweep_due: AtomicBool,
    versions: AtomicI64,
    bytes: AtomicI64,
    /// Test only: snapshot reads take the newest version whatever its stamp.
    pub(crate) read_newest: bool,
}

impl Default for Snapshots {
    fn default() -> Self {
        Snapshots {
            open: OpenCount(AtomicU64::new(0)),
            clock: AtomicU64::new(0),
            workers: Mutex::new(Vec::new()),
            open_ts: Mutex::new(Vec::new()),
            list_version: AtomicU64::new(0),
            list: RwLock::new(Arc::from(Vec::new())),
            chained: Mutex::new(Vec::new()),
            sweep_due: AtomicBool::new(false),
            versions: AtomicI64::new(0),
            bytes: AtomicI64::new(0),
            read_newest: false,
        }
    }
}

/// Versions kept for snapshots, for [`crate::db::Stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SnapshotStats {
    /// Snapshots open now.
    pub open: u64,
    /// Versions held in chains (each chain's head, a copy of its record's value, included).
    pub versions: i64,
    /// Bytes those versions take.
    pub bytes: i64,
    /// Records with a chain.
    pub records: u64,
}

impl Snapshots {
    /// A worker's state, known to snapshots that open.
    pub(crate) fn new_worker(&self) -> Arc<SnapWorker> {
        let w = Arc::new(SnapWorker::default());
        self.workers.lock().push(Arc::clone(&w));
        w
    }

    /// Whether a snapshot is open (a writer at its serialization point).
    #[inline]
    pub(crate) fn any_open(&self) -> bool {
        self.open.0.load(Ordering::SeqCst) > 0
    }

    /// The writer's half of the Dekker pair, right before its installs: whether they must
    /// keep versions. When not, the installs must end with [`end_bare`](Self::end_bare).
    #[inline]
    pub(crate) fn begin_install(&self, w: &SnapWorker) -> bool {
        w.installing.store(true, Ordering::SeqCst);
        if self.open.0.load(Ordering::SeqCst) == 0 {
            return false;
        }
        w.installing.store(false, Ordering::Release);
        true
    }

    /// Ends bare installs (after [`publish`](Self::publish), where the protocol publishes).
    #[inline]
    pub(crate) fn end_bare(&self, w: &SnapWorker) {
        w.installing.store(false, Ordering::Release);
    }

    /// TicToc: makes `stamp` known to snapshots that open from now on (before the locks go).
    #[inline]
    pub(crate) fn publish(&self, w: &SnapWorker, stamp: u64) {
        if stamp > w.last.load(Ordering::Relaxed) {
            w.last.store(stamp, Ordering::SeqCst);
        }
    }

    /// Silo: a stamp, drawn at the serialization point while a snapshot is open.
    #[inline]
    pub(crate) fn next_stamp(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// TicToc: the floor a commit timestamp must exceed (read with the write locks held).
    #[inline]
    pub(crate) fn floor(&self) -> u64 {
        self.clock.load(Ordering::SeqCst)
    }

    /// Opens a snapshot: returns its `T`.
    pub(crate) fn open(&self, order: Order<'_>) -> u64 {
        let mut open_ts = self.open_ts.lock();
        self.list_version.fetch_add(1, Ordering::SeqCst);
        self.open.0.fetch_add(1, Ordering::SeqCst);
        let workers: Vec<Arc<SnapWorker>> = self.workers.lock().clone();
        for w in &workers {
            let mut backoff = Backoff::new();
            while w.installing.load(Ordering::SeqCst) {
                backoff.snooze();
            }
        }
        let t = match order {
            Order::Published => {
                let t = workers.iter().map(|w| w.last.load(Ordering::SeqCst)).max().unwrap_or(0);
                self.clock.fetch_max(t, Ordering::SeqCst);
                t
            }
            Order::Counter => self.clock.load(Ordering::SeqCst),
            Order::Clock(c) => c.load(Ordering::SeqCst),
        };
        open_ts.push(t);
        *self.list.write() = sorted_distinct(&open_ts);
        self.list_version.fetch_add(1, Ordering::SeqCst);
        t
    }

    /// Closes the snapshot at `t`. The last one to close makes a sweep due.
    pub(crate) fn close(&self, t: u64) {
        let mut open_ts = self.open_ts.lock();
        if let Some(i) = open_ts.iter().position(|&x| x == t) {
            open_ts.swap_remove(i);
        }
        *self.list.write() = sorted_distinct(&open_ts);
        if self.open.0.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.sweep_due.store(true, Ordering::Release);
        }
    }

    /// The open snapshots' `T` (descending), or `None` while one registers.
    fn active(&self) -> Option<Arc<[u64]>> {
        let v = self.list_version.load(Ordering::SeqCst);
        if v & 1 == 1 {
            return None;
        }
        let list = Arc::clone(&self.list.read());
        (self.list_version.load(Ordering::SeqCst) == v).then_some(list)
    }

    /// Counters of kept versions.
    pub(crate) fn stats(&self) -> SnapshotStats {
        SnapshotStats {
            open: self.open.0.load(Ordering::Relaxed),
            versions: self.versions.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            records: self.chained.lock().len() as u64,
        }
    }

    fn account(&self, node: &Kept, sign: i64) {
        self.versions.fetch_add(sign, Ordering::Relaxed);
        self.bytes.fetch_add(sign * node.bytes(), Ordering::Relaxed);
    }

    /// Replaces `rec`'s value (its exclusive lock held). `keep`: a snapshot is open (from
    /// [`begin_install`](Self::begin_install); 2PL reads the count itself), and the value
    /// is installed at `stamp`. A bare write to a record that has a chain pushes the new
    /// value at stamp 0 (every later snapshot sees it) and drops the rest.
    pub(crate) fn store<R: Chained>(&self, rec: &R, value: Option<&[u8]>, keep: bool, stamp: u64, guard: &Guard) {
        let cell = rec.cell();
        let head = cell.kept.load(Ordering::Acquire, guard);
        if !keep && head.is_null() {
            cell.store(value, guard);
            return;
        }
        let mut below = head;
        if head.is_null() {
            // The value from before every open snapshot, at stamp 0.
            let mut old = Vec::new();
            let present = cell.load_into(Some(&mut old), guard);
            let base = Owned::new(Kept { stamp: 0, value: present.then(|| old.into()), next: Atomic::null() });
            self.account(&base, 1);
            below = base.into_shared(guard);
            self.chained.lock().push(rec as *const R as usize);
        }
        let stamp = if keep { stamp } else { 0 };
        let new = Owned::new(Kept { stamp, value: value.map(Into::into), next: Atomic::from(below) });
        self.account(&new, 1);
        let new = new.into_shared(guard);
        if keep {
            // The new head, the one below it, and what each open snapshot sees; nothing
            // is pruned while a snapshot registers.
            if let Some(list) = self.active() {
                self.prune(new, true, &list, guard);
            }
        } else {
            self.prune(new, false, &[], guard);
        }
        // Published before the value: a reader that sees the new value also sees the head.
        cell.kept.store(new, Ordering::Release);
        fence(Ordering::Release);
        cell.store(value, guard);
    }

    /// Unlinks the versions below `head` that no open snapshot (`list`, descending) sees:
    /// paper 000's EPO rule (as `crate::mvcc::keep_plan` applies it to MVCC-SI's chains),
    /// walked in place, since it runs on every keeping write. `keep_below`: `head` was just
    /// installed by a keeping write, and the version below it also stays (for snapshots
    /// that open after `list` was read: they see one of the two); else nothing opens
    /// unseen (a bare write), so the head alone serves them.
    fn prune(&self, head: Shared<'_, Kept>, keep_below: bool, list: &[u64], guard: &Guard) {
        // Which of the open snapshots already have their version (a bit each; a longer
        // list than 64 keeps everything below the 64th's version, which is safe).
        let mut seen = 0u64;
        let wanted = if list.len() >= 64 { u64::MAX } else { (1u64 << list.len()) - 1 };
        // A snapshot that opens unseen has `T` at or above every stamp below the head, so
        // it reads the head or the version right below it.
        let mut right_below = keep_below;
        let mut last = head;
        // SAFETY: chain nodes are freed only through the epoch; `guard` is pinned.
        let mut cur = unsafe { head.deref() }.next.load(Ordering::Acquire, guard);
        while !cur.is_null() {
            // SAFETY: as above.
            let node = unsafe { cur.deref() };
            let next = node.next.load(Ordering::Acquire, guard);
            let mut keep = false;
            if right_below {
                right_below = false;
                keep = true;
            }
            for (i, &t) in list.iter().enumerate().take(64) {
                if seen & (1 << i) == 0 && node.stamp <= t {
                    seen |= 1 << i;
                    keep = true;
                }
            }
            if list.len() > 64 && seen != wanted {
                keep = true;
            }
            if keep {
                // SAFETY: as above; only the holder of the record's lock changes `next`.
                unsafe { last.deref() }.next.store(cur, Ordering::Release);
                last = cur;
            } else {
                self.account(node, -1);
                // SAFETY: unreachable once `last.next` moves past it (stored at the next
                // kept node or after the loop, before this thread unpins); readers that
                // reached it are pinned.
                unsafe { guard.defer_destroy(cur) };
            }
            cur = next;
        }
        // SAFETY: as above.
        unsafe { last.deref() }.next.store(Shared::null(), Ordering::Release);
    }

    /// Sweeps the chains once the last snapshot closed: each record's chain is emptied
    /// (the value cell holds the newest value), and the record forgotten. Records that are
    /// busy stay for a later sweep. `R` is the protocol's record type.
    pub(crate) fn sweep_if_due<R: Chained>(&self) {
        if !self.sweep_due.load(Ordering::Acquire) || self.open.0.load(Ordering::SeqCst) > 0 {
            return;
        }
        let Some(mut chained) = self.chained.try_lock() else { return };
        self.sweep_due.store(false, Ordering::Release);
        let guard = &crossbeam_epoch::pin();
        let mut busy = false;
        chained.retain(|&addr| {
            // SAFETY: a record with a chain is never unlinked or evicted, so never freed
            // while listed here (the engine frees its records only after the protocol).
            let rec = unsafe { &*(addr as *const R) };
            if !rec.try_latch_sweep() {
                busy = true;
                return true;
            }
            let cell = rec.cell();
            let head = cell.kept.load(Ordering::Acquire, guard);
            // A snapshot opened meanwhile: it may need the chain (it stays listed).
            let keep = if self.open.0.load(Ordering::SeqCst) > 0 {
                true
            } else {
                cell.kept.store(Shared::null(), Ordering::Release);
                let mut cur = head;
                while !cur.is_null() {
                    // SAFETY: nodes are freed only through the epoch; `guard` is pinned.
                    let node = unsafe { cur.deref() };
                    let next = node.next.load(Ordering::Acquire, guard);
                    self.account(node, -1);
                    // SAFETY: unreachable from the record now; readers that reached it are pinned.
                    unsafe { guard.defer_destroy(cur) };
                    cur = next;
                }
                false
            };
            rec.unlatch_sweep();
            busy |= keep;
            keep
        });
        if busy {
            self.sweep_due.store(true, Ordering::Release);
        }
    }

    /// Appends `rec`'s value as of `t` to `out` (when given); returns whether it is
    /// present. The caller has waited until no writer whose stamp may be `<= t` holds
    /// the record. Returns `None` when a write raced the read (read again).
    #[inline]
    pub(crate) fn read_at(
        &self,
        cell: &ValueCell,
        t: u64,
        mut out: Option<&mut Vec<u8>>,
        guard: &Guard,
    ) -> Option<bool> {
        let head = cell.kept.load(Ordering::Acquire, guard);
        if head.is_null() {
            let base = out.as_deref().map_or(0, Vec::len);
            let present = cell.load_into(out.as_deref_mut(), guard);
            // Orders the value's loads before this one: a keeping write publishes its head
            // before its value, so an unchanged (empty) chain means the value was whole.
            fence(Ordering::Acquire);
            if !cell.kept.load(Ordering::Acquire, guard).is_null() {
                if let Some(out) = out {
                    out.truncate(base);
                }
                return None;
            }
            return Some(present);
        }
        let mut cur = head;
        while !cur.is_null() {
            // SAFETY: chain nodes are freed only through the epoch; `guard` is pinned.
            let node = unsafe { cur.deref() };
            if node.stamp <= t || self.read_newest {
                if let (Some(out), Some(v)) = (out, &node.value) {
                    out.extend_from_slice(v);
                }
                return Some(node.value.is_some());
            }
            cur = node.next.load(Ordering::Acquire, guard);
        }
        // Every version is newer than `t`: pruning keeps the one each open snapshot sees,
        // so this cannot happen; reading the oldest is the closest answer.
        debug_assert!(false, "no version of the record is as old as the snapshot");
        Some(false)
    }

    /// Whether `cell` has a chain (its record may not leave the index or memory).
    #[inline]
    pub(crate) fn has_chain(cell: &ValueCell, guard: &Guard) -> bool {
        !cell.kept.load(Ordering::Acquire, guard).is_null()
    }
}

/// `v`'s distinct values, descending.
fn sorted_distinct(v: &[u64]) -> Arc<[u64]> {
    let mut s = v.to_vec();
    s.sort_unstable_by(|a, b| b.cmp(a));
    s.dedup();
    Arc::from(s)
}
