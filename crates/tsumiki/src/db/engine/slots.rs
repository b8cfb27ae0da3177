//! Worker slots and reclamation: a transaction runs in a pooled slot, and records that
//! leave the index are freed once every transaction that could hold them has ended.

use super::*;

/// The calling thread's shard of the idle-slot pool: threads are numbered in the order
/// they first ask, so the first [`SLOT_SHARDS`] threads each have a shard of their own.
fn home_shard() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static HOME: usize = NEXT.fetch_add(1, Ordering::Relaxed) % SLOT_SHARDS;
    }
    HOME.with(|h| *h)
}

impl<P: Protocol> Engine<P> {
    /// An idle slot with its buffers: from the thread's own shard, else from another shard
    /// whose lock is free, else a new one. Slots stay about as many as the transactions
    /// that ever ran at once.
    pub(crate) fn take_slot(&self) -> (Arc<Slot<P>>, Box<TxnBufs<P>>) {
        let home = home_shard();
        let own = self.free_slots[home].lock().pop();
        let found = own.or_else(|| {
            (1..SLOT_SHARDS)
                .find_map(|i| self.free_slots[(home + i) % SLOT_SHARDS].try_lock().and_then(|mut v| v.pop()))
        });
        match found {
            Some((s, bufs)) => (s, bufs.unwrap_or_else(|| Box::new(TxnBufs::new(&self.proto)))),
            None => (self.new_slot(), Box::new(TxnBufs::new(&self.proto))),
        }
    }

    /// A new slot, known to reclamation and to the commit gate.
    pub(super) fn new_slot(&self) -> Arc<Slot<P>> {
        let s = Arc::new(Slot {
            worker: self.proto.new_worker(),
            lane: OnceLock::new(),
            since: AtomicU64::new(IDLE),
            committing: AtomicBool::new(false),
            commits: AtomicU64::new(0),
            aborts: AtomicU64::new(0),
        });
        self.slots.lock().push(Arc::clone(&s));
        s
    }

    /// Publishes the start of a transaction on `slot`: records retired from now on stay
    /// allocated until it ends. Re-checked like a hazard pointer: either a retirer's scan
    /// sees the published value, or this transaction reads a clock past the retirement
    /// (and so, through the clock, sees the record already out of the index).
    pub(super) fn enter(&self, slot: &Slot<P>) {
        let mut c = self.record_clock.load(Ordering::SeqCst);
        loop {
            slot.since.store(c, Ordering::SeqCst);
            let now = self.record_clock.load(Ordering::SeqCst);
            if now == c {
                return;
            }
            c = now;
        }
    }

    /// Ends the transaction on `slot`, then frees what no running transaction can hold.
    pub(super) fn leave(&self, slot: &Slot<P>) {
        slot.since.store(IDLE, Ordering::SeqCst);
        if self.has_retired.load(Ordering::Acquire) {
            self.reclaim();
        }
    }

    /// A record has left the index: it is freed once every transaction running now ended.
    /// Transactions hold records (read and write sets) across operations without an epoch
    /// pin, so that a long or idle transaction never stalls the epoch (index nodes and value
    /// buffers, which no transaction holds across operations, go through the epoch).
    pub(super) fn retire(&self, rec: RecPtr<P::Record>) {
        let mut retired = self.retired.lock();
        let stamp = self.record_clock.fetch_add(1, Ordering::SeqCst);
        retired.push_back((stamp, rec));
        drop(retired);
        self.has_retired.store(true, Ordering::Release);
    }

    /// Frees the retired records older than every running transaction.
    pub(super) fn reclaim(&self) {
        let Some(mut retired) = self.retired.try_lock() else { return };
        let oldest = self.slots.lock().iter().map(|s| s.since.load(Ordering::SeqCst)).min().unwrap_or(IDLE);
        while let Some(&(_, rec)) = retired.front().filter(|(stamp, _)| *stamp < oldest) {
            retired.pop_front();
            // SAFETY: out of the index since `stamp`; every transaction that could have
            // loaded it began before and has ended (`enter`); nothing else holds records.
            unsafe { crate::cc::free_record_of::<P>(rec.0 as *mut P::Record) };
        }
        if retired.is_empty() {
            self.has_retired.store(false, Ordering::Release);
        }
    }

    /// Transactions committed and aborted so far, over every slot.
    pub(crate) fn txn_counts(&self) -> (u64, u64) {
        self.slots
            .lock()
            .iter()
            .fold((0, 0), |(c, a), s| (c + s.commits.load(Ordering::Relaxed), a + s.aborts.load(Ordering::Relaxed)))
    }

    /// Puts a slot back, in the thread's own shard.
    pub(crate) fn return_slot(&self, slot: Arc<Slot<P>>, bufs: Option<Box<TxnBufs<P>>>) {
        self.free_slots[home_shard()].lock().push((slot, bufs));
    }
}

#[cfg(test)]
mod tests {
    use crate::cc::tictoc::TicToc;
    use crate::db::TypedDb;
    use crate::index::BwTreeConfig;

    /// Threads that each begin and end many transactions reuse their shard's slots: every
    /// commit is counted (per slot, summed), and the slots stay as many as ran at once.
    #[test]
    fn pooled_slots_are_reused_and_counted_across_threads() {
        const THREADS: usize = 6;
        const TXNS: usize = 300;
        let db = TypedDb::new(TicToc::default(), BwTreeConfig::default()).unwrap();
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let db = &db;
                s.spawn(move || {
                    for i in 0..TXNS {
                        // Neighbouring threads' inserts may conflict: each is retried.
                        loop {
                            let mut txn = db.begin();
                            txn.put(format!("k{t}-{i}").as_bytes(), b"v").unwrap();
                            match txn.commit() {
                                Ok(()) => break,
                                Err(e) if e.is_retryable() => std::thread::yield_now(),
                                Err(e) => panic!("{e}"),
                            }
                        }
                    }
                    // One abort each, counted too.
                    let mut txn = db.begin();
                    txn.put(b"x", b"v").unwrap();
                    txn.rollback();
                });
            }
        });
        let (commits, aborts, _) = db.counters();
        assert_eq!(commits, (THREADS * TXNS) as u64);
        // The rollbacks, and any commit that lost a conflict.
        assert!(aborts >= THREADS as u64, "{aborts} aborts");
        let slots = db.eng.slots.lock().len();
        assert!((1..=THREADS).contains(&slots), "{slots} slots for {THREADS} threads");
        let idle: usize = db.eng.free_slots.iter().map(|s| s.lock().len()).sum();
        assert_eq!(idle, slots, "every slot is back in the pool");
        // A later thread finds an idle slot in another shard rather than making one.
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut txn = db.begin();
                txn.put(b"late", b"v").unwrap();
                txn.commit().unwrap();
            });
        });
        assert_eq!(db.eng.slots.lock().len(), slots, "no slot made for the later thread");
    }

    /// A transaction's buffers go back to the pool with its slot, unless its write set or
    /// its protocol's sets (here TicToc's read set) outgrew what the pool keeps: those are
    /// freed when it ends, committed or not, not when the slot's next transaction begins.
    #[test]
    fn a_huge_write_set_is_freed_when_its_transaction_ends() {
        use crate::cc::KEEP_SET;
        let db = TypedDb::new(TicToc::default(), BwTreeConfig::default()).unwrap();
        // The buffers each pooled slot holds (`None`: dropped).
        let pooled = |db: &TypedDb<TicToc>| -> Vec<bool> {
            let shards = db.eng.free_slots.iter().map(|s| s.lock());
            shards.flat_map(|s| s.iter().map(|(_, b)| b.is_some()).collect::<Vec<_>>()).collect()
        };
        let small = |db: &TypedDb<TicToc>| {
            let mut txn = db.begin();
            txn.put(b"small", b"v").unwrap();
            txn.get(b"small").unwrap();
            txn.commit().unwrap();
            assert!(pooled(db).iter().any(|&b| b), "a small transaction's buffers are pooled");
        };
        small(&db);
        let n = KEEP_SET as u32 + 1;
        for (commit, write) in [(true, true), (false, true), (true, false)] {
            let mut txn = db.begin();
            for i in 0..n {
                if write {
                    txn.put(&i.to_be_bytes(), b"v").unwrap();
                } else {
                    txn.get(&i.to_be_bytes()).unwrap();
                }
            }
            if commit {
                txn.commit().unwrap()
            } else {
                txn.abort()
            }
            let pool = pooled(&db);
            assert!(pool.iter().all(|&b| !b), "commit {commit}, write {write}: buffers pooled: {pool:?}");
            small(&db);
        }
    }
}
