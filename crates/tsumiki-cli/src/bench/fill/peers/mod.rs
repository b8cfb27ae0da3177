//! The databases `bench fill` and `bench kv` compare, each through its own library and each
//! with its own setting for "durable when the commit returns". One file per peer; LevelDB
//! and RocksDB share one adapter over their (nearly identical) C APIs. [`FillEngine`] is
//! what a fill needs (open, write, get, close); [`KvEngine`] adds what `bench kv` (redb's
//! engine comparison) needs: reads from many threads, scans, counts, removals, compaction.
//! Both are implemented in each peer's one file, over the same opening code.

use std::path::Path;

#[cfg(any(have_leveldb, have_rocksdb))]
pub mod c_kv;
#[cfg(feature = "peers")]
pub mod fjall;
#[cfg(feature = "peers")]
pub mod lmdb;
pub mod raw;
#[cfg(feature = "peers")]
pub mod redb;
#[cfg(feature = "peers")]
pub mod sqlite;
pub mod tsumiki;

/// Every engine `--engine` knows, in the order they run and are reported.
pub const ENGINES: [&str; 9] =
    ["tsumiki", "leveldb", "rocksdb", "lmdb", "sqlite", "redb", "fjall", "raw", "raw-direct"];

/// Why `engine` cannot run in this build (`None`: it can).
pub fn missing(engine: &str) -> Option<String> {
    let (built, package) = match engine {
        "leveldb" => (cfg!(have_leveldb), "libleveldb-dev"),
        "rocksdb" => (cfg!(have_rocksdb), "librocksdb-dev"),
        "lmdb" | "sqlite" | "redb" | "fjall" => {
            return (!cfg!(feature = "peers"))
                .then(|| format!("{engine}: not built in; build with the default feature `peers`"));
        }
        _ => (true, ""),
    };
    (!built).then(|| format!("{engine}: not built in; install {package} and rebuild"))
}

/// The settings of one fill that an engine needs when it opens.
#[derive(Clone, Copy, Debug)]
pub struct FillConfig {
    /// Durable at every commit (each engine's own setting for it).
    pub sync: bool,
    /// Records in the whole fill.
    pub records: u64,
    /// Records per transaction.
    pub per_txn: usize,
    /// Bytes per value.
    pub value_size: usize,
    /// tsumiki's synced log written with direct I/O (`LogOptions::direct_io`).
    pub direct_io: bool,
    /// The engine's cache in bytes (`None`: its default, as `bench fill` runs them).
    pub cache_bytes: Option<usize>,
}

impl FillConfig {
    /// Transactions in the whole fill.
    pub fn txns(&self) -> u64 {
        self.records.div_ceil(self.per_txn as u64)
    }
}

/// One transaction's records: `K`-byte keys (4 in `bench fill`, 24 in `bench kv`) and their
/// fixed-size values, side by side.
pub struct Batch<'a, const K: usize = 4> {
    pub keys: &'a [[u8; K]],
    pub values: &'a [u8],
    pub value_size: usize,
}

impl<'a, const K: usize> Batch<'a, K> {
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// The records as (key, value) pairs.
    pub fn iter(&self) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + 'a {
        let (keys, values, vs) = (self.keys, self.values, self.value_size);
        (0..keys.len()).map(move |i| (&keys[i][..], &values[i * vs..(i + 1) * vs]))
    }
}

/// What `bench fill` needs of a database. The runner is generic over it, so each engine's
/// batch loop is monomorphised.
pub trait FillEngine: Sized {
    /// Opens the database in `dir` (an existing directory), creating it when empty.
    fn open(dir: &Path, cfg: &FillConfig) -> Result<Self, String>;
    /// Writes the batch as one transaction; durable when this returns if `cfg.sync` (or, in
    /// `bench kv`, the last [`KvEngine::set_durable`]).
    fn write_batch<const K: usize>(&mut self, batch: &Batch<'_, K>) -> Result<(), String>;
    /// Reads one key.
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, String>;
    /// Closes the database; what was written is on disk when this returns.
    fn close(self) -> Result<(), String>;
    /// The 4 KiB blocks the engine's commit log has written, where it counts them (tsumiki's
    /// lanes): what the commits themselves cost, apart from background writes such as
    /// zero-filled segments and checkpoints, which the device byte counts include.
    fn log_blocks(&self) -> Option<u64> {
        None
    }
}

/// What reads found: records, their value bytes, and a fold of one byte of each value (so
/// that every value is touched, not only its length).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub records: u64,
    pub bytes: u64,
    pub touched: u64,
}

impl Tally {
    /// Counts one record's value.
    #[inline]
    pub fn add(&mut self, value: &[u8]) {
        self.records += 1;
        self.bytes += value.len() as u64;
        self.touched = self.touched.wrapping_add(u64::from(value.last().copied().unwrap_or(0)));
    }

    /// Adds another tally (a thread's, a batch's).
    pub fn merge(&mut self, o: Tally) {
        self.records += o.records;
        self.bytes += o.bytes;
        self.touched = self.touched.wrapping_add(o.touched);
    }
}

/// A read handle of a [`KvEngine`], one per reading thread: created by the thread that
/// owns the engine and moved into the reader's thread (hence `Send`). Each call is one
/// read transaction (or the engine's cheapest equivalent: a batch of plain reads).
pub trait KvReader: Send {
    /// Reads every key in `keys`; the tally counts the keys found.
    fn get_each<'k>(&mut self, keys: impl Iterator<Item = &'k [u8]> + Clone) -> Result<Tally, String>;
    /// From each key in `starts`, reads the next `n` records (the key itself first, if
    /// present), touching each value.
    fn scan_each<'k>(&mut self, starts: impl Iterator<Item = &'k [u8]> + Clone, n: usize) -> Result<Tally, String>;
}

/// What `bench kv` needs beyond a fill. Writes are [`FillEngine::write_batch`], durable or
/// not by [`KvEngine::set_durable`]; every write here is one transaction, durable by the
/// current setting.
pub trait KvEngine: FillEngine {
    /// A reading thread's handle.
    type Reader<'a>: KvReader
    where
        Self: 'a;
    /// Makes the next commits durable at commit (the default after open) or not (each
    /// engine's no-sync setting). Untimed: fjall and tsumiki sync what the no-sync commits
    /// left when durability comes back.
    fn set_durable(&mut self, durable: bool) -> Result<(), String>;
    /// A read handle, one of `of` that will read at once (SQLite gives each connection
    /// its share of the cache).
    fn reader(&self, of: usize) -> Result<Self::Reader<'_>, String>;
    /// The number of records (engines that keep it answer at once; the others count).
    fn len(&mut self) -> Result<u64, String>;
    /// Removes `keys` in one transaction.
    fn remove<const K: usize>(&mut self, keys: &[[u8; K]]) -> Result<(), String>;
    /// Removes the `n` smallest (`last`: largest) records in one transaction, one at a time
    /// (redb's pop_first / pop_last; the others read the first or last record, then delete
    /// it; engines whose batches cannot read their own writes read the `n` first, then
    /// delete them). Returns how many were removed.
    fn pop(&mut self, n: usize, last: bool) -> Result<u64, String>;
    /// Removes, in one transaction, every record for which `keep` is false. Returns how
    /// many were removed.
    fn retain(&mut self, keep: impl FnMut(&[u8], &[u8]) -> bool) -> Result<u64, String>;
    /// Loads `batch`, in ascending key order, into the empty database in one durable step,
    /// by the engine's path for sorted input where it has one (tsumiki's `Db::bulk_load`,
    /// LMDB's `MDB_APPEND`, fjall's ingestion); one transaction otherwise.
    fn append_load<const K: usize>(&mut self, batch: &Batch<'_, K>) -> Result<(), String> {
        self.write_batch(batch)
    }
    /// Compacts the database in `dir` by the engine's own means and closes it.
    fn compact_and_close(self, dir: &Path) -> Result<(), String>;
}

/// Formats any library error as the benchmark's error string.
pub fn err<E: std::fmt::Display>(what: &'static str) -> impl Fn(E) -> String {
    move |e| format!("{what}: {e}")
}

/// Runs `$body` with `$E` the engine type named by `$engine` (an error for an unknown or
/// missing one): `match_engine!(name, E => body)` over every [`FillEngine`], and
/// `match_engine!(kv: name, E => body)` over the [`KvEngine`]s (all but the raw floors).
/// One list of engines, so that `bench fill` and `bench kv` cannot drift apart.
macro_rules! match_engine {
    (@arms $engine:expr, $E:ident => $body:expr; $($extra:tt)*) => {
        match $engine {
            "tsumiki" => {
                type $E = $crate::bench::fill::peers::tsumiki::Tsumiki;
                $body
            }
            #[cfg(have_leveldb)]
            "leveldb" => {
                type $E = $crate::bench::fill::peers::c_kv::LevelDb;
                $body
            }
            #[cfg(have_rocksdb)]
            "rocksdb" => {
                type $E = $crate::bench::fill::peers::c_kv::RocksDb;
                $body
            }
            #[cfg(feature = "peers")]
            "lmdb" => {
                type $E = $crate::bench::fill::peers::lmdb::Lmdb;
                $body
            }
            #[cfg(feature = "peers")]
            "sqlite" => {
                type $E = $crate::bench::fill::peers::sqlite::Sqlite;
                $body
            }
            #[cfg(feature = "peers")]
            "redb" => {
                type $E = $crate::bench::fill::peers::redb::Redb;
                $body
            }
            #[cfg(feature = "peers")]
            "fjall" => {
                type $E = $crate::bench::fill::peers::fjall::Fjall;
                $body
            }
            $($extra)*
            other => Err(format!("unknown engine {other:?}")),
        }
    };
    (kv: $engine:expr, $E:ident => $body:expr) => {
        $crate::bench::fill::peers::match_engine!(@arms $engine, $E => $body;)
    };
    ($engine:expr, $E:ident => $body:expr) => {
        $crate::bench::fill::peers::match_engine!(@arms $engine, $E => $body;
            "raw" => {
                type $E = $crate::bench::fill::peers::raw::Raw;
                $body
            }
            "raw-direct" => {
                type $E = $crate::bench::fill::peers::raw::RawDirect;
                $body
            }
        )
    };
}
pub(crate) use match_engine;

/// The engines `bench kv` runs: every [`KvEngine`], in [`ENGINES`] order.
pub const KV_ENGINES: [&str; 7] = ["tsumiki", "leveldb", "rocksdb", "lmdb", "sqlite", "redb", "fjall"];
