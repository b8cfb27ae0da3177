//! A bulk load (`Db::bulk_load`): records sorted by key, above every stored key, written
//! as pages by the store (`store::Durable::bulk_load`, nothing through the log or the
//! index), and the key range they fill marked not in memory, to load a page at a time as
//! transactions use it (as after an open).

use super::*;
use crate::store::pages::Appended;

impl<P: Protocol> Engine<P> {
    /// Whether a bulk load goes straight to the pages: a database with files whose key
    /// ranges load as they are used (otherwise every record is in memory, and a bulk load
    /// is one transaction).
    pub(crate) fn bulk_loads_pages(&self) -> bool {
        self.durable.is_some() && self.residency.is_some()
    }

    /// See `Db::bulk_load`. The caller holds the database exclusively: no transaction
    /// runs, nor starts before this returns.
    pub(crate) fn bulk_load<I>(&self, records: I) -> Result<u64, Error>
    where
        I: Iterator<Item = Result<(Vec<u8>, Vec<u8>), Error>>,
    {
        if self.read_only {
            return Err(Error::ReadOnly);
        }
        let (Some(d), Some(r)) = (&self.durable, &self.residency) else {
            return Err(Error::Config("a bulk load into pages needs a database with files".into()));
        };
        self.install_lock_waiter();
        // No checkpoint beside it (the checkpoint thread's takes this lock too).
        let _one = self.checkpointing.lock();
        let slot = self.checkpoint_slot.get_or_init(|| self.new_slot()).clone();
        self.enter(&slot);
        let loaded = d
            .bulk_load(|switch| self.exclusive_reads(switch), self, records)
            .and_then(|a| self.forget_appended(&slot.worker, d, r, &a).map(|()| a.records));
        self.leave(&slot);
        crate::cc::set_lock_waiter(None);
        loaded
    }

    /// After a bulk load made durable: the key ranges from its first key on leave memory
    /// (in the index they hold at most deleted records not yet unlinked, which the pages
    /// do not have and a load would otherwise keep in place of the new values), and are cut
    /// at the new pages' low keys, so that each loads one page at a time.
    fn forget_appended(&self, worker: &P::Worker, d: &Durable, r: &Residency, a: &Appended) -> Result<(), Error> {
        let Some(first) = a.first.as_deref() else { return Ok(()) };
        // Cut points out of order would make a range map out of order (reads that miss
        // loaded keys, scans that never end): refused, as a bug.
        if !a.lows.windows(2).all(|w| w[0] < w[1]) {
            return Err(Error::Corrupt("a bulk load's pages do not ascend from its first key".into()));
        }
        self.proto.add_count(a.records);
        let guard = &epoch::pin();
        let mut clock = r.lock.lock();
        let (range, _) = r.ranges_from(first, guard).swap_remove(0);
        if range.low() < first {
            r.split(&mut clock, &range, &[first.to_vec()], 1.0, guard);
        }
        while let Some((range, high)) = r.ranges_from(first, guard).into_iter().find(|(x, _)| x.is_loaded()) {
            let low = range.low().to_vec();
            self.evict_range(worker, r, &mut clock, &range, &low, high.as_deref(), d.covered(), guard);
            if range.is_loaded() {
                // Nothing can hold a record while no transaction runs: a bug if it does.
                return Err(Error::Corrupt(
                    "a bulk load could not take the records in memory past its first key out of the index".into(),
                ));
            }
        }
        for (range, high) in r.ranges_from(first, guard) {
            // The lows strictly inside the range (they ascend: checked above).
            let from = a.lows.partition_point(|l| l.as_slice() <= range.low());
            let to = high.map_or(a.lows.len(), |h| a.lows.partition_point(|l| *l < h));
            if from < to {
                r.split(&mut clock, &range, &a.lows[from..to], 0.0, guard);
            }
        }
        Ok(())
    }
}
