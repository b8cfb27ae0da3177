//! The databases `bench fill` compares, each through its own library and each with its own
//! setting for "durable when the commit returns". One file per peer; LevelDB and RocksDB
//! share one adapter over their (nearly identical) C APIs.

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
}

impl FillConfig {
    /// Transactions in the whole fill.
    pub fn txns(&self) -> u64 {
        self.records.div_ceil(self.per_txn as u64)
    }
}

/// One transaction's records: 4-byte keys and their fixed-size values, side by side.
pub struct Batch<'a> {
    pub keys: &'a [[u8; 4]],
    pub values: &'a [u8],
    pub value_size: usize,
}

impl<'a> Batch<'a> {
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
    /// Writes the batch as one transaction; durable when this returns if `cfg.sync`.
    fn write_batch(&mut self, batch: &Batch<'_>) -> Result<(), String>;
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

/// Formats any library error as the benchmark's error string.
pub fn err<E: std::fmt::Display>(what: &'static str) -> impl Fn(E) -> String {
    move |e| format!("{what}: {e}")
}
