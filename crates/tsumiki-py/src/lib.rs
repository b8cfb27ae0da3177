//! The Python module `tsumiki`: a tsumiki database behind Python's `dbm` interface, with
//! transactions as an extension.
//!
//! Every mapping operation on a [`Database`] is its own durable, serializable transaction
//! (conflicts are retried, as [`Db::run`] does); `db.transaction()` groups several into one
//! [`Transaction`]. Engine calls that may block (opens, commits and their fsync, scans,
//! checkpoints, close) run with the GIL released, so Python threads run transactions at
//! the same time.
//!
//! Errors map from the engine's [`ErrorKind`] as the C library's codes do: a conflict is
//! `tsumiki.ConflictError`, anything else `tsumiki.error` (an `OSError`), both with the
//! errno of [`Error::errno`], which is the C library's errno for the same failure (a full
//! disk is `ENOSPC`, also from a database it poisoned; a missing database `ENOENT`; one
//! open elsewhere `EAGAIN`; a transaction over the log record limit `EFBIG`; a damaged
//! one `EIO`). `open`'s flags follow [`OpenOptions`]'s rules, which the C library shares.
//!
//! Locking, so that nothing waits for the GIL while holding a lock another thread needs
//! with the GIL held: every lock below is taken only inside `Python::detach`, and no code
//! holding one ever attaches to Python. Lock order: `Database::inner`, then
//! `Database::txns`, then a transaction's state.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, Weak};

use pyo3::exceptions::{PyKeyError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyList, PyMemoryView, PyString};
use tsumiki::{Db, Durability, Error, ErrorKind, OpenOptions, Options, OwnedTxn, ReadTxn, Txn};

/// The exceptions, in a module of their own: `error` keeps dbm's lowercase name.
mod exc {
    #![allow(non_camel_case_types)]
    use pyo3::exceptions::PyOSError;

    pyo3::create_exception!(
        tsumiki,
        error,
        PyOSError,
        "Raised for every failure of the database: a missing database, a closed handle, a \
         write to a database opened read-only, I/O errors. A subclass of OSError, like \
         dbm.error's members, with the errno the C library sets for the same failure \
         (ENOSPC for a full disk, ENOENT for a missing database, EEXIST, EPERM, EAGAIN, \
         EFBIG for a transaction over the log record limit, EIO...)."
    );
    pyo3::create_exception!(
        tsumiki,
        ConflictError,
        error,
        "A transaction conflicted with another one and was rolled back; running it again \
         may succeed."
    );
}
use exc::{error, ConflictError};

/// How many keys an iterator fetches per batch (each batch of a database's iterator is a
/// transaction of its own).
const BATCH: usize = 1024;

/// Locks `m`, ignoring poisoning: no code holding these locks panics, and a poisoned lock
/// must not turn into a panic that crosses into Python.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What went wrong while detached from Python, turned into an exception once attached.
enum Failure {
    /// The engine's error.
    Engine(Error),
    /// The database handle was closed.
    Closed,
    /// The transaction is over; why.
    Ended(Ended),
    /// The engine's error at `open`, which names the path in the exception.
    Open(Error, PathBuf),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure::Engine(e)
    }
}

impl From<Failure> for PyErr {
    fn from(f: Failure) -> PyErr {
        match f {
            Failure::Engine(e) => engine_error(e),
            Failure::Closed => error::new_err("the tsumiki database has already been closed"),
            Failure::Ended(Ended::Conflicted) => {
                ConflictError::new_err("the transaction conflicted with another one and was rolled back")
            }
            Failure::Ended(why) => error::new_err(why.message()),
            Failure::Open(e, path) => {
                let msg = e.to_string();
                // Name the path in the exception's filename, as the os module does.
                error::new_err((e.errno(), msg, path.to_string_lossy().into_owned()))
            }
        }
    }
}

/// The Python exception for an engine error (see the module's docs): a conflict (or a
/// transaction a conflict ended) is a `ConflictError`, anything else an `error`, both
/// with the errno the C library would set.
fn engine_error(e: Error) -> PyErr {
    let (errno, msg) = (e.errno(), e.to_string());
    match e.kind() {
        ErrorKind::Conflict | ErrorKind::TxnFinished => ConflictError::new_err((errno, msg)),
        _ => error::new_err((errno, msg)),
    }
}

/// The bytes of a key or value: `bytes`, `bytearray`, `memoryview`, or `str` (as UTF-8).
fn to_bytes(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<u8>> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(b.as_bytes().to_vec());
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(s.to_cow()?.as_bytes().to_vec());
    }
    if let Ok(b) = obj.cast::<PyByteArray>() {
        return Ok(b.to_vec());
    }
    if obj.is_instance_of::<PyMemoryView>() {
        // The limited API (abi3) lacks the buffer protocol before 3.11: let Python copy.
        let b = obj.call_method0("tobytes")?;
        return Ok(b.cast::<PyBytes>()?.as_bytes().to_vec());
    }
    let ty = obj.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into());
    Err(PyTypeError::new_err(format!("tsumiki {what} must be bytes or str, not {ty}")))
}

/// A key or value given as an argument (see [`to_bytes`]).
struct Data(Vec<u8>);

impl<'a, 'py> FromPyObject<'a, 'py> for Data {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        to_bytes(&obj, "values").map(Data)
    }
}

/// The smallest key after `key`: where the next batch of an iteration starts.
fn successor(mut key: Vec<u8>) -> Vec<u8> {
    key.push(0);
    key
}

/// The reads of a read-write transaction ([`Txn`]) and of a read-only one ([`ReadTxn`],
/// which `Db::view` runs to completion however busy the writers).
trait Reads {
    /// The value of `key`, if present.
    fn value(&self, key: &[u8]) -> Result<Option<Vec<u8>>, Error>;
    /// Up to `limit` keys from `start` on (all of them when `limit` is `None`), in order.
    fn keys_from(&self, start: &[u8], limit: Option<usize>) -> Result<Vec<Vec<u8>>, Error>;
    /// The number of keys.
    fn count(&self) -> Result<usize, Error>;
}

macro_rules! impl_reads {
    ($t:ty) => {
        impl Reads for $t {
            fn value(&self, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
                self.get(key)
            }

            fn keys_from(&self, start: &[u8], limit: Option<usize>) -> Result<Vec<Vec<u8>>, Error> {
                let mut out = Vec::new();
                if limit == Some(0) {
                    return Ok(out);
                }
                for r in self.range(start..) {
                    out.push(r?.0);
                    if Some(out.len()) == limit {
                        break;
                    }
                }
                Ok(out)
            }

            fn count(&self) -> Result<usize, Error> {
                // A snapshot's count needs no scan (a transaction's is one).
                self.len().map(|n| n as usize)
            }
        }
    };
}
impl_reads!(Txn<'_>);
impl_reads!(ReadTxn<'_>);

/// Deletes every key, `BATCH` keys per transaction; for `clear()` and `open(.., 'n')`.
fn clear_in_batches(db: &Db) -> Result<(), Error> {
    loop {
        let deleted = db.run(|t| {
            let keys = t.keys_from(b"", Some(BATCH))?;
            for k in &keys {
                t.delete(k)?;
            }
            Ok(keys.len())
        })?;
        if deleted < BATCH {
            return Ok(());
        }
    }
}

/// Where mapping operations run: a database (each operation its own transaction) or an
/// open transaction. The mapping methods of both classes are written once against it.
trait Target {
    /// Runs `f` on a transaction, detached from Python.
    fn exec<T: Send>(&self, py: Python<'_>, f: impl FnMut(&mut Txn<'_>) -> Result<T, Error> + Send) -> PyResult<T>;

    /// Runs `f`, which only reads, detached from Python.
    fn read<T: Send>(&self, py: Python<'_>, f: impl FnMut(&dyn Reads) -> Result<T, Error> + Send) -> PyResult<T>;

    /// The source a key iterator fetches from.
    fn source(slf: &Bound<'_, Self>) -> Source
    where
        Self: Sized;
}

fn getitem<T: Target>(t: &T, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<Py<PyBytes>> {
    let k = to_bytes(key, "keys")?;
    match t.read(py, |r| r.value(&k))? {
        Some(v) => Ok(PyBytes::new(py, &v).unbind()),
        None => Err(PyKeyError::new_err(key.clone().unbind())),
    }
}

fn setitem<T: Target>(t: &T, py: Python<'_>, key: &Bound<'_, PyAny>, value: &Bound<'_, PyAny>) -> PyResult<()> {
    let k = to_bytes(key, "keys")?;
    let v = to_bytes(value, "values")?;
    t.exec(py, |txn| txn.put(&k, &v))
}

fn delitem<T: Target>(t: &T, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<()> {
    let k = to_bytes(key, "keys")?;
    if t.exec(py, |txn| txn.delete(&k))? {
        Ok(())
    } else {
        Err(PyKeyError::new_err(key.clone().unbind()))
    }
}

fn contains<T: Target>(t: &T, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
    let k = to_bytes(key, "keys")?;
    Ok(t.read(py, |r| r.value(&k))?.is_some())
}

fn get<T: Target>(t: &T, py: Python<'_>, key: &Bound<'_, PyAny>, default: Option<Py<PyAny>>) -> PyResult<Py<PyAny>> {
    let k = to_bytes(key, "keys")?;
    Ok(match t.read(py, |r| r.value(&k))? {
        Some(v) => PyBytes::new(py, &v).into_any().unbind(),
        None => default.unwrap_or_else(|| py.None()),
    })
}

fn setdefault<T: Target>(t: &T, py: Python<'_>, key: &Bound<'_, PyAny>, default: Data) -> PyResult<Py<PyBytes>> {
    let k = to_bytes(key, "keys")?;
    let v = t.exec(py, |txn| match txn.get(&k)? {
        Some(v) => Ok(v),
        None => {
            txn.put(&k, &default.0)?;
            Ok(default.0.clone())
        }
    })?;
    Ok(PyBytes::new(py, &v).unbind())
}

fn keys<T: Target>(t: &T, py: Python<'_>) -> PyResult<Py<PyList>> {
    let keys = t.read(py, |r| r.keys_from(b"", None))?;
    Ok(PyList::new(py, keys.iter().map(|k| PyBytes::new(py, k)))?.unbind())
}

fn len<T: Target>(t: &T, py: Python<'_>) -> PyResult<usize> {
    t.read(py, |r| r.count())
}

fn iter<T: Target>(slf: &Bound<'_, T>) -> KeyIterator {
    KeyIterator { source: T::source(slf), next: Some(Vec::new()), buf: VecDeque::new() }
}

/// A path given as str, bytes or os.PathLike, as the os module converts it (bytes are the
/// file system's own, str is encoded with its encoding and error handler).
fn fs_path(file: &Bound<'_, PyAny>) -> PyResult<PathBuf> {
    let os = file.py().import("os")?;
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        let raw = os.call_method1("fsencode", (file,))?;
        Ok(PathBuf::from(std::ffi::OsStr::from_bytes(raw.cast::<PyBytes>()?.as_bytes())))
    }
    #[cfg(not(unix))]
    {
        let s = os.call_method1("fsdecode", (file,))?;
        Ok(PathBuf::from(s.cast::<PyString>()?.to_cow()?.into_owned()))
    }
}

/// How `open` treats the path, as dbm's flags.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Flag {
    Read,
    Write,
    Create,
    New,
}

/// Opens `path` as `flag` says, by [`OpenOptions`]'s rules (detached from Python: opening
/// recovers, and may block).
fn open_path(path: &Path, flag: Flag, mode: u32) -> Result<Db, Failure> {
    let mut how = OpenOptions::new();
    how.mode(mode);
    match flag {
        Flag::Read => how.read_only(true),
        Flag::Write => &mut how,
        Flag::Create => how.create(true),
        Flag::New => how.create(true).truncate(true),
    };
    how.open(path, Options::default()).map_err(|e| Failure::Open(e, path.into()))
}

/// Opens the database in directory `file` (a str, bytes or os.PathLike path) and returns a
/// `Database`, following `dbm.open`:
///
/// - `flag='r'`: read-only; the database must exist (writes raise `tsumiki.error`);
/// - `'w'`: read-write; the database must exist;
/// - `'c'`: read-write, created if missing;
/// - `'n'`: read-write, always new and empty (an existing tsumiki database is emptied; any
///   other non-empty file or directory there is refused).
///
/// An empty file at the path counts as no database: `'c'` and `'n'` replace it. These are
/// the C library's `dbm_open` rules (`O_RDONLY`, `O_RDWR`, `O_CREAT`, `O_CREAT|O_TRUNC`;
/// the table is in its header), shared through the engine's `OpenOptions`.
///
/// `mode` (default 0o666) is the created directory's mode, with search bits added where
/// read bits are and the umask applied; the database's files are always 0o600.
/// A missing database raises `tsumiki.error` (errno ENOENT), something that may not be
/// replaced errno EEXIST; one open elsewhere (another process or handle) errno EAGAIN.
#[pyfunction]
#[pyo3(signature = (file, flag = "r", mode = 0o666), text_signature = "(file, flag='r', mode=0o666)")]
fn open(py: Python<'_>, file: &Bound<'_, PyAny>, flag: &str, mode: u32) -> PyResult<Database> {
    let file = fs_path(file)?;
    // dbm.gnu's modifiers ('f' fast, 's' synchronized, 'u' unlocked) are accepted and
    // ignored: every commit is durable, and a database is always locked.
    let (first, modifiers) = flag.split_at(flag.len().min(1));
    let f = match first {
        "r" if modifiers.chars().all(|c| "fsu".contains(c)) => Flag::Read,
        "w" if modifiers.chars().all(|c| "fsu".contains(c)) => Flag::Write,
        "c" if modifiers.chars().all(|c| "fsu".contains(c)) => Flag::Create,
        "n" if modifiers.chars().all(|c| "fsu".contains(c)) => Flag::New,
        _ => {
            return Err(PyValueError::new_err(format!(
                "flag must be one of 'r', 'w', 'c' or 'n' (optionally followed by 'f', 's' or 'u'), not {flag:?}"
            )))
        }
    };
    if mode > 0o7777 {
        return Err(PyValueError::new_err(format!("mode {mode:#o} is not a file mode (0 to 0o7777)")));
    }
    let db = py.detach(|| open_path(&file, f, mode))?;
    Ok(Database {
        inner: RwLock::new(Some(Arc::new(db))),
        txns: Mutex::new(Vec::new()),
        path: file,
        read_only: f == Flag::Read,
    })
}

/// An open tsumiki database, as returned by `tsumiki.open`: a mapping of bytes keys to bytes
/// values (`str` keys and values are stored as UTF-8). Each operation is its own durable,
/// serializable transaction; `transaction()` groups several. A context manager that closes
/// the database on exit. Safe to share between threads.
#[pyclass(name = "Database", module = "tsumiki", frozen, mapping)]
struct Database {
    /// The engine; `None` once closed. Operations hold the read side while they run, so
    /// that `close` (the write side) waits for them.
    inner: RwLock<Option<Arc<Db>>>,
    /// The transactions begun on this handle, which `close` rolls back.
    txns: Mutex<Vec<Weak<Mutex<TxnState>>>>,
    path: PathBuf,
    read_only: bool,
}

impl Target for Database {
    fn exec<T: Send>(&self, py: Python<'_>, mut f: impl FnMut(&mut Txn<'_>) -> Result<T, Error> + Send) -> PyResult<T> {
        Ok(py.detach(|| {
            let g = self.inner.read().unwrap_or_else(PoisonError::into_inner);
            let db = g.as_ref().ok_or(Failure::Closed)?;
            db.run(&mut f).map_err(Failure::Engine)
        })?)
    }

    fn read<T: Send>(&self, py: Python<'_>, mut f: impl FnMut(&dyn Reads) -> Result<T, Error> + Send) -> PyResult<T> {
        Ok(py.detach(|| {
            let g = self.inner.read().unwrap_or_else(PoisonError::into_inner);
            let db = g.as_ref().ok_or(Failure::Closed)?;
            db.view(|r| f(r)).map_err(Failure::Engine)
        })?)
    }

    fn source(slf: &Bound<'_, Self>) -> Source {
        Source::Db(slf.clone().unbind())
    }
}

impl Database {
    /// Runs `f` on the engine (detached); `tsumiki.error` if closed.
    fn with_db<T: Send>(&self, py: Python<'_>, f: impl FnOnce(&Db) -> Result<T, Error> + Send) -> PyResult<T> {
        Ok(py.detach(|| {
            let g = self.inner.read().unwrap_or_else(PoisonError::into_inner);
            let db = g.as_ref().ok_or(Failure::Closed)?;
            f(db).map_err(Failure::Engine)
        })?)
    }
}

#[pymethods]
impl Database {
    /// `db[key]`: the value of `key` as bytes; KeyError if absent.
    fn __getitem__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<Py<PyBytes>> {
        getitem(self, py, key)
    }

    /// `db[key] = value`: stores `value` under `key` (durable when it returns).
    fn __setitem__(&self, py: Python<'_>, key: &Bound<'_, PyAny>, value: &Bound<'_, PyAny>) -> PyResult<()> {
        setitem(self, py, key, value)
    }

    /// `del db[key]`: deletes `key`; KeyError if absent.
    fn __delitem__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<()> {
        delitem(self, py, key)
    }

    /// `key in db`.
    fn __contains__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        contains(self, py, key)
    }

    /// `len(db)`: the number of keys (a snapshot's count: no scan).
    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        len(self, py)
    }

    /// Iterates over the keys in order, fetching them in batches, each batch a transaction:
    /// keys written meanwhile may or may not be seen; none is returned twice.
    fn __iter__(slf: &Bound<'_, Self>) -> KeyIterator {
        iter(slf)
    }

    /// The value of `key`, or `default` if absent.
    #[pyo3(signature = (key, default = None))]
    fn get(&self, py: Python<'_>, key: &Bound<'_, PyAny>, default: Option<Py<PyAny>>) -> PyResult<Py<PyAny>> {
        get(self, py, key, default)
    }

    /// The value of `key`; if absent, stores `default` (b'' unless given) and returns it,
    /// in one transaction.
    #[pyo3(signature = (key, default = Data(Vec::new())), text_signature = "($self, key, default=b'')")]
    fn setdefault(&self, py: Python<'_>, key: &Bound<'_, PyAny>, default: Data) -> PyResult<Py<PyBytes>> {
        setdefault(self, py, key, default)
    }

    /// A list of every key (bytes), in order, read in one transaction.
    fn keys(&self, py: Python<'_>) -> PyResult<Py<PyList>> {
        keys(self, py)
    }

    /// Deletes every key, a batch of keys per transaction.
    fn clear(&self, py: Python<'_>) -> PyResult<()> {
        self.with_db(py, clear_in_batches)
    }

    /// Makes every commit so far durable, those of transactions that chose less than a
    /// sync included (`transaction(durability=...)`).
    fn sync(&self, py: Python<'_>) -> PyResult<()> {
        self.with_db(py, Db::sync)
    }

    /// Takes a checkpoint: writes the pages the log changed and deletes the older logs, so
    /// that the next open replays less.
    fn reorganize(&self, py: Python<'_>) -> PyResult<()> {
        self.with_db(py, Db::checkpoint)
    }

    /// Begins a transaction: a context manager (`with db.transaction() as t:`) whose
    /// mapping methods act inside it, committing when the block ends normally and rolling
    /// back when it raises. A conflict raises `tsumiki.ConflictError`. `durability`
    /// chooses what its commit promises: `"sync"` (on the device, the default),
    /// `"buffered"` (handed to the operating system) or `"none"` (kept in memory until a
    /// later synced commit or a checkpoint); see the Rust `Txn::set_durability`.
    #[pyo3(signature = (durability = None))]
    fn transaction(&self, py: Python<'_>, durability: Option<&str>) -> PyResult<Transaction> {
        let level = durability
            .map(|d| d.parse::<Durability>().map_err(|e| PyValueError::new_err(e.to_string())))
            .transpose()?;
        let state = py.detach(|| {
            let g = self.inner.read().unwrap_or_else(PoisonError::into_inner);
            let db = g.as_ref().ok_or(Failure::Closed)?;
            let mut txn = db.begin_owned();
            if let Some(level) = level {
                txn.with(|t| t.set_durability(level));
            }
            let state = Arc::new(Mutex::new(TxnState::Active(txn)));
            let mut txns = lock(&self.txns);
            txns.retain(|w| w.strong_count() > 0);
            txns.push(Arc::downgrade(&state));
            Ok::<_, Failure>(state)
        })?;
        Ok(Transaction { state })
    }

    /// Closes the database: rolls back its open transactions and writes what a clean exit
    /// leaves. Idempotent; any later use raises `tsumiki.error`.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        Ok(py.detach(|| {
            let mut g = self.inner.write().unwrap_or_else(PoisonError::into_inner);
            let Some(db) = g.take() else { return Ok(()) };
            for w in lock(&self.txns).drain(..) {
                if let Some(state) = w.upgrade() {
                    let mut s = lock(&state);
                    if matches!(*s, TxnState::Active(_)) {
                        *s = TxnState::Ended(Ended::DbClosed);
                    }
                }
            }
            // Every other holder of the engine (operations, transactions) is gone: the
            // write lock waited for operations, and the transactions were just ended.
            match Arc::try_unwrap(db) {
                Ok(db) => db.close().map_err(Failure::Engine),
                Err(_) => Ok(()),
            }
        })?)
    }

    /// Returns the database itself.
    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Closes the database; exceptions raised in the block propagate.
    fn __exit__(
        &self,
        py: Python<'_>,
        _exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        let open = self.inner.read().unwrap_or_else(PoisonError::into_inner).is_some();
        let state = match (open, self.read_only) {
            (false, _) => "closed",
            (true, true) => "read-only",
            (true, false) => "read-write",
        };
        format!("<tsumiki.Database {:?} {state}>", self.path.display().to_string())
    }
}

/// How a transaction ended.
#[derive(Clone, Copy)]
enum Ended {
    Committed,
    Aborted,
    /// Rolled back by a conflict.
    Conflicted,
    /// Its commit failed with an error other than a conflict (raised then).
    Failed,
    /// Its database was closed first.
    DbClosed,
}

impl Ended {
    fn message(self) -> &'static str {
        match self {
            Ended::Committed => "the transaction has already been committed",
            Ended::Aborted => "the transaction has already been rolled back",
            Ended::Conflicted => "the transaction conflicted with another one and was rolled back",
            Ended::Failed => "the transaction's commit failed",
            Ended::DbClosed => "the transaction was rolled back when its database was closed",
        }
    }
}

enum TxnState {
    /// Open; it holds a share of the database (which `close` waits for it to let go).
    Active(OwnedTxn),
    Ended(Ended),
}

/// A transaction, from `Database.transaction()`: the same mapping methods as `Database`,
/// acting inside the transaction (reads see its own writes). A context manager: the block
/// commits when it ends normally and rolls back when it raises; after the block (or
/// `commit()`/`abort()`) any use raises `tsumiki.error`. A conflict raises
/// `tsumiki.ConflictError` and rolls it back.
#[pyclass(name = "Transaction", module = "tsumiki", frozen, mapping)]
struct Transaction {
    state: Arc<Mutex<TxnState>>,
}

impl Target for Transaction {
    fn exec<T: Send>(&self, py: Python<'_>, mut f: impl FnMut(&mut Txn<'_>) -> Result<T, Error> + Send) -> PyResult<T> {
        Ok(py.detach(|| {
            let mut s = lock(&self.state);
            let held = match &mut *s {
                TxnState::Active(held) => held,
                TxnState::Ended(why) => return Err(Failure::Ended(*why)),
            };
            match held.with(&mut f) {
                Ok(v) => Ok(v),
                Err(e) => {
                    // A conflict (or a transaction the engine already ended) rolled it back.
                    if matches!(e.kind(), ErrorKind::Conflict | ErrorKind::TxnFinished) {
                        *s = TxnState::Ended(Ended::Conflicted);
                    }
                    Err(Failure::Engine(e))
                }
            }
        })?)
    }

    fn read<T: Send>(&self, py: Python<'_>, mut f: impl FnMut(&dyn Reads) -> Result<T, Error> + Send) -> PyResult<T> {
        self.exec(py, |txn| f(&*txn))
    }

    fn source(slf: &Bound<'_, Self>) -> Source {
        Source::Txn(slf.clone().unbind())
    }
}

/// How a transaction is asked to end.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Finish {
    /// `commit()`: commits; raises if it already ended.
    Commit,
    /// `abort()`: rolls back; a no-op if it already ended.
    Abort,
    /// The end of a `with` block: commits when it ended normally (`ok`), rolls back when it
    /// raised. If the transaction already ended without committing (a conflict caught in
    /// the block, a closed database), a normal end raises: its writes are lost.
    Exit { ok: bool },
}

impl Transaction {
    fn finish(&self, py: Python<'_>, how: Finish) -> PyResult<()> {
        Ok(py.detach(|| {
            let mut s = lock(&self.state);
            let commit = matches!(how, Finish::Commit | Finish::Exit { ok: true });
            let next = if commit { Ended::Committed } else { Ended::Aborted };
            match std::mem::replace(&mut *s, TxnState::Ended(next)) {
                TxnState::Active(held) if commit => held.commit().map_err(|e| {
                    *s = TxnState::Ended(if e.is_retryable() { Ended::Conflicted } else { Ended::Failed });
                    Failure::Engine(e)
                }),
                // Dropping it rolls back.
                TxnState::Active(_) => Ok(()),
                TxnState::Ended(why) => {
                    *s = TxnState::Ended(why);
                    match (how, why) {
                        (Finish::Commit, _) => Err(Failure::Ended(why)),
                        (Finish::Exit { ok: true }, Ended::Conflicted | Ended::Failed | Ended::DbClosed) => {
                            Err(Failure::Ended(why))
                        }
                        _ => Ok(()),
                    }
                }
            }
        })?)
    }
}

#[pymethods]
impl Transaction {
    /// `t[key]`: the value of `key` as bytes; KeyError if absent.
    fn __getitem__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<Py<PyBytes>> {
        getitem(self, py, key)
    }

    /// `t[key] = value`.
    fn __setitem__(&self, py: Python<'_>, key: &Bound<'_, PyAny>, value: &Bound<'_, PyAny>) -> PyResult<()> {
        setitem(self, py, key, value)
    }

    /// `del t[key]`: KeyError if absent.
    fn __delitem__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<()> {
        delitem(self, py, key)
    }

    /// `key in t`.
    fn __contains__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        contains(self, py, key)
    }

    /// `len(t)`: the number of keys the transaction sees.
    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        len(self, py)
    }

    /// Iterates over the keys the transaction sees, in order.
    fn __iter__(slf: &Bound<'_, Self>) -> KeyIterator {
        iter(slf)
    }

    /// The value of `key`, or `default` if absent.
    #[pyo3(signature = (key, default = None))]
    fn get(&self, py: Python<'_>, key: &Bound<'_, PyAny>, default: Option<Py<PyAny>>) -> PyResult<Py<PyAny>> {
        get(self, py, key, default)
    }

    /// The value of `key`; if absent, stores `default` (b'' unless given) and returns it.
    #[pyo3(signature = (key, default = Data(Vec::new())), text_signature = "($self, key, default=b'')")]
    fn setdefault(&self, py: Python<'_>, key: &Bound<'_, PyAny>, default: Data) -> PyResult<Py<PyBytes>> {
        setdefault(self, py, key, default)
    }

    /// A list of every key (bytes) the transaction sees, in order.
    fn keys(&self, py: Python<'_>) -> PyResult<Py<PyList>> {
        keys(self, py)
    }

    /// Deletes every key (inside the transaction).
    fn clear(&self, py: Python<'_>) -> PyResult<()> {
        self.exec(py, |txn| {
            for k in txn.keys_from(b"", None)? {
                txn.delete(&k)?;
            }
            Ok(())
        })
    }

    /// Commits: durable when it returns; `tsumiki.ConflictError` if it conflicted (rolled
    /// back). The transaction is then over; `tsumiki.error` if it already was.
    fn commit(&self, py: Python<'_>) -> PyResult<()> {
        self.finish(py, Finish::Commit)
    }

    /// Rolls back (nothing it wrote is kept). The transaction is then over; a no-op if it
    /// already is.
    fn abort(&self, py: Python<'_>) -> PyResult<()> {
        self.finish(py, Finish::Abort)
    }

    /// Returns the transaction itself.
    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Commits if the block ended normally (raising `tsumiki.ConflictError` on a conflict),
    /// rolls back if it raised (the exception propagates).
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let ok = exc_type.is_none_or(|t| t.is_none());
        self.finish(py, Finish::Exit { ok })?;
        Ok(false)
    }

    fn __repr__(&self) -> &'static str {
        match *lock(&self.state) {
            TxnState::Active(_) => "<tsumiki.Transaction active>",
            TxnState::Ended(Ended::Committed) => "<tsumiki.Transaction committed>",
            TxnState::Ended(_) => "<tsumiki.Transaction rolled back>",
        }
    }
}

/// What a key iterator reads.
enum Source {
    Db(Py<Database>),
    Txn(Py<Transaction>),
}

/// An iterator over keys (bytes, in order), fetched in batches.
#[pyclass(module = "tsumiki")]
struct KeyIterator {
    source: Source,
    /// Where the next batch starts; `None` once the last batch came.
    next: Option<Vec<u8>>,
    buf: VecDeque<Vec<u8>>,
}

#[pymethods]
impl KeyIterator {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(mut slf: PyRefMut<'_, Self>, py: Python<'_>) -> PyResult<Option<Py<PyBytes>>> {
        if slf.buf.is_empty() {
            let Some(start) = slf.next.take() else { return Ok(None) };
            let fetch = |r: &dyn Reads| r.keys_from(&start, Some(BATCH));
            let batch = match &slf.source {
                Source::Db(db) => db.get().read(py, fetch)?,
                Source::Txn(t) => t.get().read(py, fetch)?,
            };
            if batch.len() == BATCH {
                slf.next = batch.last().cloned().map(successor);
            }
            slf.buf.extend(batch);
        }
        Ok(slf.buf.pop_front().map(|k| PyBytes::new(py, &k).unbind()))
    }
}

/// tsumiki: a transactional key-value database with the interface of Python's dbm
/// modules (so shelve works on it), plus transactions.
///
/// ```text
/// import tsumiki
/// with tsumiki.open("people.db", "c") as db:
///     db["alice"] = "engineer"
///     with db.transaction() as t:
///         t[b"bob"] = t.get(b"bob", b"") + b"!"
/// ```
#[pymodule(name = "tsumiki")]
fn tsumiki_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("error", py.get_type::<error>())?;
    m.add("ConflictError", py.get_type::<ConflictError>())?;
    m.add_function(wrap_pyfunction!(open, m)?)?;
    m.add_class::<Database>()?;
    m.add_class::<Transaction>()?;
    m.add_class::<KeyIterator>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    // maturin's package re-exports with `from .tsumiki import *`: name what it takes.
    m.add("__all__", ["open", "error", "ConflictError", "Database", "Transaction", "KeyIterator", "__version__"])?;
    Ok(())
}
