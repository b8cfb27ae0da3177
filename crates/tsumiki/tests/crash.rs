//! Simulated power loss: the database runs on an in-memory disk that, at a random
//! operation, loses power and drops or tears each file's unsynced writes (deterministic
//! by seed). Recovery must keep every acknowledged commit, and never recover a partial
//! transaction or one that depends on a lost one.
//!
//! `TSUMIKI_CRASH_ITERS` sets the number of seeded iterations (CI: 10,000).

#[path = "common/chains.rs"]
mod chains;
mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tsumiki::plants::Plants;
use tsumiki::storage::{SimRng, SimStorage};
use tsumiki::store::master::read_master;
use tsumiki::{Cc, Db, Durability, Error, LogMode, LogOptions, Options, Release, StoreOptions};

fn iterations(default: u64) -> u64 {
    std::env::var("TSUMIKI_CRASH_ITERS").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The log variants under test: small segments, so that rollovers happen.
fn log_variants() -> Vec<LogOptions> {
    let base = LogOptions { segment_size: 16 << 10, max_wait: Duration::from_micros(50), ..LogOptions::default() };
    let mut v = Vec::new();
    for mode in [LogMode::PWal, LogMode::SWal] {
        for release in [Release::Nlr, Release::Elr] {
            for group in [1, 4] {
                v.push(LogOptions { mode, release, group, ..base.clone() });
            }
        }
    }
    v
}

fn pick(seed: u64) -> Options {
    let mut rng = SimRng::new(seed.wrapping_mul(0x9E37));
    let cc = Cc::ALL[rng.below(Cc::ALL.len() as u64) as usize];
    let vs = log_variants();
    let log = vs[rng.below(vs.len() as u64) as usize].clone();
    let mut store = StoreOptions::default();
    if rng.below(2) == 0 {
        // Checkpoints every few commits: power is lost in every step of them too (lanes
        // moving to a new generation, page deltas and bases, splits, the table, the master
        // record, log removal, cleaning and segment reuse).
        store.checkpoint_bytes = 12 << 10;
    }
    // The smallest page segments: every checkpoint fills one, so segments are cleaned and
    // reused within an iteration.
    store.page_segment_size = 8 << 10;
    // P-WAL with NLR group commit (Algorithm 3) holds locks across commits: TicToc, 2PL.
    let holds = log.mode == LogMode::PWal && log.release == Release::Nlr && log.group > 1;
    let cc = if holds && matches!(cc, Cc::Silo | Cc::MvccSi(_)) { Cc::TicToc } else { cc };
    // A tiny cache in a quarter of the runs: ranges leave memory while the chains run, and
    // recovery moves its replayed writes to the pages every few KiB (power is lost in the
    // middle of that too).
    let cache_bytes = if rng.below(4) == 0 { 1 } else { Options::default().cache_bytes };
    Options { cc, log, store, cache_bytes, ..Options::default() }
}

fn dump(db: &Db) -> BTreeMap<Vec<u8>, Vec<u8>> {
    db.begin().iter().map(|r| r.unwrap()).collect()
}

const SLOTS: u64 = 6;

/// The bugs a crash iteration can plant.
#[derive(Clone, Copy)]
enum Planted {
    None,
    /// Syncs reported done without being done.
    SkipSync,
    /// A checkpoint deletes the older logs before its master record is durable.
    EarlyLogRemoval,
    /// Commit records do not say which writes insert or remove a key.
    LogWithoutCount,
}

/// An acknowledged commit of [`chain_threads`].
struct Ack {
    id: u64,
    /// Commits acknowledged before it began.
    before: usize,
    /// Whether it was synced (the database's durability, or a transaction's own).
    synced: bool,
}

/// Runs the chain workload on two threads, 50 transactions each, each committing with
/// the durability `level` picks (`None`: the database's); returns the acknowledgements in
/// order. A thread stops at its first failure that is not a conflict.
fn chain_threads(db: &Db, seed: u64, level: impl Fn(&mut SimRng) -> Option<Durability> + Sync) -> Vec<Ack> {
    let acks = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let (acks, level) = (&acks, &level);
            s.spawn(move || {
                let mut r = SimRng::new(seed.wrapping_add(t));
                for i in 0..50 {
                    let id = t * 1000 + i + 1;
                    let chosen = level(&mut r);
                    loop {
                        let before = acks.lock().len();
                        match chains::chain_txn_as(db, id, &mut r, SLOTS, chosen) {
                            Ok(()) => {
                                let synced = chosen.is_none_or(|l| l == Durability::Sync);
                                acks.lock().push(Ack { id, before, synced });
                                break;
                            }
                            Err(e) if e.is_retryable() => std::thread::yield_now(),
                            Err(_) => return,
                        }
                    }
                }
            });
        }
    });
    acks.into_inner()
}

/// One crash iteration with the chain workload on two threads.
fn chain_iteration(seed: u64, planted: Planted) -> Result<(), String> {
    let mut opts = pick(seed);
    match planted {
        Planted::None => {}
        Planted::SkipSync => opts.plants.skip_sync = true,
        Planted::LogWithoutCount => opts.plants.log_without_count = true,
        Planted::EarlyLogRemoval => {
            opts.plants.early_log_removal = true;
            opts.store.checkpoint_bytes = 12 << 10;
        }
    }
    let what = format!("seed {seed} ({}, {})", opts.cc.name(), opts.log.name());
    let mut rng = SimRng::new(seed);
    let disk = SimStorage::new(seed);
    let db = Db::open_with_storage(Arc::new(disk.clone()), opts.clone()).map_err(|e| format!("{what}: open: {e}"))?;
    disk.crash_after(1 + rng.below(300));
    let acks = chain_threads(&db, seed.wrapping_mul(31), |_| None);
    let image = disk.crash();
    drop(db);
    let acked: Vec<u64> = acks.iter().map(|a| a.id).collect();
    // Recovery itself may lose power too: then recover from what that left.
    let disk2 = SimStorage::from_image(&image, seed ^ 0xA5);
    if rng.below(4) == 0 {
        disk2.crash_after(rng.below(40));
        if let Ok(db) = Db::open_with_storage(Arc::new(disk2.clone()), opts.clone()) {
            drop(db);
        }
        let image2 = disk2.crash();
        let disk3 = SimStorage::from_image(&image2, seed ^ 0x5A);
        let db = Db::open_with_storage(Arc::new(disk3), opts.clone())
            .map_err(|e| format!("{what}: reopen after a crash during recovery: {e}"))?;
        return chains::check_chains(&db, &acked, SLOTS).map_err(|e| format!("{what}: {e}"));
    }
    let db =
        Db::open_with_storage(Arc::new(disk2.clone()), opts.clone()).map_err(|e| format!("{what}: reopen: {e}"))?;
    chains::check_chains(&db, &acked, SLOTS).map_err(|e| format!("{what}: {e}"))?;
    if seed.is_multiple_of(8) {
        // A clean close leaves pages that the next open reads without replay, or (a small
        // database: `StoreOptions::close_keeps_short_log`) a kept log, which the next open
        // replays in memory and goes on with, in the same generation (no recovery).
        let before = dump(&db);
        db.close().map_err(|e| format!("{what}: close: {e}"))?;
        let master = |d: &SimStorage| read_master(d).ok().flatten().map(|m| (m.generation, m.last_exit));
        let closed = master(&disk2);
        let db = Db::open_with_storage(Arc::new(disk2.clone()), opts).map_err(|e| format!("{what}: reopen: {e}"))?;
        let st = db.recovery_stats().unwrap();
        match closed {
            Some((_, true)) if st.replayed => return Err(format!("{what}: replayed the log after a clean exit")),
            Some((g, false)) if master(&disk2).map(|m| m.0) != Some(g) => {
                return Err(format!("{what}: a kept log was recovered into a new generation, not resumed"))
            }
            None => return Err(format!("{what}: no master record after a clean close")),
            _ => {}
        }
        if dump(&db) != before {
            return Err(format!("{what}: state changed across a clean close"));
        }
    }
    Ok(())
}

#[test]
fn power_loss_keeps_acknowledged_commits_and_atomicity() {
    let n = iterations(300);
    let mut failures = Vec::new();
    for seed in 0..n {
        if let Err(e) = chain_iteration(seed, Planted::None) {
            failures.push(e);
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {n} iterations failed; first: {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
}

/// The planted bug: syncs are skipped but reported done. The checker must notice.
/// One crash iteration of the chain workload on two threads whose transactions each choose
/// a durability at random (`Txn::set_durability`): synced, written without a sync, or kept
/// in memory. After the power loss: every synced acknowledged commit is there, and so is
/// every commit acknowledged before one of them began; no recovered commit lacks one it
/// read from (the chains) or one acknowledged before it began.
fn mixed_iteration(seed: u64, planted: bool) -> Result<(), String> {
    let mut opts = pick(seed);
    opts.plants.unsynced_no_handoff = planted;
    if planted {
        // The variant the handoff serves: P-WAL lanes, NLR, no group.
        opts.log = LogOptions { mode: LogMode::PWal, release: Release::Nlr, group: 1, ..opts.log };
    }
    let what = format!("seed {seed} ({}, {}, mixed)", opts.cc.name(), opts.log.name());
    let mut rng = SimRng::new(seed ^ 0x77);
    let disk = SimStorage::new(seed);
    let db = Db::open_with_storage(Arc::new(disk.clone()), opts.clone()).map_err(|e| format!("{what}: open: {e}"))?;
    disk.crash_after(1 + rng.below(300));
    let levels = [Durability::Sync, Durability::Buffered, Durability::None];
    let acks = chain_threads(&db, seed.wrapping_mul(37), |r| Some(levels[r.below(3) as usize]));
    let image = disk.crash();
    drop(db);
    let db = Db::open_with_storage(Arc::new(SimStorage::from_image(&image, seed ^ 0xA5)), opts)
        .map_err(|e| format!("{what}: reopen: {e}"))?;
    // Must survive: the synced commits and every commit acknowledged before one began.
    let upto = acks.iter().filter(|a| a.synced).map(|a| a.before).max().unwrap_or(0);
    let must: Vec<u64> = acks[..upto].iter().chain(acks.iter().filter(|a| a.synced)).map(|a| a.id).collect();
    chains::check_chains(&db, &must, SLOTS).map_err(|e| format!("{what}: {e}"))?;
    let got = chains::recovered_ids(&db).map_err(|e| format!("{what}: {e}"))?;
    for a in acks.iter().filter(|a| got.contains(&a.id)) {
        if let Some(lost) = acks[..a.before].iter().find(|b| !got.contains(&b.id)) {
            return Err(format!(
                "{what}: commit {} was recovered, but {} acknowledged before it began was lost",
                a.id, lost.id
            ));
        }
    }
    Ok(())
}

/// Runs `iteration` for [`iterations`] seeds (300 by default); fails naming the first few
/// that failed.
fn every_seed_passes(iteration: impl Fn(u64) -> Result<(), String>) {
    let n = iterations(300);
    let failures: Vec<String> = (0..n).filter_map(|s| iteration(s).err()).collect();
    assert!(failures.is_empty(), "{} of {n} failed; first: {:?}", failures.len(), &failures[..failures.len().min(5)]);
}

#[test]
fn power_loss_with_mixed_durabilities() {
    every_seed_passes(|s| mixed_iteration(s, false));
}

/// The planted bug: a commit on one lane leaves the commits another lane holds unsynced.
#[test]
fn planted_unsynced_handoff_is_caught() {
    let caught: Vec<String> = (0..300).filter_map(|s| mixed_iteration(s, true).err()).collect();
    eprintln!("caught in {} of 300 seeds; first: {:?}", caught.len(), caught.first());
    let caught = caught.len();
    assert!(caught > 0, "commits left unsynced on another lane went unnoticed in 300 seeds");
}

#[test]
fn planted_skipped_sync_is_caught() {
    let mut caught = 0;
    for seed in 0..200 {
        if let Err(e) = chain_iteration(seed, Planted::SkipSync) {
            assert!(
                e.contains("lost") || e.contains("missing") || e.contains("reopen") || e.contains("record count"),
                "{e}"
            );
            caught += 1;
        }
    }
    assert!(caught > 0, "skipping syncs went unnoticed in 200 crash iterations");
}

/// The planted bug: commit records that do not mark inserts and removals leave recovery
/// (and checkpoints) with a wrong record count. The checker must notice.
#[test]
fn planted_log_without_count_is_caught() {
    let mut caught = 0;
    for seed in 0..100 {
        if let Err(e) = chain_iteration(seed, Planted::LogWithoutCount) {
            assert!(e.contains("record count"), "{e}");
            caught += 1;
        }
    }
    assert!(caught > 0, "commit records without the count went unnoticed in 100 crash iterations");
}

/// The planted bug: a checkpoint deletes the logs it replaces before the master record
/// naming its table is durable. The checker must notice.
#[test]
fn planted_early_log_removal_is_caught() {
    let mut caught = 0;
    for seed in 0..300 {
        if chain_iteration(seed, Planted::EarlyLogRemoval).is_err() {
            caught += 1;
        }
    }
    assert!(caught > 0, "deleting logs before the checkpoint was durable went unnoticed in 300 crash iterations");
}

/// One thread commits and checkpoints (explicitly, so that the storage operations come in
/// the same order every run) and loses power after operation `crash_at` (`None`: never).
/// Returns the storage operations the run made, or how recovery went wrong.
fn checkpoint_run(crash_at: Option<u64>, planted: SweepBug) -> Result<u64, String> {
    let log = LogOptions { segment_size: 16 << 10, ..LogOptions::default() };
    let store = StoreOptions {
        // Only the explicit checkpoints below: none by log volume or by time.
        checkpoint_bytes: 0,
        checkpoint_interval: Duration::ZERO,
        // Every checkpoint fills a segment or two, so cleaning frees and reuses segments.
        page_segment_size: 8 << 10,
        ..StoreOptions::default()
    };
    let plants = Plants {
        early_segment_reuse: planted == SweepBug::EarlyReuse,
        milestone_skips_replay: planted == SweepBug::MilestoneSkipsReplay,
        first_logged_value: planted == SweepBug::FirstLoggedValue,
        ..Plants::NONE
    };
    let opts = Options { cc: Cc::TicToc, log, store, plants, ..Options::default() };
    let disk = SimStorage::new(7);
    let db = Db::open_with_storage(Arc::new(disk.clone()), opts.clone()).map_err(|e| format!("open: {e}"))?;
    if let Some(k) = crash_at {
        disk.crash_after(k);
    }
    let mut rng = SimRng::new(11);
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    // The state after each commit; the recovered state must be one from `acked` on.
    let mut states = vec![model.clone()];
    let mut acked = 0;
    'run: for i in 0..100u64 {
        let mut txn = db.begin();
        let mut next = model.clone();
        for _ in 0..8 {
            let k = format!("key{:03}", rng.below(200)).into_bytes();
            let v = format!("{i:04}").repeat(10 + rng.below(60) as usize).into_bytes();
            if txn.put(&k, &v).is_err() {
                break 'run;
            }
            next.insert(k, v);
        }
        match txn.commit() {
            Ok(()) => {
                model = next;
                states.push(model.clone());
                acked = states.len() - 1;
            }
            Err(_) => {
                // Not acknowledged, but its record may have reached the disk.
                states.push(next);
                break;
            }
        }
        if i % 10 == 9 && db.checkpoint().is_err() {
            break;
        }
    }
    let ops = disk.ops();
    let image = disk.crash();
    drop(db);
    let db = Db::open_with_storage(Arc::new(SimStorage::from_image(&image, 7)), opts)
        .map_err(|e| format!("crash after operation {crash_at:?}: reopen: {e}"))?;
    let got: Result<BTreeMap<_, _>, _> = db.begin().iter().collect();
    let got = got.map_err(|e| format!("crash after operation {crash_at:?}: reading the recovered state: {e}"))?;
    recovered_state_is_allowed(&format!("crash after operation {crash_at:?}"), &states, acked, &got)?;
    Ok(ops)
}

/// The bugs the exhaustive checkpoint sweep can plant.
#[derive(Clone, Copy, PartialEq, Eq)]
enum SweepBug {
    None,
    /// A page segment reused before the master record that frees it is durable.
    EarlyReuse,
    /// A milestone's master record names the new generation: recovery from it skips the
    /// ended generation's logs.
    MilestoneSkipsReplay,
    /// A checkpoint writes each key's first value in the ended generation's logs, not its
    /// last.
    FirstLoggedValue,
}

/// Power lost after every storage operation of a run with checkpoints in turn: each
/// recovers an acknowledged state.
fn checkpoint_sweep(planted: SweepBug) -> (u64, Vec<String>) {
    let ops = match checkpoint_run(None, planted) {
        Ok(ops) => ops,
        // A planted bug may break the state even without a crash (a segment reused within
        // a checkpoint, before its milestone's table is durable).
        Err(e) if planted != SweepBug::None => return (0, vec![e]),
        Err(e) => panic!("the run without a crash recovers: {e}"),
    };
    let failures = (1..=ops).filter_map(|k| checkpoint_run(Some(k), planted).err()).collect();
    (ops, failures)
}

#[test]
fn power_loss_at_every_operation_of_checkpoints() {
    let (ops, failures) = checkpoint_sweep(SweepBug::None);
    assert!(
        failures.is_empty(),
        "{} of {ops} crash points failed; first: {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
}

/// Runs the sweep with `planted` and asserts that some crash point caught it (`what`
/// names the bug in the messages).
fn sweep_catches(planted: SweepBug, what: &str) {
    let (ops, failures) = checkpoint_sweep(planted);
    println!("{} of {ops} crash points caught {what}; first: {:?}", failures.len(), failures.first());
    assert!(!failures.is_empty(), "{what} went unnoticed at all {ops} crash points");
}

/// The planted bug: the page store reuses a segment (cleaning's, or one an old table
/// leaves) before the master record that stops naming it is durable. The checker must
/// notice.
#[test]
fn planted_early_segment_reuse_is_caught() {
    sweep_catches(SweepBug::EarlyReuse, "reusing page segments before the checkpoint was durable");
}

/// The planted bug: a checkpoint's intermediate table (a milestone) is named with the new
/// generation, so recovery from it does not replay the ended generation's writes to the
/// pages not yet rewritten. The checker must notice.
#[test]
fn planted_milestone_without_replay_is_caught() {
    sweep_catches(SweepBug::MilestoneSkipsReplay, "a milestone naming the new generation");
}

/// The planted bug: a checkpoint takes each key's first logged value in the ended
/// generation, not its last. The checker must notice.
#[test]
fn planted_first_logged_value_is_caught() {
    sweep_catches(SweepBug::FirstLoggedValue, "checkpoints of each key's first logged value");
}

/// One thread, puts, inserts and deletes, some commits deferred: after the crash the
/// state must be exactly the model's state after some commit between the last
/// acknowledged one and the last one issued.
/// One serial crash iteration. Every third seed (and every one with `drop_tail`, the planted
/// bug that rewrites a lane's last block without its records) runs with buffered
/// durability: commits share blocks, each write rewriting the lane's last one; nothing is
/// acknowledged as durable, and the recovered state must still be the state after some
/// commit.
fn serial_iteration(seed: u64, drop_tail: bool) -> Result<(), String> {
    let mut opts = pick(seed);
    let buffered = drop_tail || seed % 3 == 2;
    if buffered {
        opts.log.durability = Durability::Buffered;
        opts.plants.repack_drops_tail = drop_tail;
    }
    let what = format!("seed {seed} ({}, {}, {:?})", opts.cc.name(), opts.log.name(), opts.log.durability);
    let mut rng = SimRng::new(seed ^ 0x1234);
    let disk = SimStorage::new(seed);
    let db = Db::open_with_storage(Arc::new(disk.clone()), opts.clone()).map_err(|e| format!("{what}: open: {e}"))?;
    disk.crash_after(1 + rng.below(150));
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut states = vec![model.clone()];
    let mut acked = 0usize;
    let mut tickets = Vec::new();
    'run: for i in 0..60u64 {
        let mut txn = db.begin();
        let mut next = model.clone();
        for _ in 0..1 + rng.below(4) {
            let k = format!("key{:02}", rng.below(20)).into_bytes();
            let r = match rng.below(3) {
                0 => txn.delete(&k).map(|_| {
                    next.remove(&k);
                }),
                _ => {
                    let v = format!("v{i}-{}", rng.below(1000)).repeat(1 + rng.below(40) as usize).into_bytes();
                    txn.put(&k, &v).map(|_| {
                        next.insert(k, v);
                    })
                }
            };
            if r.is_err() {
                break 'run;
            }
        }
        // Deferred (acknowledged once its ticket is waited on), synced, or with the
        // transaction's own durability below a sync (never acknowledged as durable).
        let choice = rng.below(6);
        let deferred = choice < 3;
        let unsynced = choice == 5;
        if unsynced {
            txn.set_durability(if rng.below(2) == 0 { Durability::None } else { Durability::Buffered });
        }
        let r = if deferred {
            txn.commit_deferred().map(|t| tickets.push((states.len(), t)))
        } else if unsynced {
            txn.commit()
        } else {
            txn.commit().map(|()| {
                tickets.clear();
            })
        };
        match r {
            Ok(()) => {
                model = next;
                states.push(model.clone());
                if !deferred && !unsynced {
                    acked = states.len() - 1;
                }
            }
            Err(e) => {
                // Not acknowledged, but its record may have reached the disk.
                if !e.is_retryable() {
                    states.push(next);
                }
                break;
            }
        }
        if tickets.len() >= 3 || rng.below(5) == 0 {
            for (at, t) in tickets.drain(..) {
                if t.wait().is_err() {
                    break 'run;
                }
                acked = acked.max(at);
            }
        }
    }
    drop(tickets);
    let image = disk.crash();
    drop(db);
    let db = Db::open_with_storage(Arc::new(SimStorage::from_image(&image, seed)), opts)
        .map_err(|e| format!("{what}: reopen: {e}"))?;
    recovered_state_is_allowed(&what, &states, if buffered { 0 } else { acked }, &dump(&db))
}

/// Whether `got`, a recovered state, is the state after some commit from the last
/// acknowledged one (`acked`) on; if not, the error names the closest state and how it
/// differs.
fn recovered_state_is_allowed(
    what: &str,
    states: &[BTreeMap<Vec<u8>, Vec<u8>>],
    acked: usize,
    got: &BTreeMap<Vec<u8>, Vec<u8>>,
) -> Result<(), String> {
    match states.iter().rposition(|s| s == got) {
        Some(j) if j >= acked => Ok(()),
        Some(j) => Err(format!("{what}: recovered the state after commit {j}, but {acked} were acknowledged")),
        None => {
            let best = states
                .iter()
                .enumerate()
                .min_by_key(|(_, s)| {
                    s.iter().filter(|(k, v)| got.get(*k) != Some(v)).count()
                        + got.iter().filter(|(k, v)| s.get(*k) != Some(v)).count()
                })
                .unwrap();
            let diff: Vec<_> = best
                .1
                .iter()
                .filter(|(k, v)| got.get(*k) != Some(v))
                .map(|(k, v)| {
                    (
                        String::from_utf8_lossy(k).to_string(),
                        v.len(),
                        got.get(k).map(|g| String::from_utf8_lossy(&g[..10.min(g.len())]).to_string()),
                    )
                })
                .collect();
            Err(format!("{what}: the recovered state is not the state after any commit ({} keys); closest {} of {} (acked {acked}): {diff:?}", got.len(), best.0, states.len()))
        }
    }
}

#[test]
fn power_loss_serial_model() {
    every_seed_passes(|s| serial_iteration(s, false));
}

/// The planted bug: buffered commits packed into a lane's last block are lost when it is
/// rewritten without them; the recovered state is then no state after a commit.
#[test]
fn power_loss_catches_a_dropped_tail() {
    let caught = (0..100).filter(|&s| serial_iteration(s, true).is_err()).count();
    assert!(caught > 0, "rewriting the last block without its records went unnoticed in 100 seeds");
}

/// A failed fsync poisons the database: that commit and every later one fail, and a
/// reopen recovers every commit acknowledged before.
#[test]
fn algorithm_3_needs_a_protocol_that_can_hold_locks() {
    let log = LogOptions { group: 4, ..LogOptions::default() };
    let e = Db::open_with_storage(Arc::new(SimStorage::new(1)), Options { cc: Cc::Silo, log, ..Options::default() });
    assert!(matches!(e, Err(Error::Config(_))));
}

#[test]
fn failed_fsync_poisons() {
    for log in log_variants() {
        let opts = Options { log, ..Options::default() };
        let disk = SimStorage::new(7);
        let db = Db::open_with_storage(Arc::new(disk.clone()), opts.clone()).unwrap();
        db.run(|t| t.put(b"a", b"1")).unwrap();
        disk.fail_sync_after(0);
        let e = db.run(|t| t.put(b"b", b"2")).unwrap_err();
        assert!(matches!(e, Error::Poisoned(_)), "{e:?}");
        let e = db.run(|t| t.put(b"c", b"3")).unwrap_err();
        assert!(matches!(e, Error::Poisoned(_)), "later commits fail too: {e:?}");
        assert!(db.close().is_err(), "close reports the poisoning");
        let image = disk.crash();
        let db = Db::open_with_storage(Arc::new(SimStorage::from_image(&image, 1)), opts).unwrap();
        let t = db.begin();
        assert_eq!(t.get(b"a").unwrap(), Some(b"1".to_vec()));
        assert_eq!(t.get(b"c").unwrap(), None);
    }
}

#[test]
fn second_open_is_refused() {
    let disk = SimStorage::new(1);
    let db = Db::open_with_storage(Arc::new(disk.clone()), Options::default()).unwrap();
    let e = Db::open_with_storage(Arc::new(disk.clone()), Options::default()).err().unwrap();
    assert!(matches!(e, Error::Locked(_)), "{e:?}");
    drop(db);
    Db::open_with_storage(Arc::new(disk), Options::default()).unwrap();
}

#[test]
fn durability_modes_recover_after_clean_close() {
    for durability in [Durability::Sync, Durability::Buffered, Durability::None] {
        for log in log_variants() {
            let opts = Options { log: LogOptions { durability, ..log }, ..Options::default() };
            let disk = SimStorage::new(3);
            let db = Db::open_with_storage(Arc::new(disk.clone()), opts.clone()).unwrap();
            for i in 0..200u32 {
                db.run(|t| t.put(i.to_be_bytes(), [7; 100])).unwrap();
            }
            db.run(|t| t.delete(5u32.to_be_bytes())).unwrap();
            db.close().unwrap();
            let db = Db::open_with_storage(Arc::new(disk), opts).unwrap();
            let got = dump(&db);
            assert_eq!(got.len(), 199);
            assert!(!got.contains_key(&5u32.to_be_bytes()[..]));
        }
    }
}

/// A transaction's own durability: commits kept in memory neither write nor sync, written
/// ones write without a sync, a synced one syncs; `Db::sync` and a synced commit make the
/// earlier ones durable (a power loss right after keeps them), and every level recovers
/// after a clean close.
#[test]
fn transaction_durability_costs_and_recovers() {
    let disk = SimStorage::new(5);
    let db = Db::open_with_storage(Arc::new(disk.clone()), Options::default()).unwrap();
    db.run(|t| t.put(b"first", b"")).unwrap(); // makes the lane
    let stats = || db.wal_stats().unwrap();
    let put_as = |level, i: u32| {
        db.run(|t| {
            t.set_durability(level);
            t.put(i.to_be_bytes(), [7; 100])
        })
        .unwrap()
    };
    let s0 = stats();
    (0..100).for_each(|i| put_as(Durability::None, i));
    let s1 = stats();
    assert_eq!((s1.syncs, s1.flushes), (s0.syncs, s0.flushes), "kept in memory: no write, no sync");
    (100..200).for_each(|i| put_as(Durability::Buffered, i));
    let s2 = stats();
    assert_eq!(s2.syncs, s1.syncs, "written without a sync");
    assert!(s2.flushes >= s1.flushes + 100);
    put_as(Durability::Sync, 200);
    assert!(stats().syncs > s2.syncs);
    // Power lost right after the synced commit: every earlier one is there.
    let db2 = Db::open_with_storage(Arc::new(SimStorage::from_image(&disk.crash(), 5)), Options::default()).unwrap();
    assert_eq!(dump(&db2).len(), 202);
    drop(db2);
    // `Db::sync` does the same for commits kept in memory.
    let disk = SimStorage::new(6);
    let db = Db::open_with_storage(Arc::new(disk.clone()), Options::default()).unwrap();
    for i in 0..50u32 {
        db.run(|t| {
            t.set_durability(Durability::None);
            t.put(i.to_be_bytes(), b"v")
        })
        .unwrap();
    }
    db.sync().unwrap();
    let db2 = Db::open_with_storage(Arc::new(SimStorage::from_image(&disk.crash(), 6)), Options::default()).unwrap();
    assert_eq!(dump(&db2).len(), 50);
}

/// Reruns one seed (`SEED=n`) until it fails: thread timing varies between runs.
#[test]
#[ignore]
fn rerun_seed() {
    let seed: u64 = std::env::var("SEED").unwrap().parse().unwrap();
    for _ in 0..2000 {
        chain_iteration(seed, Planted::None).unwrap();
        serial_iteration(seed, false).unwrap();
    }
}
