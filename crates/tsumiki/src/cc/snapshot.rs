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
//! While any snapshot is open, a writer installs with its stamp and first pushes the value
//! it replaces onto the record's chain (`Kept`: newest first, each with the stamp of the
//! write that replaced it). A reader at `T` walks the leading versions with stamps above
//! `T` and takes the last one's value, or, when the first has a stamp at or below `T`
//! (or there is no chain), the value cell's; it re-reads the chain's head after the cell
//! and reads again if a write pushed a version meanwhile (a keeping write publishes the
//! version before it stores the value). Writes when no snapshot is open (*bare*) touch no
//! chain: the versions on it have stamps at or below the `T` of any snapshot that opens
//! later, which reads the cell. A snapshot that opens waits for the installs in flight
//! (each worker's flag, set before it reads the count of open snapshots: a Dekker pair with
//! the count) before it picks `T`, so it sees them whole and below `T`.
//!
//! A keeping write is *lean* when the chain's head has a stamp above every open `T`: the
//! value it replaces was installed at or after that stamp, so no open snapshot reads it
//! (each takes a version from the chain, which a lean write leaves alone), and it is stored
//! like a bare write. A snapshot that opens later has `T` at or above the write's stamp, as
//! for a bare write: one that registers before the writer reads `newest` makes it keep
//! (`list_version` is odd, or its `T` is listed), and one that registers after waits for
//! the writer's flag before it picks `T` (TicToc's published stamps then include this
//! write's; Silo's counter and 2PL's clock passed it before the read). So with one reader
//! open for minutes a record keeps one version, pushed by its first write after the
//! snapshot opened, and later writes allocate nothing.
//!
//! Each keeping write prunes its record's chain with paper 000's EPO rule (as
//! `crate::mvcc::keep_plan` applies it to MVCC-SI): only the version each open snapshot
//! reads survives, beside the new head (which a snapshot that opens after the writer read
//! the list of open snapshots may read). A version knows when its value was current
//! (from the stamp that installed it to the one that replaced it), so the write judges
//! the version it pushes past alone, one read instead of a walk of cold versions; the
//! whole chain is walked only when it is longer than the open snapshots need (versions
//! of snapshots closed since). So a record holds at most one version per open snapshot
//! plus one, however long a reader stays open. Unlinked versions are handed to the epoch
//! after the new head that bypasses them is published. A chain is emptied only by a sweep
//! (when the last snapshot closes), which also forgets the record: records with a chain are
//! never unlinked or evicted (a snapshot may still see their older values), so the sweep's
//! list of them never names a freed record.
//!
//! # The count
//! `len` of a snapshot at `T` needs no scan: each worker keeps the inserts less removals of
//! its commits, and, for those that installed while a snapshot was open, `(stamp, delta)`
//! notes. The count at `T` is the count at open plus every worker's total less its notes
//! stamped above `T`. A commit adds its delta inside a *window* that opens (SeqCst)
//! before its stamp is drawn; the reader, whose `T` was chosen (floor or counter raised
//! past it) before, waits for each window open when it looks. A window that opens after
//! that look draws a stamp above `T`, and sees the snapshot open, so it notes its delta:
//! the reader subtracts it, whether it was added yet or not (both are under the worker's
//! lock). Notes between the same two open `T`s are merged, and those at or below every
//! open `T` dropped (a snapshot that opens later has `T` at or above every stamp
//! published), so a worker keeps at most one per open snapshot beyond the last few.

use std::sync::atomic::{fence, AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use crossbeam_epoch::{Atomic, Guard, Owned, Shared};
use parking_lot::{Mutex, RwLock, RwLockReadGuard};
use smallvec::SmallVec;

use super::{Access, Backoff, ValueCell};

/// A version kept for snapshots: the record's value as of `stamp` (`None`: absent).
pub(crate) struct Kept {
    /// The stamp of the write that replaced `value`: snapshots at or above it see later
    /// values.
    stamp: u64,
    /// The stamp of the write that installed `value`, or one below it (0 when unknown): a
    /// snapshot at `T` reads this version only if `installed <= T < stamp`.
    installed: u64,
    /// Versions on the chain from this one down, as of when this one was pushed (after
    /// that push's prune): read by the next push only, under the record's lock.
    depth: AtomicU32,
    value: KeptValue,
    next: Atomic<Kept>,
}

/// Versions a prune unlinked, destroyed once the new head is published.
type Dropped<'g> = SmallVec<[Shared<'g, Kept>; 4]>;

/// The longest value a [`Kept`] holds in itself (one allocation per version).
const KEPT_INLINE: usize = 22;

/// A kept value: absent, short (in the version itself) or on the heap.
enum KeptValue {
    Absent,
    Inline(u8, [u8; KEPT_INLINE]),
    Heap(Box<[u8]>),
}

impl KeptValue {
    fn of(v: Option<&[u8]>) -> Self {
        match v {
            None => KeptValue::Absent,
            Some(v) if v.len() <= KEPT_INLINE => {
                let mut b = [0u8; KEPT_INLINE];
                b[..v.len()].copy_from_slice(v);
                KeptValue::Inline(v.len() as u8, b)
            }
            Some(v) => KeptValue::Heap(v.into()),
        }
    }

    fn get(&self) -> Option<&[u8]> {
        match self {
            KeptValue::Absent => None,
            KeptValue::Inline(n, b) => Some(&b[..*n as usize]),
            KeptValue::Heap(v) => Some(v),
        }
    }
}

impl Kept {
    fn bytes(&self) -> i64 {
        let heap = if let KeptValue::Heap(v) = &self.value { v.len() } else { 0 };
        (std::mem::size_of::<Kept>() + heap) as i64
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

/// A worker's part in the Dekker pair with snapshots that open, (TicToc) the newest
/// stamp it installed, and its share of the record count.
#[derive(Default)]
pub struct SnapWorker {
    installing: AtomicBool,
    last: AtomicU64,
    /// Odd while a commit of this worker may draw a stamp and count (see [`Window`]).
    window: AtomicU64,
    counted: Mutex<Counted>,
}

/// A worker's share of the record count: what its commits changed, and the recent ones
/// that open snapshots may not see.
#[derive(Default)]
struct Counted {
    /// Inserts less removals of every commit of this worker.
    delta: i64,
    /// `(stamp, delta)` of this worker's commits made while a snapshot was open, with
    /// entries between the same two open `T`s merged: a snapshot at `T` subtracts those
    /// stamped above `T`.
    recent: Vec<(u64, i64)>,
}

/// A commit's counting window ([`Snapshots::enter`]): from before its stamp is drawn until
/// its count is added. A count read at `T` waits for open windows; a commit whose window
/// opens later draws a stamp above `T`.
pub(crate) struct Window<'a>(&'a SnapWorker);

impl Drop for Window<'_> {
    fn drop(&mut self) {
        self.0.window.fetch_add(1, Ordering::Release);
    }
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
    list: RwLock<Vec<u64>>,
    /// The first of `list` (0 when empty), set with it: what a write checks to see whether
    /// it may replace a value without keeping it ([`store`](Self::store)).
    newest: AtomicU64,
    /// Records with a chain (addresses), for the sweep.
    chained: Mutex<Vec<usize>>,
    sweep_due: AtomicBool,
    versions: AtomicI64,
    bytes: AtomicI64,
    /// The record count the database opened with (workers add their deltas).
    base: AtomicI64,
    /// Test only: snapshot reads take the newest version whatever its stamp.
    pub(crate) read_newest: bool,
    /// Test only: a snapshot's count includes commits stamped after it.
    pub(crate) count_newest: bool,
}

impl Default for Snapshots {
    fn default() -> Self {
        Snapshots {
            open: OpenCount(AtomicU64::new(0)),
            clock: AtomicU64::new(0),
            workers: Mutex::new(Vec::new()),
            open_ts: Mutex::new(Vec::new()),
            list_version: AtomicU64::new(0),
            list: RwLock::new(Vec::new()),
            newest: AtomicU64::new(0),
            chained: Mutex::new(Vec::new()),
            sweep_due: AtomicBool::new(false),
            versions: AtomicI64::new(0),
            bytes: AtomicI64::new(0),
            base: AtomicI64::new(0),
            read_newest: false,
            count_newest: false,
        }
    }
}

/// Versions kept for snapshots ([`crate::Db::snapshot_stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SnapshotStats {
    /// Snapshots open now.
    pub open: u64,
    /// Versions held in chains: values that writes replaced while a snapshot was open.
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
    /// keep versions. Either way the installs end with [`end_install`](Self::end_install):
    /// a snapshot that opens meanwhile waits for them (bare ones, and keeping ones that
    /// replace a value without keeping it: see [`store`](Self::store)).
    #[inline]
    pub(crate) fn begin_install(&self, w: &SnapWorker) -> bool {
        w.installing.store(true, Ordering::SeqCst);
        self.open.0.load(Ordering::SeqCst) > 0
    }

    /// Ends the installs that [`begin_install`](Self::begin_install) began (after
    /// [`publish`](Self::publish), where the protocol publishes).
    #[inline]
    pub(crate) fn end_install(&self, w: &SnapWorker) {
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

    /// Opens `w`'s counting window: before the commit draws its stamp (TicToc: reads the
    /// floor), once it has something to install. The window closes when the result drops,
    /// after [`count`](Self::count).
    #[inline]
    pub(crate) fn enter<'w>(&self, w: &'w SnapWorker) -> Window<'w> {
        // SeqCst: the Dekker pair with `count_at`, which chose `T` (and raised the floor
        // or the counter past it) before it reads the window.
        w.window.fetch_add(1, Ordering::SeqCst);
        Window(w)
    }

    /// Adds a commit's `delta` (inserts less removals) to `w`'s count, inside its window,
    /// after its installs and before the bare ones end. `keep`: a snapshot was open at the
    /// install (it keeps versions), so `(stamp, delta)` is noted for the snapshots that
    /// must not see it; a commit without one installed below every `T` to come.
    pub(crate) fn count(&self, w: &SnapWorker, delta: i64, keep: bool, stamp: u64) {
        if delta == 0 {
            return;
        }
        let mut c = w.counted.lock();
        c.delta += delta;
        if !keep {
            // No snapshot was open: every one that opens from now on has `T` at or above
            // every stamp noted.
            c.recent.clear();
            return;
        }
        if c.recent.len() >= RECENT_MERGE {
            if let Some(list) = self.active() {
                merge_recent(&mut c.recent, &list);
            }
        }
        c.recent.push((stamp, delta));
    }

    /// Sets the record count the database opened with.
    pub(crate) fn set_base(&self, n: u64) {
        // A master record holds at most `i64::MAX` (checked when it is read).
        self.base.store(i64::try_from(n).unwrap_or(i64::MAX), Ordering::Relaxed);
    }

    /// Adds `n` keys to the count the database opened with (a bulk load, while no
    /// transaction runs).
    pub(crate) fn add_base(&self, n: u64) {
        let n = i64::try_from(n).unwrap_or(i64::MAX);
        let _ = self.base.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| Some(b.saturating_add(n)));
    }

    /// The number of present keys a snapshot at `t` sees: the count the database opened
    /// with, plus every worker's commits stamped at or below `t`. Waits for the counting
    /// windows open at the call (commits whose stamp may be at or below `t`). `None` if that
    /// is below zero: the count the database opened with was wrong (a damaged master
    /// record), and the caller counts by a scan.
    pub(crate) fn count_at(&self, t: u64) -> Option<u64> {
        let mut n = self.base.load(Ordering::Relaxed);
        // Not waiting with the list locked: snapshots that open and new workers need it.
        let workers = self.workers.lock().clone();
        for w in &workers {
            let open = w.window.load(Ordering::SeqCst);
            if open & 1 == 1 {
                let mut backoff = Backoff::new();
                while w.window.load(Ordering::Acquire) == open {
                    backoff.snooze();
                }
            }
            let c = w.counted.lock();
            n += c.delta;
            if !self.count_newest {
                n -= c.recent.iter().filter(|&&(s, _)| s > t).map(|&(_, d)| d).sum::<i64>();
            }
        }
        u64::try_from(n).ok()
    }

    /// Opens a snapshot: returns its `T`.
    pub(crate) fn open(&self, order: Order<'_>) -> u64 {
        let mut open_ts = self.open_ts.lock();
        self.list_version.fetch_add(1, Ordering::SeqCst);
        self.open.0.fetch_add(1, Ordering::SeqCst);
        let t = {
            let workers = self.workers.lock();
            for w in workers.iter() {
                let mut backoff = Backoff::new();
                while w.installing.load(Ordering::SeqCst) {
                    backoff.snooze();
                }
            }
            match order {
                Order::Published => {
                    let t = workers.iter().map(|w| w.last.load(Ordering::SeqCst)).max().unwrap_or(0);
                    self.clock.fetch_max(t, Ordering::SeqCst);
                    t
                }
                Order::Counter => self.clock.load(Ordering::SeqCst),
                Order::Clock(c) => c.load(Ordering::SeqCst),
            }
        };
        open_ts.push(t);
        if open_ts.len() == 1 || !self.list.read().contains(&t) {
            self.rebuild_list(&open_ts);
        }
        self.list_version.fetch_add(1, Ordering::SeqCst);
        t
    }

    /// Closes the snapshot at `t`. The last one to close makes a sweep due.
    pub(crate) fn close(&self, t: u64) {
        let mut open_ts = self.open_ts.lock();
        if let Some(i) = open_ts.iter().position(|&x| x == t) {
            open_ts.swap_remove(i);
        }
        // Rebuilt only when the last snapshot at `t` closed (several often share a `T`).
        if !open_ts.contains(&t) {
            self.rebuild_list(&open_ts);
        }
        if self.open.0.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.sweep_due.store(true, Ordering::Release);
        }
    }

    /// Sets `list` (and `newest`) to the distinct `T`s of `open_ts`.
    fn rebuild_list(&self, open_ts: &[u64]) {
        let mut list = self.list.write();
        sorted_distinct(open_ts, &mut list);
        self.newest.store(list.first().copied().unwrap_or(0), Ordering::SeqCst);
    }

    /// The newest open snapshot's `T`, or `None` while one registers. A snapshot that
    /// closes meanwhile may still count (a higher `T` keeps more).
    #[inline]
    fn newest_open(&self) -> Option<u64> {
        self.between_registrations(|| self.newest.load(Ordering::SeqCst))
    }

    /// The open snapshots' `T` (descending), or `None` while one registers.
    fn active(&self) -> Option<RwLockReadGuard<'_, Vec<u64>>> {
        self.between_registrations(|| self.list.read())
    }

    /// What `read` returns, if no snapshot registered meanwhile (`list_version` even and
    /// unchanged around it).
    #[inline]
    fn between_registrations<T>(&self, read: impl FnOnce() -> T) -> Option<T> {
        let v = self.list_version.load(Ordering::SeqCst);
        if v & 1 == 1 {
            return None;
        }
        let got = read();
        (self.list_version.load(Ordering::SeqCst) == v).then_some(got)
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
    /// [`begin_install`](Self::begin_install); 2PL reads the count itself), so the value
    /// being replaced goes onto the chain with `stamp`, this write's. A bare write leaves
    /// the chain alone: every version on it has a stamp at or below the `T` of any snapshot
    /// that opens later, so those read the value cell.
    pub(crate) fn store<R: Chained>(&self, rec: &R, value: Option<&[u8]>, keep: bool, stamp: u64, guard: &Guard) {
        let cell = rec.cell();
        if !keep {
            cell.store(value, guard);
            return;
        }
        let head = cell.kept.load(Ordering::Acquire, guard);
        // SAFETY: chain nodes are freed only through the epoch; `guard` is pinned.
        let prev = unsafe { head.as_ref() };
        if let Some(p) = prev {
            // The value being replaced was installed at or after `p.stamp`. When that is
            // above every open `T`, no open snapshot reads it (each reads the chain), and
            // none that opens later does (see the module: a lean write), so it goes unkept.
            if self.newest_open().is_some_and(|t| p.stamp > t) {
                cell.store(value, guard);
                return;
            }
        }
        let old = cell.with_bytes(guard, KeptValue::of);
        let node = Owned::new(Kept {
            stamp,
            // The write that pushed `prev` installed the value replaced now (or a bare
            // write since, with a higher stamp: `installed` errs low, which keeps more).
            installed: prev.map_or(0, |p| p.stamp),
            depth: AtomicU32::new(prev.map_or(1, |p| p.depth.load(Ordering::Relaxed) + 1)),
            value: old,
            next: Atomic::from(head),
        });
        self.account(&node, 1);
        let node = node.into_shared(guard);
        let mut dropped = Dropped::new();
        if head.is_null() {
            self.chained.lock().push(rec as *const R as usize);
        } else if let Some(list) = self.active() {
            // Nothing is pruned while a snapshot registers.
            self.prune(node, &list, guard, &mut dropped);
        }
        // Published before the value: a reader that saw any of the new value sees the new
        // head, and reads again.
        cell.kept.store(node, Ordering::Release);
        fence(Ordering::Release);
        cell.store(value, guard);
        // Destroyed only now that no chain reaches them: a reader that pins from here on
        // cannot reach them (one pinned before is waited for).
        for d in dropped {
            // SAFETY: as above.
            self.account(unsafe { d.deref() }, -1);
            // SAFETY: unlinked (the new head is published past them); readers that reached
            // them are pinned.
            unsafe { guard.defer_destroy(d) };
        }
    }

    /// Prunes the chain below `head` (just pushed, not yet published) against the open
    /// snapshots `list` (descending), adding what it unlinks to `dropped`. The version
    /// below `head`, the head until now, goes unless an open snapshot reads it; the
    /// versions further down were judged when they lost the head. Only when the chain is
    /// longer than the open snapshots need (one version each, plus the head: snapshots
    /// closed since left versions behind) is all of it walked ([`prune_all`](Self::prune_all)),
    /// so a write usually reads one version, not the whole chain.
    fn prune<'g>(&self, head: Shared<'g, Kept>, list: &[u64], guard: &'g Guard, dropped: &mut Dropped<'g>) {
        // SAFETY: chain nodes are freed only through the epoch; `guard` is pinned. `head`
        // was pushed onto a non-empty chain, so its next is not null.
        let new = unsafe { head.deref() };
        let prev_at = new.next.load(Ordering::Acquire, guard);
        // SAFETY: as above.
        let prev = unsafe { prev_at.deref() };
        let mut depth = new.depth.load(Ordering::Relaxed);
        if !list.iter().any(|&t| prev.installed <= t && t < prev.stamp) {
            // Only the holder of the record's lock changes `next`.
            new.next.store(prev.next.load(Ordering::Acquire, guard), Ordering::Release);
            dropped.push(prev_at);
            depth -= 1;
        }
        if depth as usize > list.len() + 1 {
            depth = self.prune_all(head, list, guard, dropped);
        }
        new.depth.store(depth, Ordering::Relaxed);
    }

    /// Unlinks the versions below `head` that no open snapshot (`list`, descending) reads:
    /// paper 000's EPO rule (as `crate::mvcc::keep_plan` applies it to MVCC-SI's chains).
    /// A snapshot at `T` reads the last of the leading versions with stamps above `T`.
    /// `head` (just pushed) stays: a snapshot that opens after `list` was read has `T` at
    /// or above every stamp below it, so it reads `head` or the value cell. Adds what it
    /// unlinks to `dropped`; returns the versions left.
    fn prune_all<'g>(&self, head: Shared<'g, Kept>, list: &[u64], guard: &'g Guard, dropped: &mut Dropped<'g>) -> u32 {
        const SHORT: usize = 16;
        let mut short = [Shared::null(); SHORT];
        let mut long = Vec::new();
        let mut n = 0;
        let mut cur = head;
        while !cur.is_null() {
            if n < SHORT {
                short[n] = cur;
            } else {
                if n == SHORT {
                    long.extend_from_slice(&short);
                }
                long.push(cur);
            }
            n += 1;
            // SAFETY: chain nodes are freed only through the epoch; `guard` is pinned.
            cur = unsafe { cur.deref() }.next.load(Ordering::Acquire, guard);
        }
        let nodes: &[Shared<'_, Kept>] = if n <= SHORT { &short[..n] } else { &long };
        // SAFETY: as above.
        let stamp = |i: usize| unsafe { nodes[i].deref() }.stamp;
        let mut keep = [false; SHORT];
        let mut keep_long = vec![false; if n > SHORT { n } else { 0 }];
        let keep: &mut [bool] = if n <= SHORT { &mut keep[..n] } else { &mut keep_long };
        keep[0] = true;
        for &t in list {
            let lead = (0..n).take_while(|&i| stamp(i) > t).count();
            if lead > 0 {
                keep[lead - 1] = true;
            }
        }
        let mut last = head;
        let mut left = 1;
        for (i, &node) in nodes.iter().enumerate().skip(1) {
            if keep[i] {
                // SAFETY: as above; only the holder of the record's lock changes `next`.
                unsafe { last.deref() }.next.store(node, Ordering::Release);
                last = node;
                left += 1;
            } else {
                dropped.push(node);
            }
        }
        // SAFETY: as above.
        unsafe { last.deref() }.next.store(Shared::null(), Ordering::Release);
        left
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

    /// A snapshot's read at `t` of the record whose value `cell` is: waits while `held`
    /// (a writer whose stamp may be `<= t` installs while it holds the record), then reads
    /// the value `t` sees ([`read_at`](Self::read_at)). A record evicted or unlinked
    /// meanwhile (only one without a chain leaves) is looked up again.
    #[inline]
    pub(crate) fn read_when_free(
        &self,
        cell: &ValueCell,
        t: u64,
        mut out: Option<&mut Vec<u8>>,
        guard: &Guard,
        held: impl Fn() -> bool,
    ) -> Result<bool, Access> {
        let mut backoff = Backoff::new();
        loop {
            if held() {
                if cell.is_removed(guard) {
                    return Err(Access::Removed);
                }
                backoff.snooze();
                continue;
            }
            match self.read_at(cell, t, out.as_deref_mut(), guard) {
                Some(false) if cell.is_removed(guard) => return Err(Access::Removed),
                Some(present) => return Ok(present),
                None => continue,
            }
        }
    }

    /// Closes the snapshot at `t` ([`close`](Self::close)), then sweeps if that was the
    /// last one; `R` is the protocol's record type.
    pub(crate) fn close_sweeping<R: Chained>(&self, t: u64) {
        self.close(t);
        self.sweep_if_due::<R>();
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
        // The value at `t` is the one the last of the leading versions with stamps above
        // `t` replaced; with none, the cell's.
        let mut seen = None;
        let mut cur = head;
        while !cur.is_null() && !self.read_newest {
            // SAFETY: chain nodes are freed only through the epoch; `guard` is pinned.
            let node = unsafe { cur.deref() };
            if node.stamp <= t {
                break;
            }
            seen = Some(node);
            cur = node.next.load(Ordering::Acquire, guard);
        }
        if let Some(node) = seen {
            let v = node.value.get();
            if let (Some(out), Some(v)) = (out, v) {
                out.extend_from_slice(v);
            }
            return Some(v.is_some());
        }
        let base = out.as_deref().map_or(0, Vec::len);
        let present = cell.load_into(out.as_deref_mut(), guard);
        // Orders the value's loads before this one: a keeping write publishes its version
        // before it stores the value, so an unchanged head means the value was whole (and
        // no bare write runs while a snapshot is open).
        fence(Ordering::Acquire);
        if cell.kept.load(Ordering::Acquire, guard) != head {
            if let Some(out) = out {
                out.truncate(base);
            }
            return None;
        }
        Some(present)
    }

    /// Asks for the head of `cell`'s chain, if it has one: a committer calls it once it
    /// holds its records, so that the push ([`store`](Self::store)), which reads the head,
    /// finds it in the cache and the heads of a write set arrive together.
    #[inline]
    pub(crate) fn prefetch_head(cell: &ValueCell, guard: &Guard) {
        let head = cell.kept.load(Ordering::Relaxed, guard);
        if !head.is_null() {
            crate::prefetch::prefetch_at(head.as_raw().cast());
        }
    }

    /// Whether `cell` has a chain (its record may not leave the index or memory).
    #[inline]
    pub(crate) fn has_chain(cell: &ValueCell, guard: &Guard) -> bool {
        !cell.kept.load(Ordering::Acquire, guard).is_null()
    }
}

/// Notes in a worker's [`Counted::recent`] past which they are merged.
const RECENT_MERGE: usize = 32;

/// Merges the notes of finished commits that no open snapshot (`list`: their `T`,
/// descending) tells apart: those at or below every `T` go (every snapshot sees them),
/// those between the same two `T`s become one, with the highest of their stamps. A
/// snapshot that opens later has `T` at or above every stamp published before, so at or
/// above all of these: it sees them all, merged or not.
fn merge_recent(recent: &mut Vec<(u64, i64)>, list: &[u64]) {
    // Above how many open `T`s a stamp is: 0 drops it, equal counts merge.
    let above = |s: u64| list.iter().filter(|&&t| s > t).count();
    let mut merged: Vec<(usize, u64, i64)> = Vec::with_capacity(list.len());
    for &(s, d) in recent.iter() {
        let b = above(s);
        if b == 0 {
            continue;
        }
        match merged.iter_mut().find(|m| m.0 == b) {
            Some(m) => {
                m.1 = m.1.max(s);
                m.2 += d;
            }
            None => merged.push((b, s, d)),
        }
    }
    recent.clear();
    recent.extend(merged.into_iter().filter(|m| m.2 != 0).map(|m| (m.1, m.2)));
}

/// Sets `out` to `v`'s distinct values, descending.
fn sorted_distinct(v: &[u64], out: &mut Vec<u64>) {
    out.clear();
    out.extend_from_slice(v);
    out.sort_unstable_by(|a, b| b.cmp(a));
    out.dedup();
}
