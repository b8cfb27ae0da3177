//! The durable glue: opening and closing the files, checkpoints and the commit gate that
//! quiesces commits for them, and what a checkpoint reads.

use super::*;

/// Records per chunk of the scan that rewrites every page (no readable log).
pub(super) const CLOSE_CHUNK: usize = 4096;

/// What a checkpoint or close reads. Safe while transactions run: the caller is inside a
/// transaction's slot (or at close), so no record it meets is freed meanwhile.
impl<P: Protocol> CommittedState for Engine<P> {
    fn get_sorted<'k>(&self, keys: &mut dyn Iterator<Item = &'k [u8]>, f: &mut dyn FnMut(&'k [u8], Option<Vec<u8>>)) {
        let guard = epoch::pin();
        self.index.get_sorted(keys, &guard, |k, p| {
            // SAFETY: as in `lookup`: the record was in the index under this pin, and
            // records are freed only after every pin entered before they left it.
            f(k, p.and_then(|p| self.proto.committed_value(unsafe { &*p.0 }, &guard)))
        });
    }

    fn enter_helper(&self) {
        self.install_lock_waiter();
    }

    /// Every record's latest committed value, in key order, a chunk at a time (never a
    /// second copy of the database).
    fn scan(&self, f: &mut store::Loader<'_>) -> Result<(), Error> {
        let mut from: Vec<u8> = Vec::new();
        let mut first = true;
        loop {
            let guard = epoch::pin();
            // Resume after the last key written; it may have been deleted meanwhile (a
            // checkpoint runs beside transactions), so drop it by value, not by position.
            let chunk: Vec<(Vec<u8>, RecPtr<P::Record>)> =
                self.index.scan(&from, None).filter(|(k, _)| first || *k != from).take(CLOSE_CHUNK).collect();
            first = false;
            for (k, p) in &chunk {
                // SAFETY: the record was in the index under this pin, and records leave
                // the index before they are retired, retired records outlive every slot
                // entered before (the caller's is), and nothing is freed at close.
                if let Some(v) = self.proto.committed_value(unsafe { &*p.0 }, &guard) {
                    f(k, &v)?;
                }
            }
            match chunk.last() {
                Some((k, _)) if chunk.len() == CLOSE_CHUNK => from.clone_from(k),
                _ => return Ok(()),
            }
        }
    }
}

impl<P: Protocol> Engine<P> {
    /// Opens the database in `storage`: recovers what its files hold into this (empty)
    /// engine, bulk-loaded in key order, then starts a new log. An engine made
    /// `read_only` before writes nothing to `storage` (see `store::open`).
    pub(crate) fn open_durable(
        &mut self,
        storage: Arc<dyn Storage>,
        settings: StoreOptions,
        log: LogOptions,
        policy: CommitMode,
        budget: CacheBudget,
        plants: Plants,
    ) -> Result<(), Error> {
        let (unchecked_gaps, evict_dirty, evict_unmarked) =
            (plants.lazy_gaps_unchecked, plants.evict_dirty, plants.evict_unmarked);
        let (load_count_unchecked, lookup_pause) = (plants.load_count_unchecked, plants.lookup_pause);
        let (scan_gap_unguarded, kept_pages_clean) = (plants.scan_gap_unguarded, plants.kept_pages_clean);
        let proto = &self.proto;
        let mut builder = BwTreeBuilder::new(self.index.config().clone()).map_err(Error::Index)?;
        let opened = store::open(
            storage,
            settings,
            log,
            policy,
            plants,
            &mut |k, v| {
                let rec = self.allocated(crate::cc::alloc_loaded(proto, v, 0));
                builder.push(k, RecPtr(rec)).map_err(|e| {
                    // SAFETY: never published.
                    unsafe { crate::cc::free_record_of::<P>(rec) };
                    Error::Corrupt(format!("the recovered state: {e}").into())
                })
            },
            budget,
            self.read_only,
        );
        let index = builder.finish();
        let durable = match opened {
            Ok(d) => d,
            Err(e) => {
                // Records already loaded are freed with the partial tree.
                if let Ok(t) = index {
                    free_records::<P>(&t);
                }
                return Err(e);
            }
        };
        self.index = index.map_err(Error::Index)?;
        // Opened read-only on a full disk: a write is refused as by `Options::read_only`
        // (`Error::ReadOnly`), before the poisoned log would refuse its commit.
        self.read_only |= durable.read_only;
        if durable.lazy {
            // The pages recovery loaded (a kept log's): in memory, written in this generation.
            let loaded: Vec<(usize, i64)> = durable
                .preloaded
                .iter()
                .map(|p| (p.page, (p.bytes + p.records * RECORD_OVERHEAD as u64) as i64))
                .collect();
            let generation = (!kept_pages_clean).then(|| durable.wal.generation());
            let mut r =
                Residency::with_loaded(durable.page_lows(), &loaded, generation, budget.records, unchecked_gaps);
            (r.evict_dirty, r.evict_unmarked) = (evict_dirty, evict_unmarked);
            (r.load_count_unchecked, r.lookup_pause) = (load_count_unchecked, lookup_pause);
            r.scan_gap_unguarded = scan_gap_unguarded;
            self.residency = Some(r);
        }
        self.durable = Some(durable);
        Ok(())
    }

    /// Flushes the log and writes the pages a clean exit leaves, or keeps a small
    /// database's short log (`store::Durable::close`). No transaction may be running.
    pub(crate) fn close(&self) -> Result<(), Error> {
        let Some(d) = &self.durable else { return Ok(()) };
        d.close(self)
    }

    /// The page store's counters (databases opened with a path).
    pub(crate) fn store_stats(&self) -> Option<StoreStats> {
        self.durable.as_ref().map(|d| d.store_stats())
    }

    /// Whether `StoreOptions::checkpoint_interval` passed with log written since the last one.
    pub(crate) fn checkpoint_due_by_time(&self) -> bool {
        self.durable.as_ref().is_some_and(|d| d.wal.checkpoint_due_by_time())
    }

    /// Deletes log segments kept for reuse once checkpoints stopped coming (see
    /// `Wal::release_idle_segments`).
    pub(crate) fn release_idle_segments(&self) {
        if let Some(d) = self.durable.as_ref() {
            d.wal.release_idle_segments();
        }
    }

    /// Holds a committer back, after its commit, while the log since the last checkpoint
    /// is far past what makes one due (see [`crate::wal::Wal::throttle`]).
    pub(super) fn throttle_log(&self) {
        if let Some(d) = &self.durable {
            d.wal.throttle();
        }
    }

    /// Under NLR group commit, makes this thread's wait for a record's lock flush the
    /// pending group that holds it (otherwise the wait spins until some commit fills the
    /// group). Transactions, the checkpoint's thread and its helpers call it.
    #[inline]
    pub(super) fn install_lock_waiter(&self) {
        if let Some(d) = self.durable.as_ref().filter(|d| d.wal.holds_locks()) {
            crate::cc::set_lock_waiter(Some(d.wal.clone()));
        }
    }

    /// Whether a checkpoint is due by log volume or cache pressure.
    pub(crate) fn checkpoint_due(&self) -> bool {
        self.durable.as_ref().is_some_and(|d| d.wal.checkpoint_due()) || self.cache_pressure.load(Ordering::Acquire)
    }

    /// After a logged commit: wakes the checkpoint thread if a checkpoint is due (starting
    /// it if needed), else starts it once the database has been open a while (see
    /// [`Checkpointer`]).
    #[inline]
    pub(super) fn checkpoint_may_be_due(&self) {
        if self.checkpoint_due() {
            self.wake_checkpointer();
        } else {
            self.checkpointer.after_commit();
        }
    }

    /// Wakes the checkpoint thread, starting it if needed; a thread that cannot be spawned
    /// poisons the log (no checkpoint would come, and commits would wait for one forever).
    pub(crate) fn wake_checkpointer(&self) {
        if let Err(e) = self.checkpointer.wake() {
            if let Some(d) = &self.durable {
                d.wal.poison(crate::error::Poison::io("starting the checkpoint thread", Arc::new(e)));
            }
        }
    }

    /// Takes a checkpoint now, from outside any transaction.
    pub(crate) fn checkpoint_now(&self) -> Result<(), Error> {
        self.install_lock_waiter();
        let _one = self.checkpointing.lock();
        let slot = self.checkpoint_slot.get_or_init(|| self.new_slot()).clone();
        // Entered like a transaction: no record the checkpoint reads is freed meanwhile.
        self.enter(&slot);
        let r = self.checkpoint();
        self.leave(&slot);
        crate::cc::set_lock_waiter(None);
        r
    }

    /// Takes a checkpoint (see `store::Durable::checkpoint`); the caller's slot is entered.
    pub(super) fn checkpoint(&self) -> Result<(), Error> {
        let Some(d) = &self.durable else { return Ok(()) };
        self.cache_pressure.store(false, Ordering::Release);
        d.checkpoint(|switch| self.exclusive_reads(switch), self)
    }

    /// Closes the commit gate and waits until no commit is past it.
    pub(super) fn close_gate(&self) {
        self.gate.fetch_add(1, Ordering::SeqCst);
        let slots: Vec<Arc<Slot<P>>> = self.slots.lock().clone();
        for s in &slots {
            while s.committing.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
        }
    }

    /// Runs `f` while no transaction commits writes (the gate opens again when `f` ends,
    /// even by a panic): the state it reads cannot change, so an optimistic protocol's
    /// read-only transaction run inside validates. The fallback of [`crate::Db::view`] for
    /// long reads that keep meeting writers; a checkpoint's switch of generations.
    pub(crate) fn exclusive_reads<T>(&self, f: impl FnOnce() -> T) -> T {
        struct Open<'e>(&'e AtomicUsize);
        impl Drop for Open<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::Release);
            }
        }
        self.close_gate();
        let _open = Open(&self.gate.0);
        f()
    }

    /// Marks `slot` as committing, waiting while a checkpoint holds the gate. With
    /// [`close_gate`](Self::close_gate): each side sets its flag, then reads the other's
    /// (sequentially consistent), so either the commit waits or the checkpoint does.
    #[inline]
    pub(super) fn enter_commit(&self, slot: &Slot<P>) {
        loop {
            slot.committing.store(true, Ordering::SeqCst);
            if self.gate.load(Ordering::SeqCst) == 0 {
                return;
            }
            slot.committing.store(false, Ordering::SeqCst);
            while self.gate.load(Ordering::Acquire) != 0 {
                std::thread::yield_now();
            }
        }
    }

    /// Marks the database closed without flushing or writing pages (a simulated
    /// crash for tests).
    #[cfg(feature = "test-plants")]
    pub(crate) fn abandon(&self) {
        if let Some(d) = &self.durable {
            d.abandon();
        }
    }
}
