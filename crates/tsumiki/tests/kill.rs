//! Real process crashes: a writer process runs the chain workload on two threads and
//! prints each acknowledged commit; the test kills it with SIGKILL at a random moment,
//! reopens the database and checks it against what was acknowledged.
//!
//! `TSUMIKI_KILL_ITERS` sets the number of kills (CI: 200).

#[path = "common/chains.rs"]
mod chains;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tsumiki::plants::Plants;
use tsumiki::storage::SimRng;
use tsumiki::{Cc, Db, Durability, LogMode, LogOptions, Options, Release, StoreOptions};

const SLOTS: u64 = 8;

/// How a child writes: the durability, and the planted bugs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Child {
    /// Synced at commit.
    Sync,
    /// Written to the OS at commit (survives a process crash): commits share a lane's
    /// last block, which each write rewrites.
    Buffered,
    /// The planted bug: commits acknowledged before their records are written.
    Lazy,
    /// The planted bug: a lane's last block is rewritten without the records it held.
    DropTail,
}

impl Child {
    fn name(self) -> &'static str {
        match self {
            Child::Sync => "sync",
            Child::Buffered => "buffered",
            Child::Lazy => "lazy",
            Child::DropTail => "drop-tail",
        }
    }

    fn parse(s: &str) -> Child {
        [Child::Sync, Child::Buffered, Child::Lazy, Child::DropTail].into_iter().find(|c| c.name() == s).unwrap()
    }
}

fn options(variant: u64, child: Child) -> Options {
    let cc = Cc::ALL[(variant % Cc::ALL.len() as u64) as usize];
    let v = variant / Cc::ALL.len() as u64;
    let mode = if v.is_multiple_of(2) { LogMode::PWal } else { LogMode::SWal };
    let release = if (v / 2).is_multiple_of(2) { Release::Nlr } else { Release::Elr };
    let group = if (v / 4).is_multiple_of(2) { 1 } else { 8 };
    // P-WAL with NLR group commit (Algorithm 3) holds locks across commits: TicToc, 2PL.
    let holds = mode == LogMode::PWal && release == Release::Nlr && group > 1;
    let cc = if holds && matches!(cc, Cc::Silo | Cc::MvccSi(_)) { Cc::TicToc } else { cc };
    let durability = match child {
        Child::Sync => Durability::Sync,
        Child::Buffered | Child::DropTail => Durability::Buffered,
        Child::Lazy => Durability::None,
    };
    // Every other variant takes a checkpoint every 64 KiB of log, so kills
    // land inside checkpoints too.
    let checkpoint_bytes = if variant.is_multiple_of(2) { 64 << 10 } else { 64 << 20 };
    let log = LogOptions { mode, release, group, durability, segment_size: 1 << 20, ..LogOptions::default() };
    let store = StoreOptions { checkpoint_bytes, ..StoreOptions::default() };
    let plants = Plants { repack_drops_tail: child == Child::DropTail, ..Plants::NONE };
    Options { cc, log, store, plants, ..Options::default() }
}

/// The child: runs until killed. Does nothing unless started by `sigkill_recovery`.
#[test]
fn kill_child_entry() {
    let Ok(dir) = std::env::var("TSUMIKI_KILL_CHILD") else { return };
    let variant: u64 = std::env::var("TSUMIKI_KILL_VARIANT").unwrap().parse().unwrap();
    let base: u64 = std::env::var("TSUMIKI_KILL_BASE").unwrap().parse().unwrap();
    let child = Child::parse(&std::env::var("TSUMIKI_KILL_MODE").unwrap());
    let db = Db::create(&dir, options(variant, child)).expect("child open");
    let out = Mutex::new(std::io::stdout());
    {
        use std::io::Write;
        let mut o = out.lock();
        writeln!(o, "ready").unwrap();
        o.flush().unwrap();
    }
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let (db, out) = (&db, &out);
            s.spawn(move || {
                use std::io::Write;
                let mut rng = SimRng::new(base + t);
                for i in 0.. {
                    let id = base + t * 100_000 + i + 1;
                    loop {
                        match chains::chain_txn(db, id, &mut rng, SLOTS) {
                            Ok(()) => break,
                            Err(e) if e.is_retryable() => std::thread::yield_now(),
                            Err(e) => panic!("child: {e}"),
                        }
                    }
                    let mut o = out.lock();
                    writeln!(o, "ack {id}").unwrap();
                    o.flush().unwrap();
                }
            });
        }
    });
}

#[test]
fn sigkill_recovery() {
    let iters: u64 = std::env::var("TSUMIKI_KILL_ITERS").ok().and_then(|v| v.parse().ok()).unwrap_or(20);
    if let Err(e) = run_kills(iters) {
        panic!("{e}");
    }
}

/// The planted bug: a lane's partly filled last block rewritten without its records (the
/// buffered commits packed into it are lost).
#[test]
fn sigkill_catches_a_dropped_tail() {
    let e = run_kills_as(30, |_| Child::DropTail)
        .expect_err("rewriting the last block without its records went unnoticed in 30 kills");
    // A lost record also shows as a count that disagrees with the scan (the later
    // records' inserts and removals were marked against the state it left).
    assert!(e.contains("lost") || e.contains("reopen") || e.contains("record count"), "{e}");
}

/// The planted bug: acknowledging commits before their records are written. The same
/// check must report lost commits.
#[test]
fn sigkill_catches_acks_before_write() {
    let e = run_kills_as(30, |_| Child::Lazy).expect_err("acknowledging before writing went unnoticed in 30 kills");
    assert!(e.contains("lost"), "{e}");
}

/// Kills with every log variant in turn, each synced at commit and then buffered.
fn run_kills(iters: u64) -> Result<(), String> {
    run_kills_as(iters, |iter| if iter % 2 == 0 { Child::Sync } else { Child::Buffered })
}

fn run_kills_as(iters: u64, mode: impl Fn(u64) -> Child) -> Result<(), String> {
    let dir = std::env::temp_dir().join(format!("tsumiki-kill-{}-{}", std::process::id(), mode(0).name()));
    let _ = std::fs::remove_dir_all(&dir);
    let exe = std::env::current_exe().unwrap();
    let mut rng = SimRng::new(42);
    let mut acked_all: Vec<u64> = Vec::new();
    let mut killed_mid_run = 0;
    for iter in 0..iters {
        let variant = (iter / 2) % 40;
        let base = (iter + 1) * 1_000_000;
        let child_mode = mode(iter);
        let mut child = Command::new(&exe)
            .args(["kill_child_entry", "--exact", "--nocapture", "--test-threads=1"])
            .env("TSUMIKI_KILL_CHILD", &dir)
            .env("TSUMIKI_KILL_VARIANT", variant.to_string())
            .env("TSUMIKI_KILL_BASE", base.to_string())
            .env("TSUMIKI_KILL_MODE", child_mode.name())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let acked = Arc::new(Mutex::new(Vec::new()));
        let (ready_tx, ready) = std::sync::mpsc::channel();
        let (first_ack_tx, first_ack) = std::sync::mpsc::channel();
        let reader = {
            let stdout = child.stdout.take().unwrap();
            let acked = acked.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if line.ends_with("ready") {
                        let _ = ready_tx.send(());
                    } else if let Some(id) = line.strip_prefix("ack ") {
                        acked.lock().push(id.parse::<u64>().unwrap());
                        let _ = first_ack_tx.send(());
                    }
                }
            })
        };
        ready.recv_timeout(Duration::from_secs(30)).expect("the child did not start");
        // Every other kill is timed from the first acknowledged commit rather than from
        // the start, so that at least half land mid-run however slow a loaded machine
        // makes the child's start (the rest may land before any commit: also a case).
        if iter % 2 == 1 {
            first_ack.recv_timeout(Duration::from_secs(30)).expect("the child acknowledged nothing");
        }
        std::thread::sleep(Duration::from_micros(1000 + rng.below(40_000)));
        child.kill().unwrap();
        child.wait().unwrap();
        reader.join().unwrap();
        let acked = std::mem::take(&mut *acked.lock());
        if !acked.is_empty() {
            killed_mid_run += 1;
        }
        acked_all.extend(acked);
        let o = options(variant, Child::Sync);
        let db = Db::create(&dir, o.clone()).map_err(|e| format!("iteration {iter}: reopen: {e}"))?;
        let r = chains::check_chains(&db, &acked_all, SLOTS);
        drop(db);
        if let Err(e) = r {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(format!("iteration {iter} ({} {}, {}): {e}", o.cc.name(), o.log.name(), child_mode.name()));
        }
    }
    assert!(killed_mid_run >= iters / 2, "half the kills must land after some commits ({killed_mid_run} of {iters})");
    std::fs::remove_dir_all(&dir).unwrap();
    Ok(())
}
