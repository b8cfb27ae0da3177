//! tsumiki: an embeddable transactional key-value storage engine for many-core machines
//! and flash storage.
//!
//! Open a database with [`Db::create`] (or [`Db::open`] for one that must exist), run
//! transactions with [`Db::run`] (retried on conflicts), [`Db::begin`] ([`Txn`]) or
//! [`Db::view`] (read-only, always finishes), and pick the concurrency-control protocol,
//! logging and cache with [`Options`].
//!
//! ```
//! use tsumiki::{Db, Options};
//!
//! let dir = tempfile::tempdir().unwrap();
//! let db = Db::create(dir.path().join("db"), Options::default()).unwrap();
//! db.run(|txn| {
//!     txn.put("apple", "red")?;
//!     txn.put("banana", "yellow")
//! })
//! .unwrap();
//! let fruits = db.view(|r| r.prefix("b").map(|row| row.map(|(k, _)| k)).collect::<Result<Vec<_>, _>>()).unwrap();
//! assert_eq!(fruits, [b"banana"]);
//! ```
//!
//! The engine is built from five research papers (see `docs/design.md`); its layers are
//! public for the benchmarks and tests but hidden from these docs: the 4 KiB block with
//! its multiplexed trailer (`block`, paper 004), the lock-free Bw-tree (`index`, paper
//! 002), the protocols behind one trait (`cc`), MVCC-SI's garbage collectors (`mvcc`,
//! paper 000), P-WAL, the shared WAL and recovery (`wal`, papers 001, 003, 004), the page
//! store (`store`) and the engine generic over a protocol (`db`).
#![warn(missing_docs)]
// `unsafe` only where lock-free code or a system call needs it: each such module or item
// says so with its own `#[allow(unsafe_code)]`, and every block carries a `// SAFETY:`
// comment (clippy, `-D warnings` in CI).
#![deny(unsafe_code)]
#![warn(clippy::undocumented_unsafe_blocks)]

// The README's Rust examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeExamples;

pub(crate) mod background;
#[doc(hidden)]
pub mod block;
// Lock-free records and value cells (epoch-reclaimed), raw record pointers in write sets.
#[allow(unsafe_code)]
#[doc(hidden)]
pub mod cc;
#[doc(hidden)]
pub mod db;
pub(crate) mod decode;
pub mod error;
#[doc(hidden)]
pub mod index;
pub mod limits;
#[doc(hidden)]
pub mod mvcc;
mod names;
#[cfg(feature = "test-plants")]
pub mod plants;
#[cfg(not(feature = "test-plants"))]
pub(crate) mod plants;
pub(crate) mod prefetch;
#[doc(hidden)]
pub mod storage;
// A small-block allocator on huge pages: raw memory. Public (hidden) for the memory tests'
// `slab::observe`.
#[allow(unsafe_code)]
#[doc(hidden)]
pub mod slab;
#[doc(hidden)]
pub mod store;
#[doc(hidden)]
pub mod wal;

pub use cc::SnapshotStats;
pub use db::{
    CacheStats, Cc, Db, KeyRange, LockWait, OpenOptions, Options, OwnedReadTxn, OwnedTxn, ReadTxn, Resolved, Row,
    RowRef, Scan, Txn, DEFAULT_CACHE_BYTES,
};
pub use error::{Conflict, Corruption, Error, ErrorKind, Poison, MAX_TXN_BYTES, MAX_VALUE_LEN};
pub use index::MAX_KEY_LEN;
pub use mvcc::{Gc, GcStats};
pub use store::budget::CacheBudget;
pub use store::check::{check, CheckReport, Finding, Severity};
pub use store::inspect::{inspect, FileReport, Inspection};
pub use store::pages::StoreStats;
pub use store::StoreOptions;
// The page store's decoders, for the fuzz tests (`tests/corruption.rs`).
#[doc(hidden)]
pub use store::pages::fuzz as page_fuzz;
pub use wal::recovery::RecoveryStats;
pub use wal::{CommitMode, CommitTicket, Device, Durability, LogMode, LogOptions, Release, WalStats};
