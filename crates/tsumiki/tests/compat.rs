//! The on-disk format stays readable: `tests/golden/db` is a database directory written
//! once by the current format's code and kept in git (the same history written by older
//! formats must open too: `tests/golden/db-4cc2f7a` before log segments had headers,
//! `tests/golden/db-48fd11f` before the record count, whose keys are counted at open): a master record, lane
//! registries, log segments of two lanes with commits after a checkpoint, and page
//! segments holding the checkpoint's pages and translation table. This build must open it
//! (read-only and read-write), recover exactly the expected records, and find every file
//! healthy. A change to any encoder or decoder of those files fails here; a deliberate
//! format change bumps the master record's magic (refused with its own message) and
//! rewrites the golden directory:
//!
//! ```text
//! TSUMIKI_WRITE_GOLDEN=1 cargo test -p tsumiki-db --release --test compat
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tsumiki::store::master::read_master;
use tsumiki::wal::format::{BLOCK, PAYLOAD};
use tsumiki::wal::recovery::read_registry;
use tsumiki::wal::storage::DirStorage;
use tsumiki::{Cc, Db, Durability, Error, LogOptions, Options, StoreOptions};

type State = BTreeMap<Vec<u8>, Vec<u8>>;

/// Where a golden database lives, beside this file: `db` (the current format) or an older
/// format's directory.
fn golden_at(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(name)
}

/// The current format's golden directory.
fn golden() -> PathBuf {
    golden_at("db")
}

/// The format of `golden/db`: master records with the record count, commit records marking
/// inserts and removals.
const GOLDEN_WRITTEN_BY: &str = "the commit that added the record count";
/// The generation the golden master record names: 1 at creation, one more per checkpoint.
const GOLDEN_GENERATION: u64 = 3;

/// The options the golden database was written with: the smallest segments, no automatic
/// checkpoint (the history takes one), synced commits (one log block each).
fn options() -> Options {
    let log = LogOptions { durability: Durability::Sync, segment_size: 8 << 10, ..LogOptions::default() };
    let store = StoreOptions {
        page_segment_size: 64 << 10,
        checkpoint_bytes: 0,
        checkpoint_interval: Duration::ZERO,
        // Each close writes the pages: the history's clean exits are those of its format.
        close_keeps_short_log: false,
        ..StoreOptions::default()
    };
    Options { cc: Cc::TicToc, log, store, ..Options::default() }
}

/// One write of a transaction: a value, or a deletion (`None`).
type Op = (Vec<u8>, Option<Vec<u8>>);

/// A step of the history.
enum Step {
    /// One transaction.
    One(Vec<Op>),
    /// Two transactions open together (two worker slots, so two log lanes), committed in
    /// order.
    Two(Vec<Op>, Vec<Op>),
    /// `Db::checkpoint`.
    Checkpoint,
}

fn key(i: u32) -> Vec<u8> {
    format!("golden/{i:04}").into_bytes()
}

/// Values of many lengths: empty, short, a few hundred bytes, and (every 37th) one that
/// spans several 4 KiB blocks.
fn value(i: u32, round: u32) -> Vec<u8> {
    let len = match (i * 7 + round * 3) % 11 {
        0 => 0,
        n if i % 37 == 5 => 3000 * n as usize,
        n => (n * n * 5) as usize,
    };
    (0..len).map(|j| (j as u32 * 31 + i * 7 + round * 13) as u8).collect()
}

fn put(i: u32, round: u32) -> Op {
    (key(i), Some(value(i, round)))
}

fn del(i: u32) -> Op {
    (key(i), None)
}

/// The deterministic history the golden database holds: writes, a checkpoint (page bases,
/// a table base), a few writes and a second checkpoint (page deltas, a table delta), then
/// more writes left in the logs (the process "crashed": nothing was written at exit).
fn history() -> Vec<Step> {
    let mut h = Vec::new();
    // Before the checkpoint: single-key commits, multi-key ones, pairs on two lanes, deletes.
    for i in 0..40 {
        h.push(Step::One(vec![put(i, 0)]));
    }
    for r in 0..8 {
        h.push(Step::Two(vec![put(40 + 2 * r, 0), put(100 + r, 0)], vec![put(41 + 2 * r, 0), del(7 * r)]));
    }
    h.push(Step::One((60..80).map(|i| put(i, 0)).collect()));
    h.push(Step::One(vec![put(3, 1), del(4), put(200, 0)]));
    // ~120 KB more, so the table has pages enough that the next checkpoint's table delta
    // is smaller than a base.
    for c in 0..6 {
        h.push(Step::One((400 + 20 * c..420 + 20 * c).map(|i| (key(i), Some(vec![i as u8; 1000]))).collect()));
    }
    h.push(Step::Checkpoint);
    // A few changes within the first page: the second checkpoint writes a page delta and
    // a table delta.
    h.push(Step::One(vec![put(1, 1), put(2, 1), del(8)]));
    h.push(Step::Two(vec![put(9, 1)], vec![del(10), put(11, 1)]));
    h.push(Step::Checkpoint);
    // After it, in the logs only: overwrites, deletes, new keys, on both lanes.
    for i in 0..12 {
        h.push(Step::One(vec![put(i * 5, 2)]));
    }
    for r in 0..4 {
        h.push(Step::Two(vec![put(300 + r, 2), del(61 + r)], vec![put(42 + 2 * r, 2), put(310 + r, 2)]));
    }
    h.push(Step::One(vec![del(200), put(5, 3), put(999, 3)]));
    h
}

fn apply(model: &mut State, ops: &[Op]) {
    for (k, v) in ops {
        match v {
            Some(v) => model.insert(k.clone(), v.clone()),
            None => model.remove(k),
        };
    }
}

/// The state after the history, the state at its last checkpoint, and the commits after it.
fn expected() -> (State, State, u64) {
    let (mut model, mut at_checkpoint, mut after) = (State::new(), None, 0);
    for step in history() {
        match step {
            Step::One(ops) => {
                apply(&mut model, &ops);
                after += 1;
            }
            Step::Two(a, b) => {
                apply(&mut model, &a);
                apply(&mut model, &b);
                after += 2;
            }
            Step::Checkpoint => {
                at_checkpoint = Some(model.clone());
                after = 0;
            }
        }
    }
    (model, at_checkpoint.expect("a checkpoint"), after)
}

fn run_ops(txn: &mut tsumiki::Txn<'_>, ops: &[Op]) -> Result<(), Error> {
    for (k, v) in ops {
        match v {
            Some(v) => txn.put(k, v)?,
            None => {
                txn.delete(k)?;
            }
        }
    }
    Ok(())
}

/// Writes the golden database into `dir` (which must not exist).
fn write_golden(dir: &Path) {
    let db = Db::create(dir, options()).unwrap();
    for step in history() {
        match step {
            Step::One(ops) => db.run(|t| run_ops(t, &ops)).unwrap(),
            Step::Two(a, b) => {
                let mut ta = db.begin();
                let mut tb = db.begin();
                run_ops(&mut ta, &a).unwrap();
                run_ops(&mut tb, &b).unwrap();
                ta.commit().unwrap();
                tb.commit().unwrap();
            }
            Step::Checkpoint => db.checkpoint().unwrap(),
        }
    }
    db.abandon_for_tests();
}

/// A fresh copy of the golden directory (opening recovers, which writes).
fn copy_golden(name: &str) -> tempfile::TempDir {
    let src = golden_at(name);
    assert!(
        src.join("MASTER").exists(),
        "{} is missing (written by TSUMIKI_WRITE_GOLDEN=1 at {GOLDEN_WRITTEN_BY})",
        src.display()
    );
    let tmp = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(&src).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), tmp.path().join(e.file_name())).unwrap();
    }
    tmp
}

fn dump(db: &Db) -> State {
    db.begin().iter().map(|r| r.unwrap()).collect()
}

/// Compares record by record, naming the first difference.
fn assert_state(got: &State, want: &State, what: &str) {
    for (k, v) in want {
        match got.get(k) {
            None => panic!("{what}: {} is missing", String::from_utf8_lossy(k)),
            Some(g) => assert!(
                g == v,
                "{what}: {} holds {} bytes, not the expected {}",
                String::from_utf8_lossy(k),
                g.len(),
                v.len()
            ),
        }
    }
    for k in got.keys() {
        assert!(want.contains_key(k), "{what}: unexpected key {}", String::from_utf8_lossy(k));
    }
}

/// The findings that are damage (not warnings).
fn damage(report: &tsumiki::CheckReport) -> Vec<&tsumiki::Finding> {
    report.findings.iter().filter(|f| f.severity == tsumiki::Severity::Damage).collect()
}

#[test]
fn golden_directory_opens_with_every_record() {
    if std::env::var_os("TSUMIKI_WRITE_GOLDEN").is_some() {
        let dir = golden();
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.parent().unwrap()).unwrap();
        write_golden(&dir);
        eprintln!("wrote {}", dir.display());
    }
    check_golden("db");
}

/// The golden database as 4cc2f7a wrote it, before log segments had headers: lanes with no
/// header anywhere are read as before.
#[test]
fn golden_directory_before_segment_headers_opens_with_every_record() {
    check_golden("db-4cc2f7a");
}

/// The golden database as 48fd11f wrote it, before the record count: its master record has
/// none and its commit records mark no insert, so the open counts the keys (a scan), and
/// the next master record written holds the count.
#[test]
fn golden_directory_before_the_count_opens_with_every_record() {
    check_golden("db-48fd11f");
}

fn check_golden(name: &str) {
    let (model, at_checkpoint, after) = expected();
    assert!(after >= 20 && at_checkpoint.len() >= 60, "the history exercises both phases");

    // File-level facts, read without writing.
    let copy = copy_golden(name);
    let storage = DirStorage::new(copy.path()).unwrap();
    let m = read_master(&storage).unwrap().expect("a master record");
    assert_eq!(m.generation, GOLDEN_GENERATION, "{m:?}");
    // The count of the state the generation started from: the last checkpoint's.
    let counted = name == "db";
    assert_eq!(m.count, counted.then_some(at_checkpoint.len() as u64), "{m:?}");
    assert!(!m.last_exit && !m.elr && m.segment_size == 8 << 10 && m.table.is_some(), "{m:?}");
    // The table the master names is a delta (kind 4, after the image's crc and length).
    let (seg, off, _, _) = m.table.unwrap();
    let pages = std::fs::read(copy.path().join(format!("pages-{seg:08}.seg"))).unwrap();
    let at = (off / PAYLOAD as u64) as usize * BLOCK + (off % PAYLOAD as u64) as usize;
    assert_eq!(pages[at + 8], 4, "the golden table is a delta");
    let lanes = read_registry(&storage, m.generation).unwrap().expect("the generation's lane registry");
    assert!(lanes >= 2, "{lanes} lanes");
    let report = tsumiki::check(copy.path()).unwrap();
    // Warnings only: the older generation's segments kept for reuse, and the stale blocks
    // of recycled segments beyond the lanes' ends.
    assert!(report.is_healthy(), "{:#?}", damage(&report));
    assert_eq!(report.generation, Some(GOLDEN_GENERATION));
    assert!(!report.last_exit);
    assert_eq!(report.records, at_checkpoint.len() as u64, "records in the pages: the state at the checkpoint");
    assert_eq!(report.log_records, after, "commit records in the logs: those after the checkpoint");
    assert!(report.log_lanes >= 2 && report.pages >= 1 && report.images >= 2, "{report:?}");
    let ins = tsumiki::inspect(copy.path()).unwrap();
    assert_eq!((ins.generation, ins.last_exit, ins.records), (GOLDEN_GENERATION, false, at_checkpoint.len() as u64));
    // The current generation's log segments (the older ones are kept for reuse).
    let current: Vec<_> = ins.files.iter().filter(|f| f.log.is_some_and(|l| l.0 == GOLDEN_GENERATION)).collect();
    let log_lanes: std::collections::BTreeSet<u16> = current.iter().filter_map(|f| f.log.map(|l| l.1)).collect();
    assert!(log_lanes.len() >= 2, "log segments of two lanes at least: {:?}", ins.files);
    assert_eq!(current.iter().map(|f| f.records).sum::<u64>(), after, "{current:?}");
    let pages: Vec<_> = ins.files.iter().filter(|f| f.log.is_none()).collect();
    assert!(pages.iter().any(|f| f.valid_blocks > 0), "a page segment: {pages:?}");
    for f in &pages {
        assert_eq!(f.bad_blocks, 0, "{}: {f:?}", f.name);
    }
    assert_eq!(ins.lane_registries.len(), 1, "{:?}", ins.lane_registries);
    assert_eq!(ins.lane_registries[0].0, GOLDEN_GENERATION);
    assert_eq!(ins.lane_registries[0].1.as_ref().ok(), Some(&lanes));
    drop(storage);

    // Read-only: recovery replays the logs over the pages; writes are refused.
    let db = Db::open(copy.path(), Options { read_only: true, ..options() }).unwrap();
    let r = db.recovery_stats().unwrap();
    assert!(r.replayed && r.records_read == after && r.records_dropped == 0, "{r:?}");
    assert_state(&dump(&db), &model, "read-only open");
    assert_eq!(db.len().unwrap(), model.len() as u64, "read-only open: the count");
    assert!(matches!(db.run(|t| t.put("x", "y")), Err(Error::ReadOnly)));
    drop(db);

    // Read-write, on a fresh copy: the same records; then it takes new commits and a
    // clean close, and reopens with them and nothing to replay.
    let copy = copy_golden(name);
    let db = Db::open(copy.path(), options()).unwrap();
    assert_state(&dump(&db), &model, "read-write open");
    assert_eq!(db.len().unwrap(), model.len() as u64, "read-write open: the count");
    for (k, v) in &model {
        assert_eq!(db.begin().get(k).unwrap().as_ref(), Some(v), "get {}", String::from_utf8_lossy(k));
    }
    let mut model = model;
    db.run(|t| run_ops(t, &[put(1000, 9), del(1)])).unwrap();
    apply(&mut model, &[put(1000, 9), del(1)]);
    db.close().unwrap();
    let db = Db::open(copy.path(), options()).unwrap();
    assert!(!db.recovery_stats().unwrap().replayed);
    assert_state(&dump(&db), &model, "reopened after a clean close");
    assert_eq!(db.len().unwrap(), model.len() as u64, "reopened after a clean close: the count");
    db.close().unwrap();
    let report = tsumiki::check(copy.path()).unwrap();
    assert!(report.is_healthy() && report.last_exit, "{:#?}", damage(&report));
    assert_eq!(report.records, model.len() as u64);
    // Every format's database holds the count once it was closed by this one.
    assert_eq!(report.count, Some(model.len() as u64));
}
