//! Scans: forward chunks re-checked against the index, reverse windows from the top, and
//! the cursor the public `Scan` drives.

use super::*;

/// Records per chunk of a scan: each chunk is read, then its membership re-checked.
pub(super) const SCAN_CHUNK: usize = 64;

impl<P: Protocol> Engine<P> {
    /// The low key of the next window of a reverse scan of `start..end`: the window
    /// ends at `end` and holds about `records` records, at most one leaf of the index and
    /// no key range of the cache that is not loaded but the one it ends in, and it starts
    /// no lower than `start`. A hint only: the windows are read as
    /// forward scans, so any bounds that tile the range are right.
    pub(super) fn window_low(&self, start: &[u8], end: Option<&[u8]>, records: usize) -> Vec<u8> {
        let probe = key_at_or_above_all_below(end);
        let mut low = self.index.tail_low(&probe, end, records);
        if let Some(r) = &self.residency {
            // Past ranges a reverse pop emptied, in one window.
            let loaded = r.loaded_low(&probe, &low, &epoch::pin());
            low = low.max(loaded);
        }
        low.max(start.to_vec())
    }
}

impl<'a, P: Protocol> TypedTxn<'a, P> {
    /// Reads one chunk of a scan: up to `max` present records from `from` (inclusive) to
    /// `end` (exclusive), appended to `out`. Returns the next chunk's start.
    pub(super) fn scan_chunk(
        &mut self,
        from: &[u8],
        end: Option<&[u8]>,
        max: usize,
        out: &mut Rows,
    ) -> Result<Option<Vec<u8>>, Error> {
        let guard = &self.pin();
        // The records met, their keys in one buffer: reused, so a chunk allocates nothing.
        let b = self.b();
        let mut met = Met {
            keys: std::mem::take(&mut b.scan_keys),
            recs: std::mem::take(&mut b.scan_recs),
            leaves: std::mem::take(&mut b.scan_leaves),
        };
        let r = self.scan_chunk_with(from, end, max, out, &mut met, guard);
        let b = self.b();
        b.scan_keys = met.keys;
        b.scan_recs = met.recs;
        b.scan_leaves = met.leaves;
        r
    }

    fn scan_chunk_with(
        &mut self,
        from: &[u8],
        end: Option<&[u8]>,
        max: usize,
        out: &mut Rows,
        met: &mut Met<P>,
        guard: &Guard,
    ) -> Result<Option<Vec<u8>>, Error> {
        let Met { keys, recs, leaves } = met;
        let eng = self.eng;
        let mark = out.mark();
        'retry: loop {
            out.truncate(mark);
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
            keys.clear();
            recs.clear();
            eng.index.walk_noting(from, stop, guard, leaves, |k, p| {
                recs.push((keys.len() as u32, k.len() as u32, p.0));
                keys.extend_from_slice(k);
                recs.len() < max
            });
            #[cfg(test)]
            if let Some(b) = self.bufs.as_mut() {
                b.scan_walked += recs.len() as u64;
                b.scan_chunks += 1;
            }
            let key = |i: usize| {
                let (at, len, _) = recs[i];
                &keys[at as usize..(at + len) as usize]
            };
            let last = recs.len() < max;
            // The records' lines (and their tails') first, as hints that do not wait: their
            // misses overlap whole. Then the values' on the heap, which need each record's
            // state.
            for &(_, _, rec) in recs.iter() {
                eng.prefetch_record(rec);
            }
            for &(_, _, rec) in recs.iter() {
                // SAFETY: as below.
                eng.proto.prefetch(unsafe { &*rec }, guard);
            }
            for &(at, len, rec) in recs.iter() {
                // SAFETY: records stay allocated while the transaction runs (`Engine::retire`).
                let rec = unsafe { &*rec };
                let k = &keys[at as usize..(at + len) as usize];
                let row = out.begin_row(k);
                match self.read_rec_into(k, rec, Some(&mut out.bytes), guard) {
                    Ok(true) => out.end_row(row, k.len(), rec as *const P::Record as usize),
                    Ok(false) => out.drop_row(row),
                    Err(Access::Removed) => continue 'retry,
                    Err(Access::Conflict(c)) => return self.fail(c),
                    Err(Access::Failed) => return self.failed(),
                }
            }
            // Where the chunk ends: past its last record when cut at `max`.
            let cut = (!last).then(|| successor_key(key(recs.len() - 1)));
            // The ranges the chunk covers were all in the index while it was read (a range
            // that left meanwhile was marked before its records went, and one that came
            // back moved the load count).
            let reach = if last { stop } else { cut.as_deref() };
            eng.pause_after_miss();
            if !eng.covered(from, reach) || !eng.no_load_since(since) {
                continue 'retry;
            }
            if !eng.proto.gap_protection() || self.snap.is_some() {
                // A snapshot checks no membership: a record that entered the index after
                // its `T` reads absent, and none it saw present has left.
                return Ok(cut.or(limit));
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
                    match self.read_rec_into(&tk, t, None, guard) {
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
            // the records read (no more of them, when the chunk was the range's last). It
            // does if no leaf the walk entered changed; else walk again to see.
            let (mut i, mut same) = (recs.len(), true);
            if !eng.index.leaves_unchanged(leaves, guard) {
                i = 0;
                eng.index.walk(from, stop, guard, |_, p| {
                    if i == recs.len() {
                        // One more: a chunk cut at `max` did not take it; the range's last did
                        // not see it.
                        same = !last;
                        return false;
                    }
                    same = std::ptr::eq(recs[i].2, p.0);
                    i += 1;
                    same
                });
            }
            if !same || i != recs.len() {
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
            return Ok(cut.or(limit));
        }
    }

    /// How many records a scan's first chunk reads (see [`TxnBufs::scan_first`]).
    fn first_chunk(&self) -> usize {
        self.bufs.as_ref().map_or(FIRST_CHUNK, |b| b.scan_first)
    }

    /// The row buffer the last scan left, for a scan starting now.
    pub(super) fn lend_rows(&mut self) -> Rows {
        self.bufs.as_mut().map(|b| std::mem::take(&mut b.scan_rows)).unwrap_or_default()
    }

    /// A scan ended after returning `taken` records: the next one reads that many first,
    /// in `rows` (kept if it is not too big).
    fn end_scan(&mut self, taken: usize, rows: Rows) {
        if let Some(b) = self.bufs.as_mut() {
            b.scan_first = taken.clamp(MIN_FIRST_CHUNK, SCAN_CHUNK);
        }
        self.keep_rows(rows);
    }

    /// A pop took `key` through `cursor`, which it keeps: the next scan reads as few
    /// records first as after any scan that returned one, and nothing is visible to the
    /// transaction from the start of the range to the cursor's next record (backward: from
    /// past it to the end), so a scan that starts there once the kept one is dropped (by a
    /// delete, say) goes past every record popped at once. The kept scan's own chunks note
    /// only the ranges they read, which do not join that one.
    pub(super) fn popped(&mut self, key: &[u8], cursor: &ScanCursor) {
        if let Some(b) = self.bufs.as_mut() {
            b.scan_first = MIN_FIRST_CHUNK;
        }
        let unread = cursor.unread_from();
        if cursor.reverse {
            self.note_back_skip(None, unread.as_deref().unwrap_or(key));
        } else {
            self.note_front_skip(&[], &unread.unwrap_or_else(|| successor_key(key)));
        }
    }

    /// Keeps `rows` for the next scan if it is not too big.
    pub(super) fn keep_rows(&mut self, mut rows: Rows) {
        if let Some(b) = self.bufs.as_mut() {
            if rows.bytes.capacity() <= KEEP_ROW_BYTES && rows.bytes.capacity() > b.scan_rows.bytes.capacity() {
                rows.clear();
                b.scan_rows = rows;
            }
        }
    }

    /// Where a forward step from `from` (below `end`) may start instead: past a range
    /// an earlier scan from `from` found empty to this transaction.
    fn front_skip(&self, from: &[u8], end: Option<&[u8]>) -> Option<Vec<u8>> {
        let (f, to) = self.bufs.as_ref()?.skips.front.as_ref()?;
        (f.as_slice() == from && to.as_slice() > from && end.is_none_or(|e| to.as_slice() < e)).then(|| to.clone())
    }

    /// Notes that no record in `[from, to)` is visible to this transaction (joined to the
    /// range noted before when that one ends at `from`: a scan's later chunks).
    fn note_front_skip(&mut self, from: &[u8], to: &[u8]) {
        let Some(b) = self.bufs.as_mut().filter(|_| to > from) else { return };
        // Every forward scan step notes one: the buffers are reused, not reallocated.
        match &mut b.skips.front {
            Some((_, t)) if t.as_slice() == from => set_bytes(t, to),
            Some((f, t)) => {
                set_bytes(f, from);
                set_bytes(t, to);
            }
            none => *none = Some((from.to_vec(), to.to_vec())),
        }
    }

    /// Where a backward window ending at `end` may end instead: below a range an earlier
    /// reverse scan to `end` found empty to this transaction.
    fn back_skip(&self, end: Option<&[u8]>) -> Option<Vec<u8>> {
        let (e, low) = self.bufs.as_ref()?.skips.back.as_ref()?;
        (e.as_deref() == end && end.is_none_or(|e| low.as_slice() < e)).then(|| low.clone())
    }

    /// Notes that no record in `[low, end)` is visible to this transaction (joined to the
    /// range noted before when that one starts at `end`: a scan's lower windows).
    fn note_back_skip(&mut self, end: Option<&[u8]>, low: &[u8]) {
        let Some(b) = self.bufs.as_mut() else { return };
        match &mut b.skips.back {
            Some((_, l)) if end == Some(l.as_slice()) => set_bytes(l, low),
            s => *s = Some((end.map(<[u8]>::to_vec), low.to_vec())),
        }
    }

    /// Records scan chunks walked since the transaction began (tests).
    #[cfg(test)]
    pub(crate) fn scan_walked(&self) -> u64 {
        self.bufs.as_ref().map_or(0, |b| b.scan_walked)
    }

    /// Scan chunks read since the transaction began (tests).
    #[cfg(test)]
    pub(crate) fn scan_chunks(&self) -> u64 {
        self.bufs.as_ref().map_or(0, |b| b.scan_chunks)
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

/// The smallest key after `k`.
pub(crate) fn successor_key(k: &[u8]) -> Vec<u8> {
    let mut s = Vec::with_capacity(k.len() + 1);
    s.extend_from_slice(k);
    s.push(0);
    s
}

/// Makes `buf` a copy of `bytes`, in the allocation it has when that is big enough.
fn set_bytes(buf: &mut Vec<u8>, bytes: &[u8]) {
    buf.clear();
    buf.extend_from_slice(bytes);
}

/// Key ranges a transaction's scans found empty to it: records deleted by the transaction
/// itself, or by others before it read them. The next scan from the same start (or, in
/// reverse, to the same end) goes past such a range at once: popping the first record
/// (a scan, then a delete) would otherwise walk every record popped before in the same
/// transaction again, quadratic in the pops. Any write of a value forgets them (a record
/// may become visible there). What another transaction commits there meanwhile is not
/// lost: the range was read when found empty, and the commit validates or locks that read
/// (a snapshot does not see it).
#[derive(Default)]
pub(crate) struct Skips {
    /// `(from, to)`: nothing visible in `[from, to)`.
    front: Option<(Vec<u8>, Vec<u8>)>,
    /// `(end, low)`: nothing visible in `[low, end)` (`end` `None`: unbounded).
    back: Option<(Option<Vec<u8>>, Vec<u8>)>,
}

/// What a scan chunk's walk met: the records, their keys in one buffer, the leaves.
struct Met<P: Protocol> {
    keys: Vec<u8>,
    recs: Vec<(u32, u32, *const P::Record)>,
    leaves: Leaves,
}

/// A record a scan returns or a pop takes: its key and value, owned.
pub type Row = (Vec<u8>, Vec<u8>);

/// A record a scan lends ([`Scan::next_ref`](crate::Scan::next_ref)): its key and value,
/// borrowed until the scan's next step.
pub type RowRef<'s> = (&'s [u8], &'s [u8]);

/// Records read and not returned yet: keys and values in one byte buffer, reused chunk
/// after chunk, so that reading a chunk allocates nothing per record.
#[derive(Default)]
pub(crate) struct Rows {
    bytes: Vec<u8>,
    /// Per record: where its key starts in `bytes`, the key's and the value's lengths
    /// (the value follows the key), and the record's address (a delete of what a scan
    /// returned writes that record without looking its key up again).
    at: Vec<(usize, u32, u32, usize)>,
}

impl Rows {
    pub(super) fn clear(&mut self) {
        self.bytes.clear();
        self.at.clear();
    }

    pub(super) fn len(&self) -> usize {
        self.at.len()
    }

    /// Room for `rows` more records of a few hundred bytes.
    fn reserve(&mut self, rows: usize) {
        self.at.reserve(rows);
        self.bytes.reserve(rows * 256);
    }

    /// The record `i`: its key and value.
    pub(crate) fn get(&self, i: usize) -> (&[u8], &[u8]) {
        let (at, k, v, _) = self.at[i];
        let (k, v) = (k as usize, v as usize);
        (&self.bytes[at..at + k], &self.bytes[at + k..at + k + v])
    }

    fn mark(&self) -> (usize, usize) {
        (self.bytes.len(), self.at.len())
    }

    fn truncate(&mut self, (bytes, rows): (usize, usize)) {
        self.bytes.truncate(bytes);
        self.at.truncate(rows);
    }

    /// Starts a record with its key; its value is appended to `bytes` next.
    fn begin_row(&mut self, key: &[u8]) -> usize {
        let at = self.bytes.len();
        self.bytes.extend_from_slice(key);
        at
    }

    fn end_row(&mut self, at: usize, key_len: usize, rec: usize) {
        let value_len = self.bytes.len() - at - key_len;
        self.at.push((at, key_len as u32, value_len as u32, rec));
    }

    /// The address of row `i`'s record.
    pub(super) fn rec(&self, i: usize) -> usize {
        self.at[i].3
    }

    fn drop_row(&mut self, at: usize) {
        self.bytes.truncate(at);
    }
}

/// The iterator of [`TypedTxn::scan`].
pub struct TypedScan<'t, 'a, P: Protocol> {
    txn: &'t mut TypedTxn<'a, P>,
    cursor: ScanCursor,
}

impl<P: Protocol> Drop for TypedScan<'_, '_, P> {
    fn drop(&mut self) {
        self.cursor.finish(self.txn);
    }
}

impl<P: Protocol> Iterator for TypedScan<'_, '_, P> {
    type Item = Result<(Vec<u8>, Vec<u8>), Error>;

    fn next(&mut self) -> Option<Self::Item> {
        self.cursor.next(self.txn)
    }
}

/// The most records a reverse window asks for (a window holds at most an index leaf).
const REVERSE_WINDOW: usize = 1 << 16;

/// The first chunk of a transaction's first forward scan; a later scan's first chunk
/// is what the scan before it returned, at least [`MIN_FIRST_CHUNK`] (a scan that takes
/// a few records, a range read of 10 from a key, reads about that many). Each later
/// chunk doubles, up to [`SCAN_CHUNK`].
pub(super) const FIRST_CHUNK: usize = 16;

/// The smallest first chunk: a chunk after the first descends again, so a scan that
/// goes on past a tiny first chunk pays a descent for few records; but a scan that takes
/// one record (a pop) would read (and copy) every record of a bigger one: 2, not 8, made
/// `bench kv`'s pops 10-15% faster, its range reads of 10 unchanged.
const MIN_FIRST_CHUNK: usize = 2;

/// The largest row buffer a transaction keeps for its next scan.
const KEEP_ROW_BYTES: usize = 64 << 10;

/// Where a scan stands, apart from its transaction: each step borrows the transaction
/// only while it reads a chunk, so the transaction can serve other reads between steps.
pub(crate) struct ScanCursor {
    /// Forward: where the next chunk starts (`None` once the range is done).
    /// Reverse: the low end of the range.
    next: Option<Vec<u8>>,
    end: Option<Vec<u8>>,
    /// Records read and not yet returned, in the order they are returned.
    buf: Rows,
    pos: usize,
    /// Records the next forward chunk reads at most.
    chunk: usize,
    reverse: bool,
    /// A step has run.
    started: bool,
    /// Records returned so far.
    taken: usize,
    /// The scan returned its last record, or an error: `None` from now on.
    done: bool,
}

impl ScanCursor {
    /// The records with `start <= key < end`, ascending or (`reverse`) descending.
    pub(crate) fn new(start: Vec<u8>, end: Option<Vec<u8>>, reverse: bool) -> Self {
        // Empty: nothing to read (and no window to list).
        let done = end.as_ref().is_some_and(|e| *e <= start);
        ScanCursor {
            next: (!done).then_some(start),
            end,
            buf: Rows::default(),
            pos: 0,
            chunk: FIRST_CHUNK,
            reverse,
            started: false,
            taken: 0,
            done,
        }
    }

    /// The scan is dropped: tells `txn` how far it went and gives back its row buffer.
    pub(crate) fn finish<P: Protocol>(&mut self, txn: &mut TypedTxn<'_, P>) {
        if self.started || self.taken > 0 {
            txn.end_scan(self.taken, std::mem::take(&mut self.buf));
        }
    }

    /// Where the records this scan has not returned begin: forward, the key of the next
    /// one (or of the next chunk); backward, just past the next one (or the last window's
    /// low end). `None` once nothing is left to read forward.
    fn unread_from(&self) -> Option<Vec<u8>> {
        match (self.pos < self.buf.len(), self.reverse) {
            (true, false) => Some(self.buf.get(self.pos).0.to_vec()),
            (true, true) => Some(successor_key(self.buf.get(self.pos).0)),
            (false, false) => self.next.clone(),
            (false, true) => self.end.clone(),
        }
    }

    /// The scan's row buffer, for another scan.
    pub(crate) fn into_rows(self) -> Rows {
        self.buf
    }

    /// Makes the scan descending. After a first step it goes on descending over what is
    /// left of the range (the records not returned yet).
    pub(crate) fn reverse(&mut self) {
        if self.started && !self.reverse && !self.done {
            let rest =
                if self.pos < self.buf.len() { Some(self.buf.get(self.pos).0.to_vec()) } else { self.next.take() };
            match rest {
                Some(start) => {
                    let end = self.end.take();
                    let (mut buf, taken) = (std::mem::take(&mut self.buf), self.taken);
                    buf.clear();
                    *self = ScanCursor::new(start, end, true);
                    (self.buf, self.taken) = (buf, taken);
                }
                None => self.done = true,
            }
        }
        self.reverse = true;
    }

    /// The next record of the scan, read through `txn`.
    pub(crate) fn next<P: Protocol>(&mut self, txn: &mut TypedTxn<'_, P>) -> Option<Result<Row, Error>> {
        self.next_ref(txn).map(|r| r.map(|(k, v)| (k.to_vec(), v.to_vec())))
    }

    /// The next record of the scan, borrowed from the cursor until its next step.
    pub(crate) fn next_ref<P: Protocol>(&mut self, txn: &mut TypedTxn<'_, P>) -> Option<Result<RowRef<'_>, Error>> {
        self.next_row(txn).map(|r| r.map(|i| self.buf.get(i)))
    }

    /// The next record of the scan and its record's address (see [`Rows::rec`]).
    pub(super) fn next_with_rec<P: Protocol>(
        &mut self,
        txn: &mut TypedTxn<'_, P>,
    ) -> Option<Result<(RowRef<'_>, usize), Error>> {
        self.next_row(txn).map(|r| r.map(|i| (self.buf.get(i), self.buf.rec(i))))
    }

    /// Steps to the next record: its place in the cursor's rows.
    fn next_row<P: Protocol>(&mut self, txn: &mut TypedTxn<'_, P>) -> Option<Result<usize, Error>> {
        loop {
            if self.pos < self.buf.len() {
                self.pos += 1;
                self.taken += 1;
                return Some(Ok(self.pos - 1));
            }
            if self.done {
                return None;
            }
            if !self.started {
                self.started = true;
                self.chunk = txn.first_chunk();
                if self.buf.bytes.capacity() == 0 {
                    self.buf = txn.lend_rows();
                }
            }
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
        self.buf.clear();
        self.buf.reserve(self.chunk);
        let start = txn.front_skip(&from, self.end.as_deref());
        self.next =
            txn.scan_chunk(start.as_deref().unwrap_or(&from), self.end.as_deref(), self.chunk, &mut self.buf)?;
        // Up to the first row returned (or where the chunk stopped), nothing is visible.
        let empty_to = if self.buf.len() > 0 { Some(self.buf.get(0).0) } else { self.next.as_deref() };
        if let Some(to) = empty_to {
            txn.note_front_skip(&from, to);
        }
        self.chunk = (self.chunk * 2).min(SCAN_CHUNK);
        Ok(true)
    }

    /// Reads the next window backward: the whole window forward (the index links leaves
    /// to the right only), then reversed. A window ends where the previous one began and
    /// starts [`chunk`](Self::chunk) records below that, within the index leaf (and
    /// cache key range) there ([`Engine::window_low`]): a reverse scan that takes a few
    /// records reads about that many, and the windows double like forward chunks. Each window is read as a forward
    /// scan of the transaction, so the windows together cover the range with the same
    /// protection (no phantoms) as a forward scan.
    pub(super) fn step_back<P: Protocol>(&mut self, txn: &mut TypedTxn<'_, P>) -> Result<bool, Error> {
        let Some(start) = self.next.as_deref() else { return Ok(false) };
        if self.end.as_deref().is_some_and(|e| e <= start) {
            return Ok(false);
        }
        let end = self.end.take();
        let high = match txn.back_skip(end.as_deref()) {
            // Nothing visible is left in the range.
            Some(h) if h.as_slice() <= start => return Ok(false),
            Some(h) => Some(h),
            None => end.clone(),
        };
        let low = txn.eng.window_low(start, high.as_deref(), self.chunk);
        self.chunk = (self.chunk * 2).min(REVERSE_WINDOW);
        self.buf.clear();
        let mut from = Some(low.clone());
        while let Some(f) = from {
            from = txn.scan_chunk(&f, high.as_deref(), SCAN_CHUNK, &mut self.buf)?;
        }
        // Past the last row read (or from the window's start), nothing is visible.
        match self.buf.len() {
            0 => txn.note_back_skip(end.as_deref(), &low),
            n => txn.note_back_skip(end.as_deref(), &successor_key(self.buf.get(n - 1).0)),
        }
        self.buf.at.reverse();
        self.end = Some(low);
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cc::tictoc::TicToc;
    use crate::db::TypedDb;
    use crate::index::BwTreeConfig;

    fn keys<'t>(scan: impl Iterator<Item = Result<Row, Error>> + 't) -> Vec<u32> {
        scan.map(|r| u32::from_be_bytes(r.unwrap().0.try_into().unwrap())).collect()
    }

    #[test]
    fn a_scans_first_chunk_is_what_the_scan_before_it_returned() {
        let db = TypedDb::new(TicToc::default(), BwTreeConfig::default()).unwrap();
        let mut t = db.begin();
        for i in 0..200u32 {
            t.put(&i.to_be_bytes(), &[1; 20]).unwrap();
        }
        t.commit().unwrap();
        for snapshot in [true, false] {
            let mut t = if snapshot { db.begin_snapshot() } else { db.begin() };
            let from = |i: u32| i.to_be_bytes();
            assert_eq!(keys(t.scan(&from(5), None).take(10)), (5..15).collect::<Vec<_>>());
            assert_eq!(t.first_chunk(), 10);
            // The row buffer came back for the next scan.
            assert!(t.b().scan_rows.bytes.capacity() > 0);
            // A scan past its first chunk goes on from where the chunk ended.
            assert_eq!(keys(t.scan(&from(0), None)), (0..200).collect::<Vec<_>>());
            assert_eq!(t.first_chunk(), SCAN_CHUNK);
            assert_eq!(keys(t.scan(&from(190), None).take(1)), [190]);
            assert_eq!(t.first_chunk(), MIN_FIRST_CHUNK);
            // Reversed after a forward step, with a lent buffer.
            let mut s = t.scan(&from(100), Some(&from(150)));
            assert_eq!(s.next().unwrap().unwrap().0, from(100));
            s.cursor.reverse();
            assert_eq!(keys(s), (101..150).rev().collect::<Vec<_>>());
            assert_eq!(t.first_chunk(), 50);
            t.commit().unwrap();
        }
    }

    /// Pops in one transaction (a scan, then a delete of the first record it returns)
    /// walk each popped record about once, from either end: not every earlier pop again.
    /// A put into a skipped range is seen by the next scan; a scan from another start is
    /// not skipped.
    #[test]
    fn pops_in_one_transaction_walk_their_own_deletes_once() {
        let db = TypedDb::new(TicToc::default(), BwTreeConfig::default()).unwrap();
        let mut t = db.begin();
        for i in 0..2000u32 {
            t.put(&(i * 2).to_be_bytes(), &[1; 20]).unwrap();
        }
        t.commit().unwrap();
        let key = |i: u32| i.to_be_bytes();
        let mut t = db.begin();
        let first = |t: &mut TypedTxn<'_, TicToc>, last: bool| {
            let mut s = t.scan(&[], None);
            if last {
                s.cursor.reverse();
            }
            s.next().map(|r| u32::from_be_bytes(r.unwrap().0.try_into().unwrap()))
        };
        let before = t.scan_walked();
        for i in 0..300u32 {
            assert_eq!(first(&mut t, false), Some(i * 2));
            assert!(t.delete(&key(i * 2)).unwrap());
            assert_eq!(first(&mut t, true), Some((1999 - i) * 2));
            assert!(t.delete(&key((1999 - i) * 2)).unwrap());
        }
        let walked = t.scan_walked() - before;
        // Without the skips: about 300 x 300 records walked again.
        assert!(walked < 600 * 40, "600 pops walked {walked} records");
        // A put into the popped range is seen at once, from both ends.
        t.put(&key(7), &[2; 20]).unwrap();
        assert_eq!(first(&mut t, false), Some(7));
        t.put(&key(3999), &[2; 20]).unwrap();
        assert_eq!(first(&mut t, true), Some(3999));
        assert!(t.delete(&key(7)).unwrap() && t.delete(&key(3999)).unwrap());
        assert_eq!(first(&mut t, false), Some(600));
        assert_eq!(first(&mut t, true), Some(3398));
        // Another start is scanned as asked.
        assert_eq!(keys(t.scan(&key(1), Some(&key(9)))), Vec::<u32>::new());
        assert_eq!(keys(t.scan(&key(601), Some(&key(605)))), [602, 604]);
        t.commit().unwrap();
        let mut t = db.begin();
        assert_eq!(first(&mut t, false), Some(600));
        assert_eq!(first(&mut t, true), Some(3398));
        t.commit().unwrap();
    }

    /// A transaction's pops in one direction go on with the scan the pop before left: a
    /// chunk (one descent) per many pops, not one per pop. A write in between is seen by
    /// the next pop.
    #[test]
    fn pops_in_one_direction_read_one_scan() {
        let db = TypedDb::new(TicToc::default(), BwTreeConfig::default()).unwrap();
        let key = |i: u32| i.to_be_bytes();
        let mut t = db.begin();
        for i in 0..2000u32 {
            t.put(&key(i * 2), &[1; 20]).unwrap();
        }
        t.commit().unwrap();
        let popped = |r: Option<Row>| r.map(|(k, _)| u32::from_be_bytes(k.try_into().unwrap()));
        let mut t = db.begin();
        for last in [false, true] {
            let before = t.scan_chunks();
            for i in 0..300u32 {
                let want = if last { (1999 - i) * 2 } else { i * 2 };
                assert_eq!(popped(t.pop(last).unwrap()), Some(want));
            }
            // One chunk per pop before: 300.
            let chunks = t.scan_chunks() - before;
            assert!(chunks <= 24, "300 pops (last: {last}) read {chunks} chunks");
        }
        // A delete of a record the backward kept scan read ahead.
        assert!(t.delete(&key(3396)).unwrap());
        assert_eq!(popped(t.pop(true).unwrap()), Some(3398));
        assert_eq!(popped(t.pop(true).unwrap()), Some(3394));
        // A pop after its kept scan was dropped (by a delete elsewhere) starts past the
        // records popped before, not walking them again (a put would forget that).
        assert!(t.delete(&key(2000)).unwrap());
        let walked = t.scan_walked();
        assert_eq!(popped(t.pop(true).unwrap()), Some(3392));
        assert!(t.scan_walked() - walked < 64, "walked {} again", t.scan_walked() - walked);
        // A put among the records the forward kept scan read ahead.
        assert_eq!(popped(t.pop(false).unwrap()), Some(600));
        t.put(&key(603), &[2; 20]).unwrap();
        assert_eq!(popped(t.pop(false).unwrap()), Some(602));
        assert_eq!(popped(t.pop(false).unwrap()), Some(603));
        // A put into the popped range.
        t.put(&key(7), &[2; 20]).unwrap();
        assert_eq!(popped(t.pop(false).unwrap()), Some(7));
        // Forward likewise: the put forgot what was skipped, so the next scan from the
        // start walks the popped records once; then no more, whatever drops the kept scan.
        assert!(t.delete(&key(1000)).unwrap());
        assert_eq!(popped(t.pop(false).unwrap()), Some(604));
        for i in 0..100u32 {
            assert_eq!(popped(t.pop(false).unwrap()), Some(606 + 2 * i));
        }
        assert!(t.delete(&key(3000)).unwrap());
        let walked = t.scan_walked();
        assert_eq!(popped(t.pop(false).unwrap()), Some(806));
        assert!(t.scan_walked() - walked < 64, "walked {} again", t.scan_walked() - walked);
        t.commit().unwrap();
        let mut t = db.begin();
        assert_eq!(popped(t.pop(false).unwrap()), Some(808));
        assert_eq!(popped(t.pop(true).unwrap()), Some(3390));
        t.commit().unwrap();
        // A transaction of one pop reads a chunk of two, not sixteen.
        let mut t = db.begin();
        let walked = t.scan_walked();
        assert_eq!(popped(t.pop(false).unwrap()), Some(810));
        assert!(t.scan_walked() - walked <= 2, "one pop read {}", t.scan_walked() - walked);
        t.commit().unwrap();
    }

    /// A record another transaction inserts into a range this one found empty (and skips
    /// since), or among the records a pop's kept scan read ahead, fails this one's commit:
    /// neither hides a conflict. Pops as a scan and a delete, and as `pop`.
    #[test]
    fn an_insert_into_a_skipped_or_read_ahead_range_fails_the_commit() {
        let key = |i: u32| i.to_be_bytes();
        for (native, inserted) in [(false, 3), (true, 3), (true, 7)] {
            let db = TypedDb::new(TicToc::default(), BwTreeConfig::default()).unwrap();
            let mut t = db.begin();
            for i in 0..100u32 {
                t.put(&key(i * 2), &[1; 20]).unwrap();
            }
            t.commit().unwrap();
            let pop = |a: &mut TypedTxn<'_, TicToc>| {
                if native {
                    return a.pop(false).unwrap().unwrap().0;
                }
                let k = a.scan(&[], None).next().unwrap().unwrap().0;
                assert!(a.delete(&k).unwrap());
                k
            };
            let mut a = db.begin();
            for i in 0..3u32 {
                assert_eq!(pop(&mut a), key(i * 2));
            }
            let mut b = db.begin();
            b.put(&key(inserted), &[2; 20]).unwrap();
            b.commit().unwrap();
            // `a` may answer from its skip or its kept scan (6) or see the new record;
            // either way it cannot commit.
            let k = pop(&mut a);
            assert!(k == key(inserted) || k == key(6), "{k:?}");
            assert!(a.commit().is_err(), "native pop {native}: a commit that missed a concurrent insert went through");
        }
    }
}
