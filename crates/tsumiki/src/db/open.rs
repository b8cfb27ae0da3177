//! [`OpenOptions`]: the rules of dbm's open flags, once, for the C library and the Python
//! module (and any embedder that wants them); the table of the rules is on [`OpenOptions`].

use std::borrow::Borrow;
use std::io;
use std::path::Path;
use std::sync::Arc;

use super::{Db, Options};
use crate::error::Error;
use crate::wal::storage::{DirStorage, Storage};

/// Keys deleted per transaction by a truncating open.
const TRUNCATE_BATCH: usize = 1024;

/// How to open a database directory: the dbm open flags (`O_CREAT`, `O_EXCL`, `O_TRUNC`,
/// `O_RDONLY`, the mode; Python's `'r'`, `'w'`, `'c'`, `'n'`), with the rules below. Both
/// bindings open through it, so they agree.
///
/// What an open does, by what is at the path (`create` stands for `create` or
/// `create_new`):
///
/// | at the path | no flag | `create` | `create` + `truncate` | `create_new` |
/// |---|---|---|---|---|
/// | nothing | `NotFound` | a new database (directory made with `mode`) | the same | the same |
/// | an empty file | `NotFound` | replaced by a new database | the same | `AlreadyExists` |
/// | an empty directory | `NotFound` | a new database in it | the same | `AlreadyExists` |
/// | a tsumiki database | opened | opened | opened and emptied | `AlreadyExists` |
/// | a non-empty directory without a database | `NotFound` | a new database among its files | `AlreadyExists` | `AlreadyExists` |
/// | a non-empty file, or anything else | `NotFound` | `AlreadyExists` | `AlreadyExists` | `AlreadyExists` |
///
/// `truncate` without `create` empties an existing database and is otherwise as no flag;
/// `truncate` with `read_only` is [`Error::Config`]. Truncation runs through the engine, a
/// batch of keys per transaction, then a checkpoint: only a proven tsumiki database is
/// ever emptied, and no other file is deleted except an empty one replaced by `create`.
///
/// ```
/// # use tsumiki::{OpenOptions, Options, ErrorKind};
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("db");
/// let err = OpenOptions::new().open(&path, Options::default()).err().unwrap();
/// assert_eq!(err.kind(), ErrorKind::NotFound);
/// let db = OpenOptions::new().create(true).mode(0o700).open(&path, Options::default()).unwrap();
/// db.run(|t| t.put("k", "v")).unwrap();
/// db.close().unwrap();
/// // Python's 'n', C's O_CREAT|O_TRUNC: the same database, emptied.
/// let db = OpenOptions::new().create(true).truncate(true).open(&path, Options::default()).unwrap();
/// assert_eq!(db.begin().get("k").unwrap(), None);
/// ```
#[derive(Debug, Clone)]
pub struct OpenOptions {
    read_only: bool,
    create: bool,
    create_new: bool,
    truncate: bool,
    mode: u32,
    #[cfg(feature = "test-plants")]
    write_quota: Option<u64>,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions::new()
    }
}

impl OpenOptions {
    /// Open an existing database for reading and writing; nothing created, nothing emptied.
    pub fn new() -> OpenOptions {
        OpenOptions {
            read_only: false,
            create: false,
            create_new: false,
            truncate: false,
            mode: 0o777,
            #[cfg(feature = "test-plants")]
            write_quota: None,
        }
    }

    /// Refuse every write ([`Options::read_only`]): the open writes nothing either, so it
    /// works on read-only media, and its lock is shared with other read-only opens.
    pub fn read_only(&mut self, on: bool) -> &mut Self {
        self.read_only = on;
        self
    }

    /// Create the database if there is none (`O_CREAT`, Python's `'c'`).
    pub fn create(&mut self, on: bool) -> &mut Self {
        self.create = on;
        self
    }

    /// Create the database, failing with [`Error::AlreadyExists`] if anything is at the
    /// path (`O_CREAT|O_EXCL`); implies [`create`](Self::create).
    pub fn create_new(&mut self, on: bool) -> &mut Self {
        self.create_new = on;
        self
    }

    /// Empty an existing database (`O_TRUNC`; with `create`, Python's `'n'`).
    pub fn truncate(&mut self, on: bool) -> &mut Self {
        self.truncate = on;
        self
    }

    /// The permission bits of a directory this open creates, before the umask, with
    /// search (x) added wherever read (r) is, as a directory needs (0o644 gives 0o755).
    /// The database's files are always 0o600. Default 0o777.
    pub fn mode(&mut self, mode: u32) -> &mut Self {
        self.mode = mode;
        self
    }

    /// Test only (the cargo feature `test-plants`): writes fail with `ENOSPC` once `bytes`
    /// have been written through this open (a full disk, deterministically).
    #[cfg(feature = "test-plants")]
    pub fn write_quota_for_tests(&mut self, bytes: Option<u64>) -> &mut Self {
        self.write_quota = bytes;
        self
    }

    /// Opens the database at `path` by these rules, with `opts` (whose `read_only` these
    /// options may set).
    pub fn open(&self, path: impl AsRef<Path>, opts: Options) -> Result<Db, Error> {
        self.open_impl(path.as_ref(), opts, |_| None, |db| db)
    }

    /// [`open`](Self::open) for a caller that shares one open [`Db`] among its handles (the
    /// engine refuses a second open of a directory): once the rules allow opening an
    /// existing database, `shared` is asked for one the caller already has open at the
    /// canonical path, which is then used (and emptied if truncating) instead of a new
    /// open. [`read_only`](Self::read_only) is then the caller's to enforce on its handle
    /// (it still refuses `truncate`), since the caller's other handles may write. A
    /// database this opens anew is opened read-only when [`read_only`](Self::read_only)
    /// is set (so that it works on read-only media); a shared one opened read-only cannot
    /// serve an open that may write ([`Error::Locked`], as another process's would be,
    /// until the caller closes it).
    pub fn open_shared(
        &self,
        path: impl AsRef<Path>,
        opts: Options,
        shared: impl FnOnce(&Path) -> Option<Arc<Db>>,
    ) -> Result<Arc<Db>, Error> {
        self.open_impl(path.as_ref(), opts, shared, Arc::new)
    }

    fn open_impl<D: Borrow<Db>>(
        &self,
        path: &Path,
        mut opts: Options,
        shared: impl FnOnce(&Path) -> Option<D>,
        wrap: impl FnOnce(Db) -> D,
    ) -> Result<D, Error> {
        let create = self.create || self.create_new;
        if path.as_os_str().is_empty() {
            return Err(Error::Config("the database path is empty".into()));
        }
        opts.read_only |= self.read_only;
        if self.truncate && opts.read_only {
            return Err(Error::Config("truncating needs write access, not read-only".into()));
        }
        opts.validate()?;
        let shown = path.display();
        let exists = |what: &str| Err(Error::AlreadyExists(format!("{shown} exists ({what})")));
        let no_db = |what: &str| Err(Error::NotFound(format!("{shown} {what} (create makes a database there)")));
        let found = match classify(path)? {
            Found::Nothing => {
                if !create {
                    return no_db("does not exist");
                }
                make_dir(path, self.mode, self.create_new)?;
                false
            }
            _ if self.create_new => return exists("and create_new was asked"),
            Found::EmptyFile => {
                if !create {
                    return no_db("is an empty file, not a tsumiki database");
                }
                std::fs::remove_file(path).map_err(|e| Error::io(format!("replacing the empty file {shown}"), e))?;
                make_dir(path, self.mode, false)?;
                false
            }
            Found::EmptyDir => {
                if !create {
                    return no_db("is an empty directory: it holds no tsumiki database");
                }
                false
            }
            Found::Database => true,
            Found::OtherDir if !create => return no_db("holds no tsumiki database"),
            Found::OtherDir if self.truncate => {
                return exists(
                    "and holds no tsumiki database; truncating replaces only a tsumiki database, an empty \
                     directory or an empty file",
                );
            }
            Found::OtherDir => false,
            Found::Other if !create => return no_db("is not a tsumiki database directory"),
            Found::Other => return exists("and is not a tsumiki database directory; only an empty file is replaced"),
        };
        let canonical = std::fs::canonicalize(path).map_err(|e| Error::io(format!("resolving {shown}"), e))?;
        let db = match found.then(|| shared(&canonical)).flatten() {
            Some(db) if db.borrow().is_read_only() && !opts.read_only => {
                return Err(Error::Locked(format!(
                    "database {} is open read-only in this process: close it before opening it to write",
                    canonical.display()
                )));
            }
            Some(db) => db,
            // Read-only: files opened O_RDONLY, nothing created or written (a full disk
            // changes nothing there, so a write quota has nothing to count).
            None if opts.read_only => wrap(Db::open_with_storage(super::dir_storage(&canonical, true)?, opts)?),
            None => {
                let storage = DirStorage::new(&canonical)
                    .map_err(|e| Error::io(format!("opening directory {}", canonical.display()), e))?;
                #[cfg(feature = "test-plants")]
                let storage: Arc<dyn Storage> = match self.write_quota {
                    Some(q) => Arc::new(quota::Quota { inner: storage, left: Arc::new(q.into()) }),
                    None => Arc::new(storage),
                };
                #[cfg(not(feature = "test-plants"))]
                let storage: Arc<dyn Storage> = Arc::new(storage);
                wrap(Db::open_with_storage(storage, opts)?)
            }
        };
        if self.truncate && found {
            empty(db.borrow())?;
        }
        Ok(db)
    }
}

/// What is at a path.
enum Found {
    Nothing,
    EmptyFile,
    EmptyDir,
    /// A directory holding a `MASTER` file.
    Database,
    /// A non-empty directory without one.
    OtherDir,
    /// A non-empty file, a device, a socket...
    Other,
}

fn classify(path: &Path) -> Result<Found, Error> {
    let io = |what: &str, e| Error::io(format!("{what} {}", path.display()), e);
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Found::Nothing),
        Err(e) => return Err(io("looking at", e)),
    };
    if meta.is_file() {
        return Ok(if meta.len() == 0 { Found::EmptyFile } else { Found::Other });
    }
    if !meta.is_dir() {
        return Ok(Found::Other);
    }
    match std::fs::symlink_metadata(path.join(crate::store::master::MASTER)) {
        Ok(_) => return Ok(Found::Database),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io("looking into", e)),
    }
    let mut entries = std::fs::read_dir(path).map_err(|e| io("listing", e))?;
    Ok(if entries.next().is_none() { Found::EmptyDir } else { Found::OtherDir })
}

/// The mode of a directory made for a database whose `mode` is given: x wherever r.
pub(crate) fn dir_mode(mode: u32) -> u32 {
    let m = mode & 0o777;
    m | ((m & 0o444) >> 2)
}

/// Makes the directory `path` (its parent must exist). Someone else making it meanwhile is
/// fine, unless `exclusive`.
fn make_dir(path: &Path, mode: u32, exclusive: bool) -> Result<(), Error> {
    let mut b = std::fs::DirBuilder::new();
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut b, dir_mode(mode));
    #[cfg(not(unix))]
    let _ = mode;
    match b.create(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && exclusive => {
            Err(Error::AlreadyExists(format!("{} exists (made meanwhile by someone else)", path.display())))
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && path.is_dir() => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            Err(Error::NotFound(format!("{} cannot be created: its parent directory does not exist", path.display())))
        }
        Err(e) => Err(Error::io(format!("creating directory {}", path.display()), e)),
    }
}

/// Deletes every key, a batch per transaction, then checkpoints (a truncating open).
fn empty(db: &Db) -> Result<(), Error> {
    loop {
        let deleted = db.run(|t| {
            let keys: Vec<Vec<u8>> =
                t.iter().take(TRUNCATE_BATCH).map(|r| r.map(|(k, _)| k)).collect::<Result<_, _>>()?;
            for k in &keys {
                t.delete(k)?;
            }
            Ok(keys.len())
        })?;
        if deleted < TRUNCATE_BATCH {
            return db.checkpoint();
        }
    }
}

/// A full disk, simulated for the tests (feature `test-plants` only).
#[cfg(feature = "test-plants")]
mod quota {
    use std::io;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    use crate::wal::storage::{DirStorage, Storage, StorageFile};

    /// A directory whose writes fail with `ENOSPC` once a number of bytes were written
    /// ([`super::OpenOptions::write_quota_for_tests`]).
    pub(super) struct Quota {
        pub(super) inner: DirStorage,
        pub(super) left: Arc<AtomicU64>,
    }

    fn take(left: &AtomicU64, n: usize) -> io::Result<()> {
        left.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |l| l.checked_sub(n as u64))
            .map(drop)
            .map_err(|_| io::Error::from_raw_os_error(libc::ENOSPC))
    }

    impl Storage for Quota {
        fn list(&self) -> io::Result<Vec<String>> {
            self.inner.list()
        }

        fn open(&self, name: &str, create: bool) -> io::Result<Box<dyn StorageFile>> {
            Ok(Box::new(QuotaFile { inner: self.inner.open(name, create)?, left: self.left.clone() }))
        }

        fn remove(&self, name: &str) -> io::Result<()> {
            self.inner.remove(name)
        }

        fn rename(&self, from: &str, to: &str) -> io::Result<()> {
            self.inner.rename(from, to)
        }

        fn sync_dir(&self) -> io::Result<()> {
            self.inner.sync_dir()
        }

        fn lock(&self) -> io::Result<Box<dyn Send + Sync>> {
            self.inner.lock()
        }

        fn lock_shared(&self) -> io::Result<Box<dyn Send + Sync>> {
            self.inner.lock_shared()
        }
    }

    struct QuotaFile {
        inner: Box<dyn StorageFile>,
        left: Arc<AtomicU64>,
    }

    impl StorageFile for QuotaFile {
        fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<usize> {
            self.inner.read_at(buf, off)
        }

        fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
            take(&self.left, buf.len())?;
            self.inner.write_at(buf, off)
        }

        fn sync_data(&self) -> io::Result<()> {
            self.inner.sync_data()
        }

        fn len(&self) -> io::Result<u64> {
            self.inner.len()
        }

        fn set_direct(&self) -> bool {
            self.inner.set_direct()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::dir_mode;

    #[test]
    fn dir_mode_adds_x_where_r() {
        assert_eq!(dir_mode(0o644), 0o755);
        assert_eq!(dir_mode(0o600), 0o700);
        assert_eq!(dir_mode(0o640), 0o750);
        assert_eq!(dir_mode(0o200), 0o200);
        assert_eq!(dir_mode(0o10644), 0o755); // no special bits
    }
}
