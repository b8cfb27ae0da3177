//! A transaction of the generic engine: reads, writes, inserts through placeholders and
//! gap protection (phantoms), over the protocol chosen for the database.

use super::*;

/// Where a transaction's buffers go back when it ends.
pub(crate) enum Home<'a, P: Protocol> {
    /// A [`crate::db::TypedWorker`]'s: its buffers and slot are reused.
    Worker(&'a mut Option<Box<TxnBufs<P>>>),
    /// [`crate::db::TypedDb::begin`]: the slot returns to the pool.
    Pool(Arc<Slot<P>>),
}

/// A transaction of the generic engine. See [`crate::db::Txn`] for the documented API.
pub struct TypedTxn<'a, P: Protocol> {
    pub(super) eng: &'a Engine<P>,
    pub(super) slot: *const Slot<P>,
    pub(super) bufs: Option<Box<TxnBufs<P>>>,
    pub(super) home: Option<Home<'a, P>>,
    pub(super) active: bool,
    /// Operations since the last explicit collection of epoch garbage.
    pub(super) ops: u32,
    /// Why an operation returned [`Access::Failed`] (loading a page failed).
    pub(super) failure: Option<Error>,
    /// A snapshot read transaction's `T` ([`TypedTxn::start_as`]): its reads see the
    /// state as of `T`, record nothing, never conflict; it cannot write.
    pub(super) snap: Option<u64>,
    /// What its commit promises, if the transaction chose ([`TypedTxn::set_durability`]);
    /// the database's durability otherwise.
    pub(super) durability: Option<Durability>,
}

// SAFETY: a transaction holds no epoch guard (each operation pins its own) and no
// thread-local state; its raw pointers name records kept allocated while it runs (see
// `Engine::retire`) and its slot, kept alive by `home`. The C and Python bindings hold
// transactions across calls from any thread.
unsafe impl<P: Protocol> Send for TypedTxn<'_, P> {}

/// Operations between explicit epoch collections: crossbeam collects a few bags of garbage
/// every 128 outermost pins, slower than index operations make garbage, so a transaction
/// helps it along.
pub(super) const OPS_PER_COLLECT: u32 = 32;

/// One entry of an index batch ([`BwTree::apply_batch`]): insert (where absent) or delete.
pub(super) type IndexEdit<'k, R> = (&'k [u8], Option<RecPtr<R>>);

/// Records a load inserts into the index per batch.
pub(super) const LOAD_BATCH: usize = 1024;

/// Hands the epoch collector enough turns to keep up with `writes` index changes made
/// under one pin (a range loaded or evicted). Each turn frees at most 8 bags of 64 deferred
/// destructions (crossbeam-epoch's `COLLECT_STEPS`), and a turn comes only every 32
/// operations ([`OPS_PER_COLLECT`]): without this, loads and evictions, which defer a few
/// nodes per record, outran collection and garbage grew without bound (gigabytes of
/// retired Bw-tree nodes under a cache of a few MiB).
pub(super) fn collect_garbage(writes: usize) {
    let guard = epoch::pin();
    for _ in 0..writes / 128 + 1 {
        guard.flush();
    }
}

impl<'a, P: Protocol> TypedTxn<'a, P> {
    pub(crate) fn start(eng: &'a Engine<P>, slot: &Slot<P>, bufs: Box<TxnBufs<P>>, home: Home<'a, P>) -> Self {
        Self::start_as(eng, slot, bufs, home, false)
    }

    /// Starts a transaction, or with `snapshot` a snapshot read transaction (see
    /// [`crate::cc::snapshot`]).
    pub(crate) fn start_as(
        eng: &'a Engine<P>,
        slot: &Slot<P>,
        mut bufs: Box<TxnBufs<P>>,
        home: Home<'a, P>,
        snapshot: bool,
    ) -> Self {
        eng.enter(slot);
        bufs.clear();
        let snap = if snapshot {
            Some(eng.proto.snapshot_open(&slot.worker, &mut bufs.st))
        } else {
            eng.proto.begin(&slot.worker, &mut bufs.st);
            None
        };
        TypedTxn {
            eng,
            slot,
            bufs: Some(bufs),
            home: Some(home),
            active: true,
            ops: 0,
            failure: None,
            snap,
            durability: None,
        }
    }

    /// Pins the epoch for one operation. Under NLR group commit it also names this
    /// database to the thread's lock-wait hook (its waits flush this database's lanes).
    pub(super) fn pin(&mut self) -> Guard {
        self.eng.install_lock_waiter();
        let guard = epoch::pin();
        self.ops += 1;
        if self.ops >= OPS_PER_COLLECT {
            self.ops = 0;
            guard.flush();
        }
        guard
    }

    pub(super) fn worker(&self) -> &P::Worker {
        // SAFETY: the slot is kept alive by `home` (a worker's Arc or the pool Arc).
        unsafe { &(*self.slot).worker }
    }

    pub(super) fn b(&mut self) -> &mut TxnBufs<P> {
        self.bufs.as_mut().expect("buffers present while the transaction lives")
    }

    pub(super) fn check_active(&self) -> Result<(), Error> {
        if self.active {
            Ok(())
        } else {
            Err(Error::TxnFinished)
        }
    }

    /// [`check_active`](Self::check_active) for a write: also refused on a read-only
    /// database.
    pub(super) fn check_writable(&self) -> Result<(), Error> {
        self.check_active()?;
        if self.eng.read_only || self.snap.is_some() {
            return Err(Error::ReadOnly);
        }
        Ok(())
    }

    /// Ends the transaction after a conflict met during an operation.
    pub(super) fn fail<T>(&mut self, c: Conflict) -> Result<T, Error> {
        self.rollback();
        // NLR group commit: the conflict may be with held locks (this worker's own, or an
        // idle one's) that only a flush releases (Algorithm 3: flush early when a lock is
        // busy); a no-wait retry would otherwise meet them again.
        if let Some(d) = self.eng.durable.as_ref().filter(|d| d.wal.holds_locks()) {
            // SAFETY: the slot outlives the transaction (see `worker`).
            if let Some(lane) = unsafe { &*self.slot }.lane.get() {
                d.wal.flush_lane(lane, false)?;
            }
            crate::cc::LockWaiter::on_lock_wait(&*d.wal);
        }
        Err(Error::Conflict(c))
    }

    /// Ends the transaction after an operation failed with [`Access::Failed`].
    pub(super) fn failed<T>(&mut self) -> Result<T, Error> {
        self.rollback();
        Err(self.failure.take().unwrap_or_else(|| Error::Corrupt("loading a page failed".into())))
    }

    /// [`Engine::loaded`] for an operation: a failure is kept for [`failed`](Self::failed).
    #[inline]
    pub(super) fn loaded(&mut self, from: &[u8], to: Option<&[u8]>) -> Result<bool, Access> {
        self.eng.loaded(from, to).map_err(|e| match e {
            Error::Conflict(c) => Access::Conflict(c),
            e => {
                self.failure = Some(e);
                Access::Failed
            }
        })
    }

    /// Reads `rec`, the record of `key` (own write first). `Ok(None)`: absent.
    pub(super) fn read_rec(
        &mut self,
        key: &[u8],
        rec: &P::Record,
        want: bool,
        guard: &Guard,
    ) -> Result<Option<Vec<u8>>, Access> {
        let mut value = Vec::new();
        let present = self.read_rec_into(key, rec, want.then_some(&mut value), guard)?;
        Ok(present.then_some(value))
    }

    /// [`read_rec`](Self::read_rec), appending the value to `out` (when given): returns
    /// whether the key is present.
    pub(super) fn read_rec_into(
        &mut self,
        key: &[u8],
        rec: &P::Record,
        out: Option<&mut Vec<u8>>,
        guard: &Guard,
    ) -> Result<bool, Access> {
        let eng = self.eng;
        if let Some(t) = self.snap {
            let b = self.bufs.as_mut().expect("buffers");
            return eng.proto.snapshot_read(&mut b.st, rec, t, out, guard);
        }
        if let Some((i, _)) = self.own_rebound(key, rec)? {
            if let WriteKind::Value(v) = &self.b().writes[i].kind {
                if let (Some(out), Some(v)) = (out, v) {
                    out.extend_from_slice(v);
                }
                return Ok(v.is_some());
            }
        }
        let b = self.bufs.as_mut().expect("buffers");
        eng.proto.read(&mut b.st, rec, out, guard)
    }

    /// Reads the gap where `key` would be. `Ok(Some(rec))`: the key exists after all.
    pub(super) fn read_missing(
        &mut self,
        key: &[u8],
        since: u64,
        guard: &Guard,
    ) -> Result<Option<&'a P::Record>, Access> {
        let eng = self.eng;
        if !eng.proto.gap_protection() || self.snap.is_some() {
            // No follower to re-check (a snapshot reads no gap: a key inserted later is
            // absent at its `T`): the load count vouches that the lookup (made after
            // `since`) saw the range whole.
            eng.pause_after_miss();
            return match self.loaded(key, Some(key))? {
                true if eng.no_load_since(since) => Ok(None),
                // Loaded just now, or came back since the lookup: the key may be there.
                _ => Err(Access::Removed),
            };
        }
        let mut nk = std::mem::take(&mut self.b().key_buf);
        let r = self.read_missing_with(key, &mut nk, guard);
        self.b().key_buf = nk;
        r
    }

    pub(super) fn read_missing_with(
        &mut self,
        key: &[u8],
        nk: &mut Vec<u8>,
        guard: &Guard,
    ) -> Result<Option<&'a P::Record>, Access> {
        let eng = self.eng;
        loop {
            let since = eng.load_count();
            let (exact, next) = eng.next_record(key, false, Some(nk), guard);
            if exact {
                return Ok(Some(next));
            }
            eng.pause_after_miss();
            // The follower owns the gap only if nothing unloaded lies before it.
            if !self.loaded(key, (!eng.is_sentinel(next)).then_some(nk.as_slice()))? {
                continue;
            }
            match self.read_rec(nk, next, false, guard) {
                Ok(_) => {}
                Err(Access::Removed) => continue,
                Err(e) => return Err(e),
            }
            // Membership re-check: an insert that entered the index before this point has
            // to write `next` at its commit, which the read above then conflicts with. And
            // no range came back since the lookup (it could have left again by now).
            if std::ptr::eq(eng.next_record(key, false, None, guard).1, next) && eng.no_load_since(since) {
                return Ok(None);
            }
        }
    }

    /// The write-set entry of `rec`, the record of `key`. A record the transaction wrote
    /// may have left memory since (eviction takes records that are not locked, and the
    /// optimistic protocols lock only at commit) and `rec` be its reloaded successor: the
    /// entry then moves to `rec` (by key), so that the transaction reads its own write and
    /// writes the key once. Only when an eviction happened since the first write. Says
    /// the entry's place, and whether it moved.
    pub(super) fn own_rebound(&mut self, key: &[u8], rec: &P::Record) -> Result<Option<(usize, bool)>, Access> {
        self.own_rebound_as(key, rec, false)
    }

    /// [`own_rebound`](Self::own_rebound); `placed`: `rec` is the placeholder this
    /// transaction just put into the index, in no entry yet, so the search by address is
    /// skipped (in a transaction of 1M new keys it missed the cache on every put: a tenth
    /// of a bulk load).
    fn own_rebound_as(&mut self, key: &[u8], rec: &P::Record, placed: bool) -> Result<Option<(usize, bool)>, Access> {
        let p = rec as *const P::Record;
        let eng = self.eng;
        let b = self.bufs.as_mut().expect("buffers");
        if !placed {
            if let Some(i) = b.own(p) {
                return Ok(Some((i, false)));
            }
        }
        if b.writes.is_empty()
            || eng.residency.is_none()
            || eng.is_sentinel(rec)
            || eng.counters.ranges_evicted.load(Ordering::Acquire) == b.evict_mark
        {
            return Ok(None);
        }
        let found = if b.writes.len() <= WRITE_SCAN_MAX {
            (0..b.writes.len()).find(|&i| b.key_of(i) == key)
        } else {
            if b.key_pos.is_empty() {
                for i in 0..b.writes.len() {
                    b.index_key(i);
                }
            }
            b.find_key(key)
        };
        let Some(i) = found else { return Ok(None) };
        eng.proto.write(&mut b.st, rec)?;
        let old = std::mem::replace(&mut b.writes[i].rec, p);
        if std::mem::take(&mut b.writes[i].created) {
            // The placeholder stays this transaction's to unlink.
            b.created.push((b.writes[i].key, old));
        }
        if b.writes.len() > WRITE_SCAN_MAX {
            if let Ok(e) = b.write_pos.find_entry(addr_hash(old as usize), |&j| j as usize == i) {
                e.remove();
            }
            b.index_write(i);
        }
        Ok(Some((i, true)))
    }

    /// Moves the write-set entries whose records left memory since they were written to
    /// their keys' records now (see [`own_rebound`](Self::own_rebound)), before commit
    /// locks them. A key that is gone meanwhile is a conflict.
    pub(super) fn rebind_evicted(&mut self, guard: &Guard) -> Result<(), Access> {
        let eng = self.eng;
        if eng.residency.is_none() || eng.counters.ranges_evicted.load(Ordering::Acquire) == self.b().evict_mark {
            return Ok(());
        }
        let mut key = Vec::new();
        for i in 0..self.b().writes.len() {
            key.clear();
            key.extend_from_slice(self.b().key_of(i));
            let r = loop {
                match eng.lookup(&key, guard) {
                    Some(rec) if std::ptr::eq(rec, self.b().writes[i].rec) => break Ok(()),
                    Some(rec) => {
                        // SAFETY: records stay allocated while the transaction runs.
                        let rec: &'a P::Record = unsafe { &*(rec as *const P::Record) };
                        break self.own_rebound(&key, rec).map(|_| ());
                    }
                    None => match self.loaded(&key, Some(&key)) {
                        Ok(true) => break Err(Access::Conflict(Conflict::WriteWrite)),
                        Ok(false) => continue,
                        Err(e) => break Err(e),
                    },
                }
            };
            r?;
        }
        Ok(())
    }

    /// Adds (or upgrades) a write-set entry; says whether the record had one already (not
    /// counting an entry that moved to it, see [`own_rebound`](Self::own_rebound)).
    pub(super) fn add_write(&mut self, key: &[u8], rec: &P::Record, write: Write<'_>) -> Result<bool, Access> {
        let p = rec as *const P::Record;
        let eng = self.eng;
        // A put's placeholder, made just before, is the last of `created`: its entry takes
        // the key already in the arena and the placeholder's place there (below).
        let placed = matches!(self.b().created.last(), Some(&(_, r)) if r == p);
        debug_assert!(!placed || self.b().own(p).is_none(), "a placeholder is in no write-set entry");
        let own = self.own_rebound_as(key, rec, placed)?;
        // A pop's kept scan may hold this record, or miss one that becomes visible.
        self.drop_pop_scans();
        let b = self.b();
        if let Write::Value(Some(_)) | Write::New(_) = write {
            // A record may become visible where a scan found none.
            b.skips = Default::default();
        }
        let kind = |b: &mut TxnBufs<P>| match write {
            Write::Value(v) => WriteKind::Value(v.map(|v| WriteValue::Owned(b.copy_of(v)))),
            Write::New(v) => {
                let staged = P::value_cell(rec).and_then(|c| c.stage(v));
                WriteKind::Value(Some(staged.unwrap_or_else(|| WriteValue::Owned(b.copy_of(v)))))
            }
            Write::Gap => WriteKind::Gap,
        };
        if let Some((i, moved)) = own {
            if let Write::Value(_) | Write::New(_) = write {
                let new = kind(b);
                if let WriteKind::Value(Some(WriteValue::Owned(old))) = std::mem::replace(&mut b.writes[i].kind, new) {
                    TxnBufs::<P>::recycle(&mut b.spare, old);
                }
            }
            return Ok(!moved);
        }
        eng.proto.write(&mut b.st, rec)?;
        if b.writes.is_empty() {
            b.evict_mark = eng.counters.ranges_evicted.load(Ordering::Acquire);
        }
        let kind = kind(b);
        // (`own_rebound_as` returned `None`: `created` is as `placed` found it.)
        let (key, created) = match b.created.pop_if(|_| placed) {
            Some((at, _)) => (at, true),
            None => (KeyAt::push(&mut b.keys, key), false),
        };
        b.writes.push(WriteEntry { rec: p, key, kind, present: false, created });
        if !b.key_pos.is_empty() {
            b.index_key(b.writes.len() - 1);
        }
        let n = b.writes.len();
        if n == WRITE_SCAN_MAX + 1 {
            for i in 0..n {
                b.index_write(i);
            }
        } else if n > WRITE_SCAN_MAX + 1 {
            b.index_write(n - 1);
        }
        Ok(false)
    }

    /// Finds the record of `key`, or puts a placeholder for it into the index: one descent
    /// for a key that exists, and the follower found by the same descent for one that does
    /// not. A placeholder has room for a value of `reserve` bytes in its own allocation
    /// (the length of the value being written; see [`crate::cc::alloc_new`]).
    pub(super) fn place(&mut self, key: &[u8], reserve: usize, guard: &Guard) -> Result<Place<'a, P::Record>, Access> {
        let since = self.eng.load_count();
        let mut at = self.eng.index.cursor(key, guard);
        self.place_at(&mut at, key, since, reserve, guard)
    }

    /// [`place`](Self::place) from a cursor at `key`'s leaf: the follower lookup, its
    /// re-check under the latch and the insert all start from that leaf. `since`: the load
    /// count taken before the cursor was placed.
    pub(super) fn place_at(
        &mut self,
        at: &mut Cursor<'_, '_, RecPtr<P::Record>>,
        key: &[u8],
        since: u64,
        reserve: usize,
        guard: &Guard,
    ) -> Result<Place<'a, P::Record>, Access> {
        let mut nk = std::mem::take(&mut self.b().key_buf);
        let r = self.place_with(at, key, since, reserve, &mut nk, guard);
        self.b().key_buf = nk;
        r
    }

    pub(super) fn place_with(
        &mut self,
        at: &mut Cursor<'_, '_, RecPtr<P::Record>>,
        key: &[u8],
        mut since: u64,
        reserve: usize,
        nk: &mut Vec<u8>,
        guard: &Guard,
    ) -> Result<Place<'a, P::Record>, Access> {
        let eng = self.eng;
        let mut first = true;
        loop {
            if !std::mem::take(&mut first) {
                since = eng.load_count();
                at.refresh();
            }
            let (exact, next) = eng.next_record_at(at, key, Some(nk));
            if exact {
                // SAFETY: records stay allocated while the transaction runs (`Engine::retire`).
                return Ok(Place::Existing(unsafe { &*(next as *const P::Record) }));
            }
            eng.pause_after_miss();
            // The key's range, and every one before its follower, must be in the index, and
            // have been since the lookup.
            if !self.loaded(key, (!eng.is_sentinel(next)).then_some(nk.as_slice()))? || !eng.no_load_since(since) {
                continue;
            }
            match eng.proto.latch_gap(&mut self.b().st, next) {
                Ok(()) => {}
                Err(Access::Removed) => continue,
                Err(e) => return Err(e),
            }
            // Unchanged leaf (the common case): the follower is still `next`.
            let (exact2, next2) = if at.refresh() { eng.next_record_at(at, key, None) } else { (false, next) };
            if !std::ptr::eq(next, next2) {
                eng.proto.unlatch_gap(&mut self.b().st, next);
                if exact2 {
                    // SAFETY: as above.
                    return Ok(Place::Existing(unsafe { &*(next2 as *const P::Record) }));
                }
                continue;
            }
            let rec = eng.allocated(crate::cc::alloc_new(&eng.proto, &mut self.b().st, reserve));
            let inserted = at.insert(RecPtr(rec)).unwrap_or(false);
            eng.proto.unlatch_gap(&mut self.b().st, next);
            if !inserted {
                // SAFETY: never published.
                unsafe { crate::cc::free_record_of::<P>(rec) };
                return Ok(Place::Retry);
            }
            // SAFETY: published in the index; freed only after this transaction ended.
            let r: &'a P::Record = unsafe { &*rec };
            eng.proto.created(&mut self.b().st, r);
            let b = self.b();
            let at = KeyAt::push(&mut b.keys, key);
            b.created.push((at, rec));
            if let Some(res) = &eng.residency {
                res.credit(key, (key.len() + RECORD_OVERHEAD) as i64, guard);
            }
            if !eng.proto.gap_protection() {
                return Ok(Place::New(r));
            }
            // A follower this transaction already wrote had the records beyond it written
            // then (see `gap_write_beyond`): walking them again made big transactions of
            // new keys quadratic.
            let walked = self.add_write(nk, next, Write::Gap)?;
            if !walked && eng.proto.is_fresh(next) && !eng.is_sentinel(next) {
                self.gap_write_beyond(nk, guard)?;
            }
            return Ok(Place::New(r));
        }
    }

    /// Gap-writes the records after `key` up to and including the first one that has been
    /// committed (or the sentinel). Needed when the transaction makes a key present that
    /// an uncommitted placeholder stood for: readers that saw the gap before the placeholder
    /// existed relied on that farther record.
    pub(super) fn gap_write_beyond(&mut self, key: &[u8], guard: &Guard) -> Result<(), Access> {
        let eng = self.eng;
        let mut at_key = key.to_vec();
        let mut k = Vec::new();
        loop {
            let since = eng.load_count();
            let (_, next) = eng.next_record(&at_key, true, Some(&mut k), guard);
            if !self.loaded(&at_key, (!eng.is_sentinel(next)).then_some(k.as_slice()))? || !eng.no_load_since(since) {
                continue;
            }
            if self.b().own(next as *const P::Record).is_some() {
                // Already in the write set: whenever a fresh record enters it, the records
                // beyond it up to a committed one are written too, and a record inserted
                // beyond it since then did not exist when a reader could have relied on it
                // for this gap (this one stood in between).
                return Ok(());
            }
            self.add_write(&k, next, Write::Gap)?;
            if eng.is_sentinel(next) || !eng.proto.is_fresh(next) {
                return Ok(());
            }
            std::mem::swap(&mut at_key, &mut k);
        }
    }

    /// A value write of an existing record; if that record is an uncommitted placeholder
    /// (someone else's insert, pending or aborted), the write is an insert into the gap it
    /// stands in, so the gap owner beyond it is written too.
    pub(super) fn write_existing(
        &mut self,
        key: &[u8],
        rec: &P::Record,
        value: Option<&[u8]>,
        guard: &Guard,
    ) -> Result<(), Access> {
        let fresh = value.is_some() && self.eng.proto.gap_protection() && self.eng.proto.is_fresh(rec);
        self.add_write(key, rec, Write::Value(value))?;
        if fresh {
            self.gap_write_beyond(key, guard)?;
        }
        Ok(())
    }

    /// The value of `key`.
    pub fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        let mut value = Vec::new();
        Ok(self.get_into(key, &mut value)?.then_some(value))
    }

    /// A snapshot's number of present keys, from the protocol's count (no scan); `None`
    /// for a transaction that is not a snapshot, or a protocol that keeps no count.
    pub fn snapshot_count(&self) -> Result<Option<u64>, Error> {
        self.check_active()?;
        Ok(self.snap.and_then(|t| self.eng.proto.snapshot_count(t)))
    }

    /// Appends the value of `key` to `out`; returns whether the key is present.
    pub fn get_into(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, Error> {
        self.check_active()?;
        check_key(key)?;
        let guard = &self.pin();
        let since = self.eng.load_count();
        let found = self.eng.lookup(key, guard);
        self.read_found(key, found, since, out, guard)
    }

    /// Appends the values of `keys` to `out`, one after another, under one epoch pin;
    /// `lens` gets each one's length (`None`: absent). The descents of a few keys go
    /// first, each asking for its record's lines, then their reads: the records' misses
    /// overlap instead of following one another.
    pub fn get_many_into<K: AsRef<[u8]>>(
        &mut self,
        keys: &[K],
        out: &mut Vec<u8>,
        lens: &mut Vec<Option<usize>>,
    ) -> Result<(), Error> {
        /// Keys whose descents run before their reads.
        const GROUP: usize = 8;
        self.check_active()?;
        keys.iter().try_for_each(|k| check_key(k.as_ref()))?;
        let guard = &self.pin();
        let mut found: [(u64, Option<&'a P::Record>); GROUP] = [(0, None); GROUP];
        for group in keys.chunks(GROUP) {
            for (f, k) in found.iter_mut().zip(group) {
                let since = self.eng.load_count();
                *f = (since, self.eng.lookup(k.as_ref(), guard));
            }
            for (&(since, rec), k) in found.iter().zip(group) {
                let base = out.len();
                let present = self.read_found(k.as_ref(), rec, since, out, guard)?;
                lens.push(present.then(|| out.len() - base));
            }
        }
        Ok(())
    }

    /// Reads `key`, whose lookup (after the load count was `since`) gave `found`: its value
    /// appended to `out`; whether it is present. Looks up again when the record left.
    fn read_found(
        &mut self,
        key: &[u8],
        found: Option<&'a P::Record>,
        since: u64,
        out: &mut Vec<u8>,
        guard: &Guard,
    ) -> Result<bool, Error> {
        let base = out.len();
        let mut first = Some((since, found));
        loop {
            out.truncate(base);
            // The caller's lookup first; after a record left, a new one.
            let (since, found) = first.take().unwrap_or_else(|| (self.eng.load_count(), self.eng.lookup(key, guard)));
            let rec = match found {
                Some(r) => r,
                None => match self.read_missing(key, since, guard) {
                    Ok(None) => return Ok(false),
                    Ok(Some(r)) => r,
                    Err(Access::Removed) => continue,
                    Err(Access::Conflict(c)) => return self.fail(c),
                    Err(Access::Failed) => return self.failed(),
                },
            };
            match self.read_rec_into(key, rec, Some(out), guard) {
                Ok(present) => return Ok(present),
                Err(Access::Removed) => continue,
                Err(Access::Conflict(c)) => return self.fail(c),
                Err(Access::Failed) => return self.failed(),
            }
        }
    }

    /// Stores `value` under `key` (a blind write: nothing is read).
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), Error> {
        self.check_writable()?;
        check_key(key)?;
        check_value(value)?;
        let guard = &self.pin();
        let eng = self.eng;
        loop {
            // One descent serves both cases: an existing key (an update) is found by a plain
            // lookup in the leaf, cheaper than the successor search a new key needs; after
            // an insert, the next put is likely one too and goes to the successor search.
            let since = eng.load_count();
            let b = self.b();
            let mut at = b.put_trail.cursor(&eng.index, key, guard);
            let existing = if b.last_put_new { None } else { at.get() };
            if let Some(r) = existing {
                // SAFETY: records stay allocated while the transaction runs (`Engine::retire`).
                let r: &'a P::Record = unsafe { &*r.0 };
                match self.write_existing(key, r, Some(value), guard) {
                    Ok(()) => return Ok(()),
                    Err(Access::Removed) => continue,
                    Err(Access::Conflict(c)) => return self.fail(c),
                    Err(Access::Failed) => return self.failed(),
                }
            }
            let placed = self.place_at(&mut at, key, since, value.len(), guard);
            self.b().last_put_new = matches!(placed, Ok(Place::New(_)));
            let step = match placed {
                Ok(Place::Existing(r)) => self.write_existing(key, r, Some(value), guard),
                Ok(Place::New(r)) => self.add_write(key, r, Write::New(value)).map(|_| ()),
                Ok(Place::Retry) => Err(Access::Removed),
                Err(e) => Err(e),
            };
            match step {
                Ok(()) => return Ok(()),
                Err(Access::Removed) => continue,
                Err(Access::Conflict(c)) => return self.fail(c),
                Err(Access::Failed) => return self.failed(),
            }
        }
    }

    /// Conditional write: `value` is `Some` for insert/update, `None` for delete; the write
    /// happens only if the key's presence is `want_present`. Returns whether it happened.
    pub(super) fn write_if(&mut self, key: &[u8], value: Option<&[u8]>, want_present: bool) -> Result<bool, Error> {
        self.check_writable()?;
        check_key(key)?;
        if let Some(v) = value {
            check_value(v)?;
        }
        let guard = &self.pin();
        loop {
            let since = self.eng.load_count();
            let step = match self.eng.lookup(key, guard) {
                Some(rec) => match self.read_rec(key, rec, false, guard) {
                    Ok(cur) if cur.is_some() == want_present => {
                        self.write_existing(key, rec, value, guard).map(|()| true)
                    }
                    Ok(_) => Ok(false),
                    Err(e) => Err(e),
                },
                None if want_present => match self.read_missing(key, since, guard) {
                    Ok(None) => Ok(false),
                    Ok(Some(_)) => Err(Access::Removed), // appeared: look again
                    Err(e) => Err(e),
                },
                None => match self.place(key, value.map_or(0, <[u8]>::len), guard) {
                    Ok(Place::New(rec)) => {
                        let w = value.map_or(Write::Value(None), Write::New);
                        self.add_write(key, rec, w).map(|_| true)
                    }
                    Ok(Place::Existing(_) | Place::Retry) => Err(Access::Removed), // look again
                    Err(e) => Err(e),
                },
            };
            match step {
                Ok(done) => return Ok(done),
                Err(Access::Removed) => continue,
                Err(Access::Conflict(c)) => return self.fail(c),
                Err(Access::Failed) => return self.failed(),
            }
        }
    }

    /// Inserts `key` only if it is absent; returns whether it did.
    pub fn insert(&mut self, key: &[u8], value: &[u8]) -> Result<bool, Error> {
        self.write_if(key, Some(value), false)
    }

    /// Replaces the value of `key` only if it is present; returns whether it did.
    pub fn update(&mut self, key: &[u8], value: &[u8]) -> Result<bool, Error> {
        self.write_if(key, Some(value), true)
    }

    /// Deletes `key` if present; returns whether it was.
    pub fn delete(&mut self, key: &[u8]) -> Result<bool, Error> {
        self.write_if(key, None, true)
    }
}
