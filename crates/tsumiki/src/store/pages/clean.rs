//! Cleaning: dead images counted per segment, and the victims chosen each checkpoint so
//! that the store stays within its space goal; and the pages that deletes left mostly
//! dead, rewritten a checkpoint's share at a time.

use super::*;

impl PageStore {
    /// Marks the image at `r` dead (its page moved on).
    pub(super) fn dead(&mut self, r: ImageRef) {
        let cur = self.cur.as_ref().map(|c| c.0);
        if let Some(s) = self.segs.get_mut(&r.seg) {
            s.live = s.live.saturating_sub(r.len as u64);
            if s.live == 0 && cur != Some(r.seg) {
                self.segs.remove(&r.seg);
                if self.early_reuse {
                    self.free.insert(r.seg);
                } else {
                    self.freed.push(r.seg);
                }
            }
        }
    }

    /// The segments cleaning relocates this time: while the files (with `coming` bytes
    /// about to be written) hold more than [`SPACE_GOAL`] times the live bytes, the best by
    /// cost-benefit, within `shares` eighths of the live data.
    pub(super) fn pick_victims(&self, coming: u64, shares: u64) -> BTreeSet<u32> {
        let cur = self.cur.as_ref().map(|c| c.0);
        let live = self.live_bytes();
        let mut files = (self.segs.len() as u64) * self.segment_bytes + coming;
        let slack = 2 * self.segment_bytes;
        // What cleaning a segment costs: every page with an image in it is rewritten whole.
        // A segment of one checkpoint's deltas names most pages: cleaning it would rewrite
        // the database (those pages consolidate by themselves as their deltas grow).
        // Each page's bytes once per segment its chain touches (chains are short: a segment
        // met earlier in the chain is skipped), into a map over the few segments: no vector
        // and no SipHash lookups per page at every checkpoint (pick_victims and its hashing
        // were ~7% of a YCSB-A checkpoint's CPU samples; 7.50 -> 7.30 µs per transaction).
        let mut cost: BTreeMap<u32, u64> = self.segs.keys().map(|&n| (n, 0)).collect();
        for p in self.pages.iter() {
            let bytes: u64 = p.chain.iter().map(|r| u64::from(r.len)).sum();
            for (i, r) in p.chain.iter().enumerate() {
                if p.chain[..i].iter().all(|e| e.seg != r.seg) {
                    *cost.entry(r.seg).or_default() += bytes;
                }
            }
        }
        let mut cands: Vec<(f64, u32, u64, u64)> = self
            .segs
            .iter()
            .filter(|(n, _)| Some(**n) != cur)
            .map(|(n, s)| {
                let freed = self.segment_bytes.saturating_sub(s.live) as f64;
                let age = self.gen.saturating_sub(s.gen) as f64 + 1.0;
                let c = cost.get(n).copied().unwrap_or(0);
                (freed * age / (c as f64 + 1.0), *n, s.live, c)
            })
            .collect();
        cands.sort_by(|a, b| b.0.total_cmp(&a.0));
        // Rewrites per checkpoint stay a fraction of the data, and a few times what the
        // changes take (cleaning keeps pace with the space they use: a checkpoint of a
        // few synced commits must not relocate an eighth of the data).
        let mut budget = (live * shares / RELOCATION_SHARE).min((CLEANING_PACE * self.last_pass).max(slack));
        let mut victims = BTreeSet::new();
        for (_, n, l, c) in cands {
            if files as f64 <= SPACE_GOAL * live as f64 + slack as f64 || victims.len() >= CLEAN_PER_CHECKPOINT {
                break;
            }
            if c > budget {
                continue;
            }
            budget -= c;
            victims.insert(n);
            // Its live bytes are written again elsewhere.
            files = files.saturating_sub(self.segment_bytes - l.min(self.segment_bytes));
        }
        victims
    }

    /// The pages (indices into the table, ascending) this checkpoint rewrites because their
    /// delete markers left them mostly dead: those whose dead bytes ([`DEAD_WEIGHT`] times)
    /// and deltas pass their delta room, the deadest first, within cleaning's budget of
    /// bytes written (a page's images less its dead bytes; the small neighbours a reclaimed
    /// page takes in are not charged, see `apply_pass`). Rewriting them all in the
    /// checkpoint after a mass delete wrote about the remaining data at once, beside the
    /// commits (the pops after 500K removals in `bench kv` fell from 376K to 198K a
    /// second); at this pace a store converges over the next few checkpoints, a small one
    /// (under two segments of rewrites) at once.
    pub(super) fn pick_reclaim(&self) -> Vec<usize> {
        let slack = 2 * self.segment_bytes;
        let mut budget = (self.live_bytes() / RELOCATION_SHARE).min(CLEANING_PACE * self.last_pass).max(slack);
        let mut due: Vec<(f64, usize, u64)> = self
            .pages
            .iter()
            .enumerate()
            .filter(|(_, p)| p.dead > 0)
            .filter_map(|(i, p)| {
                let (base, deltas) = p.base_and_deltas();
                let dead = u64::from(p.dead).min(base);
                (deltas + DEAD_WEIGHT * dead > delta_limit(p.pid, base))
                    .then(|| (dead as f64 / base.max(1) as f64, i, p.live_estimate()))
            })
            .collect();
        due.sort_by(|a, b| b.0.total_cmp(&a.0));
        let mut picked: Vec<usize> = Vec::new();
        for (_, i, cost) in due {
            if cost <= budget {
                budget -= cost;
                picked.push(i);
            }
        }
        picked.sort_unstable();
        picked
    }
}

/// How much more a dead base byte weighs against a page's delta room than a delta's byte
/// when [`PageStore::pick_reclaim`] decides a page is due. The room may reach the whole
/// base (the largest of `delta_limit`'s spread): at one, such a page could be all dead
/// before a rewrite (75% deletes left 2x the records' bytes in the test); at two it is due
/// before half of its base is dead.
const DEAD_WEIGHT: u64 = 2;
