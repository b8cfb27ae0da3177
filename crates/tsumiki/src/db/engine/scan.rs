//! Scans: forward chunks re-checked against the index, reverse windows from the top, and
//! the cursor the public `Scan` drives.

use super::*;

/// Records per chunk of a scan: each chunk is read, then its membership re-checked.
pub(super) const SCAN_CHUNK: usize = 64;

impl<P: Protocol> Engine<P> {
    /// The low key of the next window of a reverse scan of `start..end`: the window
    /// ends at `end` and holds at most one leaf of the index and one key range of the
    /// cache, and it starts no lower than `start`. A hint only: the windows are read as
    /// forward scans, so any bounds that tile the range are right.
    pub(super) fn window_low(&self, start: &[u8], end: Option<&[u8]>) -> Vec<u8> {
        let probe = key_at_or_above_all_below(end);
        let mut low = self.index.leaf_low(&probe);
        if let Some(r) = &self.residency {
            low = low.max(r.range_low_of(&probe, &epoch::pin()));
        }
        low.max(start.to_vec())
    }
}

impl<'a, P: Protocol> TypedTxn<'a, P> {
    /// Reads one chunk of a scan: up to [`SCAN_CHUNK`] present records from `from`
    /// (inclusive) to `end` (exclusive). Returns the records and the next chunk's start.
    pub(super) fn scan_chunk(
        &mut self,
        from: &[u8],
        end: Option<&[u8]>,
        out: &mut Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<Option<Vec<u8>>, Error> {
        let eng = self.eng;
        let guard = &self.pin();
        'retry: loop {
            out.clear();
            // A chunk covers only key ranges in the index: it stops where one is not, and
            // the next chunk loads that one first.
            let limit = match eng.scan_limit(from, end) {
                Ok(l) => l,
                Err(Error::Conflict(c)) => return self.fail(c),
                Err(e) => {
                    self.failure = Some(e);
                    return self.failed();
                }
            };
            let stop = limit.as_deref().or(end);
            let since = eng.load_count();
            let recs: Vec<(Vec<u8>, RecPtr<P::Record>)> = eng.index.scan(from, stop).take(SCAN_CHUNK).collect();
            let last = recs.len() < SCAN_CHUNK;
            for (k, p) in &recs {
                // SAFETY: records stay allocated while the transaction runs (`Engine::retire`).
                let rec = unsafe { &*p.0 };
                match self.read_rec(k, rec, true, guard) {
                    Ok(Some(v)) => out.push((k.clone(), v)),
                    Ok(None) => {}
                    Err(Access::Removed) => continue 'retry,
                    Err(Access::Conflict(c)) => return self.fail(c),
                    Err(Access::Failed) => return self.failed(),
                }
            }
            let next_start = |recs: &[(Vec<u8>, RecPtr<P::Record>)]| match (last, &limit) {
                (false, _) => Some(successor_key(&recs[recs.len() - 1].0)),
                (true, l) => l.clone(),
            };
            // The ranges the chunk covers were all in the index while it was read (a range
            // that left meanwhile was marked before its records went, and one that came
            // back moved the load count).
            let reach = match (last, recs.last()) {
                (false, Some((k, _))) => Some(successor_key(k)),
                _ => stop.map(<[u8]>::to_vec),
            };
            eng.pause_after_miss();
            if !eng.covered(from, reach.as_deref()) || !eng.no_load_since(since) {
                continue 'retry;
            }
            if !eng.proto.gap_protection() {
                return Ok(next_start(&recs));
            }
            // The gap after the chunk belongs to the first record at or past its stop, also
            // when the chunk stops short of `end` at a range not in memory: the keys from
            // the last record read up to that range were read absent, and an insert there
            // writes (locks) that record. Left to the next chunk, an insert could commit in
            // between (a phantom, seen once in CI under 2PL with a tiny cache).
            //
            // That record is looked up on its own (a load here adds records at or past
            // `stop` only, outside the chunk): starting the chunk over after each load could
            // go on for long under a tiny cache, where other transactions evict what this
            // one loads.
            let unguarded = limit.is_some() && eng.residency.as_ref().is_some_and(|r| r.scan_gap_unguarded);
            let terminal = if last && !unguarded {
                let mut tk = Vec::new();
                loop {
                    let since = eng.load_count();
                    let t = eng.record_at_or_past(stop, Some(&mut tk), guard);
                    if let Some(e) = stop {
                        match self.loaded(e, (!eng.is_sentinel(t)).then_some(tk.as_slice())) {
                            Ok(true) => {}
                            Ok(false) => continue,
                            Err(Access::Conflict(c)) => return self.fail(c),
                            Err(_) => return self.failed(),
                        }
                    }
                    match self.read_rec(&tk, t, false, guard) {
                        Ok(_) => break Some((t as *const P::Record, since)),
                        Err(Access::Removed) => continue,
                        Err(Access::Conflict(c)) => return self.fail(c),
                        Err(Access::Failed) => return self.failed(),
                    }
                }
            } else {
                None
            };
            // Membership re-check, as for a missing key: the index must still hold exactly
            // the records read.
            let again = eng.index.scan(from, stop).take(SCAN_CHUNK).map(|(_, p)| p.0);
            if !again.eq(recs.iter().map(|(_, p)| p.0)) {
                continue 'retry;
            }
            if let Some((t, since)) = terminal {
                let t2 = eng.record_at_or_past(stop, None, guard) as *const P::Record;
                // And no range came back since the terminal lookup (it could have left
                // again by now, as for a missing key).
                if t != t2 || !eng.no_load_since(since) {
                    continue 'retry;
                }
            }
            return Ok(next_start(&recs));
        }
    }

    /// A forward scan of `start <= key < end` (no upper bound when `end` is `None`).
    pub fn scan(&mut self, start: &[u8], end: Option<&[u8]>) -> TypedScan<'_, 'a, P> {
        TypedScan { txn: self, cursor: ScanCursor::new(start.to_vec(), end.map(<[u8]>::to_vec), false) }
    }
}

/// A key at or above every key below `end` (every key when `end` is `None`), and itself
/// below `end`: keys are at most [`MAX_KEY_LEN`] bytes, so one byte longer leaves no key
/// between it and `end`.
pub(super) fn key_at_or_above_all_below(end: Option<&[u8]>) -> Vec<u8> {
    match end.map(<[u8]>::split_last) {
        None => vec![0xff; MAX_KEY_LEN + 1],
        Some(None) => Vec::new(),
        // Below "x\0" only "x" and what is below it.
        Some(Some((0, init))) => init.to_vec(),
        Some(Some((&b, init))) => {
            let mut k = init.to_vec();
            k.push(b - 1);
            k.resize(MAX_KEY_LEN + 1, 0xff);
            k
        }
    }
}

pub(super) fn successor_key(k: &[u8]) -> Vec<u8> {
    let mut s = Vec::with_capacity(k.len() + 1);
    s.extend_from_slice(k);
    s.push(0);
    s
}

/// A record a scan returns: its key and value.
pub(crate) type Row = (Vec<u8>, Vec<u8>);

/// The iterator of [`TypedTxn::scan`].
pub struct TypedScan<'t, 'a, P: Protocol> {
    txn: &'t mut TypedTxn<'a, P>,
    cursor: ScanCursor,
}

impl<P: Protocol> Iterator for TypedScan<'_, '_, P> {
    type Item = Result<(Vec<u8>, Vec<u8>), Error>;

    fn next(&mut self) -> Option<Self::Item> {
        self.cursor.next(self.txn)
    }
}

/// Where a scan stands, apart from its transaction: each step borrows the transaction
/// only while it reads a chunk, so the transaction can serve other reads between steps.
pub(crate) struct ScanCursor {
    /// Forward: where the next chunk starts (`None` once the range is done).
    /// Reverse: the low end of the range.
    next: Option<Vec<u8>>,
    end: Option<Vec<u8>>,
    /// Records read and not yet returned, in the order they are returned.
    buf: Vec<(Vec<u8>, Vec<u8>)>,
    pos: usize,
    reverse: bool,
    /// A step has run.
    started: bool,
    /// The scan returned its last record, or an error: `None` from now on.
    done: bool,
}

impl ScanCursor {
    /// The records with `start <= key < end`, ascending or (`reverse`) descending.
    pub(crate) fn new(start: Vec<u8>, end: Option<Vec<u8>>, reverse: bool) -> Self {
        if end.as_ref().is_some_and(|e| *e <= start) {
            // Empty: nothing to read (and no window to list).
            return ScanCursor { next: None, end, buf: Vec::new(), pos: 0, reverse, started: false, done: true };
        }
        ScanCursor { next: Some(start), end, buf: Vec::new(), pos: 0, reverse, started: false, done: false }
    }

    /// Makes the scan descending. After a first step it goes on descending over what is
    /// left of the range (the records not returned yet).
    pub(crate) fn reverse(&mut self) {
        if self.started && !self.reverse && !self.done {
            let rest = if self.pos < self.buf.len() { Some(self.buf[self.pos].0.clone()) } else { self.next.take() };
            match rest {
                Some(start) => {
                    let end = self.end.take();
                    *self = ScanCursor::new(start, end, true);
                }
                None => self.done = true,
            }
        }
        self.reverse = true;
    }

    /// The next record of the scan, read through `txn`.
    pub(crate) fn next<P: Protocol>(&mut self, txn: &mut TypedTxn<'_, P>) -> Option<Result<Row, Error>> {
        loop {
            if self.pos < self.buf.len() {
                self.pos += 1;
                return Some(Ok(std::mem::take(&mut self.buf[self.pos - 1])));
            }
            if self.done {
                return None;
            }
            self.started = true;
            self.pos = 0;
            let step = match txn.check_active() {
                Ok(()) if self.reverse => self.step_back(txn),
                Ok(()) => self.step(txn),
                Err(e) => Err(e),
            };
            match step {
                Ok(true) => {}
                Ok(false) => {
                    self.done = true;
                    return None;
                }
                Err(e) => {
                    // The scan ends with its error (fused: `None` after it).
                    self.done = true;
                    return Some(Err(e));
                }
            }
        }
    }

    /// Reads the next chunk forward; `false` when the range is done.
    pub(super) fn step<P: Protocol>(&mut self, txn: &mut TypedTxn<'_, P>) -> Result<bool, Error> {
        let Some(from) = self.next.take() else { return Ok(false) };
        self.next = txn.scan_chunk(&from, self.end.as_deref(), &mut self.buf)?;
        Ok(true)
    }

    /// Reads the next window backward: the whole window forward (the index links leaves
    /// to the right only), then reversed. A window ends where the previous one began and
    /// starts at the low key of the index leaf (or cache key range) below that
    /// ([`Engine::window_low`]): one descent per window. Each window is read as a forward
    /// scan of the transaction, so the windows together cover the range with the same
    /// protection (no phantoms) as a forward scan.
    pub(super) fn step_back<P: Protocol>(&mut self, txn: &mut TypedTxn<'_, P>) -> Result<bool, Error> {
        let Some(start) = self.next.as_deref() else { return Ok(false) };
        if self.end.as_deref().is_some_and(|e| e <= start) {
            return Ok(false);
        }
        let low = txn.eng.window_low(start, self.end.as_deref());
        let high = self.end.take();
        self.buf.clear();
        let mut chunk = Vec::new();
        let mut from = Some(low.clone());
        while let Some(f) = from {
            from = txn.scan_chunk(&f, high.as_deref(), &mut chunk)?;
            self.buf.append(&mut chunk);
        }
        self.buf.reverse();
        self.end = Some(low);
        Ok(true)
    }
}
