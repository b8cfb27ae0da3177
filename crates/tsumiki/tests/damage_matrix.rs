//! The damage matrix (issue 13): every kind of file the database writes (MASTER, the
//! first and the last page-store segment, the first and the last log segment of a lane) x every kind of damage
//! (truncate to 0, 1 byte, half, all but one block; zero a block; flip a byte; swap two
//! blocks; replace with random bytes; put back an older copy; delete; replace with a
//! symbolic link), on real files, after a crash and after a clean close.
//!
//! Each case must end in a clear error or in a state holding every acknowledged commit
//! (and nothing that was never committed), and nothing outside the directory may change.
//! One case is a known limit and is counted apart: damage that leaves no valid block after
//! it in a lane (its last written block, or its whole last segment turned to garbage)
//! looks exactly like a write torn by the crash, so recovery cuts it there (the state is
//! then that of a prefix of the commits, never an invented one).
//!
//! `cargo test --release --test damage_matrix -- --nocapture` prints the counts.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tsumiki::{Db, Error, LogOptions, Options};

type State = BTreeMap<Vec<u8>, Vec<u8>>;

const BLOCK: usize = 4096;

fn opts() -> Options {
    // Small segments: a lane and the page store span several, so first and last differ.
    Options {
        log: LogOptions { segment_size: 64 << 10, page_segment_size: 16 << 10, ..LogOptions::default() },
        ..Options::default()
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    v.sort();
    v
}

/// Commits `from..to` (one key each, some overwrites and deletes) into `model`.
fn commit_range(db: &Db, model: &mut State, states: &mut Vec<State>, from: u32, to: u32) {
    for i in from..to {
        let k = format!("key{:03}", i % 150).into_bytes();
        if i % 11 == 10 {
            db.run(|t| t.delete(&k).map(|_| ())).unwrap();
            model.remove(&k);
        } else {
            let v = format!("v{i}-").repeat(1 + (i as usize % 40)).into_bytes();
            db.run(|t| t.put(&k, &v)).unwrap();
            model.insert(k, v);
        }
        states.push(model.clone());
    }
}

/// Builds the images: `older` (after the first commits and a clean close), then `crashed`
/// (more commits after reopening, a checkpoint, more commits, then a crash) and `closed`
/// (the crashed image reopened and closed cleanly). Returns every intermediate state.
fn build(root: &Path) -> (PathBuf, PathBuf, PathBuf, Vec<State>) {
    let work = root.join("work");
    let mut model = State::new();
    let mut states = vec![State::new()];
    let db = Db::create(&work, opts()).unwrap();
    commit_range(&db, &mut model, &mut states, 0, 300);
    db.close().unwrap();
    let older = root.join("older");
    copy_dir(&work, &older);
    let db = Db::create(&work, opts()).unwrap();
    commit_range(&db, &mut model, &mut states, 300, 500);
    db.checkpoint().unwrap();
    commit_range(&db, &mut model, &mut states, 500, 800);
    db.abandon_for_tests();
    let crashed = root.join("crashed");
    copy_dir(&work, &crashed);
    let db = Db::create(&work, opts()).unwrap();
    db.close().unwrap();
    let closed = root.join("closed");
    copy_dir(&work, &closed);
    (older, crashed, closed, states)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Damage {
    TruncateTo0,
    TruncateTo1,
    TruncateHalf,
    AllButOneBlock,
    ZeroBlock(Where),
    FlipByte(Where),
    SwapBlocks,
    Random,
    OlderCopy,
    Delete,
    Symlink,
}

/// Which block a one-block damage hits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Where {
    First,
    Middle,
    LastWritten,
}

const DAMAGES: [Damage; 15] = [
    Damage::TruncateTo0,
    Damage::TruncateTo1,
    Damage::TruncateHalf,
    Damage::AllButOneBlock,
    Damage::ZeroBlock(Where::First),
    Damage::ZeroBlock(Where::Middle),
    Damage::ZeroBlock(Where::LastWritten),
    Damage::FlipByte(Where::First),
    Damage::FlipByte(Where::Middle),
    Damage::FlipByte(Where::LastWritten),
    Damage::SwapBlocks,
    Damage::Random,
    Damage::OlderCopy,
    Damage::Delete,
    Damage::Symlink,
];

/// The last block holding data (a segment is preallocated with zeros past it).
fn last_written_block(bytes: &[u8]) -> usize {
    let blocks = bytes.len() / BLOCK;
    (0..blocks).rev().find(|&b| bytes[b * BLOCK..(b + 1) * BLOCK].iter().any(|&x| x != 0)).unwrap_or(0)
}

fn block_of(bytes: &[u8], w: Where) -> usize {
    let last = last_written_block(bytes);
    match w {
        Where::First => 0,
        Where::Middle => last / 2,
        Where::LastWritten => last,
    }
}

/// Applies `d` to `file`; false if it does not apply (no older copy, too short).
fn damage(file: &Path, older: Option<&Path>, victim: &Path, d: Damage, seed: u64) -> bool {
    let bytes = std::fs::read(file).unwrap();
    let blocks = bytes.len() / BLOCK;
    let mut out = bytes.clone();
    match d {
        Damage::TruncateTo0 => out.clear(),
        Damage::TruncateTo1 => out.truncate(1),
        Damage::TruncateHalf => out.truncate(bytes.len() / 2),
        Damage::AllButOneBlock => {
            if blocks < 2 {
                return false;
            }
            out.truncate((blocks - 1) * BLOCK)
        }
        Damage::ZeroBlock(w) => {
            if blocks == 0 {
                // A file shorter than a block (MASTER): zero all of it.
                out.fill(0);
            } else {
                let b = block_of(&bytes, w);
                out[b * BLOCK..(b + 1) * BLOCK].fill(0);
            }
        }
        Damage::FlipByte(w) => {
            if bytes.is_empty() {
                return false;
            }
            let at = if blocks == 0 { bytes.len() / 2 } else { block_of(&bytes, w) * BLOCK + 100 % BLOCK };
            let at = at.min(bytes.len() - 1);
            out[at] ^= 0x40;
        }
        Damage::SwapBlocks => {
            let last = last_written_block(&bytes);
            if last < 1 {
                return false;
            }
            let (a, b) = (0, last);
            let (x, y) = (bytes[a * BLOCK..(a + 1) * BLOCK].to_vec(), bytes[b * BLOCK..(b + 1) * BLOCK].to_vec());
            out[a * BLOCK..(a + 1) * BLOCK].copy_from_slice(&y);
            out[b * BLOCK..(b + 1) * BLOCK].copy_from_slice(&x);
        }
        Damage::Random => {
            let mut x = seed | 1;
            for b in out.iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = x as u8;
            }
        }
        Damage::OlderCopy => match older {
            Some(o) if o.exists() && std::fs::read(o).unwrap() != bytes => out = std::fs::read(o).unwrap(),
            _ => return false,
        },
        Damage::Delete => {
            std::fs::remove_file(file).unwrap();
            return true;
        }
        Damage::Symlink => {
            std::fs::remove_file(file).unwrap();
            std::os::unix::fs::symlink(victim, file).unwrap();
            return true;
        }
    }
    std::fs::write(file, &out).unwrap();
    true
}

#[derive(Default, Debug)]
struct Counts {
    error: u32,
    intact: u32,
    /// Opened at the state after a prefix of the acknowledged commits: only allowed for
    /// damage confined to a lane's last flush (a torn write looks the same).
    prefix_tail: u32,
    skipped: u32,
}

/// Opens the damaged copy and reads it all: `Ok(true)` intact, `Ok(false)` a prefix
/// state, `Err` a clear error (from open, or from a page read when its keys are first
/// used). Panics on a state that never existed.
fn outcome(dir: &Path, states: &[State], what: &str) -> Result<bool, Error> {
    let db = Db::create(dir, opts())?;
    let got: State = db.begin().iter().collect::<Result<_, Error>>()?;
    drop(db);
    let last = states.last().unwrap();
    if &got == last {
        return Ok(true);
    }
    assert!(states.contains(&got), "{what}: opened a state that never existed ({} keys)", got.len());
    Ok(false)
}

#[test]
fn every_file_kind_times_every_damage() {
    let root = tempfile::tempdir().unwrap();
    let (older, crashed, closed, states) = build(root.path());
    let outside = root.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    let victim = outside.join("victim");
    std::fs::write(&victim, b"precious bytes outside the database").unwrap();
    // The checker's own baseline: the undamaged images open intact.
    for image in [&crashed, &closed] {
        let dir = root.path().join("baseline");
        copy_dir(image, &dir);
        assert!(matches!(outcome(&dir, &states, "undamaged"), Ok(true)), "an undamaged image opens intact");
        std::fs::remove_dir_all(&dir).unwrap();
    }
    let mut table: BTreeMap<String, Counts> = BTreeMap::new();
    let mut case = 0u64;
    for (scenario, image) in [("after a crash", &crashed), ("after a clean close", &closed)] {
        let files = names(image);
        // Segments holding blocks (the next one is prepared ahead, all zeros: not log).
        let segs: Vec<&String> = files
            .iter()
            .filter(|n| n.starts_with("wal-") && std::fs::read(image.join(n)).unwrap().iter().any(|&b| b != 0))
            .collect();
        let mut kinds: Vec<(&str, String)> = vec![("MASTER", "MASTER".into())];
        let pages: Vec<&String> = files.iter().filter(|n| n.starts_with("pages-")).collect();
        if let (Some(first), Some(last)) = (pages.first(), pages.last()) {
            kinds.push(("first page segment", first.to_string()));
            if last != first {
                kinds.push(("last page segment", last.to_string()));
            }
        }
        if let (Some(first), Some(last)) = (segs.first(), segs.last()) {
            kinds.push(("first log segment", first.to_string()));
            if last != first {
                kinds.push(("last log segment", last.to_string()));
            }
        }
        if scenario == "after a crash" {
            assert!(segs.len() >= 2, "the crash image has several log segments: {files:?}");
        }
        for (kind, name) in &kinds {
            for d in DAMAGES {
                case += 1;
                let dir = root.path().join(format!("case-{case}"));
                copy_dir(image, &dir);
                let older_copy = older.join(name);
                let applied = damage(&dir.join(name), Some(&older_copy), &victim, d, case);
                let row = table.entry(format!("{scenario:20} {kind:18}")).or_default();
                if !applied {
                    row.skipped += 1;
                    continue;
                }
                let what = format!("{scenario}, {kind} {name}, {d:?}");
                match outcome(&dir, &states, &what) {
                    Err(Error::Corrupt(_) | Error::Io { .. }) => row.error += 1,
                    Err(e) => panic!("{what}: unexpected error {e}"),
                    Ok(true) => row.intact += 1,
                    Ok(false) => {
                        // The known limit: damage that leaves no valid block after it in the
                        // lane (its last written block, or the whole last segment made
                        // garbage) looks exactly like a torn last flush.
                        let tail = *kind == "last log segment"
                            && matches!(
                                d,
                                Damage::ZeroBlock(Where::LastWritten)
                                    | Damage::FlipByte(Where::LastWritten)
                                    | Damage::Random
                            );
                        assert!(tail, "{what}: acknowledged commits lost silently");
                        row.prefix_tail += 1;
                    }
                }
                assert_eq!(
                    std::fs::read(&victim).unwrap(),
                    b"precious bytes outside the database",
                    "{what}: a file outside the database changed"
                );
                std::fs::remove_dir_all(&dir).unwrap();
            }
        }
    }
    println!("{:40} {:>6} {:>7} {:>12} {:>8}", "file", "error", "intact", "prefix(tail)", "n/a");
    let mut total = Counts::default();
    for (k, c) in &table {
        println!("{k:40} {:>6} {:>7} {:>12} {:>8}", c.error, c.intact, c.prefix_tail, c.skipped);
        total.error += c.error;
        total.intact += c.intact;
        total.prefix_tail += c.prefix_tail;
        total.skipped += c.skipped;
    }
    println!("{:40} {:>6} {:>7} {:>12} {:>8}", "total", total.error, total.intact, total.prefix_tail, total.skipped);
    assert!(total.error >= 70, "most damage is refused: {total:?}");
}
