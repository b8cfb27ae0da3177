//! The cache budget: `Options::cache_bytes` split once, at open, into what each part of the
//! engine may hold, so that the records in memory and a checkpoint's buffers together stay
//! within it.

/// The least replayed data recovery gathers before writing it to the pages (a tiny cache
/// would otherwise write a delta per record).
pub const MIN_REPLAY_BYTES: usize = 1 << 10;

/// `Options::cache_bytes` split into its parts ([`crate::Options::validate`] makes it; open
/// hands each part to the layer that spends it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheBudget {
    /// The whole cache, as configured.
    pub total: usize,
    /// What recovery's replay gathers in memory before it writes to the pages: a quarter of
    /// the cache, at least `MIN_REPLAY_BYTES` (1 KiB).
    pub replay: usize,
    /// What each of a checkpoint's three buffers may hold: the lanes' copies of their
    /// blocks, the list of the ended generation's writes (the generation's log is capped at
    /// this), and the values read back with them. A quarter of `replay`.
    pub checkpoint_buffer: usize,
    /// What the records in memory may take: the rest, after the three buffers. (At 10M
    /// records under 64 MiB, buffers counted on top of the cache put the resident set 15%
    /// past its bound.)
    pub records: usize,
}

impl CacheBudget {
    /// The parts of a cache of `total` bytes.
    pub fn new(total: usize) -> CacheBudget {
        let replay = (total / 4).max(MIN_REPLAY_BYTES);
        let checkpoint_buffer = replay / 4;
        CacheBudget { total, replay, checkpoint_buffer, records: total.saturating_sub(3 * checkpoint_buffer) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parts_stay_within_the_cache() {
        for total in [0, 1, 1 << 10, 64 << 10, 1 << 20, 64 << 20, 512 << 20, usize::MAX / 2] {
            let b = CacheBudget::new(total);
            assert_eq!(b.total, total);
            assert!(b.replay >= MIN_REPLAY_BYTES);
            assert_eq!(b.checkpoint_buffer, b.replay / 4);
            if total >= 4 * MIN_REPLAY_BYTES {
                assert_eq!(b.records + 3 * b.checkpoint_buffer, total, "{total}: records and buffers fill it");
            } else {
                assert_eq!(b.records, total.saturating_sub(3 * b.checkpoint_buffer));
            }
        }
    }

    #[test]
    fn the_default_cache_leaves_the_records_most_of_it() {
        let b = CacheBudget::new(512 << 20);
        assert_eq!(b.replay, 128 << 20);
        assert_eq!(b.checkpoint_buffer, 32 << 20);
        assert_eq!(b.records, 416 << 20);
    }
}
