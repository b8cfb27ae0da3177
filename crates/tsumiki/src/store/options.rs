//! The store's options (`StoreOptions`): when checkpoints are taken, with how many helper
//! threads, and the page store's segment size.

use std::time::Duration;

use crate::block::BLOCK;
use crate::error::Error;

/// Page store and checkpoint settings of a database opened with a path ([`crate::Db::open`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreOptions {
    /// Log bytes written since the last checkpoint that make the next commit take one
    /// (64 MiB by default; 0: never while open), or four times what the last checkpoint
    /// wrote to the page store if that is more, so its cost stays under a quarter of the
    /// log volume; but never more than a sixteenth of the page store's live bytes (or
    /// 8 MiB, if more, or this, if less), so the logs on disk stay a fraction of the
    /// data. A checkpoint starts a new generation of every lane, writes the state beside
    /// it and deletes the older logs, so the logs of a running database stop growing and
    /// recovery replays only what came after it.
    pub checkpoint_bytes: u64,
    /// Time after which any log written since the last checkpoint makes the background
    /// thread take one (60 s by default; zero: never by time), so a database written
    /// slowly also keeps its logs and its recovery short. An idle database takes none.
    pub checkpoint_interval: Duration,
    /// Threads that prepare a checkpoint's pages (read their changes' values and the
    /// entries of those it consolidates) ahead of the checkpoint's own thread, which
    /// appends them in order (0, the default: that thread prepares them itself). Meant
    /// for many cores, where one checkpoint thread caps the commit rate; not yet measured
    /// there (see docs/design.md, known limits), and on two cores a helper takes its core
    /// from the committers.
    pub checkpoint_helpers: usize,
    /// The page store's segment files, in bytes (4 MiB by default; a multiple of 4 KiB, at
    /// least 8 KiB): the unit cleaning frees and reuses.
    pub page_segment_size: u64,
    /// Whether a close may keep a short log instead of writing the pages (true by
    /// default): a database of at most 1 MiB in its pages whose log since the last
    /// checkpoint is at most 128 KiB, under NLR with synced commits. The next open replays
    /// that log into memory and appends to it, so a short-lived handle (open, a commit,
    /// close) writes one log block and two master records, each synced once, instead of a
    /// checkpoint and a new log. Off: every close that follows a commit writes the pages
    /// and leaves no log (the directory holds `MASTER` and page segments only).
    pub close_keeps_short_log: bool,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            checkpoint_bytes: 64 << 20,
            checkpoint_interval: Duration::from_secs(60),
            checkpoint_helpers: 0,
            page_segment_size: 4 << 20,
            close_keeps_short_log: true,
        }
    }
}

/// The most checkpoint helper threads a database may ask for (each pass starts them).
pub const MAX_CHECKPOINT_HELPERS: usize = 64;

impl StoreOptions {
    /// Checks the settings.
    pub fn validate(&self) -> Result<(), Error> {
        let p = self.page_segment_size;
        if p < 2 * BLOCK as u64 || !p.is_multiple_of(BLOCK as u64) {
            return Err(Error::Config(format!("page_segment_size {p} must be a multiple of 4096 and at least 8192")));
        }
        if self.checkpoint_helpers > MAX_CHECKPOINT_HELPERS {
            return Err(Error::Config(format!(
                "checkpoint_helpers {} is more than {MAX_CHECKPOINT_HELPERS}",
                self.checkpoint_helpers
            )));
        }
        Ok(())
    }
}
