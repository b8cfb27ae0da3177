//! `tsumiki dump` and `tsumiki load`: a database's records to and from the portable dump
//! format (docs/dump-format.md).

use std::io::{BufReader, BufWriter, IsTerminal, Read, Write};
use std::ops::Bound;
use std::path::{Path, PathBuf};

use tsumiki::{Db, Options};

use super::format::{DumpError, DumpReader, DumpWriter};
use super::{open_existing, progress, scan_chunks, Failure, Outcome};

/// The text after `--help`'s options: details and examples.
pub const DUMP_HELP: &str = "\
The dump is a binary stream: a header, each record (key, value, CRC32C) in ascending key
order, and an end record with the count and a digest of every record, so that `load`
detects a damaged or truncated dump (format: docs/dump-format.md). The database is read
as one consistent state: this process holds its lock (no other can write meanwhile) and
reads it in read-only transactions of a few thousand records. A FILE is written under a
temporary name, synced, then renamed: it exists only once complete. A crashed database is
recovered first, as any open does.

Examples:
  tsumiki dump ./db backup.tsdump
  tsumiki dump ./db | gzip > backup.tsdump.gz
  tsumiki dump ./db - | tsumiki load ./copy";

/// The text after `--help`'s options: details and examples.
pub const LOAD_HELP: &str = "\
Reads a dump written by `tsumiki dump` (from FILE, or standard input when FILE is omitted
or '-') and stores its records. Into a new or empty database the dump (in key order) is
bulk-loaded: its records go straight into the page store as pages built bottom-up, past
the log, in one atomic step (all of them or none, even across a crash) and in memory of a
few pages. With --merge the dump's records are added to a database that holds records,
replacing the values of keys it holds, in transactions of --batch records.

A damaged or truncated dump is refused with an error naming the byte where it fails
(exit code 1). A database that `load` created is then removed again; with --merge, the
batches committed before the damage stay (the error says how many records).

Examples:
  tsumiki load ./copy backup.tsdump
  gunzip -c backup.tsdump.gz | tsumiki load ./copy
  tsumiki load --merge ./db extra.tsdump";

/// Arguments of `tsumiki dump`.
#[derive(clap::Args)]
pub struct DumpArgs {
    /// The database directory.
    pub dir: PathBuf,
    /// Where to write the dump: standard output when omitted or '-'.
    pub file: Option<PathBuf>,
    /// No progress bar and no summary.
    #[arg(long, short)]
    pub quiet: bool,
}

/// Arguments of `tsumiki load`.
#[derive(clap::Args)]
pub struct LoadArgs {
    /// The database directory (created if there is none).
    pub dir: PathBuf,
    /// The dump to read: standard input when omitted or '-'.
    pub file: Option<PathBuf>,
    /// Load into a database that already holds records (keys in both get the dump's
    /// values).
    #[arg(long)]
    pub merge: bool,
    /// Records per transaction with --merge into a database holding records (otherwise
    /// the dump, in key order, goes straight into the page store in one step: all or none).
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u64).range(1..))]
    pub batch: u64,
    /// No progress bar and no summary.
    #[arg(long, short)]
    pub quiet: bool,
}

fn stdio(file: &Option<PathBuf>) -> Option<&Path> {
    file.as_deref().filter(|f| f.as_os_str() != "-")
}

/// `tsumiki dump`.
pub fn dump(a: &DumpArgs) -> Outcome {
    let file = stdio(&a.file);
    if file.is_none() && std::io::stdout().is_terminal() {
        return Err(Failure::new(
            "refusing to write a binary dump to a terminal: name a FILE or redirect standard output",
        ));
    }
    let db = open_existing(&a.dir, true)?;
    // A file is written beside its final name and renamed once complete.
    let (out, tmp): (Box<dyn Write>, Option<tempfile::NamedTempFile>) = match file {
        Some(f) => {
            let parent = f.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
            let t = tempfile::Builder::new()
                .prefix(".tsumiki-dump-")
                .tempfile_in(parent)
                .map_err(|e| Failure::new(format!("creating a file in {}: {e}", parent.display())))?;
            let w = t.reopen().map_err(|e| Failure::new(format!("{}: {e}", f.display())))?;
            (Box::new(w), Some(t))
        }
        None => (Box::new(std::io::stdout().lock()), None),
    };
    let target = file.map_or("standard output".to_string(), |f| f.display().to_string());
    let write_err = |e: std::io::Error| Failure::new(format!("writing {target}: {e}"));
    let bar = progress(a.quiet, None, "dump");
    let mut w = DumpWriter::new(BufWriter::with_capacity(1 << 20, out)).map_err(write_err)?;
    scan_chunks(&db, Bound::Unbounded, Bound::Unbounded, false, |k, v| {
        w.record(k, v).map_err(write_err)?;
        bar.inc(1);
        Ok(true)
    })?;
    let bytes = w.bytes();
    let (out, n) = w.finish().map_err(write_err)?;
    drop(out.into_inner().map_err(|e| write_err(e.into_error()))?);
    if let (Some(t), Some(f)) = (tmp, file) {
        t.as_file().sync_all().map_err(write_err)?;
        t.persist(f).map_err(|e| write_err(e.error))?;
        // The rename, durable too.
        let parent = f.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        std::fs::File::open(parent).and_then(|d| d.sync_all()).map_err(write_err)?;
    }
    bar.finish_and_clear();
    db.close()?;
    if !a.quiet {
        eprintln!("dumped {n} records ({bytes} bytes) from {}", a.dir.display());
    }
    Ok(0)
}

/// A dump that cannot be read: damaged or truncated (exit code 1), or an I/O error.
fn invalid(e: DumpError) -> Failure {
    match e {
        DumpError::Invalid(m) => Failure { message: m, code: 1 },
        DumpError::Io(e) => Failure::new(format!("reading the dump: {e}")),
    }
}

/// `tsumiki load`.
pub fn load(a: &LoadArgs) -> Outcome {
    let (input, len): (Box<dyn Read>, Option<u64>) = match stdio(&a.file) {
        Some(f) => {
            let file = std::fs::File::open(f).map_err(|e| Failure::new(format!("{}: {e}", f.display())))?;
            let len = file.metadata().ok().map(|m| m.len());
            (Box::new(file), len)
        }
        None => (Box::new(std::io::stdin().lock()), None),
    };
    // The header first: something that is not a dump creates no database.
    let mut reader = DumpReader::new(BufReader::with_capacity(1 << 20, input)).map_err(invalid)?;
    let existed = a.dir.exists();
    let before: Vec<std::ffi::OsString> = if existed {
        std::fs::read_dir(&a.dir)?.filter_map(|e| e.ok().map(|e| e.file_name())).collect()
    } else {
        Vec::new()
    };
    let had_db = a.dir.join("MASTER").exists();
    let mut db =
        Db::create(&a.dir, Options::default()).map_err(|e| Failure::new(format!("{}: {e}", a.dir.display())))?;
    let holds_records = had_db && db.view(|r| Ok(r.iter().next().transpose()?.is_some()))?;
    if holds_records && !a.merge {
        return Err(Failure::new(format!(
            "{} already holds records: load into a new or empty database, or pass --merge",
            a.dir.display()
        )));
    }
    let bar = progress(a.quiet, len, "load");
    let mut loaded = 0u64;
    let result = if holds_records {
        merge_in_batches(&db, &mut reader, a.batch, &mut loaded, &|n| {
            bar.set_position(if len.is_some() { n.1 } else { n.0 })
        })
    } else {
        // A dump is in key order: its records go straight into the pages, all or none.
        let failed: std::cell::Cell<Option<Failure>> = std::cell::Cell::new(None);
        let records = std::iter::from_fn(|| match reader.next_record() {
            Ok(Some(r)) => {
                if reader.count() % 4096 == 0 {
                    bar.set_position(if len.is_some() { reader.offset() } else { reader.count() });
                }
                Some(Ok(r))
            }
            Ok(None) => None,
            Err(e) => {
                failed.set(Some(invalid(e)));
                Some(Err(tsumiki::Error::InvalidInput("the dump could not be read".into())))
            }
        });
        match db.try_bulk_load(records) {
            Ok(n) => {
                loaded = n;
                Ok(())
            }
            Err(e) => Err(failed.take().unwrap_or_else(|| Failure::new(format!("loading the dump: {e}")))),
        }
    };
    bar.finish_and_clear();
    match result {
        Ok(()) => {
            db.close()?;
            if !a.quiet {
                eprintln!("loaded {loaded} records into {}", a.dir.display());
            }
            Ok(0)
        }
        Err(mut f) => {
            drop(db);
            if had_db {
                f.message += &format!(
                    " ({loaded} records before it were loaded into {}, which holds them now)",
                    a.dir.display()
                );
            } else {
                f.message += &match remove_created(&a.dir, existed, &before) {
                    Ok(()) => format!(" (nothing was loaded: the new database {} was removed)", a.dir.display()),
                    Err(e) => format!(
                        " ({loaded} records were loaded into the new database {}, which could not be removed: {e})",
                        a.dir.display()
                    ),
                };
            }
            Err(f)
        }
    }
}

/// `tsumiki load --merge` into a database that holds records: `batch` records per
/// transaction (the dump's keys may fall anywhere among the database's), the last batch
/// committed only once the end record has verified the whole dump. `progress` gets the
/// records committed and the dump's offset.
fn merge_in_batches<R: Read>(
    db: &Db,
    reader: &mut DumpReader<R>,
    batch: u64,
    loaded: &mut u64,
    progress: &dyn Fn((u64, u64)),
) -> Result<(), Failure> {
    let mut txn = db.begin();
    let mut in_txn = 0u64;
    while let Some((k, v)) = reader.next_record().map_err(invalid)? {
        txn.put(&k, &v).map_err(|e| Failure::new(format!("record {}: {e}", reader.count())))?;
        in_txn += 1;
        if in_txn == batch {
            std::mem::replace(&mut txn, db.begin()).commit()?;
            *loaded += in_txn;
            in_txn = 0;
            progress((*loaded, reader.offset()));
        }
    }
    txn.commit()?;
    *loaded += in_txn;
    Ok(())
}

/// Removes the database `load` created in `dir`: the directory if it made it, else the
/// entries that were not there before.
fn remove_created(dir: &Path, existed: bool, before: &[std::ffi::OsString]) -> std::io::Result<()> {
    if !existed {
        return std::fs::remove_dir_all(dir);
    }
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        if !before.contains(&e.file_name()) {
            std::fs::remove_file(e.path())?;
        }
    }
    Ok(())
}
