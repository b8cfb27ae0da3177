//! The lanes' copies of the blocks they write with direct I/O ("echoes"), so that a
//! checkpoint reads the ended generation's log from memory rather than from the files.

use super::*;

impl Wal {
    /// Lets the lanes keep copies of their blocks, up to `bytes` in all, where they write
    /// with direct I/O (before the first lane). A budget under two generations at the
    /// smallest a checkpoint waits for ([`LOG_FLOOR`]: the one being folded, the one being
    /// written) keeps none: the copies would be dropped halfway through each generation
    /// (a 64 MiB cache, 4 MiB of copies, built and dropped: 11 MiB more resident memory).
    pub(crate) fn set_echo_budget(&self, bytes: usize) {
        let on = self.direct_writes() && bytes as u64 >= 2 * LOG_FLOOR;
        self.echo_budget.store(if on { bytes } else { 0 }, Ordering::Relaxed);
    }

    /// The copies of generation `g`'s lanes kept as they were written (lanes whose copy
    /// passed the budget are missing: they are read from their files).
    pub(crate) fn take_echoes(&self, g: u64) -> recovery::Echoes {
        let (ended, taken) = self.replace_echoes((0, recovery::Echoes::new()));
        if ended == g {
            self.lanes_echoed.fetch_add(taken.len() as u64, Ordering::Relaxed);
            taken
        } else {
            recovery::Echoes::new()
        }
    }

    /// Puts `with` in place of the ended generation's copies and returns those, no longer
    /// counted against the budget.
    pub(super) fn replace_echoes(&self, with: (u64, recovery::Echoes)) -> (u64, recovery::Echoes) {
        let old = std::mem::replace(&mut *self.echoes.lock(), with);
        self.echo_bytes.fetch_sub(old.1.values().map(|c| echo_len(c)).sum(), Ordering::Relaxed);
        old
    }

    /// Adds `blocks`, just written at the lane's end, to its copy, or drops the copy for
    /// the rest of the generation once the budget would pass.
    pub(super) fn echo(&self, io: &mut LaneIo, blocks: &[u8]) {
        let Some(copy) = io.echo.as_mut() else { return };
        let budget = self.echo_budget.load(Ordering::Relaxed);
        if self.echo_bytes.fetch_add(blocks.len(), Ordering::Relaxed) + blocks.len() <= budget {
            // Fixed chunks of whole blocks: a vector grown by doubling held up to twice
            // the generation.
            for b in blocks.chunks(BLOCK) {
                match copy.last_mut().filter(|c| c.len() < ECHO_CHUNK) {
                    Some(c) => c.extend_from_slice(b),
                    None => {
                        let mut c = self.echo_spare.lock().pop().unwrap_or_else(|| Vec::with_capacity(ECHO_CHUNK));
                        c.extend_from_slice(b);
                        copy.push(c);
                    }
                }
            }
        } else {
            self.echo_bytes.fetch_sub(blocks.len(), Ordering::Relaxed);
            self.drop_echo(io);
        }
    }

    /// Drops the lane's copy (a block it holds is written again).
    pub(super) fn drop_echo(&self, io: &mut LaneIo) {
        if let Some(copy) = io.echo.take() {
            self.echo_bytes.fetch_sub(echo_len(&copy), Ordering::Relaxed);
            self.recycle_echo(copy);
        }
    }

    /// Keeps the pieces of a copy no longer needed for the lanes' next copies, up to the
    /// budget.
    fn recycle_echo(&self, copy: Vec<Vec<u8>>) {
        let keep = self.echo_budget.load(Ordering::Relaxed) / ECHO_CHUNK;
        let mut spare = self.echo_spare.lock();
        for mut c in copy {
            if spare.len() >= keep {
                break;
            }
            c.clear();
            spare.push(c);
        }
    }

    /// Gives back the copies [`Wal::take_echoes`] returned, once read.
    pub(crate) fn recycle_echoes(&self, echoes: recovery::Echoes) {
        for (_, copy) in echoes {
            self.recycle_echo(copy);
        }
    }

    /// A new copy for a lane starting a generation.
    pub(super) fn fresh_echo(&self) -> Option<Vec<Vec<u8>>> {
        (self.echo_budget.load(Ordering::Relaxed) > 0).then(Vec::new)
    }
}
