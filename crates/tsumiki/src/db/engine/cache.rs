//! The record cache: key ranges loaded from the pages on demand, and evicted (CLOCK) while
//! the records in memory pass the budget. Which ranges are in memory is `residency`.

use super::*;

impl<P: Protocol> Engine<P> {
    /// The record cache's counters.
    pub(crate) fn cache_stats(&self) -> Option<crate::db::CacheStats> {
        let r = self.residency.as_ref()?;
        let guard = &epoch::pin();
        let (ranges, ranges_loaded) = r.counts(guard);
        let map_bytes = r.map_bytes(guard) + self.index.stats().mapping_table_bytes;
        Some(crate::db::CacheStats {
            map_bytes,
            budget: r.budget,
            resident_bytes: r.resident(),
            ranges,
            ranges_loaded,
            loads: self.counters.ranges_loaded.load(Ordering::Relaxed),
            evictions: self.counters.ranges_evicted.load(Ordering::Relaxed),
            records_evicted: self.counters.records_evicted.load(Ordering::Relaxed),
        })
    }

    /// Whether every key range overlapping `from..=to` (`to` `None`: to the end) is in the
    /// index. If one is not, loads it and answers `false`: the caller looks again (a gap
    /// it found may have records in it now). See [`Residency`].
    #[inline]
    pub(super) fn loaded(&self, from: &[u8], to: Option<&[u8]>) -> Result<bool, Error> {
        match &self.residency {
            Some(r) if !r.all_loaded() => self.load_first_missing(r, from, to),
            _ => Ok(true),
        }
    }

    /// The load count ([`Residency::load_count`]; 0 without ranges): taken before a lookup
    /// that may find a key missing.
    #[inline]
    pub(super) fn load_count(&self) -> u64 {
        self.residency.as_ref().map_or(0, |r| r.load_count())
    }

    /// Whether a lookup made after [`load_count`](Self::load_count) said `since` still
    /// stands once its ranges were found loaded: no range came back in between (see
    /// [`Residency`]).
    #[inline]
    pub(super) fn no_load_since(&self, since: u64) -> bool {
        self.residency.as_ref().is_none_or(|r| r.no_load_since(since))
    }

    /// Test only (`Plants::lookup_pause`): waits between a lookup that found a
    /// key missing and the check of its range.
    #[inline]
    pub(super) fn pause_after_miss(&self) {
        if self.residency.as_ref().is_some_and(|r| r.lookup_pause) {
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
    }

    /// [`loaded`](Self::loaded) when some range may be missing.
    #[cold]
    pub(super) fn load_first_missing(&self, r: &Residency, from: &[u8], to: Option<&[u8]>) -> Result<bool, Error> {
        let guard = &epoch::pin();
        let Some(range) = r.first_missing(from, to, guard) else { return Ok(true) };
        let mut clock = r.lock.lock();
        if range.is_loaded() {
            return Ok(false);
        }
        let Some((low, high)) = r.bounds(range, guard) else { return Ok(false) };
        let d = self.durable.as_ref().expect("a database with ranges has files");
        let stamp = self.reload_stamp.load(Ordering::Acquire);
        let mut bytes = 0;
        let mut pending: Vec<(Vec<u8>, RecPtr<P::Record>)> = Vec::new();
        let mut loaded = d.load_range(&low, high.as_deref(), &mut |k, v| {
            pending.push((k.to_vec(), RecPtr(self.allocated(crate::cc::alloc_loaded(&self.proto, v, stamp)))));
            bytes += (k.len() + v.len() + RECORD_OVERHEAD) as i64;
            if pending.len() >= LOAD_BATCH {
                bytes -= self.insert_loaded(&mut pending)?;
            }
            Ok(())
        });
        if loaded.is_ok() {
            match self.insert_loaded(&mut pending) {
                Ok(b) => bytes -= b,
                Err(e) => loaded = Err(e),
            }
        }
        for (_, rec) in pending.drain(..) {
            // SAFETY: never published (a load that failed before inserting them).
            unsafe { crate::cc::free_record_of::<P>(rec.0 as *mut P::Record) };
        }
        r.credit_range(range, bytes);
        collect_garbage(bytes as usize / RECORD_OVERHEAD);
        loaded?;
        r.mark_loaded(&mut clock, range);
        self.counters.ranges_loaded.fetch_add(1, Ordering::Relaxed);
        Ok(false)
    }

    /// Inserts loaded records (sorted, from one range) into the index as one batch, and
    /// frees those whose key is there already: a load that failed halfway (the same
    /// committed value), or an insert that placed it while the range was leaving (newer).
    /// Returns the bytes of the records freed. `pending` is empty after.
    pub(super) fn insert_loaded(&self, pending: &mut Vec<(Vec<u8>, RecPtr<P::Record>)>) -> Result<i64, Error> {
        let batch: Vec<IndexEdit<'_, P::Record>> = pending.iter().map(|(k, p)| (k.as_slice(), Some(*p))).collect();
        let mut added = vec![false; batch.len()];
        let r = self.index.apply_batch(&batch, &mut added);
        drop(batch);
        let guard = &epoch::pin();
        let mut freed = 0;
        for ((k, p), added) in pending.drain(..).zip(added) {
            if !added {
                freed += self.record_bytes(&k, p, guard);
                // SAFETY: never published.
                unsafe { crate::cc::free_record_of::<P>(p.0 as *mut P::Record) };
            }
        }
        r.map_err(Error::Index)?;
        Ok(freed)
    }

    /// Whether every range overlapping `from..end` (exclusive) is loaded, without loading
    /// any.
    pub(super) fn covered(&self, from: &[u8], end: Option<&[u8]>) -> bool {
        match self.residency.as_ref().filter(|r| !r.all_loaded()) {
            Some(r) => r.covers(from, end, &epoch::pin()),
            None => true,
        }
    }

    /// Where a scan from `from` must stop this time: the start of the first key range
    /// before `end` that is not in the index (after loading the one `from` is in).
    pub(super) fn scan_limit(&self, from: &[u8], end: Option<&[u8]>) -> Result<Option<Vec<u8>>, Error> {
        let Some(r) = self.residency.as_ref().filter(|r| !r.all_loaded()) else { return Ok(None) };
        loop {
            while !self.loaded(from, Some(from))? {}
            // Tests widen the window in which the range can leave again.
            self.pause_after_miss();
            let guard = &epoch::pin();
            match r.first_missing(from, end, guard) {
                None => return Ok(None),
                // The range `from` is in left again since it was loaded (another
                // transaction's eviction): its low is at or before `from`, and a scan
                // stopped there would start over below `from` (seen once in CI: a scan
                // returned the first keys of the database). Load it again.
                Some(m) if m.low() <= from => continue,
                Some(m) => return Ok(Some(m.low().to_vec()).filter(|l| end.is_none_or(|e| l.as_slice() < e))),
            }
        }
    }

    /// Evicts clean ranges while the records in memory pass the budget (CLOCK: a range
    /// touched since the hand last passed gets another round). Called after a
    /// transaction ends, inside its slot (which keeps the records it meets allocated), by
    /// one thread at a time; if nothing can leave before a checkpoint
    /// covers the ranges' last writes, one is made due.
    pub(crate) fn evict_over_budget(&self, worker: &P::Worker) {
        let Some(r) = self.residency.as_ref().filter(|r| r.over_budget()) else { return };
        let Some(mut clock) = r.lock.try_lock() else { return };
        let Some(d) = self.durable.as_ref() else { return };
        let covered = if r.evict_dirty { u64::MAX } else { d.covered() };
        let target = (r.budget as i64) / 10 * 9;
        let mut steps = 2 * r.len(&epoch::pin()) + 2;
        let mut blocked_by_dirt = false;
        while r.resident() > target && steps > 0 {
            steps -= 1;
            // One pin per range, not per pass: a pass may evict many ranges, and what they
            // retire (index nodes, range maps, values) is freed only once no pin older
            // than the retirement remains.
            let guard = &epoch::pin();
            let (range, low, high) = r.advance(&mut clock, guard);
            if !range.is_loaded() {
                continue;
            }
            // A range too large to leave at once is split first (written or not: a fresh
            // database is one range), and its lower part considered.
            // Cut into pieces of `split_at` records at once (one new range map).
            let split_at = r.split_records();
            // Counted, not measured: reading a record's value could wait for a 2PL writer,
            // who may itself be waiting for this lock to load a range (a deadlock CI met).
            let mut cuts: Vec<Vec<u8>> = Vec::new();
            let mut seen = 0;
            for (i, (k, _)) in self.index.scan(&low, high.as_deref()).enumerate() {
                if i > 0 && i % split_at == 0 {
                    if cuts.len() == MAX_PIECES {
                        break;
                    }
                    cuts.push(k);
                }
                seen = i + 1;
            }
            // A range of up to twice that leaves whole: a store page loaded again (up to
            // twice `PAGE_TARGET` bytes) would otherwise be split at each eviction, each
            // split a new map (when a split copied the whole map, a verify pass over 10M
            // records under 64 MiB took 80 s instead of 6 once its pages held 130 records).
            if seen <= 2 * split_at {
                cuts.clear();
            }
            // The pieces are new ranges the hand meets later: each gets its two visits
            // (CI met a pass that ran out of steps over the budget after many splits).
            steps += 2 * cuts.len();
            let (range, high) = match cuts.first() {
                Some(at) => (r.split(&mut clock, range, &cuts, split_at as f64 / seen as f64, guard), Some(at.clone())),
                None => (range.clone(), high),
            };
            if range.dirty() > covered {
                blocked_by_dirt = true;
                continue;
            }
            if range.take_reference() {
                continue;
            }
            self.evict_range(worker, r, &mut clock, &range, &low, high.as_deref(), covered, guard);
        }
        drop(clock);
        if r.over_budget() && blocked_by_dirt && !self.cache_pressure.swap(true, Ordering::AcqRel) {
            self.wake_checkpointer();
        }
    }

    /// The memory counted for one record: key, value and [`RECORD_OVERHEAD`].
    pub(super) fn record_bytes(&self, key: &[u8], p: RecPtr<P::Record>, guard: &Guard) -> i64 {
        // SAFETY: in the index under the caller's pin.
        let len = self.proto.committed_value(unsafe { &*p.0 }, guard).map_or(0, |v| v.len());
        (key.len() + len + RECORD_OVERHEAD) as i64
    }

    /// Takes the records of `range` (`low..high`) out of the index, if none is held and
    /// none was written since the checkpoint `covered` names. See [`Residency`] for the
    /// order of steps.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn evict_range(
        &self,
        worker: &P::Worker,
        r: &Residency,
        clock: &mut Clock,
        range: &Arc<Range>,
        low: &[u8],
        high: Option<&[u8]>,
        covered: u64,
        guard: &Guard,
    ) {
        r.mark_unloaded(clock, range);
        // The gap owner past the range: no insert enters the range's last gap meanwhile
        // (an insert latches the follower of its key; one that did before is in the scan).
        let gaps = self.proto.gap_protection();
        let next = loop {
            let next = match high {
                Some(h) if gaps => self.next_record(h, false, None, guard).1,
                _ => &*self.sentinel,
            };
            match self.proto.latch_next(next) {
                Ok(()) => break Some(next),
                Err(Access::Removed) => continue,
                Err(_) => break None,
            }
        };
        let Some(next) = next else {
            r.mark_kept(clock, range);
            return;
        };
        let recs: Vec<(Vec<u8>, RecPtr<P::Record>)> = self.index.scan(low, high).collect();
        let mut stamps = Vec::with_capacity(recs.len());
        for (_, p) in &recs {
            if r.evict_unmarked {
                break;
            }
            // SAFETY: in the index under this pin.
            let rec = unsafe { &*p.0 };
            // An insert in flight: its transaction would have to start over.
            if self.proto.is_fresh(rec) {
                break;
            }
            match self.proto.try_latch_evict(rec) {
                Some(s) => stamps.push(s),
                None => break,
            }
        }
        if r.evict_unmarked {
            // The planted bug: the records leave unmarked. They are leaked, not retired: a
            // transaction still holding one may unlink it, which retires it itself.
            for (k, _) in &recs {
                self.index.delete(k).ok();
            }
            self.proto.unlatch_next(next);
            r.debit_all(range);
            return;
        }
        // Written since the checkpoint (a writer marks the range while it holds the record,
        // so the latches above come after its mark), or held by someone: not now.
        if stamps.len() < recs.len() || range.dirty() > covered {
            for (_, p) in &recs[..stamps.len()] {
                // SAFETY: as above.
                self.proto.unlatch_evict(unsafe { &*p.0 });
            }
            self.proto.unlatch_next(next);
            r.mark_kept(clock, range);
            range.touch();
            return;
        }
        for (_, p) in &recs {
            // SAFETY: as above; latched by us, so it stays until retired below.
            self.proto.evict(worker, unsafe { &*p.0 }, guard);
        }
        // Counted before the records leave the index: a transaction that meets a reloaded
        // record of one of them sees the count moved past its mark (`own_rebound`).
        self.counters.ranges_evicted.fetch_add(1, Ordering::AcqRel);
        let batch: Vec<IndexEdit<'_, P::Record>> = recs.iter().map(|(k, _)| (k.as_slice(), None)).collect();
        let mut unused = vec![false; batch.len()];
        // Latched records stay in the index until they leave, and deletes need no memory:
        // an index error here would be a bug.
        self.index.apply_batch(&batch, &mut unused).expect("keys already in the index are valid");
        for (_, p) in &recs {
            self.retire(*p);
        }
        self.proto.unlatch_next(next);
        if let Some(&max) = stamps.iter().max() {
            self.reload_stamp.fetch_max(max, Ordering::AcqRel);
        }
        r.debit_all(range);
        self.reclaim();
        collect_garbage(recs.len());
        self.counters.records_evicted.fetch_add(recs.len() as u64, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use crate::cc::tictoc::TicToc;
    use crate::db::{Resolved, TypedDb};
    use crate::index::BwTreeConfig;
    use crate::plants::Plants;
    use crate::storage::SimStorage;
    use crate::store::budget::CacheBudget;
    use crate::store::StoreOptions;
    use crate::wal::CommitMode;
    use crate::wal::{Durability, LogOptions};
    use std::sync::Arc;

    const RECORDS: u64 = 6000;

    fn key(i: u64) -> Vec<u8> {
        format!("key{i:08}").into_bytes()
    }

    fn value(i: u64) -> Vec<u8> {
        let mut v = format!("value-{i}-").into_bytes();
        v.resize(200, b'.');
        v
    }

    /// A database of about 1.3 MB of records behind a 128 KiB cache, written and then
    /// checkpointed (every range clean), reopened so that it starts with nothing loaded.
    fn filled() -> (SimStorage, TypedDb<TicToc>) {
        filled_with(Plants::NONE)
    }

    fn filled_with(plants: Plants) -> (SimStorage, TypedDb<TicToc>) {
        let disk = SimStorage::new(3);
        let log = || LogOptions { durability: Durability::Buffered, ..LogOptions::default() };
        let store = StoreOptions { checkpoint_bytes: 0, ..StoreOptions::default() };
        let db = TypedDb::open_durable(
            TicToc::default(),
            BwTreeConfig::default(),
            Arc::new(disk.clone()),
            log(),
            store,
            128 << 10,
        )
        .unwrap();
        for chunk in (0..RECORDS).collect::<Vec<_>>().chunks(500) {
            let mut t = db.begin();
            for &i in chunk {
                t.put(&key(i), &value(i)).unwrap();
            }
            t.commit().unwrap();
        }
        db.close().unwrap();
        let policy = CommitMode::resolve(&log(), "tictoc", true).unwrap();
        let resolved = Resolved { policy, cache: CacheBudget::new(128 << 10), store };
        let db = TypedDb::open_durable_as(
            TicToc::default(),
            BwTreeConfig::default(),
            Arc::new(disk.clone()),
            log(),
            resolved,
            false,
            plants,
        )
        .unwrap();
        (disk, db)
    }

    /// Dirties key 1's range, then reads every fifth key (evicting what is clean over and
    /// over): whether key 1's range is still in memory.
    fn dirty_range_stays(db: &TypedDb<TicToc>) -> bool {
        let mut t = db.begin();
        t.put(&key(1), b"dirty").unwrap();
        t.commit().unwrap();
        for i in (0..RECORDS).step_by(5) {
            let mut t = db.begin();
            t.get(&key(i)).unwrap();
            t.commit().unwrap();
        }
        let r = db.eng.residency.as_ref().unwrap();
        r.covers(&key(1), Some(&key(2)), &crossbeam_epoch::pin())
    }

    #[test]
    fn reads_load_ranges_and_eviction_keeps_the_records_within_the_budget() {
        let (_disk, db) = filled();
        let s = db.cache_stats().expect("a database with pages has a cache");
        assert!(s.ranges > 1, "the data spans several ranges: {s:?}");
        assert_eq!(s.ranges_loaded, 0, "a reopened database loads nothing until read: {s:?}");
        for i in (0..RECORDS).step_by(7) {
            let mut t = db.begin();
            assert_eq!(t.get(&key(i)).unwrap(), Some(value(i)), "key {i}");
            t.commit().unwrap();
        }
        let s = db.cache_stats().unwrap();
        assert!(s.loads >= s.ranges as u64, "every range was read at least once: {s:?}");
        assert!(s.evictions > 0 && s.records_evicted > 0, "reading 1.3 MB through 128 KiB evicts: {s:?}");
        // Evictions run as each transaction ends: what stays is within the budget plus
        // the last range loaded.
        let range_bytes = 220 * (RECORDS as i64 / s.ranges as i64) * 2;
        assert!(
            s.resident_bytes <= s.budget as i64 + range_bytes,
            "resident {} over budget {}: {s:?}",
            s.resident_bytes,
            s.budget
        );
        assert!(s.ranges_loaded < s.ranges, "not everything fits: {s:?}");
    }

    #[test]
    fn ranges_written_since_the_checkpoint_stay_in_memory() {
        let (_disk, db) = filled();
        assert!(dirty_range_stays(&db), "a dirty range never leaves before a checkpoint");
        let mut t = db.begin();
        let loads = db.cache_stats().unwrap().loads;
        assert_eq!(t.get(&key(1)).unwrap().as_deref(), Some(&b"dirty"[..]));
        assert_eq!(db.cache_stats().unwrap().loads, loads, "the dirty key was read from memory");
        t.commit().unwrap();
        // After a checkpoint the range is clean and may leave like the others.
        db.eng.checkpoint_now().unwrap();
        for i in (0..RECORDS).step_by(5) {
            let mut t = db.begin();
            t.get(&key(i)).unwrap();
            t.commit().unwrap();
        }
        let mut t = db.begin();
        assert_eq!(t.get(&key(1)).unwrap().as_deref(), Some(&b"dirty"[..]), "the write reached the pages");
    }

    /// The check above can fail: with dirty ranges allowed to leave (the planted bug of the
    /// cache tests), the range is gone.
    #[test]
    fn the_planted_dirty_eviction_is_seen() {
        let (_disk, db) = filled_with(Plants { evict_dirty: true, ..Plants::NONE });
        assert!(!dirty_range_stays(&db), "with the plant, the dirty range must have left");
    }
}
