//! Generations and checkpoint pacing: when a checkpoint is due (log volume, time, the
//! store's size), committers held back while the log runs ahead, the switch of every lane
//! to a new generation, and the lanes' ends.

use super::*;

/// A checkpoint is due once the log since the last one is this many times the size of the
/// bytes it wrote to the page store (or `checkpoint_bytes`, if more): this bounds a
/// checkpoint's cost to a fraction of the log's own writes.
const CHECKPOINT_GROWTH: u64 = 4;

/// ... but never later than when the log since the last checkpoint reaches the page
/// store's live bytes divided by this (or [`LOG_FLOOR`], if more). The logs on disk are
/// the current generation, the one a running checkpoint still needs and the segments kept
/// for reuse (at most one generation, see [`Wal::retire`]), each held to 1.5 times the
/// limit by [`Wal::throttle`], so they stay near a quarter of the page store's live bytes
/// (0.21-0.28x the data measured over ten minutes of overwrites; 0.40-0.52x with an
/// eighth): without the cap a steady overwrite of 104 MB kept 544 MB of logs beside 117
/// MB of pages, since each checkpoint rewrote enough pages to push the next one four
/// times as far.
const LOG_SHARE: u64 = 16;

/// The log since the last checkpoint that makes the next one due: `limit`
/// (`checkpoint_bytes`), or [`CHECKPOINT_GROWTH`] times what the last one wrote if more; but
/// no more than a [`LOG_SHARE`] of the store's live bytes nor than `cap` (the checkpoint's
/// memory), neither of which goes under [`LOG_FLOOR`].
pub(super) fn checkpoint_limit(limit: u64, last_written: u64, store_live: u64, cap: u64) -> u64 {
    let by_cost = limit.max(last_written.saturating_mul(CHECKPOINT_GROWTH));
    let floor = LOG_FLOOR.min(limit);
    let by_space = floor.max(store_live / LOG_SHARE);
    let by_memory = floor.max(cap);
    by_cost.min(by_space).min(by_memory)
}

/// The log a generation may always reach, whatever the data's size (or
/// `checkpoint_bytes`, if less): a small database still checkpoints rarely, and its logs
/// are a few MiB at most.
pub(super) const LOG_FLOOR: u64 = 8 << 20;

/// Committers wait once the log since the last checkpoint reaches this many halves of
/// what makes one due (see [`Wal::throttle`]).
const LOG_STALL_HALVES: u64 = 3;

/// The longest a committer waits in [`Wal::throttle`].
const MAX_STALL: Duration = Duration::from_secs(1);

/// When checkpoints are due, as the store sets it (`StoreOptions`' fields of the same
/// names): the log asks it to pace committers and to tell the store's background thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pacing {
    /// Log bytes since the last checkpoint that make the next one due (see
    /// [`checkpoint_limit`]; 0: never by volume).
    pub(crate) checkpoint_bytes: u64,
    /// Time after which any log since the last checkpoint makes one due (zero: never by
    /// time).
    pub(crate) checkpoint_interval: Duration,
}

impl Wal {
    /// Whether enough log was written since the last checkpoint to take one.
    pub(crate) fn checkpoint_due(&self) -> bool {
        let limit = self.pacing.checkpoint_bytes;
        limit > 0 && self.opts.device == Device::File && self.log_since_checkpoint() >= self.checkpoint_limit()
    }

    /// Log bytes written since the last checkpoint's switch (with a resumed generation's
    /// earlier logs): what recovery would read back.
    pub(crate) fn log_since_checkpoint(&self) -> u64 {
        self.grown.load(Ordering::Relaxed).saturating_sub(self.checkpoint_base.load(Ordering::Relaxed))
    }

    /// Holds a committer back, after its commit (no slot, no lock, no epoch held), while
    /// the log since the last checkpoint is at least [`LOG_STALL_HALVES`] halves of what
    /// makes one due: commits outpaced checkpoints, and the logs on disk would grow with the lead
    /// (a 600 s buffered overwrite of 1M keys had generations of 20-29 MB against a limit
    /// of 8 MiB, the directory at 2.34x the data). While a checkpoint runs, the log may
    /// also grow as large as the generation it applies: after one big transaction (1M
    /// records, 180 MB of log) the next thousand-record commits waited up to a second each
    /// for its checkpoint, yet the logs on disk stay within twice the larger generation.
    /// The next checkpoint's switch ends the wait. Never under P-WAL with NLR group commit,
    /// whose committers may hold locks past their commit that a checkpoint waits for; never
    /// past [`MAX_STALL`] in one call.
    pub(crate) fn throttle(&self) {
        if self.pacing.checkpoint_bytes == 0
            || self.opts.device != Device::File
            || self.holds_locks()
            || self.plants.no_throttle
        {
            return;
        }
        let over = || {
            let stall = self.checkpoint_limit().saturating_mul(LOG_STALL_HALVES) / 2;
            self.log_since_checkpoint() >= stall.max(self.checkpointing.load(Ordering::Relaxed))
        };
        if !over() {
            return;
        }
        let start = Instant::now();
        self.stalls.fetch_add(1, Ordering::Relaxed);
        while over() && start.elapsed() < MAX_STALL && self.check().is_ok() {
            std::thread::sleep(Duration::from_micros(200));
        }
        self.stall_micros.fetch_add(start.elapsed().as_micros() as u64, Ordering::Relaxed);
    }

    /// The log since the last checkpoint that makes the next one due: [`checkpoint_limit`]
    /// over this log's settings and counters.
    fn checkpoint_limit(&self) -> u64 {
        checkpoint_limit(
            self.pacing.checkpoint_bytes,
            self.checkpoint_written.load(Ordering::Relaxed),
            self.store_live.load(Ordering::Relaxed),
            self.generation_cap.load(Ordering::Relaxed),
        )
    }

    /// Whether [`Pacing::checkpoint_interval`] has passed since the last checkpoint and
    /// some log was written since (asked by the background thread's poll, not per commit).
    pub(crate) fn checkpoint_due_by_time(&self) -> bool {
        let every = self.pacing.checkpoint_interval;
        !every.is_zero()
            && self.opts.device == Device::File
            && self.log_since_checkpoint() > 0
            && self.checkpoint_time.lock().elapsed() >= every
    }

    /// The generation commits log into now (stable while a commit is between its log
    /// append and its install: checkpoints wait for those).
    #[inline]
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Moves every lane to generation `g` (a checkpoint). The caller guarantees that no
    /// commit is between its append and the end of its install. Each lane's pending
    /// records are written and synced into its current generation, whose last block says
    /// the lane ends there; then the lane's first block in `g` makes its watermark
    /// durable, as a new lane's does.
    pub(crate) fn switch_generation(&self, g: u64) -> Result<(), Error> {
        let _creating = self.create_lane.lock();
        let mut echoes = recovery::Echoes::new();
        let ended = self.generation.load(Ordering::Acquire);
        let lanes = self.end_lanes(|lane, io| {
            if let Some(copy) = io.echo.take() {
                echoes.insert(lane.id, copy);
            }
            io.echo = self.fresh_echo();
            io.file = None;
            io.gen = g;
            io.seg = 0;
            io.off = 0;
            io.seq = 0;
            io.all_synced = true;
            io.last_partial = false;
            io.kept_end = false;
        })?;
        self.generation.store(g, Ordering::Release);
        self.records_at_switch.store(self.stats().records, Ordering::Relaxed);
        // A copy not taken (a checkpoint that failed before reading it) goes.
        let (_, untaken) = self.replace_echoes((ended, echoes));
        self.recycle_echoes(untaken);
        for lane in &lanes {
            // Synced whatever the durability (see `new_lane`).
            self.flush_lane_as(lane, true, true)?;
        }
        // Before the checkpoint lets commits into `g`.
        self.register_lanes(g, lanes.len() as u32)?;
        let grown = self.grown.load(Ordering::Relaxed);
        let ended_bytes = grown.saturating_sub(self.checkpoint_base.swap(grown, Ordering::Relaxed));
        self.checkpointing.store(ended_bytes, Ordering::Relaxed);
        *self.checkpoint_time.lock() = std::time::Instant::now();
        Ok(())
    }

    /// Writes generation `g`'s lane registry (lanes `0..count`). A failure poisons the log.
    pub(super) fn register_lanes(&self, g: u64, count: u32) -> Result<(), Error> {
        recovery::write_registry(&*self.storage, g, count).map_err(|e| {
            self.poison(Poison::caused_by(&format!("writing the lane registry of generation {g} failed"), &e))
        })
    }

    /// Writes and syncs every lane's pending records, the last block marked as the lane's
    /// end in its generation ([`FLAG_LANE_END`]: a checkpoint's switch, or a close, after
    /// which the generation's logs are read back as closed lanes), then hands each lane's
    /// file side to `then`. No commit may be between its append and its install.
    fn end_lanes(&self, mut then: impl FnMut(&Lane, &mut LaneIo)) -> Result<Vec<Arc<Lane>>, Error> {
        // A segment prepared ahead stays for the end block to go into: waited for and
        // dropped first, it was prepared again, synchronously, whenever that block began
        // a segment (and left unused otherwise, as it is now).
        let lanes: Vec<Arc<Lane>> = self.lanes.read().clone();
        for lane in &lanes {
            let (mut io, taken) = self.take_all(lane);
            let (buf, ends, appended, horizon) = taken;
            // Forced and synced, whatever the durability: the lane's end is durable.
            self.write_taken(lane, &mut io, buf, ends, appended, horizon, true, End::Lane, true)?;
            // A segment prepared ahead that the end block did not take: no thread outlives
            // the lane.
            if let Some(p) = io.next.take() {
                let _ = segments::wait(p);
            }
            then(lane, &mut io);
        }
        Ok(lanes)
    }

    /// Locks `lane`'s file side and takes everything pending in it, in the lock orders of
    /// `flush_held` (shared lane) and `flush_locked` (P-WAL).
    #[allow(clippy::type_complexity)]
    pub(super) fn take_all<'l>(
        &self,
        lane: &'l Lane,
    ) -> (parking_lot::MutexGuard<'l, LaneIo>, (Vec<u8>, Vec<(usize, u64)>, u64, u64)) {
        if lane.serialize {
            let mut p = lane.pending.lock();
            let io = lane.io.lock();
            let taken = self.take(&mut p);
            (io, taken)
        } else {
            let io = lane.io.lock();
            let taken = self.take(&mut lane.pending.lock());
            (io, taken)
        }
    }

    /// Ends every lane (see [`end_lanes`](Self::end_lanes)) at close, so that the close's
    /// read of the logs can tell a lost block from the lane's end.
    pub(crate) fn close_lanes(&self) -> Result<(), Error> {
        self.end_lanes(|_, _| {}).map(|_| ())
    }

    /// Deletes the segments kept for reuse once no checkpoint came for
    /// [`Pacing::checkpoint_interval`] (60 s if that is zero): a database gone idle
    /// keeps no log it is not using.
    pub(crate) fn release_idle_segments(&self) {
        let every = match self.pacing.checkpoint_interval {
            d if d.is_zero() => Duration::from_secs(60),
            d => d,
        };
        if self.checkpoint_time.lock().elapsed() < every {
            return;
        }
        let idle: Vec<(String, u64)> = self.recycled.free.lock().drain(..).collect();
        // A file that cannot be removed now is removed at close or the next open.
        for (n, _) in idle {
            let _ = self.remove_obsolete(&n);
        }
    }

    /// Counts a completed checkpoint, which wrote `written` bytes to the page store and
    /// left `live` bytes of images there.
    pub(crate) fn note_checkpoint(&self, written: u64, live: u64) {
        self.checkpoints.fetch_add(1, Ordering::Relaxed);
        self.checkpointing.store(0, Ordering::Relaxed);
        self.checkpoint_written.store(written, Ordering::Relaxed);
        self.note_store_live(live);
    }

    /// Caps the log of one generation at `bytes` (but never under [`LOG_FLOOR`]): its
    /// checkpoint lists every write the generation logged, and that list must stay a
    /// small part of the cache.
    pub(crate) fn set_generation_cap(&self, bytes: u64) {
        self.generation_cap.store(bytes, Ordering::Relaxed);
    }

    /// The page store's live bytes (at open, and after each checkpoint).
    pub(crate) fn note_store_live(&self, live: u64) {
        self.store_live.store(live, Ordering::Relaxed);
    }

    /// Forgets the log written so far for [`checkpoint_due`](Self::checkpoint_due) (after a
    /// checkpoint that failed: the next try waits for as much log again).
    pub(crate) fn postpone_checkpoint(&self) {
        self.checkpointing.store(0, Ordering::Relaxed);
        self.checkpoint_base.store(self.grown.load(Ordering::Relaxed), Ordering::Relaxed);
    }

    /// Writes and syncs every lane (a checkpoint, after its page writes: every value the
    /// pages hold is then in a durable record). The lanes' next segments, prepared in the
    /// background, are not waited for: they hold nothing yet. (Waiting for them held each
    /// lane's lock for the preparation's zero-fill and syncs: 30-60 ms per checkpoint
    /// with every committer of the lane stopped, at several checkpoints a second.)
    pub(crate) fn flush_all(&self) -> Result<(), Error> {
        let lanes: Vec<Arc<Lane>> = self.lanes.read().clone();
        for l in lanes {
            self.make_durable(&l)?;
        }
        Ok(())
    }
}
