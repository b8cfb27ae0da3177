//! What a generation's logs changed, for the checkpoint that ends it: every key its
//! records write, sorted and unique, with its last logged value.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;

use super::*;

/// Every key the records of generation `generation`'s logs write, sorted and unique,
/// with its last logged value: what changed since the checkpoint that started it. The
/// lanes were ended (by the switch to the next generation, or a close): synced, each up
/// to a block marked [`FLAG_LANE_END`]. A damaged or missing block before that end is an
/// error (a key missed here would be lost with the log), not a tail. Segments are read a
/// chunk at a time into one buffer, or, for a lane in `echoes`, taken from the copy of
/// its blocks kept as they were written. Values are kept while the kept ones (each lane's
/// distinct keys' last values) stay within the lane's share of `value_budget` bytes; past
/// it a key's value is [`Logged::Unknown`], for the caller to read elsewhere.
/// (`first_for_tests`: each key's first write is kept, a planted bug.)
///
/// Each lane is read into a list of its own, sorted with each key once, on up to
/// `helpers` threads besides the caller's when there are several lanes (a 16-thread
/// checkpoint spent a fifth of its time reading the logs back on one thread); then the
/// lists are merged, a key's write of the highest order winning.
pub fn logged_writes(
    storage: &dyn Storage,
    generation: u64,
    segment_size: u64,
    value_budget: usize,
    first_for_tests: bool,
    echoes: &Echoes,
    helpers: usize,
) -> Result<LoggedWrites, Error> {
    let lanes = segments_of(storage, generation)?;
    let registered = read_registry(storage, generation)?;
    let mut mine: Vec<(u16, &[u64])> = Vec::with_capacity(lanes.len());
    for (&lane, segs) in &lanes {
        if echoes.contains_key(&lane) || !foreign_lane(storage, generation, lane, registered) {
            mine.push((lane, segs));
        }
    }
    let budget = value_budget / mine.len().max(1);
    let read = |&(lane, segs): &(u16, &[u64])| {
        let mut writes = LoggedWrites { value_budget: budget, first_for_tests, ..LoggedWrites::default() };
        let seq = read_lane(storage, generation, segment_size, lane, segs, echoes.get(&lane), &mut writes)?;
        Ok((writes, seq))
    };
    let helper_cpu = AtomicU64::new(0);
    let results: Vec<LaneRead> = if helpers == 0 || mine.len() < 2 {
        mine.iter().map(read).collect()
    } else {
        let next = AtomicUsize::new(0);
        let slots: Vec<Mutex<Option<LaneRead>>> = mine.iter().map(|_| Mutex::new(None)).collect();
        let take = |me: bool| {
            let cpu = crate::background::thread_cpu_time();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(lane) = mine.get(i) else { break };
                *slots[i].lock() = Some(read(lane));
            }
            if !me {
                let used = crate::background::thread_cpu_time().saturating_sub(cpu);
                helper_cpu.fetch_add(used.as_micros() as u64, Ordering::Relaxed);
            }
        };
        std::thread::scope(|s| {
            // A thread the system refuses is one helper fewer.
            for _ in 0..helpers.min(mine.len() - 1) {
                let _ = std::thread::Builder::new().spawn_scoped(s, || take(false));
            }
            take(true);
        });
        slots.into_iter().map(|m| m.into_inner().expect("every lane was read")).collect()
    };
    let mut held = Vec::with_capacity(mine.len());
    let mut lists = Vec::with_capacity(mine.len());
    for (&(lane, _), r) in mine.iter().zip(results) {
        let (writes, seq) = r?;
        held.push((lane, !writes.is_empty(), seq > 0));
        lists.push(writes);
    }
    check_registry(storage, generation, &held)?;
    let mut writes = LoggedWrites::merged(lists, value_budget, first_for_tests);
    writes.helper_cpu = std::time::Duration::from_micros(helper_cpu.into_inner());
    Ok(writes)
}

/// A lane's writes, sorted with each key once, and the number of blocks it held.
type LaneRead = Result<(LoggedWrites, u32), Error>;

/// Reads lane `lane` of `generation` (its segments `segs`, or its in-memory copy `echo`)
/// into `writes`, sorted with each key once; returns the number of blocks it read.
fn read_lane(
    storage: &dyn Storage,
    generation: u64,
    segment_size: u64,
    lane: u16,
    segs: &[u64],
    echo: Option<&Vec<Vec<u8>>>,
    writes: &mut LoggedWrites,
) -> Result<u32, Error> {
    // A chunk's blocks at most, and what a record spanning them left: records are taken
    // out after each chunk, so the stream never grows past that (grown to a whole lane
    // of 64 MiB, its reallocations took most of a checkpoint's time).
    let mut stream: Vec<u8> = Vec::with_capacity(LANE_CHUNK + BLOCK);
    // Room for the lane's writes at once: grown by doubling, the lists of a 1M-record
    // generation were copied again and again (a realloc of a big block copies it).
    writes.reserve(match echo {
        Some(copy) => crate::wal::echo_len(copy),
        None => segs.iter().map(|&s| format::segment_len(s, segment_size) as usize).sum(),
    });
    let mut r = LaneBlocks { generation, lane, seq: 0, prev_used: None, ended: false, stream: &mut stream };
    match echo {
        // The lane's blocks as written (see `Echoes`): the same checks, no read.
        Some(copy) => {
            'copy: for chunk in copy.iter().flat_map(|piece| piece.chunks(LANE_CHUNK)) {
                for block in chunk.chunks(BLOCK) {
                    if r.block(block, "the in-memory copy")? {
                        break 'copy;
                    }
                }
                take_writes(r.stream, writes).map_err(|e| e.corrupt(None, None, &format!("lane {lane}")))?;
            }
        }
        None => {
            let mut chunk = vec![0u8; LANE_CHUNK];
            'lane: for (i, &seg) in segs.iter().enumerate() {
                let name = format::segment_name(generation, lane, seg);
                if seg != i as u64 {
                    return Err(corrupt(format!("log segment {i} of lane {lane} is missing")));
                }
                let f = storage.open(&name, false).map_err(|e| io(&name, e))?;
                let len = format::segment_len(seg, segment_size).min(f.len().map_err(|e| io(&name, e))?);
                // The lane's blocks follow the segment's header (a segment written
                // before headers has none: its blocks start at 0).
                let headered = has_header(&*f, generation, lane, seg).map_err(|e| io(&name, e))?;
                let mut off = if headered { format::SEGMENT_HEADER } else { 0 };
                while off < len {
                    let n = (chunk.len() as u64).min(len - off) as usize;
                    read_exact_at(&*f, &mut chunk[..n], off).map_err(|e| io(&name, e))?;
                    off += n as u64;
                    for block in chunk[..n].chunks(BLOCK) {
                        if r.block(block, &name)? {
                            break 'lane;
                        }
                    }
                    take_writes(r.stream, writes).map_err(|e| e.corrupt(None, None, &format!("lane {lane}")))?;
                }
            }
        }
    }
    let (seq, ended) = (r.seq, r.ended);
    if !ended {
        return Err(corrupt(format!(
            "lane {lane} of generation {generation} ends at block {seq} without its end block: blocks were lost"
        )));
    }
    // The blocks read before the lane's end.
    take_writes(&mut stream, writes).map_err(|e| e.corrupt(None, None, &format!("lane {lane}")))?;
    writes.sort_dedup();
    Ok(seq)
}

/// Copies of ended lanes' blocks, by lane, kept in memory as they were written (pieces
/// of whole blocks, in order; see
/// `Wal::take_echoes`): a lane written with direct I/O is not in the page cache, and
/// reading it back from the device doubled a synced workload's I/O.
pub type Echoes = std::collections::HashMap<u16, Vec<Vec<u8>>>;

/// A closed lane's blocks, in order, checked as they come: each must be the lane's next,
/// and follow a partly filled one only if final; the payloads gather in `stream`.
struct LaneBlocks<'s> {
    generation: u64,
    lane: u16,
    seq: u32,
    prev_used: Option<u16>,
    ended: bool,
    stream: &'s mut Vec<u8>,
}

impl LaneBlocks<'_> {
    /// Takes the next block (read from `from`); returns whether it is the lane's end.
    fn block(&mut self, block: &[u8], from: &str) -> Result<bool, Error> {
        match format::open_block(block, self.generation) {
            Some(t)
                if t.lane == self.lane
                    && t.seq == self.seq
                    && self.prev_used.is_none_or(|u| format::follows(u, &t)) =>
            {
                self.prev_used = Some(t.used);
                self.stream.extend_from_slice(&block[..t.used as usize]);
                self.seq = self.seq.wrapping_add(1);
                self.ended = t.flags & FLAG_LANE_END != 0;
                Ok(self.ended)
            }
            _ => Err(corrupt(format!(
                "{from}: block {} of lane {} is damaged or missing, before the lane's end",
                self.seq, self.lane
            ))),
        }
    }
}

/// The last logged value of a key (see [`logged_writes`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Logged<'a> {
    /// Written with this value.
    Value(&'a [u8]),
    /// Deleted.
    Deleted,
    /// Written, but its value was not kept (past the budget).
    Unknown,
}

/// `Write::vlen` of a delete, and of a value not kept.
const VLEN_DELETED: u32 = u32::MAX;
const VLEN_UNKNOWN: u32 = u32::MAX - 1;

/// One logged write: its key (and kept value, right after it) in `LoggedWrites::bytes`.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Write {
    at: u64,
    klen: u32,
    vlen: u32,
    /// The record's LSN or commit timestamp: a key's later write has a larger one, in
    /// whichever lane (the order recovery replays in).
    order: u64,
    /// The key's first 8 bytes, zero-padded, big-endian: ordered as the keys are, so that
    /// most comparisons of the sort need no `memcmp` (which took a fifth of a
    /// checkpoint's CPU).
    prefix: u64,
}

/// The fewest log bytes [`LoggedWrites::reserve`] expects a write to take (a 4-byte key
/// and an 8-byte value take about 35 in a record of two writes).
const LOG_BYTES_PER_WRITE: usize = 32;

/// Writes below which [`bucket_sort`] sorts by comparisons alone.
const BUCKET_MIN: usize = 4096;
/// The most buckets [`bucket_sort`] spreads writes into (16 bits of their prefixes).
const BUCKET_BITS: u32 = 16;

/// Sorts `writes` by `cmp`, which must order them by [`Write::prefix`] first: one pass
/// spreads them into buckets by the 16 bits of their prefixes below those they all share
/// (a counting sort into `scratch`), then each bucket is sorted by `cmp`. A checkpoint's
/// list holds every write of a generation: sorted by comparisons alone, it took a third of
/// the checkpoint's CPU beside one writer (a hundred thousand keys, each written about
/// twice per generation), and most buckets now hold a few writes.
fn bucket_sort(writes: &mut Vec<Write>, scratch: &mut Vec<Write>, cmp: impl Fn(&Write, &Write) -> std::cmp::Ordering) {
    if writes.len() < BUCKET_MIN {
        writes.sort_unstable_by(cmp);
        return;
    }
    let (lo, hi) = writes.iter().fold((u64::MAX, 0), |(lo, hi), w| (lo.min(w.prefix), hi.max(w.prefix)));
    // The buckets cover `lo..=hi` in order: the bits above the highest that differs
    // between them are the same in every prefix.
    let width = u64::BITS - (hi - lo).leading_zeros();
    let shift = width.saturating_sub(BUCKET_BITS);
    let bucket = |w: &Write| ((w.prefix - lo) >> shift) as usize;
    let mut starts = vec![0usize; (((hi - lo) >> shift) + 2) as usize];
    for w in writes.iter() {
        starts[bucket(w) + 1] += 1;
    }
    for i in 1..starts.len() {
        starts[i] += starts[i - 1];
    }
    scratch.clear();
    scratch.resize(writes.len(), Write::default());
    let mut next = starts.clone();
    for w in writes.iter() {
        let b = bucket(w);
        scratch[next[b]] = *w;
        next[b] += 1;
    }
    for pair in starts.windows(2) {
        if pair[1] - pair[0] > 1 {
            scratch[pair[0]..pair[1]].sort_unstable_by(&cmp);
        }
    }
    std::mem::swap(writes, scratch);
}

/// Orders two writes' keys (`key` gives a write's bytes). Keys of at most 8 bytes are
/// whole in their prefixes: with equal prefixes, the shorter one is the other's prefix (the
/// rest of the longer is the zeros that padded the shorter), so the lengths decide without
/// a `memcmp` (a key written twice ties on its prefix every time).
#[inline]
fn key_order<'a>(a: &Write, b: &Write, key: impl Fn(&Write) -> &'a [u8]) -> std::cmp::Ordering {
    a.prefix.cmp(&b.prefix).then_with(
        || {
            if a.klen <= 8 && b.klen <= 8 {
                a.klen.cmp(&b.klen)
            } else {
                key(a).cmp(key(b))
            }
        },
    )
}

impl Write {
    fn kept(&self) -> usize {
        if self.vlen >= VLEN_UNKNOWN {
            0
        } else {
            self.vlen as usize
        }
    }
}

/// Logged writes packed into one buffer (a checkpoint may list millions: one allocation
/// each would cost several times the keys' bytes).
#[derive(Debug, Default, Clone)]
pub struct LoggedWrites {
    pub(super) bytes: Vec<u8>,
    pub(super) writes: Vec<Write>,
    pub(super) value_budget: usize,
    /// Value bytes kept (as of the last [`sort_dedup`](Self::sort_dedup), plus those
    /// pushed since).
    pub(super) values_kept: usize,
    pub(super) first_for_tests: bool,
    /// Room for [`bucket_sort`]'s copy, kept from one sort to the next.
    pub(super) scratch: Vec<Write>,
    /// What the records changed in the number of present keys (their inserts less their
    /// removals).
    pub count_delta: i64,
    /// CPU the threads that helped read the lanes used (the caller's own is its own).
    pub helper_cpu: std::time::Duration,
}

impl LoggedWrites {
    /// Appends a write of `k` in a record of order `order` (`v`: `None` a delete).
    pub fn push(&mut self, k: &[u8], v: Option<&[u8]>, order: u64) {
        let at = self.bytes.len() as u64;
        self.bytes.extend_from_slice(k);
        let vlen = match v {
            None => VLEN_DELETED,
            Some(v) if self.values_kept + v.len() <= self.value_budget => {
                self.values_kept += v.len();
                self.bytes.extend_from_slice(v);
                v.len() as u32
            }
            Some(_) => VLEN_UNKNOWN,
        };
        let mut head = [0u8; 8];
        let n = k.len().min(8);
        head[..n].copy_from_slice(&k[..n]);
        self.writes.push(Write { at, klen: k.len() as u32, vlen, order, prefix: u64::from_be_bytes(head) });
    }

    /// Makes room for the writes of `log_bytes` more bytes of log: their keys and values
    /// take at most that, and a write's record at least [`LOG_BYTES_PER_WRITE`] of it (an
    /// estimate: fewer bytes a write grows the list as usual). Untouched room costs no memory.
    fn reserve(&mut self, log_bytes: usize) {
        self.bytes.reserve(log_bytes);
        self.writes.reserve(log_bytes / LOG_BYTES_PER_WRITE);
    }

    /// Writes listed.
    pub fn len(&self) -> usize {
        self.writes.len()
    }

    /// Whether no write is listed.
    pub fn is_empty(&self) -> bool {
        self.writes.is_empty()
    }

    /// Key `i`.
    pub fn key(&self, i: usize) -> &[u8] {
        let w = &self.writes[i];
        &self.bytes[w.at as usize..w.at as usize + w.klen as usize]
    }

    /// Key `i`'s last logged value.
    pub fn value(&self, i: usize) -> Logged<'_> {
        let w = &self.writes[i];
        match w.vlen {
            VLEN_DELETED => Logged::Deleted,
            VLEN_UNKNOWN => Logged::Unknown,
            n => {
                let v = w.at as usize + w.klen as usize;
                Logged::Value(&self.bytes[v..v + n as usize])
            }
        }
    }

    /// The lists of several lanes, each sorted with each key once, as one: a key's write of
    /// the highest order kept.
    fn merged(mut lists: Vec<LoggedWrites>, value_budget: usize, first_for_tests: bool) -> LoggedWrites {
        if lists.len() == 1 {
            let mut one = lists.pop().expect("one list");
            one.value_budget = value_budget;
            return one;
        }
        let mut all = LoggedWrites { value_budget, first_for_tests, ..LoggedWrites::default() };
        all.bytes.reserve(lists.iter().map(|l| l.bytes.len()).sum());
        all.writes.reserve(lists.iter().map(LoggedWrites::len).sum());
        for l in lists {
            let base = all.bytes.len() as u64;
            all.bytes.extend_from_slice(&l.bytes);
            all.writes.extend(l.writes.iter().map(|w| Write { at: w.at + base, ..*w }));
            all.count_delta += l.count_delta;
        }
        all.sort_dedup();
        all
    }

    /// Sorts by key and keeps each key's last write (and only the bytes it uses).
    pub fn sort_dedup(&mut self) {
        let bytes = &self.bytes;
        let key = |w: &Write| &bytes[w.at as usize..w.at as usize + w.klen as usize];
        // Equal orders (one record writing a key twice) fall back to log order.
        bucket_sort(&mut self.writes, &mut self.scratch, |a, b| {
            key_order(a, b, key).then(a.order.cmp(&b.order)).then(a.at.cmp(&b.at))
        });
        // `dedup_by` keeps the first of equal neighbours: move the later write into it.
        let first = self.first_for_tests;
        self.writes.dedup_by(|later, kept| {
            let same = key_order(later, kept, key).is_eq();
            if same && !first {
                std::mem::swap(later, kept);
            }
            same
        });
        let mut packed = Vec::with_capacity(self.writes.iter().map(|w| w.klen as usize + w.kept()).sum());
        for w in &mut self.writes {
            let at = packed.len() as u64;
            let len = w.klen as usize + w.kept();
            packed.extend_from_slice(&self.bytes[w.at as usize..w.at as usize + len]);
            w.at = at;
        }
        self.values_kept = self.writes.iter().map(Write::kept).sum();
        self.bytes = packed;
    }
}

/// Moves the writes of the complete records at the start of `stream` into `writes`.
fn take_writes(stream: &mut Vec<u8>, writes: &mut LoggedWrites) -> Result<(), DecodeError> {
    take_records(stream, |view, _, _| {
        writes.count_delta += view.count_delta();
        view.for_each(|k, v| writes.push(k, v, view.order))
    })
    .map(|_| ())
}
