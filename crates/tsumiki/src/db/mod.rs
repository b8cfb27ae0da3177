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

/// One call on whichever protocol's engine an `AnyDb` or `AnyTxn` holds (one arm per
/// protocol, each monomorphized): `dispatch!(AnyDb, &self.inner, db => ...)`.
macro_rules! dispatch {
    ($any:ident, $inner:expr, $v:ident => $e:expr) => {
        match $inner {
            $any::TicToc($v) => $e,
            $any::Silo($v) => $e,
            $any::TwoPl($v) => $e,
            $any::Si($v) => $e,
        }
    };
}

mod backup;
// The engine holds records through raw pointers the index owns, and the residency map is
// an epoch-reclaimed pointer.
#[allow(unsafe_code)]
mod engine;
mod open;
mod options;
mod txn;
mod typed;
// OwnedTxn extends a transaction's borrow of the Db it keeps alive by an Arc.
#[allow(unsafe_code)]
mod owned;
#[allow(unsafe_code)]
mod residency;

use std::cell::{Cell, RefCell};
use std::ops::Bound;
use std::sync::Arc;

use engine::{successor_key, Checkpointer, Home, ScanCursor, Slot, TxnBufs};
pub use engine::{Engine, Row, RowRef, TypedScan, TypedTxn};
pub use open::OpenOptions;
pub use options::{CacheStats, Cc, LockWait, Options, Resolved, DEFAULT_CACHE_BYTES};
pub use owned::{OwnedReadTxn, OwnedTxn};
pub use txn::{KeyRange, ReadTxn, Scan, Txn};
pub use typed::{TypedDb, TypedWorker};

use crate::cc::si::Si;
use crate::cc::silo::Silo;
use crate::cc::tictoc::TicToc;
use crate::cc::twopl::TwoPl;
use crate::cc::{Protocol, SnapshotStats};
use crate::index::BwTreeConfig;
use crate::mvcc::{Gc, GcStats, DEFAULT_REFRESH};
use crate::plants::Plants;
use crate::storage::{DirStorage, ReadOnlyDir, Storage};
use crate::store::budget::CacheBudget;
use crate::store::pages::StoreStats;
use crate::store::StoreOptions;
use crate::wal::recovery::RecoveryStats;
use crate::wal::{CommitMode, CommitTicket, LogOptions, WalStats};

pub use crate::error::{Error, MAX_VALUE_LEN};

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
        let storage = dir_storage(path, opts.read_only)?;
        Self::build(&opts, resolved, Some(storage))
    }

    /// Whether every write is refused ([`Error::ReadOnly`]): opened with
    /// [`Options::read_only`], or read-only because the disk was full at open.
    pub fn is_read_only(&self) -> bool {
        dispatch!(AnyDb, &self.inner, db => db.eng.read_only)
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
                let mut p = TicToc { skip_validation: opts.plants().skip_validation, ..TicToc::default() };
                p.snaps.read_newest = opts.plants().snapshot_reads_newest;
                p.snaps.count_newest = opts.plants().snapshot_counts_newest;
                AnyDb::TicToc(mk(p, opts, resolved, storage)?)
            }
            Cc::Silo => {
                let mut p = Silo::new();
                p.skip_validation = opts.plants().skip_validation;
                p.snaps.read_newest = opts.plants().snapshot_reads_newest;
                p.snaps.count_newest = opts.plants().snapshot_counts_newest;
                AnyDb::Silo(mk(p, opts, resolved, storage)?)
            }
            Cc::TwoPl(wait) => {
                let mut p = if wait == LockWait::WaitDie { TwoPl::wait_die() } else { TwoPl::no_wait() };
                p.snaps.read_newest = opts.plants().snapshot_reads_newest;
                p.snaps.count_newest = opts.plants().snapshot_counts_newest;
                AnyDb::TwoPl(mk(p, opts, resolved, storage)?)
            }
            Cc::MvccSi(gc) => {
                let mut p = Si::new(gc, opts.gc_refresh);
                p.skip_validation = opts.plants().skip_validation;
                AnyDb::Si(mk(p, opts, resolved, storage)?)
            }
        };
        Ok(Db { inner })
    }

    /// Takes a checkpoint now (commits also take one every
    /// [`StoreOptions::checkpoint_bytes`] of log): the pages the log changed are written
    /// beside a new generation of logs and the older logs are deleted, so recovery replays only what
    /// comes after. Transactions may run meanwhile. A no-op without files.
    pub fn checkpoint(&self) -> Result<(), Error> {
        dispatch!(AnyDb, &self.inner, db => db.eng.checkpoint_now())
    }

    /// Loads `records`, sorted by key, each key above every key already in the database:
    /// a new database filled, or one extended past its last key (LMDB's `MDB_APPEND`,
    /// RocksDB's ingestion). With files, the records go straight into the page store as
    /// pages built bottom-up, written once, past the log and the index: memory stays at a
    /// few pages whatever their number, and the records load as transactions read them,
    /// as after an open. It takes the database to itself (`&mut self`: no transaction is
    /// open) and is atomic and durable: when it returns every record is stored and synced;
    /// after a crash, either all are or none. Returns the number of records loaded.
    ///
    /// Keys out of order, not above the database's last key, or over the limits are
    /// refused ([`Error::InvalidInput`], [`Error::KeyTooLong`], [`Error::ValueTooLong`])
    /// and nothing is loaded. An in-memory database, or one whose records all stay in
    /// memory ([`LogMode::None`](crate::LogMode)), loads them in one transaction.
    ///
    /// ```
    /// # use tsumiki::{Db, Error, Options};
    /// let dir = tempfile::tempdir().unwrap();
    /// let mut db = Db::create(dir.path().join("db"), Options::default()).unwrap();
    /// let n = db.bulk_load((0..1000u32).map(|i| (i.to_be_bytes(), b"value"))).unwrap();
    /// assert_eq!((n, db.len().unwrap()), (1000, 1000));
    /// // Appending goes on past the last key; a key at or below it is refused.
    /// db.bulk_load([(2000u32.to_be_bytes(), b"more")]).unwrap();
    /// assert!(matches!(db.bulk_load([(5u32.to_be_bytes(), b"v")]), Err(Error::InvalidInput(_))));
    /// assert_eq!(db.begin().get(2000u32.to_be_bytes()).unwrap(), Some(b"more".to_vec()));
    /// ```
    pub fn bulk_load<K, V>(&mut self, records: impl IntoIterator<Item = (K, V)>) -> Result<u64, Error>
    where
        K: AsRef<[u8]>,
        V: AsRef<[u8]>,
    {
        self.try_bulk_load(records.into_iter().map(Ok))
    }

    /// [`bulk_load`](Self::bulk_load) from a source that may fail (a file being read):
    /// its first error ends the load, which then loads nothing and returns that error.
    pub fn try_bulk_load<K, V>(
        &mut self,
        records: impl IntoIterator<Item = Result<(K, V), Error>>,
    ) -> Result<u64, Error>
    where
        K: AsRef<[u8]>,
        V: AsRef<[u8]>,
    {
        let records = records.into_iter().map(|r| r.map(|(k, v)| (k.as_ref().to_vec(), v.as_ref().to_vec())));
        if dispatch!(AnyDb, &self.inner, db => db.eng.bulk_loads_pages()) {
            return dispatch!(AnyDb, &self.inner, db => db.eng.bulk_load(records));
        }
        let mut txn = self.begin();
        let mut prev = txn.iter().rev().next().transpose()?.map(|(k, _)| k);
        let mut n = 0u64;
        for r in records {
            let (k, v) = r?;
            crate::store::pages::check_appended(prev.as_deref(), &k, &v, n)?;
            txn.put(&k, v)?;
            prev = Some(k);
            n += 1;
        }
        txn.commit()?;
        Ok(n)
    }

    /// Makes every commit so far durable, whatever durability it chose
    /// ([`Txn::set_durability`]): writes and syncs each log lane that holds unsynced
    /// commits. A no-op without files, or when every commit was synced.
    pub fn sync(&self) -> Result<(), Error> {
        dispatch!(AnyDb, &self.inner, db => db.eng.durable.as_ref().map_or(Ok(()), |d| d.wal.sync_all()))
    }

    /// Flushes the log and writes the pages a clean exit leaves, so that the next open
    /// replays nothing; or, for a small database with a short log since its last
    /// checkpoint, marks the log's end instead, for the next open to replay and append to
    /// (see [`StoreOptions::close_keeps_short_log`](crate::StoreOptions)). Dropping the
    /// database does the same but cannot report an error.
    pub fn close(self) -> Result<(), Error> {
        dispatch!(AnyDb, &self.inner, db => db.eng.close())
    }

    /// The log's counters (`None` for an in-memory database).
    pub fn wal_stats(&self) -> Option<WalStats> {
        dispatch!(AnyDb, &self.inner, db => db.wal_stats())
    }

    /// Test only (the cargo feature `test-plants`): drops the handle as a crash would (no
    /// final flush, no page write), so the next open runs recovery.
    #[cfg(feature = "test-plants")]
    pub fn abandon_for_tests(self) {
        dispatch!(AnyDb, &self.inner, db => db.eng.abandon());
    }

    /// Test only (the cargo feature `test-plants`): whether the checkpoint thread has
    /// started (it starts on first need: see `db/engine/checkpointer.rs`).
    #[cfg(feature = "test-plants")]
    pub fn checkpoint_thread_started_for_tests(&self) -> bool {
        dispatch!(AnyDb, &self.inner, db => db.eng.checkpointer.started())
    }

    /// What recovery did when the database was opened (`None` for an in-memory database).
    pub fn recovery_stats(&self) -> Option<RecoveryStats> {
        dispatch!(AnyDb, &self.inner, db => db.recovery_stats())
    }

    /// The page store's counters: pages, segments, live and file bytes, what was written
    /// (`None` for an in-memory database).
    pub fn store_stats(&self) -> Option<StoreStats> {
        dispatch!(AnyDb, &self.inner, db => db.store_stats())
    }

    /// The record cache's counters: memory counted against [`Options::cache_bytes`], key
    /// ranges in memory, loads and evictions (`None` for a database without pages).
    pub fn cache_stats(&self) -> Option<CacheStats> {
        dispatch!(AnyDb, &self.inner, db => db.cache_stats())
    }

    /// Starts a transaction. It ends when committed, aborted or dropped (dropping rolls
    /// back). It is `Send`: it may move to another thread between calls, and an idle open
    /// transaction does not hold back memory reclamation for others.
    ///
    /// Which to use for reads: a transaction that only reads is serializable like any
    /// other, so under TicToc and Silo its reads are validated at commit, and a long one
    /// (a full scan) beside busy writers can fail validation every time it is retried;
    /// under 2PL it takes shared locks, which hold writers back. Read through
    /// [`begin_read`](Self::begin_read) or [`view`](Self::view) instead: a snapshot that
    /// never aborts and never holds a writer.
    ///
    /// ```
    /// # use tsumiki::{Db, Options};
    /// let db = Db::open_in_memory(Options::default()).unwrap();
    /// let mut txn = db.begin();
    /// txn.put(b"k", b"v").unwrap();
    /// txn.commit().unwrap();
    /// ```
    pub fn begin(&self) -> Txn<'_> {
        Txn {
            inner: RefCell::new(dispatch!(AnyDb, &self.inner, db => db.begin().into())),
            value_buf: Cell::default(),
            lens_buf: Cell::default(),
        }
    }

    /// Starts a snapshot read transaction: its reads see one committed state (every commit
    /// that returned before it began, none that began after), under every protocol. It
    /// never aborts, keeps no read set, takes no lock and never holds a writer back; it
    /// costs about as much to begin and end as a transaction. Versions it needs are kept
    /// beside their records while it is open and reclaimed after, so close it (drop it)
    /// when done. It is `Send`; [`begin_read_owned`](Self::begin_read_owned) gives one
    /// that also owns a share of the database.
    ///
    /// ```
    /// # use tsumiki::{Db, Options};
    /// let db = Db::open_in_memory(Options::default()).unwrap();
    /// db.run(|t| t.put(b"k", b"1")).unwrap();
    /// let snap = db.begin_read();
    /// db.run(|t| t.put(b"k", b"2")).unwrap(); // not held back by the snapshot
    /// assert_eq!(snap.get(b"k").unwrap(), Some(b"1".to_vec()));
    /// drop(snap);
    /// assert_eq!(db.begin_read().get(b"k").unwrap(), Some(b"2".to_vec()));
    /// ```
    pub fn begin_read(&self) -> ReadTxn<'_> {
        let txn = dispatch!(AnyDb, &self.inner, db => db.begin_snapshot().into());
        ReadTxn { txn: Txn { inner: RefCell::new(txn), value_buf: Cell::default(), lens_buf: Cell::default() } }
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
    /// It reads a snapshot ([`begin_read`](Self::begin_read)) under every protocol: it
    /// never conflicts with writers and never holds them back.
    ///
    /// `f` may run more than once (after an error that [`Error::is_retryable`] calls
    /// retryable, such as a failed load of a key range under cache pressure): it must not
    /// have effects outside the transaction that a retry would repeat.
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
        let mut attempt = 0u32;
        loop {
            let txn = self.begin_read();
            let r = f(&txn);
            drop(txn);
            match r {
                Err(e) if e.is_retryable() => {
                    attempt = attempt.saturating_add(1);
                    backoff(attempt);
                }
                r => return r,
            }
        }
    }

    /// The number of records, as of now ([`ReadTxn::len`] of a new snapshot: no scan
    /// under TicToc, Silo and 2PL).
    ///
    /// ```
    /// # use tsumiki::{Db, Options};
    /// let db = Db::open_in_memory(Options::default()).unwrap();
    /// db.run(|t| t.put("k", "v")).unwrap();
    /// assert_eq!(db.len().unwrap(), 1);
    /// ```
    pub fn len(&self) -> Result<u64, Error> {
        self.view(|r| r.len())
    }

    /// Whether the database holds no record.
    pub fn is_empty(&self) -> Result<bool, Error> {
        self.view(|r| r.is_empty())
    }

    /// The protocol's short name.
    pub fn cc_name(&self) -> &'static str {
        dispatch!(AnyDb, &self.inner, db => db.protocol().name())
    }

    /// Keys in the index, counting deleted ones not yet unlinked (a full scan; for tests).
    #[doc(hidden)]
    pub fn index_len(&self) -> usize {
        dispatch!(AnyDb, &self.inner, db => db.index_len())
    }

    /// The index's structure modifications so far (consolidations, splits, merges): what a
    /// write path's profile is read against.
    #[doc(hidden)]
    pub fn index_stats(&self) -> crate::index::BwTreeStats {
        dispatch!(AnyDb, &self.inner, db => db.index_stats())
    }

    /// Snapshot read transactions open now, and the versions kept for them (empty under
    /// MVCC-SI, whose versions [`gc_stats`](Self::gc_stats) counts).
    pub fn snapshot_stats(&self) -> SnapshotStats {
        dispatch!(AnyDb, &self.inner, db => db.protocol().snapshot_stats())
    }

    /// MVCC-SI's version garbage-collection counters (`None` under other protocols).
    pub fn gc_stats(&self) -> Option<GcStats> {
        match &self.inner {
            AnyDb::Si(db) => Some(db.protocol().gc_stats()),
            _ => None,
        }
    }
}

/// Waits a little before a retry: yields at first, then sleeps longer each time.
fn backoff(attempt: u32) {
    if attempt > 4 {
        std::thread::sleep(std::time::Duration::from_micros(1 << attempt.min(10)));
    } else {
        std::thread::yield_now();
    }
}

/// The files of the database in directory `path`: read-only ([`ReadOnlyDir`]: opened
/// `O_RDONLY`, the directory neither created nor written, its lock shared) for a
/// read-only open, so that it works on read-only media; else [`DirStorage`] (the directory
/// made if missing).
pub(crate) fn dir_storage(path: &std::path::Path, read_only: bool) -> Result<Arc<dyn Storage>, Error> {
    if read_only {
        return Ok(Arc::new(ReadOnlyDir::new(path)?));
    }
    let dir = DirStorage::new(path).map_err(|e| Error::io(format!("opening directory {}", path.display()), e))?;
    Ok(Arc::new(dir))
}
