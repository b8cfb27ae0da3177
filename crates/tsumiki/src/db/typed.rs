//! A database whose protocol is fixed at compile time ([`TypedDb`]), its checkpoint
//! thread and its per-thread workers.

use super::*;

/// A database whose protocol is fixed at compile time.
pub struct TypedDb<P: Protocol> {
    pub(super) eng: Arc<Engine<P>>,
}

impl<P: Protocol> TypedDb<P> {
    /// An in-memory database run by `proto`.
    pub fn new(proto: P, index: BwTreeConfig) -> Result<Self, Error> {
        Ok(TypedDb { eng: Arc::new(Engine::new(proto, index)?) })
    }

    /// A database kept in `storage`: recovers what its files hold, then logs every commit
    /// per `log` and takes checkpoints per `store`.
    pub fn open_durable(
        proto: P,
        index: BwTreeConfig,
        storage: Arc<dyn Storage>,
        log: LogOptions,
        store: StoreOptions,
        cache_bytes: usize,
    ) -> Result<Self, Error> {
        let policy = CommitMode::resolve(&log, proto.name(), proto.can_hold_locks())?;
        store.validate()?;
        let cache = CacheBudget::new(cache_bytes);
        Self::open_durable_as(proto, index, storage, log, Resolved { policy, cache, store }, false, Plants::NONE)
    }

    /// [`open_durable`](Self::open_durable), refusing every write when `read_only` (and
    /// writing nothing to `storage` then: give it a read-only one, such as
    /// [`ReadOnlyDir`](crate::storage::ReadOnlyDir), to open read-only media).
    pub(super) fn open_durable_as(
        proto: P,
        index: BwTreeConfig,
        storage: Arc<dyn Storage>,
        log: LogOptions,
        resolved: Resolved,
        read_only: bool,
        plants: Plants,
    ) -> Result<Self, Error> {
        let mut eng = Engine::new(proto, index)?;
        eng.read_only = read_only;
        eng.open_durable(storage, resolved.store, log, resolved.policy, resolved.cache, plants)?;
        let eng = Arc::new(eng);
        // A read-only database (asked, or opened on a full disk) starts no thread: each
        // would only write (checkpoints, the release of idle log segments). Others start
        // theirs on first need.
        if !eng.read_only {
            Checkpointer::arm(&eng);
        }
        let db = TypedDb { eng };
        db.start_count()?;
        Ok(db)
    }

    /// Gives the protocol the number of present keys at open: the store's (its master
    /// record and the replayed logs), or, for a database whose master record predates the
    /// count, a scan's (once: the next checkpoint or close records it).
    fn start_count(&self) -> Result<(), Error> {
        let Some(d) = &self.eng.durable else { return Ok(()) };
        let n = match d.count() {
            Some(n) => n,
            None => {
                let mut snap = self.begin_snapshot();
                let mut scan = snap.scan(b"", None);
                let mut n = 0u64;
                for row in &mut scan {
                    row?;
                    n += 1;
                }
                drop(scan);
                snap.commit()?;
                d.set_count(n);
                n
            }
        };
        self.eng.proto.set_count(n);
        Ok(())
    }

    /// Flushes the log and writes the pages a clean exit leaves, or keeps a small
    /// database's short log (see [`crate::Db::close`]); also done on drop, where an error
    /// cannot be reported.
    pub fn close(self) -> Result<(), Error> {
        self.eng.checkpointer.stop();
        self.eng.close()
    }

    /// Takes a checkpoint now (see [`Db::checkpoint`](crate::Db::checkpoint)).
    pub fn checkpoint(&self) -> Result<(), Error> {
        // From now on the thread releases the log segments checkpoints leave for reuse.
        self.eng.wake_checkpointer();
        self.eng.checkpoint_now()
    }

    /// The log's counters (`None` for an in-memory database).
    pub fn wal_stats(&self) -> Option<WalStats> {
        self.eng.durable.as_ref().map(|d| d.wal.stats())
    }

    /// What recovery did when the database was opened (`None` for an in-memory database).
    pub fn recovery_stats(&self) -> Option<RecoveryStats> {
        self.eng.durable.as_ref().map(|d| d.recovery)
    }

    /// The page store's counters: pages, segments, live and file bytes, what was written
    /// (`None` for an in-memory database).
    pub fn store_stats(&self) -> Option<StoreStats> {
        self.eng.store_stats()
    }

    /// The record cache's counters (`None` when every record stays in memory).
    pub fn cache_stats(&self) -> Option<CacheStats> {
        self.eng.cache_stats()
    }

    /// Starts a transaction on a worker slot from the pool.
    #[allow(unsafe_code)] // the transaction borrows the slot it owns
    pub fn begin(&self) -> TypedTxn<'_, P> {
        let (slot, bufs) = self.eng.take_slot();
        let s: *const Slot<P> = &*slot;
        // SAFETY: `slot` moves into the transaction's `Home` and lives as long as it.
        TypedTxn::start(&self.eng, unsafe { &*s }, bufs, Home::Pool(slot))
    }

    /// Starts a snapshot read transaction on a slot from the pool (see
    /// [`crate::Db::begin_read`]).
    #[allow(unsafe_code)] // the transaction borrows the slot it owns
    pub fn begin_snapshot(&self) -> TypedTxn<'_, P> {
        let (slot, bufs) = self.eng.take_slot();
        let s: *const Slot<P> = &*slot;
        // SAFETY: `slot` moves into the transaction's `Home` and lives as long as it.
        TypedTxn::start_as(&self.eng, unsafe { &*s }, bufs, Home::Pool(slot), true)
    }

    /// A worker: a slot and transaction buffers owned by one thread, reused by each of its
    /// transactions (for benchmarks and long-lived threads).
    pub fn worker(&self) -> TypedWorker<'_, P> {
        let (slot, bufs) = self.eng.take_slot();
        TypedWorker { db: self, slot, bufs: Some(bufs) }
    }

    /// The protocol.
    pub fn protocol(&self) -> &P {
        &self.eng.proto
    }

    /// Committed and aborted transactions, and records unlinked after deletes, so far.
    pub fn counters(&self) -> (u64, u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        let (commits, aborts) = self.eng.txn_counts();
        (commits, aborts, self.eng.counters.unlinked.load(Relaxed))
    }

    /// Keys in the index, counting deleted ones not yet unlinked (a full scan; for tests).
    #[doc(hidden)]
    pub fn index_len(&self) -> usize {
        self.eng.index_len()
    }

    /// See [`Db::index_stats`](crate::Db::index_stats).
    pub fn index_stats(&self) -> crate::index::BwTreeStats {
        self.eng.index_stats()
    }
}

impl<P: Protocol> Drop for TypedDb<P> {
    fn drop(&mut self) {
        self.eng.checkpointer.stop();
        let _ = self.eng.close();
    }
}

/// A per-thread worker of a [`TypedDb`]; see [`TypedDb::worker`].
pub struct TypedWorker<'db, P: Protocol> {
    db: &'db TypedDb<P>,
    slot: Arc<Slot<P>>,
    bufs: Option<Box<TxnBufs<P>>>,
}

impl<P: Protocol> TypedWorker<'_, P> {
    /// Starts a transaction; the worker is busy until it ends.
    pub fn begin(&mut self) -> TypedTxn<'_, P> {
        let bufs = self.bufs.take().unwrap_or_else(|| Box::new(TxnBufs::new(&self.db.eng.proto)));
        TypedTxn::start(&self.db.eng, &self.slot, bufs, Home::Worker(&mut self.bufs))
    }
}

impl<P: Protocol> Drop for TypedWorker<'_, P> {
    fn drop(&mut self) {
        self.db.eng.return_slot(Arc::clone(&self.slot), self.bufs.take());
    }
}
