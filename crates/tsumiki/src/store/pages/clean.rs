//! Cleaning: dead images counted per segment, and the victims chosen each checkpoint so
//! that the store stays within its space goal.

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
        let live: u64 = self.segs.values().map(|s| s.live).sum();
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
}
