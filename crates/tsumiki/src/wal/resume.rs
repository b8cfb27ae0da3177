//! A generation resumed at open: the lanes of a generation whose logs a close kept (each
//! lane's last block a kept end, [`FLAG_KEPT_END`]) append after their last blocks, where
//! an open would otherwise replay them into the pages and start a new generation. A
//! short-lived handle's open, one commit and close then write two log blocks, each synced
//! once, not a checkpoint and a new log.

use super::*;
use recovery::LaneEnd;

impl Wal {
    /// Resumes the current generation's lanes (every one, `0..n`, in order) after the
    /// kept ends recovery found: workers take them before making new lanes. Their records
    /// are read back from the files by the generation's checkpoint (no copy of them is in
    /// memory). The commit timestamps logged from now on are raised above every order in
    /// `ends`, so that recovery's merge keeps each key's writes of this process after
    /// those of the earlier ones. The master record already says the logs are to be
    /// replayed (the process that started them wrote it).
    pub(crate) fn resume(&self, ends: &[LaneEnd]) -> Result<(), Error> {
        let gen = self.generation();
        let mut lanes = Vec::with_capacity(ends.len());
        // What recovery would read: the checkpoint pacing counts it as this generation's.
        let mut logged = 0;
        for (i, end) in ends.iter().enumerate() {
            if usize::from(end.lane) != i || end.ended || !end.kept {
                // (`store::kept_logs` resumes only such lanes.)
                return Err(Error::Corrupt(
                    format!("lane {} of generation {gen} cannot take more commits", end.lane).into(),
                ));
            }
            let name = format::segment_name(gen, end.lane, end.seg);
            let file = self.storage.open(&name, false).map_err(|e| Error::io(format!("opening {name}"), e))?;
            if self.direct_writes() {
                file.set_direct();
            }
            // A kept end that carries no records is written over by the lane's next block
            // (the one exception to "a synced block is never written again"): a close then
            // adds one block to the log, not two, and a short-lived handle's log reaches
            // the size whose close writes the pages half as often. A write torn there
            // leaves the blocks before it whole and no kept end: the next open recovers
            // them as after any crash, and what the torn block held was not acknowledged.
            let empty = end.last_used == 0 || self.plants.overwrite_kept_end_with_records;
            let (off, seq, last_partial) = match end.before_last_partial {
                Some(before_partial) if empty => (end.off - BLOCK as u64, end.seq - 1, before_partial),
                _ => (end.off, end.seq, usize::from(end.last_used) < PAYLOAD),
            };
            logged += u64::from(seq) * BLOCK as u64;
            let io = LaneIo {
                gen,
                file: Some(file),
                seg: end.seg,
                off,
                seq,
                all_synced: true,
                out: Vec::new(),
                next: self.prepared_ahead(gen, end.lane, end.seg + 1),
                tail: None,
                last_partial,
                kept_end: true,
                echo: None,
            };
            lanes.push(self.make_lane(end.lane, io));
        }
        let floor = ends.iter().map(|e| e.max_order).max().unwrap_or(0).saturating_add(1);
        if !self.plants.resume_without_order_floor {
            self.order_floor.store(floor, Ordering::Relaxed);
        }
        self.next_lsn.fetch_max(floor, Ordering::SeqCst);
        self.grown.fetch_add(logged, Ordering::Relaxed);
        *self.lanes.write() = lanes.clone();
        lanes.reverse();
        *self.resumed.lock() = lanes;
        Ok(())
    }

    /// Segment `seg` of `lane` in `gen` if an earlier process prepared it ahead of use
    /// (under its name: at its full length, its header synced), so that it is not made
    /// again (a zero-fill and three syncs at every resumed open).
    fn prepared_ahead(&self, gen: u64, lane: u16, seg: u64) -> Option<segments::Prepared> {
        let name = format::segment_name(gen, lane, seg);
        let file = self.storage.open(&name, false).ok()?;
        if file.len().ok()? != format::segment_len(seg, self.opts.segment_size)
            || !recovery::has_header(&*file, gen, lane, seg).ok()?
        {
            return None;
        }
        if self.direct_writes() {
            file.set_direct();
        }
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        tx.send(Ok(file)).ok()?;
        Some(rx)
    }

    /// Marks every lane's last block as a kept end, written with the lane's pending
    /// records and synced (a close that keeps the logs; a lane whose last block is one
    /// already is left as it is), and waits for segments being prepared.
    pub(crate) fn keep_lanes(&self) -> Result<(), Error> {
        // Not joined first: that would drop a segment prepared ahead, which the kept end's
        // write would then prepare again.
        let lanes: Vec<Arc<Lane>> = self.lanes.read().clone();
        for lane in &lanes {
            let (mut io, taken) = self.take_all(lane);
            let (buf, ends, appended, horizon) = taken;
            if buf.is_empty() && io.kept_end && lane.synced.load(Ordering::Acquire) >= appended {
                continue;
            }
            self.write_taken(lane, &mut io, buf, ends, appended, horizon, true, End::Kept, true)?;
        }
        self.join_preparations();
        Ok(())
    }

    /// Records this process appended in the current generation.
    pub(crate) fn generation_records(&self) -> u64 {
        self.stats().records.saturating_sub(self.records_at_switch.load(Ordering::Relaxed))
    }
}
