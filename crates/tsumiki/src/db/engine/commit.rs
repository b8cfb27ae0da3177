//! Committing and rolling back a transaction: the protocol's validation and install, the
//! logging step that appends the record while the locks are held, unlinks of what it deleted.

use super::*;

/// The logging step of one commit: appends the record while the locks are held; under
/// NLR also makes it durable before the protocol installs anything.
struct LogHook<'w> {
    wal: &'w Wal,
    /// Marks the ranges of written keys dirty (databases with pages).
    residency: Option<&'w Residency>,
    guard: &'w Guard,
    lane: &'w Arc<Lane>,
    /// The write set's key arena.
    keys: &'w [u8],
    private: bool,
    /// NLR group commit: locks stay held until the group is durable.
    hold: bool,
    /// NLR without held locks: what this commit promises (the transaction's durability).
    level: Durability,
    kept: Vec<(*const AtomicU64, u64)>,
    /// Lane sequence number and LSN / timestamp of the appended record.
    done: Option<(u64, u64)>,
    err: Option<Error>,
}

impl<R> CommitLog<R> for LogHook<'_> {
    fn hold(&self) -> bool {
        self.hold
    }

    fn keep_locked(&mut self, word: &AtomicU64, release: u64) {
        self.kept.push((word, release));
    }

    fn log(&mut self, ts: u64, writes: &[WriteEntry<R>]) -> bool {
        if let Some(res) = self.residency {
            // The records are locked here, and checkpoints wait for this commit: the
            // generation is the one its record goes to.
            let generation = self.wal.generation();
            for w in writes.iter().filter(|w| matches!(w.kind, WriteKind::Value(_))) {
                res.mark_dirty(w.key.of(self.keys), generation, self.guard);
            }
        }
        let r = self.append(ts, writes);
        match r {
            Ok(()) => true,
            Err(e) => {
                self.err = Some(e);
                false
            }
        }
    }
}

impl LogHook<'_> {
    /// Appends the record and, under NLR, makes it as durable as the commit promises,
    /// keeping the rule that a crash never leaves a commit without an earlier one (see
    /// [`Wal::claim_unsynced`]).
    fn append<R>(&mut self, ts: u64, writes: &[WriteEntry<R>]) -> Result<(), Error> {
        let wal = self.wal;
        if !wal.policy.flushes_each_commit() {
            self.done = Some(wal.append(self.lane, ts, writes, self.keys, wal.policy.durability)?);
            return Ok(());
        }
        let unsynced = wal.policy.syncs() && self.level != Durability::Sync;
        let claim = if unsynced {
            Some(wal.claim_unsynced(self.lane)?)
        } else {
            if self.level == Durability::Sync {
                wal.settle_unsynced(self.lane)?;
            }
            None
        };
        let (seq, order) = wal.append(self.lane, ts, writes, self.keys, self.level)?;
        drop(claim);
        self.done = Some((seq, order));
        wal.flush_to_as(self.lane, seq, self.private, self.level)
    }
}

impl<'a, P: Protocol> TypedTxn<'a, P> {
    /// Sets what this transaction's commit promises, instead of the database's
    /// durability; see [`crate::db::Txn::set_durability`].
    pub fn set_durability(&mut self, level: Durability) {
        self.durability = Some(level);
    }

    /// What the commit promises: the transaction's choice, or the database's durability
    /// (always under Algorithm 3, which groups every commit already and orders nothing
    /// across lanes but by held locks).
    fn level(&self, wal: &Wal) -> Durability {
        let db_level = wal.policy.durability;
        if wal.holds_locks() {
            db_level
        } else {
            self.durability.unwrap_or(db_level)
        }
    }

    /// Commits; on a conflict the transaction is rolled back and `Error::Conflict` returned.
    /// Returns once the commit is durable (per the database's durability setting).
    pub fn commit(self) -> Result<(), Error> {
        let eng = self.eng;
        let r = self.commit_inner(false).and_then(CommitTicket::wait);
        eng.throttle_log();
        r
    }

    /// Commits without waiting for durability; see [`crate::db::Txn::commit_deferred`].
    pub fn commit_deferred(self) -> Result<CommitTicket, Error> {
        let eng = self.eng;
        let r = self.commit_inner(true);
        eng.throttle_log();
        r
    }

    /// Unlinks a commit makes under one pin before renewing it (see `commit_inner`).
    const UNLINKS_PER_PIN: usize = 128;

    /// Renews `pinned` after every [`UNLINKS_PER_PIN`](Self::UNLINKS_PER_PIN) unlinks
    /// (`done` so far): what they retired is freed as a big transaction goes, not at its end.
    fn renew_pin(pinned: &mut Guard, done: usize) {
        if done.is_multiple_of(Self::UNLINKS_PER_PIN) {
            pinned.repin();
            pinned.flush();
        }
    }

    pub(super) fn commit_inner(mut self, deferred: bool) -> Result<CommitTicket, Error> {
        self.check_active()?;
        if self.snap.is_some() {
            // Nothing to validate or install: the snapshot just ends.
            self.rollback();
            return Ok(CommitTicket::ready());
        }
        let eng: &'a Engine<P> = self.eng;
        let worker = self.worker() as *const P::Worker;
        // SAFETY: the slot outlives the transaction (see `worker`).
        let worker = unsafe { &*worker };
        let mut pinned = self.pin();
        let guard = &pinned;
        match self.rebind_evicted(guard) {
            Ok(()) => {}
            Err(Access::Conflict(c)) => return self.fail(c),
            Err(Access::Removed) => return self.fail(Conflict::WriteWrite),
            Err(Access::Failed) => return self.failed(),
        }
        let b = self.bufs.as_mut().expect("buffers");
        // Whether the writes came in key order (a retain, pops): the unlinks below then
        // find key order without comparing keys. Asked only of a write set with two
        // deletes or more (a sorted load's compared every pair of keys for nothing); stops
        // at the first pair out of order.
        let deletes = b.writes.iter().filter(|w| matches!(w.kind, WriteKind::Value(None)));
        let written_in_key_order =
            deletes.take(2).count() == 2 && b.writes.windows(2).all(|w| w[0].key.of(&b.keys) <= w[1].key.of(&b.keys));
        b.writes.sort_unstable_by_key(|w| w.rec as usize);
        let wal = eng.durable.as_ref().map(|d| &d.wal).filter(|w| w.policy.logs());
        let logged = wal.is_some() && b.writes.iter().any(|w| matches!(w.kind, WriteKind::Value(_)));
        let mut ticket = CommitTicket::ready();
        if logged {
            let wal = wal.expect("logged implies a log");
            // SAFETY: as for `worker`.
            let slot = unsafe { &*self.slot };
            let lane = match wal.lane_for(&slot.lane) {
                Ok(l) => l,
                Err(e) => {
                    self.rollback();
                    return Err(e);
                }
            };
            let private = wal.policy.private_lanes();
            let hold = wal.holds_locks();
            let db_level = wal.policy.durability;
            // A deferred commit under NLR waits in memory for its ticket (or a later synced
            // commit); under ELR, a commit that promises less than the database is a deferred
            // one whose ticket nobody waits on.
            let level = match self.durability {
                None if deferred && wal.policy.flushes_each_commit() && db_level == Durability::Sync => {
                    Durability::None
                }
                _ => self.level(wal),
            };
            let relaxed = wal.policy.elr() && level != db_level && level != Durability::Sync;
            let asked_deferred = deferred;
            let deferred = deferred || relaxed;
            let b = self.bufs.as_mut().expect("buffers");
            let mut hook = LogHook {
                wal,
                residency: eng.residency.as_ref(),
                guard,
                lane: &lane,
                keys: &b.keys,
                private,
                hold,
                level,
                kept: Vec::new(),
                done: None,
                err: None,
            };
            eng.enter_commit(slot);
            let r = eng.proto.commit(worker, &mut b.st, &mut b.writes, guard, &mut hook);
            slot.committing.store(false, Ordering::Release);
            if r.is_ok() && hold {
                let (seq, order) = hook.done.expect("a logged commit appended its record");
                for &(word, release) in &hook.kept {
                    // SAFETY: the record is locked (so never unlinked) and pinned.
                    wal.hold_lock(&lane, seq, unsafe { &*word }, release);
                }
                let r = if deferred { wal.maybe_flush(&lane) } else { wal.flush_to(&lane, seq, true) };
                if let Err(e) = r {
                    hook.err = Some(e);
                }
                ticket = CommitTicket { wait: Some((wal.clone(), lane.clone(), seq, order)) };
            } else if r.is_ok() && wal.policy.elr() {
                let (seq, lsn) = hook.done.expect("a logged commit appended its record");
                if deferred {
                    if let Err(e) = wal.maybe_flush(&lane) {
                        hook.err = Some(e);
                    }
                } else if let Err(e) = wal.flush_to(&lane, seq, private) {
                    hook.err = Some(e);
                }
                ticket = CommitTicket { wait: Some((wal.clone(), lane.clone(), seq, lsn)) };
            } else if r.is_ok() && asked_deferred && level != Durability::Sync {
                // NLR: the ticket syncs the lane up to the record.
                let (seq, order) = hook.done.expect("a logged commit appended its record");
                ticket = CommitTicket { wait: Some((wal.clone(), lane.clone(), seq, order)) };
            }
            if relaxed && !asked_deferred {
                // Promised less than the database's durability: nothing to wait for.
                ticket = CommitTicket::ready();
            }
            match (r, hook.err.take()) {
                (Err(CommitFail::Conflict(c)), _) => return self.fail(c),
                (Err(CommitFail::Log), e) => {
                    // Nothing was installed: roll back.
                    self.rollback();
                    return Err(e.unwrap_or_else(|| wal.check().err().unwrap_or(Error::Poisoned(String::new().into()))));
                }
                (Ok(()), Some(e)) => {
                    // Installed and released (ELR), but the flush failed: never acknowledged,
                    // and the poisoned log refuses every later commit.
                    self.active = false;
                    return Err(e);
                }
                (Ok(()), None) => {}
            }
        } else {
            // SAFETY: as for `worker`.
            let slot = unsafe { &*self.slot };
            // Writes wait at the gate as logged ones do (an exclusive reader may hold it).
            let gated = !b.writes.is_empty();
            if gated {
                eng.enter_commit(slot);
            }
            let r = eng.proto.commit(worker, &mut b.st, &mut b.writes, guard, &mut NoLog);
            if gated {
                slot.committing.store(false, Ordering::Release);
            }
            match r {
                Err(CommitFail::Conflict(c)) => return self.fail(c),
                Err(CommitFail::Log) => unreachable!("NoLog never fails"),
                Ok(()) => {}
            }
            // A commit that logged nothing still makes the commits before it as durable as
            // it promises (its ticket does, if deferred): under NLR, every commit before it
            // (as a logged one does); otherwise the worker's deferred ones.
            if let (Some(wal), Some(lane)) = (wal, slot.lane.get()) {
                let (db_level, level) = (wal.policy.durability, self.level(wal));
                if wal.policy.flushes_each_commit() {
                    if deferred {
                        ticket = CommitTicket { wait: Some((wal.clone(), lane.clone(), wal.appended_of(lane), 0)) };
                    } else if level == Durability::Sync {
                        wal.settle_all_before(lane)?;
                    }
                } else if deferred || level == db_level || level == Durability::Sync {
                    if let Some((seq, lsn)) = wal.pending_of(lane) {
                        ticket = CommitTicket { wait: Some((wal.clone(), lane.clone(), seq, lsn)) };
                    }
                }
            }
        }
        self.active = false;
        // SAFETY: the slot outlives the transaction (see `worker`).
        unsafe { &*self.slot }.commits.fetch_add(1, Ordering::Relaxed);
        let b = self.bufs.as_mut().expect("buffers");
        // Deleted keys leave the index now (or soon, if a neighbour is busy): deletes, and
        // placeholders the transaction made but did not write. Named by their place (in the
        // write set, or past it among the placeholders): 4 bytes each, since what this list
        // adds to a commit's peak comes on top of what its unlinks retire.
        let deletes =
            (0..b.writes.len() as u32).filter(|&i| matches!(b.writes[i as usize].kind, WriteKind::Value(None)));
        let mut gone: Vec<u32> = Vec::with_capacity(deletes.clone().count());
        gone.extend(deletes);
        if let Some(res) = &eng.residency {
            for w in b.writes.iter().filter(|w| w.created) {
                if let Some(v) = w.kind.value() {
                    res.credit(w.key.of(&b.keys), v.len() as i64, &pinned);
                }
            }
        }
        // Placeholders with no write-set entry of their own (see `add_write`): the written
        // ones are credited, the others leave.
        for (c, &(key, rec)) in b.created.iter().enumerate() {
            match b.writes.binary_search_by_key(&(rec as usize), |w| w.rec as usize) {
                Ok(i) => {
                    if let (Some(res), Some(v)) = (&eng.residency, b.writes[i].kind.value()) {
                        res.credit(key.of(&b.keys), v.len() as i64, &pinned);
                    }
                }
                Err(_) => gone.push((b.writes.len() + c) as u32),
            }
        }
        let entry = |i: u32| match b.writes.get(i as usize) {
            Some(w) => (w.key.of(&b.keys), w.rec),
            None => {
                let (key, rec) = b.created[i as usize - b.writes.len()];
                (key.of(&b.keys), rec)
            }
        };
        // In key order, so that the unlinks of one leaf follow each other and skip the
        // descent (a retain's 500K unlinks in the write set's order each descended to a
        // random leaf); the pin renewed as they go (a transaction deleting 1M records grew
        // by 1.1 GB at its commit).
        if gone.len() > 1 {
            let pushed = |i: u32| match b.writes.get(i as usize) {
                Some(w) => w.key.pushed(),
                None => b.created[i as usize - b.writes.len()].0.pushed(),
            };
            // Keys in the order they were written is key order when the writes came so
            // (checked: placeholders may not have); else compare keys (a retain's 500K
            // deletes spent a tenth of it here).
            let in_order = written_in_key_order && {
                gone.sort_unstable_by_key(|&i| pushed(i));
                gone.is_sorted_by(|&x, &y| entry(x).0 <= entry(y).0)
            };
            if !in_order {
                gone.sort_unstable_by(|&x, &y| entry(x).0.cmp(entry(y).0));
            }
        }
        let mut trail = LeafTrail::default();
        let mut run = LeafRun::default();
        for (unlinked, &i) in gone.iter().enumerate() {
            let (key, rec) = entry(i);
            run.next = gone.get(unlinked + 1).map(|&j| entry(j).0);
            eng.try_unlink(worker, key, rec, &pinned, &mut trail, Some(&mut run));
            Self::renew_pin(&mut pinned, unlinked + 1);
        }
        eng.end_run(&mut run, &pinned);
        let guard = &pinned;
        eng.drain_pending_unlinks(worker, guard);
        if logged {
            eng.checkpoint_may_be_due();
        }
        Ok(ticket)
    }

    /// Rolls back: nothing the transaction wrote becomes visible.
    pub fn abort(mut self) {
        if self.active {
            self.rollback();
        }
    }

    pub(super) fn rollback(&mut self) {
        self.active = false;
        let eng = self.eng;
        let worker = self.worker() as *const P::Worker;
        // SAFETY: as in `commit`.
        let worker = unsafe { &*worker };
        if let Some(t) = self.snap {
            let b = self.bufs.as_mut().expect("buffers");
            eng.proto.snapshot_close(&mut b.st, t);
            return;
        }
        let mut pinned = self.pin();
        let b = self.bufs.as_mut().expect("buffers");
        eng.proto.abort(&mut b.st, &b.writes);
        // SAFETY: the slot outlives the transaction (see `worker`).
        unsafe { &*self.slot }.aborts.fetch_add(1, Ordering::Relaxed);
        let mut trail = LeafTrail::default();
        let created = b.writes.iter().filter(|w| w.created).map(|w| (w.key, w.rec));
        for (i, (key, rec)) in created.chain(b.created.iter().copied()).enumerate() {
            eng.try_unlink(worker, key.of(&b.keys), rec, &pinned, &mut trail, None);
            Self::renew_pin(&mut pinned, i + 1);
        }
    }
}

impl<P: Protocol> Drop for TypedTxn<'_, P> {
    fn drop(&mut self) {
        if self.active {
            self.rollback();
        }
        if self.eng.durable.as_ref().is_some_and(|d| d.wal.holds_locks()) {
            crate::cc::set_lock_waiter(None);
        }
        // SAFETY: the slot outlives the transaction (see `worker`).
        let slot = unsafe { &*self.slot };
        // Still inside the slot: records are freed only once every slot entered before
        // their retirement is left (`Engine::reclaim`), so the records the eviction meets
        // in the index stay allocated while it reads and latches them.
        self.eng.evict_over_budget(&slot.worker);
        self.eng.leave(slot);
        // A pop's kept scan gives its rows back (within `keep_rows`' bound) rather than
        // holding them in the pool.
        self.drop_pop_scans();
        // A huge write set's buffers go now, not when the slot's next transaction begins
        // (a committed 1M-record transaction kept about 90 MB resident until then).
        let bufs = self.bufs.take().filter(|b| !b.is_huge(&self.eng.proto));
        match self.home.take() {
            Some(Home::Worker(slot)) => *slot = bufs,
            Some(Home::Pool(s)) => self.eng.return_slot(s, bufs),
            None => {}
        }
    }
}
