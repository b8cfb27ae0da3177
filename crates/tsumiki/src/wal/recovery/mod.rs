//! Recovery: read every lane's log of the generations the store's master record names;
//! cut torn tails; decide which transactions are durable (analysis); redo them by a k-way
//! merge of the lanes (by LSN under ELR, by commit timestamp under NLR). The state they are
//! replayed over is the page store's (`store::pages`). Also the lane registries and the
//! removal of obsolete logs.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::format::{self, BLOCK, FLAG_FLUSH_END, FLAG_LANE_END, FLAG_SYNCED_BEFORE};
use super::Release;
use crate::decode::{DecodeError, Reason};
use crate::error::Error;
use crate::storage::{Storage, StorageFile};

mod writes;
pub use writes::{logged_writes, Echoes, Logged, LoggedWrites};

/// One lane's log after its torn tail is cut: its records' places, and what is needed to
/// read them back a window at a time (the log itself is not held in memory: recovery's
/// memory is bounded by its record count, not by the log's bytes).
pub struct LaneLog {
    /// Complete records, in log order: `(order, start in the lane's stream, length)`.
    /// The stream is the used part of the lane's valid blocks, in order.
    pub records: Vec<(u64, u64, usize)>,
    /// The watermark of the last complete flush (ELR), if any flush completed.
    pub watermark: Option<u64>,
    /// Blocks after the last valid one that hold anything: a torn flush, or the old
    /// blocks of a recycled segment.
    pub cut_blocks: u64,
    /// Whether its last block is marked as the lane's end in its generation.
    pub ended: bool,
    /// Whether its last block is marked as a kept end ([`format::FLAG_KEPT_END`]).
    pub kept: bool,
    /// Whether a valid block of the lane lies past its torn tail (an older write that a
    /// torn one hides).
    pub valid_past_tail: bool,
    /// The generation, which salts its blocks' checksums.
    generation: u64,
    files: Vec<(String, Box<dyn StorageFile>)>,
    /// Each valid block, in stream order.
    blocks: Vec<BlockSpan>,
    /// Stream bytes from `window_start`, read back for the records being redone.
    window: Vec<u8>,
    window_start: u64,
}

/// Where one valid block's used bytes lie.
#[derive(Debug, Clone, Copy)]
struct BlockSpan {
    /// Offset of its first used byte in the lane's stream.
    stream: u64,
    /// Index of its segment in [`LaneLog::files`] and its block number there.
    file: u32,
    block: u32,
    used: u16,
}

/// Bytes read at once by [`read_lane`], [`logged_writes`] and a refill of a lane's window.
const LANE_CHUNK: usize = 1 << 20;

impl LaneLog {
    /// The bytes of the record at `at` of `len` bytes in the stream.
    pub fn record(&mut self, at: u64, len: usize) -> Result<&[u8], Error> {
        let end = at + len as u64;
        if at < self.window_start || end > self.window_start + self.window.len() as u64 {
            self.fill_window(at, len)?;
        }
        let s = (at - self.window_start) as usize;
        Ok(&self.window[s..s + len])
    }

    /// Reads the blocks holding `at..at + len` and what follows, up to [`LANE_CHUNK`].
    fn fill_window(&mut self, at: u64, len: usize) -> Result<(), Error> {
        let first = self.blocks.partition_point(|b| b.stream + u64::from(b.used) <= at);
        let want = at + len.max(LANE_CHUNK) as u64;
        self.window.clear();
        self.window_start = self.blocks.get(first).map_or(at, |b| b.stream);
        let mut buf = Vec::new();
        let mut i = first;
        while i < self.blocks.len() && self.blocks[i].stream < want {
            // A run of consecutive blocks of one segment: one read.
            let (f, b0) = (self.blocks[i].file, self.blocks[i].block);
            let mut j = i + 1;
            while j < self.blocks.len()
                && j - i < LANE_CHUNK / BLOCK
                && self.blocks[j].file == f
                && self.blocks[j].block == b0 + (j - i) as u32
                && self.blocks[j].stream < want
            {
                j += 1;
            }
            let (name, file) = &self.files[f as usize];
            buf.resize((j - i) * BLOCK, 0);
            read_exact_at(&**file, &mut buf, u64::from(b0) * BLOCK as u64).map_err(|e| io(name, e))?;
            for (k, block) in buf.chunks(BLOCK).enumerate() {
                // Checked again: the bytes are read a second time.
                match format::open_block(block, self.generation) {
                    Some(t) if t.used == self.blocks[i + k].used => {
                        self.window.extend_from_slice(&block[..t.used as usize])
                    }
                    _ => {
                        return Err(corrupt(format!(
                            "{name}: block {} changed while it was recovered",
                            b0 as usize + k
                        )))
                    }
                }
            }
            i = j;
        }
        if self.window_start > at || self.window_start + (self.window.len() as u64) < at + len as u64 {
            return Err(corrupt(format!("a record at byte {at} of a lane lies past its valid blocks")));
        }
        Ok(())
    }
}

/// What recovery did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecoveryStats {
    /// Whether the logs were replayed (false after a clean exit).
    pub replayed: bool,
    /// Lanes read.
    pub lanes: u64,
    /// Log records read from the lanes.
    pub records_read: u64,
    /// Records redone (durable per the analysis).
    pub records_applied: u64,
    /// Records dropped: beyond the durable watermark (ELR).
    pub records_dropped: u64,
    /// Torn-tail blocks cut.
    pub cut_blocks: u64,
    /// Keys loaded into memory at open (0 when the pages stay on disk until used).
    pub keys: u64,
    /// Time spent reading and redoing the logs.
    pub replay_time: Duration,
    /// What the redone records changed in the number of present keys.
    pub count_delta: i64,
}

fn corrupt(msg: String) -> Error {
    Error::Corrupt(msg.into())
}

fn io(what: &str, e: std::io::Error) -> Error {
    Error::io(what, e)
}

/// Reads the blocks of one lane (its segments in order, a chunk at a time), checks them,
/// cuts a torn tail, and finds its records (kept where they are: see [`LaneLog`]). A lane
/// `closed` by a checkpoint's switch to the next generation was synced up to its block
/// marked [`FLAG_LANE_END`]: it has no torn tail, and a damaged or missing block before
/// that end is corruption.
pub fn read_lane(
    storage: &dyn Storage,
    generation: u64,
    lane: u16,
    segments: &[u64],
    segment_size: u64,
    closed: bool,
) -> Result<LaneLog, Error> {
    let mut files: Vec<(String, Box<dyn StorageFile>)> = Vec::new();
    for (i, &seg) in segments.iter().enumerate() {
        let name = format::segment_name(generation, lane, seg);
        if seg != i as u64 {
            return Err(corrupt(format!("log segment {} of lane {lane} is missing", i)));
        }
        let f = storage.open(&name, false).map_err(|e| io(&name, e))?;
        files.push((name, f));
    }
    // No larger than the longest segment: a short-lived handle's open reads small lanes.
    let mut longest = 0;
    for (name, f) in &files {
        longest = longest.max(f.len().map_err(|e| io(name, e))?);
    }
    let mut chunk = vec![0u8; (longest as usize).clamp(BLOCK, LANE_CHUNK).next_multiple_of(BLOCK)];
    // Each segment's header (see `format::segment_header`). A lane written since segments
    // have headers has one in every segment under its name: one without is damage. A lane
    // with none was written before them, and is read as it was then (from block 0).
    let mut headers = Vec::with_capacity(files.len());
    for (i, (name, f)) in files.iter().enumerate() {
        headers.push(has_header(&**f, generation, lane, i as u64).map_err(|e| io(name, e))?);
    }
    let headered = headers.contains(&true);
    let start = if headered { format::SEGMENT_HEADER } else { 0 };
    // Segments prepared ahead of use (zero-filled, or recycled from an older generation)
    // hold no block of this lane and generation, at full length: not part of the log. (A
    // shorter one, or one holding such a block, is read below, and refused or cut there.)
    while files.len() > 1 {
        let i = files.len() - 1;
        let (name, f) = &files[i];
        let len = f.len().map_err(|e| io(name, e))?;
        let full = len == format::segment_len(i as u64, segment_size);
        if headered && !(headers[i] && full) {
            // Not as the store left it (no header, or not of its length). The lane moves into a segment only once the one
            // before is full: if that one does not end with a block of the lane, this one
            // was prepared ahead and never written (nothing lost: it is left out, and
            // removed with its generation); otherwise its blocks may have been the log's.
            let (prev_name, prev) = &files[i - 1];
            match ends_with_lane_block(&**prev, i as u64 - 1, segment_size, generation, lane)
                .map_err(|e| io(prev_name, e))?
            {
                // Damaged itself: refused below, by name.
                None => break,
                Some(false) => {}
                Some(true) => {
                    return Err(corrupt(format!(
                        "{name}: its header is missing or damaged, or its length is wrong (zero-filled, overwritten or truncated?), and lane {lane} had filled the segment before it, so it may have held the lane's commits"
                    )))
                }
            }
            files.pop();
            continue;
        }
        if !full || holds_lane_block(&**f, len, generation, lane, &mut chunk).map_err(|e| io(name, e))? {
            break;
        }
        files.pop();
    }
    let mut out = LaneLog {
        records: Vec::new(),
        watermark: None,
        cut_blocks: 0,
        ended: false,
        kept: false,
        valid_past_tail: false,
        generation,
        files: Vec::new(),
        blocks: Vec::new(),
        window: Vec::new(),
        window_start: 0,
    };
    let mut seq: u32 = 0;
    // Payload bytes of the last block taken (see `format::follows`).
    let mut prev_used: Option<u16> = None;
    let mut ended = false;
    // The last valid block's flags, and whether a valid block of the lane lies past the
    // torn tail.
    let mut last_flags = 0u8;
    let mut valid_past_tail = false;
    // Stream bytes not parsed yet (a record may span blocks and chunks), from `parsed`.
    let mut pending: Vec<u8> = Vec::new();
    let mut parsed = 0u64;
    let mut stream_len = 0u64;
    let n_files = files.len();
    // A damaged record names the segment and the byte where it starts.
    let take = |pending: &mut Vec<u8>, parsed: &mut u64, records: &mut Vec<(u64, u64, usize)>, blocks: &[BlockSpan]| {
        let base = *parsed;
        *parsed +=
            take_records(pending, |view, at, n| records.push((view.order, base + at as u64, n))).map_err(|e| {
                let (file, offset) = stream_place(blocks, base + e.at as u64)
                    .map(|(f, off)| (Some(files[f as usize].0.clone()), Some(off)))
                    .unwrap_or((None, None));
                e.corrupt(file, offset, &format!("lane {lane} of generation {generation}"))
            })? as u64;
        Ok::<(), Error>(())
    };
    'segs: for (i, (name, f)) in files.iter().enumerate() {
        let last = i + 1 == n_files;
        let expected = format::segment_len(i as u64, segment_size);
        let len = f.len().map_err(|e| io(name, e))?;
        if len != expected {
            // A segment gets its name only once preallocated and synced: a short one was
            // damaged, not cut by a crash.
            return Err(corrupt(format!("{name} is {len} bytes, expected {expected} (truncated?)")));
        }
        if headered && !headers[i] {
            // Its header was synced before it got its name: its blocks were lost after.
            return Err(corrupt(format!(
                "{name}: its header is missing or damaged (zero-filled or overwritten?): lane {lane}'s blocks in it are lost"
            )));
        }
        let mut off = start;
        while off < len {
            let n = (chunk.len() as u64).min(len - off) as usize;
            read_exact_at(&**f, &mut chunk[..n], off).map_err(|e| io(name, e))?;
            for (j, block) in chunk[..n].chunks(BLOCK).enumerate() {
                let b = off / BLOCK as u64 + j as u64;
                match format::open_block(block, generation) {
                    Some(t) if t.lane == lane && t.seq == seq && prev_used.is_none_or(|u| format::follows(u, &t)) => {
                        prev_used = Some(t.used);
                        last_flags = t.flags;
                        out.blocks.push(BlockSpan {
                            stream: stream_len,
                            file: i as u32,
                            block: b as u32,
                            used: t.used,
                        });
                        stream_len += u64::from(t.used);
                        pending.extend_from_slice(&block[..t.used as usize]);
                        seq = seq.wrapping_add(1);
                        if t.flags & FLAG_FLUSH_END != 0 {
                            out.watermark = Some(t.watermark);
                        }
                        if t.flags & FLAG_LANE_END != 0 {
                            ended = true;
                            break 'segs;
                        }
                    }
                    _ => {
                        if closed {
                            return Err(corrupt(format!(
                                "{name}: block {b} (sequence {seq}) of lane {lane} is damaged or missing before the end the checkpoint gave the lane"
                            )));
                        }
                        if !last {
                            return Err(corrupt(format!(
                                "{name}: block {b} is damaged, and a later segment exists (so it had been synced)"
                            )));
                        }
                        (out.cut_blocks, valid_past_tail) =
                            torn_tail(&**f, name, (generation, lane), seq, b, len, &mut chunk)?;
                        break 'segs;
                    }
                }
            }
            off += n as u64;
            take(&mut pending, &mut parsed, &mut out.records, &out.blocks)?;
        }
    }
    if closed && !ended {
        return Err(corrupt(format!(
            "lane {lane} of generation {generation} ends at block sequence {seq} without the end the checkpoint gave it: blocks were lost"
        )));
    }
    take(&mut pending, &mut parsed, &mut out.records, &out.blocks)?;
    out.files = files;
    out.ended = ended;
    out.kept = last_flags & format::FLAG_KEPT_END != 0;
    out.valid_past_tail = valid_past_tail;
    Ok(out)
}

/// Where one lane's log ends: what a lane needs to append after it (a generation whose
/// logs a close kept, see [`format::FLAG_KEPT_END`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaneEnd {
    /// The lane.
    pub lane: u16,
    /// The segment holding its last block.
    pub seg: u64,
    /// The byte after its last block in that segment.
    pub off: u64,
    /// The next block's sequence number.
    pub seq: u32,
    /// Its largest ordering key (0 if it holds no record).
    pub max_order: u64,
    /// Whether its last block is the lane's end in its generation (then it takes no more).
    pub ended: bool,
    /// Whether its last block is a kept end (see [`format::FLAG_KEPT_END`]).
    pub kept: bool,
    /// Whether a valid block of the lane lies past its torn tail: a later process wrote
    /// after the kept end (and crashed), whatever the last valid block says.
    pub valid_past_tail: bool,
    /// Stream bytes the last block carries (fewer than a block's payload: the block is
    /// partly filled, and the next one says so).
    pub last_used: u16,
    /// When the last block follows another block of the lane in the same segment: whether
    /// that block is partly filled (a resumed lane may write over an empty kept end, see
    /// `Wal::resume`).
    pub before_last_partial: Option<bool>,
}

impl LaneLog {
    /// Where the lane ends; `None` if it holds no valid block.
    fn end(&self, lane: u16) -> Option<LaneEnd> {
        let last = self.blocks.last()?;
        let before = self.blocks.len().checked_sub(2).map(|i| &self.blocks[i]);
        let before_last_partial = before
            .filter(|b| b.file == last.file && b.block + 1 == last.block)
            .map(|b| (b.used as usize) < crate::block::PAYLOAD);
        Some(LaneEnd {
            lane,
            seg: u64::from(last.file),
            off: (u64::from(last.block) + 1) * BLOCK as u64,
            seq: self.blocks.len() as u32,
            max_order: self.records.iter().map(|r| r.0).max().unwrap_or(0),
            ended: self.ended,
            kept: self.kept,
            valid_past_tail: self.valid_past_tail,
            last_used: last.used,
            before_last_partial,
        })
    }
}

/// A block of zeros, what the unwritten part of a segment holds.
static ZERO_BLOCK: [u8; BLOCK] = [0; BLOCK];

/// Checks the torn tail of a lane's last segment from its first damaged block `first`,
/// and returns how many of its blocks hold anything and whether one of them is a valid
/// block of the lane (an older write past a torn one). A torn tail holds only blocks of one
/// unfinished flush (and, in a recycled segment, old blocks that are not valid in this
/// generation); a valid block past it that says everything before it was synced means the
/// damaged block had been durable: corruption.
fn torn_tail(
    f: &dyn StorageFile,
    name: &str,
    (generation, lane): (u64, u16),
    seq: u32,
    first: u64,
    len: u64,
    chunk: &mut [u8],
) -> Result<(u64, bool), Error> {
    let mut nonzero = 0;
    let mut valid = false;
    let mut off = first * BLOCK as u64;
    while off < len {
        let n = (chunk.len() as u64).min(len - off) as usize;
        read_exact_at(f, &mut chunk[..n], off).map_err(|e| io(name, e))?;
        for (j, block) in chunk[..n].chunks(BLOCK).enumerate() {
            let b = off / BLOCK as u64 + j as u64;
            if b > first {
                if let Some(t) = format::open_block(block, generation).filter(|t| t.lane == lane) {
                    valid = true;
                    if t.seq > seq && t.flags & FLAG_SYNCED_BEFORE != 0 {
                        return Err(corrupt(format!(
                            "{name}: block {first} is damaged but block sequence {} after it was synced later",
                            t.seq
                        )));
                    }
                }
            }
            // Compared whole (a `memcmp`): a byte loop over every zero block of the tail
            // was a tenth of a short-lived handle's open.
            nonzero += u64::from(block != &ZERO_BLOCK[..block.len()]);
        }
        off += n as u64;
    }
    Ok((nonzero, valid))
}

/// Whether the first block of `f` is the header of segment `seg` of `lane` in
/// `generation`.
pub(crate) fn has_header(f: &dyn StorageFile, generation: u64, lane: u16, seg: u64) -> std::io::Result<bool> {
    let mut b = vec![0u8; BLOCK];
    if f.len()? < BLOCK as u64 {
        return Ok(false);
    }
    read_exact_at(f, &mut b, 0)?;
    Ok(format::is_segment_header(&b, generation, lane, seg))
}

/// Whether segment `seg` (`f`) ends with a valid block of `lane` in `generation`: the
/// lane filled it, and so may have moved on to the next. `None`: it is not of its length.
fn ends_with_lane_block(
    f: &dyn StorageFile,
    seg: u64,
    segment_size: u64,
    generation: u64,
    lane: u16,
) -> std::io::Result<Option<bool>> {
    let len = format::segment_len(seg, segment_size);
    if f.len()? != len {
        return Ok(None);
    }
    let mut b = vec![0u8; BLOCK];
    read_exact_at(f, &mut b, len - BLOCK as u64)?;
    Ok(Some(format::open_block(&b, generation).is_some_and(|t| t.lane == lane)))
}

/// Whether any block in the first `len` bytes of `f` is a valid block of `lane` in
/// `generation`.
fn holds_lane_block(
    f: &dyn StorageFile,
    len: u64,
    generation: u64,
    lane: u16,
    chunk: &mut [u8],
) -> std::io::Result<bool> {
    let mut off = 0;
    // Its first blocks alone first: a segment the lane moved into holds its blocks from
    // the start, and is then known without reading the rest of it.
    let mut step = (4 * BLOCK).min(chunk.len());
    while off < len {
        let n = (step as u64).min(len - off) as usize;
        read_exact_at(f, &mut chunk[..n], off)?;
        if chunk[..n].chunks(BLOCK).any(|b| format::open_block(b, generation).is_some_and(|t| t.lane == lane)) {
            return Ok(true);
        }
        off += n as u64;
        step = chunk.len();
    }
    Ok(false)
}

/// The segment (its index in the lane's files) and the byte in it where byte `at` of a
/// lane's stream lies, if in a valid block of `blocks`.
fn stream_place(blocks: &[BlockSpan], at: u64) -> Option<(u32, u64)> {
    let b = blocks.get(blocks.partition_point(|b| b.stream + u64::from(b.used) <= at))?;
    (b.stream <= at).then(|| (b.file, u64::from(b.block) * BLOCK as u64 + (at - b.stream)))
}

/// Hands each complete record at the start of `stream` to `f` with its offset in
/// `stream`, then drops those bytes; returns how many were dropped (a record cut by the
/// end of `stream` stays for the next call). A damaged record is an error at its offset
/// in `stream`.
fn take_records(
    stream: &mut Vec<u8>,
    mut f: impl FnMut(format::RecordView<'_>, usize, usize),
) -> Result<usize, DecodeError> {
    let mut at = 0;
    while at < stream.len() {
        match format::parse_record(&stream[at..]) {
            Ok((view, n)) => {
                f(view, at, n);
                at += n;
            }
            Err(format::DecodeError::Truncated) => break,
            Err(format::DecodeError::Corrupt(m)) => return Err(DecodeError::new(at, Reason::Record(m))),
        }
    }
    stream.drain(..at);
    Ok(at)
}

/// Writes generation `generation`'s lane registry saying lanes `0..count` (see
/// [`format::LaneRegistry`]): whole under a temporary name, synced, renamed, directory
/// synced.
pub fn write_registry(storage: &dyn Storage, generation: u64, count: u32) -> Result<(), Error> {
    let registry = format::LaneRegistry { generation, count }.encode();
    crate::storage::write_whole(storage, &format::registry_name(generation), &registry)
}

/// Generation `generation`'s lane count, if its registry exists; a damaged one (or one
/// naming another generation) is `Corrupt`.
pub fn read_registry(storage: &dyn Storage, generation: u64) -> Result<Option<u32>, Error> {
    let name = format::registry_name(generation);
    let f = match storage.open(&name, false) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(&name, e)),
    };
    let len = f.len().map_err(|e| io(&name, e))?;
    if len != format::REGISTRY_LEN as u64 {
        return Err(corrupt(format!("{name} is {len} bytes, expected {}", format::REGISTRY_LEN)));
    }
    let mut b = [0u8; format::REGISTRY_LEN];
    read_exact_at(&*f, &mut b, 0).map_err(|e| io(&name, e))?;
    match format::LaneRegistry::decode(&b) {
        Some(r) if r.generation == generation => Ok(Some(r.count)),
        Some(r) => Err(corrupt(format!("{name} names generation {}", r.generation))),
        None => Err(corrupt(format!("{name} is damaged (checksum or magic)"))),
    }
}

/// Whether the files under lane `lane`'s names in `generation` are not a lane the store
/// started: the lane is not registered (`registered`: the generation's lane count), so it
/// never acknowledged a commit, and its first segment does not open or does not begin
/// with the lane's first block (a file or link put there by hand, or a lane created but
/// never written). Such a lane holds nothing: recovery and checkpoints leave it out
/// (rather than fail on it), and it goes with its generation's files.
fn foreign_lane(storage: &dyn Storage, generation: u64, lane: u16, registered: Option<u32>) -> bool {
    if registered.is_some_and(|n| u32::from(lane) < n) {
        return false;
    }
    let name = format::segment_name(generation, lane, 0);
    let Ok(f) = storage.open(&name, false) else { return true };
    let mut b = vec![0u8; 2 * BLOCK];
    if read_exact_at(&*f, &mut b, 0).is_err() {
        return true;
    }
    let first = if format::is_segment_header(&b[..BLOCK], generation, lane, 0) { &b[BLOCK..] } else { &b[..BLOCK] };
    !format::open_block(first, generation).is_some_and(|t| t.lane == lane && t.seq == 0)
}

/// Checks generation `generation`'s lanes against its registry: every registered lane has
/// a log, and every lane holding records is registered (it was, before its first commit).
/// `lanes`: each lane with a log, whether it holds records, and whether its first block is
/// valid (a registered lane's was synced before it was registered).
fn check_registry(storage: &dyn Storage, generation: u64, lanes: &[(u16, bool, bool)]) -> Result<(), Error> {
    let registered = read_registry(storage, generation)?;
    if let Some(n) = registered {
        for id in 0..n {
            match lanes.iter().find(|&&(l, _, _)| u32::from(l) == id) {
                None => {
                    return Err(corrupt(format!(
                        "lane {id} of generation {generation} is registered, but its log is missing"
                    )))
                }
                Some(&(_, _, false)) => {
                    return Err(corrupt(format!(
                        "lane {id} of generation {generation} is registered, but its first block (synced before that) is gone"
                    )))
                }
                Some(_) => {}
            }
        }
    }
    for &(id, holds, _) in lanes {
        if holds && registered.is_none_or(|n| u32::from(id) >= n) {
            return Err(corrupt(match registered {
                None => format!("lane {id} of generation {generation} holds commits, but the generation's lane registry is missing"),
                Some(n) => format!("lane {id} of generation {generation} holds commits, but the lane registry names only {n} lanes (an older copy?)"),
            }));
        }
    }
    Ok(())
}

/// The log segments of `generation`, by lane.
fn segments_of(storage: &dyn Storage, generation: u64) -> Result<HashMap<u16, Vec<u64>>, Error> {
    let mut lanes: HashMap<u16, Vec<u64>> = HashMap::new();
    for n in storage.list().map_err(|e| io("listing the database directory", e))? {
        if let Some((g, l, s)) = format::parse_segment_name(&n) {
            if g == generation {
                lanes.entry(l).or_default().push(s);
            }
        }
    }
    for v in lanes.values_mut() {
        v.sort_unstable();
    }
    Ok(lanes)
}

/// The bytes of the log segment files of `generation` (every lane's that [`replay`] reads:
/// files under the names of lanes never registered are left out, as there).
pub fn log_bytes(storage: &dyn Storage, generation: u64) -> Result<u64, Error> {
    let registered = read_registry(storage, generation)?;
    let mut total = 0;
    for (lane, segs) in segments_of(storage, generation)? {
        if foreign_lane(storage, generation, lane, registered) {
            continue;
        }
        for seg in segs {
            let name = format::segment_name(generation, lane, seg);
            total += storage.open(&name, false).and_then(|f| f.len()).map_err(|e| io(&name, e))?;
        }
    }
    Ok(total)
}

/// How many commit records the logs of `generation` hold. A lane whose files cannot be
/// opened (a link planted at a log's name, which is never followed) counts none: such a
/// file was not written by the database.
pub fn records_logged(storage: &dyn Storage, generation: u64, segment_size: u64) -> Result<u64, Error> {
    let mut n = 0;
    for (lane, segs) in segments_of(storage, generation)? {
        match read_lane(storage, generation, lane, &segs, segment_size, false) {
            Ok(log) => n += log.records.len() as u64,
            Err(Error::Io { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Whether any log segment of `generation` exists.
pub fn has_logs(storage: &dyn Storage, generation: u64) -> Result<bool, Error> {
    Ok(!segments_of(storage, generation)?.is_empty())
}

/// Redoes the durable records of the logs of `generations` (a checkpoint that did not
/// finish leaves two: the one its master record names and the next, which the lanes had
/// moved to), in order: `redo(record)` for every durable record (a later record never
/// brings an older value of a key).
pub fn replay(
    storage: &dyn Storage,
    generations: &[u64],
    segment_size: u64,
    release: Release,
    redo: impl FnMut(format::RecordView<'_>) -> Result<(), Error>,
) -> Result<RecoveryStats, Error> {
    replay_to_ends(storage, generations, segment_size, release, redo, &mut Vec::new())
}

/// [`replay`], which also puts in `ends` where each lane of the last generation ends (a
/// lane that holds no valid block, or one left out as never registered, puts nothing).
pub fn replay_to_ends(
    storage: &dyn Storage,
    generations: &[u64],
    segment_size: u64,
    release: Release,
    mut redo: impl FnMut(format::RecordView<'_>) -> Result<(), Error>,
    ends: &mut Vec<LaneEnd>,
) -> Result<RecoveryStats, Error> {
    let start = Instant::now();
    let mut stats = RecoveryStats { replayed: true, ..Default::default() };
    let mut logs: Vec<LaneLog> = Vec::new();
    for (i, &generation) in generations.iter().enumerate() {
        let lanes = segments_of(storage, generation)?;
        let mut ids: Vec<u16> = lanes.keys().copied().collect();
        ids.sort_unstable();
        // The next generation's logs exist only once every lane of this one was closed
        // and synced.
        let closed = i + 1 < generations.len();
        let registered = read_registry(storage, generation)?;
        let mut held = Vec::with_capacity(ids.len());
        for id in ids {
            if foreign_lane(storage, generation, id, registered) {
                continue;
            }
            let log = read_lane(storage, generation, id, &lanes[&id], segment_size, closed)?;
            if i + 1 == generations.len() {
                ends.extend(log.end(id));
            }
            stats.cut_blocks += log.cut_blocks;
            stats.records_read += log.records.len() as u64;
            held.push((id, !log.records.is_empty(), !log.blocks.is_empty()));
            logs.push(log);
        }
        check_registry(storage, generation, &held)?;
    }
    stats.lanes = logs.len() as u64;
    // Analysis. ELR: a record is durable iff its LSN is below every lane's last durable
    // watermark (a lane with no complete flush never acknowledged anything and is left
    // out; a lane a checkpoint moved on ends with watermark u64::MAX, bounding nothing).
    // NLR: every complete record is durable (it was flushed before anyone saw it).
    let cut = match release {
        Release::Elr => logs.iter().filter_map(|l| l.watermark).min().unwrap_or(0),
        Release::Nlr => u64::MAX,
    };
    for log in &mut logs {
        match release {
            // One worker's commits are in LSN order already: each took its LSN under the
            // lane's lock.
            Release::Elr => {
                if log.records.windows(2).any(|w| w[0].0 >= w[1].0) {
                    return Err(corrupt("a lane's LSNs are not increasing".into()));
                }
                let before = log.records.len();
                log.records.retain(|r| r.0 < cut);
                stats.records_dropped += (before - log.records.len()) as u64;
            }
            // A worker's commit timestamps need not increase (TicToc): sort each file.
            Release::Nlr => log.records.sort_by_key(|r| r.0),
        }
    }
    // Redo: a k-way merge of the lanes.
    let mut pos = vec![0usize; logs.len()];
    let mut heap: BinaryHeap<Reverse<(u64, usize)>> =
        logs.iter().enumerate().filter_map(|(i, l)| l.records.first().map(|r| Reverse((r.0, i)))).collect();
    while let Some(Reverse((_, i))) = heap.pop() {
        let log = &mut logs[i];
        let (_, at, n) = log.records[pos[i]];
        pos[i] += 1;
        if let Some(r) = log.records.get(pos[i]) {
            heap.push(Reverse((r.0, i)));
        }
        let bytes = log.record(at, n)?;
        let (view, _) = format::parse_record(bytes)
            .map_err(|_| corrupt(format!("a record at byte {at} of a lane changed while it was recovered")))?;
        redo(view)?;
        stats.records_applied += 1;
    }
    stats.replay_time = start.elapsed();
    Ok(stats)
}

/// Checks that no log is newer than the master record's generation `g` allows. A
/// checkpoint that did not finish leaves the logs of `g + 1` (every lane had moved on to
/// them); anything newer means the master record was put back or crafted, and opening
/// would destroy the newer state.
pub fn check_generations(storage: &dyn Storage, g: u64) -> Result<(), Error> {
    let next_logs = has_logs(storage, g.saturating_add(1))?;
    let last_log = if next_logs { g.saturating_add(1) } else { g };
    for n in storage.list().map_err(|e| io("listing the database directory", e))? {
        if format::parse_segment_name(&n).is_some_and(|(fg, _, _)| fg > last_log) {
            return Err(corrupt(format!(
                "{n} is newer than generation {g}, which MASTER names: MASTER is older than the database"
            )));
        }
    }
    Ok(())
}

/// Fills `buf` from `off`; a file shorter than that is an error.
fn read_exact_at(file: &dyn crate::wal::storage::StorageFile, buf: &mut [u8], off: u64) -> std::io::Result<()> {
    let mut at = 0;
    while at < buf.len() {
        match file.read_at(&mut buf[at..], off + at as u64)? {
            0 => return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "the file ended early")),
            n => at += n,
        }
    }
    Ok(())
}

/// Removes the logs of generations before `keep` and temporary files. Called only once
/// the master record naming `keep` is durable: nothing is deleted before the state that
/// replaces it is.
pub fn remove_stale(storage: &Arc<dyn Storage>, keep: u64) -> Result<(), Error> {
    let listed = storage.list().map_err(|e| io("listing the database directory", e))?;
    for n in stale_names(listed, keep) {
        match storage.remove(&n) {
            // A background preparation may have renamed a recycled segment meanwhile.
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(&n, e)),
            _ => {}
        }
    }
    Ok(())
}

/// The names among `listed` that the master record naming generation `keep` makes
/// obsolete: older generations' log segments and temporary files.
pub fn stale_names(listed: Vec<String>, keep: u64) -> Vec<String> {
    listed
        .into_iter()
        .filter(|n| match format::parse_segment_name(n) {
            Some((g, _, _)) => g < keep,
            // A lane registry (or one being written: only an older generation's).
            None if format::parse_registry_name(n).is_some() => {
                format::parse_registry_name(n).is_some_and(|g| g < keep)
            }
            // A segment being preallocated (the lanes' background preparation may run
            // during a checkpoint): only an older generation's.
            None => match n.strip_suffix(".tmp").map(format::parse_segment_name) {
                Some(Some((g, _, _))) => g < keep,
                _ => n.ends_with(".tmp") && n != "MASTER.tmp",
            },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(w: &LoggedWrites) -> Vec<(Vec<u8>, Logged<'_>)> {
        (0..w.len()).map(|i| (w.key(i).to_vec(), w.value(i))).collect()
    }

    /// A byte of a lane's stream maps to its segment and the byte in the file; a damaged
    /// record is an error at its start in the stream.
    #[test]
    fn a_damaged_record_is_placed_in_its_file() {
        // Segment 0: its header, then blocks 1 and 2 (100 and 50 used bytes); segment 1:
        // block 1 (10 bytes).
        let span = |stream, file, block, used| BlockSpan { stream, file, block, used };
        let blocks = [span(0, 0, 1, 100), span(100, 0, 2, 50), span(150, 1, 1, 10)];
        assert_eq!(stream_place(&blocks, 0), Some((0, BLOCK as u64)));
        assert_eq!(stream_place(&blocks, 99), Some((0, BLOCK as u64 + 99)));
        assert_eq!(stream_place(&blocks, 120), Some((0, 2 * BLOCK as u64 + 20)));
        assert_eq!(stream_place(&blocks, 159), Some((1, BLOCK as u64 + 9)));
        assert_eq!(stream_place(&blocks, 160), None);
        let mut stream = Vec::new();
        let mut e = format::RecordEncoder::begin(&mut stream, 1);
        e.write(b"k", Some(b"v"));
        let n = e.finish().unwrap();
        stream.extend_from_within(..n);
        stream[n + 20] ^= 1;
        let mut seen = 0;
        let err = take_records(&mut stream, |_, _, _| seen += 1).unwrap_err();
        assert_eq!((seen, err.at), (1, n));
        assert!(err.to_string().contains("checksum"), "{err}");
    }

    #[test]
    fn each_key_keeps_its_last_write_by_order_across_lanes() {
        let mut w = LoggedWrites { value_budget: 1 << 20, ..LoggedWrites::default() };
        // Lane 0: b at order 5, a at 7, b deleted at 9.
        w.push(b"b", Some(b"b5"), 5);
        w.push(b"a", Some(b"a7"), 7);
        w.push(b"b", None, 9);
        w.sort_dedup();
        // Lane 1, read after: a at 3 (older than lane 0's), b at 12, and a key sharing
        // a's 8-byte prefix.
        w.push(b"a", Some(b"a3"), 3);
        w.push(b"b", Some(b"b12"), 12);
        w.push(b"a\0", Some(b"z"), 4);
        w.sort_dedup();
        assert_eq!(
            listed(&w),
            vec![
                (b"a".to_vec(), Logged::Value(b"a7")),
                (b"a\0".to_vec(), Logged::Value(b"z")),
                (b"b".to_vec(), Logged::Value(b"b12")),
            ]
        );
    }

    /// Keys in random order with repeats, sorted in lists shorter and longer than a
    /// bucket sort takes: short keys that differ only in trailing zeros or length and
    /// long ones sharing their prefixes (prefixes over the whole range), and 4-byte
    /// big-endian numbers below 100,000 (prefixes in a narrow range). The list is the keys
    /// in byte order, each with its last write (as a map of the writes in order holds them).
    #[test]
    fn keys_sharing_a_prefix_sort_and_dedup_as_bytes() {
        let symbols = |x: u64| -> Vec<u8> {
            (0..(x % 13) as usize).map(|i| [0u8, 1, 0xff][((x >> (8 + 2 * i)) % 3) as usize]).collect()
        };
        let accounts = |x: u64| -> Vec<u8> { ((x % 100_000) as u32).to_be_bytes().to_vec() };
        for (name, key_of) in [("symbols", &symbols as &dyn Fn(u64) -> Vec<u8>), ("accounts", &accounts)] {
            for every in [1000u64, 9000] {
                let mut w = LoggedWrites { value_budget: 1 << 30, ..LoggedWrites::default() };
                let mut model = std::collections::BTreeMap::new();
                let mut x = 0x2545_f491_4f6c_dd1du64;
                for order in 0..30_000u64 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let key = key_of(x);
                    let value = order.to_be_bytes();
                    w.push(&key, Some(&value), order);
                    model.insert(key, value);
                    if order % every == every - 1 {
                        w.sort_dedup();
                    }
                }
                w.sort_dedup();
                let want: Vec<(Vec<u8>, [u8; 8])> = model.into_iter().collect();
                let got = listed(&w);
                assert_eq!(got.len(), want.len(), "{name}, sorted every {every}");
                for ((k, v), (wk, wv)) in got.iter().zip(&want) {
                    assert_eq!((k, *v), (wk, Logged::Value(&wv[..])), "{name}, sorted every {every}");
                }
            }
        }
    }

    #[test]
    fn values_past_the_budget_are_unknown() {
        let mut w = LoggedWrites { value_budget: 4, ..LoggedWrites::default() };
        w.push(b"a", Some(b"123"), 1);
        w.push(b"b", Some(b"45"), 2);
        w.push(b"c", None, 3);
        w.sort_dedup();
        // The budget counts the values kept so far (3 bytes): one more byte fits, then none.
        w.push(b"a", Some(b"6"), 4);
        w.push(b"d", Some(b"7"), 5);
        w.sort_dedup();
        assert_eq!(
            listed(&w),
            vec![
                (b"a".to_vec(), Logged::Value(b"6")),
                (b"b".to_vec(), Logged::Unknown),
                (b"c".to_vec(), Logged::Deleted),
                (b"d".to_vec(), Logged::Unknown),
            ]
        );
    }
}
