//! `tsumiki compact DIR`: rewrites a database into a fresh directory and swaps it in.
//!
//! Why a rewrite rather than checkpoints: the page store appends, and reclaims space in
//! two ways, neither of which shrinks a database that lost most of its records. A page
//! is consolidated (its deltas and tombstones dropped) only when a change touches it, and
//! cleaning relocates segments only while the files hold more than about 1.1 times the
//! live images, where "live" counts every image the table names, delta tombstones
//! included. After 190,000 of 200,000 records were deleted, the pages still named 4.6 MB
//! of images (the tombstones) for 0.3 MB of records, and checkpoints freed nothing. A
//! copy holds only the records, as consolidated pages.

use std::ops::Bound;
use std::path::Path;

use tsumiki::{Db, Durability, LogOptions, Options};

use super::{dir_bytes, open_existing, scan_chunks, Failure, Outcome};

/// The text after `--help`'s options: details and examples.
pub const HELP: &str = "\
Copies every record into a new database beside DIR (read as one consistent state under
DIR's lock, written in batches; what compacts of DIR that were killed left beside it is
removed first), verifies the copy with `check` (healthy, the same record
count), then exchanges the two directories in one atomic rename (Linux renameat2
RENAME_EXCHANGE) and removes the old one. At every moment DIR holds a complete database:
the old one or the copy. Needs free space for the copy. DIR must hold only the database's
files, and no other process may have it open (if one opens it during the copy, nothing
is swapped).

Why it is needed: the page store reclaims space as it goes (pages are consolidated when
changed, and cleaning relocates segments while the files exceed about 1.1 times the live
images), but a database that lost most of its records keeps the tombstones of the pages
no later change touches: 200,000 records of which 190,000 were deleted kept 4.6 MB of
page images for 0.3 MB of records. The copy holds only the records.

Examples:
  tsumiki compact ./db";

/// Arguments of `tsumiki compact`.
#[derive(clap::Args)]
pub struct CompactArgs {
    /// The database directory.
    pub dir: std::path::PathBuf,
    /// Print nothing.
    #[arg(long, short)]
    pub quiet: bool,
}

/// Records per transaction of the copy.
const BATCH: u64 = 4096;

/// Whether `name` is a file a database directory may hold.
fn ours(name: &str) -> bool {
    let stem = name.strip_suffix(".tmp").unwrap_or(name);
    stem == "MASTER" || stem.starts_with("wal-") || stem.starts_with("pages-") || stem.starts_with("lanes-")
}

/// `tsumiki compact`.
pub fn run(a: &CompactArgs) -> Outcome {
    let fail = |what: &str, e: &dyn std::fmt::Display| Failure::new(format!("{what}: {e}"));
    // The real directory: the exchange renames it, not a link to it.
    let dir = std::fs::canonicalize(&a.dir).map_err(|e| fail(&a.dir.display().to_string(), &e))?;
    let db = open_existing(&dir, true)?;
    for e in std::fs::read_dir(&dir).map_err(|e| fail("listing the database", &e))? {
        let name = e.map_err(|e| fail("listing the database", &e))?.file_name();
        if !name.to_str().is_some_and(ours) {
            return Err(Failure::new(format!(
                "{} holds {}, which is not a database file: compact replaces the whole directory, so move it out first",
                dir.display(),
                name.to_string_lossy()
            )));
        }
    }
    let before = dir_bytes(&dir).map_err(|e| fail("measuring the database", &e))?;
    let parent = dir.parent().ok_or_else(|| Failure::new("the database directory has no parent"))?;
    let base = dir.file_name().map_or("db".into(), |n| n.to_string_lossy().into_owned());
    let prefix = format!(".{base}.compact-");
    let removed = tsumiki::storage::remove_dead_copies(parent, &prefix)
        .map_err(|e| fail("removing an interrupted compact's copy", &e))?;
    if removed > 0 && !a.quiet {
        eprintln!("removed {removed} leftover copies of interrupted compacts beside {}", dir.display());
    }
    let tmp = tempfile::Builder::new()
        .prefix(&prefix)
        .tempdir_in(parent)
        .map_err(|e| fail(&format!("creating the copy in {}", parent.display()), &e))?;
    // Held while the temporary directory exists, so that a later compact can tell it from
    // a killed one's (see `remove_dead_copies`). The copy is a database of its own inside
    // it, which locks its own directory.
    let hold = std::fs::File::open(tmp.path()).map_err(|e| fail("locking the copy", &e))?;
    hold.try_lock().map_err(|e| fail("locking the copy", &e))?;
    let copy_dir = tmp.path().join("db");
    let copied = copy(&db, &copy_dir)?;
    db.close()?;
    // Nothing may have written the database since: take its lock (held through the
    // exchange), and compare MASTER, which every read-write open rewrites, with what the
    // copy saw. (The copy's own open is read-only: its shared lock kept writers out
    // during the copy, and it wrote nothing.)
    let master = std::fs::read(dir.join("MASTER")).map_err(|e| fail("reading MASTER", &e))?;
    let lock = std::fs::File::open(&dir).map_err(|e| fail("locking the database", &e))?;
    if lock.try_lock().is_err() || std::fs::read(dir.join("MASTER")).ok().as_ref() != Some(&master) {
        return Err(Failure::new("the database was opened by another process during the copy: nothing was changed"));
    }
    let report = tsumiki::check(&copy_dir).map_err(|e| fail("checking the copy", &e))?;
    if !report.is_healthy() || report.records != copied {
        return Err(Failure::new(format!(
            "the copy does not check out ({} records of {copied}, {} problems): nothing was changed",
            report.records,
            report.damage()
        )));
    }
    if let Ok(m) = std::fs::metadata(&dir) {
        let _ = std::fs::set_permissions(&copy_dir, m.permissions());
    }
    exchange(&dir, &copy_dir).map_err(|e| fail("swapping the copy in", &e))?;
    std::fs::File::open(parent).and_then(|d| d.sync_all()).map_err(|e| fail("syncing the parent directory", &e))?;
    std::fs::File::open(tmp.path()).and_then(|d| d.sync_all()).map_err(|e| fail("syncing the copy's directory", &e))?;
    drop(lock);
    // The old database, now at the temporary name.
    let old = tmp.path().to_path_buf();
    tmp.close().map_err(|e| fail(&format!("removing the old database at {}", old.display()), &e))?;
    drop(hold);
    let after = dir_bytes(&dir).map_err(|e| fail("measuring the database", &e))?;
    if !a.quiet {
        println!("{}: {before} bytes before, {after} after ({copied} records)", a.dir.display());
    }
    Ok(0)
}

/// Copies every record of `db` into a new database in `to`; returns the count.
fn copy(db: &Db, to: &Path) -> Result<u64, Failure> {
    // Durable at its close; the old database stays until then.
    let opts =
        Options { log: LogOptions { durability: Durability::Buffered, ..LogOptions::default() }, ..Options::default() };
    let copy = Db::create(to, opts)?;
    let mut txn = copy.begin();
    let mut n = 0u64;
    scan_chunks(db, Bound::Unbounded, Bound::Unbounded, false, |k, v| {
        txn.put(k, v)?;
        n += 1;
        if n.is_multiple_of(BATCH) {
            std::mem::replace(&mut txn, copy.begin()).commit()?;
        }
        Ok(true)
    })?;
    txn.commit()?;
    copy.close()?;
    Ok(n)
}

/// Exchanges directories `a` and `b` atomically.
#[cfg(target_os = "linux")]
fn exchange(a: &Path, b: &Path) -> std::io::Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let ca = CString::new(a.as_os_str().as_bytes())?;
    let cb = CString::new(b.as_os_str().as_bytes())?;
    // SAFETY: two valid NUL-terminated paths that outlive the call; renameat2 reads them
    // and touches no other memory. Called through syscall(2) so that it needs no
    // particular C library version.
    let r = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            ca.as_ptr(),
            libc::AT_FDCWD,
            cb.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(not(target_os = "linux"))]
fn exchange(_a: &Path, _b: &Path) -> std::io::Result<()> {
    Err(std::io::Error::new(std::io::ErrorKind::Unsupported, "compact needs Linux's renameat2 (RENAME_EXCHANGE)"))
}
