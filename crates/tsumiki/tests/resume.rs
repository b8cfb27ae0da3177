//! Short-lived handles (open, a commit or two, close): a close that keeps a small
//! database's short log instead of writing pages (each lane's last block a kept end), and
//! the next open that resumes that generation (its lanes take the next commits after
//! those ends). Every commit survives the cycles, a read-only open and `check` read the
//! kept logs, power lost at every storage operation of a run of cycles recovers an
//! acknowledged state, and a resumed cycle syncs once per commit and once at close.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tsumiki::plants::Plants;
use tsumiki::storage::{SimStorage, Storage};
use tsumiki::store::master::read_master;
use tsumiki::{Cc, Db, LogOptions, Options, StoreOptions};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn options(plants: Plants) -> Options {
    let log = LogOptions { segment_size: 16 << 10, ..LogOptions::default() };
    // No checkpoint but the closes': the storage operations come in the same order in
    // every run.
    let store = StoreOptions { checkpoint_bytes: 0, checkpoint_interval: Duration::ZERO, ..StoreOptions::default() };
    Options { cc: Cc::TicToc, log, store, plants, ..Options::default() }
}

fn dump(db: &Db) -> Result<Model, String> {
    db.begin().iter().collect::<Result<Model, _>>().map_err(|e| e.to_string())
}

/// Whether the last close on `disk` kept the logs: the master record says they are to
/// be replayed, and there are some.
fn kept(disk: &dyn Storage) -> bool {
    let logs = disk.list().is_ok_and(|names| names.iter().any(|n| n.starts_with("wal-")));
    logs && read_master(disk).ok().flatten().is_some_and(|m| !m.last_exit)
}

/// Cycles of open, two commits, close on `disk`; power is lost after operation `crash_at`
/// (`None`: never). The first cycle writes key `hot` many times (its commit timestamp
/// grows), each later one overwrites it once from a fresh open (whose records start from
/// timestamp 0): recovery must still end with the last write. After every clean cycle
/// the reopened state and count are the model's. Returns the storage operations made,
/// how many closes kept their logs, or what went wrong.
fn cycles(crash_at: Option<u64>, plants: Plants) -> Result<(u64, usize), String> {
    let opts = options(plants);
    let disk = SimStorage::new(5);
    let mut model = Model::new();
    let mut states = vec![model.clone()];
    let mut acked = 0;
    if let Some(k) = crash_at {
        disk.crash_after(k);
    }
    let mut kept_closes = 0;
    let mut commit = |db: &Db, writes: &[(&[u8], Option<&[u8]>)], model: &mut Model| -> bool {
        let mut next = model.clone();
        let r = db.run(|t| {
            for &(k, v) in writes {
                match v {
                    Some(v) => t.put(k, v)?,
                    None => {
                        t.delete(k)?;
                    }
                }
            }
            Ok(())
        });
        for &(k, v) in writes {
            match v {
                Some(v) => next.insert(k.to_vec(), v.to_vec()),
                None => next.remove(k),
            };
        }
        states.push(next.clone());
        if r.is_ok() {
            *model = next;
            acked = states.len() - 1;
        }
        r.is_ok()
    };
    'run: for cycle in 0..8u32 {
        let Ok(db) = Db::open_with_storage(Arc::new(disk.clone()), opts.clone()) else { break };
        if crash_at.is_none() {
            let got = dump(&db)?;
            if got != model {
                return Err(format!("cycle {cycle}: reopened {} keys, expected {}", got.len(), model.len()));
            }
            if db.len().map_err(|e| e.to_string())? != model.len() as u64 {
                return Err(format!("cycle {cycle}: the count is {:?}, expected {}", db.len(), model.len()));
            }
        }
        if cycle == 0 {
            for i in 0..20u32 {
                let v = format!("first-{i}");
                let key = format!("key{i:02}");
                if !commit(&db, &[(b"hot", Some(v.as_bytes())), (key.as_bytes(), Some(b"x"))], &mut model) {
                    break 'run;
                }
            }
        } else {
            // The first commit spans blocks (a flush of several, which power loss may tear
            // in the middle).
            let a = format!("cycle{cycle}-a").repeat(700);
            let b = format!("cycle{cycle}-b");
            let gone = format!("key{:02}", cycle * 2);
            let new = format!("new{cycle}");
            if !commit(&db, &[(b"hot", Some(a.as_bytes())), (new.as_bytes(), Some(b"y"))], &mut model)
                || !commit(&db, &[(b"hot", Some(b.as_bytes())), (gone.as_bytes(), None)], &mut model)
            {
                break;
            }
        }
        if db.close().is_err() {
            break;
        }
        kept_closes += usize::from(kept(&disk));
    }
    let ops = disk.ops();
    let image = disk.crash();
    let db = Db::open_with_storage(Arc::new(SimStorage::from_image(&image, 5)), opts.clone())
        .map_err(|e| format!("crash after operation {crash_at:?}: reopen: {e}"))?;
    let got = dump(&db)?;
    // The recovered database goes on: a commit, a close, an open that finds it.
    let image_disk = SimStorage::from_image(&image, 5);
    drop(db);
    let db = Db::open_with_storage(Arc::new(image_disk.clone()), opts.clone()).map_err(|e| format!("reopen: {e}"))?;
    db.run(|t| t.put(b"after", b"recovery")).map_err(|e| format!("commit after recovery: {e}"))?;
    db.close().map_err(|e| format!("close after recovery: {e}"))?;
    let db = Db::open_with_storage(Arc::new(image_disk), opts).map_err(|e| format!("open after recovery: {e}"))?;
    let mut want = got.clone();
    want.insert(b"after".to_vec(), b"recovery".to_vec());
    if dump(&db)? != want {
        return Err(format!("crash after operation {crash_at:?}: the commit after recovery, or the state, was lost"));
    }
    match states[acked..].iter().position(|s| *s == got) {
        Some(_) if db.len().ok() == Some(want.len() as u64) => Ok((ops, kept_closes)),
        Some(_) => Err(format!("crash after operation {crash_at:?}: the count is {:?}, not {}", db.len(), got.len())),
        None => Err(format!(
            "crash after operation {crash_at:?}: the recovered state ({} keys, hot = {:?}) is no state from the last acknowledged commit on",
            got.len(),
            got.get(&b"hot"[..]).map(|v| String::from_utf8_lossy(v).into_owned())
        )),
    }
}

#[test]
fn short_lived_handles_keep_every_commit_across_resumed_generations() {
    let (_, kept_closes) = cycles(None, Plants::NONE).unwrap();
    // The log reaches the limit before the last cycles, whose closes write the pages.
    assert!((4..8).contains(&kept_closes), "{kept_closes} of 8 closes kept their logs");
}

/// Power lost after every storage operation of the cycles in turn (opens that resume,
/// their first writes, commits into resumed lanes, the closes that keep the logs).
#[test]
fn power_loss_at_every_operation_of_short_lived_handles() {
    let (ops, _) = cycles(None, Plants::NONE).unwrap();
    let failures: Vec<String> = (1..=ops).filter_map(|k| cycles(Some(k), Plants::NONE).err()).collect();
    assert!(
        failures.is_empty(),
        "{} of {ops} crash points failed; first: {:?}",
        failures.len(),
        &failures[..failures.len().min(3)]
    );
}

/// The planted bug: a resumed generation logs its commit timestamps as they are, below the
/// orders its earlier processes logged, so recovery's merge puts the older writes of `hot`
/// last. The cycles must catch it.
#[test]
fn planted_resume_without_order_floor_is_caught() {
    let plants = Plants { resume_without_order_floor: true, ..Plants::NONE };
    let err = cycles(None, plants).expect_err("a resumed generation's commits ordered below the earlier ones");
    println!("caught: {err}");
}

/// A kept lane whose end is followed, past a torn block, by a valid one (a later process
/// appended, then crashed in the middle of a flush): resuming after the kept end would
/// leave that stale block after the next ones written, for a later recovery to read as
/// theirs. The open recovers into a new generation instead; with the plant
/// `resume_past_torn_tail` it resumes (the check must notice).
fn stale_block_past_a_kept_end(plants: Plants) -> bool {
    use tsumiki::block::{open_block, seal_block, Trailer, BLOCK};
    let dir = tempfile::tempdir().unwrap();
    let opts = Options { plants, ..Options::default() };
    let db = Db::create(dir.path(), opts.clone()).unwrap();
    db.run(|t| t.put(b"a", b"1")).unwrap();
    db.close().unwrap();
    let storage = tsumiki::storage::DirStorage::new(dir.path()).unwrap();
    let generation = read_master(&storage).unwrap().unwrap().generation;
    drop(storage);
    let path = dir.path().join(format!("wal-{generation:010}-00000-00000000.log"));
    let mut bytes = std::fs::read(&path).unwrap();
    // The lane's blocks follow the segment's header; the last valid one is the kept end.
    let last = (1..bytes.len() / BLOCK)
        .take_while(|&b| open_block(&bytes[b * BLOCK..(b + 1) * BLOCK], generation).is_some())
        .last()
        .unwrap();
    let torn = last + 1;
    bytes[torn * BLOCK..(torn + 1) * BLOCK].fill(0x5A);
    let stale = torn + 1;
    let mut block = vec![0u8; BLOCK];
    let t = Trailer { lane: 0, seq: (stale - 1) as u32, ..Trailer::default() };
    seal_block(&mut block, &t, generation);
    bytes[stale * BLOCK..(stale + 1) * BLOCK].copy_from_slice(&block);
    std::fs::write(&path, &bytes).unwrap();
    let db = Db::open(dir.path(), opts).unwrap();
    assert_eq!(db.len().unwrap(), 1);
    drop(db);
    let storage = tsumiki::storage::DirStorage::new(dir.path()).unwrap();
    // Recovery into a new generation names the next one; a resumed open keeps this one.
    read_master(&storage).unwrap().unwrap().generation == generation
}

#[test]
fn a_valid_block_past_a_torn_one_is_never_resumed_after() {
    assert!(!stale_block_past_a_kept_end(Plants::NONE), "resumed a lane with a stale block past its tail");
}

/// The planted bug: the open resumes after the kept end all the same.
#[test]
fn planted_resume_past_a_torn_tail_is_caught() {
    let plants = Plants { resume_past_torn_tail: true, ..Plants::NONE };
    assert!(stale_block_past_a_kept_end(plants), "the plant resumes where the check says it must not");
}

/// Opening writes nothing; a resumed cycle's commit syncs its block, which is the lane's
/// kept end, so the close writes and syncs nothing.
#[test]
fn a_resumed_cycle_syncs_once_per_commit_and_not_at_close() {
    let disk = SimStorage::new(1);
    // Segments large enough that no commit here moves a lane into a new one.
    let opts = Options { log: LogOptions::default(), ..options(Plants::NONE) };
    let db = Db::open_with_storage(Arc::new(disk.clone()), opts.clone()).unwrap();
    db.run(|t| t.put(b"a", b"1")).unwrap();
    db.close().unwrap();
    assert!(kept(&disk));
    // One cycle stays in the first half of the lane's first segment (past it, the next
    // segment is prepared: its own sync, once per segment).
    for i in 0..1u32 {
        let before = disk.syncs();
        let db = Db::open_with_storage(Arc::new(disk.clone()), opts.clone()).unwrap();
        assert_eq!(disk.syncs(), before, "cycle {i}: opening synced");
        assert!(db.recovery_stats().unwrap().replayed, "cycle {i}: the kept log was replayed");
        assert_eq!(dump(&db).unwrap().get(&b"a"[..]).map(Vec::as_slice), Some(&b"1"[..]));
        db.run(|t| t.put(format!("k{i}").as_bytes(), b"v")).unwrap();
        assert_eq!(disk.syncs() - before, 1, "cycle {i}: a commit syncs its block");
        db.run(|t| t.put(format!("j{i}").as_bytes(), b"v")).unwrap();
        assert_eq!(disk.syncs() - before, 2, "cycle {i}: a commit syncs its block");
        db.close().unwrap();
        assert_eq!(disk.syncs() - before, 2, "cycle {i}: the close synced: the last commit's block is the kept end");
        assert!(kept(&disk));
    }
    // An open that commits nothing writes nothing, open or close.
    let before = disk.syncs();
    let db = Db::open_with_storage(Arc::new(disk.clone()), opts).unwrap();
    assert_eq!(db.len().unwrap(), 3);
    db.close().unwrap();
    assert_eq!(disk.syncs(), before);
    assert!(kept(&disk));
}

/// A kept log is read by a read-only open and by `check`, and a log past the limit, or a
/// database past the size a resumed open loads whole, is written to the pages at close.
#[test]
fn kept_logs_are_read_by_read_only_opens_and_check_and_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::create(dir.path(), Options::default()).unwrap();
    for i in 0..10u32 {
        db.run(|t| t.put(i.to_be_bytes(), b"value")).unwrap();
    }
    db.close().unwrap();
    let r = tsumiki::inspect(dir.path()).unwrap();
    assert!(!r.last_exit && r.files.iter().any(|f| f.log.is_some()), "{r:?}");
    let report = tsumiki::check(dir.path()).unwrap();
    assert!(report.is_healthy(), "{report:?}");
    let ro = Db::open(dir.path(), Options { read_only: true, ..Options::default() }).unwrap();
    assert_eq!(ro.len().unwrap(), 10);
    drop(ro);
    // A log past the limit: the close writes the pages and leaves none.
    let db = Db::open(dir.path(), Options::default()).unwrap();
    assert_eq!(db.len().unwrap(), 10);
    for i in 0..200u32 {
        db.run(|t| t.put(format!("more{i}").as_bytes(), [7u8; 1000])).unwrap();
    }
    db.close().unwrap();
    let r = tsumiki::inspect(dir.path()).unwrap();
    assert!(r.last_exit && r.files.iter().all(|f| f.log.is_none()), "{r:?}");
    let db = Db::open(dir.path(), Options::default()).unwrap();
    assert_eq!(db.len().unwrap(), 210);
    db.run(|t| t.put(b"last", b"kept")).unwrap();
    db.close().unwrap();
    assert!(!tsumiki::inspect(dir.path()).unwrap().last_exit, "a short log kept");
    // Opened under ELR, a log kept under NLR is recovered, not appended to (its master
    // record says how it is replayed), and the close writes the pages.
    let elr =
        Options { log: LogOptions { release: tsumiki::Release::Elr, ..LogOptions::default() }, ..Options::default() };
    let generation = || {
        let storage = tsumiki::storage::DirStorage::new(dir.path()).unwrap();
        read_master(&storage).unwrap().unwrap().generation
    };
    let before = generation();
    let db = Db::open(dir.path(), elr).unwrap();
    assert_eq!(db.len().unwrap(), 211);
    assert!(generation() > before, "recovered into a new generation, not resumed");
    db.run(|t| t.put(b"elr", b"x")).unwrap();
    db.close().unwrap();
    assert!(tsumiki::inspect(dir.path()).unwrap().last_exit);
    let db = Db::open(dir.path(), Options::default()).unwrap();
    assert_eq!(db.len().unwrap(), 212);
    db.close().unwrap();
}

/// Cycles of open, one small synced commit, close, with the default options: how many
/// closes in a row keep their logs before one writes the pages.
fn kept_closes_in_a_row(plants: Plants) -> usize {
    let disk = SimStorage::new(3);
    let opts = Options { plants, ..Options::default() };
    for i in 0..200u32 {
        let db = Db::open_with_storage(Arc::new(disk.clone()), opts.clone()).unwrap();
        assert_eq!(db.len().unwrap(), u64::from(i), "cycle {i}");
        db.run(|t| t.put(i.to_be_bytes(), b"value")).unwrap();
        db.close().unwrap();
        if !kept(&disk) {
            return i as usize;
        }
    }
    panic!("the log never reached the limit");
}

/// A resumed lane writes its first block over the empty kept end the last close left, so
/// a cycle adds one block to the kept log, not two, and the close that writes the pages
/// comes half as often.
#[test]
fn a_resumed_lane_writes_over_an_empty_kept_end() {
    let row = kept_closes_in_a_row(Plants::NONE);
    // 128 KiB of log: the first cycle's commit, its kept end and each later cycle's block.
    assert!((28..=32).contains(&row), "{row} closes kept their logs before one wrote the pages");
}

/// Commits that did not sync wait in the lane, and the close writes them in the kept end
/// (which then carries records): the next process appends after that kept end, never over
/// it. Power loss after every operation of such cycles recovers an acknowledged state.
fn unsynced_commits_before_kept_ends(plants: Plants, crash_at: Option<u64>) -> Result<u64, String> {
    let disk = SimStorage::new(9);
    if let Some(k) = crash_at {
        disk.crash_after(k);
    }
    let opts = options(plants);
    let mut model = Model::new();
    // The key of the commit the crash failed, if one did: its log block may have reached
    // the disk before the failed sync, so recovery may or may not find it.
    let mut in_doubt: Option<Vec<u8>> = None;
    'run: for cycle in 0..4u32 {
        let Ok(db) = Db::open_with_storage(Arc::new(disk.clone()), opts.clone()) else { break };
        if crash_at.is_none() && dump(&db)? != model {
            return Err(format!("cycle {cycle}: reopened {} keys, expected {}", dump(&db)?.len(), model.len()));
        }
        for (k, durability) in [("synced", tsumiki::Durability::Sync), ("unsynced", tsumiki::Durability::None)] {
            let key = format!("{k}-{cycle}");
            let r = db.run(|t| {
                t.set_durability(durability);
                t.put(key.as_bytes(), b"v")
            });
            if r.is_err() {
                in_doubt = Some(key.into_bytes());
                break 'run;
            }
            model.insert(key.into_bytes(), b"v".to_vec());
        }
        if db.close().is_err() {
            break;
        }
        if crash_at.is_none() && !kept(&disk) {
            return Err(format!("cycle {cycle}: the close did not keep the log"));
        }
    }
    let ops = disk.ops();
    let image = disk.crash();
    let db = Db::open_with_storage(Arc::new(SimStorage::from_image(&image, 9)), opts)
        .map_err(|e| format!("crash after operation {crash_at:?}: reopen: {e}"))?;
    let got = dump(&db)?;
    match crash_at {
        // Every commit of a clean run, the unsynced ones made durable by the closes.
        None if got != model => Err(format!("{} keys after the cycles, expected {}", got.len(), model.len())),
        // A crash keeps a prefix of the commits (in commit order), every one acknowledged
        // by a sync (a synced commit, or a close) among them, and maybe the failed one.
        Some(k) if got.keys().any(|key| !model.contains_key(key) && in_doubt.as_ref() != Some(key)) => {
            Err(format!("crash after operation {k}: recovered keys never committed"))
        }
        _ => Ok(ops),
    }
}

#[test]
fn kept_ends_that_carry_unsynced_commits_are_appended_after() {
    let ops = unsynced_commits_before_kept_ends(Plants::NONE, None).unwrap();
    let failures: Vec<String> =
        (1..=ops).filter_map(|k| unsynced_commits_before_kept_ends(Plants::NONE, Some(k)).err()).collect();
    assert!(failures.is_empty(), "{} of {ops} crash points failed; first: {:?}", failures.len(), failures.first());
}

/// The planted bug: a resumed lane writes over a kept end that carries records, and the
/// unsynced commits the last close made durable are lost.
#[test]
fn planted_overwrite_of_a_kept_end_with_records_is_caught() {
    let plants = Plants { overwrite_kept_end_with_records: true, ..Plants::NONE };
    let err = unsynced_commits_before_kept_ends(plants, None).expect_err("records of a kept end written over");
    println!("caught: {err}");
}

/// A bulk load, then a cycle with one put, then one with a transaction of every loaded
/// key again (`tsumiki load --merge`): the put survives every later open.
#[test]
fn a_put_between_a_bulk_load_and_a_rewrite_of_every_key_survives() {
    let dir = tempfile::tempdir().unwrap();
    let recs: Vec<(Vec<u8>, Vec<u8>)> =
        (0..3000u32).map(|i| (format!("key{i:06}").into_bytes(), vec![7u8; 20])).collect();
    let mut db = Db::create(dir.path(), Options::default()).unwrap();
    db.bulk_load(recs.iter().map(|(k, v)| (k, v))).unwrap();
    db.close().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    db.run(|t| t.put(b"extra", b"1")).unwrap();
    db.close().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    assert_eq!(db.len().unwrap(), 3001);
    db.run(|t| recs.iter().try_for_each(|(k, v)| t.put(k, v))).unwrap();
    assert_eq!(db.len().unwrap(), 3001);
    db.close().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    assert_eq!(db.view(|r| r.get(b"extra")).unwrap().as_deref(), Some(&b"1"[..]));
    assert_eq!(db.len().unwrap(), 3001);
}

/// An open that resumes a kept log over a store of many pages loads only the pages that
/// log wrote, with its writes over them; the others load as they are used. Under a cache
/// that cannot hold every range, reading everything before any checkpoint evicts ranges,
/// but not the ones the kept log wrote (they hold writes no page has): every value read,
/// then and after the next close, is the last one written.
#[test]
fn a_resumed_open_loads_only_the_pages_its_kept_log_wrote() {
    resumed_open_over_pages(Plants::NONE);
}

/// The planted bug: the pages loaded at open count as clean, so the reads evict the one
/// the kept log wrote, and its writes are read from the page without them.
#[test]
fn planted_clean_kept_pages_are_caught() {
    let plants = Plants { kept_pages_clean: true, ..Plants::NONE };
    let caught = std::panic::catch_unwind(|| resumed_open_over_pages(plants)).expect_err("a kept log's write lost");
    let msg = caught.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("pass 1: key"), "caught by the second pass of reads, not: {msg}");
}

fn resumed_open_over_pages(plants: Plants) {
    let key = |i: u32| i.to_be_bytes().to_vec();
    let disk = SimStorage::new(7);
    let open = |opts: &Options| Db::open_with_storage(Arc::new(disk.clone()), opts.clone()).unwrap();
    let mut model = Model::new();
    // Pages first: a checkpoint writes them, and the close after it keeps nothing.
    let db = open(&options(Plants::NONE));
    db.run(|t| (0..16_000u32).try_for_each(|i| t.put(key(i), i.to_le_bytes()))).unwrap();
    model.extend((0..16_000u32).map(|i| (key(i), i.to_le_bytes().to_vec())));
    db.checkpoint().unwrap();
    let live = db.store_stats().unwrap().live_bytes as usize;
    db.close().unwrap();
    // A cache whose records' share (13/16 of it) is five times the pages: a close keeps
    // its log (at most a quarter of that share), and the records (about 150 bytes each
    // in memory against 16 in the pages) do not all fit.
    let small = Options { cache_bytes: 5 * live * 16 / 13, ..options(plants) };
    let db = open(&small);
    let writes: [(Vec<u8>, Option<Vec<u8>>); 3] =
        [(key(100), Some(b"new".to_vec())), (key(101), None), ([key(100), vec![1]].concat(), Some(b"added".to_vec()))];
    db.run(|t| {
        for (k, v) in &writes {
            match v {
                Some(v) => t.put(k, v)?,
                None => t.delete(k).map(|_| ())?,
            }
        }
        Ok(())
    })
    .unwrap();
    for (k, v) in &writes {
        match v {
            Some(v) => model.insert(k.clone(), v.clone()),
            None => model.remove(k),
        };
    }
    db.close().unwrap();
    assert!(kept(&disk), "the close kept its log");

    let db = open(&small);
    let stats = db.cache_stats().unwrap();
    assert!(stats.ranges >= 8, "{} ranges: too few pages for the test", stats.ranges);
    assert_eq!(stats.ranges_loaded, 1, "only the page the kept log wrote is loaded at open: {stats:?}");
    // Everything read, twice in opposite orders, so that CLOCK passes every range.
    for pass in 0..2 {
        let mut keys: Vec<&Vec<u8>> = model.keys().collect();
        if pass == 1 {
            keys.reverse();
        }
        let txn = db.begin();
        for k in keys {
            assert_eq!(txn.get(k).unwrap().as_ref(), model.get(k), "pass {pass}: key {k:?}");
        }
        for (k, _) in &writes {
            assert_eq!(txn.get(k).unwrap().as_ref(), model.get(k), "pass {pass}: written key {k:?}");
        }
        drop(txn);
    }
    let stats = db.cache_stats().unwrap();
    assert!(stats.evictions > 0, "the reads evicted ranges: {stats:?}");
    assert_eq!(dump(&db).unwrap(), model);
    db.run(|t| t.put(key(7), b"last")).unwrap();
    model.insert(key(7), b"last".to_vec());
    db.close().unwrap();
    let db = open(&options(Plants::NONE));
    assert_eq!(dump(&db).unwrap(), model);
    assert_eq!(db.len().unwrap(), model.len() as u64);
}
