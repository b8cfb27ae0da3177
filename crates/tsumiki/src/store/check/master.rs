//! `MASTER`: both superblocks.

use super::Checker;
use crate::block::BLOCK;
use crate::error::Error;
use crate::storage::{read_all, Storage};
use crate::store::master::{check_slot, Master, MASTER, MASTER_FILE_LEN};

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
            match check_slot(slot) {
                Ok((m, seq)) => {
                    if best.is_none_or(|(_, s, _)| seq > s) {
                        best = Some((m, seq, i));
                    }
                }
                Err(e) => bad.push((i, e.offset(), e.to_string())),
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
