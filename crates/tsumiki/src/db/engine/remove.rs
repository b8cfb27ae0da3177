//! Deletes driven by a scan (`retain`, the pops): each record the scan read is deleted
//! through the record itself, not by looking its key up again (a retain of 1M records
//! spent a sixth of its time in those second descents).

use super::scan::{Rows, ScanCursor, SCAN_CHUNK};
use super::*;

impl<'a, P: Protocol> TypedTxn<'a, P> {
    /// Deletes `key`, whose record at `rec` this transaction just read present in a scan.
    /// Looks the key up again only when that record left the index since (an eviction, or
    /// another transaction's delete, which this one's read then fails at commit). Returns
    /// whether the key was present.
    fn delete_read(&mut self, key: &[u8], rec: usize) -> Result<bool, Error> {
        let guard = &self.pin();
        // SAFETY: `rec` is a record the transaction's scan met, and records stay allocated
        // while the transaction runs (`Engine::retire`).
        let r: &'a P::Record = unsafe { &*(rec as *const P::Record) };
        match self.write_existing(key, r, None, guard) {
            Ok(()) => Ok(true),
            Err(Access::Removed) => self.delete(key),
            Err(Access::Conflict(c)) => self.fail(c),
            Err(Access::Failed) => self.failed(),
        }
    }

    /// Deletes every record with `start <= key < end` (no upper bound when `end` is
    /// `None`) for which `keep` returns false; returns how many it deleted. One pass, in
    /// key order, read as a scan is (the same protection against phantoms).
    pub fn retain_in(
        &mut self,
        start: &[u8],
        end: Option<&[u8]>,
        mut keep: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<u64, Error> {
        self.check_writable()?;
        if end.is_some_and(|e| e <= start) {
            return Ok(0);
        }
        let mut rows: Rows = self.lend_rows();
        let mut from = Some(start.to_vec());
        let mut removed = 0;
        while let Some(f) = from.take() {
            rows.clear();
            from = self.scan_chunk(&f, end, SCAN_CHUNK, &mut rows)?;
            for i in 0..rows.len() {
                let (k, v) = rows.get(i);
                if !keep(k, v) {
                    removed += u64::from(self.delete_read(k, rows.rec(i))?);
                }
            }
        }
        self.keep_rows(rows);
        Ok(removed)
    }

    /// Drops the scans the last pops kept (see `TxnBufs::pops`), their row buffer kept
    /// for the next scan.
    pub(super) fn drop_pop_scans(&mut self) {
        for last in [false, true] {
            if let Some(c) = self.bufs.as_mut().and_then(|b| b.pops[usize::from(last)].take()) {
                self.keep_rows(c.into_rows());
            }
        }
    }

    /// Deletes the first record (`last`: the last one) and returns it; `None` when there is
    /// none. Goes on with the scan the previous pop in this direction left when nothing
    /// was written since but that pop's delete (its unreturned records are still the
    /// first ones): a transaction's pops together cost one scan, a descent per chunk.
    /// Otherwise a new scan, which skips the transaction's own deletes before it rather
    /// than walking them again (see `Skips`).
    pub fn pop(&mut self, last: bool) -> Result<Option<Row>, Error> {
        self.check_writable()?;
        let kept = self.b().pops[usize::from(last)].take();
        let mut cursor = kept.unwrap_or_else(|| ScanCursor::new(Vec::new(), None, last));
        loop {
            let found = match cursor.next_with_rec(self) {
                None => None,
                Some(Ok(((k, v), rec))) => Some(((k.to_vec(), v.to_vec()), rec)),
                Some(Err(e)) => {
                    cursor.finish(self);
                    return Err(e);
                }
            };
            let Some((row, rec)) = found else {
                cursor.finish(self);
                return Ok(None);
            };
            // Absent by now: deleted by another transaction after the read (which then
            // fails this one at commit); take the next record.
            match self.delete_read(&row.0, rec) {
                Ok(true) => {
                    // The delete dropped both kept scans; this one stays valid.
                    self.popped(&row.0, &cursor);
                    self.b().pops[usize::from(last)] = Some(cursor);
                    return Ok(Some(row));
                }
                Ok(false) => {}
                Err(e) => {
                    cursor.finish(self);
                    return Err(e);
                }
            }
        }
    }
}
