//! The sorted keys of a base node, laid out for the descent ([`KeyVec`]), and the integer
//! prefixes every key comparison of the tree starts with.

use std::cmp::Ordering as CmpOrdering;

use smallvec::SmallVec;

use crate::prefetch::{prefetch, prefetch_span};
use crate::slab::SlabBytes;

/// The first 8 bytes of a key, big-endian and zero-padded. Order-preserving: if
/// `prefix(a) < prefix(b)` then `a < b`, so searches compare these integers and touch the
/// key bytes only on a tie.
#[inline]
pub(crate) fn prefix(key: &[u8]) -> u64 {
    match key.first_chunk::<8>() {
        Some(b) => u64::from_be_bytes(*b),
        // A loop, not a variable-length copy, which would be a call to memcpy.
        None => key.iter().enumerate().fold(0, |p, (i, &c)| p | (c as u64) << (56 - 8 * i)),
    }
}

/// Compares two keys given with their prefixes, touching the bytes only on a prefix tie.
#[inline]
pub(crate) fn cmp_prefixed(ap: u64, a: &[u8], bp: u64, b: &[u8]) -> CmpOrdering {
    match ap.cmp(&bp) {
        // Equal prefixes of keys no longer than the prefix: the shorter key is smaller.
        CmpOrdering::Equal if a.len() <= 8 && b.len() <= 8 => a.len().cmp(&b.len()),
        CmpOrdering::Equal => a.cmp(b),
        o => o,
    }
}

/// Fence entries, held in the node itself (two cache lines of prefixes).
const FENCE_LEN: usize = 16;
/// The shortest stride between fence entries (log2): runs of 8 prefixes, one cache line.
const MIN_STRIDE_SHIFT: u32 = 3;
/// Runs of prefixes up to this long are counted rather than bisected (four cache lines).
const SHORT_RUN: usize = 32;
/// The most bytes of a run's keys a record search prefetches (four lines: eight 24-byte
/// keys; longer keys are compared at their start first anyway).
const PREFETCH_KEY_BYTES: usize = 256;

/// Sorted keys, packed for a descent that waits on as few cache misses as possible.
///
/// A search first counts the fence (every `stride`-th prefix, at most 16, kept inline so
/// they arrive with the node's own cache lines), which names the run of `stride` keys the
/// answer lies in. It then prefetches, all at once, what the rest of the search and its
/// caller touch: the run's key bounds, the caller's parallel entry (a value or child), and,
/// for a record lookup, the run's key bytes (located by `fence_at`). Only then does it count
/// the run's prefixes. The misses overlap instead of following one another: the node's
/// lines, then one round for the run, where separate arrays cost a round each.
///
/// Everything but the fence lives in one allocation, `block`: the prefixes (`u64`, native
/// order), the key ends (`u32`), then the key bytes.
///
/// Prefix truncation: if some key is longer than a prefix (8 bytes) and all keys share their
/// first `skip` bytes, the stored prefixes are those of the bytes after them, so keys with a
/// long common start (64-byte keys that differ in their last 8 bytes) still compare as
/// integers; a search compares the shared bytes once.
///
/// Immutable once built: [`KeyVecBuilder`] collects the keys.
#[derive(Clone)]
pub(crate) struct KeyVec {
    /// `fence[j]` = the stored prefix of key `j << shift`, for `j < nf`.
    fence: [u64; FENCE_LEN],
    /// `fence_at[j]` = where key `j << shift` starts in the key bytes.
    fence_at: [u32; FENCE_LEN],
    n: u32,
    skip: u32,
    nf: u8,
    /// log2 of the fence stride: the smallest from `MIN_STRIDE_SHIFT` up that needs at
    /// most `FENCE_LEN` entries.
    shift: u8,
    /// In a slab block: on a huge page (see [`crate::slab`]).
    block: SlabBytes,
}

impl Default for KeyVec {
    fn default() -> Self {
        KeyVecBuilder::default().finish()
    }
}

impl KeyVec {
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.n as usize
    }

    /// Where key `i`'s prefix is in a block of keys (prefixes first, then ends, then bytes).
    #[inline]
    pub(crate) const fn prefix_offset(i: usize) -> usize {
        8 * i
    }

    /// Where key `i`'s end is in a block of `n` keys.
    #[inline]
    pub(crate) const fn end_offset(n: usize, i: usize) -> usize {
        8 * n + 4 * i
    }

    /// Where the key bytes start in a block of `n` keys.
    #[inline]
    pub(crate) const fn data_offset(n: usize) -> usize {
        12 * n
    }

    /// Where the key bytes start in `block`.
    #[inline]
    fn data_start(&self) -> usize {
        Self::data_offset(self.len())
    }

    /// The address of the block (prefixes first): a prefetch hint for a parent's entry.
    #[inline]
    pub(crate) fn block_addr(&self) -> usize {
        self.block.as_ptr().addr()
    }

    /// Where `key` lies between keys `i` and `i + 1`, as integers of one scale: `(key,
    /// key i, key i + 1)` as stored (past the shared start, whose bytes `key` is assumed to
    /// have: a key routed between two of these keys has them). For the last key, `high`
    /// (the prefix of the node's high key) stands for key `i + 1` when no start is shared.
    /// An estimate for prefetches, not an order.
    #[inline]
    pub(crate) fn interpolation(&self, key: &[u8], i: usize, high: u64) -> Option<(u64, u64, u64)> {
        let skip = self.skip as usize;
        let hi = match i + 1 < self.len() {
            true => self.stored_prefix(i + 1),
            false if skip == 0 => high,
            false => return None,
        };
        Some((prefix(key.get(skip..)?), self.stored_prefix(i), hi))
    }

    /// Bytes of all keys together.
    pub(crate) fn data_len(&self) -> usize {
        self.block.len() - self.data_start()
    }

    /// The prefix stored for key `i` (of its bytes after `skip`).
    #[inline]
    fn stored_prefix(&self, i: usize) -> u64 {
        u64::from_ne_bytes(*self.block[Self::prefix_offset(i)..].first_chunk::<8>().expect("a prefix per key"))
    }

    /// Where key `i` ends in the key bytes.
    #[inline]
    fn end(&self, i: usize) -> usize {
        let at = Self::end_offset(self.len(), i);
        u32::from_ne_bytes(*self.block[at..].first_chunk::<4>().expect("an end per key")) as usize
    }

    #[inline]
    pub(crate) fn get(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.end(i - 1) };
        let d = self.data_start();
        &self.block[d + start..d + self.end(i)]
    }

    /// `prefix` of key `i` (of the whole key, whatever the truncation).
    #[inline]
    pub(crate) fn prefix(&self, i: usize) -> u64 {
        if self.skip == 0 {
            self.stored_prefix(i)
        } else {
            prefix(self.get(i))
        }
    }

    /// `Ok(i)` if `key` is at `i`, else `Err(i)` where it would be inserted.
    #[inline]
    pub(crate) fn search(&self, key: &[u8]) -> Result<usize, usize> {
        self.search_in(key, &[] as &[u8], false)
    }

    /// [`search`](Self::search), prefetching the entries of `beside` (an array parallel to
    /// the keys: an inner base's children) of the run the answer lies in.
    #[inline]
    pub(crate) fn search_beside<T>(&self, key: &[u8], beside: &[T]) -> Result<usize, usize> {
        self.search_in(key, beside, false)
    }

    /// [`search_beside`](Self::search_beside) for a lookup that expects to find its key (a
    /// leaf's record): prefetches the run's key bytes too, which an exact match compares.
    #[inline]
    pub(crate) fn search_record<T>(&self, key: &[u8], vals: &[T]) -> Result<usize, usize> {
        self.search_in(key, vals, true)
    }

    #[inline(always)]
    fn search_in<T>(&self, key: &[u8], beside: &[T], key_bytes: bool) -> Result<usize, usize> {
        let n = self.len();
        let d = self.data_start();
        let skip = self.skip as usize;
        let rest = if skip == 0 {
            key
        } else {
            // Every key starts with `common`: a key that does not is below or above them all.
            let common = &self.block[d..d + skip];
            match key[..key.len().min(skip)].cmp(common) {
                CmpOrdering::Less => return Err(0),
                CmpOrdering::Greater => return Err(n),
                CmpOrdering::Equal => key.get(skip..).ok_or(0usize)?,
            }
        };
        let kp = prefix(rest);
        // fence[j] = prefixes[j << shift] and prefixes are sorted, so: every index up to
        // (j-1) << shift with fence[j-1] < kp holds a smaller key, and every index from
        // j << shift with fence[j] > kp a greater one. The answer lies between. Runs are
        // counted, not bisected: their loads do not wait on each other.
        let nf = self.nf as usize;
        let fence = &self.fence[..nf];
        let below = fence.iter().map(|&f| (f < kp) as usize).sum::<usize>();
        let upto = below + fence[below..].iter().take_while(|&&f| f == kp).count();
        let shift = self.shift as u32;
        let mut lo = if below == 0 { 0 } else { ((below - 1) << shift) + 1 };
        let mut hi = (upto << shift).min(n);
        if hi > lo {
            for i in [lo, hi - 1] {
                prefetch(self.block.get(Self::end_offset(n, i)));
            }
            // Every line of the run's entries: wider than the keys' (an inner base's `Child`).
            if let Some(run) = beside.get(lo..hi) {
                prefetch_span(run.as_ptr().cast(), std::mem::size_of_val(run));
            }
            if key_bytes {
                let first = self.fence_at[below.saturating_sub(1)] as usize;
                let last = if upto < nf { self.fence_at[upto] as usize } else { self.data_len() };
                let last = last.min(first + PREFETCH_KEY_BYTES);
                prefetch_span(self.block.as_ptr().wrapping_add(d + first), last - first);
            }
        }
        let count_below = |from: usize, to: usize| {
            self.block[8 * from..8 * to]
                .chunks_exact(8)
                .map(|c| (u64::from_ne_bytes(c.try_into().expect("8 bytes")) < kp) as usize)
                .sum::<usize>()
        };
        if hi - lo <= SHORT_RUN {
            // The first key at or above `key` follows the prefixes below `kp`; equal
            // prefixes need their bytes.
            let mut i = lo + count_below(lo, hi);
            while i < hi && self.stored_prefix(i) == kp {
                match cmp_prefixed(kp, &self.get(i)[skip..], kp, rest) {
                    CmpOrdering::Less => i += 1,
                    CmpOrdering::Equal => return Ok(i),
                    CmpOrdering::Greater => break,
                }
            }
            return Err(i);
        }
        while lo < hi {
            let mid = (lo + hi) / 2;
            let ord = match self.stored_prefix(mid).cmp(&kp) {
                CmpOrdering::Equal => cmp_prefixed(kp, &self.get(mid)[skip..], kp, rest),
                o => o,
            };
            match ord {
                CmpOrdering::Less => lo = mid + 1,
                CmpOrdering::Greater => hi = mid,
                CmpOrdering::Equal => return Ok(mid),
            }
        }
        Err(lo)
    }
}

/// An edit for [`KeyVec::splice`]: `(i, Some(key))` inserts `key` before old key `i`,
/// `(i, None)` removes old key `i`.
pub(crate) type KeyEdit<'k> = (usize, Option<&'k [u8]>);

/// A piece of a [`KeyVec::splice`]d key sequence: old keys `a..b`, or a new key.
enum Piece<'k> {
    Old(usize, usize),
    New(&'k [u8]),
}

impl KeyVec {
    /// These keys with `edits` applied, built by copying the runs between the edits whole
    /// (prefixes, ends shifted by one add, key bytes) instead of pushing every key again:
    /// a leaf with a few new keys is consolidated every few inserts, and re-pushing its
    /// whole base was the largest cost of a random insert.
    ///
    /// `edits`, sorted by old index: `(i, Some(key))` inserts `key` before old key `i` (several
    /// at one `i` in key order), `(i, None)` removes old key `i`. The resulting keys must be
    /// sorted and distinct. The result is the [`KeyVecBuilder::finish`] of those keys.
    pub(crate) fn splice<'s>(&'s self, edits: &[KeyEdit<'s>]) -> KeyVec {
        let n = self.len();
        let mut pieces: SmallVec<[Piece<'s>; 16]> = SmallVec::new();
        let (mut at, mut new_n, mut data_len) = (0, n, self.data_len());
        for &(i, key) in edits {
            if i > at {
                pieces.push(Piece::Old(at, i));
                at = i;
            }
            match key {
                Some(k) => {
                    pieces.push(Piece::New(k));
                    new_n += 1;
                    data_len += k.len();
                }
                None => {
                    debug_assert!(i == at && i < n, "one removal per old key, in order");
                    data_len -= self.key_len(i);
                    new_n -= 1;
                    at = i + 1;
                }
            }
        }
        if n > at {
            pieces.push(Piece::Old(at, n));
        }
        let first_of = |p: &Piece<'s>| -> &'s [u8] {
            match *p {
                Piece::Old(a, _) => self.get(a),
                Piece::New(k) => k,
            }
        };
        let last_of = |p: &Piece<'s>| -> &'s [u8] {
            match *p {
                Piece::Old(_, b) => self.get(b - 1),
                Piece::New(k) => k,
            }
        };
        // As `finish` decides it.
        let long = pieces.iter().any(|p| match *p {
            Piece::Old(a, b) => (a..b).any(|i| self.key_len(i) > 8),
            Piece::New(k) => k.len() > 8,
        });
        let skip = match (pieces.first(), pieces.last()) {
            (Some(f), Some(l)) if new_n >= 2 && long => {
                first_of(f).iter().zip(last_of(l)).take_while(|(a, b)| a == b).count()
            }
            _ => 0,
        };
        // The old prefixes stand when the truncation does.
        let same_skip = skip == self.skip as usize;
        let shift = stride_shift(new_n);
        let (old_data, new_data) = (self.data_start(), KeyVec::data_offset(new_n));
        let block = SlabBytes::new(new_data + data_len, |block| {
            let (mut j, mut pos) = (0, 0);
            for p in &pieces {
                match *p {
                    Piece::Old(a, b) => {
                        let start = if a == 0 { 0 } else { self.end(a - 1) };
                        let end = self.end(b - 1);
                        if same_skip {
                            block[8 * j..8 * (j + b - a)].copy_from_slice(&self.block[8 * a..8 * b]);
                        }
                        let old_ends = &self.block[KeyVec::end_offset(n, a)..KeyVec::end_offset(n, b)];
                        let new_ends = &mut block[KeyVec::end_offset(new_n, j)..KeyVec::end_offset(new_n, j + b - a)];
                        for (o, w) in old_ends.chunks_exact(4).zip(new_ends.chunks_exact_mut(4)) {
                            let e = u32::from_ne_bytes(o.try_into().expect("4 bytes")) as usize;
                            w.copy_from_slice(&((e - start + pos) as u32).to_ne_bytes());
                        }
                        block[new_data + pos..new_data + pos + end - start]
                            .copy_from_slice(&self.block[old_data + start..old_data + end]);
                        j += b - a;
                        pos += end - start;
                    }
                    Piece::New(k) => {
                        if same_skip {
                            block[8 * j..8 * j + 8].copy_from_slice(&prefix(&k[skip..]).to_ne_bytes());
                        }
                        block[new_data + pos..new_data + pos + k.len()].copy_from_slice(k);
                        pos += k.len();
                        let e = KeyVec::end_offset(new_n, j);
                        block[e..e + 4].copy_from_slice(&(pos as u32).to_ne_bytes());
                        j += 1;
                    }
                }
            }
            if !same_skip {
                let mut start = 0;
                for i in 0..new_n {
                    let e = KeyVec::end_offset(new_n, i);
                    let end = u32::from_ne_bytes(block[e..e + 4].try_into().expect("4 bytes")) as usize;
                    let p = prefix(&block[new_data + start + skip..new_data + end]);
                    block[8 * i..8 * i + 8].copy_from_slice(&p.to_ne_bytes());
                    start = end;
                }
            }
        });
        let mut kv = KeyVec {
            fence: [0; FENCE_LEN],
            fence_at: [0; FENCE_LEN],
            n: new_n as u32,
            skip: skip as u32,
            nf: new_n.div_ceil(1 << shift) as u8,
            shift: shift as u8,
            block,
        };
        for f in 0..kv.nf as usize {
            let i = f << shift;
            kv.fence[f] = kv.stored_prefix(i);
            kv.fence_at[f] = if i == 0 { 0 } else { kv.end(i - 1) as u32 };
        }
        kv
    }

    /// The length of key `i`.
    #[inline]
    fn key_len(&self, i: usize) -> usize {
        self.end(i) - if i == 0 { 0 } else { self.end(i - 1) }
    }
}

/// log2 of the fence stride of `n` keys: the smallest from `MIN_STRIDE_SHIFT` up that needs
/// at most `FENCE_LEN` fence entries.
fn stride_shift(n: usize) -> u32 {
    let mut shift = MIN_STRIDE_SHIFT;
    while n.div_ceil(1 << shift) > FENCE_LEN {
        shift += 1;
    }
    shift
}

/// Collects sorted keys for a [`KeyVec`].
#[derive(Default)]
pub(crate) struct KeyVecBuilder {
    data: Vec<u8>,
    ends: Vec<u32>,
}

impl KeyVecBuilder {
    pub(crate) fn with_capacity(n: usize, bytes: usize) -> Self {
        KeyVecBuilder { data: Vec::with_capacity(bytes), ends: Vec::with_capacity(n) }
    }
    pub(crate) fn reserve(&mut self, n: usize, bytes: usize) {
        self.data.reserve(bytes);
        self.ends.reserve(n);
    }
    pub(crate) fn len(&self) -> usize {
        self.ends.len()
    }
    pub(crate) fn get(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.data[start..self.ends[i] as usize]
    }
    /// Appends a key greater than every key so far.
    pub(crate) fn push(&mut self, key: &[u8]) {
        self.data.extend_from_slice(key);
        self.ends.push(self.data.len() as u32);
    }

    /// Packs the keys: prefixes (truncated past a common start, see [`KeyVec`]), fence,
    /// ends and bytes, in one allocation of exactly their size.
    pub(crate) fn finish(self) -> KeyVec {
        let n = self.len();
        let longest = (0..n).map(|i| self.get(i).len()).max().unwrap_or(0);
        // Keys that fit in a prefix never tie on it: truncation would only add a compare of
        // the common start (a memcmp call) to every search.
        let skip = if n < 2 || longest <= 8 {
            0
        } else {
            // Sorted keys: what the first and last share, every key shares.
            self.get(0).iter().zip(self.get(n - 1)).take_while(|(a, b)| a == b).count()
        };
        let shift = stride_shift(n);
        let stride_mask = (1usize << shift) - 1;
        let mut fence = [0u64; FENCE_LEN];
        let mut fence_at = [0u32; FENCE_LEN];
        let data_at = KeyVec::data_offset(n);
        let block = SlabBytes::new(data_at + self.data.len(), |block| {
            let mut start = 0;
            for (i, &end) in self.ends.iter().enumerate() {
                let p = prefix(&self.data[start + skip..end as usize]);
                let (at, end_at) = (KeyVec::prefix_offset(i), KeyVec::end_offset(n, i));
                block[at..at + 8].copy_from_slice(&p.to_ne_bytes());
                block[end_at..end_at + 4].copy_from_slice(&end.to_ne_bytes());
                if i & stride_mask == 0 {
                    fence[i >> shift] = p;
                    fence_at[i >> shift] = start as u32;
                }
                start = end as usize;
            }
            block[data_at..].copy_from_slice(&self.data);
        });
        KeyVec {
            fence,
            fence_at,
            n: n as u32,
            skip: skip as u32,
            nf: n.div_ceil(1 << shift) as u8,
            shift: shift as u8,
            block,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Short keys, keys tying on the zero-padded prefix, and long keys sharing one prefix.
    fn any_key() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            proptest::collection::vec(prop_oneof![Just(0u8), Just(1u8), Just(255u8), any::<u8>()], 0..10),
            proptest::collection::vec(any::<u8>(), 0..3).prop_map(|t| [&b"samepref"[..], &t].concat()),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: if cfg!(miri) { 4 } else { 512 }, ..ProptestConfig::default() })]

        /// The fence-narrowed search (every stride, every truncation) agrees with a plain
        /// binary search, keys and prefixes read back as pushed, and prefix comparison
        /// agrees with byte-string order.
        #[test]
        fn keyvec_search_matches_sorted_vec(
            common in proptest::collection::vec(prop_oneof![Just(0u8), Just(7u8), any::<u8>()], 0..20),
            keys in proptest::collection::vec(any_key(), 0..700),
            probes in proptest::collection::vec(any_key(), 1..50),
        ) {
            // Keys with a shared start (truncated prefixes), probes with and without it.
            let mut keys: Vec<Vec<u8>> = keys.into_iter().map(|k| [&common[..], &k].concat()).collect();
            keys.sort();
            keys.dedup();
            let probes: Vec<Vec<u8>> = probes
                .iter()
                .flat_map(|p| [p.clone(), [&common[..], p].concat(), common[..common.len() / 2].to_vec()])
                .collect();
            let mut b = KeyVecBuilder::default();
            for k in &keys {
                b.push(k);
            }
            let kv = b.finish();
            prop_assert_eq!(kv.len(), keys.len());
            let vals: Vec<usize> = (0..keys.len()).collect();
            for probe in probes.iter().chain(keys.iter()) {
                let want = keys.binary_search(probe);
                prop_assert_eq!(kv.search(probe), want, "probe {:?}", probe);
                prop_assert_eq!(kv.search_record(probe, &vals), want, "probe {:?}", probe);
            }
            for (i, k) in keys.iter().enumerate() {
                prop_assert_eq!(kv.get(i), &k[..]);
                prop_assert_eq!(kv.prefix(i), prefix(k));
            }
            for w in keys.windows(2) {
                prop_assert_eq!(cmp_prefixed(prefix(&w[0]), &w[0], prefix(&w[1]), &w[1]), CmpOrdering::Less);
            }
        }

        /// A splice (inserts anywhere, removals, at the ends too, with the common start
        /// kept, shortened or lengthened) builds exactly the keys a fresh build of the
        /// edited list would: same prefixes, ends, bytes, fence and truncation.
        #[test]
        fn splice_matches_fresh_build(
            common in proptest::collection::vec(prop_oneof![Just(0u8), Just(7u8), any::<u8>()], 0..12),
            keys in proptest::collection::vec(any_key(), 0..300),
            added in proptest::collection::vec(any_key(), 0..12),
            removed in proptest::collection::vec(any::<proptest::sample::Index>(), 0..12),
            bare in proptest::collection::vec(any_key(), 0..3),
        ) {
            let mut keys: Vec<Vec<u8>> = keys.into_iter().map(|k| [&common[..], &k].concat()).collect();
            keys.sort();
            keys.dedup();
            let mut b = KeyVecBuilder::default();
            keys.iter().for_each(|k| b.push(k));
            let kv = b.finish();
            // New keys with the common start and some without (which change the truncation).
            let mut added: Vec<Vec<u8>> =
                added.into_iter().map(|k| [&common[..], &k].concat()).chain(bare).collect();
            added.sort();
            added.dedup();
            added.retain(|k| keys.binary_search(k).is_err());
            let mut removed: Vec<usize> =
                if keys.is_empty() { Vec::new() } else { removed.iter().map(|i| i.index(keys.len())).collect() };
            removed.sort();
            removed.dedup();
            // The edits in key order, as a consolidation makes them.
            let mut edits: Vec<KeyEdit<'_>> = added
                .iter()
                .map(|k| (keys.binary_search(k).unwrap_err(), Some(&k[..])))
                .chain(removed.iter().map(|&i| (i, None)))
                .collect();
            edits.sort_by_key(|&(i, k)| (i, k.is_none()));
            let spliced = kv.splice(&edits);
            let mut want: Vec<&[u8]> = keys
                .iter()
                .enumerate()
                .filter(|(i, _)| removed.binary_search(i).is_err())
                .map(|(_, k)| &k[..])
                .chain(added.iter().map(|k| &k[..]))
                .collect();
            want.sort();
            let mut b = KeyVecBuilder::default();
            want.iter().for_each(|k| b.push(k));
            let fresh = b.finish();
            prop_assert_eq!(spliced.len(), fresh.len());
            prop_assert_eq!(spliced.skip, fresh.skip);
            prop_assert_eq!((spliced.nf, spliced.shift), (fresh.nf, fresh.shift));
            prop_assert_eq!(spliced.fence, fresh.fence);
            prop_assert_eq!(spliced.fence_at, fresh.fence_at);
            prop_assert_eq!(&spliced.block[..], &fresh.block[..]);
            for (i, k) in want.iter().enumerate() {
                prop_assert_eq!(spliced.search(k), Ok(i));
            }
        }
    }

    /// Node sizes past every stride: 0 to 2,100 keys of 8 to 24 bytes, each found, and each
    /// gap between them placed.
    #[test]
    fn keyvec_search_every_size() {
        for n in (0..300).chain([511, 512, 513, 1023, 1024, 1025, 2100]) {
            let keys: Vec<Vec<u8>> =
                (0..n as u64).map(|i| (i * 2 + 1).to_be_bytes().repeat(1 + i as usize % 3)).collect();
            let mut sorted = keys.clone();
            sorted.sort();
            let mut b = KeyVecBuilder::default();
            sorted.iter().for_each(|k| b.push(k));
            let kv = b.finish();
            for (i, k) in sorted.iter().enumerate() {
                assert_eq!(kv.search(k), Ok(i), "n {n} key {i}");
                let below: Vec<u8> = [&k[..k.len() - 1], &[k[k.len() - 1] - 1]].concat();
                assert_eq!(kv.search(&below), sorted.binary_search(&below), "n {n} below key {i}");
            }
        }
    }
}
