//! The log's options (`LogOptions` and its enums) and the commit policy they resolve to
//! (`CommitMode`), once per database: how commits reach the log.

use std::time::Duration;

use super::format::BLOCK;
use crate::error::Error;

/// Where commit records go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogMode {
    /// P-WAL: a log buffer and a log file per worker (the default).
    #[default]
    PWal,
    /// One shared log buffer under a lock and one file (the conventional baseline).
    SWal,
    /// No log: nothing survives the process.
    None,
}

crate::names::option_names!(LogMode, "log mode", { PWal => "pwal" | "p-wal", SWal => "swal" | "s-wal", None => "none" });

/// When a committing transaction releases its locks relative to its log flush.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Release {
    /// No early lock release: flush, then install and release (the default).
    #[default]
    Nlr,
    /// Early lock release: install and release, then flush and wait for the LSN to be
    /// durable on every lane.
    Elr,
}

crate::names::option_names!(Release, "lock release", { Nlr => "nlr", Elr => "elr" });

/// What "committed" promises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// Durable on the device (fdatasync) before `commit` returns (the default).
    #[default]
    Sync,
    /// Handed to the operating system: survives a process crash, not a power loss.
    Buffered,
    /// Buffered in memory and written in large batches: a crash loses recent commits.
    None,
}

crate::names::option_names!(Durability, "durability", { Sync => "sync", Buffered => "buffered", None => "none" });

/// The device log files live on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Device {
    /// Real files with fdatasync (the default).
    #[default]
    File,
    /// NVM emulation (paper 001): a fixed latency per write, no sync, nothing kept.
    Nvm(Duration),
}

/// Logging settings of a database opened with a path ([`crate::Db::open`]). When
/// checkpoints are taken is the store's ([`crate::StoreOptions`]).
#[derive(Debug, Clone)]
pub struct LogOptions {
    /// P-WAL, shared WAL, or none.
    pub mode: LogMode,
    /// NLR or ELR.
    pub release: Release,
    /// Group commit: records per flush (1, the default: none). Paper 001 uses 16 with ELR;
    /// P-WAL with NLR takes only 1.
    pub group: usize,
    /// Group commit: the longest a pending record waits for its group.
    pub max_wait: Duration,
    /// What a commit promises.
    pub durability: Durability,
    /// Real files or NVM emulation.
    pub device: Device,
    /// The largest log segment in bytes (a multiple of 4 KiB, at least 8 KiB; 1 MiB by
    /// default). A lane's first segment is 64 KiB and each next one doubles up to this, so
    /// an idle database stays small; segments are preallocated so that a commit's
    /// fdatasync never also commits a size change (a lane holds at most one segment
    /// beyond what it wrote: larger ones kept a generation's logs at twice their use).
    pub segment_size: u64,
    /// NLR only: order commit records by an LSN from the shared counter (paper 003's
    /// P-WAL, whose CAS misses are counted) rather than by the protocol's commit timestamp
    /// (paper 001: no shared counter).
    pub lsn_order: bool,
    /// Log segments are written with direct I/O (`O_DIRECT`, bypassing the OS page cache)
    /// when every write is synced at once (`Durability::Sync` on real files) and the file
    /// system allows it; true by default. The fdatasync of a commit then only flushes the
    /// device, with no page to write back: 70 us instead of 82 per 4 KiB block here.
    pub direct_io: bool,
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            mode: LogMode::PWal,
            release: Release::Nlr,
            group: 1,
            max_wait: Duration::from_micros(200),
            durability: Durability::Sync,
            device: Device::File,
            segment_size: 1 << 20,
            lsn_order: false,
            direct_io: true,
        }
    }
}

impl LogOptions {
    /// Checks the settings.
    pub fn validate(&self) -> Result<(), Error> {
        let s = self.segment_size;
        if s < 2 * BLOCK as u64 || !s.is_multiple_of(BLOCK as u64) {
            return Err(Error::Config(format!("segment_size {s} must be a multiple of 4096 and at least 8192")));
        }
        if self.group == 0 {
            return Err(Error::Config("group must be at least 1".into()));
        }
        Ok(())
    }

    /// The variant's short name (`pwal-nlr`, `pwal-elr-g16`, `swal-elr`...).
    pub fn name(&self) -> String {
        let mode = match self.mode {
            LogMode::PWal => "pwal",
            LogMode::SWal => "swal",
            LogMode::None => return "none".into(),
        };
        let rel = match self.release {
            Release::Nlr => "nlr",
            Release::Elr => "elr",
        };
        if self.group > 1 {
            format!("{mode}-{rel}-g{}", self.group)
        } else {
            format!("{mode}-{rel}")
        }
    }
}

/// How commits reach the log: [`LogOptions`] checked and resolved against what the
/// protocol can do, once, before anything is created on disk ([`crate::Options::validate`]).
/// The library and the benchmarks use this one value, so that they agree on which
/// variants exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommitMode {
    /// P-WAL, shared WAL or none.
    pub mode: LogMode,
    /// NLR or ELR.
    pub release: Release,
    /// Records per flush.
    pub group: usize,
    /// Paper 001's Algorithm 3 (P-WAL, NLR, group above 1): commits keep their write locks
    /// until their group is durable, which only protocols that can hold locks (TicToc,
    /// 2PL) support.
    pub holds_locks: bool,
    /// What a commit promises.
    pub durability: Durability,
}

impl CommitMode {
    /// Whether commits are logged at all.
    #[inline]
    pub fn logs(&self) -> bool {
        self.mode != LogMode::None
    }

    /// P-WAL: each worker appends to a lane of its own.
    #[inline]
    pub fn private_lanes(&self) -> bool {
        self.mode == LogMode::PWal
    }

    /// The single shared WAL: appends are serialized on one lane.
    #[inline]
    pub fn serialized(&self) -> bool {
        self.mode == LogMode::SWal
    }

    /// Early lock release: locks go before the record is durable.
    #[inline]
    pub fn elr(&self) -> bool {
        self.release == Release::Elr
    }

    /// No early lock release: a commit's record is durable before its writes are visible.
    #[inline]
    pub fn nlr(&self) -> bool {
        self.release == Release::Nlr
    }

    /// NLR without held locks (paper 001's Algorithm 2): each commit flushes its own
    /// record before it installs, so a transaction's own durability applies
    /// ([`crate::Txn::set_durability`]).
    #[inline]
    pub fn flushes_each_commit(&self) -> bool {
        self.nlr() && !self.holds_locks
    }

    /// A commit waits for an fdatasync of its record.
    #[inline]
    pub fn syncs(&self) -> bool {
        self.durability == Durability::Sync
    }

    /// Commits are flushed to the files as they come (synced or not); with
    /// `Durability::None` they wait in memory for large batches.
    #[inline]
    pub fn flushes(&self) -> bool {
        self.durability != Durability::None
    }

    /// Resolves `log` for a protocol named `protocol` that can (or cannot) keep write locks
    /// across its commit.
    pub fn resolve(log: &LogOptions, protocol: &str, can_hold_locks: bool) -> Result<CommitMode, Error> {
        log.validate()?;
        // Paper 001's Algorithm 3, decided here once: every other place asks `holds_locks`.
        let holds_locks = log.mode == LogMode::PWal && log.release == Release::Nlr && log.group > 1;
        if holds_locks && !can_hold_locks {
            return Err(Error::Config(format!(
                "P-WAL with NLR and group commit (paper 001, Algorithm 3) holds locks across commits, which {protocol} cannot do: use group 1, ELR, TicToc or 2PL"
            )));
        }
        Ok(CommitMode {
            mode: log.mode,
            release: log.release,
            group: log.group,
            holds_locks,
            durability: log.durability,
        })
    }
}
