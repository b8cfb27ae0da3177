//! `tsumiki check`: verifies every checksum and structure of a database directory without
//! changing anything.
//!
//! Nothing here opens the database: opening recovers, and recovery writes. The files are
//! read through [`ReadOnlyDir`], whose files are opened read-only and whose every write
//! fails, under the database's lock (a database open in another process is refused: its
//! files change while they are read).
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

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::master::{check_slot, Master, MASTER, MASTER_FILE_LEN};
use super::pages::{parse_segment_file, segment_file, ImageRef, PageStore, STORE_LANE};
use crate::block::{open_block, BLOCK, PAYLOAD};
use crate::error::{Error, MAX_VALUE_LEN};
use crate::index::MAX_KEY_LEN;
use crate::storage::{read_all, Storage, StorageFile};
use crate::wal::format;
use crate::wal::recovery;
use crate::wal::Release;

// The page store's on-disk layout, restated (see `store::pages`): an independent reader.
/// Image header: crc (4), body length (4), kind (1), page id (8), previous image (20),
/// entry count (4).
const IMAGE_HEADER: usize = 4 + 4 + 1 + 8 + REF_LEN + 4;
const REF_LEN: usize = 4 + 8 + 4 + 4;
const KIND_BASE: u8 = 1;
const KIND_DELTA: u8 = 2;
const KIND_TABLE: u8 = 3;
const KIND_TABLE_DELTA: u8 = 4;
/// Images in a page's chain at most (`pages::MAX_CHAIN` deltas' limit plus the base).
const MAX_PAGE_CHAIN: usize = super::pages::MAX_CHAIN + 1;
/// Images in the table's chain at most (`pages::table::TABLE_CHAIN`).
const MAX_TABLE_CHAIN: usize = 16;
/// The longest image the page store reads (`pages::MAX_IMAGE`).
const MAX_IMAGE: usize = (MAX_VALUE_LEN + MAX_KEY_LEN + (64 << 10)) * 2;
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
/// # use tsumiki::{check, Db, Options};
/// let dir = tempfile::tempdir().unwrap();
/// let db = Db::create(dir.path(), Options::default()).unwrap();
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

/// A database directory read without writing: files are opened read-only, and every
/// write, sync, rename or removal fails. Used by [`check`] and by `inspect`.
pub(crate) struct ReadOnlyDir {
    dir: PathBuf,
}

impl ReadOnlyDir {
    /// The directory `dir`, which must exist ([`Error::NotFound`] otherwise).
    pub(crate) fn new(dir: &Path) -> Result<ReadOnlyDir, Error> {
        match std::fs::metadata(dir) {
            Ok(m) if m.is_dir() => Ok(ReadOnlyDir { dir: dir.to_path_buf() }),
            Ok(_) => Err(Error::NotFound(format!("{} is not a directory", dir.display()))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                Err(Error::NotFound(format!("{} does not exist", dir.display())))
            }
            Err(e) => Err(Error::io(dir.display().to_string(), e)),
        }
    }
}

fn refused() -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, "the database is opened read-only for checking")
}

struct ReadOnlyFile(std::fs::File);

impl StorageFile for ReadOnlyFile {
    fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        std::os::unix::fs::FileExt::read_at(&self.0, buf, off)
    }
    fn write_at(&self, _buf: &[u8], _off: u64) -> io::Result<()> {
        Err(refused())
    }
    fn sync_data(&self) -> io::Result<()> {
        Err(refused())
    }
    fn len(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }
}

impl Storage for ReadOnlyDir {
    fn list(&self) -> io::Result<Vec<String>> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(&self.dir)? {
            if let Ok(name) = e?.file_name().into_string() {
                out.push(name);
            }
        }
        Ok(out)
    }

    fn open(&self, name: &str, create: bool) -> io::Result<Box<dyn StorageFile>> {
        use std::os::unix::fs::OpenOptionsExt;
        if create {
            return Err(refused());
        }
        // Never through a link, as the database itself.
        let f =
            std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(self.dir.join(name)).map_err(
                |e| {
                    if e.raw_os_error() == Some(libc::ELOOP) {
                        io::Error::new(e.kind(), format!("{name} is a symbolic link, which the database never follows"))
                    } else {
                        e
                    }
                },
            )?;
        if !f.metadata()?.is_file() {
            return Err(io::Error::new(io::ErrorKind::InvalidData, format!("{name} is not a regular file")));
        }
        Ok(Box::new(ReadOnlyFile(f)))
    }

    fn remove(&self, _name: &str) -> io::Result<()> {
        Err(refused())
    }

    fn rename(&self, _from: &str, _to: &str) -> io::Result<()> {
        Err(refused())
    }

    fn sync_dir(&self) -> io::Result<()> {
        Err(refused())
    }

    fn lock(&self) -> io::Result<Box<dyn Send + Sync>> {
        // The same lock the database takes: an open database holds it.
        Ok(Box::new(crate::storage::lock_directory(&self.dir)?))
    }
}

/// A page of the translation table as decoded here.
#[derive(Debug, Clone)]
struct TablePage {
    pid: u64,
    low: Vec<u8>,
    chain: Vec<ImageRef>,
}

/// A decoded table: its pages, and its segments with the generation that last wrote
/// each.
type Table = (Vec<TablePage>, Vec<(u32, u64)>);

/// A problem at a place in a file, before it becomes a finding.
struct Bad {
    file: String,
    offset: Option<u64>,
    what: String,
}

/// The file offset of payload offset `off` of a page segment.
fn file_offset(off: u64) -> u64 {
    off / PAYLOAD as u64 * BLOCK as u64 + off % PAYLOAD as u64
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
        self.check_pages(master.as_ref(), &segments)?;
        Ok(())
    }

    /// Both superblocks of `MASTER`; returns the newest valid record.
    fn check_master(&mut self) -> Result<Option<Master>, Error> {
        let f = self.storage.open(MASTER, false).map_err(|e| Error::io(MASTER, e))?;
        let b = read_all(&*f).map_err(|e| Error::io(MASTER, e))?;
        if b.len() != MASTER_FILE_LEN {
            self.damage(
                MASTER,
                Some(b.len() as u64),
                format!("the file is {} bytes, expected {MASTER_FILE_LEN} (truncated or extended?)", b.len()),
            );
        }
        let mut best: Option<(Master, u64, usize)> = None;
        let mut bad = Vec::new();
        for (i, slot) in b.chunks(BLOCK).enumerate().take(2) {
            if slot.iter().all(|&x| x == 0) {
                // The second superblock of a new database is not written yet.
                continue;
            }
            match check_slot(slot) {
                Ok((m, seq)) => {
                    if best.is_none_or(|(_, s, _)| seq > s) {
                        best = Some((m, seq, i));
                    }
                }
                Err(e) => bad.push((i, e.offset(), e.to_string())),
            }
        }
        for (i, at, why) in bad {
            let other = match best {
                Some((_, seq, j)) => format!(
                    "; the database uses superblock {j} (write {seq}). A crash during a write of MASTER also leaves a damaged superblock, which the next open overwrites"
                ),
                None => String::new(),
            };
            self.damage(MASTER, Some((i * BLOCK + at) as u64), format!("superblock {i}: {why}{other}"));
        }
        if best.is_none() {
            self.damage(MASTER, None, "no valid superblock: the database cannot be opened");
        }
        Ok(best.map(|b| b.0))
    }

    /// A lane registry file on its own (length, magic, checksum, generation), and whether
    /// it belongs to a generation that still counts.
    fn check_registry_file(&mut self, g: u64, current: Option<u64>) -> Result<(), Error> {
        let name = format::registry_name(g);
        match recovery::read_registry(&*self.storage, g) {
            Ok(_) => {}
            Err(Error::Corrupt(m)) => self.damage(&name, None, m.to_string()),
            Err(e) => return Err(e),
        }
        if current.is_some_and(|c| g < c) {
            self.warn(&name, None, "the lane registry of an older generation: obsolete, the next open removes it");
        }
        Ok(())
    }

    /// The logs of the generation `m` names and of the next one, lane by lane, the lane
    /// registries against them, then recovery's analysis without redoing anything.
    fn check_logs(&mut self, m: &Master, logs: &BTreeMap<(u64, u16), Vec<u64>>) -> Result<(), Error> {
        let g = m.generation;
        let next_exists = logs.keys().any(|&(lg, _)| lg == g.saturating_add(1));
        let mut stale = 0;
        for (&(lg, lane), segs) in logs {
            if lg < g {
                stale += segs.len();
            } else if lg > g.saturating_add(1) || (lg > g && m.last_exit) {
                for &s in segs {
                    let why = if lg > g + 1 {
                        format!("a log of generation {lg}, newer than MASTER's {g} allows: MASTER is older than the database")
                    } else {
                        format!("a log of generation {lg}, but MASTER says generation {g} ended cleanly")
                    };
                    self.damage(format::segment_name(lg, lane, s), None, why);
                }
            }
        }
        if stale > 0 {
            self.warn(
                format!("wal-*.log (generations before {g})"),
                None,
                format!("{stale} log segments of older generations: kept for reuse while the database was open, obsolete now (the next open removes them)"),
            );
        }
        let mut gens = vec![g];
        if next_exists && !m.last_exit {
            gens.push(g + 1);
        }
        let before = self.report.damage();
        for (i, &lg) in gens.iter().enumerate() {
            // The lanes of a generation the next one followed were closed by the
            // checkpoint: synced to their end.
            let closed = i + 1 < gens.len();
            let mut lanes = Vec::new();
            for (&(_, lane), segs) in logs.range((lg, 0)..=(lg, u16::MAX)) {
                let (holds, first_valid) = self.check_lane(m, lg, lane, segs, closed)?;
                lanes.push((lane, holds, first_valid));
            }
            if !m.last_exit {
                self.check_lane_registry(lg, &lanes)?;
            }
        }
        // Recovery's own pass (its analysis orders the lanes' records), once the lanes
        // read cleanly: what it says beyond the above is damage too.
        if !m.last_exit && self.report.damage() == before {
            let release = if m.elr { Release::Elr } else { Release::Nlr };
            match recovery::replay(&*self.storage, &gens, m.segment_size, release, |_| Ok(())) {
                Ok(_) => {}
                Err(Error::Corrupt(e)) => {
                    self.damage(format!("wal-{g:010}-*.log"), None, format!("recovery would fail: {e}"))
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// One lane: returns whether it holds records and whether its first block is valid.
    fn check_lane(&mut self, m: &Master, g: u64, lane: u16, segs: &[u64], closed: bool) -> Result<(bool, bool), Error> {
        let names: Vec<String> = segs.iter().map(|&s| format::segment_name(g, lane, s)).collect();
        let first = &names[0];
        let first_valid = segs[0] == 0 && {
            let f = self.storage.open(first, false).map_err(|e| Error::io(first, e))?;
            let mut b = vec![0u8; BLOCK];
            let n = f.read_at(&mut b, 0).map_err(|e| Error::io(first, e))?;
            // The lane's first block follows the segment's header (if written with one).
            let n = if n == BLOCK && format::is_segment_header(&b, g, lane, 0) {
                f.read_at(&mut b, format::SEGMENT_HEADER).map_err(|e| Error::io(first, e))?
            } else {
                n
            };
            n == BLOCK && open_block(&b, g).is_some_and(|t| t.lane == lane && t.seq == 0)
        };
        match recovery::read_lane(&*self.storage, g, lane, segs, m.segment_size, closed) {
            Ok(log) => {
                self.report.log_lanes += 1;
                self.report.log_records += log.records.len() as u64;
                self.report.blocks += self.count_valid_blocks(&names, g, lane)?;
                if log.cut_blocks > 0 {
                    self.warn(
                        names.last().expect("a segment"),
                        None,
                        format!(
                            "{} blocks after lane {lane}'s last valid block hold bytes: the tail of a flush a crash interrupted (the next open cuts it), or older blocks of a recycled segment",
                            log.cut_blocks
                        ),
                    );
                }
                if m.last_exit && !log.records.is_empty() {
                    self.damage(
                        first,
                        None,
                        format!(
                            "MASTER says generation {g} ended cleanly, but lane {lane} logged {} commits in it after: a newer master record is damaged or missing",
                            log.records.len()
                        ),
                    );
                }
                Ok((!log.records.is_empty(), first_valid))
            }
            Err(Error::Corrupt(why)) => {
                // Name the segment the reader blames, if it says.
                let file = names.iter().find(|n| why.contains(n.as_str())).unwrap_or(first).clone();
                self.damage(file, None, why.to_string());
                Ok((false, first_valid))
            }
            Err(e) => Err(e),
        }
    }

    /// The valid blocks of a lane's segments (for the count of blocks verified).
    fn count_valid_blocks(&self, names: &[String], g: u64, lane: u16) -> Result<u64, Error> {
        let mut n = 0;
        for name in names {
            scan_blocks(&*self.storage, name, &mut |_, b| {
                n += u64::from(open_block(b, g).is_some_and(|t| t.lane == lane));
            })?;
        }
        Ok(n)
    }

    /// The registry of generation `g` against its lanes (`lanes`: id, holds records, first
    /// block valid): every registered lane has a log whose first block is valid, and every
    /// lane holding records is registered.
    fn check_lane_registry(&mut self, g: u64, lanes: &[(u16, bool, bool)]) -> Result<(), Error> {
        let name = format::registry_name(g);
        let registered = match recovery::read_registry(&*self.storage, g) {
            Ok(r) => r,
            // Reported with the file.
            Err(Error::Corrupt(_)) => return Ok(()),
            Err(e) => return Err(e),
        };
        if let Some(n) = registered {
            for id in 0..n {
                match lanes.iter().find(|l| u32::from(l.0) == id) {
                    None => self.damage(&name, None, format!("lane {id} is registered, but its log is missing")),
                    Some(&(_, _, false)) => self.damage(
                        format::segment_name(g, id as u16, 0),
                        Some(0),
                        format!("lane {id} is registered, but its first block (synced before that) is damaged or gone"),
                    ),
                    Some(_) => {}
                }
            }
        }
        for &(id, holds, _) in lanes {
            if holds && registered.is_none_or(|n| u32::from(id) >= n) {
                let why = match registered {
                    None => format!("lane {id} holds commits, but the lane registry {name} is missing"),
                    Some(n) => format!("lane {id} holds commits, but {name} names only {n} lanes (an older copy?)"),
                };
                self.damage(format::segment_name(g, id, 0), None, why);
            }
        }
        Ok(())
    }

    /// Page segment `n`, opened once (`None` when missing or unreadable).
    fn segment(&mut self, n: u32) -> Option<&dyn StorageFile> {
        let storage = &self.storage;
        self.files.entry(n).or_insert_with(|| storage.open(&segment_file(n), false).ok()).as_deref()
    }

    /// Reads the image at `r`, verifying each block that holds it and the image's own
    /// checksum and length.
    fn read_image(&mut self, r: ImageRef) -> Result<Vec<u8>, Bad> {
        let name = segment_file(r.seg);
        let at = file_offset(r.off);
        let bad = |offset: u64, what: String| Bad { file: name.clone(), offset: Some(offset), what };
        if (r.len as usize) < IMAGE_HEADER || r.len as usize > MAX_IMAGE {
            return Err(bad(at, format!("the table names an image of an impossible length, {} bytes", r.len)));
        }
        let first = r.off / PAYLOAD as u64;
        let end = (r.off + u64::from(r.len)).div_ceil(PAYLOAD as u64);
        let Some(f) = self.segment(r.seg) else {
            return Err(Bad {
                file: name.clone(),
                offset: None,
                what: "the translation table names an image in this file, which is missing or unreadable".into(),
            });
        };
        let mut raw = vec![0u8; (end - first) as usize * BLOCK];
        let mut got = 0;
        while got < raw.len() {
            match f.read_at(&mut raw[got..], first * BLOCK as u64 + got as u64) {
                Ok(0) => {
                    let len = f.len().unwrap_or(0);
                    return Err(bad(
                        len,
                        format!(
                            "the file ends at byte {len}, inside the image of {} bytes at byte {at} (truncated?)",
                            r.len
                        ),
                    ));
                }
                Ok(n) => got += n,
                Err(e) => return Err(bad(first * BLOCK as u64 + got as u64, format!("read error: {e}"))),
            }
        }
        let mut img = Vec::with_capacity(r.len as usize);
        let mut skip = (r.off % PAYLOAD as u64) as usize;
        for (i, block) in raw.chunks(BLOCK).enumerate() {
            let b = first + i as u64;
            let boff = b * BLOCK as u64;
            let t = match open_block(block, 0) {
                None => return Err(bad(boff, format!("block {b} (of an image the table names) fails its checksum"))),
                Some(t) if t.lane != STORE_LANE => {
                    return Err(bad(boff, format!("block {b} belongs to log lane {}, not to the page store", t.lane)))
                }
                Some(t) if u64::from(t.seq) != b => {
                    return Err(bad(boff, format!("block {b} says it is block {} (a block moved or copied)", t.seq)))
                }
                Some(t) => t,
            };
            let want = (r.len as usize - img.len()).min(PAYLOAD - skip);
            if (t.used as usize) < skip + want {
                return Err(bad(boff, format!("block {b} uses {} bytes, and the image needs {}", t.used, skip + want)));
            }
            img.extend_from_slice(&block[skip..skip + want]);
            skip = 0;
        }
        self.report.images += 1;
        let stored = u32::from_le_bytes(img[0..4].try_into().expect("4 bytes"));
        let body = u32::from_le_bytes(img[4..8].try_into().expect("4 bytes")) as usize;
        if stored != r.crc {
            return Err(bad(
                at,
                "the image is not the one the table names (its checksum differs): stale or foreign".into(),
            ));
        }
        if crc32c::crc32c(&img[4..]) != stored {
            return Err(bad(at, "the image fails its checksum".into()));
        }
        if body + 8 != img.len() {
            return Err(bad(at, format!("the image says its body is {body} bytes; it is {}", img.len() - 8)));
        }
        Ok(img)
    }

    /// The translation table, every image it names, and every block of every segment.
    fn check_pages(&mut self, m: Option<&Master>, segments: &[u32]) -> Result<(), Error> {
        // Blocks the table names, by segment: checked as images; the rest below.
        let mut named: HashMap<u32, Vec<(u64, u64)>> = HashMap::new();
        let mut table_ok = false;
        let table = m.and_then(|m| m.table).map(|(seg, off, len, crc)| ImageRef { seg, off, len, crc });
        let mut pages: Vec<TablePage> = Vec::new();
        if let (Some(t), Some(m)) = (table, m) {
            match self.read_table(t) {
                Ok(((p, segs), chain)) => {
                    for r in &chain {
                        named.entry(r.seg).or_default().push((r.off, r.off + u64::from(r.len)));
                    }
                    pages = p;
                    table_ok = true;
                    self.check_segment_list(&pages, &segs, &chain, m);
                }
                Err(b) => self.bad(b),
            }
        }
        self.report.pages = pages.len() as u64;
        let mut damaged_pages: HashSet<usize> = HashSet::new();
        let mut counts: Vec<u64> = vec![0; pages.len()];
        for i in 0..pages.len() {
            for r in &pages[i].chain {
                named.entry(r.seg).or_default().push((r.off, r.off + u64::from(r.len)));
            }
            let high = pages.get(i + 1).map(|p| p.low.clone());
            match self.check_page(&pages[i], high.as_deref()) {
                Ok((n, kb, vb)) => {
                    counts[i] = n;
                    self.report.records += n;
                    self.report.key_bytes += kb;
                    self.report.value_bytes += vb;
                }
                Err(b) => {
                    damaged_pages.insert(i);
                    self.bad(b);
                }
            }
        }
        self.check_overlaps(&mut named);
        if let (Some(t), true) = (table, table_ok) {
            self.second_opinion(t, &pages, &counts, &damaged_pages);
            if let Some(m) = m {
                self.check_newer_writes(m, t)?;
            }
        } else if let Some(m) = m.filter(|m| m.table.is_none()) {
            // An empty database: no segment may hold a later generation's first block.
            for &n in segments {
                if let Some(w) = self.first_block_generation(n, 0)? {
                    self.newer_write(m, w, segment_file(n), 0)?;
                }
            }
        }
        // Without a readable table, which blocks are in use is unknown: no warning then
        // about the others (the damage is reported).
        let known = table.is_none() || table_ok;
        for &n in segments {
            self.check_segment_blocks(n, named.get(&n).map_or(&[][..], |v| v.as_slice()), known)?;
        }
        Ok(())
    }

    /// Reads the table's chain back to its base and decodes it; returns the pages, the
    /// segment list and the chain's images.
    fn read_table(&mut self, t: ImageRef) -> Result<(Table, Vec<ImageRef>), Bad> {
        let ctx = |b: Bad| Bad { what: format!("the translation table: {}", b.what), ..b };
        let mut chain = vec![t];
        let mut imgs = vec![self.read_image(t).map_err(ctx)?];
        let at = |r: &ImageRef, what: String| Bad {
            file: segment_file(r.seg),
            offset: Some(file_offset(r.off)),
            what: format!("the translation table: {what}"),
        };
        loop {
            let r = *chain.last().expect("one image");
            let img = imgs.last().expect("one image");
            match img[8] {
                KIND_TABLE => break,
                KIND_TABLE_DELTA if chain.len() < MAX_TABLE_CHAIN => {
                    let prev = decode_ref(&img[17..17 + REF_LEN]);
                    imgs.push(self.read_image(prev).map_err(ctx)?);
                    chain.push(prev);
                }
                KIND_TABLE_DELTA => return Err(at(&r, format!("a chain of over {MAX_TABLE_CHAIN} images"))),
                k => return Err(at(&r, format!("the master record names an image of kind {k}, not a table"))),
            }
        }
        let mut pages: Option<Vec<TablePage>> = None;
        let mut segs = Vec::new();
        for (img, r) in imgs.iter().zip(&chain).rev() {
            let (p, s) = decode_table(&img[IMAGE_HEADER..], pages.take()).map_err(|w| at(r, w))?;
            pages = Some(p);
            segs = s;
        }
        let pages = pages.expect("a base at least");
        let next_pid = u64::from_le_bytes(imgs[0][9..17].try_into().expect("8 bytes"));
        check_page_list(&pages, next_pid).map_err(|w| at(&t, w))?;
        Ok(((pages, segs), chain))
    }

    /// The table's segment list against the images it names: each image's segment is
    /// listed, and no segment was written by a generation after the master record's.
    fn check_segment_list(&mut self, pages: &[TablePage], listed: &[(u32, u64)], chain: &[ImageRef], m: &Master) {
        let t = chain[0];
        let list: HashMap<u32, u64> = listed.iter().copied().collect();
        if list.len() != listed.len() {
            self.damage(segment_file(t.seg), Some(file_offset(t.off)), "the translation table lists a segment twice");
        }
        let mut missing: Vec<u32> = pages
            .iter()
            .flat_map(|p| p.chain.iter())
            .chain(chain)
            .map(|r| r.seg)
            .filter(|s| !list.contains_key(s))
            .collect();
        missing.sort_unstable();
        missing.dedup();
        for s in missing {
            self.damage(
                segment_file(t.seg),
                Some(file_offset(t.off)),
                format!("the translation table names images in {} but does not list that segment", segment_file(s)),
            );
        }
        for (&s, &gen) in &list {
            // A recovery writes as generation + 1 before its master record; a table is
            // always named by a record of its generation or the one before.
            if gen > m.generation.saturating_add(2) {
                self.damage(
                    segment_file(s),
                    None,
                    format!("the table says generation {gen} wrote this segment, after MASTER's {}", m.generation),
                );
            }
        }
    }

    /// One page: each image of its chain, their links, and their entries; returns the
    /// live records, their key bytes and value bytes.
    fn check_page(&mut self, page: &TablePage, high: Option<&[u8]>) -> Result<(u64, u64, u64), Bad> {
        // Every entry of the chain, with its image's place (0: the newest).
        let mut entries: Vec<(Vec<u8>, usize, Option<u64>)> = Vec::new();
        for (w, &r) in page.chain.iter().enumerate() {
            let img = self
                .read_image(r)
                .map_err(|b| Bad { what: format!("page {} (image {w} of its chain): {}", page.pid, b.what), ..b })?;
            let at = |what: String| Bad {
                file: segment_file(r.seg),
                offset: Some(file_offset(r.off)),
                what: format!("page {} (image {w} of its chain): {what}", page.pid),
            };
            let pid = u64::from_le_bytes(img[9..17].try_into().expect("8 bytes"));
            if pid != page.pid {
                return Err(at(format!("the image belongs to page {pid}")));
            }
            let last = w + 1 == page.chain.len();
            let prev = decode_ref(&img[17..17 + REF_LEN]);
            match img[8] {
                KIND_BASE if last => {}
                KIND_DELTA if !last && prev == page.chain[w + 1] => {}
                KIND_DELTA if !last => {
                    return Err(at("the delta does not name the image after it in the chain".into()))
                }
                k => {
                    return Err(at(format!(
                        "an image of kind {k} where a {} belongs",
                        if last { "base" } else { "delta" }
                    )))
                }
            }
            for_each_entry(&img, |k, v| {
                if k < page.low.as_slice() || high.is_some_and(|h| k >= h) {
                    return Err("a key outside the page's range".into());
                }
                if last && v.is_none() {
                    return Err("a tombstone in a base".into());
                }
                entries.push((k.to_vec(), w, v.map(|v| v.len() as u64)));
                Ok(())
            })
            .map_err(at)?;
        }
        // The newest image holding a key decides it.
        entries.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(&b.1)));
        entries.dedup_by(|later, first| later.0 == first.0);
        let (mut n, mut kb, mut vb) = (0, 0, 0);
        for (k, _, v) in &entries {
            if let Some(v) = v {
                n += 1;
                kb += k.len() as u64;
                vb += v;
            }
        }
        Ok((n, kb, vb))
    }

    /// No two named images share a byte.
    fn check_overlaps(&mut self, named: &mut HashMap<u32, Vec<(u64, u64)>>) {
        let mut segs: Vec<u32> = named.keys().copied().collect();
        segs.sort_unstable();
        for s in segs {
            let spans = named.get_mut(&s).expect("listed");
            spans.sort_unstable();
            spans.dedup();
            let overlap = spans.windows(2).find(|w| w[1].0 < w[0].1).map(|w| (w[0], w[1]));
            if let Some((a, b)) = overlap {
                self.damage(
                    segment_file(s),
                    Some(file_offset(b.0)),
                    format!("two images the table names overlap (payload bytes {}..{} and {}..{})", a.0, a.1, b.0, b.1),
                );
            }
        }
    }

    /// Reads every page again through the page store itself: it must read what was
    /// verified here, and count the same records.
    fn second_opinion(&mut self, t: ImageRef, pages: &[TablePage], counts: &[u64], damaged: &HashSet<usize>) {
        let table = segment_file(t.seg);
        let store = match PageStore::open(self.storage.clone(), 4 << 20, Some(t), false) {
            Ok(s) => s,
            Err(e) => {
                self.damage(table, Some(file_offset(t.off)), format!("the page store cannot read the table: {e}"));
                return;
            }
        };
        let reads = store.reads();
        for (i, page) in pages.iter().enumerate() {
            if damaged.contains(&i) {
                continue;
            }
            let high = pages.get(i + 1).map(|p| p.low.as_slice());
            match reads.load_range(&page.low, high, &mut |_, _| Ok(())) {
                Ok(n) if n == counts[i] => {}
                Ok(n) => self.damage(
                    table.clone(),
                    None,
                    format!("page {}: the page store reads {n} records, this check {}", page.pid, counts[i]),
                ),
                Err(e) => self.damage(table.clone(), None, format!("page {}: the page store fails: {e}", page.pid)),
            }
        }
    }

    /// The generation in the trailer of block `block` of segment `n`, if it is a valid
    /// page-store block there.
    fn first_block_generation(&mut self, n: u32, block: u64) -> Result<Option<u64>, Error> {
        let Some(f) = self.segment(n) else { return Ok(None) };
        let mut b = vec![0u8; BLOCK];
        let got = f.read_at(&mut b, block * BLOCK as u64).map_err(|e| Error::io(segment_file(n), e))?;
        Ok((got == BLOCK)
            .then(|| open_block(&b, 0))
            .flatten()
            .filter(|t| t.lane == STORE_LANE && u64::from(t.seq) == block)
            .map(|t| t.lo))
    }

    /// The block after the table, where the next checkpoint writes first: a write of a
    /// later generation there means a later checkpoint finished after this master record
    /// (it was put back), unless an unfinished one left it (as the page store decides at
    /// open).
    fn check_newer_writes(&mut self, m: &Master, t: ImageRef) -> Result<(), Error> {
        let end = (t.off + u64::from(t.len)).div_ceil(PAYLOAD as u64);
        if let Some(w) = self.first_block_generation(t.seg, end)? {
            self.newer_write(m, w, segment_file(t.seg), end * BLOCK as u64)?;
        }
        Ok(())
    }

    fn newer_write(&mut self, m: &Master, w: u64, file: String, offset: u64) -> Result<(), Error> {
        let unfinished = w <= m.generation.saturating_add(2) && recovery::has_logs(&*self.storage, m.generation)?;
        if w > m.generation && !unfinished {
            self.damage(
                file,
                Some(offset),
                format!(
                    "the page store holds writes of generation {w}, newer than MASTER's {}: MASTER is older than the database",
                    m.generation
                ),
            );
        }
        Ok(())
    }

    /// Every block of segment `n` outside the named images (`spans`, payload offsets):
    /// valid, zero, or (a warning, when which blocks are used is `known`) stale bytes no
    /// state uses.
    fn check_segment_blocks(&mut self, n: u32, spans: &[(u64, u64)], known: bool) -> Result<(), Error> {
        let name = segment_file(n);
        let mut in_image: HashSet<u64> = HashSet::new();
        for &(a, b) in spans {
            in_image.extend(a / PAYLOAD as u64..b.div_ceil(PAYLOAD as u64));
        }
        let (mut valid, mut stale, mut first_stale) = (0u64, 0u64, None);
        let len = scan_blocks(&*self.storage, &name, &mut |b, block| {
            let ok = block.len() == BLOCK
                && open_block(block, 0).is_some_and(|t| t.lane == STORE_LANE && u64::from(t.seq) == b);
            if ok {
                valid += 1;
            } else if !in_image.contains(&b) && block.iter().any(|&x| x != 0) {
                stale += 1;
                first_stale.get_or_insert(b * BLOCK as u64);
            }
        })?;
        self.report.blocks += valid;
        if stale > 0 && known {
            self.warn(
                name.clone(),
                first_stale,
                format!("{stale} blocks that no image of the table uses fail their checksum (a write a crash interrupted, or damage where nothing is stored; the space is reused)"),
            );
        }
        // An image cut short is damage, reported where it is read.
        if len % BLOCK as u64 != 0 {
            self.warn(name, Some(len), "the file ends inside a block (a write a crash interrupted?)");
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

fn decode_ref(b: &[u8]) -> ImageRef {
    let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
    ImageRef {
        seg: u32_at(0),
        off: u64::from_le_bytes(b[4..12].try_into().expect("8 bytes")),
        len: u32_at(12),
        crc: u32_at(16),
    }
}

/// A bounded reader over an image's body.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.0.len() < n {
            return Err(format!("an entry needs {n} bytes, {} are left", self.0.len()));
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
    /// A count of items of at least `each` bytes, bounded by what is left.
    fn count(&mut self, each: usize, what: &str) -> Result<usize, String> {
        let n = self.u32()? as usize;
        if n.saturating_mul(each) > self.0.len() {
            return Err(format!("{n} {what} announced in {} bytes", self.0.len()));
        }
        Ok(n)
    }
    /// A LEB128 varint of at most 32 bits.
    fn varint(&mut self) -> Result<u32, String> {
        let mut n = 0u32;
        for i in 0..5 {
            let b = self.u8()?;
            if i == 4 && b > 0x0F {
                return Err("a length overflows 32 bits".into());
            }
            n |= u32::from(b & 0x7F) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(n);
            }
        }
        Ok(n)
    }
}

fn decode_table_page(r: &mut Reader<'_>) -> Result<TablePage, String> {
    let pid = r.u64()?;
    let l = r.u32()? as usize;
    if l > MAX_KEY_LEN {
        return Err(format!("page {pid}: a low key of {l} bytes"));
    }
    let low = r.take(l)?.to_vec();
    let c = r.u8()? as usize;
    if c > MAX_PAGE_CHAIN {
        return Err(format!("page {pid}: a chain of {c} images"));
    }
    let chain = (0..c).map(|_| r.take(REF_LEN).map(decode_ref)).collect::<Result<Vec<_>, _>>()?;
    Ok(TablePage { pid, low, chain })
}

/// A table image's body: a base (`old` is `None`) or a delta's edits of `old`; with the
/// segment list at its end.
fn decode_table(body: &[u8], old: Option<Vec<TablePage>>) -> Result<Table, String> {
    let mut r = Reader(body);
    let pages = match old {
        None => {
            let n = r.count(13, "pages")?;
            (0..n).map(|_| decode_table_page(&mut r)).collect::<Result<Vec<_>, _>>()?
        }
        Some(old) => {
            let n = r.u32()? as usize;
            let edits = r.count(12, "edits")?;
            let mut old = old.into_iter();
            let mut out = Vec::new();
            for _ in 0..edits {
                let keep = r.u32()? as usize;
                let remove = r.u32()? as usize;
                let add = r.count(13, "pages")?;
                if old.len() < keep.saturating_add(remove) {
                    return Err(format!("a delta keeps {keep} and removes {remove} of {} pages", old.len()));
                }
                out.extend(old.by_ref().take(keep));
                old.by_ref().take(remove).for_each(drop);
                for _ in 0..add {
                    out.push(decode_table_page(&mut r)?);
                }
            }
            out.extend(old);
            if out.len() != n {
                return Err(format!("{} pages after a delta's edits, {n} announced", out.len()));
            }
            out
        }
    };
    let m = r.count(12, "segments")?;
    let segs = (0..m).map(|_| Ok((r.u32()?, r.u64()?))).collect::<Result<Vec<_>, String>>()?;
    if !r.0.is_empty() {
        return Err(format!("{} bytes after the segment list", r.0.len()));
    }
    Ok((pages, segs))
}

/// The page list: a first page at the empty key, low keys strictly increasing, page ids
/// unique and below the next one.
fn check_page_list(pages: &[TablePage], next_pid: u64) -> Result<(), String> {
    if pages.first().is_none_or(|p| !p.low.is_empty()) {
        return Err("no page starts at the empty key".into());
    }
    if let Some(w) = pages.windows(2).find(|w| w[0].low >= w[1].low) {
        return Err(format!("pages {} and {} are out of key order", w[0].pid, w[1].pid));
    }
    let mut seen = HashSet::new();
    for p in pages {
        if p.pid >= next_pid {
            return Err(format!("page {} is at or past the next page id {next_pid}", p.pid));
        }
        if !seen.insert(p.pid) {
            return Err(format!("page id {} appears twice", p.pid));
        }
    }
    Ok(())
}

/// Calls `f` on each entry of a page image (see `pages::entries`): lengths bounded, keys
/// strictly increasing, nothing after the last entry.
fn for_each_entry(img: &[u8], mut f: impl FnMut(&[u8], Option<&[u8]>) -> Result<(), String>) -> Result<(), String> {
    let count = u32::from_le_bytes(img[IMAGE_HEADER - 4..IMAGE_HEADER].try_into().expect("4 bytes"));
    let mut r = Reader(&img[IMAGE_HEADER..]);
    let mut key: Vec<u8> = Vec::new();
    for i in 0..count {
        let at = |m: String| format!("entry {i}: {m}");
        let shared = r.varint().map_err(at)? as usize;
        let rest = r.varint().map_err(at)? as usize;
        let vtag = r.varint().map_err(at)? as usize;
        if shared > key.len() {
            return Err(at(format!("shares {shared} bytes with a key of {}", key.len())));
        }
        if shared + rest > MAX_KEY_LEN {
            return Err(at(format!("a key of {} bytes", shared + rest)));
        }
        if vtag > MAX_VALUE_LEN + 1 {
            return Err(at(format!("a value of {} bytes", vtag - 1)));
        }
        let tail = r.take(rest).map_err(at)?;
        if i > 0 && tail <= &key[shared..] {
            return Err(at("keys out of order".into()));
        }
        key.truncate(shared);
        key.extend_from_slice(tail);
        let v = match vtag {
            0 => None,
            n => Some(r.take(n - 1).map_err(at)?),
        };
        f(&key, v).map_err(at)?;
    }
    if !r.0.is_empty() {
        return Err(format!("{} bytes after the last of {count} entries", r.0.len()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Db, Options};

    fn filled(records: u32, close: bool) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::create(dir.path(), Options::default()).unwrap();
        for chunk in (0..records).collect::<Vec<_>>().chunks(500) {
            db.run(|t| {
                for &i in chunk {
                    t.put(i.to_be_bytes(), [i as u8; 24])?;
                }
                Ok(())
            })
            .unwrap();
        }
        if close {
            db.close().unwrap();
        } else {
            db.abandon_for_tests();
        }
        dir
    }

    fn flip(path: &Path, at: u64) {
        let mut b = std::fs::read(path).unwrap();
        b[at as usize] ^= 0x10;
        std::fs::write(path, b).unwrap();
    }

    fn damage(r: &CheckReport) -> Vec<&Finding> {
        r.findings.iter().filter(|f| f.severity == Severity::Damage).collect()
    }

    #[test]
    fn a_closed_and_a_crashed_database_are_healthy() {
        let dir = filled(3000, true);
        let r = check(dir.path()).unwrap();
        assert!(r.is_healthy(), "{:?}", r.findings);
        assert_eq!(r.records, 3000);
        assert_eq!((r.key_bytes, r.value_bytes), (4 * 3000, 24 * 3000));
        assert!(r.last_exit && r.pages > 1 && r.images > r.pages, "{r:?}");
        let dir = filled(700, false);
        let r = check(dir.path()).unwrap();
        assert!(r.is_healthy(), "{:?}", r.findings);
        assert!(!r.last_exit && r.log_records == 2 && r.log_lanes >= 1, "{r:?}");
    }

    #[test]
    fn the_check_writes_nothing_and_refuses_an_open_database() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::create(dir.path(), Options::default()).unwrap();
        assert!(matches!(check(dir.path()), Err(Error::Locked(_))));
        db.close().unwrap();
        let before: Vec<(String, Vec<u8>)> = {
            let mut v: Vec<_> = std::fs::read_dir(dir.path())
                .unwrap()
                .map(|e| {
                    let e = e.unwrap();
                    (e.file_name().into_string().unwrap(), std::fs::read(e.path()).unwrap())
                })
                .collect();
            v.sort();
            v
        };
        check(dir.path()).unwrap();
        let mut after: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (e.file_name().into_string().unwrap(), std::fs::read(e.path()).unwrap())
            })
            .collect();
        after.sort();
        assert_eq!(before, after);
        assert!(matches!(check(&dir.path().join("none")), Err(Error::NotFound(_))));
        let empty = tempfile::tempdir().unwrap();
        assert!(matches!(check(empty.path()), Err(Error::NotFound(_))));
    }

    /// A flipped bit anywhere in MASTER (a sample of every superblock field and padding)
    /// is damage.
    #[test]
    fn any_flipped_byte_of_master_is_damage() {
        use crate::store::master::SLOT_LEN;
        let dir = filled(10, true);
        let path = dir.path().join(MASTER);
        for at in (0..SLOT_LEN as u64 + 8).chain([100, 4000]).flat_map(|o| [o, o + BLOCK as u64]) {
            flip(&path, at);
            let r = check(dir.path()).unwrap();
            assert!(damage(&r).iter().any(|f| f.file == MASTER), "byte {at}: {:?}", r.findings);
            flip(&path, at);
        }
        assert!(check(dir.path()).unwrap().is_healthy());
    }

    /// Every block of every page segment: a flipped byte in a block an image of the table
    /// uses is damage naming that segment; elsewhere at least a warning.
    #[test]
    fn a_flipped_byte_in_any_page_block_is_found() {
        let dir = filled(3000, true);
        let mut segs: Vec<PathBuf> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.file_name().unwrap().to_str().unwrap().starts_with("pages-"))
            .collect();
        segs.sort();
        assert!(!segs.is_empty());
        let mut checked = 0;
        for seg in &segs {
            let name = seg.file_name().unwrap().to_str().unwrap().to_string();
            let blocks = std::fs::metadata(seg).unwrap().len() / BLOCK as u64;
            for b in 0..blocks {
                for at in [b * BLOCK as u64 + 50, b * BLOCK as u64 + PAYLOAD as u64 + 10] {
                    flip(seg, at);
                    let r = check(dir.path()).unwrap();
                    assert!(!r.findings.is_empty(), "{name} byte {at}");
                    assert!(r.findings.iter().all(|f| f.file == name), "{name} byte {at}: {:?}", r.findings);
                    // A store written by one close uses every block it wrote.
                    assert!(!r.is_healthy(), "{name} byte {at}: {:?}", r.findings);
                    flip(seg, at);
                    checked += 1;
                }
            }
        }
        assert!(checked > 4);
        assert!(check(dir.path()).unwrap().is_healthy());
    }

    /// No false alarm through what a database's life leaves on disk: many checkpoints
    /// (table deltas, milestones), cleaning (segments freed and reused), recycled log
    /// segments, crashes with logs of one or two generations, under NLR and ELR; and
    /// the record count matches after each close.
    #[test]
    fn healthy_through_checkpoints_cleaning_and_crashes() {
        use crate::{LogOptions, Release, StoreOptions};
        use std::collections::BTreeMap;
        for release in [Release::Nlr, Release::Elr] {
            let dir = tempfile::tempdir().unwrap();
            let log = LogOptions { release, segment_size: 64 << 10, ..LogOptions::default() };
            let store =
                StoreOptions { checkpoint_bytes: 128 << 10, page_segment_size: 32 << 10, ..StoreOptions::default() };
            let opts = Options { log, store, ..Options::default() };
            let mut model: BTreeMap<Vec<u8>, usize> = BTreeMap::new();
            let mut x = 0x9E37_79B9_7F4A_7C15u64;
            let mut next = move || {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x
            };
            for round in 0..8 {
                let db = Db::create(dir.path(), opts.clone()).unwrap();
                for _ in 0..30 {
                    let ops: Vec<(Vec<u8>, Option<usize>)> = (0..150)
                        .map(|_| {
                            let k = format!("k{:05}", next() % 4000).into_bytes();
                            let r = next();
                            (k, (r % 5 != 0).then_some((r >> 8) as usize % 120))
                        })
                        .collect();
                    db.run(|t| {
                        for (k, v) in &ops {
                            match v {
                                Some(n) => t.put(k, vec![*n as u8; *n])?,
                                None => drop(t.delete(k)?),
                            }
                        }
                        Ok(())
                    })
                    .unwrap();
                    for (k, v) in ops {
                        match v {
                            Some(n) => model.insert(k, n),
                            None => model.remove(&k),
                        };
                    }
                }
                if round % 2 == 1 {
                    db.checkpoint().unwrap();
                }
                let crash = round % 3 == 1;
                if crash {
                    db.abandon_for_tests();
                } else {
                    db.close().unwrap();
                }
                let r = check(dir.path()).unwrap();
                assert!(r.is_healthy(), "{release:?} round {round}: {:#?}", r.findings);
                if !crash {
                    assert_eq!(r.records, model.len() as u64, "{release:?} round {round}");
                    assert_eq!(r.value_bytes, model.values().sum::<usize>() as u64);
                }
            }
        }
    }

    #[test]
    fn the_decoders_refuse_what_the_store_would() {
        // Entries out of order, a tombstone count past the bytes, a varint overflow.
        let mut img = vec![0u8; IMAGE_HEADER];
        img[IMAGE_HEADER - 4..].copy_from_slice(&2u32.to_le_bytes());
        let mut ok = img.clone();
        ok.extend_from_slice(&[0, 1, 2, b'b', 9, 0, 1, 0, b'c']);
        let mut seen = Vec::new();
        for_each_entry(&ok, |k, v| {
            seen.push((k.to_vec(), v.map(<[u8]>::to_vec)));
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, vec![(b"b".to_vec(), Some(vec![9])), (b"c".to_vec(), None)]);
        let mut swapped = img.clone();
        swapped.extend_from_slice(&[0, 1, 2, b'c', 9, 0, 1, 0, b'b']);
        assert!(for_each_entry(&swapped, |_, _| Ok(())).unwrap_err().contains("out of order"));
        let mut short = img.clone();
        short.extend_from_slice(&[0, 1, 9, b'b', 1]);
        assert!(for_each_entry(&short, |_, _| Ok(())).is_err());
        let mut trailing = ok.clone();
        trailing.push(0);
        assert!(for_each_entry(&trailing, |_, _| Ok(())).is_err());
        assert!(Reader(&[0xFF, 0xFF, 0xFF, 0xFF, 0x7F]).varint().is_err());
        // A table announcing more pages than its bytes hold; out of order; duplicate ids.
        assert!(decode_table(&u32::MAX.to_le_bytes(), None).is_err());
        let page = |pid: u64, low: &[u8]| TablePage { pid, low: low.to_vec(), chain: Vec::new() };
        assert!(check_page_list(&[page(0, b""), page(1, b"b")], 2).is_ok());
        assert!(check_page_list(&[page(0, b""), page(1, b"b"), page(2, b"a")], 3).is_err());
        assert!(check_page_list(&[page(0, b""), page(0, b"b")], 3).is_err());
        assert!(check_page_list(&[page(0, b""), page(5, b"b")], 3).is_err());
        assert!(check_page_list(&[page(0, b"a")], 3).is_err());
    }
}
