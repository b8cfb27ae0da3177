//! The master record and the file that holds it: which generation of files is current,
//! where the page store's translation table is, and whether the last process exited
//! cleanly. `MASTER` is two alternating superblocks of one block each; a write goes to
//! the one not holding the newest record, so a write torn by a crash leaves the other.
//! Only the store reads and writes it (open, checkpoints, close, `inspect`, `check`).

use crate::block::BLOCK;
use crate::error::Error;
use crate::storage::{read_all, write_whole, Storage};

/// The master record's file name.
pub const MASTER: &str = "MASTER";

fn corrupt(msg: String) -> Error {
    Error::Corrupt(msg.into())
}

fn io(what: &str, e: std::io::Error) -> Error {
    Error::io(what, e)
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
    /// The largest log segment, in bytes (segments grow from
    /// [`FIRST_SEGMENT`](crate::wal::format::FIRST_SEGMENT) to it:
    /// [`segment_len`](crate::wal::format::segment_len)).
    pub segment_size: u64,
    /// The number of present keys in the state this record names (the table's, with
    /// `generation`'s logs not yet replayed); `None` when unknown (a record of the
    /// format before the count: the database counts its keys once at open).
    pub count: Option<u64>,
    /// Whether recovery may add the replayed records' inserts and removals to `count`: their
    /// logs hold a prefix of the commits (ELR's cut, or NLR with every commit synced before
    /// it is seen). Otherwise (NLR, unsynced) a crash may keep a commit and lose one it
    /// depended on, and the count is taken again by a scan after recovery.
    pub count_replayable: bool,
}

/// The highest generation a master record may name. A database advances one generation
/// per checkpoint, close or recovery (up to two past its master record's), so none
/// reaches this (2^62: a checkpoint a microsecond for 146,000 years); a record naming one
/// beyond was crafted, and is refused at every open: accepted, it would open once after a
/// clean close, then never again after a crash (the next generation does not exist).
pub const MAX_GENERATION: u64 = 1 << 62;

const MASTER_MAGIC: &[u8; 8] = b"TSUMIKI7";
/// The format before the record count: still read (with no count), never written.
const MASTER_MAGIC_UNCOUNTED: &[u8; 8] = b"TSUMIKI6";
/// Encoded size of a record of [`MASTER_MAGIC_UNCOUNTED`]'s format.
const MASTER_LEN_UNCOUNTED: usize = 8 + 8 + 1 + 1 + 1 + 8 + 4 + 8 + 4 + 4 + 4;
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
pub const MASTER_LEN: usize = MASTER_LEN_UNCOUNTED + 1 + 8;

/// The encoded length of the master record that `b` starts with (by its magic).
fn record_len(b: &[u8]) -> usize {
    if b.len() >= 8 && &b[0..8] == MASTER_MAGIC_UNCOUNTED {
        MASTER_LEN_UNCOUNTED
    } else {
        MASTER_LEN
    }
}

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
        b[47] = match (self.count, self.count_replayable) {
            (None, _) => 0,
            (Some(_), true) => 1,
            (Some(_), false) => 2,
        };
        b[48..56].copy_from_slice(&self.count.unwrap_or(0).to_le_bytes());
        let c = crc32c::crc32c(&b[..56]);
        b[56..60].copy_from_slice(&c.to_le_bytes());
        b
    }

    /// Decodes a master record, or says what is wrong with it.
    pub fn decode(b: &[u8]) -> Result<Master, BadMaster> {
        if let Some((_, when)) = MASTER_MAGIC_OLD.iter().find(|(m, _)| b.len() >= 8 && &b[0..8] == *m) {
            return Err(BadMaster::OldFormat(when));
        }
        let counted = b.len() >= 8 && &b[0..8] == MASTER_MAGIC;
        if !counted && (b.len() < 8 || &b[0..8] != MASTER_MAGIC_UNCOUNTED) {
            return Err(if b.len() == MASTER_LEN { BadMaster::Magic } else { BadMaster::Length(b.len()) });
        }
        if b.len() != record_len(b) {
            return Err(BadMaster::Length(b.len()));
        }
        let crc_at = b.len() - 4;
        if crc32c::crc32c(&b[..crc_at]).to_le_bytes() != b[crc_at..] {
            return Err(BadMaster::Checksum);
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
            count: (counted && (b[47] == 1 || b[47] == 2)).then(|| u64_at(48)),
            count_replayable: counted && b[47] == 1,
        };
        if b[16] > 1
            || b[17] > 1
            || b[18] > 1
            || counted && (b[47] > 2 || b[47] == 0 && u64_at(48) != 0 || u64_at(48) > i64::MAX as u64)
            || m.segment_size < 2 * BLOCK as u64
            || !m.segment_size.is_multiple_of(BLOCK as u64)
        {
            return Err(BadMaster::Settings);
        }
        // Every generation after the first starts from a table (recovery, checkpoints and
        // close all write one), so a later generation without one was not written by
        // tsumiki.
        if m.generation > MAX_GENERATION {
            return Err(BadMaster::PastLastGeneration(m.generation));
        }
        if m.generation == 0 || m.table.is_none() && (m.generation != 1 || table != (0, 0, 0, 0)) {
            return Err(BadMaster::NoTable(m.generation));
        }
        if m.table.is_some_and(|t| t.2 == 0) {
            return Err(BadMaster::EmptyTable);
        }
        Ok(m)
    }
}

/// Why bytes are not a valid master record ([`Master::decode`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BadMaster {
    /// Written by an earlier format (when it changed), which this version does not read.
    OldFormat(&'static str),
    /// Not [`MASTER_LEN`] bytes long.
    Length(usize),
    /// Not a tsumiki master record.
    Magic,
    /// The record's own checksum does not match.
    Checksum,
    /// A flag or the segment size out of range.
    Settings,
    /// A generation past [`MAX_GENERATION`].
    PastLastGeneration(u64),
    /// A generation after the first without a translation table.
    NoTable(u64),
    /// A translation table of zero bytes.
    EmptyTable,
}

impl std::fmt::Display for BadMaster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BadMaster::OldFormat(when) => {
                write!(f, "MASTER was written by an earlier tsumiki format ({when}), which this version does not read")
            }
            BadMaster::Length(n) => write!(f, "MASTER is {n} bytes, expected {MASTER_LEN}"),
            BadMaster::Magic => f.write_str("MASTER is not a tsumiki master record (bad magic)"),
            BadMaster::Checksum => f.write_str("MASTER checksum mismatch"),
            BadMaster::Settings => f.write_str("MASTER holds invalid settings"),
            BadMaster::PastLastGeneration(g) => write!(
                f,
                "MASTER names generation {g}, past the last one a database can reach ({MAX_GENERATION}): it was not written by tsumiki"
            ),
            BadMaster::NoTable(g) => write!(f, "MASTER names generation {g} without a translation table"),
            BadMaster::EmptyTable => f.write_str("MASTER names an empty translation table"),
        }
    }
}

impl std::error::Error for BadMaster {}

/// The master file's size: two alternating superblocks of one block each.
pub const MASTER_FILE_LEN: usize = 2 * BLOCK;
/// A superblock: the encoded [`Master`], the write sequence, and a CRC32C of both (zeros
/// to the block's end).
pub const SLOT_LEN: usize = MASTER_LEN + 8 + 4;

/// The used length of a superblock whose record is `len` bytes long.
fn slot_len(len: usize) -> usize {
    len + 8 + 4
}

/// One superblock's bytes (a block, zero-padded): `master`, written as the `seq`-th.
fn encode_slot(m: &Master, seq: u64) -> Vec<u8> {
    let mut b = vec![0u8; BLOCK];
    b[..MASTER_LEN].copy_from_slice(&m.encode());
    b[MASTER_LEN..MASTER_LEN + 8].copy_from_slice(&seq.to_le_bytes());
    let crc = crc32c::crc32c(&b[..MASTER_LEN + 8]);
    b[MASTER_LEN + 8..SLOT_LEN].copy_from_slice(&crc.to_le_bytes());
    b
}

/// Why a superblock holds no valid master record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlotError {
    /// Zeros only: never written (a new database's second superblock).
    Empty,
    /// Only this many bytes, fewer than a block (a truncated file's last superblock).
    Short(usize),
    /// The master record itself is not valid: why.
    Record(BadMaster),
    /// The superblock's checksum does not match its record and sequence.
    Checksum,
    /// The byte at this offset, after the record and always zero when written, is not
    /// (found by [`check_slot`] only: reading ignores those bytes).
    Padding(usize),
}

impl SlotError {
    /// Where in the superblock the damage was found.
    pub fn offset(&self) -> usize {
        match self {
            SlotError::Empty | SlotError::Short(_) | SlotError::Record(_) => 0,
            SlotError::Checksum => MASTER_LEN, // (the record's end in the current format)
            SlotError::Padding(at) => *at,
        }
    }

    /// The short form open reports (in "MASTER holds no valid superblock").
    fn brief(&self) -> String {
        match self {
            SlotError::Checksum => "checksum mismatch".into(),
            e => e.to_string(),
        }
    }
}

impl std::fmt::Display for SlotError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SlotError::Empty => f.write_str("empty"),
            SlotError::Short(n) => write!(f, "only {n} of its {BLOCK} bytes are there"),
            SlotError::Record(why) => write!(f, "{why}"),
            SlotError::Checksum => f.write_str("the superblock's checksum does not match"),
            SlotError::Padding(_) => f.write_str("bytes after the record, which are always zero, are not"),
        }
    }
}

/// A superblock's master record and write sequence, or why it is not valid. The bytes
/// after the record are not read (see [`check_slot`]).
pub fn decode_slot(b: &[u8]) -> Result<(Master, u64), SlotError> {
    if b.iter().all(|&x| x == 0) {
        return Err(SlotError::Empty);
    }
    if b.len() < BLOCK {
        return Err(SlotError::Short(b.len()));
    }
    let len = record_len(b);
    let master = Master::decode(&b[..len]).map_err(SlotError::Record)?;
    let crc = crc32c::crc32c(&b[..len + 8]);
    if crc.to_le_bytes() != b[len + 8..slot_len(len)] {
        return Err(SlotError::Checksum);
    }
    let seq = u64::from_le_bytes(b[len..len + 8].try_into().expect("8 bytes"));
    Ok((master, seq))
}

/// [`decode_slot`], and the bytes after the record must be zero, as written (`tsumiki
/// check`: reading does not need them).
pub fn check_slot(b: &[u8]) -> Result<(Master, u64), SlotError> {
    let decoded = decode_slot(b)?;
    let end = slot_len(record_len(b));
    match b[end..].iter().position(|&x| x != 0) {
        Some(i) => Err(SlotError::Padding(end + i)),
        None => Ok(decoded),
    }
}

/// The bytes of a master file holding only `m` (in its first superblock, the second
/// empty): what a new database starts with.
pub fn master_file(m: &Master) -> Vec<u8> {
    let mut b = encode_slot(m, 1);
    b.resize(MASTER_FILE_LEN, 0);
    b
}

/// The newest valid superblock of the master file, with its sequence and slot.
fn newest_slot(b: &[u8]) -> Result<(Master, u64, usize), Error> {
    if b.len() != MASTER_FILE_LEN {
        // Earlier formats were one record long: say so rather than "bad size".
        if (b.len() == MASTER_LEN || b.len() == MASTER_LEN_UNCOUNTED) && Master::decode(b).is_ok() {
            return Err(corrupt(
                "MASTER was written by an earlier tsumiki format (one record, before the two superblocks), which this version does not read".into(),
            ));
        }
        if b.len() > MASTER_LEN && b.len() < MASTER_FILE_LEN {
            Master::decode(&b[..MASTER_LEN]).map_err(|e| corrupt(e.to_string()))?;
        }
        return Err(corrupt(format!("MASTER is {} bytes, expected {MASTER_FILE_LEN} (truncated?)", b.len())));
    }
    let slots: Vec<Result<(Master, u64), SlotError>> = b.chunks(BLOCK).map(decode_slot).collect();
    let mut best: Option<(Master, u64, usize)> = None;
    for (i, s) in slots.iter().enumerate() {
        if let Ok((m, seq)) = s {
            if best.as_ref().is_none_or(|(_, bs, _)| seq > bs) {
                best = Some((*m, *seq, i));
            }
        }
    }
    best.ok_or_else(|| {
        let why: Vec<String> =
            slots.iter().map(|s| s.as_ref().err().map(SlotError::brief).unwrap_or_default()).collect();
        corrupt(format!("MASTER holds no valid superblock (first: {}; second: {})", why[0], why[1]))
    })
}

/// Reads the master record (the newest valid of the two superblocks: a write torn by a
/// crash leaves the other); `Ok(None)` for a new (empty) directory.
pub fn read_master(storage: &dyn Storage) -> Result<Option<Master>, Error> {
    let names = storage.list().map_err(|e| io("listing the database directory", e))?;
    if !names.iter().any(|n| n == MASTER) {
        let ours = names.iter().any(|n| n.starts_with("wal-") || n.starts_with("pages-"));
        if ours {
            return Err(corrupt("the MASTER record is missing but log or page files exist".into()));
        }
        return Ok(None);
    }
    let f = storage.open(MASTER, false).map_err(|e| io(MASTER, e))?;
    let b = read_all(&*f).map_err(|e| io(MASTER, e))?;
    newest_slot(&b).map(|(m, _, _)| Some(m))
}

/// Writes the master record: into the superblock not holding the newest one, then one
/// fdatasync (no rename, no directory sync). A crash during the write leaves the other
/// superblock, the previous record, valid. The first write creates the file (a temporary
/// one renamed into place).
pub fn write_master(storage: &dyn Storage, m: &Master) -> Result<(), Error> {
    let names = storage.list().map_err(|e| io("listing the database directory", e))?;
    if names.iter().any(|n| n == MASTER) {
        let f = storage.open(MASTER, false).map_err(|e| io(MASTER, e))?;
        let b = read_all(&*f).map_err(|e| io(MASTER, e))?;
        let (_, seq, slot) = newest_slot(&b)?;
        let next = seq.checked_add(1).ok_or_else(|| corrupt("MASTER's write sequence is exhausted".into()))?;
        f.write_at(&encode_slot(m, next), ((1 - slot) * BLOCK) as u64).map_err(|e| io(MASTER, e))?;
        return f.sync_data().map_err(|e| io(MASTER, e));
    }
    write_whole(storage, MASTER, &master_file(m))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn master_record() {
        let m = Master {
            generation: 3,
            table: Some((2, 8192, 300, 77)),
            last_exit: false,
            elr: true,
            segment_size: 1 << 20,
            count: Some(12345),
            count_replayable: true,
        };
        assert_eq!(Master::decode(&m.encode()), Ok(m));
        let unreplayable = Master { count_replayable: false, ..m };
        assert_eq!(Master::decode(&unreplayable.encode()), Ok(unreplayable));
        let unknown = Master { count: None, count_replayable: false, ..m };
        assert_eq!(Master::decode(&unknown.encode()), Ok(unknown));
        // The format before the count reads with none.
        let mut old = m.encode()[..MASTER_LEN_UNCOUNTED].to_vec();
        old[0..8].copy_from_slice(MASTER_MAGIC_UNCOUNTED);
        let c = crc32c::crc32c(&old[..47]);
        old[47..51].copy_from_slice(&c.to_le_bytes());
        assert_eq!(Master::decode(&old), Ok(unknown));
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
    }

    #[test]
    fn superblocks() {
        let m = Master {
            generation: 2,
            table: Some((1, 4096, 80, 9)),
            last_exit: true,
            elr: false,
            segment_size: 1 << 20,
            count: Some(7),
            count_replayable: true,
        };
        let file = master_file(&m);
        assert_eq!(file.len(), MASTER_FILE_LEN);
        assert_eq!(decode_slot(&file[..BLOCK]), Ok((m, 1)));
        assert_eq!(decode_slot(&file[BLOCK..]), Err(SlotError::Empty));
        assert_eq!(newest_slot(&file).unwrap(), (m, 1, 0));
        let mut b = encode_slot(&m, 7);
        b[MASTER_LEN + 2] ^= 1;
        assert_eq!(decode_slot(&b), Err(SlotError::Checksum));
        assert_eq!(decode_slot(&b).unwrap_err().offset(), MASTER_LEN);
        // Reading ignores the bytes after the record; checking reports them.
        let mut b = encode_slot(&m, 7);
        b[100] = 1;
        assert_eq!(decode_slot(&b), Ok((m, 7)));
        assert_eq!(check_slot(&b), Err(SlotError::Padding(100)));
        assert!(matches!(decode_slot(&b[..100]), Err(SlotError::Short(100))));
        let mut b = encode_slot(&m, 7);
        b[9] ^= 1;
        assert!(matches!(decode_slot(&b), Err(SlotError::Record(_))));
    }
}
