//! Test plants: deliberate bugs and delays that a test switches on to show that its checker
//! (isolation, crash recovery, cleaning, checkpoints, the cache) catches what it should.
//!
//! They exist only in builds with the cargo feature `test-plants`, which only the tests
//! enable (through a dev-dependency): a user's build has no `Options::plants` and every
//! check below is the constant [`Plants::NONE`], folded away by the compiler.

use std::time::Duration;

/// Every planted bug and delay, all off by default. Never set one outside a test.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Plants {
    /// TicToc and Silo skip read validation, MVCC-SI skips first-committer-wins (the
    /// isolation tests must catch it).
    pub skip_validation: bool,
    /// Snapshot reads under TicToc, Silo and 2PL take a record's newest version, whatever
    /// its stamp (the isolation and long-read tests must catch it).
    pub snapshot_reads_newest: bool,
    /// A snapshot's record count under TicToc, Silo and 2PL includes the commits stamped
    /// after it (the isolation test must catch it).
    pub snapshot_counts_newest: bool,
    /// Commit records do not mark the writes that insert or remove a key: recovery and
    /// checkpoints count wrong (the crash tests must catch it).
    pub log_without_count: bool,
    /// Report syncs as done without doing them (the crash tests).
    pub skip_sync: bool,
    /// A lane's partly filled last block is written again without the records it held:
    /// buffered commits are lost (the crash and kill tests).
    pub repack_drops_tail: bool,
    /// A commit on one lane does not sync the commits another lane holds unsynced (a
    /// transaction's own durability): a synced commit can then survive a power loss that
    /// loses an earlier commit, or one it read (the crash tests).
    pub unsynced_no_handoff: bool,
    /// A segment the page store no longer needs is reused before the master record that
    /// stops naming it is durable (the crash tests).
    pub early_segment_reuse: bool,
    /// A bulk load writes the master record naming its table before the pages and the
    /// table are synced (the crash tests).
    pub bulk_load_master_first: bool,
    /// A checkpoint deletes the older logs before the master record naming its table is
    /// durable (the crash tests).
    pub early_log_removal: bool,
    /// A checkpoint's milestone master record names the new generation, so recovery from it
    /// replays only the new generation's logs over a table that lacks part of the old one's
    /// writes (the crash tests).
    pub milestone_skips_replay: bool,
    /// A checkpoint writes to the pages the first value the ended generation logged for a
    /// key rather than the last (the crash tests).
    pub first_logged_value: bool,
    /// Each checkpoint waits this long before it starts (commits go on), so that commits
    /// outpace checkpoints (the checkpoint tests; a delay, not a bug).
    pub checkpoint_delay: Duration,
    /// Each checkpoint waits this long after it switched the lanes to a new generation, so
    /// that commits go on while it runs (the checkpoint tests; a delay, not a bug).
    pub checkpoint_apply_delay: Duration,
    /// Commits are never held back when the log runs ahead of the checkpoints: the logs on
    /// disk then grow with the lead (the checkpoint tests).
    pub no_throttle: bool,
    /// A lazily opened database trusts the record after a missing key without loading the
    /// key ranges between them (the isolation tests).
    pub lazy_gaps_unchecked: bool,
    /// Key ranges written since the last checkpoint may leave memory: their newest writes
    /// are then lost until recovery (the cache tests).
    pub evict_dirty: bool,
    /// The pages an open loaded with a kept log's writes over them count as clean: they
    /// may leave memory before a checkpoint, and those writes with them (the resume tests).
    pub kept_pages_clean: bool,
    /// Evicted records are not marked: a transaction that read one can still validate it
    /// (the isolation tests under a tiny cache).
    pub evict_unmarked: bool,
    /// A key found missing is trusted once its range is loaded, even if the range left and
    /// came back since the lookup (the isolation tests under a tiny cache).
    pub load_count_unchecked: bool,
    /// A lookup that finds a key missing sleeps before it checks the key's range, so that
    /// ranges leave and come back in between (makes the race the load count closes common
    /// enough for tests to meet; a delay, not a bug).
    pub lookup_pause: bool,
    /// A scan chunk that stops where a key range is not in memory leaves the gap before that
    /// range to the next chunk, unguarded in between (the phantom test under a tiny cache).
    pub scan_gap_unguarded: bool,
    /// A generation resumed at open logs its commit timestamps as they are, not above the
    /// orders its earlier processes logged: recovery's merge may then put an older write of
    /// a key after a newer one (the crash tests).
    pub resume_without_order_floor: bool,
    /// An open resumes a lane whose kept end is followed by a valid block past a torn one
    /// (a later process's unacknowledged flush): its next blocks then sit before that stale
    /// block, which a later recovery reads as theirs (the crash tests).
    pub resume_past_torn_tail: bool,
    /// A resumed lane writes its next block over a kept end that carries records (the
    /// pending records of commits that did not sync), not only over an empty one: those
    /// records are lost (the resume tests).
    pub overwrite_kept_end_with_records: bool,
}

impl Plants {
    /// Nothing planted.
    pub const NONE: Plants = Plants {
        skip_validation: false,
        snapshot_reads_newest: false,
        snapshot_counts_newest: false,
        log_without_count: false,
        skip_sync: false,
        repack_drops_tail: false,
        unsynced_no_handoff: false,
        early_segment_reuse: false,
        bulk_load_master_first: false,
        early_log_removal: false,
        milestone_skips_replay: false,
        first_logged_value: false,
        checkpoint_delay: Duration::ZERO,
        checkpoint_apply_delay: Duration::ZERO,
        no_throttle: false,
        lazy_gaps_unchecked: false,
        evict_dirty: false,
        kept_pages_clean: false,
        evict_unmarked: false,
        load_count_unchecked: false,
        lookup_pause: false,
        scan_gap_unguarded: false,
        resume_without_order_floor: false,
        resume_past_torn_tail: false,
        overwrite_kept_end_with_records: false,
    };
}
