//! The settings of a database ([`Options`], the protocol [`Cc`]) and what they resolve to,
//! once ([`Resolved`]).

use super::*;

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
    /// Refuse every write ([`Error::ReadOnly`]: commits with writes, checkpoints);
    /// [`Db::open`] and [`Db::create`] then both require the database to exist
    /// ([`Error::NotFound`] otherwise). Such an open writes nothing at all: its files are
    /// opened `O_RDONLY` (a read-only mount, or files the process may not write, open
    /// too), the directory's lock is taken shared (read-only opens share it; a writer's
    /// excludes them, and theirs a writer: [`Error::Locked`]), a crash's logs are replayed
    /// into memory only (every record then loads at open), and no background thread
    /// starts. A later read-write open recovers the same state from the same files.
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
