//! Bulk loading: building a tree bottom-up from records already sorted by key.
//!
//! Opening a database loads a snapshot (up to millions of sorted, unique records) into a
//! tree nobody else can see yet. Inserting them one by one pays a descent, a delta,
//! consolidations and splits per record; here base nodes are built directly instead:
//! leaves filled to `fill(leaf_max)`, then each inner level from the low keys of the level
//! below, up to a single root. The result is the tree the rest of the code expects: the same
//! `Range`s (low key, high key = the right sibling's low key, right-sibling pid), inner
//! `keys[0]` = the node's low key, bases built through `KeyVecBuilder::push` and `finish`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crossbeam_epoch::Owned;

use super::mapping::{MappingTable, Pid, NO_PID};
use super::node::{cmp_prefixed, prefix, Base, Child, KeyVecBuilder, Node, Range};
use super::tree::Tree;
use super::{BwTreeConfig, IndexError, MAX_KEY_LEN};

/// Entries a bulk-loaded node gets: 7/8 of `max`, so later inserts find room before a split,
/// but never under the merge threshold (nor over `max`).
pub(crate) fn fill(max: usize, merge_threshold: usize) -> usize {
    (max * 7 / 8).max(merge_threshold).clamp(1, max)
}

/// Leaf records being gathered, not yet in the mapping table.
struct Pending<V> {
    keys: KeyVecBuilder,
    vals: Vec<V>,
}

impl<V> Pending<V> {
    fn new(cap: usize) -> Self {
        Pending { keys: KeyVecBuilder::with_capacity(cap, cap * 16), vals: Vec::with_capacity(cap) }
    }
    fn len(&self) -> usize {
        self.vals.len()
    }
}

/// Separators and pids of one level's nodes, in order (flat key bytes, no box per key).
#[derive(Default)]
struct Level {
    data: Vec<u8>,
    ends: Vec<usize>,
    pids: Vec<Pid>,
}

impl Level {
    fn push(&mut self, low: &[u8], pid: Pid) {
        self.data.extend_from_slice(low);
        self.ends.push(self.data.len());
        self.pids.push(pid);
    }
    fn len(&self) -> usize {
        self.pids.len()
    }
    fn key(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.data[start..self.ends[i]]
    }
}

/// Sizes of the nodes `n` entries are cut into: `fill` each, except that a last node under
/// the merge threshold shares with the one before it (one node if both fit in `max`, else
/// two halves, each at least `max / 2 >= merge_threshold`). No node but a lone one gets
/// fewer than two entries.
fn chunk_sizes(n: usize, fill: usize, max: usize, merge: usize) -> Vec<usize> {
    // A node of one entry is never useful (an inner one would route nowhere else).
    let merge = merge.max(2);
    let mut sizes = vec![fill; n / fill];
    let rest = n % fill;
    if rest > 0 {
        match sizes.pop() {
            Some(f) if rest < merge => {
                let t = f + rest;
                if t <= max {
                    sizes.push(t);
                } else {
                    sizes.extend([t - t / 2, t / 2]);
                }
            }
            Some(f) => sizes.extend([f, rest]),
            None => sizes.push(rest),
        }
    }
    sizes
}

/// Builds a tree from records pushed in strictly increasing key order.
pub(crate) struct Builder<V> {
    cfg: BwTreeConfig,
    map: MappingTable<V>,
    leaf_fill: usize,
    /// A full leaf held back until the end, so that a short last leaf can share with it.
    prev: Option<Pending<V>>,
    cur: Pending<V>,
    /// The pid the next leaf put in the table gets (allocated by the leaf before it, which
    /// needs it as its right link).
    next_pid: Pid,
    leaves: Level,
    pushed: u64,
}

impl<V: Clone + Send + Sync + 'static> Builder<V> {
    pub(crate) fn new(cfg: BwTreeConfig) -> Result<Self, IndexError> {
        let map = MappingTable::new();
        let next_pid = map.alloc().ok_or(IndexError::TooManyPages)?;
        let leaf_fill = fill(cfg.leaf_max, cfg.merge_threshold);
        Ok(Builder {
            cfg,
            map,
            leaf_fill,
            prev: None,
            cur: Pending::new(leaf_fill),
            next_pid,
            leaves: Level::default(),
            pushed: 0,
        })
    }

    pub(crate) fn len(&self) -> u64 {
        self.pushed
    }

    fn last_key(&self) -> Option<&[u8]> {
        let p = if self.cur.len() > 0 { &self.cur } else { self.prev.as_ref()? };
        Some(p.keys.get(p.len() - 1))
    }

    pub(crate) fn push(&mut self, key: &[u8], val: V) -> Result<(), IndexError> {
        if key.len() > MAX_KEY_LEN {
            return Err(IndexError::KeyTooLong { len: key.len(), max: MAX_KEY_LEN });
        }
        if let Some(last) = self.last_key() {
            if cmp_prefixed(prefix(key), key, prefix(last), last).is_le() {
                return Err(IndexError::NotSorted { index: self.pushed });
            }
        }
        if self.cur.len() == self.leaf_fill {
            let full = std::mem::replace(&mut self.cur, Pending::new(self.leaf_fill));
            if let Some(p) = self.prev.replace(full) {
                // Its successor (the leaf just filled) exists: its high key is that one's first.
                let high = self.prev.as_ref().map(|n| Box::<[u8]>::from(n.keys.get(0)));
                self.emit_leaf(p, high)?;
            }
        }
        self.cur.keys.push(key);
        self.cur.vals.push(val);
        self.pushed += 1;
        Ok(())
    }

    /// Puts a leaf in the table at `next_pid`, allocating its right sibling's pid first.
    fn emit_leaf(&mut self, p: Pending<V>, high: Option<Box<[u8]>>) -> Result<(), IndexError> {
        let pid = self.next_pid;
        let right = if high.is_some() { self.map.alloc().ok_or(IndexError::TooManyPages)? } else { NO_PID };
        let low: Box<[u8]> = if self.leaves.len() == 0 { Box::default() } else { p.keys.get(0).into() };
        self.leaves.push(&low, pid);
        let range = Arc::new(Range::new(low, high, right));
        let base = Base { range, keys: p.keys.finish(), vals: p.vals, children: Vec::new() };
        self.map.slot(pid).store(Owned::new(Node::base(0, base)), Ordering::Release);
        self.next_pid = right;
        Ok(())
    }

    pub(crate) fn finish(mut self) -> Result<Tree<V>, IndexError> {
        if self.pushed == 0 {
            return Ok(Tree::new(self.cfg));
        }
        let cur = std::mem::replace(&mut self.cur, Pending::new(0));
        match self.prev.take() {
            None => self.emit_leaf(cur, None)?,
            Some(prev) => {
                let sizes =
                    chunk_sizes(prev.len() + cur.len(), self.leaf_fill, self.cfg.leaf_max, self.cfg.merge_threshold);
                if sizes.len() == 2 && sizes[0] == prev.len() {
                    let high = Some(cur.keys.get(0).into());
                    self.emit_leaf(prev, high)?;
                    self.emit_leaf(cur, None)?;
                } else {
                    // The last leaf would underflow: re-cut the last two.
                    let mut vals = prev.vals;
                    vals.extend(cur.vals);
                    let key = |i: usize| {
                        if i < prev.keys.len() {
                            prev.keys.get(i)
                        } else {
                            cur.keys.get(i - prev.keys.len())
                        }
                    };
                    let mut start = 0;
                    let mut parts = Vec::new();
                    for &s in &sizes {
                        let mut p = Pending::new(s);
                        for i in start..start + s {
                            p.keys.push(key(i));
                        }
                        start += s;
                        parts.push(p);
                    }
                    for p in parts.iter_mut().rev() {
                        p.vals = vals.split_off(vals.len() - p.keys.len());
                    }
                    let n = parts.len();
                    let highs: Vec<Option<Box<[u8]>>> =
                        (0..n).map(|i| parts.get(i + 1).map(|q| q.keys.get(0).into())).collect();
                    for (p, high) in parts.into_iter().zip(highs) {
                        self.emit_leaf(p, high)?;
                    }
                }
            }
        }
        let mut level = std::mem::take(&mut self.leaves);
        let inner_fill = fill(self.cfg.inner_max, self.cfg.merge_threshold);
        let mut height: u16 = 0;
        while level.len() > 1 {
            height += 1;
            let sizes = chunk_sizes(level.len(), inner_fill, self.cfg.inner_max, self.cfg.merge_threshold);
            let pids = sizes
                .iter()
                .map(|_| self.map.alloc().ok_or(IndexError::TooManyPages))
                .collect::<Result<Vec<_>, _>>()?;
            let mut up = Level::default();
            let mut start = 0;
            for (j, &s) in sizes.iter().enumerate() {
                let end = start + s;
                let bytes = level.ends[end - 1] - if start == 0 { 0 } else { level.ends[start - 1] };
                let mut keys = KeyVecBuilder::with_capacity(s, bytes);
                for i in start..end {
                    keys.push(level.key(i));
                }
                let keys = keys.finish();
                let children = level.pids[start..end].iter().map(|&p| Child::new(p)).collect();
                let low: Box<[u8]> = level.key(start).into();
                let (high, right) = match pids.get(j + 1) {
                    Some(&r) => (Some(level.key(end).into()), r),
                    None => (None, NO_PID),
                };
                up.push(&low, pids[j]);
                let range = Arc::new(Range::new(low, high, right));
                let base = Base { range, keys, vals: Vec::new(), children };
                self.map.slot(pids[j]).store(Owned::new(Node::base(height, base)), Ordering::Release);
                start = end;
            }
            level = up;
        }
        let map = std::mem::replace(&mut self.map, MappingTable::new());
        Ok(Tree { map, root: AtomicU64::new(level.pids[0]), cfg: self.cfg.clone(), counters: Default::default() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_sizes_never_underflow() {
        for max in [4usize, 5, 8, 16, 128] {
            for merge in 0..=max / 2 {
                let f = fill(max, merge);
                for n in 1..(max * 6) {
                    let s = chunk_sizes(n, f, max, merge);
                    assert_eq!(s.iter().sum::<usize>(), n, "{max} {merge} {n}");
                    assert!(s.iter().all(|&c| c >= 1 && c <= max), "{max} {merge} {n}: {s:?}");
                    if s.len() > 1 {
                        assert!(s.iter().all(|&c| c >= merge), "{max} {merge} {n}: {s:?}");
                        assert!(s.iter().all(|&c| c >= 2), "{max} {merge} {n}: {s:?}");
                    }
                }
            }
        }
    }
}
