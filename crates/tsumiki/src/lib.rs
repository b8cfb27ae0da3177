//! tsumiki: an embeddable transactional key-value storage engine for many-core machines
//! and flash storage.
//!
//! The engine is built from five research papers (see `docs/design.md`). This crate holds:
//! - [`error`]: the one error type;
//! - [`block`]: the 4 KiB block with its 40-byte multiplexed trailer (paper 004);
//! - [`index`]: a lock-free Bw-tree (paper 002), usable on its own as a concurrent ordered map;
//! - [`cc`]: the concurrency-control protocols (TicToc, Silo, 2PL, MVCC-SI) behind one trait;
//! - [`mvcc`]: MVCC-SI's version garbage collectors (AOT, EPO, EPO-R; paper 000);
//! - [`wal`]: P-WAL and the shared WAL, commit variants, crash recovery (papers 001, 003,
//!   and 004's log multiplexing);
//! - [`db`]: the public API, [`Db`], [`Txn`], [`Options`].
#![warn(missing_docs)]

pub mod block;
pub mod cc;
pub mod db;
pub mod error;
pub mod index;
pub mod mvcc;
pub(crate) mod store;
pub mod wal;

pub use db::{CacheStats, Cc, Db, LockWait, Options, Scan, Txn, DEFAULT_CACHE_BYTES};
pub use error::{Conflict, Error};
pub use mvcc::Gc;
pub use store::inspect::{inspect, FileReport, Inspection};
pub use store::pages::StoreStats;
pub use wal::{CommitMode, CommitTicket, Device, Durability, LogMode, LogOptions, Release};
