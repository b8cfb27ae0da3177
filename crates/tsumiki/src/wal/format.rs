//! The on-disk format of log lanes: records, segments and their names, lane registries.
//!
//! A lane is a byte stream of records cut into the fixed 4 KiB blocks of [`crate::block`],
//! whose 40-byte trailer multiplexes the lane's state into the same write (paper 004).
//! Records are CRC32C-protected too, and every length is bounded before use.

use crate::index::MAX_KEY_LEN;

pub use crate::block::{
    follows, open_block, seal_block, Trailer, BLOCK, FLAG_AFTER_PARTIAL, FLAG_FLUSH_END, FLAG_KEPT_END, FLAG_LANE_END,
    FLAG_SYNCED_BEFORE, PAYLOAD, TRAILER,
};

/// Lane ids from this one up are not log lanes (the page store's blocks carry `0xFFFE`).
pub const RESERVED_LANES: u16 = 0xFFFE;

/// The longest record body accepted (a transaction's whole write set).
pub const MAX_RECORD: usize = crate::limits::MAX_WRITE_SET_BYTES;
/// Record header: crc (4), body length (4).
pub const RECORD_HEADER: usize = 8;

/// One write of a logged transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedWrite {
    /// The key.
    pub key: Vec<u8>,
    /// The new value; `None` deletes the key.
    pub value: Option<Vec<u8>>,
}

/// A decoded record: a committed transaction's writes under its ordering key (LSN under
/// ELR, commit timestamp under NLR, 0 in snapshots).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRecord {
    /// LSN or commit timestamp.
    pub order: u64,
    /// Its writes, in the order they are applied.
    pub writes: Vec<LoggedWrite>,
}

const KIND_PUT: u8 = 0;
const KIND_DELETE: u8 = 1;
/// Set in an entry's kind when the write changes whether its key is present (a put of an
/// absent key, a delete of a present one): replay and checkpoints sum these into the
/// database's record count. Logs written before the count never set it; their databases'
/// master records hold no count, so it is counted again at open.
const KIND_FLIPS: u8 = 0x80;

/// Encodes records into a stream buffer: `begin`, then `put`/`delete`, then `finish`.
pub struct RecordEncoder<'a> {
    buf: &'a mut Vec<u8>,
    start: usize,
    count: u32,
}

impl<'a> RecordEncoder<'a> {
    /// Starts a record with ordering key `order` at the end of `buf`.
    pub fn begin(buf: &'a mut Vec<u8>, order: u64) -> Self {
        let start = buf.len();
        buf.extend_from_slice(&[0; RECORD_HEADER]);
        buf.extend_from_slice(&order.to_le_bytes());
        buf.extend_from_slice(&0u32.to_le_bytes());
        RecordEncoder { buf, start, count: 0 }
    }

    /// The bytes [`write_counted`](Self::write_counted) adds for one write: a record's
    /// size is known before it is encoded, so its buffer grows once (a bulk load's record of
    /// 200 MB was copied at every doubling).
    pub fn write_len(key: &[u8], value: Option<&[u8]>) -> usize {
        match value {
            Some(v) => 9 + key.len() + v.len(),
            None => 5 + key.len(),
        }
    }

    /// The bytes of a record's header and count, before its writes.
    pub const HEAD_LEN: usize = RECORD_HEADER + 12;

    /// Adds a write (`None`: a delete) that leaves the key as present or absent as it was.
    pub fn write(&mut self, key: &[u8], value: Option<&[u8]>) {
        self.write_counted(key, value, false);
    }

    /// Adds a write (`None`: a delete); `flips`: it changes whether the key is present (an
    /// insert, or the delete of a present key).
    pub fn write_counted(&mut self, key: &[u8], value: Option<&[u8]>, flips: bool) {
        self.count += 1;
        let flag = if flips { KIND_FLIPS } else { 0 };
        match value {
            Some(v) => {
                self.buf.push(KIND_PUT | flag);
                self.buf.extend_from_slice(&(key.len() as u32).to_le_bytes());
                self.buf.extend_from_slice(&(v.len() as u32).to_le_bytes());
                self.buf.extend_from_slice(key);
                self.buf.extend_from_slice(v);
            }
            None => {
                self.buf.push(KIND_DELETE | flag);
                self.buf.extend_from_slice(&(key.len() as u32).to_le_bytes());
                self.buf.extend_from_slice(key);
            }
        }
    }

    /// Completes the record; returns its encoded length, or `None` (and removes it) when
    /// it is longer than [`MAX_RECORD`].
    pub fn finish(self) -> Option<usize> {
        let body_start = self.start + RECORD_HEADER;
        let body_len = self.buf.len() - body_start;
        if body_len > MAX_RECORD {
            self.buf.truncate(self.start);
            return None;
        }
        self.buf[body_start + 8..body_start + 12].copy_from_slice(&self.count.to_le_bytes());
        self.buf[self.start + 4..self.start + 8].copy_from_slice(&(body_len as u32).to_le_bytes());
        let crc = crc32c::crc32c(&self.buf[self.start + 4..]);
        self.buf[self.start..self.start + 4].copy_from_slice(&crc.to_le_bytes());
        Some(self.buf.len() - self.start)
    }
}

/// Why a stream could not be decoded further.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// The stream ends inside a record (a torn tail).
    Truncated,
    /// A record failed its checksum or is malformed (corruption).
    Corrupt(String),
}

/// A validated record, borrowed from the stream it was read from.
#[derive(Debug, Clone, Copy)]
pub struct RecordView<'a> {
    /// LSN or commit timestamp.
    pub order: u64,
    count: usize,
    entries: &'a [u8],
}

impl<'a> RecordView<'a> {
    /// Calls `f(key, value)` for each write, in order (`None`: a delete).
    pub fn for_each(&self, mut f: impl FnMut(&'a [u8], Option<&'a [u8]>)) {
        let mut at = 0;
        let e = self.entries;
        let u32_at = |i: usize| u32::from_le_bytes(e[i..i + 4].try_into().expect("validated")) as usize;
        for _ in 0..self.count {
            let kind = e[at] & !KIND_FLIPS;
            let klen = u32_at(at + 1);
            if kind == KIND_PUT {
                let vlen = u32_at(at + 5);
                let k = at + 9;
                f(&e[k..k + klen], Some(&e[k + klen..k + klen + vlen]));
                at = k + klen + vlen;
            } else {
                f(&e[at + 5..at + 5 + klen], None);
                at += 5 + klen;
            }
        }
    }
}

impl RecordView<'_> {
    /// What the record changes in the count of present keys: its inserts less its removals.
    pub fn count_delta(&self) -> i64 {
        let mut at = 0;
        let e = self.entries;
        let u32_at = |i: usize| u32::from_le_bytes(e[i..i + 4].try_into().expect("validated")) as usize;
        let mut delta = 0;
        for _ in 0..self.count {
            let kind = e[at];
            let klen = u32_at(at + 1);
            let put = kind & !KIND_FLIPS == KIND_PUT;
            if kind & KIND_FLIPS != 0 {
                delta += if put { 1 } else { -1 };
            }
            at += if put { 9 + klen + u32_at(at + 5) } else { 5 + klen };
        }
        delta
    }
}

/// Validates the record at the start of `bytes` (checksum, every length bounded and
/// inside the record) without copying; returns it and its encoded length.
pub fn parse_record(bytes: &[u8]) -> Result<(RecordView<'_>, usize), DecodeError> {
    if bytes.len() < RECORD_HEADER {
        return Err(DecodeError::Truncated);
    }
    let crc = u32::from_le_bytes(bytes[0..4].try_into().expect("4 bytes"));
    let body_len = u32::from_le_bytes(bytes[4..8].try_into().expect("4 bytes")) as usize;
    if !(12..=MAX_RECORD).contains(&body_len) {
        return Err(DecodeError::Corrupt(format!("record body length {body_len} out of bounds")));
    }
    let end = RECORD_HEADER + body_len;
    if bytes.len() < end {
        return Err(DecodeError::Truncated);
    }
    if crc32c::crc32c(&bytes[4..end]) != crc {
        return Err(DecodeError::Corrupt("record checksum mismatch".into()));
    }
    let body = &bytes[RECORD_HEADER..end];
    let order = u64::from_le_bytes(body[0..8].try_into().expect("8 bytes"));
    let count = u32::from_le_bytes(body[8..12].try_into().expect("4 bytes")) as usize;
    let entries = &body[12..];
    let bad = |what: &str| DecodeError::Corrupt(format!("malformed record: {what}"));
    let len_at = |i: usize| -> Result<usize, DecodeError> {
        let b = entries.get(i..i + 4).ok_or_else(|| bad("entry past the record's end"))?;
        Ok(u32::from_le_bytes(b.try_into().expect("4 bytes")) as usize)
    };
    let mut at = 0usize;
    for _ in 0..count {
        let kind = *entries.get(at).ok_or_else(|| bad("entry past the record's end"))? & !KIND_FLIPS;
        let klen = len_at(at + 1)?;
        if klen > MAX_KEY_LEN {
            return Err(bad("key longer than the limit"));
        }
        at = match kind {
            KIND_PUT => {
                let vlen = len_at(at + 5)?;
                if vlen > crate::error::MAX_VALUE_LEN {
                    return Err(bad("value longer than the limit"));
                }
                at + 9 + klen + vlen
            }
            KIND_DELETE => at + 5 + klen,
            _ => return Err(bad("unknown entry kind")),
        };
        if at > entries.len() {
            return Err(bad("entry past the record's end"));
        }
    }
    if at != entries.len() {
        return Err(bad("bytes after the last entry"));
    }
    Ok((RecordView { order, count, entries }, end))
}

/// Decodes the record at the start of `bytes` into owned data; returns it and its length.
pub fn decode_record(bytes: &[u8]) -> Result<(LogRecord, usize), DecodeError> {
    let (view, n) = parse_record(bytes)?;
    let mut writes = Vec::with_capacity(view.count);
    view.for_each(|k, v| writes.push(LoggedWrite { key: k.to_vec(), value: v.map(<[u8]>::to_vec) }));
    Ok((LogRecord { order: view.order, writes }, n))
}

/// The first log segment of a lane; each later one doubles, up to the configured
/// `segment_size`, so an idle or tiny database stays small while a busy lane soon writes
/// into large preallocated segments.
pub const FIRST_SEGMENT: u64 = 64 << 10;

/// The length of segment `seg` of a lane whose largest segment is `max`.
pub fn segment_len(seg: u64, max: u64) -> u64 {
    if seg >= 16 {
        return max;
    }
    (FIRST_SEGMENT << seg).min(max)
}

/// Bytes at the start of every log segment taken by its header (one block): the lane's
/// blocks follow it.
pub const SEGMENT_HEADER: u64 = BLOCK as u64;

const SEGMENT_MAGIC: &[u8; 8] = b"TSKSEGH1";

/// The header block of log segment `seg` of `lane` in `generation`: `"TSKSEGH1"`,
/// generation u64, lane u16, segment u64, CRC32C u32 of the 26 bytes before, zeros to the
/// block's end. Written (and synced) before the segment gets its name, so that a segment
/// under its name always has one: a segment prepared ahead and never written is told from
/// a written one whose blocks were lost (zero-filled, overwritten) by what the store wrote,
/// not by its content. A segment's blocks follow its header.
pub fn segment_header(generation: u64, lane: u16, seg: u64) -> [u8; BLOCK] {
    let mut b = [0u8; BLOCK];
    b[..8].copy_from_slice(SEGMENT_MAGIC);
    b[8..16].copy_from_slice(&generation.to_le_bytes());
    b[16..18].copy_from_slice(&lane.to_le_bytes());
    b[18..26].copy_from_slice(&seg.to_le_bytes());
    let crc = crc32c::crc32c(&b[..26]);
    b[26..30].copy_from_slice(&crc.to_le_bytes());
    b
}

/// Whether `block` is the header of segment `seg` of `lane` in `generation`.
pub fn is_segment_header(block: &[u8], generation: u64, lane: u16, seg: u64) -> bool {
    block.len() == BLOCK && block == segment_header(generation, lane, seg)
}

/// Whether `block` is the header of some log segment (any generation, lane, segment).
pub fn is_any_segment_header(block: &[u8]) -> bool {
    block.len() == BLOCK
        && &block[..8] == SEGMENT_MAGIC
        && crc32c::crc32c(&block[..26]).to_le_bytes() == block[26..30]
        && block[30..].iter().all(|&b| b == 0)
}

/// The name of log segment `seg` of `lane` in `generation`.
pub fn segment_name(generation: u64, lane: u16, seg: u64) -> String {
    format!("wal-{generation:010}-{lane:05}-{seg:08}.log")
}

/// The name of generation `generation`'s lane registry (see [`LaneRegistry`]).
pub fn registry_name(generation: u64) -> String {
    format!("lanes-{generation:010}")
}

/// Parses a lane registry's name (or, with `.tmp`, one being written) into its generation.
pub fn parse_registry_name(name: &str) -> Option<u64> {
    let rest = name.strip_prefix("lanes-")?;
    let digits = rest.strip_suffix(".tmp").unwrap_or(rest);
    (digits.len() == 10 && digits.bytes().all(|b| b.is_ascii_digit())).then(|| digits.parse().ok()).flatten()
}

/// How many lanes a generation has: lanes `0..count` were created in it (or moved into it
/// by a checkpoint) before any of them acknowledged a commit. Written whole under a
/// temporary name, synced, renamed and the directory synced, before a new lane's first
/// commit and before a checkpoint lets commits into the generation; so every lane that
/// holds a record is below the count, and every lane below it must have its log: a lane of
/// the live generation deleted or zeroed whole is then missing, not a lane that never
/// wrote. Layout: `"TSKLANE1"`, generation u64, count u32, CRC32C u32 of the 20 before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaneRegistry {
    /// The generation.
    pub generation: u64,
    /// Lanes `0..count`.
    pub count: u32,
}

const REGISTRY_MAGIC: &[u8; 8] = b"TSKLANE1";
/// Encoded size of [`LaneRegistry`].
pub const REGISTRY_LEN: usize = 24;

impl LaneRegistry {
    /// Encodes the registry.
    pub fn encode(&self) -> [u8; REGISTRY_LEN] {
        let mut b = [0u8; REGISTRY_LEN];
        b[..8].copy_from_slice(REGISTRY_MAGIC);
        b[8..16].copy_from_slice(&self.generation.to_le_bytes());
        b[16..20].copy_from_slice(&self.count.to_le_bytes());
        let crc = crc32c::crc32c(&b[..20]);
        b[20..24].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes a registry; `None` if the bytes are not one (length, magic, checksum).
    pub fn decode(b: &[u8]) -> Option<LaneRegistry> {
        if b.len() != REGISTRY_LEN || &b[..8] != REGISTRY_MAGIC {
            return None;
        }
        let crc = u32::from_le_bytes(b[20..24].try_into().ok()?);
        (crc == crc32c::crc32c(&b[..20])).then(|| LaneRegistry {
            generation: u64::from_le_bytes(b[8..16].try_into().expect("8 bytes")),
            count: u32::from_le_bytes(b[16..20].try_into().expect("4 bytes")),
        })
    }
}

/// Parses a segment name into `(generation, lane, seg)`.
pub fn parse_segment_name(name: &str) -> Option<(u64, u16, u64)> {
    let rest = name.strip_prefix("wal-")?.strip_suffix(".log")?;
    let mut it = rest.split('-');
    let g = it.next()?.parse().ok()?;
    let l = it.next()?.parse().ok()?;
    let s = it.next()?.parse().ok()?;
    it.next().is_none().then_some((g, l, s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_round_trip_and_truncation() {
        let mut buf = Vec::new();
        let mut e = RecordEncoder::begin(&mut buf, 42);
        e.write(b"k1", Some(b"v1"));
        e.write(b"k2", None);
        e.write_counted(b"k3", Some(b"v3"), true);
        e.write_counted(b"k4", None, true);
        e.write_counted(b"k5", Some(b"v5"), true);
        let n = e.finish().unwrap();
        assert_eq!(n, buf.len());
        let (r, len) = decode_record(&buf).unwrap();
        assert_eq!(len, n);
        assert_eq!(r.order, 42);
        assert_eq!(r.writes[1], LoggedWrite { key: b"k2".to_vec(), value: None });
        assert_eq!(r.writes[3], LoggedWrite { key: b"k4".to_vec(), value: None });
        assert_eq!(r.writes[4], LoggedWrite { key: b"k5".to_vec(), value: Some(b"v5".to_vec()) });
        assert_eq!(parse_record(&buf).unwrap().0.count_delta(), 1);
        for cut in 0..n {
            assert_eq!(decode_record(&buf[..cut]).unwrap_err(), DecodeError::Truncated);
        }
        let mut c = buf.clone();
        c[20] ^= 4;
        assert!(matches!(decode_record(&c), Err(DecodeError::Corrupt(_))));
    }

    #[test]
    fn segments_and_names() {
        assert_eq!(segment_len(0, 16 << 20), 64 << 10);
        assert_eq!(segment_len(3, 16 << 20), 512 << 10);
        assert_eq!(segment_len(20, 16 << 20), 16 << 20);
        assert_eq!(segment_len(2, 128 << 10), 128 << 10);
        assert_eq!(parse_segment_name(&segment_name(3, 12, 7)), Some((3, 12, 7)));
        assert_eq!(parse_segment_name("wal-x.log"), None);
        let h = segment_header(3, 12, 7);
        assert!(is_segment_header(&h, 3, 12, 7) && is_any_segment_header(&h));
        assert!(
            !is_segment_header(&h, 4, 12, 7) && !is_segment_header(&h, 3, 11, 7) && !is_segment_header(&h, 3, 12, 6)
        );
        for byte in [0, 9, 17, 20, 27, 100] {
            let mut b = h;
            b[byte] ^= 1;
            assert!(!is_segment_header(&b, 3, 12, 7) && !is_any_segment_header(&b), "flipped byte {byte}");
        }
        assert!(!is_any_segment_header(&[0; BLOCK]));
    }
}
