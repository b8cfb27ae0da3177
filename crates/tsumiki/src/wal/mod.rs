//! Write-ahead logging: P-WAL (a log buffer and file per worker, paper 003) and a single
//! shared WAL as the baseline, with paper 001's commit variants, crash recovery, and the
//! storage layer everything is written through.
//!
//! # Commit variants
//! - NLR (no early lock release): the commit record is appended and flushed while the
//!   transaction still holds its write locks; installs and releases come after. Nobody can
//!   read a write before it is durable, so recovery needs no LSN: it merges the lanes by
//!   commit timestamp (TicToc `commit_ts`, Silo TID, 2PL and MVCC commit clock).
//! - ELR (early lock release): the record takes an LSN from a global counter (a CAS loop
//!   whose misses are counted, as in paper 003) while the locks are held; locks are
//!   released before the flush, and the commit is acknowledged once the minimum durable
//!   watermark over all lanes passes its LSN. Recovery replays, in LSN order, exactly the
//!   records below the minimum watermark the lanes made durable.
//! - Group commit: a lane is flushed once `group` records are pending or the oldest has
//!   waited `max_wait` (shared WAL: Algorithm 1's NGROUP); with P-WAL a worker groups its
//!   own commits through [`crate::Txn::commit_deferred`] tickets.
//!
//! # Files (generation `g`)
//! `wal-g-<lane>-<segment>.log` (preallocated log segments) and `lanes-g` (the lane
//! registry). The store's files beside them: `MASTER` (which generation is current, and
//! the clean-exit flag: `store::master`), the page segments, `LOCK`. See `docs/design.md`
//! for the byte layout.

mod echo;
pub mod format;
mod generation;
mod options;
pub mod recovery;
mod resume;
mod segments;
/// The storage floor moved to [`crate::storage`]; this name stays for older imports.
#[doc(hidden)]
pub use crate::storage;

use crate::plants::Plants;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;
use parking_lot::{Mutex, RwLock};

use crate::cc::{WriteEntry, WriteKind};
use crate::error::{Error, Poison};
use crate::storage::{Storage, StorageFile};

use format::{
    RecordEncoder, Trailer, BLOCK, FLAG_AFTER_PARTIAL, FLAG_FLUSH_END, FLAG_KEPT_END, FLAG_LANE_END,
    FLAG_SYNCED_BEFORE, PAYLOAD,
};
use segments::{prepare_segment, Prepared, Preparer, Recycled};

#[cfg(test)]
use generation::checkpoint_limit;
pub(crate) use generation::Pacing;
use generation::LOG_FLOOR;
pub use options::{CommitMode, Device, Durability, LogMode, LogOptions, Release};

/// In-memory log buffer of a lane: records appended but not written yet.
#[derive(Default)]
struct Pending {
    buf: Vec<u8>,
    /// End offset in `buf` and ordering key of each record in it.
    ends: Vec<(usize, u64)>,
    /// Records appended to the lane so far (the sequence number of the last one).
    appended: u64,
    /// When the oldest record in `buf` was appended.
    oldest: Option<Instant>,
    /// The LSN / timestamp of the last record appended.
    last_order: u64,
}

/// How a flush marks the lane's last block.
#[derive(Clone, Copy, PartialEq, Eq)]
enum End {
    /// Not at all: the lane goes on.
    No,
    /// As the lane's end in its generation ([`FLAG_LANE_END`]: a checkpoint's switch).
    Lane,
    /// As a close's kept end ([`FLAG_KEPT_END`]: the next open may go on after it).
    Kept,
}

/// The file side of a lane.
struct LaneIo {
    /// The generation whose files the lane writes (a checkpoint moves every lane on).
    gen: u64,
    file: Option<Box<dyn StorageFile>>,
    /// Current segment number and write offset in it.
    seg: u64,
    off: u64,
    seq: u32,
    all_synced: bool,
    out: Vec<u8>,
    /// The next segment, being preallocated in the background so that a rollover does
    /// not stall the commit that crosses it.
    next: Option<Prepared>,
    /// The last block written, while it is partly filled and not synced: the next write
    /// rewrites it with more records instead of starting a block (see [`Tail`]).
    tail: Option<Tail>,
    /// Whether the lane's last block in this generation is partly filled (the next new
    /// block says so: [`FLAG_AFTER_PARTIAL`]).
    last_partial: bool,
    /// Whether the lane's last block is a kept end ([`FLAG_KEPT_END`]), nothing after it.
    kept_end: bool,
    /// Every block the lane wrote in this generation, while the copies stay within
    /// [`Wal::echo_budget`] (see [`Wal::take_echoes`]).
    echo: Option<Vec<Vec<u8>>>,
}

/// A lane's last block while it is partly filled and was not synced (buffered durability,
/// or a group whose sync comes later). A write that does not sync leaves it; the next write
/// goes back one block and writes it again, its payload followed by the new records, so
/// that commits that promise no sync share blocks instead of taking one each (the log,
/// and with it the checkpoint rate, grew by a block per commit). Dropped at every sync of
/// the lane's file: a block that was synced is never written again (but for an empty kept
/// end, see `Wal::resume`). A rewrite torn by a power loss fails its checksum and is cut as
/// the lane's torn tail, with the unsynced records in it: what buffered durability allows.
struct Tail {
    /// The block's payload (its records' bytes; a record may have begun in the block
    /// before).
    payload: Vec<u8>,
    /// End offset in `payload` and ordering key of each record that ends in it.
    ends: Vec<(usize, u64)>,
    /// Whether every block before it had been synced when it was first written.
    synced_before: bool,
    /// Whether the block before it is partly filled.
    after_partial: bool,
    /// The watermark it was last written with. It ended that flush, so the watermark
    /// holds for its records (ELR trusts a watermark only at a flush's end): written again
    /// as the first block of a longer flush, it keeps that watermark and its flush-end
    /// mark, so that a crash in the middle of the longer flush finds the watermark it
    /// replaced, not an older one (acknowledged commits of other lanes rely on it).
    watermark: u64,
}

impl LaneIo {
    /// The lane's file was synced: its last block is final.
    fn synced(&mut self) {
        self.tail = None;
    }
}

/// One log: a worker's (P-WAL) or everyone's (shared WAL).
pub(crate) struct Lane {
    id: u16,
    pending: Mutex<Pending>,
    io: Mutex<LaneIo>,
    /// ELR: every record of this lane with an LSN below this is durable.
    horizon: AtomicU64,
    /// Records of this lane made durable (or written, per the durability) so far.
    flushed: AtomicU64,
    /// Records of this lane synced to the device so far: `flushed`, unless transactions
    /// chose to commit without a sync (see [`Wal::claim_unsynced`]).
    synced: AtomicU64,
    /// The shared WAL of Algorithm 1: appends wait while the buffer is being flushed.
    serialize: bool,
    /// NLR group commit (Algorithm 3): lock words kept locked until the record that wrote
    /// them is durable: `(lane sequence number of the record, word, value to release to)`.
    held: Mutex<Vec<(u64, usize, u64)>>,
}

impl Lane {
    /// Releases the held locks of records up to `upto` (durable now).
    #[allow(unsafe_code)] // stores to lock words kept as addresses
    fn release_held(&self, upto: u64) {
        let mut h = self.held.lock();
        if h.is_empty() {
            return;
        }
        h.retain(|&(seq, word, release)| {
            if seq > upto {
                return true;
            }
            // SAFETY: a locked record is never unlinked, so it (and its word) stays alive
            // until this store unlocks it.
            unsafe { &*(word as *const AtomicU64) }.store(release, Ordering::Release);
            false
        });
    }
}

/// Buffered records beyond which a `Durability::None` lane writes anyway.
const LAZY_FLUSH_BYTES: usize = 1 << 20;
/// Blocks a flush seals and writes at a time (1 MiB).
const FLUSH_CHUNK_BLOCKS: usize = 256;

/// Counters of a log.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WalStats {
    /// Commit records appended.
    pub records: u64,
    /// Flushes (block writes) done.
    pub flushes: u64,
    /// Syncs (fdatasync) done.
    pub syncs: u64,
    /// Bytes written to log files (whole blocks).
    pub bytes: u64,
    /// Failed CAS attempts on the global LSN counter (ELR).
    pub lsn_cas_misses: u64,
    /// Lanes (log files) in use.
    pub lanes: u64,
    /// Checkpoints completed while open (each deleted the logs before it).
    pub checkpoints: u64,
    /// Commits held back because the log ran far ahead of the checkpoints (see
    /// `Wal::throttle`).
    pub stalls: u64,
    /// Microseconds those commits waited, in all.
    pub stall_micros: u64,
    /// Log segments created by writing zeros over their whole length.
    pub segments_zeroed: u64,
    /// Log segments reused from an earlier generation (no zero-fill).
    pub segments_recycled: u64,
    /// Blocks written again with more records: commits that promised no sync packed into
    /// a lane's partly filled last block (see `bytes`, which counts each write).
    pub blocks_rewritten: u64,
    /// Ended lanes whose changes a checkpoint took from the copy of their blocks kept in
    /// memory as they were written (direct I/O), not from their files.
    pub lanes_echoed: u64,
}

/// The log of one open database.
pub(crate) struct Wal {
    storage: Arc<dyn Storage>,
    pub(crate) opts: LogOptions,
    /// When checkpoints are due (the store's settings).
    pacing: Pacing,
    /// How commits reach the log, resolved once at open: asked by method, never re-derived
    /// from `opts`.
    pub(crate) policy: CommitMode,
    /// The test plants ([`Plants::NONE`] outside the tests).
    pub(crate) plants: Plants,
    /// The generation new lanes write into.
    generation: AtomicU64,
    /// `grown` when the last checkpoint switched generations (or one failed): the log since
    /// is their difference, with no second counter on the flush path.
    checkpoint_base: AtomicU64,
    /// Bytes the last checkpoint wrote to the page store.
    checkpoint_written: AtomicU64,
    /// The log of the generation a running checkpoint applies (0 when none runs): the
    /// current one may grow as large before committers wait (see `Wal::throttle`).
    checkpointing: AtomicU64,
    /// The page store's live bytes after the last checkpoint (or at open), for
    /// `generation::LOG_SHARE`.
    store_live: AtomicU64,
    /// The most log one generation may reach for its checkpoint's memory (see
    /// [`Wal::set_generation_cap`]).
    generation_cap: AtomicU64,
    /// When the lanes last switched generations (or the log started), for
    /// [`Pacing::checkpoint_interval`].
    checkpoint_time: Mutex<std::time::Instant>,
    checkpoints: AtomicU64,
    stalls: AtomicU64,
    stall_micros: AtomicU64,
    lanes: RwLock<Vec<Arc<Lane>>>,
    /// The shared lane of the single-WAL mode.
    shared: OnceLock<Arc<Lane>>,
    /// Each on a line of its own: every commit reads `poisoned`, and the counters below are
    /// written by flushes (and `next_lsn` by every commit of the LSN-ordered modes).
    next_lsn: CachePadded<AtomicU64>,
    poisoned: CachePadded<AtomicBool>,
    /// The first failure, which every later commit reports.
    poison_msg: Mutex<Option<Poison>>,
    flushes: AtomicU64,
    syncs: AtomicU64,
    bytes: AtomicU64,
    /// Bytes of blocks added to the logs (`bytes` less rewrites): what recovery would read.
    grown: AtomicU64,
    /// While the log since the last checkpoint is at most this many bytes (0: never), a
    /// synced flush marks its last block as a kept end, as a close that keeps the log
    /// would (see [`Wal::set_kept_end_limit`]).
    kept_end_limit: AtomicU64,
    rewritten: AtomicU64,
    cas_misses: AtomicU64,
    create_lane: Mutex<()>,
    /// The one lane that may hold commits a transaction chose not to sync while the
    /// database syncs (see [`Wal::claim_unsynced`]), and whether any lane ever did.
    unsynced: Mutex<Option<Arc<Lane>>>,
    unsynced_claimed: AtomicBool,
    /// What must be durable before the log's first file (see [`Wal::set_first_write`]).
    first_write: Mutex<Option<FirstWrite>>,
    /// Records appended (over every lane) when the lanes last switched generations.
    records_at_switch: AtomicU64,
    /// A resumed generation's lanes no worker took yet, the lowest last.
    resumed: Mutex<Vec<Arc<Lane>>>,
    /// Added to every commit timestamp logged as a record's order (NLR): above the
    /// orders of a resumed generation's earlier records, so that recovery's merge puts
    /// this process's commits after them.
    order_floor: AtomicU64,
    /// Segments of generations before the master record's, kept for reuse (see
    /// [`Recycled`]).
    recycled: Arc<Recycled>,
    preparer: Preparer,
    /// Bytes the lanes' in-memory copies of their blocks may take in all (0: none kept).
    /// Kept only where lanes write with direct I/O: a checkpoint reads an ended
    /// generation back, and those blocks are not in the page cache.
    echo_budget: AtomicUsize,
    /// Bytes the copies take now, in the lanes and in `echoes`.
    echo_bytes: AtomicUsize,
    /// The ended generation's copies, by lane, for its checkpoint.
    echoes: Mutex<(u64, recovery::Echoes)>,
    lanes_echoed: AtomicU64,
    /// Emptied pieces of earlier copies (at most the budget), for the lanes to fill again:
    /// a fresh piece faulted in a page per block written, a twentieth of a synced fill's
    /// commit thread (the allocator returns freed pieces to the system within a
    /// millisecond).
    echo_spare: Mutex<Vec<Vec<u8>>>,
}

/// A write the store defers until the log is first written ([`Wal::set_first_write`]).
pub(crate) type FirstWrite = Box<dyn Fn() -> Result<(), Error> + Send + Sync>;

/// The bytes of a lane's copy of its blocks (see [`Wal::take_echoes`]).
fn echo_len(copy: &[Vec<u8>]) -> usize {
    copy.iter().map(Vec::len).sum()
}

/// Bytes of one piece of a lane's copy: whole blocks (a multiple of [`BLOCK`]).
const ECHO_CHUNK: usize = 64 * BLOCK;

fn io_err(what: &str, e: io::Error) -> Poison {
    Poison::io(what, Arc::new(e))
}

impl Wal {
    pub(crate) fn new(
        storage: Arc<dyn Storage>,
        opts: LogOptions,
        pacing: Pacing,
        policy: CommitMode,
        plants: Plants,
        generation: u64,
    ) -> Wal {
        let recycled: Arc<Recycled> = Arc::default();
        Wal {
            preparer: Preparer::new(storage.clone(), recycled.clone()),
            recycled,
            storage,
            opts,
            pacing,
            policy,
            plants,
            generation: AtomicU64::new(generation),
            checkpoint_base: AtomicU64::new(0),
            checkpoint_written: AtomicU64::new(0),
            checkpointing: AtomicU64::new(0),
            store_live: AtomicU64::new(0),
            generation_cap: AtomicU64::new(u64::MAX),
            checkpoint_time: Mutex::new(std::time::Instant::now()),
            checkpoints: AtomicU64::new(0),
            stalls: AtomicU64::new(0),
            stall_micros: AtomicU64::new(0),
            lanes: RwLock::new(Vec::new()),
            shared: OnceLock::new(),
            next_lsn: CachePadded::new(AtomicU64::new(1)),
            poisoned: CachePadded::new(AtomicBool::new(false)),
            poison_msg: Mutex::new(None),
            flushes: AtomicU64::new(0),
            syncs: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            grown: AtomicU64::new(0),
            kept_end_limit: AtomicU64::new(0),
            rewritten: AtomicU64::new(0),
            cas_misses: AtomicU64::new(0),
            create_lane: Mutex::new(()),
            unsynced: Mutex::new(None),
            unsynced_claimed: AtomicBool::new(false),
            first_write: Mutex::new(None),
            resumed: Mutex::new(Vec::new()),
            records_at_switch: AtomicU64::new(0),
            order_floor: AtomicU64::new(0),
            echo_budget: AtomicUsize::new(0),
            echo_bytes: AtomicUsize::new(0),
            echoes: Mutex::new((0, recovery::Echoes::new())),
            lanes_echoed: AtomicU64::new(0),
            echo_spare: Mutex::new(Vec::new()),
        }
    }

    pub(crate) fn stats(&self) -> WalStats {
        WalStats {
            // Counted per lane, under the lock each append takes anyway.
            records: self.lanes.read().iter().map(|l| l.pending.lock().appended).sum(),
            flushes: self.flushes.load(Ordering::Relaxed),
            syncs: self.syncs.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            lsn_cas_misses: self.cas_misses.load(Ordering::Relaxed),
            lanes: self.lanes.read().len() as u64,
            checkpoints: self.checkpoints.load(Ordering::Relaxed),
            stalls: self.stalls.load(Ordering::Relaxed),
            stall_micros: self.stall_micros.load(Ordering::Relaxed),
            segments_zeroed: self.recycled.zeroed.load(Ordering::Relaxed),
            segments_recycled: self.recycled.reused.load(Ordering::Relaxed),
            blocks_rewritten: self.rewritten.load(Ordering::Relaxed),
            lanes_echoed: self.lanes_echoed.load(Ordering::Relaxed),
        }
    }

    /// The error every commit gets once a write or sync failed.
    pub(crate) fn check(&self) -> Result<(), Error> {
        if self.poisoned.load(Ordering::Acquire) {
            let p = self.poison_msg.lock().clone().unwrap_or_else(|| Poison::new(String::new()));
            return Err(Error::Poisoned(p));
        }
        Ok(())
    }

    /// Poisons the log: no commit is acknowledged any more. The first poisoning (with its
    /// operating-system error) is the one every later commit reports.
    pub(crate) fn poison(&self, why: impl Into<Poison>) -> Error {
        let mut m = self.poison_msg.lock();
        let first = m.get_or_insert_with(|| why.into()).clone();
        self.poisoned.store(true, Ordering::Release);
        Error::Poisoned(first)
    }

    /// The lane a worker slot logs to: its own (P-WAL), created on first use, or the
    /// shared one.
    pub(crate) fn lane_for(&self, slot_lane: &OnceLock<Arc<Lane>>) -> Result<Arc<Lane>, Error> {
        if let Some(l) = slot_lane.get() {
            return Ok(l.clone());
        }
        let lane = match self.policy.mode {
            LogMode::SWal => match self.shared.get() {
                Some(l) => l.clone(),
                None => {
                    let _g = self.create_lane.lock();
                    match self.shared.get() {
                        Some(l) => l.clone(),
                        None => {
                            let l = self.new_lane()?;
                            let _ = self.shared.set(l.clone());
                            l
                        }
                    }
                }
            },
            _ => {
                let _g = self.create_lane.lock();
                self.new_lane()?
            }
        };
        let _ = slot_lane.set(lane.clone());
        Ok(lane)
    }

    /// Creates a lane and makes its first block (its starting watermark) durable. It joins
    /// the lane list first, with watermark 0: an acknowledgement computed before that read
    /// a minimum no larger than the counter, so no larger than the starting watermark; one
    /// computed after waits for the lane.
    fn new_lane(&self) -> Result<Arc<Lane>, Error> {
        self.check()?;
        self.first_write()?;
        if let Some(lane) = self.resumed.lock().pop() {
            return Ok(lane);
        }
        let n = self.lanes.read().len();
        let id = u16::try_from(n)
            .ok()
            .filter(|&i| i < format::RESERVED_LANES)
            .ok_or(Error::Config("too many concurrent workers: at most 65534 log lanes per database".into()))?;
        let lane = self.make_lane(
            id,
            LaneIo {
                gen: self.generation.load(Ordering::Acquire),
                file: None,
                seg: 0,
                off: 0,
                seq: 0,
                all_synced: true,
                out: Vec::new(),
                next: None,
                tail: None,
                last_partial: false,
                kept_end: false,
                echo: self.fresh_echo(),
            },
        );
        self.lanes.write().push(lane.clone());
        // Its first block durable (whatever the durability: recovery tells a lane zeroed
        // whole from a new one by it), then registered, before its first commit (see
        // `format::LaneRegistry`).
        self.flush_lane_as(&lane, true, true)?;
        let g = lane.io.lock().gen;
        self.register_lanes(g, u32::from(id) + 1)?;
        Ok(lane)
    }

    /// A lane `id` whose file side is `io`, with nothing appended yet.
    fn make_lane(&self, id: u16, io: LaneIo) -> Arc<Lane> {
        Arc::new(Lane {
            id,
            pending: Mutex::new(Pending::default()),
            io: Mutex::new(io),
            horizon: AtomicU64::new(0),
            flushed: AtomicU64::new(0),
            synced: AtomicU64::new(0),
            serialize: self.policy.serialized(),
            held: Mutex::new(Vec::new()),
        })
    }

    /// The next LSN, by the CAS loop of paper 003 (misses counted).
    #[inline]
    fn take_lsn(&self) -> u64 {
        let mut cur = self.next_lsn.load(Ordering::Relaxed);
        loop {
            match self.next_lsn.compare_exchange_weak(cur, cur + 1, Ordering::SeqCst, Ordering::Relaxed) {
                Ok(_) => return cur,
                Err(now) => {
                    self.cas_misses.fetch_add(1, Ordering::Relaxed);
                    cur = now;
                }
            }
        }
    }

    /// Appends a commit record for `writes` (their keys in the arena `keys`) to `lane`.
    /// Called with the write locks held. Returns `(sequence number in the lane, LSN or
    /// timestamp)`. `level` is the commit's durability: the shared WAL flushes its group
    /// in here.
    pub(crate) fn append<R>(
        &self,
        lane: &Lane,
        ts: u64,
        writes: &[WriteEntry<R>],
        keys: &[u8],
        level: Durability,
    ) -> Result<(u64, u64), Error> {
        self.check()?;
        let mut p = lane.pending.lock();
        let order = match self.policy.release {
            Release::Nlr if !self.opts.lsn_order => ts.saturating_add(self.order_floor.load(Ordering::Relaxed)),
            _ => self.take_lsn(),
        };
        let bytes = writes.iter().fold(RecordEncoder::HEAD_LEN, |n, w| match &w.kind {
            WriteKind::Value(v) => n + RecordEncoder::write_len(w.key.of(keys), v.as_deref()),
            WriteKind::Gap => n,
        });
        p.buf.reserve(bytes);
        let mut enc = RecordEncoder::begin(&mut p.buf, order);
        for w in writes {
            if let WriteKind::Value(v) = &w.kind {
                enc.write_counted(w.key.of(keys), v.as_deref(), w.flips() && !self.plants.log_without_count);
            }
        }
        if enc.finish().is_none() {
            return Err(Error::TxnTooLarge { max: crate::error::MAX_TXN_BYTES });
        }
        let end = p.buf.len();
        p.ends.push((end, order));
        p.appended += 1;
        p.last_order = order;
        if p.oldest.is_none() {
            p.oldest = Some(Instant::now());
        }
        let at = (p.appended, order);
        // Algorithm 1: the shared WAL flushes, under its lock, once NGROUP records are in.
        if lane.serialize && p.ends.len() >= self.policy.group && level != Durability::None {
            let mut io = lane.io.lock();
            self.flush_held(lane, &mut io, &mut p, false, level == Durability::Sync)?;
        }
        Ok(at)
    }

    /// Writes (and syncs, per the durability) everything pending in `lane`. `force` writes
    /// a block even with nothing pending, to make a new watermark durable.
    pub(crate) fn flush_lane(&self, lane: &Lane, force: bool) -> Result<(), Error> {
        self.flush_lane_as(lane, force, self.policy.syncs())
    }

    /// As [`flush_lane`](Self::flush_lane), syncing or not as `sync` says.
    fn flush_lane_as(&self, lane: &Lane, force: bool, sync: bool) -> Result<(), Error> {
        if lane.serialize {
            let mut p = lane.pending.lock();
            let mut io = lane.io.lock();
            self.flush_held(lane, &mut io, &mut p, force, sync)
        } else {
            let mut io = lane.io.lock();
            self.flush_locked(lane, &mut io, force, sync)
        }
    }

    /// As [`flush_lane_as`](Self::flush_lane_as), unless someone else is flushing it
    /// already.
    fn try_flush_lane(&self, lane: &Lane, sync: bool) -> Option<Result<(), Error>> {
        if lane.serialize {
            let mut p = lane.pending.try_lock()?;
            let mut io = lane.io.lock();
            Some(self.flush_held(lane, &mut io, &mut p, false, sync))
        } else {
            let mut io = lane.io.try_lock()?;
            Some(self.flush_locked(lane, &mut io, false, sync))
        }
    }

    /// P-WAL lanes: the worker may append while the blocks are written (lock order: the
    /// file, then the buffer).
    fn flush_locked(&self, lane: &Lane, io: &mut LaneIo, force: bool, sync: bool) -> Result<(), Error> {
        let (buf, ends, appended, horizon) = self.take(&mut lane.pending.lock());
        self.write_taken(lane, io, buf, ends, appended, horizon, force, End::No, sync)
    }

    /// The shared WAL of Algorithm 1: its buffer lock is held through the I/O, so
    /// appends wait (lock order: the buffer, then the file).
    fn flush_held(&self, lane: &Lane, io: &mut LaneIo, p: &mut Pending, force: bool, sync: bool) -> Result<(), Error> {
        let (buf, ends, appended, horizon) = self.take(p);
        self.write_taken(lane, io, buf, ends, appended, horizon, force, End::No, sync)
    }

    /// Before a commit on `lane` that a transaction chose not to sync while the database
    /// syncs (NLR): makes `lane` the one lane that holds such commits, syncing the lane
    /// that held them before. The guard is kept across the append, so that no other lane
    /// takes the role in between. With one such lane at a time, a power loss can only cut
    /// that lane's tail, which its order keeps a prefix of its commits; every other lane's
    /// commits, and whatever a later commit on another lane read, are synced.
    pub(crate) fn claim_unsynced(
        &self,
        lane: &Arc<Lane>,
    ) -> Result<parking_lot::MutexGuard<'_, Option<Arc<Lane>>>, Error> {
        let mut holder = self.unsynced.lock();
        if let Some(prev) = holder.as_ref().filter(|h| !Arc::ptr_eq(h, lane)) {
            if !self.plants.unsynced_no_handoff {
                self.make_durable(prev)?;
            }
        }
        *holder = Some(lane.clone());
        // Before the append, so before the install: a later commit that reads or
        // overwrites this one's writes sees it (`settle_unsynced`).
        self.unsynced_claimed.store(true, Ordering::SeqCst);
        Ok(holder)
    }

    /// Before a synced commit on `lane` is written: every commit left unsynced on another
    /// lane becomes durable first, so that a synced commit makes every earlier one durable
    /// (its own lane's earlier ones are synced with it). Free while no transaction ever
    /// chose less than a sync; where the database itself does not sync, every lane is
    /// synced.
    pub(crate) fn settle_unsynced(&self, lane: &Lane) -> Result<(), Error> {
        if !self.policy.syncs() {
            return self.sync_lanes_but(Some(lane));
        }
        if !self.unsynced_claimed.load(Ordering::SeqCst) {
            return Ok(());
        }
        let mut holder = self.unsynced.lock();
        if let Some(prev) = holder.as_ref().filter(|h| !std::ptr::eq(&***h, lane)) {
            if !self.plants.unsynced_no_handoff {
                self.make_durable(prev)?;
            }
            *holder = None;
            // Every commit is synced again: later synced commits skip the lock (a claim
            // sets it again under the same lock).
            self.unsynced_claimed.store(false, Ordering::SeqCst);
        }
        Ok(())
    }

    /// A synced commit that logged nothing (NLR): still a synced commit, so every commit
    /// before it becomes durable, its own lane's too.
    pub(crate) fn settle_all_before(&self, lane: &Lane) -> Result<(), Error> {
        if self.policy.syncs() && !self.unsynced_claimed.load(Ordering::SeqCst) {
            return Ok(());
        }
        self.settle_unsynced(lane)?;
        self.make_durable(lane)
    }

    /// Defers `write` (the store's master record marking the exit unclean, after a clean
    /// one) until the first lane is made: an open that commits nothing writes nothing.
    pub(crate) fn set_first_write(&self, write: FirstWrite) {
        *self.first_write.lock() = Some(write);
    }

    /// Does the deferred write, if it is still to do (before the first lane, and before a
    /// checkpoint writes its own master records). A failure leaves it to do.
    pub(crate) fn first_write(&self) -> Result<(), Error> {
        let mut pending = self.first_write.lock();
        if let Some(write) = pending.as_ref() {
            write()?;
        }
        *pending = None;
        Ok(())
    }

    /// Drops the deferred write; whether it was still to do (nothing was written since).
    pub(crate) fn drop_first_write(&self) -> bool {
        self.first_write.lock().take().is_some()
    }

    /// Writes and syncs every lane's commits ([`crate::Db::sync`]).
    pub(crate) fn sync_all(&self) -> Result<(), Error> {
        if !self.policy.logs() {
            return Ok(());
        }
        self.sync_lanes_but(None)
    }

    /// Writes and syncs every lane but `skip`.
    fn sync_lanes_but(&self, skip: Option<&Lane>) -> Result<(), Error> {
        let lanes: Vec<Arc<Lane>> = self.lanes.read().clone();
        for l in lanes.iter().filter(|l| skip.is_none_or(|s| !std::ptr::eq(&***l, s))) {
            self.make_durable(l)?;
        }
        Ok(())
    }

    /// Writes and syncs everything `lane` holds (nothing to do if it is synced already).
    pub(super) fn make_durable(&self, lane: &Lane) -> Result<(), Error> {
        self.flush_lane_as(lane, false, true)
    }

    #[allow(clippy::type_complexity)]
    fn take(&self, p: &mut Pending) -> (Vec<u8>, Vec<(usize, u64)>, u64, u64) {
        // No LSN of this lane is in flight while `pending` is held: every later one is at
        // least the counter's value now.
        let horizon = self.next_lsn.load(Ordering::SeqCst);
        p.oldest = None;
        (std::mem::take(&mut p.buf), std::mem::take(&mut p.ends), p.appended, horizon)
    }

    #[allow(clippy::too_many_arguments)]
    fn write_taken(
        &self,
        lane: &Lane,
        io: &mut LaneIo,
        buf: Vec<u8>,
        ends: Vec<(usize, u64)>,
        appended: u64,
        horizon: u64,
        force: bool,
        mark: End,
        sync: bool,
    ) -> Result<(), Error> {
        let closing = mark == End::Lane;
        self.check()?;
        let elr = self.policy.elr();
        if buf.is_empty() && !(force || elr && horizon > lane.horizon.load(Ordering::Acquire)) {
            if sync && lane.synced.load(Ordering::Acquire) < appended {
                // Written earlier without a sync (a transaction's choice): synced now.
                if let Some(f) = io.file.as_deref() {
                    self.sync(f)?;
                }
                io.synced();
                io.all_synced = true;
                lane.synced.store(appended, Ordering::Release);
            }
            lane.flushed.store(appended, Ordering::Release);
            lane.release_held(appended);
            return Ok(());
        }
        // Back over the unsynced, partly filled last block: it is written again, its
        // payload first (see `Tail`).
        let (buf, ends, tail_flags) = match io.tail.take() {
            Some(mut t) => {
                self.drop_echo(io);
                io.off -= BLOCK as u64;
                io.seq -= 1;
                self.rewritten.fetch_add(1, Ordering::Relaxed);
                if self.plants.repack_drops_tail {
                    t.payload.clear();
                    t.ends.clear();
                }
                let shift = t.payload.len();
                t.payload.extend_from_slice(&buf);
                t.ends.extend(ends.iter().map(|&(e, o)| (e + shift, o)));
                let flags = (t.synced_before, t.after_partial);
                (t.payload, t.ends, Some((flags, t.watermark)))
            }
            None => (buf, ends, None),
        };
        let blocks = buf.len().div_ceil(PAYLOAD).max(1);
        let kept = match mark {
            End::Kept => true,
            // Records only: a lane's first block, written before its registry, must not
            // make a crash before that registry look like a kept log.
            End::No => sync && !ends.is_empty() && self.commits_keep_ends(),
            End::Lane => false,
        };
        // (synced before, after a partly filled block) of the flush's first block: a
        // rewritten tail keeps those it was first written with.
        let first_flags = match tail_flags {
            Some((f, _)) => f,
            None => (io.all_synced, io.last_partial),
        };
        let mut last_watermark = 0;
        let mut e = 0;
        // Sealed and written a chunk at a time: a big transaction's flush needs no second
        // copy of its whole record.
        for chunk in (0..blocks).step_by(FLUSH_CHUNK_BLOCKS) {
            let chunk_end = (chunk + FLUSH_CHUNK_BLOCKS).min(blocks);
            io.out.clear();
            io.out.resize((chunk_end - chunk) * BLOCK, 0);
            for b in chunk..chunk_end {
                let start = b * PAYLOAD;
                let end = ((b + 1) * PAYLOAD).min(buf.len());
                let block = &mut io.out[(b - chunk) * BLOCK..(b - chunk + 1) * BLOCK];
                block[..end - start].copy_from_slice(&buf[start..end]);
                // Only a flush's first block can say that every block before it was synced:
                // the blocks before a later one are this flush's own, unsynced (a torn first
                // block followed by an intact second one is a torn tail, not corruption).
                let (synced_before, after_partial) = if b == 0 { first_flags } else { (false, false) };
                let mut t = Trailer {
                    flags: if synced_before { FLAG_SYNCED_BEFORE } else { 0 }
                        | if after_partial { FLAG_AFTER_PARTIAL } else { 0 },
                    lane: lane.id,
                    used: (end - start) as u16,
                    seq: io.seq,
                    // The last flush of a lane's generation (a checkpoint moved it on) says
                    // that every record the lane will ever hold in it is here: it bounds no
                    // other lane's records at recovery.
                    watermark: if elr && closing {
                        u64::MAX
                    } else if elr {
                        horizon
                    } else {
                        0
                    },
                    ..Trailer::default()
                };
                if b + 1 == blocks {
                    t.flags |= FLAG_FLUSH_END;
                    if mark == End::Lane {
                        t.flags |= FLAG_LANE_END;
                    }
                    if kept {
                        t.flags |= FLAG_KEPT_END;
                    }
                } else if let (0, Some((_, w))) = (b, tail_flags) {
                    // A tail written again at the start of a longer flush (see `Tail`).
                    t.flags |= FLAG_FLUSH_END;
                    t.watermark = w;
                }
                last_watermark = t.watermark;
                while e < ends.len() && ends[e].0 <= end {
                    let o = ends[e].1;
                    t.lo = if t.records == 0 { o } else { t.lo.min(o) };
                    t.hi = t.hi.max(o);
                    t.records += 1;
                    e += 1;
                }
                format::seal_block(block, &t, io.gen);
                io.seq =
                    io.seq.checked_add(1).ok_or_else(|| self.poison(Poison::new("lane block sequence overflow")))?;
            }
            let out = std::mem::take(&mut io.out);
            let r = self.write_blocks(lane, io, &out, !closing);
            io.out = out;
            r?;
        }
        if sync {
            self.sync(io.file.as_deref().expect("a segment is open after a write"))?;
            io.synced();
            lane.synced.store(appended, Ordering::Release);
        }
        let last = (blocks - 1) * PAYLOAD;
        let last_used = buf.len() - last;
        if !sync && mark == End::No && last_used < PAYLOAD {
            // Kept for the next write to fill (a closing write is synced next). Its flags
            // are those it was written with.
            let at = ends.partition_point(|&(e, _)| e <= last);
            let (synced_before, after_partial) = if blocks == 1 { first_flags } else { (false, false) };
            io.tail = Some(Tail {
                payload: buf[last..].to_vec(),
                ends: ends[at..].iter().map(|&(e, o)| (e - last, o)).collect(),
                synced_before,
                after_partial,
                watermark: last_watermark,
            });
        }
        io.last_partial = last_used < PAYLOAD;
        io.all_synced = sync;
        io.kept_end = kept;
        self.flushes.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add((blocks * BLOCK) as u64, Ordering::Relaxed);
        let added = blocks - usize::from(tail_flags.is_some());
        self.grown.fetch_add((added * BLOCK) as u64, Ordering::Relaxed);
        lane.flushed.store(appended, Ordering::Release);
        if elr {
            lane.horizon.fetch_max(horizon, Ordering::AcqRel);
        }
        lane.release_held(appended);
        Ok(())
    }

    /// Lets synced flushes mark their last blocks as kept ends while the log since the last
    /// checkpoint is at most `bytes` (0: never). The store sets it where its close would
    /// keep the log (`store::Durable::keeps_log`): the close then finds every lane's last
    /// block a kept end already and writes nothing (a short-lived handle's close had a
    /// block and an fdatasync of its own), and a crash after a synced commit leaves a log
    /// the next open resumes, as after such a close. Only synced flushes: what a later
    /// open appends after must be durable, and one before it unsynced could be lost.
    pub(crate) fn set_kept_end_limit(&self, bytes: u64) {
        self.kept_end_limit.store(bytes, Ordering::Relaxed);
    }

    /// Whether a synced flush now marks its last block as a kept end.
    fn commits_keep_ends(&self) -> bool {
        let limit = self.kept_end_limit.load(Ordering::Relaxed);
        limit > 0 && self.log_since_checkpoint() <= limit
    }

    fn sync(&self, f: &dyn StorageFile) -> Result<(), Error> {
        self.syncs.fetch_add(1, Ordering::Relaxed);
        if self.plants.skip_sync {
            return Ok(());
        }
        f.sync_data().map_err(|e| self.poison(io_err("log fdatasync failed; the database is poisoned", e)))
    }

    /// Writes whole blocks at the lane's position, moving to a new preallocated segment
    /// when the current one is full (after syncing it: a later segment exists only once
    /// every earlier one is complete on disk). `ahead`: prepare the next segment ahead of
    /// use (not for the write that ends the lane in its generation: nothing would use it,
    /// and its end block, not a later segment, is what tells recovery that the lane is
    /// whole; a close that wrote the pages zero-filled and synced one, then deleted it).
    fn write_blocks(&self, lane: &Lane, io: &mut LaneIo, mut data: &[u8], ahead: bool) -> Result<(), Error> {
        let max = self.opts.segment_size;
        while !data.is_empty() {
            if io.file.is_none() || io.off == format::segment_len(io.seg, max) {
                let gen = io.gen;
                let name = |seg| format::segment_name(gen, lane.id, seg);
                let file = match io.file.take() {
                    Some(f) => {
                        self.sync(&*f)?;
                        io.seg += 1;
                        match io.next.take() {
                            Some(p) => segments::wait(p),
                            None => self.prepare(name(io.seg), io.seg),
                        }
                    }
                    None => self.prepare(name(io.seg), io.seg),
                };
                let file =
                    file.map_err(|e| self.poison(io_err(&format!("creating log segment {}", name(io.seg)), e)))?;
                if self.direct_writes() {
                    file.set_direct();
                }
                io.file = Some(file);
                // The lane's blocks follow the segment's header (see `format::segment_header`).
                io.off = format::SEGMENT_HEADER;
            }
            let f = io.file.as_deref().expect("segment open");
            let len = format::segment_len(io.seg, max);
            let n = ((len - io.off) as usize).min(data.len());
            f.write_at(&data[..n], io.off)
                .map_err(|e| self.poison(io_err("log write failed; the database is poisoned", e)))?;
            self.echo(io, &data[..n]);
            io.off += n as u64;
            data = &data[n..];
            // The next segment is prepared in the background as this one is first written
            // (its presence makes a deleted segment a gap recovery sees), but for a lane's
            // first, only once half full: a lane that stays small (a short-lived
            // handle's) never makes one, and the lane registry covers its first segment.
            let due = io.seg > 0 || io.off >= len / 2;
            if ahead && io.next.is_none() && due && matches!(self.opts.device, Device::File) {
                let gen = io.gen;
                let name = format::segment_name(gen, lane.id, io.seg + 1);
                let (size, sync) = (format::segment_len(io.seg + 1, max), !self.plants.skip_sync);
                io.next = Some(self.preparer.start(name, size, sync));
            }
        }
        Ok(())
    }

    /// Whether lane segments are written with direct I/O: only where every write is
    /// synced right after, since a direct write waits for the device.
    fn direct_writes(&self) -> bool {
        self.opts.direct_io && self.policy.syncs() && matches!(self.opts.device, Device::File)
    }

    fn prepare(&self, name: String, seg: u64) -> io::Result<Box<dyn StorageFile>> {
        let prealloc = matches!(self.opts.device, Device::File);
        let size = format::segment_len(seg, self.opts.segment_size);
        prepare_segment(&*self.storage, &self.recycled, &name, size, prealloc, !self.plants.skip_sync)
    }

    /// Once the master record naming generation `keep` is durable: keeps the older
    /// generations' log segments for reuse, and removes every other obsolete file. What is
    /// kept is bounded by the bytes of the generation that just ended (the oldest kept
    /// segments go first): the lanes run on while a checkpoint writes its pages, so the
    /// first segments of a generation are prepared before the checkpoint that frees the
    /// previous one is durable, and take what the one before that left; a generation
    /// longer than the pool zero-fills the rest (twice the generation was kept before:
    /// fewer zero-fills, but logs on disk at several times the data). An idle database
    /// keeps nothing.
    pub(crate) fn retire(&self, keep: u64) -> Result<(), Error> {
        // Files are listed, opened and removed outside the pool's lock, which segment
        // preparations (a commit may wait for one) take: only files in the pool can be
        // renamed meanwhile, and those are skipped here or already out of it.
        let kept: std::collections::HashSet<String> =
            self.recycled.free.lock().iter().map(|(n, _)| n.clone()).collect();
        let listed = self.storage.list().map_err(|e| Error::io("listing the database directory", e))?;
        let (mut reusable, mut obsolete) = (Vec::new(), Vec::new());
        for n in recovery::stale_names(listed, keep) {
            if kept.contains(&n) {
                continue;
            }
            let full = format::parse_segment_name(&n).and_then(|(_, _, seg)| {
                let want = format::segment_len(seg, self.opts.segment_size);
                // A file that cannot be opened or has the wrong length is not reused.
                self.storage.open(&n, false).and_then(|f| f.len()).ok().filter(|&len| len == want)
            });
            match full {
                Some(len) => reusable.push((n, len)),
                None => obsolete.push(n),
            }
        }
        {
            let mut free = self.recycled.free.lock();
            let added: u64 = reusable.iter().map(|&(_, len)| len).sum();
            free.extend(reusable);
            let mut total: u64 = free.iter().map(|&(_, len)| len).sum();
            let mut oldest = 0;
            while total > added && oldest < free.len() {
                total -= free[oldest].1;
                oldest += 1;
            }
            obsolete.extend(free.drain(..oldest).map(|(n, _)| n));
        }
        for n in obsolete {
            self.remove_obsolete(&n)?;
        }
        Ok(())
    }

    /// Removes a file no state needs; one already gone is fine.
    fn remove_obsolete(&self, n: &str) -> Result<(), Error> {
        match self.storage.remove(n) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(Error::io(format!("removing {n}"), e)),
            _ => Ok(()),
        }
    }

    /// Waits for background segment preparations (at close and drop, so that no thread
    /// writes into the directory after the database is gone).
    fn join_preparations(&self) {
        for l in self.lanes.read().iter() {
            if let Some(p) = l.io.lock().next.take() {
                let _ = segments::wait(p);
            }
        }
    }

    /// Makes `lane` durable up to its record `seq` under the database's durability
    /// (grouping per the options: `private` lanes of a waiting committer flush at once,
    /// since nobody else fills them).
    pub(crate) fn flush_to(&self, lane: &Lane, seq: u64, private: bool) -> Result<(), Error> {
        self.flush_to_as(lane, seq, private, self.policy.durability)
    }

    /// As [`flush_to`](Self::flush_to), to the durability `level` (a transaction's own):
    /// synced, written, or (`None`) left in memory until the lane's buffer is large.
    pub(crate) fn flush_to_as(&self, lane: &Lane, seq: u64, private: bool, level: Durability) -> Result<(), Error> {
        if level == Durability::None {
            let big = lane.pending.lock().buf.len() >= LAZY_FLUSH_BYTES;
            return if big { self.flush_lane_as(lane, false, false) } else { Ok(()) };
        }
        let sync = level == Durability::Sync;
        let done = if sync { &lane.synced } else { &lane.flushed };
        let start = Instant::now();
        let mut spins = 0u32;
        while done.load(Ordering::Acquire) < seq {
            self.check()?;
            let pending = seq.saturating_sub(done.load(Ordering::Acquire));
            if private
                || self.policy.group <= 1
                || pending >= self.policy.group as u64
                || start.elapsed() >= self.opts.max_wait
            {
                if let Some(r) = self.try_flush_lane(lane, sync) {
                    r?;
                    continue;
                }
            }
            spins += 1;
            if spins < 16 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        Ok(())
    }

    /// Whether commits keep their locks until their group is durable (P-WAL, NLR, group
    /// above 1: paper 001's Algorithm 3).
    pub(crate) fn holds_locks(&self) -> bool {
        self.policy.holds_locks
    }

    /// Keeps `word` locked until record `seq` of `lane` is durable (released at once if
    /// it already is).
    pub(crate) fn hold_lock(&self, lane: &Lane, seq: u64, word: &AtomicU64, release: u64) {
        lane.held.lock().push((seq, word as *const AtomicU64 as usize, release));
        if lane.flushed.load(Ordering::Acquire) >= seq {
            lane.release_held(lane.flushed.load(Ordering::Acquire));
        }
    }

    /// Releases every held lock (the engine is going away).
    pub(crate) fn release_all_held(&self) {
        for l in self.lanes.read().iter() {
            l.release_held(u64::MAX);
        }
    }

    /// Records appended to `lane` so far.
    pub(crate) fn appended_of(&self, lane: &Lane) -> u64 {
        lane.pending.lock().appended
    }

    /// What a commit that logged nothing waits for: the worker's own earlier deferred
    /// commits, if any are still pending (so `commit` stays a barrier for them).
    pub(crate) fn pending_of(&self, lane: &Lane) -> Option<(u64, u64)> {
        let p = lane.pending.lock();
        (lane.flushed.load(Ordering::Acquire) < p.appended).then_some((p.appended, p.last_order))
    }

    /// After a deferred commit: flushes `lane` if its group is full or has waited long
    /// enough; otherwise leaves the record pending.
    pub(crate) fn maybe_flush(&self, lane: &Lane) -> Result<(), Error> {
        let due = {
            let p = lane.pending.lock();
            let n = p.ends.len();
            n >= self.policy.group
                || p.buf.len() >= LAZY_FLUSH_BYTES
                || p.oldest.is_some_and(|t| t.elapsed() >= self.opts.max_wait) && self.policy.flushes()
        };
        if due {
            self.flush_lane(lane, false)?;
        }
        Ok(())
    }

    /// The minimum watermark over all lanes: every LSN below it is durable everywhere.
    fn durable_lsn(&self) -> u64 {
        self.lanes.read().iter().map(|l| l.horizon.load(Ordering::Acquire)).min().unwrap_or(u64::MAX)
    }

    /// ELR: waits until every LSN up to `lsn` is durable on every lane, flushing lanes
    /// whose owners are idle (a lane only advances its watermark when written).
    pub(crate) fn wait_durable(&self, lsn: u64) -> Result<(), Error> {
        if !self.policy.flushes() {
            return Ok(());
        }
        let mut spins = 0u32;
        loop {
            if self.durable_lsn() > lsn {
                return Ok(());
            }
            self.check()?;
            let lagging: Vec<Arc<Lane>> =
                self.lanes.read().iter().filter(|l| l.horizon.load(Ordering::Acquire) <= lsn).cloned().collect();
            for l in lagging {
                if l.horizon.load(Ordering::Acquire) <= lsn {
                    if let Some(r) = self.try_flush_lane(&l, self.policy.syncs()) {
                        r?;
                    }
                }
            }
            spins += 1;
            if spins < 16 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }
}

impl Drop for Wal {
    fn drop(&mut self) {
        self.join_preparations();
    }
}

impl crate::cc::LockWaiter for Wal {
    fn on_lock_wait(&self) {
        if !self.holds_locks() {
            return;
        }
        let lanes: Vec<Arc<Lane>> = self.lanes.read().iter().filter(|l| !l.held.lock().is_empty()).cloned().collect();
        let poisoned = self.check().is_err();
        for l in lanes {
            if poisoned {
                // No commit will ever be acknowledged again: nothing can come to depend
                // on these writes, and waiters must not hang.
                l.release_held(u64::MAX);
            } else if let Some(r) = self.try_flush_lane(&l, self.policy.syncs()) {
                // A failed flush poisons the log; the waiter learns it at its commit.
                let _ = r;
            }
        }
    }
}

/// A commit waiting to become durable; see [`crate::Txn::commit_deferred`].
#[must_use = "a deferred commit is not durable until its ticket is waited on"]
pub struct CommitTicket {
    pub(crate) wait: Option<(Arc<Wal>, Arc<Lane>, u64, u64)>,
}

impl CommitTicket {
    /// A ticket for a commit that is already durable (for callers that mix blocking and
    /// deferred commits).
    pub fn done() -> Self {
        CommitTicket { wait: None }
    }

    /// A ticket for a commit that needs no waiting (nothing logged, or already durable).
    pub(crate) fn ready() -> Self {
        CommitTicket { wait: None }
    }

    /// Waits until the commit is durable under the database's durability setting.
    pub fn wait(self) -> Result<(), Error> {
        match self.wait {
            None => Ok(()),
            Some((wal, lane, seq, lsn)) => {
                if wal.policy.flushes_each_commit() {
                    // Left in memory at commit (NLR): what it may have read from other
                    // lanes becomes durable first.
                    wal.settle_unsynced(&lane)?;
                }
                wal.flush_to(&lane, seq, true)?;
                if wal.policy.elr() {
                    wal.wait_durable(lsn)?;
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generations_end_by_cost_space_and_memory() {
        const MIB: u64 = 1 << 20;
        let limit = 64 * MIB;
        // A large store whose last checkpoint wrote much: the store's share binds.
        assert_eq!(checkpoint_limit(limit, 100 * MIB, 640 * MIB, u64::MAX), 40 * MIB);
        // The checkpoint's memory binds below that, but never under the floor.
        assert_eq!(checkpoint_limit(limit, 100 * MIB, 640 * MIB, 16 * MIB), 16 * MIB);
        assert_eq!(checkpoint_limit(limit, 100 * MIB, 640 * MIB, 4 * MIB), LOG_FLOOR);
        // A small store: the floor, whatever the cost.
        assert_eq!(checkpoint_limit(limit, 100 * MIB, 10 * MIB, u64::MAX), LOG_FLOOR);
        // Cheap checkpoints wait for `checkpoint_bytes` when the store's share is larger;
        // a smaller `checkpoint_bytes` lowers the floor too.
        assert_eq!(checkpoint_limit(limit, MIB, 2048 * MIB, u64::MAX), limit);
        assert_eq!(checkpoint_limit(limit, MIB, 640 * MIB, u64::MAX), 40 * MIB);
        assert_eq!(checkpoint_limit(MIB, 0, 640 * MIB, 0), MIB);
    }
}
