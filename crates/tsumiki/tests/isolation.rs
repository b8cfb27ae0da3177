//! Randomized concurrent histories checked by a dependency-graph checker (Adya's DSG).
//!
//! Every write stores the writing transaction's unique id and is preceded by a read of the
//! same key in the same transaction, so each key's versions form a chain that the checker
//! can rebuild exactly: the version order is known, and every read names the version it
//! saw. Keys come in three kinds so that absent reads are unambiguous too:
//! - plain keys: present from the start, read-modify-written;
//! - insert keys: absent at the start, inserted at most once, never deleted;
//! - delete keys: present at the start, updated, deleted at most once, never re-inserted.
//!
//! Scans (and retains, which delete some of the delete keys they read) read every key of
//! their range: a key they did not return was read absent. The
//! checker builds write-write, write-read and read-write (anti-dependency) edges between
//! committed transactions and reports a cycle (serializability), or for snapshot isolation
//! a cycle without two consecutive anti-dependencies. It also reports reads of versions no
//! committed transaction wrote (aborted or intermediate reads) and two committed writers of
//! the same version (lost updates).

use std::collections::HashMap;
use std::sync::Barrier;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use tsumiki::cc::Conflict;
use tsumiki::{Cc, Db, Error, Gc, Options};

const PLAIN: u64 = 8;
const INSERT: u64 = 8;
const DELETE: u64 = 8;
const KEYS: u64 = PLAIN + INSERT + DELETE;

/// Version ids: 0 is the initial state (present for plain and delete keys, absent for
/// insert keys); any other is the id of the committed transaction that wrote it (for a
/// delete key that was deleted, the deleter's id names the absent version).
type Version = u64;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum KeyKind {
    Plain,
    Insert,
    Delete,
}

fn kind(key: u64) -> KeyKind {
    if key < PLAIN {
        KeyKind::Plain
    } else if key < PLAIN + INSERT {
        KeyKind::Insert
    } else {
        KeyKind::Delete
    }
}

fn kb(key: u64) -> [u8; 8] {
    key.to_be_bytes()
}

#[derive(Default, Debug)]
struct TxnRecord {
    id: u64,
    reads: Vec<(u64, Version)>,
    /// (key, version it replaced, whether the new version is a deletion)
    writes: Vec<(u64, Version, bool)>,
    /// A snapshot's `len()` and the keys a full scan of it found after (they must agree:
    /// the scan's reads are checked against the serial order with the others).
    count: Option<(u64, u64)>,
}

/// What a transaction observed of `key`: the version, from a read's result.
/// What a read that no state can explain (a plain key read absent) is recorded as: a version
/// no transaction writes, which the checker reports like any read of an uncommitted
/// version. A planted bug shows so (a panic in the worker made its test fail instead).
const NEVER_WRITTEN: Version = u64::MAX - 1;

fn observed(key: u64, value: Option<Vec<u8>>, deleted_by: &HashMap<u64, u64>) -> Result<Version, String> {
    match value {
        Some(v) => Ok(u64::from_be_bytes(v.try_into().map_err(|_| "bad value".to_string())?)),
        None => match kind(key) {
            KeyKind::Insert => Ok(0),
            // Absent delete key: the version its deleter wrote. The deleter is only known
            // after the run: mark it, resolved by the checker.
            KeyKind::Delete => Ok(*deleted_by.get(&key).unwrap_or(&u64::MAX)),
            KeyKind::Plain => Err(format!("plain key {key} read absent")),
        },
    }
}

fn run_txn(txn: &mut tsumiki::Txn<'_>, rng: &mut StdRng, rec: &mut TxnRecord) -> Result<(), Error> {
    let me = kb(rec.id);
    let ops = rng.random_range(2..=6);
    let none = HashMap::new();
    let mut written = Vec::new();
    for _ in 0..ops {
        let key = rng.random_range(0..KEYS);
        if written.contains(&key) {
            continue;
        }
        match rng.random_range(0..10) {
            0..=3 => {
                let v = txn.get(kb(key))?;
                rec.reads.push((key, observed(key, v, &none).unwrap_or(NEVER_WRITTEN)));
            }
            4..=7 => {
                // A write of the key's kind, after reading it.
                let v = txn.get(kb(key))?;
                let seen = observed(key, v.clone(), &none).unwrap_or(NEVER_WRITTEN);
                rec.reads.push((key, seen));
                match (kind(key), v.is_some()) {
                    (KeyKind::Delete, true) if rng.random_bool(0.3) => {
                        if !txn.delete(kb(key))? {
                            // Deleted meanwhile by a committed transaction: the read above
                            // is stale and validation will fail; give up this attempt.
                            return Err(Error::Conflict(Conflict::ReadValidation));
                        }
                        rec.writes.push((key, seen, true));
                        written.push(key);
                    }
                    (KeyKind::Plain | KeyKind::Delete | KeyKind::Insert, true) => {
                        txn.put(kb(key), me)?;
                        rec.writes.push((key, seen, false));
                        written.push(key);
                    }
                    (KeyKind::Insert, false) => {
                        if !txn.insert(kb(key), me)? {
                            return Err(Error::Conflict(Conflict::ReadValidation));
                        }
                        rec.writes.push((key, seen, false));
                        written.push(key);
                    }
                    _ => {}
                }
            }
            8 if rng.random_bool(0.4) => {
                // A retain: a scan of the range that deletes, through what it read, the
                // present delete keys a random mask names (and never its own writes).
                let a = rng.random_range(0..KEYS);
                let b = rng.random_range(a + 1..=KEYS);
                let mask: u64 = rng.random();
                let own = written.clone();
                let doomed = |key: u64| kind(key) == KeyKind::Delete && mask & (1 << key) != 0 && !own.contains(&key);
                let mut seen: HashMap<u64, Vec<u8>> = HashMap::new();
                let removed = txn.retain_in(&kb(a)..&kb(b), |k, v| {
                    let key = u64::from_be_bytes(k.try_into().unwrap());
                    seen.insert(key, v.to_vec());
                    !doomed(key)
                })?;
                let mut deleted = 0;
                for key in a..b {
                    let v = seen.remove(&key);
                    if written.contains(&key) {
                        continue;
                    }
                    let present = v.is_some();
                    let version = observed(key, v, &none).unwrap_or(NEVER_WRITTEN);
                    rec.reads.push((key, version));
                    if present && doomed(key) {
                        rec.writes.push((key, version, true));
                        written.push(key);
                        deleted += 1;
                    }
                }
                assert!(seen.is_empty(), "retain met keys outside its range: {seen:?}");
                if removed != deleted {
                    // A record read present was deleted meanwhile by a committed
                    // transaction: the read is stale and validation will fail.
                    return Err(Error::Conflict(Conflict::ReadValidation));
                }
            }
            _ => {
                let a = rng.random_range(0..KEYS);
                let b = rng.random_range(a + 1..=KEYS);
                let rows: Vec<(Vec<u8>, Vec<u8>)> = txn.range(&kb(a)..&kb(b)).collect::<Result<_, _>>()?;
                let mut got: HashMap<u64, Vec<u8>> = HashMap::new();
                for (k, v) in rows {
                    got.insert(u64::from_be_bytes(k.try_into().unwrap()), v);
                }
                for key in a..b {
                    let v = got.remove(&key);
                    if written.contains(&key) {
                        // Its own write; not a read of anyone else's version.
                        continue;
                    }
                    rec.reads.push((key, observed(key, v, &none).unwrap_or(NEVER_WRITTEN)));
                }
                assert!(got.is_empty(), "scan returned keys outside its range: {got:?}");
            }
        }
    }
    Ok(())
}

/// A snapshot read transaction's reads (gets and scans; see [`run_txn`]): recorded as a
/// transaction that writes nothing, so the checker places it in the serial order like any
/// other, and a snapshot that saw part of a writer's effects closes a cycle through it.
fn run_snapshot(snap: &tsumiki::ReadTxn<'_>, rng: &mut StdRng, rec: &mut TxnRecord) -> Result<(), Error> {
    let none = HashMap::new();
    for _ in 0..rng.random_range(2..=8) {
        if rng.random_bool(0.6) {
            let key = rng.random_range(0..KEYS);
            let v = snap.get(kb(key))?;
            rec.reads.push((key, observed(key, v, &none).unwrap_or(NEVER_WRITTEN)));
        } else {
            let a = rng.random_range(0..KEYS);
            let b = rng.random_range(a + 1..=KEYS);
            let mut got: HashMap<u64, Vec<u8>> = HashMap::new();
            for row in snap.range(&kb(a)..&kb(b)) {
                let (k, v) = row?;
                got.insert(u64::from_be_bytes(k.try_into().unwrap()), v);
            }
            for key in a..b {
                rec.reads.push((key, observed(key, got.remove(&key), &none).unwrap_or(NEVER_WRITTEN)));
            }
            assert!(got.is_empty(), "scan returned keys outside its range: {got:?}");
        }
        if rng.random_bool(0.3) {
            // Writers commit between the snapshot's reads.
            std::thread::yield_now();
        }
    }
    if rng.random_bool(0.5) {
        // The count, after the writers had a chance to insert and delete, then a full scan.
        std::thread::yield_now();
        let n = snap.len()?;
        let mut got: HashMap<u64, Vec<u8>> = HashMap::new();
        for row in snap.iter() {
            let (k, v) = row?;
            got.insert(u64::from_be_bytes(k.try_into().unwrap()), v);
        }
        rec.count = Some((n, got.len() as u64));
        for key in 0..KEYS {
            rec.reads.push((key, observed(key, got.remove(&key), &none).unwrap_or(NEVER_WRITTEN)));
        }
    }
    Ok(())
}

/// Whether a history's workers also run snapshot read transactions ([`tsumiki::Db::begin_read`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Snaps {
    None,
    /// A third of the transactions are snapshots; `newest` plants a bug: snapshot reads
    /// take each record's newest version, whatever its stamp; `count_newest` another: a
    /// snapshot's count includes the commits after it.
    Some {
        newest: bool,
        count_newest: bool,
    },
}

/// Where a history runs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Store {
    /// An in-memory database.
    Memory,
    /// A database with files and a cache of one byte: every clean key range leaves memory
    /// at the end of each transaction, under the others' feet (checkpoints every few KiB
    /// of log make ranges clean). `unmarked` plants a bug: evicted records are not
    /// marked, so a transaction that read one still validates it.
    TinyCache { unmarked: bool },
    /// A tiny cache where each lookup that finds a key missing waits before it checks the
    /// key's range, so that ranges leave and come back in between. `unchecked` plants a
    /// bug: the lookup is trusted without comparing the load count.
    PausedMisses { unchecked: bool },
}

/// Where a history with files keeps them: in tmpfs (`/dev/shm`) where there is one. These
/// histories are about isolation, not durability, and on a disk they mostly waited: the
/// checkpoints every few KiB of log each wait for fsyncs, and commits wait for the
/// checkpoints (the log's throttle). A tiny-cache history took about 1.9 s there, with a
/// tenth of it on a CPU; in tmpfs the same code runs (a file system without direct I/O is
/// one the store already handles) and the syncs cost nothing.
fn scratch_dir() -> tempfile::TempDir {
    let shm = std::path::Path::new("/dev/shm");
    shm.is_dir().then(|| tempfile::tempdir_in(shm).ok()).flatten().unwrap_or_else(|| tempfile::tempdir().unwrap())
}

/// Runs one history; returns the committed transactions.
fn history(cc: Cc, planted: bool, threads: usize, txns: usize, seed: u64) -> Vec<TxnRecord> {
    history_in(Store::Memory, cc, planted, threads, txns, seed)
}

fn history_in(store: Store, cc: Cc, planted: bool, threads: usize, txns: usize, seed: u64) -> Vec<TxnRecord> {
    history_with(store, cc, planted, Snaps::None, threads, txns, seed)
}

fn history_with(
    store: Store,
    cc: Cc,
    planted: bool,
    snaps: Snaps,
    threads: usize,
    txns: usize,
    seed: u64,
) -> Vec<TxnRecord> {
    let mut opts = Options::with_cc(cc);
    opts.plants.skip_validation = planted;
    opts.plants.snapshot_reads_newest = snaps == Snaps::Some { newest: true, count_newest: false };
    opts.plants.snapshot_counts_newest = snaps == Snaps::Some { newest: false, count_newest: true };
    let dir = (store != Store::Memory).then(scratch_dir);
    let dir = || dir.as_ref().expect("a store with files has a directory").path();
    let pause = matches!(store, Store::TinyCache { .. } | Store::PausedMisses { .. });
    let db = match store {
        Store::Memory => Db::open_in_memory(opts).unwrap(),
        Store::TinyCache { unmarked } => {
            opts.cache_bytes = 1;
            opts.log.durability = tsumiki::Durability::Buffered;
            // The planted bug is met only when a range leaves between a read and its
            // validation, and a range leaves only while it is clean: checkpoints every KiB
            // make that about ten times as common as at 8 KiB (4 and 6 of 200 histories
            // under TicToc and Silo, against 1 and 0).
            opts.store.checkpoint_bytes = if unmarked { 1 << 10 } else { 8 << 10 };
            opts.plants.evict_unmarked = unmarked;
            Db::create(dir(), opts).unwrap()
        }
        Store::PausedMisses { unchecked } => {
            opts.cache_bytes = 1;
            opts.log.durability = tsumiki::Durability::Buffered;
            opts.store.checkpoint_bytes = 8 << 10;
            opts.plants.lookup_pause = true;
            opts.plants.load_count_unchecked = unchecked;
            Db::create(dir(), opts).unwrap()
        }
    };
    db.run(|t| {
        for key in 0..KEYS {
            if kind(key) != KeyKind::Insert {
                t.put(kb(key), 0u64.to_be_bytes())?;
            }
        }
        Ok(())
    })
    .unwrap();
    let barrier = Barrier::new(threads);
    let mut committed = Vec::new();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let db = &db;
                let barrier = &barrier;
                s.spawn(move || {
                    let mut rng = StdRng::seed_from_u64(seed * 1000 + t as u64);
                    let mut out = Vec::new();
                    barrier.wait();
                    let mut seq = 0u64;
                    for _ in 0..txns {
                        if snaps != Snaps::None && rng.random_ratio(1, 3) {
                            seq += 1;
                            let mut rec = TxnRecord { id: ((t as u64 + 1) << 32) | seq, ..Default::default() };
                            let snap = db.begin_read();
                            match run_snapshot(&snap, &mut rng, &mut rec) {
                                Ok(()) => out.push(rec),
                                // A load that failed under the tiny cache: a retryable error,
                                // not an abort of the snapshot's reads.
                                Err(e) if e.is_retryable() => {}
                                Err(e) => panic!("{e}"),
                            }
                            continue;
                        }
                        // A fresh id per attempt: an aborted attempt's values must never be seen.
                        loop {
                            seq += 1;
                            let mut rec = TxnRecord { id: ((t as u64 + 1) << 32) | seq, ..Default::default() };
                            let mut txn = db.begin();
                            let ran = run_txn(&mut txn, &mut rng, &mut rec);
                            if pause && ran.is_ok() {
                                // Think time between the reads and the commit's validation:
                                // other transactions end meanwhile, and each ending one
                                // evicts, so ranges this one read leave and load again.
                                std::thread::sleep(std::time::Duration::from_micros(200));
                            }
                            match ran.and_then(|()| txn.commit()) {
                                Ok(()) => {
                                    out.push(rec);
                                    break;
                                }
                                Err(e) if e.is_retryable() => continue,
                                Err(e) => panic!("{e}"),
                            }
                        }
                    }
                    out
                })
            })
            .collect();
        for h in handles {
            committed.extend(h.join().unwrap());
        }
    });
    committed
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Edge {
    Ww,
    Wr,
    Rw,
}

/// Checks a history; `Err` names the first anomaly found.
fn check(txns: &[TxnRecord], snapshot_isolation: bool) -> Result<(), String> {
    // Node 0 is the initial transaction.
    let mut node: HashMap<u64, usize> = HashMap::new();
    node.insert(0, 0);
    for (i, t) in txns.iter().enumerate() {
        node.insert(t.id, i + 1);
    }
    if let Some(t) = txns.iter().find(|t| t.count.is_some_and(|(n, found)| n != found)) {
        let (n, found) = t.count.unwrap();
        return Err(format!("snapshot {:#x} counted {n} keys, and its scan found {found}", t.id));
    }
    let n = txns.len() + 1;
    // Version chains: next[(key, version)] = the writer that replaced it.
    let mut next: HashMap<(u64, Version), u64> = HashMap::new();
    let mut deleted_by: HashMap<u64, u64> = HashMap::new();
    for t in txns {
        for &(key, prev, del) in &t.writes {
            if let Some(other) = next.insert((key, prev), t.id) {
                return Err(format!(
                    "lost update: {other:#x} and {:#x} both replaced version {prev:#x} of key {key}",
                    t.id
                ));
            }
            if del {
                deleted_by.insert(key, t.id);
            }
        }
    }
    let mut adj: Vec<Vec<(usize, Edge, u64)>> = vec![Vec::new(); n];
    for t in txns {
        let me = node[&t.id];
        for &(key, prev, _) in &t.writes {
            let Some(&w) = node.get(&prev) else {
                return Err(format!(
                    "{:#x} overwrote version {prev:#x} of key {key}, which no committed transaction wrote",
                    t.id
                ));
            };
            adj[w].push((me, Edge::Ww, key));
        }
        for &(key, v) in &t.reads {
            // An absent read of a delete key is the deleter's version.
            let v = if v == u64::MAX {
                *deleted_by.get(&key).ok_or(format!("key {key} read absent, never deleted"))?
            } else {
                v
            };
            if t.writes.iter().any(|&(k, _, _)| k == key) && next.get(&(key, v)) == Some(&t.id) {
                // Read the version it then replaced itself: covered by the ww edge.
            }
            let Some(&w) = node.get(&v) else {
                return Err(format!(
                    "{:#x} read version {v:#x} of key {key}, which no committed transaction wrote",
                    t.id
                ));
            };
            if w != me {
                adj[w].push((me, Edge::Wr, key));
            }
            if let Some(&succ) = next.get(&(key, v)) {
                let s = node[&succ];
                if s != me {
                    adj[me].push((s, Edge::Rw, key));
                }
            }
        }
    }
    // Cycle search. For SI, on the graph of (node, "arrived by rw") states where an rw edge
    // may not follow an rw edge: its cycles are exactly the cycles with no two consecutive
    // anti-dependencies, which SI forbids.
    let states = if snapshot_isolation { 2 } else { 1 };
    let idx = |v: usize, s: usize| v * states + s;
    let mut color = vec![0u8; n * states];
    for start in 0..n * states {
        if color[start] != 0 {
            continue;
        }
        let mut stack = vec![(start, 0usize)];
        color[start] = 1;
        while let Some(&mut (u, ref mut i)) = stack.last_mut() {
            let (v, s) = (u / states, u % states);
            if *i < adj[v].len() {
                let (w, e, _) = adj[v][*i];
                *i += 1;
                let to = if snapshot_isolation {
                    match (e, s) {
                        (Edge::Rw, 1) => continue,
                        (Edge::Rw, _) => idx(w, 1),
                        _ => idx(w, 0),
                    }
                } else {
                    idx(w, 0)
                };
                match color[to] {
                    0 => {
                        color[to] = 1;
                        stack.push((to, 0));
                    }
                    1 => {
                        // The cycle: from `to` along the stack, then the closing edge.
                        let at = stack.iter().position(|&(x, _)| x == to).unwrap_or(0);
                        let mut path = Vec::new();
                        for win in stack[at..].iter().map(|&(x, _)| x / states).collect::<Vec<_>>().windows(2) {
                            let (a, b) = (win[0], win[1]);
                            let (_, e, k) = adj[a].iter().find(|&&(x, _, _)| x == b).copied().unwrap();
                            path.push(format!("{:#x} -{e:?}({k})-> ", node_id(txns, a)));
                        }
                        path.push(format!("{:#x} -{e:?}-> {:#x}", node_id(txns, v), node_id(txns, w)));
                        let detail: Vec<String> = stack[at..]
                            .iter()
                            .map(|&(x, _)| x / states)
                            .filter(|&x| x > 0)
                            .map(|x| format!("{:#x}: {:?}", txns[x - 1].id, txns[x - 1]))
                            .collect();
                        return Err(format!("dependency cycle: {}\n{}", path.concat(), detail.join("\n")));
                    }
                    _ => {}
                }
            } else {
                color[u] = 2;
                stack.pop();
            }
        }
    }
    Ok(())
}

fn node_id(txns: &[TxnRecord], i: usize) -> u64 {
    if i == 0 {
        0
    } else {
        txns[i - 1].id
    }
}

/// Histories per protocol (`TSUMIKI_HISTORIES` overrides, for longer runs by hand).
fn histories() -> u64 {
    std::env::var("TSUMIKI_HISTORIES").ok().and_then(|v| v.parse().ok()).unwrap_or(100)
}

fn serializable_histories(cc: Cc) {
    for seed in 0..histories() {
        let h = history(cc, false, 4, 40, seed);
        if let Err(e) = check(&h, false) {
            panic!("{}: history {seed}: {e}", cc.name());
        }
    }
}

#[test]
fn tictoc_histories_are_serializable() {
    serializable_histories(Cc::TicToc);
}

#[test]
fn silo_histories_are_serializable() {
    serializable_histories(Cc::Silo);
}

#[test]
fn twopl_nowait_histories_are_serializable() {
    serializable_histories(Cc::TwoPl(tsumiki::LockWait::NoWait));
}

#[test]
fn twopl_waitdie_histories_are_serializable() {
    serializable_histories(Cc::TwoPl(tsumiki::LockWait::WaitDie));
}

fn si_histories(gc: Gc) {
    for seed in 0..histories() {
        let h = history(Cc::MvccSi(gc), false, 4, 40, seed);
        if let Err(e) = check(&h, true) {
            panic!("mvcc-si {gc:?}: history {seed}: {e}");
        }
    }
}

/// Every protocol under a cache that evicts all it can after each transaction: records
/// leave while others hold them, and load back at the watermark stamp.
#[test]
fn histories_stay_isolated_under_a_tiny_cache() {
    isolated_in(Store::TinyCache { unmarked: false });
}

/// A quarter of the usual histories per protocol in `store`, each checked for its
/// isolation level. `TSUMIKI_TINY_CC=mvcc-si` (a protocol's name) runs one protocol, for
/// hunting by hand.
fn isolated_in(store: Store) {
    let only = std::env::var("TSUMIKI_TINY_CC").ok();
    for cc in Cc::ALL.into_iter().filter(|c| only.as_deref().is_none_or(|o| o == c.name())) {
        let si = matches!(cc, Cc::MvccSi(_));
        for seed in 0..histories() / 4 {
            if let Err(e) = check(&history_in(store, cc, false, 4, 40, seed), si) {
                panic!("{} in {store:?}: history {seed}: {e}", cc.name());
            }
        }
    }
}

/// The planted bug: evicted records are not marked, so a transaction that read one can
/// commit after the key was rewritten in its reloaded record (the optimistic protocols:
/// their validation is what the mark fails).
#[test]
fn planted_unmarked_eviction_is_caught() {
    for cc in [Cc::TicToc, Cc::Silo] {
        // The eviction must land between a read and its validation, and the key be
        // rewritten meanwhile: the think time before each commit makes that possible
        // (without it, once loads stopped waiting for checkpoints, 10,000 histories in CI
        // caught nothing). It is still rare, because a range leaves only while no write
        // since the last checkpoint dirtied it: at the other tests' 8 KiB checkpoints about
        // one history in 200 to 400, and 1,000 without a catch failed CI once. With the
        // plant's 1 KiB checkpoints (see `history_in`) about one in 40; up to fifty times
        // the usual count, stopping at the first catch. `tests/hermitage.rs` meets the same
        // bug in every run, with every range evicted after each step.
        let tries = histories() * 50;
        let caught = (0..tries).any(|seed| {
            check(&history_in(Store::TinyCache { unmarked: true }, cc, false, 4, 40, seed), false).is_err()
        });
        assert!(caught, "{}: unmarked evictions went unnoticed in {tries} histories", cc.name());
    }
}

/// Lookups that find a key missing while ranges leave and come back: a key whose range
/// left after the lookup passed it and came back before the lookup checked the range was
/// read absent (MVCC-SI, whose absent reads have no follower to re-check, met it once in
/// ~1,000 tiny-cache histories). The load count makes such a lookup look again; the paused
/// lookups make the race common.
#[test]
fn paused_misses_stay_isolated() {
    isolated_in(Store::PausedMisses { unchecked: false });
}

/// The planted bug: the load count is not compared, and MVCC-SI reads keys absent that were
/// only out of memory. The race needs a range to leave and come back within a paused
/// lookup: under CI's load (the suite's tests side by side on 2 cores, a debug build) 200
/// histories once missed it, so this tries up to 50 per configured history (it stops at
/// the first caught).
#[test]
fn planted_unchecked_load_count_is_caught() {
    let cc = Cc::MvccSi(Gc::EpoR);
    let tries = histories() * 50;
    let caught = (0..tries)
        .any(|seed| check(&history_in(Store::PausedMisses { unchecked: true }, cc, false, 4, 40, seed), true).is_err());
    assert!(caught, "an unchecked load count went unnoticed in {tries} histories");
}

/// Snapshot read transactions beside the writers, under every protocol, in memory and
/// under a one-byte cache: each snapshot must fit in the serial order of the committed
/// transactions (it saw a prefix of it), which the dependency graph shows (a snapshot that
/// saw part of a writer's effects closes a cycle through it).
#[test]
fn snapshot_reads_fit_the_serial_order() {
    for cc in Cc::ALL {
        let si = matches!(cc, Cc::MvccSi(_));
        for store in [Store::Memory, Store::TinyCache { unmarked: false }] {
            // A quarter of the histories in memory and a tenth under the tiny cache (CI:
            // 250 and 100 per protocol); `TSUMIKI_SNAPSHOT_HISTORIES` and
            // `TSUMIKI_TINY_HISTORIES` set them (the closing note of issue 36: 1,000 each).
            let env = |name: &str| std::env::var(name).ok().and_then(|v| v.parse().ok());
            let n = if store == Store::Memory {
                env("TSUMIKI_SNAPSHOT_HISTORIES").unwrap_or(histories() / 4)
            } else {
                env("TSUMIKI_TINY_HISTORIES").unwrap_or(histories() / 10)
            };
            for seed in 0..n {
                let h = history_with(store, cc, false, Snaps::Some { newest: false, count_newest: false }, 4, 40, seed);
                if let Err(e) = check(&h, si) {
                    panic!("{} in {store:?} with snapshots: history {seed}: {e}", cc.name());
                }
            }
        }
    }
}

/// The planted bug: snapshot reads that take the newest version of each record are caught
/// (TicToc, Silo and 2PL: MVCC-SI's snapshots are its own transactions).
#[test]
fn planted_snapshot_reading_newest_is_caught() {
    // Every history catches it (1,000 of 1,000 per protocol by hand): a hundred suffice.
    planted_snapshots_caught(Snaps::Some { newest: true, count_newest: false }, "reading the newest versions");
}

/// The planted bug: a snapshot whose count includes the commits after it is caught (its
/// count disagrees with its own scan).
#[test]
fn planted_snapshot_counting_newest_is_caught() {
    planted_snapshots_caught(Snaps::Some { newest: false, count_newest: true }, "counting newer commits");
}

/// Runs a hundred histories with the planted snapshot bug `snaps` per protocol that has
/// snapshots of its own; some must fail the check.
fn planted_snapshots_caught(snaps: Snaps, what: &str) {
    let n = histories().min(100);
    for cc in [Cc::TicToc, Cc::Silo, Cc::TwoPl(tsumiki::LockWait::NoWait)] {
        let caught = (0..n)
            .filter(|&seed| check(&history_with(Store::Memory, cc, false, snaps, 4, 40, seed), false).is_err())
            .count();
        println!("{}: {caught} of {n} histories caught", cc.name());
        assert!(caught > 0, "{}: snapshots {what} went unnoticed in {n} histories", cc.name());
    }
}

#[test]
fn mvcc_si_histories_are_snapshot_isolated() {
    for &gc in Gc::ALL {
        si_histories(gc);
    }
}

/// SI histories are not all serializable: the serializability check finds write skew in
/// some (so the SI check above is not vacuous), and with first-committer-wins skipped the
/// SI check reports lost updates.
#[test]
fn si_checker_sees_write_skew_and_planted_bug() {
    let skew = (0..histories())
        .filter(|&seed| check(&history(Cc::MvccSi(Gc::EpoR), false, 4, 40, seed), false).is_err())
        .count();
    assert!(skew > 0, "no non-serializable SI history in {}: the workload cannot show write skew", histories());
    let caught = (0..histories())
        .filter(|&seed| check(&history(Cc::MvccSi(Gc::EpoR), true, 4, 40, seed), true).is_err())
        .count();
    assert!(caught > 0, "mvcc-si: skipping first-committer-wins went unnoticed");
}

/// The checker catches a planted bug: with read validation skipped, TicToc and Silo
/// produce non-serializable histories.
#[test]
fn planted_bug_skipped_validation_is_caught() {
    for cc in [Cc::TicToc, Cc::Silo] {
        let caught = (0..histories()).filter(|&seed| check(&history(cc, true, 4, 40, seed), false).is_err()).count();
        assert!(caught > 0, "{}: no anomaly found in {} histories with validation skipped", cc.name(), histories());
    }
}

/// The checker itself: a hand-made write skew is a cycle for serializability but allowed
/// under SI; a hand-made lost update and a read of an unknown version are reported.
#[test]
fn checker_finds_known_anomalies() {
    let t1 = TxnRecord { id: 1, reads: vec![(0, 0), (1, 0)], writes: vec![(0, 0, false)], count: None };
    let t2 = TxnRecord { id: 2, reads: vec![(0, 0), (1, 0)], writes: vec![(1, 0, false)], count: None };
    let skew = [t1, t2];
    assert!(check(&skew, false).is_err(), "write skew is not serializable");
    assert!(check(&skew, true).is_ok(), "write skew is allowed under SI");
    let lost = [
        TxnRecord { id: 1, reads: vec![(0, 0)], writes: vec![(0, 0, false)], count: None },
        TxnRecord { id: 2, reads: vec![(0, 0)], writes: vec![(0, 0, false)], count: None },
    ];
    assert!(check(&lost, true).unwrap_err().contains("lost update"));
    let dirty = [TxnRecord { id: 1, reads: vec![(0, 77)], writes: vec![], count: None }];
    assert!(check(&dirty, true).is_err(), "a read of a version no one committed");
    // Read skew: T2 sees T1's write of key 0 but not of key 1 -> cycle even under SI.
    let t1 = TxnRecord { id: 1, reads: vec![(0, 0), (1, 0)], writes: vec![(0, 0, false), (1, 0, false)], count: None };
    let t2 = TxnRecord { id: 2, reads: vec![(0, 1), (1, 0)], writes: vec![], count: None };
    assert!(check(&[t1, t2], true).is_err(), "read skew is not SI");
    let miscounted = [TxnRecord { id: 1, reads: vec![(0, 0)], writes: vec![], count: Some((3, 2)) }];
    assert!(check(&miscounted, false).unwrap_err().contains("counted 3 keys"));
}

/// Two transactions insert the same new key with `insert` (no read first): the second to
/// commit claimed the key absent after the first had made it present, so at most one of
/// them commits having inserted (the histories above read each key before writing it, so
/// the placeholder's own read of absence is what this checks: skipping its validation
/// under TicToc lets both commit).
#[test]
fn two_blind_inserts_of_one_new_key_do_not_both_commit() {
    let ccs = [
        Cc::TicToc,
        Cc::Silo,
        Cc::TwoPl(tsumiki::LockWait::NoWait),
        Cc::TwoPl(tsumiki::LockWait::WaitDie),
        Cc::MvccSi(Gc::Aot),
    ];
    for cc in ccs {
        for second_commits_first in [false, true] {
            let db = Db::open_in_memory(Options::with_cc(cc)).unwrap();
            db.run(|t| t.put(b"a", b"0")).unwrap();
            let mut t1 = db.begin();
            let mut t2 = db.begin();
            let i1 = t1.insert(b"k", b"1");
            let i2 = t2.insert(b"k", b"2");
            let (c1, c2) = if second_commits_first {
                let c2 = i2.as_ref().is_ok_and(|&i| i).then(|| t2.commit().is_ok());
                (i1.as_ref().is_ok_and(|&i| i).then(|| t1.commit().is_ok()), c2)
            } else {
                let c1 = i1.as_ref().is_ok_and(|&i| i).then(|| t1.commit().is_ok());
                (c1, i2.as_ref().is_ok_and(|&i| i).then(|| t2.commit().is_ok()))
            };
            let won = [c1, c2].iter().filter(|c| **c == Some(true)).count();
            assert!(won <= 1, "{cc:?}: both inserts of one key committed ({i1:?}, {i2:?})");
            let value = db.begin_read().get(b"k").unwrap();
            match (c1, c2) {
                (Some(true), _) => assert_eq!(value.as_deref(), Some(&b"1"[..]), "{cc:?}"),
                (_, Some(true)) => assert_eq!(value.as_deref(), Some(&b"2"[..]), "{cc:?}"),
                _ => assert_eq!(value, None, "{cc:?}"),
            }
        }
    }
}
