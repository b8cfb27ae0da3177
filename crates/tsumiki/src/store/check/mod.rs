//! `tsumiki check`: verifies every checksum and structure of a database directory without
//! changing anything.
//!
//! Nothing here opens the database: it checks what is on disk, not a recovered state. The
//! files are read through [`ReadOnlyDir`], whose files are opened read-only and whose every
//! write fails, under the database's lock taken shared (a database open for writing is
//! refused: its files change while they are read; read-only opens beside it are fine).
//!
//! What is checked, file by file:
//! - `MASTER`: its length, both superblocks (checksums, the master record's own checksum
//!   and settings, zero padding), the newest one naming the state;
//! - log segments of the current generation (and of the next, which a checkpoint that did
//!   not finish leaves): every block of every lane through the same reader recovery uses
//!   (block checksums salted with the generation, lane and sequence numbers, record
//!   checksums and bounds, lane ends), the lane registry against the lanes, and then a
//!   replay that redoes nothing (recovery's analysis: LSN order, watermarks);
//! - lane registries: length, magic, checksum, generation;
//! - the page store: the translation table (every image of its chain, the page list's key
//!   order, page ids, chains, segment list), every image the table names (the blocks that
//!   hold it: checksum, lane, sequence, used bytes; its own checksum, kind, page id, the
//!   image it names before it), every entry of every image (lengths, keys strictly
//!   increasing within the image and inside the page's key range, no tombstone in a base),
//!   overlaps between named images, and every other block of every segment (valid, zero,
//!   or stale). The table and images are decoded here independently of the page store's
//!   reader (a bug in one is not repeated in the other), and then every page is read again
//!   through the page store itself, whose record count must agree.
//!
//! A finding is [`Severity::Damage`] when the database cannot be opened or would lose or
//! misread data, and [`Severity::Warning`] for what the database handles by itself: the
//! torn tail of a log a crash left, obsolete files the next open removes, stale blocks no
//! state uses.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::io;
use std::path::Path;
use std::sync::Arc;

use super::pages::parse_segment_file;
use crate::block::BLOCK;
use crate::error::Error;
use crate::storage::{ReadOnlyDir, Storage, StorageFile};
use crate::store::master::MASTER;
use crate::wal::format;

mod layout;
mod logs;
mod master;
mod pages;
#[cfg(test)]
mod tests;

/// Bytes read at once when a file is scanned block by block.
const CHUNK: usize = 256 * BLOCK;

/// How serious a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    /// The database is damaged: opening it fails, or data would be lost or misread.
    Damage,
    /// Something the database handles by itself (a log's torn tail after a crash, an
    /// obsolete file the next open removes) or bytes that no state uses.
    Warning,
}

/// One problem found by [`check`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// Damage or a warning.
    pub severity: Severity,
    /// The file (a name in the database directory).
    pub file: String,
    /// The byte offset in the file, where one place is to blame.
    pub offset: Option<u64>,
    /// What is wrong.
    pub what: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.severity {
            Severity::Damage => "damage",
            Severity::Warning => "warning",
        };
        match self.offset {
            Some(o) => write!(f, "{kind}: {} at byte {o}: {}", self.file, self.what),
            None => write!(f, "{kind}: {}: {}", self.file, self.what),
        }
    }
}

/// What [`check`] found, with counts of what it read.
#[derive(Debug, Clone, Default)]
pub struct CheckReport {
    /// Every problem, in the order found.
    pub findings: Vec<Finding>,
    /// The generation the newest valid master record names (`None`: no valid one).
    pub generation: Option<u64>,
    /// Whether that record says the last exit was clean.
    pub last_exit: bool,
    /// Files in the directory, and their bytes.
    pub files: u64,
    /// See `files`.
    pub bytes: u64,
    /// 4 KiB blocks whose trailer was verified (log and page blocks).
    pub blocks: u64,
    /// Log lanes read, and the commit records they hold.
    pub log_lanes: u64,
    /// See `log_lanes`.
    pub log_records: u64,
    /// Pages in the translation table, and images read (table images included).
    pub pages: u64,
    /// See `pages`.
    pub images: u64,
    /// Live records in the pages (what a clean open holds; a crashed database's logs add
    /// their writes on top), and their keys' and values' bytes.
    pub records: u64,
    /// See `records`.
    pub key_bytes: u64,
    /// See `records`.
    pub value_bytes: u64,
    /// The record count the master record holds (`None`: a record from before the count).
    /// After a clean exit it must equal `records`.
    pub count: Option<u64>,
}

impl CheckReport {
    /// Whether no damage was found (warnings allowed).
    pub fn is_healthy(&self) -> bool {
        self.damage() == 0
    }

    /// How many findings are damage.
    pub fn damage(&self) -> usize {
        self.findings.iter().filter(|f| f.severity == Severity::Damage).count()
    }

    /// How many findings are warnings.
    pub fn warnings(&self) -> usize {
        self.findings.len() - self.damage()
    }
}

/// Verifies the database in `dir` without changing it (see the module's documentation):
/// every problem becomes a [`Finding`]. Fails only when the check cannot run: `dir` is not
/// a directory or holds no database ([`Error::NotFound`]), the database is open
/// ([`Error::Locked`]), or a file cannot be read ([`Error::Io`]).
///
/// ```
/// # use tsumiki::{check, Db, Options, StoreOptions};
/// let dir = tempfile::tempdir().unwrap();
/// // Every close writes the pages, whose records the report counts (a small database's
/// // close may otherwise keep its short log: `StoreOptions::close_keeps_short_log`).
/// let store = StoreOptions { close_keeps_short_log: false, ..StoreOptions::default() };
/// let db = Db::create(dir.path(), Options { store, ..Options::default() }).unwrap();
/// db.run(|t| t.put(b"k", b"v")).unwrap();
/// db.close().unwrap();
/// let report = check(dir.path()).unwrap();
/// assert!(report.is_healthy(), "{:?}", report.findings);
/// assert_eq!(report.records, 1);
/// ```
pub fn check(dir: &Path) -> Result<CheckReport, Error> {
    let storage = Arc::new(ReadOnlyDir::new(dir)?);
    let _lock = storage.lock().map_err(|e| match e.kind() {
        io::ErrorKind::WouldBlock => Error::Locked(format!("{e}: close it before checking it")),
        _ => Error::io("locking the database", e),
    })?;
    let mut c = Checker { storage: storage.clone(), report: CheckReport::default(), files: HashMap::new() };
    c.run(dir)?;
    Ok(c.report)
}

/// A problem at a place in a file, before it becomes a finding.
struct Bad {
    file: String,
    offset: Option<u64>,
    what: String,
}

struct Checker {
    storage: Arc<ReadOnlyDir>,
    report: CheckReport,
    /// Page segment files opened so far (`None`: missing or unreadable).
    files: HashMap<u32, Option<Box<dyn StorageFile>>>,
}

impl Checker {
    fn find(&mut self, severity: Severity, file: impl Into<String>, offset: Option<u64>, what: impl Into<String>) {
        self.report.findings.push(Finding { severity, file: file.into(), offset, what: what.into() });
    }

    fn damage(&mut self, file: impl Into<String>, offset: Option<u64>, what: impl Into<String>) {
        self.find(Severity::Damage, file, offset, what);
    }

    fn warn(&mut self, file: impl Into<String>, offset: Option<u64>, what: impl Into<String>) {
        self.find(Severity::Warning, file, offset, what);
    }

    fn bad(&mut self, b: Bad) {
        self.damage(b.file, b.offset, b.what);
    }

    fn run(&mut self, dir: &Path) -> Result<(), Error> {
        let mut names = self.storage.list().map_err(|e| Error::io(format!("listing {}", dir.display()), e))?;
        names.sort();
        let ours = |n: &str| {
            n == MASTER
                || format::parse_segment_name(n).is_some()
                || parse_segment_file(n).is_some()
                || format::parse_registry_name(n).is_some()
        };
        if !names.iter().any(|n| ours(n)) {
            return Err(Error::NotFound(format!("{} holds no tsumiki database", dir.display())));
        }
        // Every file: readable, a regular file, and known.
        let mut logs: BTreeMap<(u64, u16), Vec<u64>> = BTreeMap::new();
        let mut segments: Vec<u32> = Vec::new();
        let mut registries: Vec<u64> = Vec::new();
        for name in &names {
            let path = dir.join(name);
            let meta = std::fs::symlink_metadata(&path).map_err(|e| Error::io(name, e))?;
            if !meta.is_file() {
                let what = if meta.file_type().is_symlink() { "a symbolic link" } else { "not a regular file" };
                let sev = if ours(name) { Severity::Damage } else { Severity::Warning };
                self.find(sev, name, None, format!("is {what}, which the database never reads"));
                continue;
            }
            self.report.files += 1;
            self.report.bytes += meta.len();
            if name == MASTER || name == crate::wal::storage::CALLER_LOCK_FILE {
                continue;
            }
            if let Some((g, l, s)) = format::parse_segment_name(name) {
                logs.entry((g, l)).or_default().push(s);
            } else if let Some(n) = parse_segment_file(name) {
                segments.push(n);
            } else if let Some(g) = format::parse_registry_name(name).filter(|_| !name.ends_with(".tmp")) {
                registries.push(g);
            } else if name.ends_with(".tmp") {
                self.warn(name, None, "a file left by an interrupted write; the next open removes it");
            } else {
                self.warn(name, None, "not a tsumiki file");
            }
        }
        for segs in logs.values_mut() {
            segs.sort_unstable();
        }
        let master = if names.iter().any(|n| n == MASTER) {
            self.check_master()?
        } else {
            self.damage(MASTER, None, "the master record is missing, but log or page files exist");
            None
        };
        self.report.generation = master.map(|m| m.generation);
        self.report.last_exit = master.is_some_and(|m| m.last_exit);
        for &g in &registries {
            self.check_registry_file(g, master.map(|m| m.generation))?;
        }
        if let Some(m) = master {
            self.check_logs(&m, &logs)?;
        }
        let damage_before = self.report.damage();
        self.check_pages(master.as_ref(), &segments)?;
        self.report.count = master.and_then(|m| m.count);
        // After a clean exit the pages are the whole state, which the count must match
        // (otherwise a crash's logs add to them, and a checkpoint's pages may hold values
        // newer than its count). Pages found damaged were counted short already.
        if let (Some(m), Some(count)) = (master, self.report.count) {
            if m.last_exit && self.report.damage() == damage_before && count != self.report.records {
                let records = self.report.records;
                self.damage(
                    MASTER,
                    None,
                    format!("the master record counts {count} records, the pages hold {records}"),
                );
            }
        }
        Ok(())
    }
}

/// Calls `f` with each block of file `name` (the last may be short) and its number;
/// returns the file's length.
fn scan_blocks(storage: &dyn Storage, name: &str, f: &mut dyn FnMut(u64, &[u8])) -> Result<u64, Error> {
    let file = storage.open(name, false).map_err(|e| Error::io(name, e))?;
    let len = file.len().map_err(|e| Error::io(name, e))?;
    let mut buf = vec![0u8; CHUNK];
    let mut off = 0u64;
    while off < len {
        let want = ((len - off) as usize).min(CHUNK);
        let mut got = 0;
        while got < want {
            match file.read_at(&mut buf[got..want], off + got as u64).map_err(|e| Error::io(name, e))? {
                0 => break,
                n => got += n,
            }
        }
        for (i, block) in buf[..got].chunks(BLOCK).enumerate() {
            f(off / BLOCK as u64 + i as u64, block);
        }
        if got < want {
            return Ok(off + got as u64);
        }
        off += got as u64;
    }
    Ok(len)
}
