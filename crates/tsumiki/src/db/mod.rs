//! The public database API: [`Db`], [`Options`], [`Txn`], [`TypedWorker`].
//!
//! [`Db`] picks its concurrency-control protocol at run time from [`Options`], then every
//! call goes to an engine monomorphized for that protocol ([`TypedDb`]), which benchmarks
//! and embedders that know their protocol at compile time can also use directly.
//!
//! ```
//! use tsumiki::{Db, Options};
//!
//! let db = Db::open_in_memory(Options::default()).unwrap();
//! db.run(|txn| {
//!     txn.put(b"apple", b"red")?;
//!     txn.put(b"banana", b"yellow")
//! })
//! .unwrap();
//! let mut txn = db.begin();
//! assert_eq!(txn.get(b"apple").unwrap().as_deref(), Some(&b"red"[..]));
//! let keys: Vec<_> = txn.range(b"a"..).map(|r| r.unwrap().0).collect();
//! assert_eq!(keys, vec![b"apple".to_vec(), b"banana".to_vec()]);
//! txn.commit().unwrap();
//! ```

// The engine holds records through raw pointers the index owns, and the residency map is
// an epoch-reclaimed pointer.
#[allow(unsafe_code)]
mod engine;
mod open;
// OwnedTxn extends a transaction's borrow of the Db it keeps alive by an Arc.
#[allow(unsafe_code)]
mod owned;
#[allow(unsafe_code)]
mod residency;

use std::cell::RefCell;
use std::ops::Bound;
use std::sync::Arc;

pub use engine::{Engine, TypedScan, TypedTxn};
use engine::{Home, ScanCursor, Slot, TxnBufs};
pub use open::OpenOptions;
pub use owned::OwnedTxn;

use crate::background::Background;
use crate::cc::si::Si;
use crate::cc::silo::Silo;
use crate::cc::tictoc::TicToc;
use crate::cc::twopl::TwoPl;
use crate::cc::Protocol;
use crate::index::BwTreeConfig;
use crate::mvcc::{Gc, GcStats, DEFAULT_REFRESH};
use crate::plants::Plants;
use crate::storage::{DirStorage, Storage};
use crate::store::budget::CacheBudget;
use crate::store::pages::StoreStats;
use crate::store::StoreOptions;
use crate::wal::recovery::RecoveryStats;
use crate::wal::{CommitMode, CommitTicket, LogOptions, WalStats};

pub use crate::error::{Error, MAX_VALUE_LEN};

/// How 2PL handles a lock held by another transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockWait {
    /// Abort at once.
    NoWait,
    /// Wait if older than the holder, abort if younger.
    WaitDie,
}

crate::names::option_names!(LockWait, "2PL lock wait", { NoWait => "nowait" | "no-wait", WaitDie => "waitdie" | "wait-die" });

/// The concurrency-control protocol of a database.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Cc {
    /// TicToc: optimistic, data-driven timestamps (the default: serializable and fast).
    #[default]
    TicToc,
    /// Silo: optimistic, epoch-based TIDs.
    Silo,
    /// Strict two-phase locking.
    TwoPl(LockWait),
    /// MVCC snapshot isolation (not serializable: write skew is allowed) with a version
    /// garbage collector.
    MvccSi(Gc),
}

impl Cc {
    /// Every protocol, for side-by-side runs (MVCC-SI with its default collector).
    pub const ALL: [Cc; 5] =
        [Cc::TicToc, Cc::Silo, Cc::TwoPl(LockWait::NoWait), Cc::TwoPl(LockWait::WaitDie), Cc::MvccSi(Gc::EpoR)];

    /// Whether commits can keep their write locks until their log group is durable (paper
    /// 001's Algorithm 3): TicToc and 2PL.
    pub fn can_hold_locks(self) -> bool {
        matches!(self, Cc::TicToc | Cc::TwoPl(_))
    }

    /// Whether every history is serializable (all but MVCC-SI).
    pub fn is_serializable(self) -> bool {
        !matches!(self, Cc::MvccSi(_))
    }

    /// The protocol's short name.
    pub fn name(self) -> &'static str {
        match self {
            Cc::TicToc => "tictoc",
            Cc::Silo => "silo",
            Cc::TwoPl(LockWait::NoWait) => "2pl-nowait",
            Cc::TwoPl(LockWait::WaitDie) => "2pl-waitdie",
            Cc::MvccSi(_) => "mvcc-si",
        }
    }

    /// Parses a short name (`tictoc`, `silo`, `2pl` = `2pl-nowait`, `2pl-waitdie`, `mvcc-si`
    /// = `si`, with the default collector, or `mvcc-si/GC` with a collector's name).
    pub fn parse(name: &str) -> Option<Cc> {
        Some(match name {
            "tictoc" => Cc::TicToc,
            "silo" => Cc::Silo,
            "2pl" | "2pl-nowait" => Cc::TwoPl(LockWait::NoWait),
            "2pl-waitdie" => Cc::TwoPl(LockWait::WaitDie),
            "mvcc-si" | "si" | "mvcc" => Cc::MvccSi(Gc::default()),
            _ => {
                let gc = ["mvcc-si/", "si/", "mvcc/"].iter().find_map(|p| name.strip_prefix(p))?;
                Cc::MvccSi(gc.parse().ok()?)
            }
        })
    }

    /// Every protocol, MVCC-SI with each collector.
    pub fn all() -> impl Iterator<Item = Cc> {
        [Cc::TicToc, Cc::Silo, Cc::TwoPl(LockWait::NoWait), Cc::TwoPl(LockWait::WaitDie)]
            .into_iter()
            .chain(Gc::ALL.iter().map(|&gc| Cc::MvccSi(gc)))
    }
}

/// The protocol's name, with MVCC-SI's collector (`mvcc-si/epo-r`): what `FromStr` reads.
impl std::fmt::Display for Cc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Cc::MvccSi(gc) => write!(f, "mvcc-si/{gc}"),
            cc => f.write_str(cc.name()),
        }
    }
}

impl std::str::FromStr for Cc {
    type Err = Error;

    fn from_str(s: &str) -> Result<Cc, Error> {
        Cc::parse(s).ok_or_else(|| {
            Error::Config(format!(
                "unknown protocol {s:?}; known: tictoc, silo, 2pl-nowait, 2pl-waitdie, mvcc-si, mvcc-si/GC (GC: {})",
                Gc::ALL.iter().map(|g| g.name()).collect::<Vec<_>>().join(", ")
            ))
        })
    }
}

/// Settings of a database.
#[derive(Debug, Clone)]
pub struct Options {
    /// The concurrency-control protocol.
    pub cc: Cc,
    /// The Bw-tree under the records.
    pub index: BwTreeConfig,
    /// MVCC-SI: how often each worker rebuilds its list of active transactions (100 ms as
    /// paper 000; the original EPO used 5 ms).
    pub gc_refresh: std::time::Duration,
    /// Logging, for databases opened with a path ([`Db::open`]): P-WAL with NLR and
    /// fdatasync at every commit by default.
    pub log: LogOptions,
    /// The page store and its checkpoints, for databases opened with a path: a checkpoint
    /// every 64 MiB of log or 60 s, 4 MiB page segments by default.
    pub store: StoreOptions,
    /// Databases opened with a path: the memory the records may hold (keys, values and
    /// their share of the index, estimated) together with a checkpoint's buffers (3/16 of
    /// it, which the records leave free), [`DEFAULT_CACHE_BYTES`] by default. Past it,
    /// key ranges that no transaction wrote since the last checkpoint leave memory (CLOCK)
    /// and are read back from the pages when used again; past it with nothing clean, a
    /// checkpoint is taken. A running transaction may hold more until it ends.
    pub cache_bytes: usize,
    /// Refuse every write ([`Error::ReadOnly`]); [`Db::open`] and [`Db::create`] then
    /// both require the database to exist ([`Error::NotFound`] otherwise). Opening still takes the database's lock and recovers what a
    /// crash left (which writes to its files), so the directory must be writable.
    pub read_only: bool,
    /// Test only (the cargo feature `test-plants`, which only the tests enable): planted
    /// bugs and delays for the checkers.
    #[cfg(feature = "test-plants")]
    pub plants: crate::plants::Plants,
}

/// [`Options`] checked and resolved, once ([`Options::validate`]): open consumes these and
/// hands each layer its part, which asks it by method rather than re-deriving it from the
/// raw options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resolved {
    /// How commits reach the log (the log mode, lock release, group and durability, and
    /// whether commits hold their locks: paper 001's Algorithm 3).
    pub policy: CommitMode,
    /// [`Options::cache_bytes`] split into the records' share and a checkpoint's buffers.
    pub cache: CacheBudget,
    /// The page store's and checkpoints' settings ([`Options::store`]), checked.
    pub store: StoreOptions,
}

/// The record cache of a database with pages ([`Db::cache_stats`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CacheStats {
    /// The records' share of [`Options::cache_bytes`]: what a checkpoint's buffers leave.
    pub budget: usize,
    /// Memory counted for the records in the index (keys, values and their overhead).
    pub resident_bytes: i64,
    /// Key ranges.
    pub ranges: usize,
    /// Key ranges in memory now.
    pub ranges_loaded: usize,
    /// Ranges read from the pages since open.
    pub loads: u64,
    /// Ranges that left memory since open.
    pub evictions: u64,
    /// Records that left memory since open.
    pub records_evicted: u64,
    /// Bytes of what stays in memory whatever the cache holds: the index's mapping table
    /// and the map of key ranges (the page store's table is
    /// [`StoreStats::table_memory`](crate::StoreStats::table_memory)).
    pub map_bytes: u64,
}

/// The default [`Options::cache_bytes`]: 512 MiB.
pub const DEFAULT_CACHE_BYTES: usize = 512 << 20;

impl Default for Options {
    fn default() -> Self {
        Options {
            cc: Cc::default(),
            index: BwTreeConfig::default(),
            gc_refresh: DEFAULT_REFRESH,
            log: LogOptions::default(),
            store: StoreOptions::default(),
            cache_bytes: DEFAULT_CACHE_BYTES,
            read_only: false,
            #[cfg(feature = "test-plants")]
            plants: crate::plants::Plants::NONE,
        }
    }
}

impl Options {
    /// The defaults with protocol `cc`.
    pub fn with_cc(cc: Cc) -> Self {
        Options { cc, ..Options::default() }
    }

    /// Checks every setting and resolves how commits reach the log. [`Db::open`] calls it
    /// before anything is created on disk, so a refused configuration leaves no trace.
    pub fn validate(&self) -> Result<Resolved, Error> {
        self.index.validate().map_err(Error::Index)?;
        if self.gc_refresh.is_zero() {
            return Err(Error::Config("gc_refresh must be above zero".into()));
        }
        let policy = CommitMode::resolve(&self.log, self.cc.name(), self.cc.can_hold_locks())?;
        self.store.validate()?;
        Ok(Resolved { policy, cache: CacheBudget::new(self.cache_bytes), store: self.store })
    }

    /// The test plants: [`Plants::NONE`] in every build without the feature `test-plants`.
    pub(crate) fn plants(&self) -> Plants {
        #[cfg(feature = "test-plants")]
        return self.plants;
        #[cfg(not(feature = "test-plants"))]
        Plants::NONE
    }
}

/// A database whose protocol is fixed at compile time.
pub struct TypedDb<P: Protocol> {
    eng: Arc<Engine<P>>,
    /// The background thread that takes checkpoints (databases with files).
    checkpointer: Option<Checkpointer>,
}

/// A thread that takes a checkpoint whenever one is due, so that no commit waits for it.
struct Checkpointer(Background);

impl Checkpointer {
    /// How often the thread checks whether a checkpoint is due.
    const POLL: std::time::Duration = std::time::Duration::from_millis(20);

    fn start<P: Protocol>(eng: &Arc<Engine<P>>) -> Result<Checkpointer, Error> {
        let weak = Arc::downgrade(eng);
        let thread = Background::every("tsumiki-checkpoint", Self::POLL, move || {
            let Some(eng) = weak.upgrade() else { return false };
            if eng.checkpoint_due() || eng.checkpoint_due_by_time() {
                // A failure poisons the log; commits report it.
                let _ = eng.checkpoint_now();
            } else {
                eng.release_idle_segments();
            }
            true
        })
        .map_err(|e| Error::io("starting the checkpoint thread", e))?;
        if let Some(t) = thread.thread() {
            let _ = eng.checkpointer.set(t.clone());
        }
        Ok(Checkpointer(thread))
    }

    fn stop(mut self) {
        self.0.stop();
    }
}

impl<P: Protocol> TypedDb<P> {
    /// An in-memory database run by `proto`.
    pub fn new(proto: P, index: BwTreeConfig) -> Result<Self, Error> {
        Ok(TypedDb { eng: Arc::new(Engine::new(proto, index)?), checkpointer: None })
    }

    /// A database kept in `storage`: recovers what its files hold, then logs every commit
    /// per `log` and takes checkpoints per `store`.
    pub fn open_durable(
        proto: P,
        index: BwTreeConfig,
        storage: Arc<dyn Storage>,
        log: LogOptions,
        store: StoreOptions,
        cache_bytes: usize,
    ) -> Result<Self, Error> {
        let policy = CommitMode::resolve(&log, proto.name(), proto.can_hold_locks())?;
        store.validate()?;
        let cache = CacheBudget::new(cache_bytes);
        Self::open_durable_as(proto, index, storage, log, Resolved { policy, cache, store }, false, Plants::NONE)
    }

    /// [`open_durable`](Self::open_durable), refusing every write when `read_only`.
    fn open_durable_as(
        proto: P,
        index: BwTreeConfig,
        storage: Arc<dyn Storage>,
        log: LogOptions,
        resolved: Resolved,
        read_only: bool,
        plants: Plants,
    ) -> Result<Self, Error> {
        let mut eng = Engine::new(proto, index)?;
        eng.read_only = read_only;
        eng.open_durable(storage, resolved.store, log, resolved.policy, resolved.cache, plants)?;
        let eng = Arc::new(eng);
        let checkpointer = Some(Checkpointer::start(&eng)?);
        Ok(TypedDb { eng, checkpointer })
    }

    /// Flushes the log and writes the pages a clean exit leaves (also done on drop, where
    /// an error cannot be reported).
    pub fn close(mut self) -> Result<(), Error> {
        if let Some(c) = self.checkpointer.take() {
            c.stop();
        }
        self.eng.close()
    }

    /// The log's counters (`None` for an in-memory database).
    pub fn wal_stats(&self) -> Option<WalStats> {
        self.eng.durable.as_ref().map(|d| d.wal.stats())
    }

    /// What recovery did when the database was opened (`None` for an in-memory database).
    pub fn recovery_stats(&self) -> Option<RecoveryStats> {
        self.eng.durable.as_ref().map(|d| d.recovery)
    }

    /// The page store's counters: pages, segments, live and file bytes, what was written
    /// (`None` for an in-memory database).
    pub fn store_stats(&self) -> Option<StoreStats> {
        self.eng.store_stats()
    }

    /// The record cache's counters (`None` when every record stays in memory).
    pub fn cache_stats(&self) -> Option<CacheStats> {
        self.eng.cache_stats()
    }

    /// Starts a transaction on a worker slot from the pool.
    #[allow(unsafe_code)] // the transaction borrows the slot it owns
    pub fn begin(&self) -> TypedTxn<'_, P> {
        let (slot, bufs) = self.eng.take_slot();
        let s: *const Slot<P> = &*slot;
        // SAFETY: `slot` moves into the transaction's `Home` and lives as long as it.
        TypedTxn::start(&self.eng, unsafe { &*s }, bufs, Home::Pool(slot))
    }

    /// A worker: a slot and transaction buffers owned by one thread, reused by each of its
    /// transactions (for benchmarks and long-lived threads).
    pub fn worker(&self) -> TypedWorker<'_, P> {
        let (slot, bufs) = self.eng.take_slot();
        TypedWorker { db: self, slot, bufs: Some(bufs) }
    }

    /// The protocol.
    pub fn protocol(&self) -> &P {
        &self.eng.proto
    }

    /// Committed and aborted transactions, and records unlinked after deletes, so far.
    pub fn counters(&self) -> (u64, u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        let c = &self.eng.counters;
        (c.commits.load(Relaxed), c.aborts.load(Relaxed), c.unlinked.load(Relaxed))
    }

    /// Keys in the index, counting deleted ones not yet unlinked (a full scan; for tests).
    #[doc(hidden)]
    pub fn index_len(&self) -> usize {
        self.eng.index_len()
    }
}

impl<P: Protocol> Drop for TypedDb<P> {
    fn drop(&mut self) {
        if let Some(c) = self.checkpointer.take() {
            c.stop();
        }
        let _ = self.eng.close();
    }
}

/// A per-thread worker of a [`TypedDb`]; see [`TypedDb::worker`].
pub struct TypedWorker<'db, P: Protocol> {
    db: &'db TypedDb<P>,
    slot: Arc<Slot<P>>,
    bufs: Option<Box<TxnBufs<P>>>,
}

impl<P: Protocol> TypedWorker<'_, P> {
    /// Starts a transaction; the worker is busy until it ends.
    pub fn begin(&mut self) -> TypedTxn<'_, P> {
        let bufs = self.bufs.take().unwrap_or_else(|| Box::new(TxnBufs::new(&self.db.eng.proto)));
        TypedTxn::start(&self.db.eng, &self.slot, bufs, Home::Worker(&mut self.bufs))
    }
}

impl<P: Protocol> Drop for TypedWorker<'_, P> {
    fn drop(&mut self) {
        self.db.eng.return_slot(Arc::clone(&self.slot), self.bufs.take());
    }
}

enum AnyDb {
    TicToc(TypedDb<TicToc>),
    Silo(TypedDb<Silo>),
    TwoPl(TypedDb<TwoPl>),
    Si(TypedDb<Si>),
}

/// An embedded transactional key-value database. Cheap to share between threads by
/// reference (it is `Sync`); open transactions with [`Db::begin`] or [`Db::run`].
pub struct Db {
    inner: AnyDb,
    /// Whether [`Db::view`] may fall back to holding commits (TicToc and Silo).
    view_fallback: bool,
}

macro_rules! dispatch {
    ($inner:expr, $v:ident => $e:expr) => {
        match $inner {
            AnyDb::TicToc($v) => $e,
            AnyDb::Silo($v) => $e,
            AnyDb::TwoPl($v) => $e,
            AnyDb::Si($v) => $e,
        }
    };
}

macro_rules! dispatch_txn {
    ($inner:expr, $v:ident => $e:expr) => {
        match $inner {
            AnyTxn::TicToc($v) => $e,
            AnyTxn::Silo($v) => $e,
            AnyTxn::TwoPl($v) => $e,
            AnyTxn::Si($v) => $e,
        }
    };
}

impl Db {
    /// An in-memory database (nothing is written to disk).
    ///
    /// ```
    /// # use tsumiki::{Cc, Db, Gc, LockWait, Options};
    /// let tictoc = Db::open_in_memory(Options::default()).unwrap();
    /// let wait_die = Db::open_in_memory(Options::with_cc(Cc::TwoPl(LockWait::WaitDie))).unwrap();
    /// let si = Db::open_in_memory(Options::with_cc(Cc::MvccSi(Gc::EpoR))).unwrap();
    /// assert_eq!((tictoc.cc_name(), wait_die.cc_name(), si.cc_name()), ("tictoc", "2pl-waitdie", "mvcc-si"));
    /// ```
    pub fn open_in_memory(opts: Options) -> Result<Db, Error> {
        let resolved = opts.validate()?;
        Self::build(&opts, resolved, None)
    }

    /// Opens the database in directory `path`, creating it (and the directory) if there
    /// is none, and recovers every commit that was acknowledged before a crash. Only one
    /// handle may have it open at a time.
    ///
    /// ```
    /// # use tsumiki::{Db, Options};
    /// let dir = tempfile::tempdir().unwrap();
    /// let path = dir.path().join("db");
    /// let db = Db::create(&path, Options::default()).unwrap();
    /// db.run(|txn| txn.put(b"k", b"v")).unwrap();
    /// assert!(Db::create(&path, Options::default()).is_err()); // already open
    /// db.close().unwrap();
    /// let db = Db::create(&path, Options::default()).unwrap(); // opens the existing one
    /// assert_eq!(db.begin().get(b"k").unwrap(), Some(b"v".to_vec()));
    /// ```
    pub fn create(path: impl AsRef<std::path::Path>, opts: Options) -> Result<Db, Error> {
        Self::open_dir(path.as_ref(), opts, true)
    }

    /// Opens the existing database in directory `path`, recovering every commit that was
    /// acknowledged before a crash; [`Error::NotFound`] if there is none (a mistyped path
    /// is an error, not a new empty database). Only one handle may have it open at a time.
    ///
    /// ```
    /// # use tsumiki::{Db, Error, Options};
    /// let dir = tempfile::tempdir().unwrap();
    /// let path = dir.path().join("db");
    /// assert!(matches!(Db::open(&path, Options::default()), Err(Error::NotFound(_))));
    /// assert!(!path.exists()); // nothing was created
    /// Db::create(&path, Options::default()).unwrap().close().unwrap();
    /// let db = Db::open(&path, Options { read_only: true, ..Options::default() }).unwrap();
    /// assert_eq!(db.begin().put(b"k", b"v"), Err(Error::ReadOnly));
    /// ```
    pub fn open(path: impl AsRef<std::path::Path>, opts: Options) -> Result<Db, Error> {
        Self::open_dir(path.as_ref(), opts, false)
    }

    fn open_dir(path: &std::path::Path, opts: Options, create: bool) -> Result<Db, Error> {
        let resolved = opts.validate()?;
        if path.as_os_str().is_empty() {
            return Err(Error::Config("the database path is empty".into()));
        }
        if !create || opts.read_only {
            match std::fs::metadata(path.join(crate::store::master::MASTER)) {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    let why = if path.is_dir() { "holds no tsumiki database" } else { "does not exist" };
                    // `Db::create` with `read_only` opens only what exists: it never makes one.
                    let how = if create { "a read-only open creates none" } else { "Db::create makes one" };
                    return Err(Error::NotFound(format!("{} {why} ({how})", path.display())));
                }
                Err(e) => return Err(Error::io(format!("opening {}", path.display()), e)),
            }
        }
        let dir = DirStorage::new(path).map_err(|e| Error::io(format!("opening directory {}", path.display()), e))?;
        Self::build(&opts, resolved, Some(Arc::new(dir)))
    }

    /// Opens the database kept in `storage` (a simulated disk in crash tests).
    pub fn open_with_storage(storage: Arc<dyn Storage>, opts: Options) -> Result<Db, Error> {
        let resolved = opts.validate()?;
        Self::build(&opts, resolved, Some(storage))
    }

    fn build(opts: &Options, resolved: Resolved, storage: Option<Arc<dyn Storage>>) -> Result<Db, Error> {
        fn mk<P: Protocol>(
            p: P,
            opts: &Options,
            resolved: Resolved,
            storage: Option<Arc<dyn Storage>>,
        ) -> Result<TypedDb<P>, Error> {
            match storage {
                None => TypedDb::new(p, opts.index.clone()),
                Some(s) => TypedDb::open_durable_as(
                    p,
                    opts.index.clone(),
                    s,
                    opts.log.clone(),
                    resolved,
                    opts.read_only,
                    opts.plants(),
                ),
            }
        }
        let inner = match opts.cc {
            Cc::TicToc => {
                AnyDb::TicToc(mk(TicToc { skip_validation: opts.plants().skip_validation }, opts, resolved, storage)?)
            }
            Cc::Silo => {
                let mut p = Silo::new();
                p.skip_validation = opts.plants().skip_validation;
                AnyDb::Silo(mk(p, opts, resolved, storage)?)
            }
            Cc::TwoPl(LockWait::NoWait) => AnyDb::TwoPl(mk(TwoPl::no_wait(), opts, resolved, storage)?),
            Cc::TwoPl(LockWait::WaitDie) => AnyDb::TwoPl(mk(TwoPl::wait_die(), opts, resolved, storage)?),
            Cc::MvccSi(gc) => {
                let mut p = Si::new(gc, opts.gc_refresh);
                p.skip_validation = opts.plants().skip_validation;
                AnyDb::Si(mk(p, opts, resolved, storage)?)
            }
        };
        let view_fallback = matches!(opts.cc, Cc::TicToc | Cc::Silo) && !opts.plants().view_without_fallback;
        Ok(Db { inner, view_fallback })
    }

    /// Takes a checkpoint now (commits also take one every
    /// [`StoreOptions::checkpoint_bytes`] of log): the pages the log changed are written
    /// beside a new generation of logs and the older logs are deleted, so recovery replays only what
    /// comes after. Transactions may run meanwhile. A no-op without files.
    pub fn checkpoint(&self) -> Result<(), Error> {
        dispatch!(&self.inner, db => db.eng.checkpoint_now())
    }

    /// Flushes the log and writes the pages a clean exit leaves, so that the next open
    /// replays nothing. Dropping the database does the same but cannot report an error.
    pub fn close(self) -> Result<(), Error> {
        dispatch!(&self.inner, db => db.eng.close())
    }

    /// The log's counters (`None` for an in-memory database).
    pub fn wal_stats(&self) -> Option<WalStats> {
        dispatch!(&self.inner, db => db.wal_stats())
    }

    /// Test only (the cargo feature `test-plants`): drops the handle as a crash would (no
    /// final flush, no page write), so the next open runs recovery.
    #[cfg(feature = "test-plants")]
    pub fn abandon_for_tests(self) {
        dispatch!(&self.inner, db => db.eng.abandon());
    }

    /// What recovery did when the database was opened (`None` for an in-memory database).
    pub fn recovery_stats(&self) -> Option<RecoveryStats> {
        dispatch!(&self.inner, db => db.recovery_stats())
    }

    /// The page store's counters: pages, segments, live and file bytes, what was written
    /// (`None` for an in-memory database).
    pub fn store_stats(&self) -> Option<StoreStats> {
        dispatch!(&self.inner, db => db.store_stats())
    }

    /// The record cache's counters: memory counted against [`Options::cache_bytes`], key
    /// ranges in memory, loads and evictions (`None` for a database without pages).
    pub fn cache_stats(&self) -> Option<CacheStats> {
        dispatch!(&self.inner, db => db.cache_stats())
    }

    /// Starts a transaction. It ends when committed, aborted or dropped (dropping rolls
    /// back). It is `Send`: it may move to another thread between calls, and an idle open
    /// transaction does not hold back memory reclamation for others.
    ///
    /// ```
    /// # use tsumiki::{Db, Options};
    /// let db = Db::open_in_memory(Options::default()).unwrap();
    /// let mut txn = db.begin();
    /// txn.put(b"k", b"v").unwrap();
    /// txn.commit().unwrap();
    /// ```
    pub fn begin(&self) -> Txn<'_> {
        Txn { inner: RefCell::new(dispatch!(&self.inner, db => db.begin().into())) }
    }

    /// Runs `f` in a transaction and commits it, running it again (after a short backoff)
    /// as long as it fails with a retryable conflict. Any other error is returned.
    ///
    /// ```
    /// # use tsumiki::{Db, Options};
    /// let db = Db::open_in_memory(Options::default()).unwrap();
    /// let moved = db.run(|txn| {
    ///     txn.put(b"a", b"1")?;
    ///     txn.delete(b"b")
    /// });
    /// assert_eq!(moved, Ok(false)); // "b" was not there
    /// ```
    pub fn run<T>(&self, f: impl FnMut(&mut Txn<'_>) -> Result<T, Error>) -> Result<T, Error> {
        self.run_until(None, f)
    }

    /// [`run`](Self::run), but returning the conflict once `limit` has passed instead of
    /// running `f` again (for callers that must not wait forever, such as a transaction
    /// of the same thread holding what `f` needs).
    ///
    /// ```
    /// # use tsumiki::{Db, Options};
    /// let db = Db::open_in_memory(Options::default()).unwrap();
    /// db.run_within(std::time::Duration::from_secs(1), |txn| txn.put("k", "v")).unwrap();
    /// ```
    pub fn run_within<T>(
        &self,
        limit: std::time::Duration,
        f: impl FnMut(&mut Txn<'_>) -> Result<T, Error>,
    ) -> Result<T, Error> {
        self.run_until(Some(std::time::Instant::now() + limit), f)
    }

    fn run_until<T>(
        &self,
        deadline: Option<std::time::Instant>,
        mut f: impl FnMut(&mut Txn<'_>) -> Result<T, Error>,
    ) -> Result<T, Error> {
        let mut attempt = 0u32;
        loop {
            let mut txn = self.begin();
            let r = f(&mut txn).and_then(|v| txn.commit().map(|()| v));
            match r {
                Err(e) if e.is_retryable() && deadline.is_none_or(|d| std::time::Instant::now() < d) => {
                    attempt = attempt.saturating_add(1);
                    backoff(attempt);
                }
                r => return r,
            }
        }
    }

    /// Runs `f` in a read-only transaction and returns its result; the transaction always
    /// finishes, however long it reads and however busy the writers.
    ///
    /// Under MVCC-SI it reads a snapshot and never aborts. Under 2PL it takes shared locks
    /// and is run again after a conflict. Under TicToc and Silo it runs optimistically, and
    /// after [`VIEW_OPTIMISTIC_TRIES`] conflicts (a long scan that keeps meeting commits)
    /// once more while commits of writes wait at the commit gate, where nothing it reads can
    /// change, so it validates. Short reads thus stay optimistic; a long one holds writers
    /// back only for its own length, once.
    ///
    /// `f` may run more than once: it must not have effects outside the transaction that
    /// a retry would repeat. It must not commit writes to the same database (they would
    /// wait for it while it holds commits).
    ///
    /// ```
    /// # use tsumiki::{Db, Options};
    /// let db = Db::open_in_memory(Options::default()).unwrap();
    /// db.run(|t| (0..1000u32).try_for_each(|i| t.put(i.to_be_bytes(), 1u64.to_be_bytes()))).unwrap();
    /// std::thread::scope(|s| {
    ///     // A writer moves units between records; the total stays 1000.
    ///     s.spawn(|| {
    ///         for i in 0..2000u32 {
    ///             db.run(|t| {
    ///                 let (a, b) = ((i % 1000).to_be_bytes(), ((i * 7 + 1) % 1000).to_be_bytes());
    ///                 let va = u64::from_be_bytes(t.get(a)?.unwrap().try_into().unwrap());
    ///                 let vb = u64::from_be_bytes(t.get(b)?.unwrap().try_into().unwrap());
    ///                 if a != b && va > 0 {
    ///                     t.put(a, (va - 1).to_be_bytes())?;
    ///                     t.put(b, (vb + 1).to_be_bytes())?;
    ///                 }
    ///                 Ok(())
    ///             })
    ///             .unwrap();
    ///         }
    ///     });
    ///     for _ in 0..20 {
    ///         let total = db
    ///             .view(|r| r.iter().map(|row| Ok(u64::from_be_bytes(row?.1.try_into().unwrap()))).sum::<Result<u64, _>>())
    ///             .unwrap();
    ///         assert_eq!(total, 1000);
    ///     }
    /// });
    /// ```
    pub fn view<T>(&self, mut f: impl FnMut(&ReadTxn<'_>) -> Result<T, Error>) -> Result<T, Error> {
        let gate = self.view_fallback;
        let mut attempt = 0u32;
        loop {
            let mut once = || {
                let txn = ReadTxn { txn: self.begin() };
                let v = f(&txn)?;
                txn.txn.commit().map(|()| v)
            };
            let r = if gate && attempt >= VIEW_OPTIMISTIC_TRIES {
                dispatch!(&self.inner, db => db.eng.exclusive_reads(&mut once))
            } else {
                once()
            };
            match r {
                Err(e) if e.is_retryable() => {
                    attempt = attempt.saturating_add(1);
                    backoff(attempt);
                }
                r => return r,
            }
        }
    }

    /// Copies the database, as one consistent state, into a new database in directory
    /// `dir` (which must not hold one), while transactions go on; returns the records
    /// copied. `dir` must be missing or empty. The copy is read in one
    /// [`view`](Self::view) and written in transactions of a few thousand records, then
    /// closed (durable when this returns; a failed backup removes what it wrote). Any
    /// protocol opens it.
    ///
    /// ```
    /// # use tsumiki::{Db, Options};
    /// let dir = tempfile::tempdir().unwrap();
    /// let db = Db::create(dir.path().join("live"), Options::default()).unwrap();
    /// db.run(|t| { t.put("a", 0u64.to_be_bytes())?; t.put("b", 0u64.to_be_bytes()) }).unwrap();
    /// let stop = std::sync::atomic::AtomicBool::new(false);
    /// std::thread::scope(|s| {
    ///     // A writer keeps a == b, changing both in each transaction.
    ///     s.spawn(|| {
    ///         let mut n = 0u64;
    ///         while !stop.load(std::sync::atomic::Ordering::Relaxed) {
    ///             n += 1;
    ///             db.run(|t| { t.put("a", n.to_be_bytes())?; t.put("b", n.to_be_bytes()) }).unwrap();
    ///         }
    ///     });
    ///     assert_eq!(db.backup_to(dir.path().join("copy")).unwrap(), 2);
    ///     stop.store(true, std::sync::atomic::Ordering::Relaxed);
    /// });
    /// let copy = Db::open(dir.path().join("copy"), Options::default()).unwrap();
    /// let t = copy.begin();
    /// assert_eq!(t.get("a").unwrap(), t.get("b").unwrap()); // one consistent state
    /// ```
    pub fn backup_to(&self, dir: impl AsRef<std::path::Path>) -> Result<u64, Error> {
        let dir = dir.as_ref();
        // Only a missing or empty directory: what a failed attempt leaves is then all ours
        // to remove.
        let existed = match std::fs::read_dir(dir) {
            Ok(mut entries) => {
                if entries.next().is_some() {
                    return Err(Error::Config(format!("backup: {} is not empty", dir.display())));
                }
                true
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(e) => return Err(Error::io(format!("backup: reading {}", dir.display()), e)),
        };
        let opts = Options {
            log: LogOptions { durability: crate::wal::Durability::Buffered, ..LogOptions::default() },
            ..Options::default()
        };
        let mut started = false;
        let copied = self.view(|r| {
            // A retry starts the copy over.
            if std::mem::replace(&mut started, true) {
                remove_partial_copy(dir, existed)?;
            }
            let copy = Db::create(dir, opts.clone())?;
            let mut n = 0u64;
            let mut txn = copy.begin();
            for row in r.iter() {
                let (k, v) = row?;
                txn.put(k, v)?;
                n += 1;
                if n.is_multiple_of(BACKUP_BATCH) {
                    std::mem::replace(&mut txn, copy.begin()).commit()?;
                }
            }
            txn.commit()?;
            copy.close()?;
            Ok(n)
        });
        if copied.is_err() && started {
            // A failed backup leaves nothing that looks like one.
            let _ = remove_partial_copy(dir, existed);
        }
        copied
    }

    /// The protocol's short name.
    pub fn cc_name(&self) -> &'static str {
        dispatch!(&self.inner, db => db.protocol().name())
    }

    /// Keys in the index, counting deleted ones not yet unlinked (a full scan; for tests).
    #[doc(hidden)]
    pub fn index_len(&self) -> usize {
        dispatch!(&self.inner, db => db.index_len())
    }

    /// MVCC-SI's version garbage-collection counters (`None` under other protocols).
    pub fn gc_stats(&self) -> Option<GcStats> {
        match &self.inner {
            AnyDb::Si(db) => Some(db.protocol().gc_stats()),
            _ => None,
        }
    }
}

/// Conflicts a [`Db::view`] meets under TicToc or Silo before it runs with commits held.
pub const VIEW_OPTIMISTIC_TRIES: u32 = 2;

/// Records per transaction of a [`Db::backup_to`] copy.
const BACKUP_BATCH: u64 = 4096;

/// Waits a little before a retry: yields at first, then sleeps longer each time.
fn backoff(attempt: u32) {
    if attempt > 4 {
        std::thread::sleep(std::time::Duration::from_micros(1 << attempt.min(10)));
    } else {
        std::thread::yield_now();
    }
}

/// Removes what an abandoned attempt of [`Db::backup_to`] wrote in `dir` (empty before
/// it): the directory if it made it, else everything in it.
fn remove_partial_copy(dir: &std::path::Path, existed: bool) -> Result<(), Error> {
    let io = |e| Error::io(format!("removing the partial copy in {}", dir.display()), e);
    if !existed {
        return match std::fs::remove_dir_all(dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io(e)),
            _ => Ok(()),
        };
    }
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let path = entry.map_err(io)?.path();
        if path.is_dir() {
            std::fs::remove_dir_all(&path).map_err(io)?;
        } else {
            std::fs::remove_file(&path).map_err(io)?;
        }
    }
    Ok(())
}

/// A read-only transaction, given to [`Db::view`]: the reads of [`Txn`], no writes.
pub struct ReadTxn<'a> {
    txn: Txn<'a>,
}

impl<'a> ReadTxn<'a> {
    /// The value of `key`, if present.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>, Error> {
        self.txn.get(key)
    }

    /// The records whose keys are in `range`; see [`Txn::range`].
    pub fn range(&self, range: impl KeyRange) -> Scan<'_, 'a> {
        self.txn.range(range)
    }

    /// Every record; see [`Txn::iter`].
    pub fn iter(&self) -> Scan<'_, 'a> {
        self.txn.iter()
    }

    /// The records whose keys start with `prefix`; see [`Txn::prefix`].
    pub fn prefix(&self, prefix: impl AsRef<[u8]>) -> Scan<'_, 'a> {
        self.txn.prefix(prefix)
    }
}

enum AnyTxn<'a> {
    TicToc(TypedTxn<'a, TicToc>),
    Silo(TypedTxn<'a, Silo>),
    TwoPl(TypedTxn<'a, TwoPl>),
    Si(TypedTxn<'a, Si>),
}

impl<'a> From<TypedTxn<'a, TicToc>> for AnyTxn<'a> {
    fn from(t: TypedTxn<'a, TicToc>) -> Self {
        AnyTxn::TicToc(t)
    }
}
impl<'a> From<TypedTxn<'a, Silo>> for AnyTxn<'a> {
    fn from(t: TypedTxn<'a, Silo>) -> Self {
        AnyTxn::Silo(t)
    }
}
impl<'a> From<TypedTxn<'a, TwoPl>> for AnyTxn<'a> {
    fn from(t: TypedTxn<'a, TwoPl>) -> Self {
        AnyTxn::TwoPl(t)
    }
}
impl<'a> From<TypedTxn<'a, Si>> for AnyTxn<'a> {
    fn from(t: TypedTxn<'a, Si>) -> Self {
        AnyTxn::Si(t)
    }
}

// Transactions move between threads (the C and Python bindings hold them across calls).
const _: fn() = || {
    fn assert_send<T: Send>() {}
    assert_send::<Txn<'static>>();
    assert_send::<TypedTxn<'static, TicToc>>();
    assert_send::<TypedTxn<'static, Si>>();
};

/// A transaction. Reads see the transaction's own writes. Under TicToc, Silo and 2PL every
/// transaction is serializable, scans included (no phantoms); under MVCC-SI it reads the
/// snapshot taken when it began, and of two concurrent writers of a key the second aborts.
///
/// Reads take `&self`, so a [`get`](Self::get) may run while a scan of the same transaction
/// is open; writes take `&mut self`.
///
/// A conflict ([`Error::Conflict`]) rolls the transaction back at once; later calls return
/// [`Error::TxnFinished`].
pub struct Txn<'a> {
    /// Borrowed mutably for one operation (or one step of a scan) at a time.
    inner: RefCell<AnyTxn<'a>>,
}

impl<'a> Txn<'a> {
    /// The value of `key`, if present.
    ///
    /// ```
    /// # use tsumiki::{Db, Options};
    /// # let db = Db::open_in_memory(Options::default()).unwrap();
    /// let mut txn = db.begin();
    /// assert_eq!(txn.get(b"k").unwrap(), None);
    /// txn.put(b"k", b"v").unwrap();
    /// assert_eq!(txn.get(b"k").unwrap(), Some(b"v".to_vec())); // its own write
    /// assert_eq!(txn.get("k").unwrap(), Some(b"v".to_vec())); // any `AsRef<[u8]>`
    /// ```
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>, Error> {
        dispatch_txn!(&mut *self.inner.borrow_mut(), t => t.get(key.as_ref()))
    }

    /// Stores `value` under `key`, whether or not it exists.
    ///
    /// ```
    /// # use tsumiki::{Db, Options, Error};
    /// # let db = Db::open_in_memory(Options::default()).unwrap();
    /// let mut txn = db.begin();
    /// txn.put(b"k", b"v1").unwrap();
    /// txn.put("k", String::from("v2")).unwrap();
    /// assert!(matches!(txn.put(vec![0; 5000], b"v"), Err(Error::KeyTooLong { .. })));
    /// ```
    pub fn put(&mut self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<(), Error> {
        dispatch_txn!(self.inner.get_mut(), t => t.put(key.as_ref(), value.as_ref()))
    }

    /// Inserts only if `key` is absent; returns whether it did.
    ///
    /// ```
    /// # use tsumiki::{Db, Options};
    /// # let db = Db::open_in_memory(Options::default()).unwrap();
    /// let mut txn = db.begin();
    /// assert!(txn.insert(b"k", b"first").unwrap());
    /// assert!(!txn.insert(b"k", b"second").unwrap());
    /// assert_eq!(txn.get(b"k").unwrap(), Some(b"first".to_vec()));
    /// ```
    pub fn insert(&mut self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<bool, Error> {
        dispatch_txn!(self.inner.get_mut(), t => t.insert(key.as_ref(), value.as_ref()))
    }

    /// Replaces the value only if `key` is present; returns whether it did.
    ///
    /// ```
    /// # use tsumiki::{Db, Options};
    /// # let db = Db::open_in_memory(Options::default()).unwrap();
    /// let mut txn = db.begin();
    /// assert!(!txn.update(b"k", b"v").unwrap());
    /// txn.put(b"k", b"v").unwrap();
    /// assert!(txn.update(b"k", b"w").unwrap());
    /// ```
    pub fn update(&mut self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<bool, Error> {
        dispatch_txn!(self.inner.get_mut(), t => t.update(key.as_ref(), value.as_ref()))
    }

    /// Deletes `key`; returns whether it was present.
    ///
    /// ```
    /// # use tsumiki::{Db, Options};
    /// # let db = Db::open_in_memory(Options::default()).unwrap();
    /// let mut txn = db.begin();
    /// txn.put(b"k", b"v").unwrap();
    /// assert!(txn.delete(b"k").unwrap());
    /// assert!(!txn.delete(b"k").unwrap());
    /// ```
    pub fn delete(&mut self, key: impl AsRef<[u8]>) -> Result<bool, Error> {
        dispatch_txn!(self.inner.get_mut(), t => t.delete(key.as_ref()))
    }

    /// The records whose keys are in `range` (any Rust range of `AsRef<[u8]>` keys:
    /// `a..b`, `a..=b`, `a..`, `..b`), in ascending key order, as `(key, value)`;
    /// [`.rev()`](Scan::rev) makes it descending. Reads (a `get`) may run while the scan
    /// is open.
    ///
    /// ```
    /// # use tsumiki::{Db, Options};
    /// # let db = Db::open_in_memory(Options::default()).unwrap();
    /// let mut txn = db.begin();
    /// for k in ["a", "b", "c", "d"] {
    ///     txn.put(k, k.to_uppercase()).unwrap();
    /// }
    /// let keys = |s: tsumiki::Scan| s.map(|r| r.unwrap().0).collect::<Vec<_>>();
    /// assert_eq!(keys(txn.range("b".."d")), [b"b", b"c"]);
    /// assert_eq!(keys(txn.range("b"..="d")), [b"b", b"c", b"d"]);
    /// assert_eq!(keys(txn.range(.."b")), [b"a"]);
    /// assert_eq!(keys(txn.range("c"..).rev()), [b"d", b"c"]);
    /// assert_eq!(keys(txn.range(b"a".as_slice()..b"c")), [b"a", b"b"]);
    /// assert_eq!(txn.range(..).count(), 4);
    /// // A read inside the scan loop:
    /// for row in txn.range("a"..) {
    ///     let (key, value) = row.unwrap();
    ///     assert_eq!(txn.get(&key).unwrap(), Some(value));
    /// }
    /// ```
    pub fn range(&self, range: impl KeyRange) -> Scan<'_, 'a> {
        let start = match range.start_bound() {
            Bound::Included(k) => k.to_vec(),
            Bound::Excluded(k) => successor(k),
            Bound::Unbounded => Vec::new(),
        };
        let end = match range.end_bound() {
            Bound::Included(k) => Some(successor(k)),
            Bound::Excluded(k) => Some(k.to_vec()),
            Bound::Unbounded => None,
        };
        Scan { txn: self, cursor: ScanCursor::new(start, end, false) }
    }

    /// Every record, in ascending key order (`.rev()`: descending).
    ///
    /// ```
    /// # use tsumiki::{Db, Options};
    /// # let db = Db::open_in_memory(Options::default()).unwrap();
    /// # db.run(|t| { t.put("x", "1")?; t.put("y", "2") }).unwrap();
    /// let txn = db.begin();
    /// assert_eq!(txn.iter().count(), 2);
    /// assert_eq!(txn.iter().rev().next().unwrap().unwrap().0, b"y"); // the last key
    /// ```
    pub fn iter(&self) -> Scan<'_, 'a> {
        Scan { txn: self, cursor: ScanCursor::new(Vec::new(), None, false) }
    }

    /// The records whose keys start with `prefix`, in ascending key order (`.rev()`:
    /// descending).
    ///
    /// ```
    /// # use tsumiki::{Db, Options};
    /// # let db = Db::open_in_memory(Options::default()).unwrap();
    /// let mut txn = db.begin();
    /// for k in ["user:1", "user:2", "users", "video:1"] {
    ///     txn.put(k, b"").unwrap();
    /// }
    /// let keys: Vec<_> = txn.prefix("user:").rev().map(|r| r.unwrap().0).collect();
    /// assert_eq!(keys, [b"user:2", b"user:1"]);
    /// ```
    pub fn prefix(&self, prefix: impl AsRef<[u8]>) -> Scan<'_, 'a> {
        let p = prefix.as_ref();
        Scan { txn: self, cursor: ScanCursor::new(p.to_vec(), prefix_end(p), false) }
    }

    /// Makes the transaction's writes visible, or fails with a conflict (rolled back).
    ///
    /// ```
    /// # use tsumiki::{Db, Options};
    /// # let db = Db::open_in_memory(Options::default()).unwrap();
    /// let mut t1 = db.begin();
    /// let mut t2 = db.begin();
    /// t1.get(b"x").unwrap();
    /// t2.put(b"x", b"2").unwrap();
    /// t2.commit().unwrap();
    /// t1.put(b"x", b"1").unwrap();
    /// // t1 read "x" before t2 wrote it and writes it after: not serializable.
    /// assert!(t1.commit().unwrap_err().is_retryable());
    /// ```
    pub fn commit(self) -> Result<(), Error> {
        dispatch_txn!(self.inner.into_inner(), t => t.commit())
    }

    /// Commits without waiting for the commit to become durable: the returned ticket's
    /// [`CommitTicket::wait`] does. A worker that defers several commits and then waits
    /// for the last lets them share flushes (group commit, paper 001); other transactions
    /// may see the writes before the ticket is waited on only under early lock release.
    ///
    /// ```
    /// # use tsumiki::{Db, Options};
    /// # let db = Db::open_in_memory(Options::default()).unwrap();
    /// let mut txn = db.begin();
    /// txn.put(b"k", b"v").unwrap();
    /// let ticket = txn.commit_deferred().unwrap();
    /// ticket.wait().unwrap();
    /// ```
    pub fn commit_deferred(self) -> Result<CommitTicket, Error> {
        dispatch_txn!(self.inner.into_inner(), t => t.commit_deferred())
    }

    /// Rolls the transaction back.
    ///
    /// ```
    /// # use tsumiki::{Db, Options};
    /// # let db = Db::open_in_memory(Options::default()).unwrap();
    /// let mut txn = db.begin();
    /// txn.put(b"k", b"v").unwrap();
    /// txn.abort();
    /// assert_eq!(db.begin().get(b"k").unwrap(), None);
    /// ```
    pub fn abort(self) {
        dispatch_txn!(self.inner.into_inner(), t => t.abort())
    }
}

/// A range of keys for [`Txn::range`]: any Rust range (`a..b`, `a..=b`, `a..`, `..b`,
/// `..=b`, `..`) or pair of [`Bound`]s, of keys of one `AsRef<[u8]>` type (`&str`,
/// `&[u8]`, `Vec<u8>`, `&[u8; N]`...). (A trait of its own rather than `RangeBounds`,
/// whose key type Rust cannot infer from `b"a"..b"b"`.)
pub trait KeyRange {
    /// The lower bound.
    fn start_bound(&self) -> Bound<&[u8]>;
    /// The upper bound.
    fn end_bound(&self) -> Bound<&[u8]>;
}

macro_rules! key_range {
    ($($ty:ty => |$r:ident| ($start:expr, $end:expr)),* $(,)?) => {$(
        impl<K: AsRef<[u8]>> KeyRange for $ty {
            #[allow(unused_variables)]
            fn start_bound(&self) -> Bound<&[u8]> {
                let $r = self;
                $start
            }
            #[allow(unused_variables)]
            fn end_bound(&self) -> Bound<&[u8]> {
                let $r = self;
                $end
            }
        }
    )*};
}

key_range! {
    std::ops::Range<K> => |r| (Bound::Included(r.start.as_ref()), Bound::Excluded(r.end.as_ref())),
    std::ops::RangeInclusive<K> => |r| (Bound::Included(r.start().as_ref()), Bound::Included(r.end().as_ref())),
    std::ops::RangeFrom<K> => |r| (Bound::Included(r.start.as_ref()), Bound::Unbounded),
    std::ops::RangeTo<K> => |r| (Bound::Unbounded, Bound::Excluded(r.end.as_ref())),
    std::ops::RangeToInclusive<K> => |r| (Bound::Unbounded, Bound::Included(r.end.as_ref())),
    (Bound<K>, Bound<K>) => |r| (r.0.as_ref().map(AsRef::as_ref), r.1.as_ref().map(AsRef::as_ref)),
}

impl KeyRange for std::ops::RangeFull {
    fn start_bound(&self) -> Bound<&[u8]> {
        Bound::Unbounded
    }
    fn end_bound(&self) -> Bound<&[u8]> {
        Bound::Unbounded
    }
}

/// The smallest key after `k`.
fn successor(k: &[u8]) -> Vec<u8> {
    let mut s = Vec::with_capacity(k.len() + 1);
    s.extend_from_slice(k);
    s.push(0);
    s
}

/// The smallest key above every key that starts with `prefix` (`None`: no such key).
fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// A scan of a transaction ([`Txn::range`], [`Txn::prefix`], [`Txn::iter`]): `(key,
/// value)` pairs, or the error that ended it. Each step reads through the transaction, so
/// what it returns is part of the transaction's reads (validated, or locked, by its
/// protocol).
pub struct Scan<'t, 'a> {
    txn: &'t Txn<'a>,
    cursor: ScanCursor,
}

impl Scan<'_, '_> {
    /// The same records in descending key order (called after some `next()`, what is
    /// left of the range, descending). The index links its leaves rightward only, so a
    /// reverse scan reads the range a window at a time from the top, each window (about a
    /// leaf of the index) forward and then reversed: one descent per window.
    ///
    /// ```
    /// # use tsumiki::{Db, Options};
    /// # let db = Db::open_in_memory(Options::default()).unwrap();
    /// # db.run(|t| (0..200u32).try_for_each(|i| t.put(i.to_be_bytes(), b""))).unwrap();
    /// let txn = db.begin();
    /// let mut scan = txn.iter();
    /// assert_eq!(scan.next().unwrap().unwrap().0, 0u32.to_be_bytes());
    /// let rest: Vec<_> = scan.rev().map(|r| u32::from_be_bytes(r.unwrap().0.try_into().unwrap())).collect();
    /// assert_eq!(rest, (1..200).rev().collect::<Vec<u32>>());
    /// ```
    #[allow(clippy::should_implement_trait)]
    pub fn rev(mut self) -> Self {
        self.cursor.reverse();
        self
    }
}

impl Iterator for Scan<'_, '_> {
    type Item = Result<(Vec<u8>, Vec<u8>), Error>;

    fn next(&mut self) -> Option<Self::Item> {
        let cursor = &mut self.cursor;
        dispatch_txn!(&mut *self.txn.inner.borrow_mut(), t => cursor.next(t))
    }
}
