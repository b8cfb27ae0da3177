//! The on-disk format of log lanes, snapshots and the master record.
//!
//! A lane is a byte stream of records cut into fixed 4 KiB blocks. Each block carries up
//! to [`PAYLOAD`] stream bytes and ends with a 40-byte trailer that multiplexes the lane's
//! state into the same write (paper 004): lane id, block sequence, the LSN / timestamp
//! range of the records that end in the block, the lane's durable watermark and the record
//! count, under a CRC32C of the whole block. Records are CRC32C-protected too, and every
//! length is bounded before use.

use crate::index::MAX_KEY_LEN;

/// The block size: every log write is a whole number of these.
pub const BLOCK: usize = 4096;
/// The trailer at the end of each block.
pub const TRAILER: usize = 40;
/// Stream bytes per block.
pub const PAYLOAD: usize = BLOCK - TRAILER;
/// Marks a tsumiki log block (format version 1).
const BLOCK_MAGIC: u8 = 0xB1;

/// Every block before this one was made durable by a completed sync: an invalid block
/// followed by one with this flag is corruption, not a torn tail.
pub const FLAG_SYNCED_BEFORE: u8 = 1;
/// The last block of one flush: the watermark is trusted only at such a block.
pub const FLAG_FLUSH_END: u8 = 2;

/// The lane id of snapshot files.
pub const SNAPSHOT_LANE: u16 = u16::MAX;

/// The longest record body accepted (a transaction's whole write set).
pub const MAX_RECORD: usize = 1 << 30;
/// Record header: crc (4), body length (4).
pub const RECORD_HEADER: usize = 8;

/// The trailer of one block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Trailer {
    /// [`FLAG_SYNCED_BEFORE`], [`FLAG_FLUSH_END`].
    pub flags: u8,
    /// The lane that wrote the block.
    pub lane: u16,
    /// Stream bytes used in the block.
    pub used: u16,
    /// Records that end in this block.
    pub records: u16,
    /// The block's position in its lane (0, 1, 2...).
    pub seq: u32,
    /// Smallest LSN / timestamp of the records that end here (0 if none).
    pub lo: u64,
    /// Largest LSN / timestamp of the records that end here (0 if none).
    pub hi: u64,
    /// The lane's durable watermark: every record of this lane with an LSN below it is in
    /// this block or before it (ELR); 0 under NLR.
    pub watermark: u64,
}

/// Fills `block` (BLOCK bytes, payload already in place) with `t` and the checksum.
pub fn seal_block(block: &mut [u8], t: &Trailer) {
    debug_assert_eq!(block.len(), BLOCK);
    let tr = &mut block[PAYLOAD..];
    tr[4] = BLOCK_MAGIC;
    tr[5] = t.flags;
    tr[6..8].copy_from_slice(&t.lane.to_le_bytes());
    tr[8..10].copy_from_slice(&t.used.to_le_bytes());
    tr[10..12].copy_from_slice(&t.records.to_le_bytes());
    tr[12..16].copy_from_slice(&t.seq.to_le_bytes());
    tr[16..24].copy_from_slice(&t.lo.to_le_bytes());
    tr[24..32].copy_from_slice(&t.hi.to_le_bytes());
    tr[32..40].copy_from_slice(&t.watermark.to_le_bytes());
    let crc = block_crc(block);
    block[PAYLOAD..PAYLOAD + 4].copy_from_slice(&crc.to_le_bytes());
}

fn block_crc(block: &[u8]) -> u32 {
    let c = crc32c::crc32c(&block[..PAYLOAD]);
    crc32c::crc32c_append(c, &block[PAYLOAD + 4..])
}

/// The trailer of `block`, if its checksum, magic and used length are valid.
pub fn open_block(block: &[u8]) -> Option<Trailer> {
    if block.len() != BLOCK {
        return None;
    }
    let tr = &block[PAYLOAD..];
    if tr[4] != BLOCK_MAGIC {
        return None;
    }
    let stored = u32::from_le_bytes(tr[0..4].try_into().ok()?);
    if stored != block_crc(block) {
        return None;
    }
    let u16_at = |i: usize| u16::from_le_bytes([tr[i], tr[i + 1]]);
    let u64_at = |i: usize| u64::from_le_bytes(tr[i..i + 8].try_into().expect("8 bytes"));
    let t = Trailer {
        flags: tr[5],
        lane: u16_at(6),
        used: u16_at(8),
        records: u16_at(10),
        seq: u32::from_le_bytes(tr[12..16].try_into().ok()?),
        lo: u64_at(16),
        hi: u64_at(24),
        watermark: u64_at(32),
    };
    (t.used as usize <= PAYLOAD).then_some(t)
}

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
                if vlen > crate::db::MAX_VALUE_LEN {
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

/// The master record: which generation of files is current and whether the last process
/// exited cleanly (paper 003's `last_exit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Master {
    /// Files of this generation are current: its snapshot (if `has_snapshot`) and logs.
    pub generation: u64,
    /// Whether the snapshot `snap-<generation>` exists.
    pub has_snapshot: bool,
    /// Set at a clean close: the snapshot holds everything and no log needs replaying.
    pub last_exit: bool,
    /// Whether this generation's logs were written with early lock release (LSN order and
    /// watermarks) rather than NLR (commit-timestamp order).
    pub elr: bool,
    /// Log segment size, in bytes.
    pub segment_size: u64,
}

const MASTER_MAGIC: &[u8; 8] = b"TSUMIKI1";
/// Encoded size of [`Master`].
pub const MASTER_LEN: usize = 8 + 8 + 1 + 1 + 1 + 8 + 4;

impl Master {
    /// Encodes the master record.
    pub fn encode(&self) -> [u8; MASTER_LEN] {
        let mut b = [0u8; MASTER_LEN];
        b[0..8].copy_from_slice(MASTER_MAGIC);
        b[8..16].copy_from_slice(&self.generation.to_le_bytes());
        b[16] = self.has_snapshot as u8;
        b[17] = self.last_exit as u8;
        b[18] = self.elr as u8;
        b[19..27].copy_from_slice(&self.segment_size.to_le_bytes());
        let crc = crc32c::crc32c(&b[..27]);
        b[27..31].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decodes a master record, or says what is wrong with it.
    pub fn decode(b: &[u8]) -> Result<Master, String> {
        if b.len() != MASTER_LEN {
            return Err(format!("MASTER is {} bytes, expected {MASTER_LEN}", b.len()));
        }
        if &b[0..8] != MASTER_MAGIC {
            return Err("MASTER is not a tsumiki master record (bad magic)".into());
        }
        if crc32c::crc32c(&b[..27]).to_le_bytes() != b[27..31] {
            return Err("MASTER checksum mismatch".into());
        }
        let m = Master {
            generation: u64::from_le_bytes(b[8..16].try_into().expect("8 bytes")),
            has_snapshot: b[16] == 1,
            last_exit: b[17] == 1,
            elr: b[18] == 1,
            segment_size: u64::from_le_bytes(b[19..27].try_into().expect("8 bytes")),
        };
        if b[16] > 1
            || b[17] > 1
            || b[18] > 1
            || m.segment_size < 2 * BLOCK as u64
            || !m.segment_size.is_multiple_of(BLOCK as u64)
        {
            return Err("MASTER holds invalid settings".into());
        }
        Ok(m)
    }
}

/// The name of log segment `seg` of `lane` in `generation`.
pub fn segment_name(generation: u64, lane: u16, seg: u64) -> String {
    format!("wal-{generation:010}-{lane:05}-{seg:08}.log")
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

/// The name of the snapshot of `generation`.
pub fn snapshot_name(generation: u64) -> String {
    format!("snap-{generation:010}.dat")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_round_trip_and_any_flipped_bit_is_caught() {
        let mut b = vec![0u8; BLOCK];
        b[..5].copy_from_slice(b"hello");
        let t = Trailer { flags: 3, lane: 7, used: 5, records: 1, seq: 9, lo: 10, hi: 11, watermark: 12 };
        seal_block(&mut b, &t);
        assert_eq!(open_block(&b), Some(t));
        for bit in [0, 40, 8 * PAYLOAD, 8 * BLOCK - 1] {
            let mut c = b.clone();
            c[bit / 8] ^= 1 << (bit % 8);
            assert_eq!(open_block(&c), None, "bit {bit}");
        }
        assert_eq!(open_block(&vec![0; BLOCK]), None);
    }

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
        let m = Master { generation: 3, has_snapshot: true, last_exit: false, elr: true, segment_size: 1 << 20 };
        assert_eq!(Master::decode(&m.encode()), Ok(m));
        let mut b = m.encode();
        b[9] ^= 1;
        assert!(Master::decode(&b).is_err());
        assert_eq!(parse_segment_name(&segment_name(3, 12, 7)), Some((3, 12, 7)));
        assert_eq!(parse_segment_name("wal-x.log"), None);
    }
}
