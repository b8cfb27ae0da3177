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
//! let keys: Vec<_> = txn.scan(b"a", None).map(|r| r.unwrap().0).collect();
//! assert_eq!(keys, vec![b"apple".to_vec(), b"banana".to_vec()]);
//! txn.commit().unwrap();
//! ```

mod engine;
mod residency;

use std::sync::Arc;

pub use engine::{Engine, TypedScan, TypedTxn};
use engine::{Home, Slot, TxnBufs};

use crate::cc::si::Si;
use crate::cc::silo::Silo;
use crate::cc::tictoc::TicToc;
use crate::cc::twopl::TwoPl;
use crate::cc::Protocol;
use crate::index::BwTreeConfig;
use crate::mvcc::{Gc, GcStats, DEFAULT_REFRESH};
use crate::store::pages::StoreStats;
use crate::wal::recovery::RecoveryStats;
use crate::wal::storage::{DirStorage, Storage};
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
    /// = `si`, with the default collector).
    pub fn parse(name: &str) -> Option<Cc> {
        Some(match name {
            "tictoc" => Cc::TicToc,
            "silo" => Cc::Silo,
            "2pl" | "2pl-nowait" => Cc::TwoPl(LockWait::NoWait),
            "2pl-waitdie" => Cc::TwoPl(LockWait::WaitDie),
            "mvcc-si" | "si" | "mvcc" => Cc::MvccSi(Gc::default()),
            _ => return None,
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
    /// Test only: TicToc and Silo skip read validation, MVCC-SI skips first-committer-wins
    /// (planted bugs that the isolation tests must catch). Never set it otherwise.
    #[doc(hidden)]
    pub skip_validation_for_tests: bool,
    /// Logging, for databases opened with a path ([`Db::open`]): P-WAL with NLR and
    /// fdatasync at every commit by default.
    pub log: LogOptions,
    /// Databases opened with a path: the memory the records may hold (keys, values and
    /// their share of the index, estimated) together with a checkpoint's buffers (3/16 of
    /// it, which the records leave free), [`DEFAULT_CACHE_BYTES`] by default. Past it,
    /// key ranges that no transaction wrote since the last checkpoint leave memory (CLOCK)
    /// and are read back from the pages when used again; past it with nothing clean, a
    /// checkpoint is taken. A running transaction may hold more until it ends.
    pub cache_bytes: usize,
    /// Refuse every write ([`Error::ReadOnly`]); [`Db::open`] then also requires the
    /// database to exist. Opening still takes the database's lock and recovers what a
    /// crash left (which writes to its files), so the directory must be writable.
    pub read_only: bool,
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
            skip_validation_for_tests: false,
            log: LogOptions::default(),
            cache_bytes: DEFAULT_CACHE_BYTES,
            read_only: false,
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
    pub fn validate(&self) -> Result<CommitMode, Error> {
        self.index.validate().map_err(Error::Index)?;
        if self.gc_refresh.is_zero() {
            return Err(Error::Config("gc_refresh must be above zero".into()));
        }
        CommitMode::resolve(&self.log, self.cc.name(), self.cc.can_hold_locks())
    }
}

/// A database whose protocol is fixed at compile time.
pub struct TypedDb<P: Protocol> {
    eng: Arc<Engine<P>>,
    /// The background thread that takes checkpoints (databases with files).
    checkpointer: Option<Checkpointer>,
}

/// A thread that takes a checkpoint whenever one is due, so that no commit waits for it.
struct Checkpointer {
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl Checkpointer {
    /// How often the thread checks whether a checkpoint is due.
    const POLL: std::time::Duration = std::time::Duration::from_millis(20);

    fn start<P: Protocol>(eng: &Arc<Engine<P>>) -> Checkpointer {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (weak, flag) = (Arc::downgrade(eng), stop.clone());
        let thread = std::thread::spawn(move || {
            while !flag.load(std::sync::atomic::Ordering::Acquire) {
                std::thread::park_timeout(Self::POLL);
                let Some(eng) = weak.upgrade() else { return };
                if eng.checkpoint_due() || eng.checkpoint_due_by_time() {
                    // A failure poisons the log; commits report it.
                    let _ = eng.checkpoint_now();
                } else {
                    eng.release_idle_segments();
                }
            }
        });
        let _ = eng.checkpointer.set(thread.thread().clone());
        Checkpointer { stop, thread }
    }

    fn stop(self) {
        self.stop.store(true, std::sync::atomic::Ordering::Release);
        self.thread.thread().unpark();
        let _ = self.thread.join();
    }
}

impl<P: Protocol> TypedDb<P> {
    /// An in-memory database run by `proto`.
    pub fn new(proto: P, index: BwTreeConfig) -> Result<Self, Error> {
        Ok(TypedDb { eng: Arc::new(Engine::new(proto, index)?), checkpointer: None })
    }

    /// A database kept in `storage`: recovers what its files hold, then logs every commit
    /// per `log`.
    pub fn open_durable(
        proto: P,
        index: BwTreeConfig,
        storage: Arc<dyn Storage>,
        log: LogOptions,
        cache_bytes: usize,
    ) -> Result<Self, Error> {
        Self::open_durable_as(proto, index, storage, log, cache_bytes, false)
    }

    /// [`open_durable`](Self::open_durable), refusing every write when `read_only`.
    fn open_durable_as(
        proto: P,
        index: BwTreeConfig,
        storage: Arc<dyn Storage>,
        log: LogOptions,
        cache_bytes: usize,
        read_only: bool,
    ) -> Result<Self, Error> {
        let mut eng = Engine::new(proto, index)?;
        eng.cache_bytes = cache_bytes;
        eng.read_only = read_only;
        eng.open_durable(storage, log)?;
        let eng = Arc::new(eng);
        let checkpointer = Some(Checkpointer::start(&eng));
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
        Self::build(&opts, None)
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
        opts.validate()?;
        if path.as_os_str().is_empty() {
            return Err(Error::Config("the database path is empty".into()));
        }
        if !create || opts.read_only {
            match std::fs::metadata(path.join(crate::wal::recovery::MASTER)) {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    let why = if path.is_dir() { "holds no tsumiki database" } else { "does not exist" };
                    return Err(Error::NotFound(format!("{} {why} (Db::create makes one)", path.display())));
                }
                Err(e) => return Err(Error::io(format!("opening {}", path.display()), e)),
            }
        }
        let dir = DirStorage::new(path).map_err(|e| Error::io(format!("opening directory {}", path.display()), e))?;
        Self::build(&opts, Some(Arc::new(dir)))
    }

    /// Opens the database kept in `storage` (a simulated disk in crash tests).
    pub fn open_with_storage(storage: Arc<dyn Storage>, opts: Options) -> Result<Db, Error> {
        opts.validate()?;
        Self::build(&opts, Some(storage))
    }

    fn build(opts: &Options, storage: Option<Arc<dyn Storage>>) -> Result<Db, Error> {
        fn mk<P: Protocol>(p: P, opts: &Options, storage: Option<Arc<dyn Storage>>) -> Result<TypedDb<P>, Error> {
            match storage {
                None => TypedDb::new(p, opts.index.clone()),
                Some(s) => TypedDb::open_durable_as(
                    p,
                    opts.index.clone(),
                    s,
                    opts.log.clone(),
                    opts.cache_bytes,
                    opts.read_only,
                ),
            }
        }
        let inner = match opts.cc {
            Cc::TicToc => AnyDb::TicToc(mk(TicToc { skip_validation: opts.skip_validation_for_tests }, opts, storage)?),
            Cc::Silo => {
                let mut p = Silo::new();
                p.skip_validation = opts.skip_validation_for_tests;
                AnyDb::Silo(mk(p, opts, storage)?)
            }
            Cc::TwoPl(LockWait::NoWait) => AnyDb::TwoPl(mk(TwoPl::no_wait(), opts, storage)?),
            Cc::TwoPl(LockWait::WaitDie) => AnyDb::TwoPl(mk(TwoPl::wait_die(), opts, storage)?),
            Cc::MvccSi(gc) => {
                let mut p = Si::new(gc, opts.gc_refresh);
                p.skip_validation = opts.skip_validation_for_tests;
                AnyDb::Si(mk(p, opts, storage)?)
            }
        };
        Ok(Db { inner })
    }

    /// Takes a checkpoint now (commits also take one every
    /// [`LogOptions::checkpoint_bytes`] of log): the pages the log changed are written
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

    /// Test only: drops the handle as a crash would (no final flush, no page write), so the
    /// next open runs recovery. Never use it otherwise.
    #[doc(hidden)]
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
        Txn { inner: dispatch!(&self.inner, db => db.begin().into()) }
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
    pub fn run<T>(&self, mut f: impl FnMut(&mut Txn<'_>) -> Result<T, Error>) -> Result<T, Error> {
        let mut attempt = 0u32;
        loop {
            let mut txn = self.begin();
            let r = f(&mut txn).and_then(|v| txn.commit().map(|()| v));
            match r {
                Err(e) if e.is_retryable() => {
                    attempt = attempt.saturating_add(1);
                    if attempt > 4 {
                        std::thread::sleep(std::time::Duration::from_micros(1 << attempt.min(10)));
                    } else {
                        std::thread::yield_now();
                    }
                }
                r => return r,
            }
        }
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
/// A conflict ([`Error::Conflict`]) rolls the transaction back at once; later calls return
/// [`Error::TxnFinished`].
pub struct Txn<'a> {
    inner: AnyTxn<'a>,
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
    /// ```
    pub fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        dispatch_txn!(&mut self.inner, t => t.get(key))
    }

    /// Stores `value` under `key`, whether or not it exists.
    ///
    /// ```
    /// # use tsumiki::{Db, Options, Error};
    /// # let db = Db::open_in_memory(Options::default()).unwrap();
    /// let mut txn = db.begin();
    /// txn.put(b"k", b"v1").unwrap();
    /// txn.put(b"k", b"v2").unwrap();
    /// assert!(matches!(txn.put(&[0; 5000], b"v"), Err(Error::KeyTooLong { .. })));
    /// ```
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), Error> {
        dispatch_txn!(&mut self.inner, t => t.put(key, value))
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
    pub fn insert(&mut self, key: &[u8], value: &[u8]) -> Result<bool, Error> {
        dispatch_txn!(&mut self.inner, t => t.insert(key, value))
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
    pub fn update(&mut self, key: &[u8], value: &[u8]) -> Result<bool, Error> {
        dispatch_txn!(&mut self.inner, t => t.update(key, value))
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
    pub fn delete(&mut self, key: &[u8]) -> Result<bool, Error> {
        dispatch_txn!(&mut self.inner, t => t.delete(key))
    }

    /// The records with `start <= key < end` (no upper bound when `end` is `None`), in key
    /// order, as `(key, value)`.
    ///
    /// ```
    /// # use tsumiki::{Db, Options};
    /// # let db = Db::open_in_memory(Options::default()).unwrap();
    /// let mut txn = db.begin();
    /// for k in [b"a", b"b", b"c"] {
    ///     txn.put(k, b"v").unwrap();
    /// }
    /// let keys: Vec<Vec<u8>> = txn.scan(b"b", None).map(|r| r.unwrap().0).collect();
    /// assert_eq!(keys, vec![b"b".to_vec(), b"c".to_vec()]);
    /// ```
    pub fn scan(&mut self, start: &[u8], end: Option<&[u8]>) -> Scan<'_, 'a> {
        let inner = match &mut self.inner {
            AnyTxn::TicToc(t) => AnyScan::TicToc(t.scan(start, end)),
            AnyTxn::Silo(t) => AnyScan::Silo(t.scan(start, end)),
            AnyTxn::TwoPl(t) => AnyScan::TwoPl(t.scan(start, end)),
            AnyTxn::Si(t) => AnyScan::Si(t.scan(start, end)),
        };
        Scan { inner }
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
        dispatch_txn!(self.inner, t => t.commit())
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
        dispatch_txn!(self.inner, t => t.commit_deferred())
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
        dispatch_txn!(self.inner, t => t.abort())
    }
}

enum AnyScan<'t, 'a> {
    TicToc(TypedScan<'t, 'a, TicToc>),
    Silo(TypedScan<'t, 'a, Silo>),
    TwoPl(TypedScan<'t, 'a, TwoPl>),
    Si(TypedScan<'t, 'a, Si>),
}

/// The iterator of [`Txn::scan`]: `(key, value)` pairs, or the error that ended the scan.
pub struct Scan<'t, 'a> {
    inner: AnyScan<'t, 'a>,
}

impl Iterator for Scan<'_, '_> {
    type Item = Result<(Vec<u8>, Vec<u8>), Error>;

    fn next(&mut self) -> Option<Self::Item> {
        match &mut self.inner {
            AnyScan::TicToc(s) => s.next(),
            AnyScan::Silo(s) => s.next(),
            AnyScan::TwoPl(s) => s.next(),
            AnyScan::Si(s) => s.next(),
        }
    }
}
