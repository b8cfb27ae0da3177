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

/// The ranges, in key order (the first low key is empty).
struct RangeMap {
    ranges: Vec<Arc<Range>>,
    /// The 8-byte prefix of each range's low key, searched first: every commit finds the
    /// range of each key it writes, and comparing integers is several times cheaper than
    /// comparing the keys' bytes.
    prefixes: Vec<u64>,
}

impl RangeMap {
    fn new(ranges: Vec<Arc<Range>>) -> Self {
        let prefixes = ranges.iter().map(|r| prefix(&r.low)).collect();
        RangeMap { ranges, prefixes }
    }

    /// The index of the range holding `key`.
    fn find(&self, key: &[u8]) -> usize {
        // A low key whose prefix is below the key's is below the key, one above is above
        // it: only the lows whose prefix ties need their bytes compared.
        let kp = prefix(key);
        let lo = self.prefixes.partition_point(|&p| p < kp);
        let ties = self.prefixes[lo..].partition_point(|&p| p == kp);
        (lo + self.ranges[lo..lo + ties].partition_point(|r| &*r.low <= key)).saturating_sub(1)
    }

    fn high(&self, i: usize) -> Option<&[u8]> {
        self.ranges.get(i + 1).map(|r| &*r.low)
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
    /// `LogOptions::lazy_gaps_unchecked_for_tests`).
    unchecked_gaps: bool,
    /// Test only: `LogOptions::evict_dirty_for_tests`.
    pub(crate) evict_dirty: bool,
    /// Test only: `LogOptions::evict_unmarked_for_tests`.
    pub(crate) evict_unmarked: bool,
    /// Test only: `LogOptions::load_count_unchecked_for_tests`.
    pub(crate) load_count_unchecked: bool,
    /// Test only: `LogOptions::lookup_pause_for_tests`.
    pub(crate) lookup_pause: bool,
    /// Test only: `LogOptions::scan_gap_unguarded_for_tests`.
    pub(crate) scan_gap_unguarded: bool,
}

impl Residency {
    /// Nothing loaded yet, over the ranges starting at `lows` (sorted; empty for an empty
    /// store).
    pub(crate) fn new(lows: Vec<Vec<u8>>, budget: usize, unchecked_gaps: bool) -> Self {
        let mut ranges: Vec<Arc<Range>> = lows.into_iter().map(|l| Range::new(l.into(), false, 0)).collect();
        if ranges.first().is_none_or(|r| !r.low.is_empty()) {
            ranges.insert(0, Range::new(Box::default(), false, 0));
        }
        let n = ranges.len();
        Residency {
            map: Atomic::new(RangeMap::new(ranges)),
            all: AtomicBool::new(false),
            lock: Mutex::new(Clock { hand: 0, missing: n }),
            budget,
            resident: AtomicI64::new(0),
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
        let map = self.current(guard);
        let first = map.find(from);
        map.ranges[first].touch();
        map.ranges[first..]
            .iter()
            .enumerate()
            .take_while(|(j, r)| *j == 0 || to.is_none_or(|t| &*r.low <= t))
            .map(|(_, r)| r)
            .find(|r| !r.is_loaded())
    }

    /// Whether every range overlapping `from..end` (`end` exclusive; `None`: to the end)
    /// is loaded (no load, no reference).
    pub(crate) fn covers(&self, from: &[u8], end: Option<&[u8]>, guard: &Guard) -> bool {
        let map = self.current(guard);
        let first = map.find(from);
        map.ranges[first..]
            .iter()
            .enumerate()
            .take_while(|(j, r)| *j == 0 || end.is_none_or(|e| &*r.low < e))
            .all(|(_, r)| r.is_loaded())
    }

    /// The bounds of `range` in the current map (`None` if it is no longer there: it was
    /// loaded and split meanwhile). Called under [`lock`](Self::lock).
    pub(crate) fn bounds(&self, range: &Arc<Range>, guard: &Guard) -> Option<(Vec<u8>, Option<Vec<u8>>)> {
        let map = self.current(guard);
        let i = map.find(&range.low);
        Arc::ptr_eq(&map.ranges[i], range).then(|| (range.low.to_vec(), map.high(i).map(<[u8]>::to_vec)))
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
            let r = &m.ranges[m.find(key)];
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
        self.credit_range(&map.ranges[map.find(key)], bytes);
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
        let i = clock.hand % map.ranges.len();
        clock.hand = i + 1;
        (&map.ranges[i], map.ranges[i].low.to_vec(), map.high(i).map(<[u8]>::to_vec))
    }

    /// Splits the loaded `range` at the keys `cuts` (ascending, inside it). Each piece that
    /// ends at a cut is counted `share` of what the range was, the last piece the rest (an
    /// estimate by record count: the total never drifts, since each piece takes back what
    /// it was counted when it leaves). Returns the lowest piece. Called under `lock`.
    ///
    /// One new map per call, whatever the number of pieces: a map is copied whole, so a
    /// fresh database (one range) filled by an ascending load, split one piece per pass of
    /// the hand, copied the map once per piece (10M records: 77K copies of up to 620 KB,
    /// gigabytes of garbage waiting for the epoch).
    pub(crate) fn split(&self, range: &Arc<Range>, cuts: &[Vec<u8>], share: f64, guard: &Guard) -> Arc<Range> {
        debug_assert!(range.is_loaded() && cuts.first().is_some_and(|at| *range.low < **at));
        debug_assert!(cuts.windows(2).all(|w| w[0] < w[1]));
        let map = self.current(guard);
        let i = map.find(&range.low);
        debug_assert!(Arc::ptr_eq(&map.ranges[i], range));
        let d = range.dirty();
        let pieces: Vec<Arc<Range>> = std::iter::once(range.low.clone())
            .chain(cuts.iter().map(|at| at.as_slice().into()))
            .map(|low| Range::new(low, true, d))
            .collect();
        let mut ranges = Vec::with_capacity(map.ranges.len() + cuts.len());
        ranges.extend_from_slice(&map.ranges[..i]);
        ranges.extend(pieces.iter().cloned());
        ranges.extend_from_slice(&map.ranges[i + 1..]);
        let old = self.map.swap(Owned::new(RangeMap::new(ranges)), Ordering::SeqCst, guard);
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

    /// The number of ranges.
    pub(crate) fn len(&self, guard: &Guard) -> usize {
        self.current(guard).ranges.len()
    }

    /// Bytes the range map takes: each range (its `Arc`, low key and prefix).
    pub(crate) fn map_bytes(&self, guard: &Guard) -> u64 {
        let map = self.current(guard);
        let each = std::mem::size_of::<Range>() + 2 * std::mem::size_of::<usize>() // Arc counts
            + std::mem::size_of::<Arc<Range>>() + std::mem::size_of::<u64>();
        map.ranges.iter().map(|r| (each + r.low.len()) as u64).sum()
    }

    /// The number of ranges and how many are loaded.
    pub(crate) fn counts(&self, guard: &Guard) -> (usize, usize) {
        let map = self.current(guard);
        (map.ranges.len(), map.ranges.iter().filter(|r| r.is_loaded()).count())
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
            if let Some((last, init)) = l.split_last() {
                let mut k = init.to_vec();
                k.push(last - 1);
                keys.push(k);
            }
        }
        for k in &keys {
            let want = map.ranges.partition_point(|r| &*r.low <= k.as_slice()).saturating_sub(1);
            assert_eq!(map.find(k), want, "{k:?}");
        }
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
        let lower = r.split(&all, &[b"k".to_vec()], 0.5, guard);
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
