//! The on-disk format of log lanes and the master record.
//!
//! A lane is a byte stream of records cut into the fixed 4 KiB blocks of [`crate::block`],
//! whose 40-byte trailer multiplexes the lane's state into the same write (paper 004).
//! Records are CRC32C-protected too, and every length is bounded before use.

use crate::index::MAX_KEY_LEN;

pub use crate::block::{
    follows, open_block, seal_block, Trailer, BLOCK, FLAG_AFTER_PARTIAL, FLAG_FLUSH_END, FLAG_LANE_END,
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

    /// Adds a write (`None`: a delete).
    pub fn write(&mut self, key: &[u8], value: Option<&[u8]>) {
        self.count += 1;
        match value {
            Some(v) => {
                self.buf.push(KIND_PUT);
                self.buf.extend_from_slice(&(key.len() as u32).to_le_bytes());
                self.buf.extend_from_slice(&(v.len() as u32).to_le_bytes());
                self.buf.extend_from_slice(key);
                self.buf.extend_from_slice(v);
            }
            None => {
                self.buf.push(KIND_DELETE);
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
            let kind = e[at];
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
        let kind = *entries.get(at).ok_or_else(|| bad("entry past the record's end"))?;
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

/// The master record: which generation of files is current, where the page store's
/// translation table is, and whether the last process exited cleanly (paper 003's
/// `last_exit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Master {
    /// Logs of this generation are current (replayed over the table's state).
    pub generation: u64,
    /// The translation table of the page store: segment, payload offset, length, CRC32C.
    /// Only generation 1 may have none (an empty database).
    pub table: Option<(u32, u64, u32, u32)>,
    /// Set at a clean close: the table holds everything and no log needs replaying.
    pub last_exit: bool,
    /// Whether this generation's logs were written with early lock release (LSN order and
    /// watermarks) rather than NLR (commit-timestamp order).
    pub elr: bool,
    /// The largest log segment, in bytes (segments grow from [`FIRST_SEGMENT`] to it:
    /// [`segment_len`]).
    pub segment_size: u64,
}

/// The highest generation a master record may name. A database advances one generation
/// per checkpoint, close or recovery (up to two past its master record's), so none
/// reaches this (2^62: a checkpoint a microsecond for 146,000 years); a record naming one
/// beyond was crafted, and is refused at every open: accepted, it would open once after a
/// clean close, then never again after a crash (the next generation does not exist).
pub const MAX_GENERATION: u64 = 1 << 62;

const MASTER_MAGIC: &[u8; 8] = b"TSUMIKI6";
/// The magics of earlier formats, refused with their own message: before the page store,
/// before log blocks were salted with their generation (recycled segments), before a
/// lane's last block could be rewritten (packed blocks), and before page entries shared
/// their keys' prefixes.
const MASTER_MAGIC_OLD: [(&[u8; 8], &str); 5] = [
    (b"TSUMIKI1", "before the page store"),
    (b"TSUMIKI2", "before the page store"),
    (b"TSUMIKI3", "before recycled log segments"),
    (b"TSUMIKI4", "before packed log blocks"),
    (b"TSUMIKI5", "before prefix-compressed page entries"),
];
/// Encoded size of [`Master`].
pub const MASTER_LEN: usize = 8 + 8 + 1 + 1 + 1 + 8 + 4 + 8 + 4 + 4 + 4;

impl Master {
    /// Encodes the master record.
    pub fn encode(&self) -> [u8; MASTER_LEN] {
        let mut b = [0u8; MASTER_LEN];
        b[0..8].copy_from_slice(MASTER_MAGIC);
        b[8..16].copy_from_slice(&self.generation.to_le_bytes());
        b[16] = self.table.is_some() as u8;
        b[17] = self.last_exit as u8;
        b[18] = self.elr as u8;
        b[19..27].copy_from_slice(&self.segment_size.to_le_bytes());
        let (seg, off, len, crc) = self.table.unwrap_or_default();
        b[27..31].copy_from_slice(&seg.to_le_bytes());
        b[31..39].copy_from_slice(&off.to_le_bytes());
        b[39..43].copy_from_slice(&len.to_le_bytes());
        b[43..47].copy_from_slice(&crc.to_le_bytes());
        let c = crc32c::crc32c(&b[..47]);
        b[47..51].copy_from_slice(&c.to_le_bytes());
        b
    }

    /// Decodes a master record, or says what is wrong with it.
    pub fn decode(b: &[u8]) -> Result<Master, String> {
        if let Some((_, when)) = MASTER_MAGIC_OLD.iter().find(|(m, _)| b.len() >= 8 && &b[0..8] == *m) {
            return Err(format!(
                "MASTER was written by an earlier tsumiki format ({when}), which this version does not read"
            ));
        }
        if b.len() != MASTER_LEN {
            return Err(format!("MASTER is {} bytes, expected {MASTER_LEN}", b.len()));
        }
        if &b[0..8] != MASTER_MAGIC {
            return Err("MASTER is not a tsumiki master record (bad magic)".into());
        }
        if crc32c::crc32c(&b[..47]).to_le_bytes() != b[47..51] {
            return Err("MASTER checksum mismatch".into());
        }
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let table = (u32_at(27), u64_at(31), u32_at(39), u32_at(43));
        let m = Master {
            generation: u64_at(8),
            table: (b[16] == 1).then_some(table),
            last_exit: b[17] == 1,
            elr: b[18] == 1,
            segment_size: u64_at(19),
        };
        if b[16] > 1
            || b[17] > 1
            || b[18] > 1
            || m.segment_size < 2 * BLOCK as u64
            || !m.segment_size.is_multiple_of(BLOCK as u64)
        {
            return Err("MASTER holds invalid settings".into());
        }
        // Every generation after the first starts from a table (recovery, checkpoints and
        // close all write one), so a later generation without one was not written by
        // tsumiki.
        if m.generation > MAX_GENERATION {
            return Err(format!(
                "MASTER names generation {}, past the last one a database can reach ({MAX_GENERATION}): it was not written by tsumiki",
                m.generation
            ));
        }
        if m.generation == 0 || m.table.is_none() && (m.generation != 1 || table != (0, 0, 0, 0)) {
            return Err(format!("MASTER names generation {} without a translation table", m.generation));
        }
        if m.table.is_some_and(|t| t.2 == 0) {
            return Err("MASTER names an empty translation table".into());
        }
        Ok(m)
    }
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
        let n = e.finish().unwrap();
        assert_eq!(n, buf.len());
        let (r, len) = decode_record(&buf).unwrap();
        assert_eq!(len, n);
        assert_eq!(r.order, 42);
        assert_eq!(r.writes[1], LoggedWrite { key: b"k2".to_vec(), value: None });
        for cut in 0..n {
            assert_eq!(decode_record(&buf[..cut]).unwrap_err(), DecodeError::Truncated);
        }
        let mut c = buf.clone();
        c[20] ^= 4;
        assert!(matches!(decode_record(&c), Err(DecodeError::Corrupt(_))));
    }

    #[test]
    fn master_and_names() {
        let m = Master {
            generation: 3,
            table: Some((2, 8192, 300, 77)),
            last_exit: false,
            elr: true,
            segment_size: 1 << 20,
        };
        assert_eq!(Master::decode(&m.encode()), Ok(m));
        for byte in 0..MASTER_LEN {
            let mut b = m.encode();
            b[byte] ^= 1;
            assert!(Master::decode(&b).is_err(), "flipped byte {byte}");
        }
        // Later generations always start from a table.
        let crafted = Master { generation: u64::MAX, table: None, ..m };
        assert!(Master::decode(&crafted.encode()).is_err());
        // A generation that could not advance (recovery and checkpoints name the next).
        for generation in [u64::MAX, u64::MAX - 1, MAX_GENERATION + 1] {
            assert!(Master::decode(&Master { generation, ..m }.encode()).is_err(), "{generation}");
        }
        assert!(Master::decode(&Master { generation: MAX_GENERATION, ..m }.encode()).is_ok());
        let empty = Master { table: Some((0, 0, 0, 0)), ..m };
        assert!(Master::decode(&empty.encode()).is_err());
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
