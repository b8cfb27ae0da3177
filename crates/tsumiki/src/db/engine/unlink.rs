//! Unlinking deleted records from the index (handing their gap to the follower), now or
//! put off until the latches are free.

use super::*;

/// The most unlinked records a [`LeafRun`] holds before they leave the index.
const RUN_MAX: usize = 256;

/// Unlinks of one leaf, in key order, whose records are unlinked (their gaps handed on,
/// marked removed) but still in the index, to leave it together in one rewrite of the leaf
/// (`BwTree::apply_batch`): a retain's 500K unlinks, ~85 per leaf, each added a delete
/// delta, and every few of those a consolidation copied the leaf. Meanwhile a reader that
/// meets one finds it removed and looks again, as it does in the moment between an
/// unlink and its delete; the run is short and leaves before the commit returns.
pub(super) struct LeafRun<'k, R> {
    recs: Vec<(&'k [u8], RecPtr<R>)>,
    /// The key of the series' next unlink (set by the caller before each).
    pub(super) next: Option<&'k [u8]>,
}

impl<R> Default for LeafRun<'_, R> {
    fn default() -> Self {
        LeafRun { recs: Vec::new(), next: None }
    }
}

impl<P: Protocol> Engine<P> {
    /// The records of `run` leave the index, one rewrite per leaf, and are retired.
    pub(super) fn end_run(&self, run: &mut LeafRun<'_, P::Record>, guard: &Guard) {
        if run.recs.is_empty() {
            return;
        }
        let batch: Vec<IndexEdit<'_, P::Record>> = run.recs.iter().map(|&(k, _)| (k, None)).collect();
        let mut unused = vec![false; batch.len()];
        // Unlinked records stay in the index until they leave it, and deletes need no
        // memory: an index error here would be a bug.
        self.index.apply_batch(&batch, &mut unused).expect("keys already in the index are valid");
        for (key, rec) in run.recs.drain(..) {
            self.left_index(key, rec, guard);
        }
    }

    /// An unlinked record that left the index: retired, and its memory taken off its range.
    fn left_index(&self, key: &[u8], rec: RecPtr<P::Record>, guard: &Guard) {
        self.retire(rec);
        if let Some(res) = &self.residency {
            res.credit(key, -((key.len() + RECORD_OVERHEAD) as i64), guard);
        }
    }

    /// Unlinks a deleted (absent) record, if it can latch it and its follower now. `trail`:
    /// where the last unlink of a series in key order ended. With `run` (see [`LeafRun`]):
    /// while the unlinks stay in one leaf the records wait in it; the caller ends it
    /// ([`end_run`](Self::end_run)).
    pub(super) fn try_unlink<'k>(
        &self,
        worker: &P::Worker,
        key: &'k [u8],
        rec: *const P::Record,
        guard: &Guard,
        trail: &mut LeafTrail,
        run: Option<&mut LeafRun<'k, P::Record>>,
    ) -> bool {
        // SAFETY: pinned by `guard`.
        let r = unsafe { &*rec };
        match self.proto.try_latch_absent(r) {
            UnlinkLatch::Latched => {}
            UnlinkLatch::NotAbsent => return false,
            UnlinkLatch::Busy => {
                self.put_off_unlink(key);
                return false;
            }
        }
        let mut nk = Vec::new();
        loop {
            // The follower found stands only if no range came back since (see `Residency`).
            let since = self.load_count();
            // One descent: the follower, its check once latched and the delete all start
            // at the key's leaf (three descents per unlink before).
            let mut at = trail.cursor(&self.index, key, guard);
            let next = if self.proto.gap_protection() {
                self.found_record(key, at.first_from(true), self.residency.is_some().then_some(&mut nk)).1
            } else {
                &*self.sentinel
            };
            // The unlink hands the deleted record's gap to its follower; a range loaded
            // between them later would own part of that gap without what it was handed.
            // Wait until the ranges between are loaded (transactions load them).
            if let Some(res) = self.residency.as_ref().filter(|res| self.proto.gap_protection() && !res.all_loaded()) {
                if res.first_missing(key, (!self.is_sentinel(next)).then_some(nk.as_slice()), guard).is_some() {
                    self.proto.unlatch_absent(r);
                    self.put_off_unlink(key);
                    return false;
                }
            }
            match self.proto.latch_next(next) {
                Ok(()) => {}
                Err(Access::Removed) => continue,
                Err(Access::Conflict(_) | Access::Failed) => {
                    self.proto.unlatch_absent(r);
                    self.put_off_unlink(key);
                    return false;
                }
            }
            if self.proto.gap_protection()
                && ((at.refresh() && !std::ptr::eq(self.found_record(key, at.first_from(true), None).1, next))
                    || !self.no_load_since(since))
            {
                self.proto.unlatch_next(next);
                continue;
            }
            self.proto.unlink(worker, r, next, guard);
            self.counters.unlinked.fetch_add(1, Ordering::Relaxed);
            if let Some(run) = run {
                let stays = run.next.is_some_and(|k| at.covers(k));
                if stays || !run.recs.is_empty() {
                    run.recs.push((key, RecPtr(rec)));
                    if !stays || run.recs.len() == RUN_MAX {
                        self.end_run(run, guard);
                    }
                    return true;
                }
            }
            let removed = at.delete().unwrap_or(false);
            // (The planted unmarked eviction takes records out from under their holders.)
            let planted = self.residency.as_ref().is_some_and(|r| r.evict_unmarked);
            debug_assert!(removed || planted, "a latched record stays in the index until its unlink");
            self.left_index(key, RecPtr(rec), guard);
            return true;
        }
    }

    /// Retries a few unlinks that were put off.
    pub(super) fn put_off_unlink(&self, key: &[u8]) {
        self.pending_unlinks.lock().push_back(key.into());
        self.has_pending.store(true, Ordering::Release);
    }

    pub(super) fn drain_pending_unlinks(&self, worker: &P::Worker, guard: &Guard) {
        if !self.has_pending.load(Ordering::Acquire) {
            return;
        }
        let batch: Vec<Box<[u8]>> = match self.pending_unlinks.try_lock() {
            // Oldest first: those are the likeliest to be unlinkable by now.
            Some(mut p) => {
                let n = p.len().min(8);
                let batch = p.drain(..n).collect();
                if p.is_empty() {
                    self.has_pending.store(false, Ordering::Release);
                }
                batch
            }
            None => return,
        };
        let mut trail = LeafTrail::default();
        for key in batch {
            if let Some(rec) = self.lookup(&key, guard) {
                self.try_unlink(worker, &key, rec, guard, &mut trail, None);
            }
        }
    }
}
