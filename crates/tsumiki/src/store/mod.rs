//! The files of a database and their life cycle: open (lock, master record, recovery),
//! checkpoints while open (a new generation of logs, the state written beside it, the
//! older logs deleted), and close (the snapshot a clean exit leaves).
//!
//! This is where paper 004's page store grows (see `docs/design.md`, "Page store"): today
//! the state at the start of a generation is one snapshot file and the logs after it are
//! replayed whole. Opening never invents a state and never destroys one it cannot prove
//! obsolete:
//! - the master record names the snapshot with its length and CRC32C; a snapshot that is
//!   missing, empty, shorter, longer or from elsewhere is [`Error::Corrupt`], never an
//!   empty or smaller database;
//! - files newer than the master record allows are [`Error::Corrupt`] (a master record put
//!   back or crafted), never deleted;
//! - files are deleted only after the master record naming their replacement is durable;
//! - every setting is validated before anything is created.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::error::Error;
use crate::wal::format::{parse_segment_name, Master};
use crate::wal::recovery::{self, RecoveryStats, SnapshotWriter};
use crate::wal::storage::{NvmStorage, Storage};
use crate::wal::{CommitMode, Device, LogMode, LogOptions, Release, Wal};

/// The files behind a database opened with a path.
pub(crate) struct Durable {
    storage: Arc<dyn Storage>,
    pub(crate) wal: Arc<Wal>,
    /// The current generation and the snapshot it started from (length, CRC32C), if any;
    /// held through a checkpoint or close, so that only one runs at a time.
    current: Mutex<(u64, Option<(u64, u32)>)>,
    _lock: Box<dyn Send + Sync>,
    closed: AtomicBool,
    pub(crate) recovery: RecoveryStats,
    /// Opened on a full disk: readable, every commit refused, nothing written at close.
    read_only: bool,
}

/// Receives the recovered state, one live key and its value at a time.
pub(crate) type Loader<'a> = dyn FnMut(&[u8], &[u8]) -> Result<(), Error> + 'a;

/// Opens the database in `storage` for a protocol named `protocol`: takes its lock,
/// recovers its state, and starts a new log. `load` receives the recovered state, one live
/// key at a time in strictly increasing key order (what a bulk load wants).
pub(crate) fn open(
    storage: Arc<dyn Storage>,
    log: LogOptions,
    protocol: &str,
    can_hold_locks: bool,
    load: &mut Loader<'_>,
) -> Result<Durable, Error> {
    CommitMode::resolve(&log, protocol, can_hold_locks)?;
    let lock = storage.lock().map_err(|e| match e.kind() {
        std::io::ErrorKind::WouldBlock => Error::Locked(e.to_string()),
        _ => Error::io("locking the database", e),
    })?;
    let elr = log.release == Release::Elr;
    let mut stats = RecoveryStats::default();
    // Opening must not need free space: on a full disk the database opens read-only.
    let mut read_only: Option<Error> = None;
    let (generation, started_from) = match recovery::read_master(&*storage)? {
        None => {
            let m = Master {
                generation: 1,
                has_snapshot: false,
                last_exit: false,
                elr,
                segment_size: log.segment_size,
                snap_len: 0,
                snap_crc: 0,
            };
            recovery::write_master(&*storage, &m)?;
            (1, None)
        }
        Some(m) => {
            recovery::check_generations(&*storage, m.generation)?;
            let snap = m.has_snapshot.then_some((m.snap_len, m.snap_crc));
            if m.last_exit {
                if recovery::has_logs(&*storage, m.generation.saturating_add(1))? {
                    return Err(Error::Corrupt(format!(
                        "MASTER says generation {} ended cleanly, but logs of the next one exist",
                        m.generation
                    )));
                }
                // A clean exit: the snapshot is the whole state, one put per key in key
                // order, handed over as it is read (no map in between).
                if let Some(expect) = snap {
                    let mut bad = None;
                    recovery::read_snapshot(&*storage, m.generation, expect, |k, v| {
                        if let (Some(v), None) = (v, &bad) {
                            match load(k, v) {
                                Ok(()) => stats.keys += 1,
                                Err(e) => bad = Some(e),
                            }
                        }
                    })?;
                    if let Some(e) = bad {
                        return Err(e);
                    }
                }
                // This generation's log starts empty: its old segments are obsolete now
                // that the durable master record says the snapshot holds everything.
                recovery::remove_stale(&storage, m.generation)?;
                for n in storage.list().map_err(|e| Error::io("listing the database directory", e))? {
                    if parse_segment_name(&n).is_some() {
                        storage.remove(&n).map_err(|e| Error::io(format!("removing {n}"), e))?;
                    }
                }
                let next = Master { last_exit: false, elr, segment_size: log.segment_size, ..m };
                match recovery::write_master(&*storage, &next) {
                    Ok(()) => {}
                    // The clean exit's master record stays true while nothing is written.
                    Err(e) if disk_full(&e) => read_only = Some(e),
                    Err(e) => return Err(e),
                }
                (m.generation, snap)
            } else {
                // A checkpoint that did not finish leaves the next generation's logs too.
                let mut gens = vec![m.generation];
                if recovery::has_logs(&*storage, m.generation.saturating_add(1))? {
                    gens.push(m.generation + 1);
                }
                let g = gens[gens.len() - 1]
                    .checked_add(1)
                    .ok_or_else(|| Error::Corrupt("MASTER names the last possible generation".into()))?;
                let mut state: HashMap<Vec<u8>, Option<Vec<u8>>> = HashMap::new();
                if let Some(expect) = snap {
                    recovery::read_snapshot(&*storage, m.generation, expect, |k, v| {
                        state.insert(k.to_vec(), v.map(<[u8]>::to_vec));
                    })?;
                }
                let release = if m.elr { Release::Elr } else { Release::Nlr };
                stats = recovery::replay(&*storage, &gens, m.segment_size, release, |k, v| {
                    // Overwrite in place: most records update keys already seen.
                    match state.get_mut(k) {
                        Some(slot) => match (slot.as_mut(), v) {
                            (Some(old), Some(v)) => {
                                old.clear();
                                old.extend_from_slice(v);
                            }
                            (_, v) => *slot = v.map(<[u8]>::to_vec),
                        },
                        None => {
                            state.insert(k.to_vec(), v.map(<[u8]>::to_vec));
                        }
                    }
                })?;
                let mut live: Vec<(&[u8], &[u8])> =
                    state.iter().filter_map(|(k, v)| v.as_deref().map(|v| (k.as_slice(), v))).collect();
                live.sort_unstable();
                for &(k, v) in &live {
                    load(k, v)?;
                }
                stats.keys = live.len() as u64;
                let started = recovery::write_snapshot(&*storage, g, live.into_iter()).and_then(|made| {
                    let next = Master {
                        generation: g,
                        has_snapshot: true,
                        last_exit: false,
                        elr,
                        segment_size: log.segment_size,
                        snap_len: made.0,
                        snap_crc: made.1,
                    };
                    recovery::write_master(&*storage, &next)?;
                    Ok(made)
                });
                match started {
                    Ok(made) => {
                        recovery::remove_stale(&storage, g)?;
                        (g, Some(made))
                    }
                    // The recovered state stays readable in memory; the files stay as they
                    // were (the old master record still names them all).
                    Err(e) if disk_full(&e) => {
                        read_only = Some(e);
                        (m.generation, snap)
                    }
                    Err(e) => return Err(e),
                }
            }
        }
    };
    let log_storage: Arc<dyn Storage> = match log.device {
        Device::File => storage.clone(),
        Device::Nvm(lat) => Arc::new(NvmStorage::new(lat)),
    };
    let wal = Arc::new(Wal::new(log_storage, log, generation));
    wal.note_snapshot(started_from.map_or(0, |s| s.0));
    if let Some(e) = &read_only {
        wal.poison(format!(
            "the disk was full when the database was opened ({e}): it is read-only; free space and reopen it to write"
        ));
    }
    Ok(Durable {
        storage,
        wal,
        current: Mutex::new((generation, started_from)),
        _lock: lock,
        closed: AtomicBool::new(false),
        recovery: stats,
        read_only: read_only.is_some(),
    })
}

/// Whether `e` says the disk is full.
fn disk_full(e: &Error) -> bool {
    e.io_kind() == Some(std::io::ErrorKind::StorageFull)
}

impl Durable {
    /// Flushes the log and writes a snapshot that starts the next generation, marked as a
    /// clean exit (so the next open replays nothing). `write_state` writes every committed
    /// record, in key order. No transaction may be running.
    pub(crate) fn close(
        &self,
        write_state: impl FnOnce(&mut SnapshotWriter<'_>) -> Result<(), Error>,
    ) -> Result<(), Error> {
        let current = self.current.lock();
        let (generation, started_from) = *current;
        if self.closed.swap(true, Ordering::AcqRel) || self.read_only {
            return Ok(());
        }
        self.wal.check()?;
        self.wal.flush_all()?;
        let opts = &self.wal.opts;
        let elr = opts.release == Release::Elr;
        if opts.mode != LogMode::None && self.wal.stats().records == 0 {
            // Nothing was committed since open: the state is still the one this generation
            // started from (its snapshot, or nothing), so mark the exit clean without
            // writing the same snapshot again.
            let (snap_len, snap_crc) = started_from.unwrap_or((0, 0));
            let m = Master {
                generation,
                has_snapshot: started_from.is_some(),
                last_exit: true,
                elr,
                segment_size: opts.segment_size,
                snap_len,
                snap_crc,
            };
            return recovery::write_master(&*self.storage, &m);
        }
        let g = generation
            .checked_add(1)
            .ok_or_else(|| Error::Corrupt("the database reached the last possible generation".into()))?;
        // Streamed leaf by leaf: closing must not hold a second copy of the database.
        let mut w = SnapshotWriter::new(&*self.storage, g)?;
        write_state(&mut w)?;
        let (snap_len, snap_crc) = w.finish()?;
        let m = Master {
            generation: g,
            has_snapshot: true,
            last_exit: true,
            elr,
            segment_size: opts.segment_size,
            snap_len,
            snap_crc,
        };
        recovery::write_master(&*self.storage, &m)?;
        recovery::remove_stale(&self.storage, g)
    }

    /// Takes a checkpoint while transactions run: every lane moves on
    /// to a new generation while `quiesce` holds commits back (no commit may be between
    /// its log append and the end of its install while the lanes switch), the state is
    /// written beside the new logs (`write_state`: every record's latest committed value,
    /// read one at a time), every lane is flushed (so each value the snapshot holds is in
    /// a durable log record too: under ELR a value is visible before its record is
    /// durable), the master record names the new generation, and only then are the older
    /// logs and snapshot deleted. Recovery then replays only the new generation's logs.
    ///
    /// A crash at any point leaves either the old master record (recovery replays both
    /// generations' logs over the old snapshot) or the new one.
    pub(crate) fn checkpoint(
        &self,
        quiesce: impl FnOnce(&mut dyn FnMut() -> Result<(), Error>) -> Result<(), Error>,
        write_state: impl FnOnce(&mut SnapshotWriter<'_>) -> Result<(), Error>,
    ) -> Result<(), Error> {
        // One at a time: a second caller waits for the running one, then takes its own.
        let mut current = self.current.lock();
        if self.closed.load(Ordering::Acquire) {
            return Ok(());
        }
        let r = self.checkpoint_locked(&mut current, quiesce, write_state);
        if r.is_err() {
            self.wal.postpone_checkpoint();
        }
        r
    }

    fn checkpoint_locked(
        &self,
        current: &mut (u64, Option<(u64, u32)>),
        quiesce: impl FnOnce(&mut dyn FnMut() -> Result<(), Error>) -> Result<(), Error>,
        write_state: impl FnOnce(&mut SnapshotWriter<'_>) -> Result<(), Error>,
    ) -> Result<(), Error> {
        self.wal.check()?;
        let g = current
            .0
            .checked_add(1)
            .ok_or_else(|| Error::Corrupt("the database reached the last possible generation".into()))?;
        // Once the lanes have moved on, a failure poisons the log: the lanes could not move
        // on again without a master record naming where they went (a failed checkpoint
        // is a failed write: a full disk, an I/O error), and recovery needs both
        // generations' logs.
        let poison = |e: Error| match e {
            Error::Poisoned(_) => e,
            e => self.wal.poison(format!("checkpoint of generation {g} failed: {e}")),
        };
        quiesce(&mut || self.wal.switch_generation(g)).map_err(poison)?;
        let mut w = SnapshotWriter::new(&*self.storage, g).map_err(poison)?;
        write_state(&mut w).map_err(poison)?;
        let (snap_len, snap_crc) = w.finish().map_err(poison)?;
        self.wal.flush_all().map_err(poison)?;
        let opts = &self.wal.opts;
        let m = Master {
            generation: g,
            has_snapshot: true,
            last_exit: false,
            elr: opts.release == Release::Elr,
            segment_size: opts.segment_size,
            snap_len,
            snap_crc,
        };
        if opts.early_log_removal_for_tests {
            recovery::remove_stale(&self.storage, g).map_err(poison)?;
        }
        recovery::write_master(&*self.storage, &m).map_err(poison)?;
        *current = (g, Some((snap_len, snap_crc)));
        self.wal.note_checkpoint(snap_len);
        // The new state is durable: the older files are obsolete (a failure here leaves
        // them for the next open or checkpoint to remove).
        recovery::remove_stale(&self.storage, g)
    }

    /// Marks the database closed without flushing or writing a snapshot (a simulated crash
    /// for tests).
    pub(crate) fn abandon(&self) {
        self.closed.store(true, Ordering::Release);
    }
}
