//! Worker slots and reclamation: a transaction runs in a pooled slot, and records that
//! leave the index are freed once every transaction that could hold them has ended.

use super::*;

impl<P: Protocol> Engine<P> {
    pub(crate) fn take_slot(&self) -> (Arc<Slot<P>>, Box<TxnBufs<P>>) {
        if let Some((s, bufs)) = self.free_slots.lock().pop() {
            return (s, bufs.unwrap_or_else(|| Box::new(TxnBufs::new(&self.proto))));
        }
        (self.new_slot(), Box::new(TxnBufs::new(&self.proto)))
    }

    /// A new slot, known to reclamation and to the commit gate.
    pub(super) fn new_slot(&self) -> Arc<Slot<P>> {
        let s = Arc::new(Slot {
            worker: self.proto.new_worker(),
            lane: OnceLock::new(),
            since: AtomicU64::new(IDLE),
            committing: AtomicBool::new(false),
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

    pub(crate) fn return_slot(&self, slot: Arc<Slot<P>>, bufs: Option<Box<TxnBufs<P>>>) {
        self.free_slots.lock().push((slot, bufs));
    }
}
