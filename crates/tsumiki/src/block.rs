//! The 4 KiB block: the unit of every write to a log lane, a snapshot and (later) the page
//! store.
//!
//! Each block carries up to [`PAYLOAD`] bytes and ends with a 40-byte trailer that
//! multiplexes its writer's state into the same write (paper 004's log multiplexing): the
//! lane id, the block's sequence in its lane, the LSN / timestamp range of the records that
//! end in the block, the lane's durable watermark and the record count, under a CRC32C of
//! the whole block. A block is never rewritten once synced; a lane's partly filled last
//! block may be written again with more records until then (commits that promise no sync
//! share it), and [`FLAG_AFTER_PARTIAL`] lets the reader tell an old version of it from
//! the last.
//!
//! The checksum also covers a salt that the block does not store: a lane block's
//! generation (0 for the page store). A log segment is recycled into a later generation
//! without being cleared, so its old blocks, with the same lane and sequence numbers, must
//! fail the check there: they read as never written, as a zeroed block would.

/// The block size: every log write is a whole number of these.
pub const BLOCK: usize = 4096;
/// The trailer at the end of each block.
pub const TRAILER: usize = 40;
/// Stream bytes per block.
pub const PAYLOAD: usize = BLOCK - TRAILER;
/// Marks a tsumiki log block (format 3: salted checksums, rewritten last blocks).
const BLOCK_MAGIC: u8 = 0xB3;

/// Every block before this one was made durable by a completed sync: an invalid block
/// followed by one with this flag is corruption, not a torn tail.
pub const FLAG_SYNCED_BEFORE: u8 = 1;
/// The last block of one flush: the watermark is trusted only at such a block.
pub const FLAG_FLUSH_END: u8 = 2;
/// The last block a lane writes in its generation (a checkpoint moved it on): a closed
/// lane that does not end with it lost blocks.
pub const FLAG_LANE_END: u8 = 4;
/// The block before this one in its lane is partly filled. A lane's partly filled last
/// block is either final (synced before the lane went on: the next block has this flag) or
/// written again with more records until full, and then the next block lacks the flag. So
/// a partly filled block followed by one without the flag is an older version of a block
/// that was filled later, left by a power loss: the lane ends there (a torn tail).
pub const FLAG_AFTER_PARTIAL: u8 = 8;
/// The lane's last block at a close that kept its generation's logs instead of writing
/// the pages (every block before it synced, nothing after it): the next open may replay
/// the logs into memory and append after this block. A lane whose last block lacks it
/// (a later process appended, then crashed) is recovered into a new generation.
pub const FLAG_KEPT_END: u8 = 16;

/// Whether a lane block with trailer `t` may follow one that used `prev_used` payload bytes
/// (see [`FLAG_AFTER_PARTIAL`]).
pub fn follows(prev_used: u16, t: &Trailer) -> bool {
    ((prev_used as usize) < PAYLOAD) == (t.flags & FLAG_AFTER_PARTIAL != 0)
}

/// The trailer of one block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Trailer {
    /// [`FLAG_SYNCED_BEFORE`], [`FLAG_FLUSH_END`], [`FLAG_LANE_END`],
    /// [`FLAG_AFTER_PARTIAL`], [`FLAG_KEPT_END`].
    pub flags: u8,
    /// The lane that wrote the block.
    pub lane: u16,
    /// Stream bytes used in the block.
    pub used: u16,
    /// Records that end in this block.
    pub records: u16,
    /// The block's position in its lane (0, 1, 2...; a rewritten block keeps its number).
    pub seq: u32,
    /// Smallest LSN / timestamp of the records that end here (0 if none).
    pub lo: u64,
    /// Largest LSN / timestamp of the records that end here (0 if none).
    pub hi: u64,
    /// The lane's durable watermark: every record of this lane with an LSN below it is in
    /// this block or before it (ELR); 0 under NLR.
    pub watermark: u64,
}

/// Fills `block` (BLOCK bytes, payload already in place) with `t` and the checksum, salted
/// with `salt`.
pub fn seal_block(block: &mut [u8], t: &Trailer, salt: u64) {
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
    let crc = block_crc(block, salt);
    block[PAYLOAD..PAYLOAD + 4].copy_from_slice(&crc.to_le_bytes());
}

fn block_crc(block: &[u8], salt: u64) -> u32 {
    let c = crc32c::crc32c_append(crc32c::crc32c(&salt.to_le_bytes()), &block[..PAYLOAD]);
    crc32c::crc32c_append(c, &block[PAYLOAD + 4..])
}

/// The trailer of `block`, if its checksum (salted with `salt`, as it was sealed), magic
/// and used length are valid.
pub fn open_block(block: &[u8], salt: u64) -> Option<Trailer> {
    if block.len() != BLOCK {
        return None;
    }
    let tr = &block[PAYLOAD..];
    if tr[4] != BLOCK_MAGIC {
        return None;
    }
    let stored = u32::from_le_bytes(tr[0..4].try_into().ok()?);
    if stored != block_crc(block, salt) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_round_trip_and_any_flipped_bit_is_caught() {
        let mut b = vec![0u8; BLOCK];
        b[..5].copy_from_slice(b"hello");
        let t = Trailer { flags: 3, lane: 7, used: 5, records: 1, seq: 9, lo: 10, hi: 11, watermark: 12 };
        seal_block(&mut b, &t, 5);
        assert_eq!(open_block(&b, 5), Some(t));
        for bit in [0, 40, 8 * PAYLOAD, 8 * BLOCK - 1] {
            let mut c = b.clone();
            c[bit / 8] ^= 1 << (bit % 8);
            assert_eq!(open_block(&c, 5), None, "bit {bit}");
        }
        assert_eq!(open_block(&vec![0; BLOCK], 0), None);
        // The same block read as another generation's (a recycled segment): not valid.
        assert_eq!(open_block(&b, 4), None);
        assert_eq!(open_block(&b, 6), None);
    }
}
