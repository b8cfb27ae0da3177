//! The files of a database and their life cycle: open (lock, master record, the page
//! store's table, recovery), checkpoints while open (a new generation of logs, the pages
//! the last one changed written beside it, the older logs deleted), and close.
//!
//! The state at the start of a generation is the page store's (`pages`, paper 004): a
//! translation table the master record names, and page chains of base and delta images.
//! Opening never invents a state and never destroys one it cannot prove obsolete:
//! - the master record names the table by address, length and CRC32C, the table names
//!   every image the same way; a missing, stale, damaged or foreign one is
//!   [`Error::Corrupt`], never an empty or smaller database;
//! - logs newer than the master record allows are [`Error::Corrupt`] (a master record put
//!   back or crafted), never deleted;
//! - files are deleted, and segments reused, only after the master record naming their
//!   replacement is durable;
//! - every setting is validated before anything is created.

pub mod budget;
pub(crate) mod check;
pub(crate) mod inspect;
pub mod master;
mod options;
pub(crate) mod pages;

pub use options::{StoreOptions, MAX_CHECKPOINT_HELPERS};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::error::{Error, Poison};
use crate::plants::Plants;
use crate::storage::{NvmStorage, Storage};
use crate::wal::format::parse_segment_name;
use crate::wal::recovery::{self, LaneEnd, Logged, RecoveryStats};
use crate::wal::{CommitMode, Device, Durability, LogOptions, Pacing, Release, Wal};
use budget::CacheBudget;
use master::{read_master, write_master, Master, MAX_GENERATION};
use pages::{Change, Changes, ImageRef, PageReads, PageStore, StoreStats};

/// The files behind a database opened with a path.
pub(crate) struct Durable {
    storage: Arc<dyn Storage>,
    pub(crate) wal: Arc<Wal>,
    /// The current generation, the table it started from, and the page store; held
    /// through a checkpoint or close, so that only one runs at a time.
    current: Mutex<Current>,
    /// The page store's read side: loads read the durable table without `current`.
    reads: Arc<PageReads>,
    _lock: Box<dyn Send + Sync>,
    closed: AtomicBool,
    pub(crate) recovery: RecoveryStats,
    /// Opened read-only (`Options::read_only`, or on a full disk): readable, every commit
    /// and checkpoint refused, nothing written at open or close.
    pub(crate) read_only: bool,
    /// Whether the logs are files a checkpoint can read back (which keys changed); if
    /// not (no log, NVM emulation), a checkpoint rewrites every page.
    logs_readable: bool,
    /// The logged values a checkpoint keeps in memory (see [`recovery::logged_writes`]):
    /// a quarter of what recovery gathers before writing to the pages (a sixteenth of
    /// the cache), since checkpoints run beside a full cache.
    value_budget: usize,
    /// Whether the pages were left on disk at open, to be loaded as their keys are first
    /// used ([`Durable::page_lows`], [`Durable::load_range`]).
    pub(crate) lazy: bool,
    /// The pages a lazy open loaded whole, with the kept log replayed over them (see
    /// `kept_logs`): they are in memory, written in the open's generation.
    pub(crate) preloaded: Vec<pages::PageLoad>,
    /// The generation whose starting state the pages hold: the commits of every earlier
    /// generation are in them.
    covered: std::sync::atomic::AtomicU64,
    /// The generation resumed at open (its logs held commits of earlier processes, see
    /// `kept_logs`) and the change in the count those make.
    resumed: Option<(u64, i64)>,
    /// [`StoreOptions::close_keeps_short_log`].
    close_keeps_short_log: bool,
    /// See [`resume_limit`].
    resume_limit: u64,
}

/// The most log a close keeps for the next open to resume (see `Durable::keeps_log`):
/// replayed at that open, a few hundred single-record commits cost about what a
/// checkpoint at close would.
const KEEP_LOG_BYTES: u64 = 128 << 10;
/// The largest page store (live bytes) whose close keeps its log: the next open loads the
/// pages the log wrote (all of them, when it replays into memory only). Never more than a quarter of the cache's share for records either (see
/// [`resume_limit`]).
const KEEP_STORE_BYTES: u64 = 1 << 20;

/// The largest page store whose logs a close keeps and an open resumes: the open loads it
/// whole, which must fit the cache's share for records (a record in memory takes a few
/// times its bytes in a page).
fn resume_limit(budget: &CacheBudget) -> u64 {
    KEEP_STORE_BYTES.min(budget.records as u64 / 4)
}

/// The most bytes of log files (every lane's segments) an open reads to find whether a
/// close kept them (see [`kept_logs`]): a log that turns out not to be kept is read twice.
const RESUME_FILE_BYTES: u64 = 4 << 20;

/// A kept generation's logs replayed in memory: the statistics, the changes in key order,
/// and where each lane ends.
type KeptLogs = (RecoveryStats, Vec<Change>, Vec<LaneEnd>);

/// The logs of `gens` replayed into memory, with where each lane ends, if a close kept
/// them for the next open to resume (see `Durable::keeps_log`): one generation, under NLR
/// with a count recovery may add to, every lane ending with a kept end and nothing valid
/// past it, and their files small; `may`: what the caller requires besides. `None`
/// otherwise (recovery then replays them into the pages and starts a new generation, as
/// after a crash). `past_torn`: the plant `resume_past_torn_tail`.
fn kept_logs(
    storage: &dyn Storage,
    gens: &[u64],
    m: &Master,
    may: bool,
    past_torn: bool,
) -> Result<Option<KeptLogs>, Error> {
    if !may
        || gens.len() != 1
        || m.elr
        || replay_base(m).is_none()
        || recovery::log_bytes(storage, gens[0])? > RESUME_FILE_BYTES
    {
        return Ok(None);
    }
    let mut ends = Vec::new();
    let (st, changes) = replay_changes_to_ends(storage, gens, m, usize::MAX, |_| Ok(()), &mut ends)?;
    let kept = !ends.is_empty()
        && ends.len() as u64 == st.lanes
        && ends
            .iter()
            .enumerate()
            .all(|(i, e)| usize::from(e.lane) == i && e.kept && !e.ended && (!e.valid_past_tail || past_torn));
    Ok(kept.then_some((st, changes, ends)))
}

/// Listings of `storage` served from the last one until dropped (see
/// [`Storage::cache_listing`]).
struct CachedListing(Arc<dyn Storage>);

impl CachedListing {
    fn new(storage: &Arc<dyn Storage>) -> CachedListing {
        storage.cache_listing(true);
        CachedListing(storage.clone())
    }
}

impl Drop for CachedListing {
    fn drop(&mut self) {
        self.0.cache_listing(false);
    }
}

/// Receives the recovered state, one live key and its value at a time.
pub(crate) type Loader<'a> = pages::Sink<'a>;

/// The engine's committed state, as a checkpoint or close reads it (safe while
/// transactions run: every value is the latest committed one when read).
pub(crate) trait CommittedState: Sync {
    /// The latest committed values of ascending `keys` (`None`: absent), handing each key
    /// and value to `f` in order (keys in one leaf share its descent). A value may be
    /// newer than the call, never older.
    fn get_sorted<'k>(&self, keys: &mut dyn Iterator<Item = &'k [u8]>, f: &mut dyn FnMut(&'k [u8], Option<Vec<u8>>));
    /// Every live key's latest committed value, in key order.
    fn scan(&self, f: &mut Loader<'_>) -> Result<(), Error>;
    /// Prepares the calling thread (a checkpoint's helper) for
    /// [`get_sorted`](Self::get_sorted) as the checkpoint's own thread is prepared: under
    /// NLR group commit, reading a record whose lock a pending group holds must flush
    /// that group, or the read spins until some commit fills it.
    fn enter_helper(&self);
}

struct Current {
    generation: u64,
    table: Option<ImageRef>,
    pages: PageStore,
    /// Present keys in the state the generation started from (`None`: unknown until the
    /// engine counts them at open, [`Durable::set_count`]).
    count: Option<u64>,
}

pub(crate) fn table_ref(t: Option<(u32, u64, u32, u32)>) -> Option<ImageRef> {
    t.map(|(seg, off, len, crc)| ImageRef { seg, off, len, crc })
}

/// The master record naming `generation` and `table`, with `log`'s release and segment
/// size.
fn master(generation: u64, table: Option<ImageRef>, last_exit: bool, log: &LogOptions, count: Option<u64>) -> Master {
    Master {
        generation,
        table: table_fields(table),
        last_exit,
        elr: log.release == Release::Elr,
        segment_size: log.segment_size,
        count,
        count_replayable: log.release == Release::Elr || log.durability == Durability::Sync,
    }
}

/// `count` changed by `delta` (a generation's or a replay's inserts less removals); unknown
/// when that goes below zero (a count that was wrong: the engine counts again at open).
fn counted(count: Option<u64>, delta: i64) -> Option<u64> {
    count.and_then(|c| c.checked_add_signed(delta))
}

/// The count that recovery from `m` starts from: none when `m`'s logs may hold commits
/// without one they depended on.
fn replay_base(m: &Master) -> Option<u64> {
    m.count.filter(|_| m.count_replayable)
}

fn table_fields(t: Option<ImageRef>) -> Option<(u32, u64, u32, u32)> {
    t.map(|r| (r.seg, r.off, r.len, r.crc))
}

/// Why a database opened read-only: asked to, or the disk was full.
enum ReadOnly {
    Asked,
    DiskFull(Error),
}

/// Opens the database in `storage` with the validated settings `settings`: takes its
/// lock, recovers its state, and starts a new log (per `log` and `policy`). `load`
/// receives the recovered state, one live key at a time in strictly increasing key order
/// (what a bulk load wants). Replay gathers at most about `replay_bytes` of replayed
/// writes in memory before it writes them to the pages (see [`replay_changes`]).
///
/// `read_only` (`Options::read_only`) writes nothing at all: the lock is taken shared, no
/// master record, log, registry or page is written and no stale file removed; a crash's
/// logs are replayed into memory only (as on a full disk), so the files stay as they
/// were for the next read-write open to recover.
#[allow(clippy::too_many_arguments)] // each is a separate part of the open, as before
pub(crate) fn open(
    storage: Arc<dyn Storage>,
    settings: StoreOptions,
    log: LogOptions,
    policy: CommitMode,
    plants: Plants,
    load: &mut Loader<'_>,
    budget: CacheBudget,
    read_only: bool,
) -> Result<Durable, Error> {
    let replay_bytes = budget.replay;
    let locked = if read_only { storage.lock_shared() } else { storage.lock() };
    let lock = locked.map_err(|e| match e.kind() {
        std::io::ErrorKind::WouldBlock => Error::Locked(e.to_string()),
        _ => Error::io("locking the database", e),
    })?;
    // Under the lock no one else changes the directory: the open's dozen listings (master
    // records, generations, lanes, stale logs) become one.
    let _listing = CachedListing::new(&storage);
    let mut stats = RecoveryStats::default();
    // Opening must not need free space: on a full disk the database opens read-only.
    let mut read_only: Option<ReadOnly> = read_only.then_some(ReadOnly::Asked);
    let asked = read_only.is_some();
    let seg_bytes = settings.page_segment_size;
    let early_reuse = plants.early_segment_reuse;
    // Pages stay on disk until used when a checkpoint can tell the changed keys from the
    // log (it writes only those, all of them in memory); otherwise it rewrites every page
    // from memory, which needs them all there.
    let logs_readable = policy.logs() && log.device == Device::File;
    let mut lazy = logs_readable;
    // The pages a lazy open loaded (see `Durable::preloaded`).
    let mut preloaded = Vec::new();
    let open_pages = |table: Option<ImageRef>| -> Result<PageStore, Error> {
        let mut p = PageStore::open(storage.clone(), seg_bytes, table, early_reuse)?;
        p.set_helpers(settings.checkpoint_helpers);
        Ok(p)
    };
    // The state recovered into memory only, the files untouched (a read-only open, or a
    // full disk): `pages` as the durable table left them, the logs of `gens` replayed
    // over them. Loaded whole (no durable page holds the replayed writes), unless nothing
    // was replayed and a lazy open can still load pages as they are used. Returns the
    // statistics and whether the open stays lazy.
    let in_memory = |pages: &PageStore,
                     gens: &[u64],
                     m: &Master,
                     load: &mut Loader<'_>,
                     lazy: bool|
     -> Result<(RecoveryStats, bool), Error> {
        let (mut st, changes) = replay_changes(&*storage, gens, m, usize::MAX, |_| Ok(()))?;
        if lazy && changes.is_empty() {
            return Ok((st, true));
        }
        st.keys = pages.load_all(&changes, load)?;
        Ok((st, false))
    };
    // A clean exit's open defers its master record (see below).
    let mut unclean = None;
    // A generation resumed (see `kept_logs`): where its lanes end, and the change in the
    // count its logs make.
    let mut resumed: Option<(Vec<LaneEnd>, i64)> = None;
    let (generation, table, pages, count) = match read_master(&*storage)? {
        // `Db::open` looked for MASTER already; this is an open through a storage.
        None if asked => return Err(Error::NotFound("no database here (a read-only open creates none)".into())),
        None => {
            write_master(&*storage, &master(1, None, false, &log, Some(0)))?;
            (1, None, open_pages(None)?, Some(0))
        }
        Some(m) => {
            recovery::check_generations(&*storage, m.generation)?;
            let table = table_ref(m.table);
            let mut pages = open_pages(table)?;
            // A later checkpoint wrote after the table this master record names: only a
            // checkpoint (or a recovery) that did not finish may have, and it leaves this
            // generation's logs. Otherwise the master record was put back.
            if let Some(w) = pages.newest_unnamed()? {
                let unfinished = w <= m.generation.saturating_add(2) && recovery::has_logs(&*storage, m.generation)?;
                if w > m.generation && !unfinished {
                    return Err(Error::Corrupt(format!(
                        "the page store holds writes of generation {w}, newer than MASTER's {}: MASTER is older than the database",
                        m.generation
                    ).into()));
                }
            }
            if m.last_exit {
                if recovery::has_logs(&*storage, m.generation.saturating_add(1))? {
                    return Err(Error::Corrupt(
                        format!(
                            "MASTER says generation {} ended cleanly, but logs of the next one exist",
                            m.generation
                        )
                        .into(),
                    ));
                }
                // Commits logged in the generation that ended cleanly came after a later
                // master record (an open marks the exit unclean before any lane starts):
                // that record is damaged or was taken away, and deleting these logs
                // would lose them.
                if recovery::records_logged(&*storage, m.generation, m.segment_size)? > 0 {
                    return Err(Error::Corrupt(format!(
                        "MASTER says generation {} ended cleanly, but commits were logged in it after: a newer master record is damaged or missing",
                        m.generation
                    ).into()));
                }
                // A clean exit: the pages are the whole state, handed over in key order
                // as they are read (or when used).
                if !lazy {
                    stats.keys = pages.load_all(&[], load)?;
                }
                // A read-only open leaves this generation's leftover logs, its registry
                // and the clean exit's MASTER as they are, for a read-write open to clear.
                if !asked {
                    // This generation's log starts empty: its old segments are obsolete now
                    // that the durable master record says the pages hold everything.
                    recovery::remove_stale(&storage, m.generation)?;
                    // Its lanes start again from lane 0, so its lane registry goes too.
                    for n in storage.list().map_err(|e| Error::io("listing the database directory", e))? {
                        if parse_segment_name(&n).is_some() || crate::wal::format::parse_registry_name(&n).is_some() {
                            storage.remove(&n).map_err(|e| Error::io(format!("removing {n}"), e))?;
                        }
                    }
                    // The master record marking the exit unclean is written with the first
                    // lane (`Wal::set_first_write`): the clean exit's stays true while
                    // nothing is written, so an open that commits nothing writes nothing.
                    // Unless its count is unknown: the open counts, and the close records it.
                    let record = master(m.generation, table, false, &log, m.count);
                    if m.count.is_some() {
                        unclean = Some(record);
                    } else {
                        match write_master(&*storage, &record) {
                            Ok(()) => {}
                            // The clean exit's master record stays true while nothing is
                            // written.
                            Err(e) if disk_full(&e) => read_only = Some(ReadOnly::DiskFull(e)),
                            Err(e) => return Err(e),
                        }
                    }
                }
                (m.generation, table, pages, m.count)
            } else {
                // A checkpoint that did not finish leaves the next generation's logs too.
                let mut gens = vec![m.generation];
                if recovery::has_logs(&*storage, m.generation.saturating_add(1))? {
                    gens.push(m.generation + 1);
                }
                if asked {
                    // The crashed tail replayed into memory only: the files stay as the
                    // crash left them, for a read-write open to recover the same state.
                    (stats, lazy) = in_memory(&pages, &gens, &m, load, lazy)?;
                    (m.generation, table, pages, counted(replay_base(&m), stats.count_delta))
                } else if let Some((st, changes, ends)) = kept_logs(
                    &*storage,
                    &gens,
                    &m,
                    // The logs go on as they were written: NLR (the master record says how
                    // they are replayed, and nothing rewrites it while they grow).
                    pages.live_bytes() <= resume_limit(&budget) && log.release == Release::Nlr,
                    plants.resume_past_torn_tail,
                )? {
                    // A close kept this generation's short log (see `Durable::keeps_log`):
                    // replayed into memory (no page holds it, so the pages it wrote are
                    // loaded with it), and its lanes take the next commits after their
                    // kept ends.
                    // MASTER says the logs are to be replayed already.
                    stats = st;
                    if lazy {
                        // Only the pages it wrote, with its writes over them: the others
                        // hold nothing it changed, and load as they are used (loading
                        // all of them was most of a short-lived handle's open).
                        (stats.keys, preloaded) = pages.load_touched(&changes, load)?;
                    } else {
                        stats.keys = pages.load_all(&changes, load)?;
                    }
                    resumed = Some((ends, stats.count_delta));
                    // Older generations' segments a checkpoint kept for reuse: obsolete.
                    recovery::remove_stale(&storage, m.generation)?;
                    (m.generation, table, pages, m.count)
                } else {
                    let no_logs = gens.len() == 1 && !recovery::has_logs(&*storage, m.generation)?;
                    let g = gens[gens.len() - 1]
                        .checked_add(1)
                        .filter(|&g| g <= MAX_GENERATION)
                        .ok_or_else(|| Error::Corrupt("MASTER names the last possible generation".into()))?;
                    // The replayed writes go to the pages as deltas of generation `g` a batch
                    // at a time, whenever they pass `replay_bytes` (lazy open: memory bounded
                    // by the cache, not by the log since the last checkpoint). The table
                    // naming them is written once at the end; a crash before its master
                    // record leaves the old one, whose images no write here touched.
                    let limit = if lazy { replay_bytes } else { usize::MAX };
                    let attempt = (|| -> Result<Option<ImageRef>, Error> {
                        let (st, changes) = replay_changes(&*storage, &gens, &m, limit, |c| {
                            pages.apply(g, &c.as_slice(), None)?;
                            pages.write_pending()
                        })?;
                        stats = st;
                        if !lazy {
                            stats.keys = pages.load_all(&changes, load)?;
                        }
                        if no_logs {
                            return Ok(None);
                        }
                        pages.apply(g, &changes.as_slice(), None)?;
                        let t = pages.write_table()?;
                        write_master(
                            &*storage,
                            &master(g, Some(t), false, &log, counted(replay_base(&m), stats.count_delta)),
                        )?;
                        Ok(Some(t))
                    })();
                    match attempt {
                        // Nothing to replay (a crash before the first commit): the table is
                        // the state, and the lanes start this generation's logs. Writing
                        // nothing keeps the rule that a write after the table means a later
                        // generation.
                        Ok(None) => {
                            recovery::remove_stale(&storage, m.generation)?;
                            (m.generation, table, pages, m.count)
                        }
                        Ok(Some(t)) => {
                            pages.commit();
                            recovery::remove_stale(&storage, g)?;
                            (g, Some(t), pages, counted(replay_base(&m), stats.count_delta))
                        }
                        // The recovered state stays readable in memory; the files stay as
                        // they were (the old master record still names them all).
                        Err(e) if disk_full(&e) => {
                            read_only = Some(ReadOnly::DiskFull(e));
                            let mut pages = pages;
                            if lazy {
                                // The replayed writes are in no durable page: read again
                                // from the table as it was, with them all applied. (An
                                // eager open loaded them all already.)
                                pages = open_pages(table)?;
                                (stats, lazy) = in_memory(&pages, &gens, &m, load, lazy)?;
                            }
                            (m.generation, table, pages, counted(replay_base(&m), stats.count_delta))
                        }
                        Err(e) => return Err(e),
                    }
                }
            }
        }
    };
    let log_storage: Arc<dyn Storage> = match log.device {
        Device::File => storage.clone(),
        Device::Nvm(lat) => Arc::new(NvmStorage::new(lat)),
    };
    let pacing =
        Pacing { checkpoint_bytes: settings.checkpoint_bytes, checkpoint_interval: settings.checkpoint_interval };
    let wal = Arc::new(Wal::new(log_storage, log, pacing, policy, plants, generation));
    if let Some(m) = unclean {
        let storage = storage.clone();
        wal.set_first_write(Box::new(move || write_master(&*storage, &m)));
    }
    let resumed = match resumed {
        Some((ends, delta)) => {
            wal.resume(&ends)?;
            Some((generation, delta))
        }
        None => None,
    };
    // The lanes' copies of their blocks for the checkpoints take what their read-back
    // values may (a sixteenth of the cache).
    wal.set_echo_budget(budget.checkpoint_buffer);
    // A checkpoint lists the ended generation's writes, about as many bytes as their log
    // (a write's entry, its key and the values kept): that list takes at most what the
    // read-back values may. At 10M records under a 64 MiB cache, generations of 40 MiB
    // of log (a sixteenth of the store) listed 26 MiB at once.
    wal.set_generation_cap(budget.checkpoint_buffer as u64);
    wal.note_store_live(pages.live_bytes());
    // Nothing may reach the log of a read-only database: the engine refuses its writes
    // (`Error::ReadOnly`) before they would, and a poisoned log refuses them again.
    match &read_only {
        None => {}
        Some(ReadOnly::Asked) => {
            wal.poison("the database was opened read-only (Options::read_only): nothing is written".to_string());
        }
        Some(ReadOnly::DiskFull(e)) => {
            wal.poison(format!(
                "the disk was full when the database was opened ({e}): it is read-only; free space and reopen it to write"
            ));
        }
    }
    let durable = Durable {
        storage,
        wal,
        reads: pages.reads(),
        current: Mutex::new(Current { generation, table, pages, count }),
        logs_readable,
        value_budget: budget.checkpoint_buffer,
        lazy,
        preloaded,
        covered: std::sync::atomic::AtomicU64::new(generation),
        _lock: lock,
        closed: AtomicBool::new(false),
        recovery: stats,
        read_only: read_only.is_some(),
        resumed,
        close_keeps_short_log: settings.close_keeps_short_log,
        resume_limit: resume_limit(&budget),
    };
    if !durable.read_only {
        durable.allow_kept_ends(&durable.current.lock());
    }
    Ok(durable)
}

/// The keys a generation's logs wrote, with their last logged values, or, for those not
/// kept (past the checkpoint's memory budget), their latest committed values read from
/// memory a page at a time. Either is right for the pages: the next generation's logs,
/// replayed over them, hold every later write.
struct LatestValues<'s> {
    writes: recovery::LoggedWrites,
    state: &'s dyn CommittedState,
}

impl Changes for LatestValues<'_> {
    fn len(&self) -> usize {
        self.writes.len()
    }
    fn key(&self, i: usize) -> &[u8] {
        self.writes.key(i)
    }
    fn values(&self, range: std::ops::Range<usize>, out: &mut Vec<Change>) -> Result<(), Error> {
        let writes = &self.writes;
        let unknown = |i: &usize| writes.value(*i) == Logged::Unknown;
        let mut read = Vec::new();
        if range.clone().any(|i| unknown(&i)) {
            self.state.get_sorted(&mut range.clone().filter(unknown).map(|i| writes.key(i)), &mut |_, v| read.push(v));
        }
        let mut read = read.into_iter();
        for i in range {
            let v = match writes.value(i) {
                Logged::Value(v) => Some(v.to_vec()),
                Logged::Deleted => None,
                Logged::Unknown => read.next().expect("one value read per unknown key"),
            };
            out.push((writes.key(i).to_vec(), v));
        }
        Ok(())
    }
    fn on_helper_thread(&self) {
        self.state.enter_helper();
    }
}

/// Replays the logs of `gens` (over the table `m` names), gathering their writes; each
/// time the gathered writes pass `limit` bytes, the last value of each key they write goes
/// to `flush` in key order (the logs are redone in commit order, so a later batch never holds an older value
/// of a key). Returns the statistics and what is gathered at the end, in key order.
fn replay_changes(
    storage: &dyn Storage,
    gens: &[u64],
    m: &Master,
    limit: usize,
    flush: impl FnMut(Vec<Change>) -> Result<(), Error>,
) -> Result<(RecoveryStats, Vec<Change>), Error> {
    replay_changes_to_ends(storage, gens, m, limit, flush, &mut Vec::new())
}

/// [`replay_changes`], which also puts in `ends` where each lane of the last generation
/// ends (see [`recovery::replay_to_ends`]).
fn replay_changes_to_ends(
    storage: &dyn Storage,
    gens: &[u64],
    m: &Master,
    limit: usize,
    mut flush: impl FnMut(Vec<Change>) -> Result<(), Error>,
    ends: &mut Vec<LaneEnd>,
) -> Result<(RecoveryStats, Vec<Change>), Error> {
    // A write's cost beside its key and value: two vectors and their allocations.
    const WRITE_OVERHEAD: usize = 64;
    // The writes in commit order; a stable sort by key then keeps each key's last write
    // (cheaper than a hash map of 1M keys, and a log written in key order is sorted).
    let sorted = |mut writes: Vec<Change>| {
        writes.sort_by(|a, b| a.0.cmp(&b.0));
        // `dedup_by` keeps the first of equal neighbours: move the later write into it.
        writes.dedup_by(|later, kept| {
            let same = later.0 == kept.0;
            if same {
                std::mem::swap(later, kept);
            }
            same
        });
        writes
    };
    let mut writes: Vec<Change> = Vec::new();
    let mut bytes = 0usize;
    let release = if m.elr { Release::Elr } else { Release::Nlr };
    let mut count_delta = 0;
    let mut stats = recovery::replay_to_ends(
        storage,
        gens,
        m.segment_size,
        release,
        |record| {
            count_delta += record.count_delta();
            record.for_each(|k, v| {
                bytes += k.len() + v.map_or(0, <[u8]>::len) + WRITE_OVERHEAD;
                writes.push((k.to_vec(), v.map(<[u8]>::to_vec)));
            });
            if bytes <= limit {
                return Ok(());
            }
            bytes = 0;
            flush(sorted(std::mem::take(&mut writes)))
        },
        ends,
    )?;
    stats.count_delta = count_delta;
    Ok((stats, sorted(writes)))
}

/// Whether `e` says the disk is full.
fn disk_full(e: &Error) -> bool {
    e.io_kind() == Some(std::io::ErrorKind::StorageFull)
}

impl Durable {
    /// Flushes the log and writes the pages the last generation changed, marked as a clean
    /// exit (so the next open replays nothing); or, when [`Durable::keeps_log`], marks
    /// each lane's kept end instead. No transaction may be running.
    pub(crate) fn close(&self, state: &dyn CommittedState) -> Result<(), Error> {
        let mut current = self.current.lock();
        if self.closed.swap(true, Ordering::AcqRel) || self.read_only {
            return Ok(());
        }
        self.wal.check()?;
        let opts = &self.wal.opts;
        if self.keeps_log(&current) {
            // Each lane's last block marks the kept end; MASTER says the logs are to be
            // replayed already (written before the first lane).
            return self.wal.keep_lanes();
        }
        self.wal.close_lanes()?;
        if self.wal.policy.logs() && self.wal.stats().records == 0 && !self.holds_earlier_commits(&current) {
            if self.wal.drop_first_write() {
                // Nothing was written since a clean open: its master record stays true.
                return Ok(());
            }
            // Nothing was committed since open: the state is still the one this generation
            // started from (its table, or nothing), so mark the exit clean without
            // writing anything else.
            return write_master(&*self.storage, &master(current.generation, current.table, true, opts, current.count));
        }
        let g = current
            .generation
            .checked_add(1)
            .filter(|&g| g <= MAX_GENERATION)
            .ok_or_else(|| Error::Corrupt("the database reached the last possible generation".into()))?;
        let (t, count) = self.write_pages(&mut current, g, state, false)?;
        write_master(&*self.storage, &master(g, Some(t), true, opts, count))?;
        current.pages.commit();
        recovery::remove_stale(&self.storage, g)
    }

    /// Whether the current generation's logs hold commits of earlier processes (it was
    /// resumed at open, and no checkpoint moved on since).
    fn holds_earlier_commits(&self, current: &Current) -> bool {
        self.resumed.is_some_and(|(g, _)| g == current.generation)
    }

    /// Whether a close keeps the current generation's logs for the next open to resume
    /// (each lane's last block a kept end, `FLAG_KEPT_END`; see `kept_logs`) instead of
    /// writing their changes into the pages: when they are short (the next open replays
    /// them) and the database small (that open loads the pages they wrote, the replayed
    /// writes being in no page). The next open, one commit and a close then write two log blocks, each
    /// synced once, where a checkpoint at each close synced the lane's end, the pages and
    /// the master record, and the next open's first commit the master record and a new
    /// lane (its segment, its first block, its registry).
    /// Only when the generation logged anything (or a clean close marks the pages as the
    /// whole state), and under NLR with every commit's count known (ELR's watermarks
    /// would cut records that memory holds).
    fn keeps_log(&self, current: &Current) -> bool {
        self.may_keep_log(current)
            && (self.wal.generation_records() > 0 || self.holds_earlier_commits(current))
            && self.wal.log_since_checkpoint() <= KEEP_LOG_BYTES
    }

    /// What [`keeps_log`](Self::keeps_log) asks of the database itself (not of its log).
    fn may_keep_log(&self, current: &Current) -> bool {
        let log = &self.wal.opts;
        self.close_keeps_short_log
            && self.logs_readable
            && log.release == Release::Nlr
            && log.durability == Durability::Sync
            && current.count.is_some()
            && current.pages.live_bytes() <= self.resume_limit
    }

    /// Lets synced commits mark kept ends while a close would keep the log (see
    /// [`Wal::set_kept_end_limit`]); set at open and after each checkpoint, as the
    /// database changes.
    fn allow_kept_ends(&self, current: &Current) {
        self.wal.set_kept_end_limit(if self.may_keep_log(current) { KEEP_LOG_BYTES } else { 0 });
    }

    /// Writes what changed in the generation that just ended (`current.generation`) into
    /// the pages, for generation `g`, and the table; returns the table's address and the
    /// number of present keys at the generation's end (unknown stays unknown). The lanes
    /// were ended (by a checkpoint's switch to `g`, or a close).
    ///
    /// Intermediate tables are made durable as it goes (milestones): each after every
    /// lane is flushed (`flush_lanes`: a checkpoint's lanes run on, and the pages must
    /// hold no value recovery's cut would drop; a close ended them), and a master record
    /// names it with the ended generation, so that recovery replays that generation's
    /// logs (and the next one's) over it, as over the table before. The segments it frees
    /// are then reused by the rest of the checkpoint: without them the images a
    /// checkpoint replaced stayed on disk until its end (0.3-0.4x the data in a steady
    /// overwrite).
    fn write_pages(
        &self,
        current: &mut Current,
        g: u64,
        state: &dyn CommittedState,
        flush_lanes: bool,
    ) -> Result<(ImageRef, Option<u64>), Error> {
        let Current { generation, table, pages, count } = current;
        let opts = &self.wal.opts;
        let mut milestone = |p: &mut PageStore| -> Result<(), Error> {
            let t = p.write_table()?;
            if flush_lanes {
                self.wal.flush_all()?;
            }
            // Recovery from this record replays the ended generation's logs too.
            let named = if self.wal.plants.milestone_skips_replay { g } else { *generation };
            // The ended generation's count: recovery replays all of its logs again.
            write_master(&*self.storage, &master(named, Some(t), false, opts, *count))?;
            *table = Some(t);
            p.commit();
            Ok(())
        };
        if self.logs_readable {
            let echoes = self.wal.take_echoes(*generation);
            let writes = recovery::logged_writes(
                &*self.storage,
                *generation,
                opts.segment_size,
                self.value_budget,
                self.wal.plants.first_logged_value,
                &echoes,
                pages.helpers(),
            )?;
            pages.note_helper_cpu(writes.helper_cpu);
            self.wal.recycle_echoes(echoes);
            let delta = writes.count_delta;
            pages.set_records(*count);
            pages.apply(g, &LatestValues { writes, state }, Some(&mut milestone))?;
            let count = counted(*count, delta);
            Ok((pages.write_table()?, count))
        } else {
            // Every page rewritten from memory: the count is what was written.
            let mut keys = 0u64;
            pages.rebuild(g, &mut |f| {
                state.scan(&mut |k, v| {
                    keys += 1;
                    f(k, v)
                })
            })?;
            Ok((pages.write_table()?, Some(keys)))
        }
    }

    /// See the field: a key range written last in generation `g` is the same in the pages
    /// as in memory once this is above `g`.
    pub(crate) fn covered(&self) -> u64 {
        self.covered.load(Ordering::Acquire)
    }

    /// The low keys of the store's pages (the first is empty): what a lazily opened
    /// database loads, a page's range at a time.
    pub(crate) fn page_lows(&self) -> Vec<Vec<u8>> {
        self.current.lock().pages.page_lows()
    }

    /// Streams the committed keys `low <= key < high` and their values from the durable
    /// table's pages. Only for a range not in memory: its keys were not written since the
    /// checkpoint that table belongs to (see [`PageReads`]). Never waits for a running
    /// checkpoint, which holds `current` while it writes and syncs: under 2PL a load comes
    /// from a transaction holding locks, which the checkpoint may be waiting for.
    pub(crate) fn load_range(&self, low: &[u8], high: Option<&[u8]>, load: &mut Loader<'_>) -> Result<u64, Error> {
        self.reads.load_range(low, high, load)
    }

    /// The number of present keys at open (`None`: the master record predates the count;
    /// the engine counts them and calls [`set_count`](Self::set_count)).
    pub(crate) fn count(&self) -> Option<u64> {
        let current = self.current.lock();
        match self.resumed {
            // The resumed generation's earlier commits are in memory, not in its start.
            Some((g, delta)) if g == current.generation => counted(current.count, delta),
            _ => current.count,
        }
    }

    /// Sets the count of the state the current generation started from (at open, before
    /// any commit), for the master records written from now on.
    pub(crate) fn set_count(&self, n: u64) {
        let mut current = self.current.lock();
        current.count = Some(n);
        if !self.read_only {
            self.allow_kept_ends(&current);
        }
    }

    /// The page store's counters.
    pub(crate) fn store_stats(&self) -> StoreStats {
        self.current.lock().pages.stats()
    }

    /// Takes a checkpoint while transactions run: every lane moves on to a new generation
    /// while `quiesce` holds commits back (no commit may be between its log append and the
    /// end of its install while the lanes switch), the pages the ended generation changed
    /// get their latest committed values (read from `state` one key at a time), every lane
    /// is flushed (so each value the pages hold is in a durable log record too: under ELR
    /// a value is visible before its record is durable), the master record names the new
    /// generation and table, and only then are the older logs deleted and the segments the
    /// new table no longer names reused. Recovery then replays only the new generation's
    /// logs.
    ///
    /// A crash at any point leaves either the old master record or one naming a
    /// milestone's table with the old generation (recovery replays both generations' logs
    /// over that table, whose images are all still there), or the new one.
    pub(crate) fn checkpoint(
        &self,
        quiesce: impl FnOnce(&mut dyn FnMut() -> Result<(), Error>) -> Result<(), Error>,
        state: &dyn CommittedState,
    ) -> Result<(), Error> {
        // A checkpoint writes pages, a master record and new logs: none of that on a
        // database opened read-only (asked, or on a full disk).
        if self.read_only {
            return Err(Error::ReadOnly);
        }
        // One at a time: a second caller waits for the running one, then takes its own.
        let mut current = self.current.lock();
        if self.closed.load(Ordering::Acquire) {
            return Ok(());
        }
        let (cpu, wall) = (crate::background::thread_cpu_time(), std::time::Instant::now());
        let r = self.checkpoint_locked(&mut current, quiesce, state);
        let cpu = crate::background::thread_cpu_time().saturating_sub(cpu);
        current.pages.note_checkpoint_time(cpu, wall.elapsed());
        self.allow_kept_ends(&current);
        if r.is_err() {
            self.wal.postpone_checkpoint();
        }
        r
    }

    fn checkpoint_locked(
        &self,
        current: &mut Current,
        quiesce: impl FnOnce(&mut dyn FnMut() -> Result<(), Error>) -> Result<(), Error>,
        state: &dyn CommittedState,
    ) -> Result<(), Error> {
        self.wal.check()?;
        std::thread::sleep(self.wal.plants.checkpoint_delay);
        let g = current
            .generation
            .checked_add(1)
            .filter(|&g| g <= MAX_GENERATION)
            .ok_or_else(|| Error::Corrupt("the database reached the last possible generation".into()))?;
        // Once the lanes have moved on, a failure poisons the log: the lanes could not move
        // on again without a master record naming where they went (a failed checkpoint
        // is a failed write: a full disk, an I/O error), and recovery needs both
        // generations' logs.
        let poison = |e: Error| match e {
            Error::Poisoned(_) => e,
            e => self.wal.poison(Poison::caused_by(&format!("checkpoint of generation {g} failed"), &e)),
        };
        // A clean open's deferred master record first: the lanes' new logs come after it.
        self.wal.first_write()?;
        quiesce(&mut || self.wal.switch_generation(g)).map_err(poison)?;
        std::thread::sleep(self.wal.plants.checkpoint_apply_delay);
        let written = current.pages.written();
        let (t, count) = self.write_pages(current, g, state, true).map_err(poison)?;
        self.wal.flush_all().map_err(poison)?;
        let opts = &self.wal.opts;
        let m = master(g, Some(t), false, opts, count);
        if self.wal.plants.early_log_removal {
            recovery::remove_stale(&self.storage, g).map_err(poison)?;
        }
        write_master(&*self.storage, &m).map_err(poison)?;
        current.generation = g;
        current.table = Some(t);
        current.count = count;
        current.pages.commit();
        self.covered.store(g, Ordering::Release);
        self.wal.note_checkpoint(current.pages.written() - written, current.pages.live_bytes());
        // The new state is durable: the older files are obsolete (a failure here leaves
        // them for the next open or checkpoint to remove); the logs' segments are kept
        // for the lanes to reuse.
        match opts.device {
            Device::File => self.wal.retire(g),
            Device::Nvm(_) => recovery::remove_stale(&self.storage, g),
        }
    }

    /// A bulk load (see `Db::bulk_load`; no transaction may be running): a checkpoint
    /// first unless this generation logged nothing, so that the pages hold every commit
    /// and the generation's logs nothing;
    /// then `records` appended as pages after the last one
    /// ([`PageStore::append_sorted`]), the table, and a master record naming it with the
    /// same generation and the count raised by what was appended. Nothing goes through the
    /// log: a crash before that master record is durable leaves the state of the
    /// checkpoint (the images written are in no table), after it every record.
    /// Returns what was appended; the caller makes memory agree (the new key range is in
    /// no loaded range).
    pub(crate) fn bulk_load<I>(
        &self,
        quiesce: impl FnOnce(&mut dyn FnMut() -> Result<(), Error>) -> Result<(), Error>,
        state: &dyn CommittedState,
        records: I,
    ) -> Result<pages::Appended, Error>
    where
        I: Iterator<Item = Result<(Vec<u8>, Vec<u8>), Error>>,
    {
        if self.read_only {
            return Err(Error::ReadOnly);
        }
        let mut current = self.current.lock();
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Config("bulk load into a closed database".into()));
        }
        // Commits kept in memory reach the log first, so that "no log" means "no commit".
        self.wal.flush_all()?;
        if recovery::has_logs(&*self.storage, current.generation)? {
            self.checkpoint_locked(&mut current, quiesce, state)?;
        } else {
            // Nothing was committed in this generation: the pages hold everything already.
            // No checkpoint then, and none may run: its pages (of the next generation)
            // with no log of this one beside them read, after a crash, as a master record
            // put back (the open refuses them). The load's images are of this generation.
            // The deferred master record of a clean open goes first, as before a lane.
            self.wal.first_write()?;
        }
        let g = current.generation;
        let poison = |e: Error| match e {
            Error::Poisoned(_) => e,
            e => self.wal.poison(Poison::caused_by(&format!("bulk load in generation {g} failed"), &e)),
        };
        let appended = match current.pages.append_sorted(g, records) {
            Ok(a) => a,
            Err(pages::AppendError::Input(e)) => return Err(e),
            Err(pages::AppendError::Store(e)) => return Err(poison(e)),
        };
        if appended.records == 0 {
            return Ok(appended);
        }
        let count = match current.count {
            Some(c) => {
                Some(c.checked_add(appended.records).ok_or_else(|| poison(Error::Config("count overflow".into())))?)
            }
            None => None,
        };
        let m = |t| master(g, Some(t), false, &self.wal.opts, count);
        let t = if self.wal.plants.bulk_load_master_first {
            let t = current.pages.write_table_unsynced().map_err(poison)?;
            write_master(&*self.storage, &m(t)).map_err(poison)?;
            current.pages.sync_written().map_err(poison)?;
            t
        } else {
            let t = current.pages.write_table().map_err(poison)?;
            write_master(&*self.storage, &m(t)).map_err(poison)?;
            t
        };
        current.table = Some(t);
        current.count = count;
        current.pages.commit();
        Ok(appended)
    }

    /// Marks the database closed without flushing or writing anything (a simulated crash
    /// for tests).
    #[cfg(feature = "test-plants")]
    pub(crate) fn abandon(&self) {
        self.closed.store(true, Ordering::Release);
    }
}
