//! Version garbage collection for MVCC snapshot isolation (paper 000): which versions of a
//! chain no active transaction can still see, and when to look.
//!
//! - [`Gc::None`]: nothing is reclaimed.
//! - [`Gc::Aot`] (Steam): a worker's writes prune below the version visible to the Active
//!   Oldest Transaction's timestamp.
//! - [`Gc::Epo`] (Böttcher et al., VLDB 2019): a worker's writes prune with the sorted list of
//!   active timestamps, keeping only the version each active transaction sees (Algorithm 1).
//! - [`Gc::EpoR`] (the paper's proposal): the same pruning triggered by reads, which walk the
//!   chain anyway, and every ABORTED version met is reclaimed at once (Algorithm 2).
//!
//! Workers rebuild their active list every `refresh` (100 ms in paper 000; 5 ms in the
//! original EPO). A list is a snapshot: transactions that began after it was built are not
//! in it, so its build-time timestamp is added as the newest entry; everything at or above
//! the version visible at that timestamp is kept, which is what those newer transactions
//! may see. (Paper 000's Figure 1 keeps 70 for active timestamp 85 on chain 90-80-70-60;
//! with "largest commit timestamp below the begin timestamp" the visible version is 80, as
//! its own section 3.1 example computes. tsumiki follows the rule, not the figure.)

use std::time::Duration;

/// The version garbage collector of MVCC-SI.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Gc {
    /// No reclamation.
    None,
    /// Active Oldest Transaction (Steam), triggered by writes.
    Aot,
    /// Eager Pruning of Obsolete versions, triggered by writes.
    Epo,
    /// EPO triggered by reads, reclaiming ABORTED versions at once (paper 000).
    #[default]
    EpoR,
}

crate::names::option_names!(Gc, "garbage collector", { None => "none", Aot => "aot", Epo => "epo", EpoR => "epo-r" | "epor" });

impl Gc {
    /// Parses a short name (`none`, `aot`, `epo`, `epo-r`; also the `FromStr` impl).
    pub fn parse(s: &str) -> Option<Gc> {
        s.parse().ok()
    }

    /// Whether reads prune (else writes do, if anything).
    pub(crate) fn on_read(self) -> bool {
        self == Gc::EpoR
    }

    pub(crate) fn on_write(self) -> bool {
        matches!(self, Gc::Aot | Gc::Epo)
    }
}

/// Paper 000's active-list refresh interval.
pub const DEFAULT_REFRESH: Duration = Duration::from_millis(100);

/// Counters of version garbage collection, summed over workers.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GcStats {
    /// Versions unlinked from chains (freed through the epoch).
    pub reclaimed: u64,
    /// Pruning traversals that reclaimed nothing.
    pub empty_traversals: u64,
    /// Pruning traversals in all.
    pub traversals: u64,
    /// Versions that pruning traversals met and could not reclaim, the newest of each
    /// chain aside (paper 000's measure of wasted traversal work), summed.
    pub unreclaimed: u64,
    /// Longest chain a traversal met.
    pub chain_max: u64,
    /// Mean chain length over traversals (reads and writes that walked a chain).
    pub chain_mean: f64,
    /// Versions currently held in chains.
    pub versions: i64,
    /// Bytes currently held by versions (headers and values).
    pub bytes: i64,
}

/// What a pruning pass decides for each version of a chain, newest first.
///
/// `states` gives each version as `(committed commit_ts, or None when not committed,
/// aborted?)`. `active` is descending and non-empty (its first entry is the list's build
/// timestamp). Returns which to keep.
pub(crate) fn keep_plan(states: &[(Option<u64>, bool)], active: &[u64], reclaim_aborted: bool, out: &mut Vec<bool>) {
    out.clear();
    out.resize(states.len(), false);
    debug_assert!(!active.is_empty());
    // The version each active timestamp sees: the first committed one below it.
    let visible = |a: u64| states.iter().position(|&(ts, _)| ts.is_some_and(|t| t < a));
    let Some(first) = visible(active[0]) else {
        // Nothing is visible to the newest list entry: keep everything not aborted.
        for (k, &(_, aborted)) in out.iter_mut().zip(states) {
            *k = !(aborted && reclaim_aborted);
        }
        return;
    };
    // At and above the newest entry's version: kept (pending versions, versions that
    // transactions newer than the list may see), except aborted ones under EPO-R.
    for i in 0..=first {
        out[i] = !(states[i].1 && reclaim_aborted);
    }
    out[first] = true;
    // Below it: versions not settled yet (a writer that skipped first-committer-wins in
    // the planted-bug tests can bury a pending one; it is still its owner's), and the
    // versions some active timestamp sees.
    for i in first + 1..states.len() {
        out[i] = states[i] == (None, false);
    }
    for &a in &active[1..] {
        if let Some(v) = visible(a) {
            out[v] = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(chain: &[u64], active: &[u64]) -> Vec<u64> {
        let states: Vec<_> = chain.iter().map(|&t| (Some(t), false)).collect();
        let mut out = Vec::new();
        keep_plan(&states, active, false, &mut out);
        chain.iter().zip(out).filter(|(_, k)| *k).map(|(&t, _)| t).collect()
    }

    #[test]
    fn paper_000_section_3_1_examples() {
        // Fresh list [105, 85] on [100, 90, 80, 70, 60]: 90, 70 and 60 are reclaimed.
        assert_eq!(plan(&[100, 90, 80, 70, 60], &[105, 85]), vec![100, 80]);
        // The stale list [85, 65] reclaims only 70.
        assert_eq!(plan(&[100, 90, 80, 70, 60], &[85, 65]), vec![100, 90, 80, 60]);
    }

    #[test]
    fn aot_keeps_the_version_the_oldest_sees_and_everything_newer() {
        assert_eq!(plan(&[100, 90, 80, 70, 60], &[75]), vec![100, 90, 80, 70]);
    }

    #[test]
    fn pending_and_aborted_versions() {
        // Pending head, aborted second: kept by EPO, the aborted one reclaimed by EPO-R.
        let states = [(None, false), (None, true), (Some(50), false), (Some(40), false)];
        let mut out = Vec::new();
        keep_plan(&states, &[60], false, &mut out);
        assert_eq!(out, vec![true, true, true, false]);
        keep_plan(&states, &[60], true, &mut out);
        assert_eq!(out, vec![true, false, true, false]);
        // Aborted below the kept versions go either way.
        let states = [(Some(50), false), (None, true), (Some(40), false)];
        keep_plan(&states, &[60], false, &mut out);
        assert_eq!(out, vec![true, false, false]);
    }
}
