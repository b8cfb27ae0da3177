//! Which key ranges are in the index: pages load lazily, and leave memory under a cache
//! budget (CLOCK over ranges).
//!
//! A database opened from its pages starts with an empty index: each store page's range
//! (as the table listed them at open) is loaded the first time a transaction needs it, and
//! a clean range leaves again when the records in memory pass `cache_bytes`.
//!
//! The rule that keeps concurrency control exact: a transaction relies on the index only
//! over loaded ranges. A key's own range is loaded before the key is looked up, and the
//! record that owns the gap after a missing key (its follower, which absent reads and
//! inserts lock or validate) is used only when every range between the key and it is
//! loaded, so a load never inserts records into a gap some transaction already relies on.
//! Each such check comes *after* the index lookup it vouches for, and an eviction marks its
//! range unloaded *before* it removes anything, so a lookup that a check calls loaded saw
//! the range whole (the message-passing pattern: flag, then index; index, then flag).
//! A range nobody wrote since the last checkpoint is the same on disk as in memory, so
//! loading it later reads what is in memory now.
//!
//! Ranges change under running transactions: a loaded range splits (a fresh database is
//! one range) by publishing a new map. Old maps are frozen (a reader holding one sees the
//! split range loaded, which was true when it read the map pointer, and every later
//! eviction comes after that); ranges a change leaves alone are shared by both maps.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use crate::index::prefix;
use crossbeam_epoch::{Atomic, Guard, Owned, Shared};
use parking_lot::Mutex;

/// Memory counted for a record besides its key and value: the record, its value buffer's
/// header, its index entry and the Bw-tree's share, with the allocator's rounding.
/// Calibrated on the resident set: 1M records of 16 + 48 bytes filled in memory take
/// ~205 MB over the process's baseline, ~205 bytes a record (`bench cache --records
/// 1000000 --cache 4G`); with 80 the counted total was 0.67 of that.
pub(crate) const RECORD_OVERHEAD: usize = 140;

/// The most records one eviction takes out: a larger range is split first.
pub(crate) const MAX_EVICT: usize = 128;

/// The fewest records a split leaves in a range.
const MIN_SPLIT: usize = 16;

/// The most pieces one split cuts a range into (the rest stays one piece).
pub(crate) const MAX_PIECES: usize = 4096;

/// One key range.
pub(crate) struct Range {
    low: Box<[u8]>,
    loaded: AtomicBool,
    /// CLOCK's reference bit: set by accesses, cleared by the hand.
    referenced: AtomicBool,
    /// 1 + the generation of the last commit that wrote a key of the range (0: none since
    /// open). The range may leave memory only once a checkpoint covers that generation.
    dirty: AtomicU64,
    /// The memory counted for the range's records (see [`Residency::credit`]).
    bytes: AtomicI64,
}

impl Range {
    fn new(low: Box<[u8]>, loaded: bool, dirty: u64) -> Arc<Range> {
        Arc::new(Range {
            low,
            loaded: AtomicBool::new(loaded),
            referenced: AtomicBool::new(false),
            dirty: AtomicU64::new(dirty),
            bytes: AtomicI64::new(0),
        })
    }

    /// Whether the range is in the index.
    pub(crate) fn is_loaded(&self) -> bool {
        self.loaded.load(Ordering::Acquire)
    }

    /// The range's low key.
    pub(crate) fn low(&self) -> &[u8] {
        &self.low
    }

    /// Marks the range used (CLOCK's second chance).
    #[inline]
    pub(crate) fn touch(&self) {
        if !self.referenced.load(Ordering::Relaxed) {
            self.referenced.store(true, Ordering::Relaxed);
        }
    }

    /// Clears the reference bit; returns whether it was set.
    pub(crate) fn take_reference(&self) -> bool {
        self.referenced.swap(false, Ordering::Relaxed)
    }

    /// See the field.
    pub(crate) fn dirty(&self) -> u64 {
        self.dirty.load(Ordering::SeqCst)
    }
}

/// Ranges a chunk of the map holds at most: a split copies one chunk and the list of
/// chunks rather than the whole map (78K ranges at 10M records under 64 MiB: a verify pass
/// whose evictions each split a page ran at 627K records/s, 1.5M without splits).
const CHUNK: usize = 512;

/// A run of consecutive ranges, shared by every map that did not change it.
struct Chunk {
    ranges: Vec<Arc<Range>>,
    /// The 8-byte prefix of each range's low key, searched first: every commit finds the
    /// range of each key it writes, and comparing integers is several times cheaper than
    /// comparing the keys' bytes.
    prefixes: Vec<u64>,
}

impl Chunk {
    fn new(ranges: Vec<Arc<Range>>) -> Arc<Chunk> {
        let prefixes = ranges.iter().map(|r| prefix(&r.low)).collect();
        Arc::new(Chunk { ranges, prefixes })
    }

    /// The index of the last range whose low key is at or below `key` (0 if none).
    fn find(&self, key: &[u8]) -> usize {
        find_low(&self.prefixes, key, |i| &self.ranges[i].low)
    }
}

/// In lows sorted by key, whose 8-byte prefixes are `prefixes`, the index of the last one
/// at or below `key` (0 if none). A low whose prefix is below the key's is below the key,
/// one above is above it: only the lows whose prefix ties need their bytes compared.
fn find_low<'a>(prefixes: &[u64], key: &[u8], low: impl Fn(usize) -> &'a [u8]) -> usize {
    let kp = prefix(key);
    let lo = prefixes.partition_point(|&p| p < kp);
    let ties = prefixes[lo..].partition_point(|&p| p == kp);
    let (mut a, mut b) = (lo, lo + ties);
    while a < b {
        let mid = a + (b - a) / 2;
        if low(mid) <= key {
            a = mid + 1;
        } else {
            b = mid;
        }
    }
    a.saturating_sub(1)
}

/// `ranges` cut into chunks half full: room to split in before a chunk is cut again.
fn half_full(ranges: &[Arc<Range>]) -> impl Iterator<Item = Arc<Chunk>> + '_ {
    ranges.chunks(CHUNK / 2).map(|c| Chunk::new(c.to_vec()))
}

/// The ranges, in key order (the first low key is empty), in chunks of at most [`CHUNK`].
struct RangeMap {
    chunks: Vec<Arc<Chunk>>,
    /// The index in the whole map of each chunk's first range.
    starts: Vec<usize>,
    /// The prefix of each chunk's first low key.
    firsts: Vec<u64>,
    len: usize,
}

impl RangeMap {
    /// A map of `ranges`, in chunks half full (room to split in before a chunk is cut).
    fn new(ranges: Vec<Arc<Range>>) -> Self {
        Self::of_chunks(half_full(&ranges).collect())
    }

    fn of_chunks(chunks: Vec<Arc<Chunk>>) -> Self {
        let mut starts = Vec::with_capacity(chunks.len());
        let mut len = 0;
        for c in &chunks {
            starts.push(len);
            len += c.ranges.len();
        }
        let firsts = chunks.iter().map(|c| c.prefixes[0]).collect();
        RangeMap { chunks, starts, firsts, len }
    }

    fn len(&self) -> usize {
        self.len
    }

    /// The chunk holding the range of index `i`, and `i` in it.
    fn locate(&self, i: usize) -> (usize, usize) {
        let c = self.starts.partition_point(|&s| s <= i) - 1;
        (c, i - self.starts[c])
    }

    /// The chunk holding `key`'s range, and the range's index in it.
    fn locate_key(&self, key: &[u8]) -> (usize, usize) {
        let c = find_low(&self.firsts, key, |c| &self.chunks[c].ranges[0].low);
        (c, self.chunks[c].find(key))
    }

    /// The index of the range holding `key`.
    fn find(&self, key: &[u8]) -> usize {
        let (c, j) = self.locate_key(key);
        self.starts[c] + j
    }

    /// The range holding `key`.
    fn range_of(&self, key: &[u8]) -> &Arc<Range> {
        let (c, j) = self.locate_key(key);
        &self.chunks[c].ranges[j]
    }

    fn get(&self, i: usize) -> &Arc<Range> {
        let (c, j) = self.locate(i);
        &self.chunks[c].ranges[j]
    }

    /// The ranges from index `i` on, in order.
    fn iter_from(&self, i: usize) -> impl Iterator<Item = &Arc<Range>> {
        let (c, j) = self.locate(i);
        self.iter_at(c, j)
    }

    /// The ranges from the one holding `key` on, in order (one search, as a lookup wants).
    fn iter_from_key(&self, key: &[u8]) -> impl Iterator<Item = &Arc<Range>> {
        let (c, j) = self.locate_key(key);
        self.iter_at(c, j)
    }

    /// The ranges from range `j` of chunk `c` on.
    fn iter_at(&self, c: usize, j: usize) -> impl Iterator<Item = &Arc<Range>> {
        self.chunks[c].ranges[j..].iter().chain(self.chunks[c + 1..].iter().flat_map(|ch| ch.ranges.iter()))
    }

    fn high(&self, i: usize) -> Option<&[u8]> {
        (i + 1 < self.len).then(|| &*self.get(i + 1).low)
    }

    /// The map with range `i` replaced by `pieces`: the chunks around it are shared, its
    /// own is copied (and cut in halves-full chunks when it passes [`CHUNK`]).
    fn replaced(&self, i: usize, pieces: &[Arc<Range>]) -> Self {
        let (c, j) = self.locate(i);
        let old = &self.chunks[c].ranges;
        let mut ranges = Vec::with_capacity(old.len() + pieces.len());
        ranges.extend_from_slice(&old[..j]);
        ranges.extend_from_slice(pieces);
        ranges.extend_from_slice(&old[j + 1..]);
        let mut chunks = Vec::with_capacity(self.chunks.len() + ranges.len() / (CHUNK / 2) + 1);
        chunks.extend_from_slice(&self.chunks[..c]);
        if ranges.len() <= CHUNK {
            chunks.push(Chunk::new(ranges));
        } else {
            chunks.extend(half_full(&ranges));
        }
        chunks.extend_from_slice(&self.chunks[c + 1..]);
        Self::of_chunks(chunks)
    }
}

/// What the holder of [`Residency::lock`] owns: the CLOCK hand and the count of unloaded
/// ranges.
pub(crate) struct Clock {
    hand: usize,
    missing: usize,
}

/// The ranges of a database with pages, which are loaded, and the memory they hold.
pub(crate) struct Residency {
    map: Atomic<RangeMap>,
    /// Whether every range is loaded: then a check costs this one load.
    all: AtomicBool,
    /// Loads, evictions and splits, one at a time.
    pub(crate) lock: Mutex<Clock>,
    /// The cache budget (`Options::cache_bytes`).
    pub(crate) budget: usize,
    /// Bytes of records in memory (estimated: see [`RECORD_OVERHEAD`]).
    resident: AtomicI64,
    /// Ranges marked loaded so far (see the module's notes).
    loads: AtomicU64,
    /// Test only: spans are checked at their start only (the planted bug of
    /// `Plants::lazy_gaps_unchecked`).
    unchecked_gaps: bool,
    /// Test only: `Plants::evict_dirty`.
    pub(crate) evict_dirty: bool,
    /// Test only: `Plants::evict_unmarked`.
    pub(crate) evict_unmarked: bool,
    /// Test only: `Plants::load_count_unchecked`.
    pub(crate) load_count_unchecked: bool,
    /// Test only: `Plants::lookup_pause`.
    pub(crate) lookup_pause: bool,
    /// Test only: `Plants::scan_gap_unguarded`.
    pub(crate) scan_gap_unguarded: bool,
}

impl Residency {
    /// Nothing loaded yet, over the ranges starting at `lows` (sorted; empty for an empty
    /// store).
    #[cfg(test)]
    pub(crate) fn new(lows: Vec<Vec<u8>>, budget: usize, unchecked_gaps: bool) -> Self {
        Self::with_loaded(lows, &[], None, budget, unchecked_gaps)
    }

    /// [`new`](Self::new), with the ranges at the places `loaded` names (in `lows`) in the
    /// index already, each with the memory counted for it, and written in `generation`
    /// (recovery replayed commits of that generation over them; `None`: clean, the planted
    /// `Plants::kept_pages_clean`).
    pub(crate) fn with_loaded(
        lows: Vec<Vec<u8>>,
        loaded: &[(usize, i64)],
        generation: Option<u64>,
        budget: usize,
        unchecked_gaps: bool,
    ) -> Self {
        let mut ranges: Vec<Arc<Range>> = lows.into_iter().map(|l| Range::new(l.into(), false, 0)).collect();
        let mut resident = 0;
        for &(i, bytes) in loaded {
            let r = Range::new(ranges[i].low.clone(), true, generation.map_or(0, |g| g + 1));
            r.bytes.store(bytes, Ordering::Relaxed);
            resident += bytes;
            ranges[i] = r;
        }
        if ranges.first().is_none_or(|r| !r.low.is_empty()) {
            ranges.insert(0, Range::new(Box::default(), false, 0));
        }
        let missing = ranges.iter().filter(|r| !r.is_loaded()).count();
        Residency {
            map: Atomic::new(RangeMap::new(ranges)),
            all: AtomicBool::new(missing == 0),
            lock: Mutex::new(Clock { hand: 0, missing }),
            budget,
            resident: AtomicI64::new(resident),
            loads: AtomicU64::new(0),
            unchecked_gaps,
            evict_dirty: false,
            evict_unmarked: false,
            load_count_unchecked: false,
            lookup_pause: false,
            scan_gap_unguarded: false,
        }
    }

    fn current<'g>(&self, guard: &'g Guard) -> &'g RangeMap {
        // SAFETY: the map is replaced only with `swap`, and the old one is destroyed through
        // the epoch (`guard` keeps it); it is never null.
        unsafe { self.map.load(Ordering::SeqCst, guard).deref() }
    }

    /// Whether every range is loaded.
    #[inline]
    pub(crate) fn all_loaded(&self) -> bool {
        self.all.load(Ordering::Acquire)
    }

    /// The first range overlapping `from..=to` (`to` `None`: to the end) that is not
    /// loaded. Marks `from`'s range referenced (CLOCK).
    pub(crate) fn first_missing<'g>(&self, from: &[u8], to: Option<&[u8]>, guard: &'g Guard) -> Option<&'g Arc<Range>> {
        let to = if self.unchecked_gaps { Some(from) } else { to };
        let mut ranges = self.current(guard).iter_from_key(from);
        let first = ranges.next().expect("the map covers every key");
        first.touch();
        std::iter::once(first).chain(ranges.take_while(|r| to.is_none_or(|t| &*r.low <= t))).find(|r| !r.is_loaded())
    }

    /// The low key of a run of loaded ranges ending with the one `key` is in: walking down
    /// from that range while the one below is loaded, stopping at the first low at or
    /// below `floor`. The low of `key`'s range itself when that one is not loaded. A
    /// reverse scan's window may then span loaded ranges (their records are in the index,
    /// where the window was sized), emptied ones included, but no unloaded one below the
    /// range it starts in (which could hold any number of records).
    pub(crate) fn loaded_low(&self, key: &[u8], floor: &[u8], guard: &Guard) -> Vec<u8> {
        let map = self.current(guard);
        let mut i = map.find(key);
        if map.get(i).is_loaded() {
            while i > 0 && &*map.get(i).low > floor && map.get(i - 1).is_loaded() {
                i -= 1;
            }
        }
        map.get(i).low.to_vec()
    }

    /// Whether every range overlapping `from..end` (`end` exclusive; `None`: to the end)
    /// is loaded (no load, no reference).
    pub(crate) fn covers(&self, from: &[u8], end: Option<&[u8]>, guard: &Guard) -> bool {
        let mut ranges = self.current(guard).iter_from_key(from);
        let first = ranges.next().expect("the map covers every key");
        first.is_loaded() && ranges.take_while(|r| end.is_none_or(|e| &*r.low < e)).all(|r| r.is_loaded())
    }

    /// The bounds of `range` in the current map (`None` if it is no longer there: it was
    /// loaded and split meanwhile). Called under [`lock`](Self::lock).
    pub(crate) fn bounds(&self, range: &Arc<Range>, guard: &Guard) -> Option<(Vec<u8>, Option<Vec<u8>>)> {
        let map = self.current(guard);
        let i = map.find(&range.low);
        Arc::ptr_eq(map.get(i), range).then(|| (range.low.to_vec(), map.high(i).map(<[u8]>::to_vec)))
    }

    /// How many times a range was marked loaded: a lookup that found a key missing and then
    /// saw its range loaded relies on the lookup only if this did not change in between
    /// (the range may have left and come back).
    #[inline]
    pub(crate) fn load_count(&self) -> u64 {
        self.loads.load(Ordering::SeqCst)
    }

    /// Whether no range was marked loaded since [`load_count`](Self::load_count) said
    /// `since`.
    #[inline]
    pub(crate) fn no_load_since(&self, since: u64) -> bool {
        self.load_count_unchecked || self.load_count() == since
    }

    /// `range` is in the index now (called under `lock`, after its records went in: whoever
    /// sees the flag sees them, and the load count moved before it).
    pub(crate) fn mark_loaded(&self, clock: &mut Clock, range: &Range) {
        if !range.loaded.load(Ordering::Acquire) {
            self.loads.fetch_add(1, Ordering::SeqCst);
        }
        if !range.loaded.swap(true, Ordering::AcqRel) {
            clock.missing -= 1;
            if clock.missing == 0 {
                self.all.store(true, Ordering::Release);
            }
        }
    }

    /// `range` stays in the index after all: an eviction gave up before it removed anything
    /// (called under `lock`). The load count does not move: no lookup can have missed a
    /// record of it.
    pub(crate) fn mark_kept(&self, clock: &mut Clock, range: &Range) {
        if !range.loaded.swap(true, Ordering::AcqRel) {
            clock.missing -= 1;
            if clock.missing == 0 {
                self.all.store(true, Ordering::Release);
            }
        }
    }

    /// `range` is about to leave the index (called under `lock`, before anything is
    /// removed: a check that still sees it loaded came before the removals).
    pub(crate) fn mark_unloaded(&self, clock: &mut Clock, range: &Range) {
        self.all.store(false, Ordering::SeqCst);
        if range.loaded.swap(false, Ordering::SeqCst) {
            clock.missing += 1;
        }
    }

    /// Notes that a commit of generation `generation` writes `key` (while it holds the
    /// key's record locked, so that an eviction latching the record afterwards sees it).
    /// A split publishing a new map meanwhile copies the old marks after its swap, and this
    /// marks again until it saw the current map: either way the mark reaches it.
    #[inline]
    pub(crate) fn mark_dirty(&self, key: &[u8], generation: u64, guard: &Guard) {
        let mark = generation + 1;
        let mut map = self.map.load(Ordering::SeqCst, guard);
        loop {
            // SAFETY: as in `current`.
            let m = unsafe { map.deref() };
            let r = m.range_of(key);
            if r.dirty.load(Ordering::Relaxed) < mark {
                r.dirty.fetch_max(mark, Ordering::SeqCst);
            }
            let now = self.map.load(Ordering::SeqCst, guard);
            if now == map {
                return;
            }
            map = now;
        }
    }

    /// Counts `bytes` more (or fewer) of memory for the records of `key`'s range: a record
    /// made or unlinked, an inserted value. (A value that changes size is counted anew
    /// when its range next loads: an estimate, never a drift, since an eviction takes
    /// back what its range was counted.)
    #[inline]
    pub(crate) fn credit(&self, key: &[u8], bytes: i64, guard: &Guard) {
        let map = self.current(guard);
        self.credit_range(map.range_of(key), bytes);
    }

    /// [`credit`](Self::credit) for `range` itself.
    pub(crate) fn credit_range(&self, range: &Range, bytes: i64) {
        range.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.resident.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Takes back all that `range` was counted (it left memory).
    pub(crate) fn debit_all(&self, range: &Range) {
        let b = range.bytes.swap(0, Ordering::Relaxed);
        self.resident.fetch_sub(b, Ordering::Relaxed);
    }

    /// The memory counted as resident.
    pub(crate) fn resident(&self) -> i64 {
        self.resident.load(Ordering::Relaxed)
    }

    /// Where a range is split (in records): a sixteenth of the budget at ~256 bytes a
    /// record, within [`MIN_SPLIT`]..=[`MAX_EVICT`], so a small cache still has ranges to
    /// choose from.
    pub(crate) fn split_records(&self) -> usize {
        (self.budget / 16 / 256).clamp(MIN_SPLIT, MAX_EVICT)
    }

    /// Whether the records in memory pass the budget.
    #[inline]
    pub(crate) fn over_budget(&self) -> bool {
        self.resident() > self.budget as i64
    }

    /// Moves the CLOCK hand one range on: the range it passes and its bounds.
    pub(crate) fn advance<'g>(
        &self,
        clock: &mut Clock,
        guard: &'g Guard,
    ) -> (&'g Arc<Range>, Vec<u8>, Option<Vec<u8>>) {
        let map = self.current(guard);
        let i = clock.hand % map.len();
        clock.hand = i + 1;
        let range = map.get(i);
        (range, range.low.to_vec(), map.high(i).map(<[u8]>::to_vec))
    }

    /// Splits `range` at the keys `cuts` (ascending, inside it); the pieces are loaded if it
    /// was (an unloaded range is cut where a bulk load's pages start). Each piece that
    /// ends at a cut is counted `share` of what the range was, the last piece the rest (an
    /// estimate by record count: the total never drifts, since each piece takes back what
    /// it was counted when it leaves). Returns the lowest piece. Called under `lock`.
    ///
    /// One new map per call, whatever the number of pieces: a fresh database (one range)
    /// filled by an ascending load, split one piece per pass of the hand, copied the map
    /// once per piece when maps were copied whole (10M records: 77K copies of up to
    /// 620 KB, gigabytes of garbage waiting for the epoch). The new map shares every chunk
    /// but the split range's (see [`CHUNK`]).
    pub(crate) fn split(
        &self,
        clock: &mut Clock,
        range: &Arc<Range>,
        cuts: &[Vec<u8>],
        share: f64,
        guard: &Guard,
    ) -> Arc<Range> {
        debug_assert!(cuts.first().is_some_and(|at| *range.low < **at));
        debug_assert!(cuts.windows(2).all(|w| w[0] < w[1]));
        let map = self.current(guard);
        let i = map.find(&range.low);
        debug_assert!(Arc::ptr_eq(map.get(i), range));
        let d = range.dirty();
        let loaded = range.is_loaded();
        if !loaded {
            clock.missing += cuts.len();
        }
        let pieces: Vec<Arc<Range>> = std::iter::once(range.low.clone())
            .chain(cuts.iter().map(|at| at.as_slice().into()))
            .map(|low| Range::new(low, loaded, d))
            .collect();
        let old = self.map.swap(Owned::new(map.replaced(i, &pieces)), Ordering::SeqCst, guard);
        // Counts made in the old range go with it (none are lost: the total keeps them).
        let total = range.bytes.swap(0, Ordering::Relaxed);
        // `share` is at most 1 / (cuts + 1) of a whole piece's worth: the pieces never take
        // more than the range was.
        let each = (total.max(0) as f64 * share.clamp(0.0, 1.0 / (cuts.len() + 1) as f64)) as i64;
        let mut left = total;
        for piece in &pieces[..cuts.len()] {
            piece.bytes.store(each, Ordering::Relaxed);
            left -= each;
        }
        pieces.last().expect("at least two pieces").bytes.store(left, Ordering::Relaxed);
        // Marks made in the old map before a writer saw the new one (`mark_dirty`).
        let d = range.dirty();
        for piece in &pieces {
            piece.dirty.fetch_max(d, Ordering::SeqCst);
        }
        // SAFETY: unreachable from now on; readers that loaded it are pinned.
        unsafe { guard.defer_destroy(old) };
        pieces[0].clone()
    }

    /// The ranges from the one holding `key` on, each with its high key (`None`: the last).
    pub(crate) fn ranges_from(&self, key: &[u8], guard: &Guard) -> Vec<(Arc<Range>, Option<Vec<u8>>)> {
        let ranges: Vec<Arc<Range>> = self.current(guard).iter_from_key(key).cloned().collect();
        let highs = ranges.iter().skip(1).map(|r| Some(r.low.to_vec())).chain(std::iter::once(None));
        ranges.iter().cloned().zip(highs).collect()
    }

    /// The number of ranges.
    pub(crate) fn len(&self, guard: &Guard) -> usize {
        self.current(guard).len()
    }

    /// Bytes the range map takes: each range (its `Arc`, low key and prefix).
    pub(crate) fn map_bytes(&self, guard: &Guard) -> u64 {
        let map = self.current(guard);
        let each = std::mem::size_of::<Range>() + 2 * std::mem::size_of::<usize>() // Arc counts
            + std::mem::size_of::<Arc<Range>>() + std::mem::size_of::<u64>();
        let chunks = map.chunks.len() * (std::mem::size_of::<Chunk>() + 4 * std::mem::size_of::<usize>());
        map.iter_from(0).map(|r| (each + r.low.len()) as u64).sum::<u64>() + chunks as u64
    }

    /// The number of ranges and how many are loaded.
    pub(crate) fn counts(&self, guard: &Guard) -> (usize, usize) {
        let map = self.current(guard);
        (map.len(), map.iter_from(0).filter(|r| r.is_loaded()).count())
    }
}

impl Drop for Residency {
    fn drop(&mut self) {
        // SAFETY: no one else holds the residency any more.
        let guard = unsafe { crossbeam_epoch::unprotected() };
        let m = self.map.swap(Shared::null(), Ordering::Relaxed, guard);
        if !m.is_null() {
            // SAFETY: as above; the map was made by `Owned::new` and is dropped once.
            drop(unsafe { m.into_owned() });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The prefix search finds what a plain search over the keys finds, with lows whose
    /// 8-byte prefixes tie ("a", "a\0", longer keys sharing 8 bytes) and keys between them.
    #[test]
    fn find_by_prefix_agrees_with_a_byte_search() {
        let lows: Vec<&[u8]> = vec![
            b"",
            b"a",
            b"a\0",
            b"a\0\0\0\0\0\0\0",
            b"a\0\0\0\0\0\0\0\x01",
            b"abcdefgh",
            b"abcdefghi",
            b"abcdefgi",
            b"b",
        ];
        let map = RangeMap::new(lows.iter().map(|l| Range::new((*l).into(), false, 0)).collect());
        let mut keys: Vec<Vec<u8>> = lows.iter().map(|l| l.to_vec()).collect();
        for l in &lows {
            let mut k = l.to_vec();
            k.push(0);
            keys.push(k.clone());
            k.push(0xff);
            keys.push(k);
            if let Some((last, init)) = l.split_last().filter(|(last, _)| **last > 0) {
                let mut k = init.to_vec();
                k.push(last - 1);
                keys.push(k);
            }
        }
        for k in &keys {
            let want = lows.partition_point(|l| *l <= k.as_slice()).saturating_sub(1);
            assert_eq!(map.find(k), want, "{k:?}");
        }
    }

    /// Splits that cut chunks keep the map whole and in order: each range found by its
    /// keys, iterated in key order, and every chunk that no split touched shared.
    #[test]
    fn splits_across_chunks_keep_the_map_in_order() {
        let key = |i: u32| (i * 16).to_be_bytes().to_vec();
        let mut map = RangeMap::new(
            (0..2000).map(|i| Range::new(if i == 0 { Box::default() } else { key(i).into() }, false, 0)).collect(),
        );
        assert_eq!(map.chunks.len(), 2000usize.div_ceil(CHUNK / 2));
        let mut want: Vec<Vec<u8>> = (0..2000).map(|i| if i == 0 { Vec::new() } else { key(i) }).collect();
        // Split range 1000 into 1,500 pieces (one chunk becomes several), then ranges near
        // chunk edges into 2.
        let at = 1000;
        let pieces: Vec<Arc<Range>> = std::iter::once(want[at].clone())
            // 12-byte lows whose 8-byte prefixes all tie, across chunk boundaries.
            .chain((1..1500u32).map(|p| [key(1000), vec![0; 4], p.to_be_bytes().to_vec()].concat()))
            .map(|l| Range::new(l.into(), true, 0))
            .collect();
        let before = map.chunks.clone();
        map = map.replaced(at, &pieces);
        want.splice(at..at + 1, pieces.iter().map(|r| r.low.to_vec()));
        let shared = map.chunks.iter().filter(|c| before.iter().any(|b| Arc::ptr_eq(b, c))).count();
        assert_eq!(shared, before.len() - 1, "only the split's chunk is new");
        assert!(map.chunks.iter().all(|c| !c.ranges.is_empty() && c.ranges.len() <= CHUNK));
        for i in [255, 256, 257, 0, 1, map.len() - 1] {
            // Between `want[i]` and the next low, and above `want[i]` followed by a zero.
            let low = if want[i].is_empty() { vec![0; 4] } else { [want[i].as_slice(), &[1]].concat() };
            map = map
                .replaced(i, &[Range::new(want[i].clone().into(), true, 0), Range::new(low.clone().into(), true, 0)]);
            want.insert(i + 1, low);
        }
        assert_eq!(map.len(), want.len());
        let got: Vec<Vec<u8>> = map.iter_from(0).map(|r| r.low.to_vec()).collect();
        assert_eq!(got, want);
        for (i, l) in want.iter().enumerate() {
            assert_eq!(map.find(l), i);
            assert!(Arc::ptr_eq(map.range_of(l), map.get(i)));
            let mut above = l.clone();
            above.push(0);
            assert_eq!(map.find(&above), i, "{above:?}");
            assert_eq!(map.high(i), want.get(i + 1).map(Vec::as_slice));
        }
        assert_eq!(map.iter_from(700).count(), want.len() - 700);
    }

    fn lows(ks: &[&str]) -> Vec<Vec<u8>> {
        ks.iter().map(|k| k.as_bytes().to_vec()).collect()
    }

    fn low(r: Option<&Arc<Range>>) -> Option<&[u8]> {
        r.map(|r| &*r.low)
    }

    #[test]
    fn ranges_overlapping_a_span_are_found_until_all_are_loaded() {
        let guard = &crossbeam_epoch::pin();
        let r = Residency::new(lows(&["", "d", "m", "t"]), 0, false);
        assert_eq!(low(r.first_missing(b"a", Some(b"c"), guard)), Some(&b""[..]));
        assert_eq!(low(r.first_missing(b"e", Some(b"z"), guard)), Some(&b"d"[..]));
        assert_eq!(low(r.first_missing(b"z", None, guard)), Some(&b"t"[..]));
        let d = r.first_missing(b"e", None, guard).unwrap().clone();
        r.mark_loaded(&mut r.lock.lock(), &d);
        // `m` itself starts range 2: the span reaches it.
        assert_eq!(low(r.first_missing(b"e", Some(b"m"), guard)), Some(&b"m"[..]));
        assert_eq!(r.first_missing(b"e", Some(b"l"), guard).map(|_| ()), None);
        assert_eq!(r.bounds(&d, guard), Some((b"d".to_vec(), Some(b"m".to_vec()))));
        while let Some(m) = r.first_missing(b"", None, guard).cloned() {
            assert!(!r.all_loaded());
            r.mark_loaded(&mut r.lock.lock(), &m);
        }
        assert!(r.all_loaded());
        let mut clock = r.lock.lock();
        r.mark_unloaded(&mut clock, &d);
        assert!(!r.all_loaded());
        assert_eq!(low(r.first_missing(b"a", None, guard)), Some(&b"d"[..]));
        r.mark_loaded(&mut clock, &d);
        assert!(r.all_loaded());
    }

    #[test]
    fn a_split_keeps_the_dirty_marks_and_the_old_map_frozen() {
        let guard = &crossbeam_epoch::pin();
        let r = Residency::new(Vec::new(), 0, false);
        let all = r.first_missing(b"", None, guard).unwrap().clone();
        r.mark_loaded(&mut r.lock.lock(), &all);
        r.mark_dirty(b"q", 4, guard);
        let lower = r.split(&mut r.lock.lock(), &all, &[b"k".to_vec()], 0.5, guard);
        assert_eq!(lower.dirty(), 5);
        assert_eq!(r.bounds(&lower, guard), Some((Vec::new(), Some(b"k".to_vec()))));
        assert_eq!(r.bounds(&all, guard), None, "the split range is only in the old map");
        r.mark_dirty(b"z", 7, guard);
        assert_eq!(lower.dirty(), 5, "marks of the upper part stay there");
        assert_eq!(r.counts(guard), (2, 2));
        r.mark_unloaded(&mut r.lock.lock(), &lower);
        assert!(all.is_loaded(), "the old map is frozen");
        assert_eq!(low(r.first_missing(b"a", None, guard)), Some(&b""[..]));
        assert_eq!(r.first_missing(b"m", None, guard).map(|_| ()), None);
    }
}
