//! `MASTER`: both superblocks.

use super::Checker;
use crate::block::BLOCK;
use crate::error::Error;
use crate::storage::{read_all, Storage};
use crate::wal::format::{Master, MASTER_LEN};
use crate::wal::recovery::{MASTER, MASTER_FILE_LEN};

/// A master superblock: the record, its write sequence, a CRC32C of both; zeros to the
/// block's end.
pub(super) const SLOT_LEN: usize = MASTER_LEN + 8 + 4;

impl Checker {
    /// Both superblocks of `MASTER`; returns the newest valid record.
    pub(super) fn check_master(&mut self) -> Result<Option<Master>, Error> {
        let f = self.storage.open(MASTER, false).map_err(|e| Error::io(MASTER, e))?;
        let b = read_all(&*f).map_err(|e| Error::io(MASTER, e))?;
        if b.len() != MASTER_FILE_LEN {
            self.damage(
                MASTER,
                Some(b.len() as u64),
                format!("the file is {} bytes, expected {MASTER_FILE_LEN} (truncated or extended?)", b.len()),
            );
        }
        let mut best: Option<(Master, u64, usize)> = None;
        let mut bad = Vec::new();
        for (i, slot) in b.chunks(BLOCK).enumerate().take(2) {
            if slot.iter().all(|&x| x == 0) {
                // The second superblock of a new database is not written yet.
                continue;
            }
            match decode_slot(slot) {
                Ok((m, seq)) => {
                    if best.is_none_or(|(_, s, _)| seq > s) {
                        best = Some((m, seq, i));
                    }
                }
                Err((at, why)) => bad.push((i, at, why)),
            }
        }
        for (i, at, why) in bad {
            let other = match best {
                Some((_, seq, j)) => format!(
                    "; the database uses superblock {j} (write {seq}). A crash during a write of MASTER also leaves a damaged superblock, which the next open overwrites"
                ),
                None => String::new(),
            };
            self.damage(MASTER, Some((i * BLOCK + at) as u64), format!("superblock {i}: {why}{other}"));
        }
        if best.is_none() {
            self.damage(MASTER, None, "no valid superblock: the database cannot be opened");
        }
        Ok(best.map(|b| b.0))
    }
}

/// A master superblock's record and write sequence, or where and why it is not valid.
fn decode_slot(b: &[u8]) -> Result<(Master, u64), (usize, String)> {
    if b.len() < BLOCK {
        return Err((0, format!("only {} of its {BLOCK} bytes are there", b.len())));
    }
    let master = Master::decode(&b[..MASTER_LEN]).map_err(|e| (0, e))?;
    let crc = crc32c::crc32c(&b[..MASTER_LEN + 8]);
    if crc.to_le_bytes() != b[MASTER_LEN + 8..SLOT_LEN] {
        return Err((MASTER_LEN, "the superblock's checksum does not match".into()));
    }
    if let Some(i) = b[SLOT_LEN..].iter().position(|&x| x != 0) {
        return Err((SLOT_LEN + i, "bytes after the record, which are always zero, are not".into()));
    }
    let seq = u64::from_le_bytes(b[MASTER_LEN..MASTER_LEN + 8].try_into().expect("8 bytes"));
    Ok((master, seq))
}
