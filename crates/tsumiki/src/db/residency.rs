//! Which key ranges of a lazily opened database are in the index yet.
//!
//! A database opened from its pages starts with an empty index: each store page's range
//! (as the table listed them at open) is loaded the first time a transaction needs it.
//! The rule that keeps concurrency control exact: a transaction relies on the index only
//! over loaded ranges. A key's own range is loaded before the key is looked up, and the
//! record that owns the gap after a missing key (its follower, which absent reads and
//! inserts lock or validate) is used only when every range between the key and it is
//! loaded, so a load never inserts records into a gap some transaction already relies on.
//! A range nobody touched since open is unchanged on disk (checkpoints write only keys
//! that transactions wrote), so loading it later reads what open would have.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use parking_lot::Mutex;

/// The ranges of a lazily opened database and which are loaded.
pub(crate) struct Residency {
    /// The low keys of the store's pages at open: range `i` is `lows[i]..lows[i + 1]`
    /// (the last one unbounded; the first low key is empty).
    lows: Vec<Vec<u8>>,
    loaded: Vec<AtomicBool>,
    /// Ranges not loaded yet; at zero, `all` is set and the checks cost one load.
    missing: AtomicUsize,
    all: AtomicBool,
    /// One load at a time (a second caller for the same range finds it loaded).
    pub(crate) load_lock: Mutex<()>,
    /// Test only: spans are checked at their start only (the planted bug of
    /// `LogOptions::lazy_gaps_unchecked_for_tests`).
    unchecked_gaps: bool,
}

impl Residency {
    /// Nothing loaded yet, over the ranges starting at `lows` (sorted, the first empty).
    pub(crate) fn new(lows: Vec<Vec<u8>>, unchecked_gaps: bool) -> Self {
        debug_assert!(lows.first().is_some_and(|l| l.is_empty()));
        let n = lows.len();
        Residency {
            loaded: (0..n).map(|_| AtomicBool::new(false)).collect(),
            lows,
            missing: AtomicUsize::new(n),
            all: AtomicBool::new(n == 0),
            load_lock: Mutex::new(()),
            unchecked_gaps,
        }
    }

    /// Whether every range is loaded.
    #[inline]
    pub(crate) fn all_loaded(&self) -> bool {
        self.all.load(Ordering::Acquire)
    }

    /// The first range overlapping `from..=to` (`to` `None`: to the end) that is not
    /// loaded.
    pub(crate) fn first_missing(&self, from: &[u8], to: Option<&[u8]>) -> Option<usize> {
        let to = if self.unchecked_gaps { Some(from) } else { to };
        let first = self.lows.partition_point(|l| l.as_slice() <= from).saturating_sub(1);
        (first..self.lows.len())
            .take_while(|&i| i == first || to.is_none_or(|t| self.lows[i].as_slice() <= t))
            .find(|&i| !self.loaded[i].load(Ordering::Acquire))
    }

    /// Range `i`: its low key and its end (exclusive; `None`: unbounded).
    pub(crate) fn range(&self, i: usize) -> (&[u8], Option<&[u8]>) {
        (&self.lows[i], self.lows.get(i + 1).map(Vec::as_slice))
    }

    /// Whether range `i` is loaded.
    pub(crate) fn is_loaded(&self, i: usize) -> bool {
        self.loaded[i].load(Ordering::Acquire)
    }

    /// Range `i` is in the index now (called under `load_lock`, after its records went in:
    /// whoever sees the flag sees them).
    pub(crate) fn mark_loaded(&self, i: usize) {
        if !self.loaded[i].swap(true, Ordering::AcqRel) && self.missing.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.all.store(true, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lows(ks: &[&str]) -> Vec<Vec<u8>> {
        ks.iter().map(|k| k.as_bytes().to_vec()).collect()
    }

    #[test]
    fn ranges_overlapping_a_span_are_found_until_all_are_loaded() {
        let r = Residency::new(lows(&["", "d", "m", "t"]), false);
        assert_eq!(r.first_missing(b"a", Some(b"c")), Some(0));
        assert_eq!(r.first_missing(b"e", Some(b"z")), Some(1));
        assert_eq!(r.first_missing(b"z", None), Some(3));
        r.mark_loaded(1);
        // `m` itself starts range 2: the span reaches it.
        assert_eq!(r.first_missing(b"e", Some(b"m")), Some(2));
        assert_eq!(r.first_missing(b"e", Some(b"l")), None);
        assert_eq!(r.range(1), (&b"d"[..], Some(&b"m"[..])));
        assert_eq!(r.range(3), (&b"t"[..], None));
        for i in [0, 2, 3] {
            assert!(!r.all_loaded());
            r.mark_loaded(i);
        }
        r.mark_loaded(3);
        assert!(r.all_loaded());
        assert_eq!(r.first_missing(b"", None), None);
    }
}
