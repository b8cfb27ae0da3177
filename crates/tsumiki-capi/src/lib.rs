//! tsumiki's C library (`libtsumiki`): the POSIX ndbm interface over a tsumiki database,
//! with transactions as an extension. The contract is the header,
//! `include/tsumiki/ndbm.h`; this file implements it.
//!
//! - A `DBM *` is a [`Dbm`]: an [`Arc<Db>`] shared with the process's other handles of the
//!   same directory (the engine locks a directory against a second open, so a process-wide
//!   [`REGISTRY`] hands out the one open database), the handle's transaction if one is
//!   open (an [`OwnedTxn`]), its iteration cursor, the buffers the returned `datum`s point
//!   into, and the outcome of its last call.
//! - `dbm_open`'s flags follow [`OpenOptions`]'s rules, which the Python module shares.
//! - Codes and errno come from [`Error::kind`] and [`Error::errno`] (the table is in the
//!   header and on [`tsumiki::ErrorKind`]).
//! - Outside a transaction every call runs in [`Db::run`] (its own durable transaction,
//!   conflicts retried); inside one, a conflict rolls the transaction back and the handle
//!   reports it until the caller ends the transaction ([`TxnState::RolledBack`]).
//! - No panic crosses into C: every exported function runs its body in
//!   [`std::panic::catch_unwind`] and turns a panic into `TSUMIKI_DBM_INTERNAL`.
// Every unsafe block says why it is sound (clippy, `-D warnings` in CI).
#![warn(clippy::undocumented_unsafe_blocks)]

/// The engine allocates through mimalloc, as in the `tsumiki` binary: with glibc's malloc,
/// its allocation and free paths were 16% of paper 004's fill through this library. Only
/// Rust allocations use it; nothing allocated here is freed by C, or the other way round.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tsumiki::{Cc, Db, Durability, Error, ErrorKind, OpenOptions, Options, OwnedTxn, Txn};

/// `DBM_INSERT`: store only if the key is absent.
pub const DBM_INSERT: c_int = 0;
/// `DBM_REPLACE`: store, replacing any value.
pub const DBM_REPLACE: c_int = 1;

// The codes of `tsumiki_dbm_errcode`, as the header defines them.
/// Success.
pub const TSUMIKI_DBM_OK: c_int = 0;
/// A missing key, or no database at `dbm_open`'s path.
pub const TSUMIKI_DBM_NOT_FOUND: c_int = 1;
/// `DBM_INSERT` met an existing key, or `O_EXCL` an existing path.
pub const TSUMIKI_DBM_EXISTS: c_int = 2;
/// A write through a handle opened `O_RDONLY`.
pub const TSUMIKI_DBM_READ_ONLY: c_int = 3;
/// The transaction conflicted with another one and was rolled back.
pub const TSUMIKI_DBM_CONFLICT: c_int = 4;
/// A key or value longer than the engine's limit.
pub const TSUMIKI_DBM_TOO_LONG: c_int = 5;
/// An operating-system I/O error.
pub const TSUMIKI_DBM_IO: c_int = 6;
/// A damaged database file, or not a tsumiki one.
pub const TSUMIKI_DBM_CORRUPT: c_int = 7;
/// The database is open in another process.
pub const TSUMIKI_DBM_LOCKED: c_int = 8;
/// An earlier log failure: the database must be closed and reopened.
pub const TSUMIKI_DBM_POISONED: c_int = 9;
/// A NULL pointer, bad flags or mode, `dbm_nextkey` before `dbm_firstkey`.
pub const TSUMIKI_DBM_BAD_ARGUMENT: c_int = 10;
/// Commit or abort without a transaction.
pub const TSUMIKI_DBM_NO_TXN: c_int = 11;
/// Begin inside a transaction.
pub const TSUMIKI_DBM_IN_TXN: c_int = 12;
/// A caught panic: a bug in tsumiki.
pub const TSUMIKI_DBM_INTERNAL: c_int = 13;
/// The transaction's writes exceed the log record limit (1 GiB): rolled back.
pub const TSUMIKI_DBM_TXN_TOO_LARGE: c_int = 14;
/// `tsumiki_dbm_set_durability`: commits on the device when the call returns.
pub const TSUMIKI_DBM_SYNC: c_int = 0;
/// `tsumiki_dbm_set_durability`: commits handed to the operating system.
pub const TSUMIKI_DBM_BUFFERED: c_int = 1;
/// `tsumiki_dbm_set_durability`: commits kept in memory until a later synced one.
pub const TSUMIKI_DBM_NOSYNC: c_int = 2;

/// The C `datum`: `dsize` bytes at `dptr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Datum {
    /// The bytes (NULL in a returned datum: nothing found).
    pub dptr: *mut c_void,
    /// Their number.
    pub dsize: usize,
}

impl Datum {
    const NULL: Datum = Datum { dptr: std::ptr::null_mut(), dsize: 0 };

    /// A datum of `buf`'s bytes, never NULL even when empty (NULL means "not found").
    fn of(buf: &mut Vec<u8>) -> Datum {
        buf.reserve(1);
        Datum { dptr: buf.as_mut_ptr().cast(), dsize: buf.len() }
    }

    /// The bytes a caller passed in. `what` names the argument in the error.
    ///
    /// # Safety
    /// Unless `dsize` is 0, `dptr` must point to `dsize` readable bytes that stay
    /// unchanged while the returned slice is used (the ndbm contract).
    unsafe fn bytes<'a>(self, what: &str) -> Result<&'a [u8], Failure> {
        if self.dsize == 0 {
            return Ok(&[]);
        }
        if self.dptr.is_null() {
            return Err(Failure::bad_argument(format!("{what}.dptr is NULL but {what}.dsize is {}", self.dsize)));
        }
        if self.dsize > isize::MAX as usize {
            return Err(Failure::bad_argument(format!("{what}.dsize {} is not a size", self.dsize)));
        }
        // SAFETY: non-NULL, a length a slice can have, and the caller promises `dsize`
        // readable bytes at `dptr` (see this function's contract).
        Ok(unsafe { std::slice::from_raw_parts(self.dptr.cast::<u8>(), self.dsize) })
    }
}

/// Why a call failed, or its not-quite-success outcome (a missing key, an existing one).
#[derive(Debug)]
struct Failure {
    code: c_int,
    msg: String,
    /// The operating system's error behind it, if any (0: none).
    os_errno: c_int,
}

impl Failure {
    fn new(code: c_int, msg: impl Into<String>) -> Self {
        Failure { code, msg: msg.into(), os_errno: 0 }
    }

    fn bad_argument(msg: impl Into<String>) -> Self {
        Failure::new(TSUMIKI_DBM_BAD_ARGUMENT, msg)
    }

    /// Missing and existing keys are outcomes the return value already says: they leave
    /// `dbm_error` alone and errno unset (as gdbm's ndbm does).
    fn is_outcome(&self) -> bool {
        matches!(self.code, TSUMIKI_DBM_NOT_FOUND | TSUMIKI_DBM_EXISTS)
    }

    /// The errno of this failure (0: leave errno alone).
    fn errno(&self) -> c_int {
        if self.os_errno != 0 {
            return self.os_errno;
        }
        match self.code {
            TSUMIKI_DBM_OK => 0,
            TSUMIKI_DBM_NOT_FOUND => libc::ENOENT,
            TSUMIKI_DBM_EXISTS => libc::EEXIST,
            TSUMIKI_DBM_READ_ONLY => libc::EPERM,
            TSUMIKI_DBM_CONFLICT | TSUMIKI_DBM_LOCKED => libc::EAGAIN,
            TSUMIKI_DBM_TOO_LONG | TSUMIKI_DBM_BAD_ARGUMENT | TSUMIKI_DBM_NO_TXN | TSUMIKI_DBM_IN_TXN => libc::EINVAL,
            TSUMIKI_DBM_TXN_TOO_LARGE => libc::EFBIG,
            _ => libc::EIO,
        }
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        let code = match e.kind() {
            ErrorKind::NotFound => TSUMIKI_DBM_NOT_FOUND,
            ErrorKind::AlreadyExists => TSUMIKI_DBM_EXISTS,
            ErrorKind::ReadOnly => TSUMIKI_DBM_READ_ONLY,
            // A handle's transaction ends only by commit or abort, which also end the
            // handle's hold on it: a finished one was rolled back by a conflict.
            ErrorKind::Conflict | ErrorKind::TxnFinished => TSUMIKI_DBM_CONFLICT,
            ErrorKind::KeyTooLong | ErrorKind::ValueTooLong => TSUMIKI_DBM_TOO_LONG,
            ErrorKind::TxnTooLarge => TSUMIKI_DBM_TXN_TOO_LARGE,
            ErrorKind::Io => TSUMIKI_DBM_IO,
            ErrorKind::Corrupt => TSUMIKI_DBM_CORRUPT,
            ErrorKind::Locked => TSUMIKI_DBM_LOCKED,
            ErrorKind::Poisoned => TSUMIKI_DBM_POISONED,
            ErrorKind::InvalidArgument => TSUMIKI_DBM_BAD_ARGUMENT,
            // A kind newer than this library: an I/O-like failure, with the engine's errno.
            _ => TSUMIKI_DBM_IO,
        };
        // The operating system's errno where there is one (ENOSPC for a full disk, also
        // through a poisoned database), else the kind's.
        Failure { code, os_errno: e.errno(), msg: e.to_string() }
    }
}

/// Sets errno for `f`.
fn set_errno(f: &Failure) {
    let e = f.errno();
    if e != 0 {
        errno::set_errno(errno::Errno(e));
    }
}

/// Where a handle's transaction stands.
enum TxnState {
    /// None open: each call is its own transaction.
    None,
    /// Opened by `tsumiki_dbm_begin`; it holds its own share of the database.
    Open(OwnedTxn),
    /// Rolled back by a conflict; every call fails with `TSUMIKI_DBM_CONFLICT` until
    /// commit or abort ends it, so that later calls do not run as transactions of
    /// their own while the caller thinks them part of this one.
    RolledBack,
}

/// An open handle: C's `DBM`.
pub struct Dbm {
    // Before `db`: a transaction holds a share of the database, and the handle's last
    // share is let go under the registry's lock (`close`).
    txn: TxnState,
    db: Arc<Db>,
    /// The registry's key for `db`.
    path: PathBuf,
    read_only: bool,
    /// The key dbm_firstkey/dbm_nextkey last returned (the returned datum points into it);
    /// `None` before dbm_firstkey.
    cursor: Option<Vec<u8>>,
    /// The value dbm_fetch last returned.
    value: Vec<u8>,
    /// `dbm_error`'s sticky condition.
    error: bool,
    /// The descriptor `dbm_dirfno` and `dbm_pagfno` return (the directory's
    /// [`LOCK_FILE`]), opened on first use.
    lock_file: Option<std::fs::File>,
    /// What the handle's commits promise (`tsumiki_dbm_set_durability`); `None`: the
    /// database's.
    durability: Option<Durability>,
    /// The outcome of the last call.
    code: c_int,
    msg: CString,
}

/// The databases this process has open, by canonical path, shared by their handles. A
/// handle takes its clone of the `Arc` under the lock and drops it under the lock, so
/// when only the registry's own clone is left no handle can be using the database and
/// it may be closed.
static REGISTRY: Mutex<BTreeMap<PathBuf, Arc<Db>>> = Mutex::new(BTreeMap::new());

fn registry() -> std::sync::MutexGuard<'static, BTreeMap<PathBuf, Arc<Db>>> {
    // A panic while holding it (caught at the boundary) leaves the map itself consistent:
    // every change to it is a single insert or remove.
    REGISTRY.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

thread_local! {
    /// The code and message of the last failed dbm_open in this thread
    /// (`tsumiki_dbm_errcode(NULL)`).
    static OPEN_ERROR: RefCell<(c_int, CString)> = RefCell::new((TSUMIKI_DBM_OK, CString::default()));
}

/// `msg` as a C string (a NUL inside, impossible in tsumiki's messages, becomes '?').
fn c_message(msg: &str) -> CString {
    CString::new(msg.replace('\0', "?")).unwrap_or_default()
}

/// The file in a database directory that `dbm_dirfno` and `dbm_pagfno` open: the engine
/// never locks it (it locks the directory itself), so callers may.
pub const LOCK_FILE: &str = tsumiki::wal::storage::CALLER_LOCK_FILE;

/// The options of a database this process opens first: the defaults, with the protocol
/// named by the environment variable `TSUMIKI_CC` if it is set.
fn options() -> Result<Options, Failure> {
    let Some(name) = std::env::var_os("TSUMIKI_CC") else {
        return Ok(Options::default());
    };
    match name.to_str().and_then(Cc::parse) {
        Some(cc) => Ok(Options::with_cc(cc)),
        None => Err(Failure::bad_argument(format!(
            "TSUMIKI_CC={}: not a protocol (tictoc, silo, 2pl, 2pl-waitdie, mvcc-si)",
            name.to_string_lossy()
        ))),
    }
}

fn open(file: *const c_char, flags: c_int, mode: libc::mode_t) -> Result<Box<Dbm>, Failure> {
    if file.is_null() {
        return Err(Failure::bad_argument("dbm_open: file is NULL"));
    }
    // SAFETY: non-NULL, and the caller passes a NUL-terminated string (dbm_open's contract).
    let file = unsafe { CStr::from_ptr(file) };
    let path = Path::new(std::ffi::OsStr::from_bytes(file.to_bytes()));
    if path.as_os_str().is_empty() {
        return Err(Failure::new(TSUMIKI_DBM_NOT_FOUND, "dbm_open: the file name is empty"));
    }
    let read_only = match flags & libc::O_ACCMODE {
        libc::O_RDONLY => true,
        libc::O_WRONLY | libc::O_RDWR => false,
        other => return Err(Failure::bad_argument(format!("dbm_open: bad access mode {other:#o} in flags"))),
    };
    let (create, exclusive, truncate) =
        (flags & libc::O_CREAT != 0, flags & libc::O_EXCL != 0, flags & libc::O_TRUNC != 0);
    #[allow(clippy::useless_conversion)] // mode_t is u32 on Linux, u16 elsewhere
    let mode = u32::from(mode);
    // The rules of the flags are OpenOptions's, shared with the Python module.
    let mut how = OpenOptions::new();
    how.read_only(read_only).create(create).create_new(create && exclusive).truncate(truncate).mode(mode);
    // Held through the open, so that two threads opening one path share one database.
    let mut reg = registry();
    let shared = |canonical: &Path| reg.get(canonical).cloned();
    // The options apply to a database this process opens first (read-only if this handle
    // is: then nothing is written, and read-only media open); a handle's read-only flag
    // is also the handle's, as a database opened to write is shared with it. A database
    // opened read-only serves no writing handle (TSUMIKI_DBM_LOCKED until it is closed).
    let opts = options()?;
    let db = how.open_shared(path, opts, shared)?;
    let canonical = std::fs::canonicalize(path).map_err(|e| {
        Failure::from(Error::Io { context: format!("resolving {}", path.display()), source: Arc::new(e) })
    })?;
    reg.entry(canonical.clone()).or_insert_with(|| Arc::clone(&db));
    drop(reg);
    Ok(Box::new(Dbm {
        txn: TxnState::None,
        db,
        path: canonical,
        read_only,
        cursor: None,
        value: Vec::new(),
        error: false,
        lock_file: None,
        durability: None,
        code: TSUMIKI_DBM_OK,
        msg: CString::default(),
    }))
}

impl Dbm {
    /// Ends the transaction (rolling it back), then lets go of the database, closing it if
    /// this was its last handle in the process. A failed close cannot be reported
    /// (dbm_close returns nothing); the next open recovers what it left.
    fn close(self: Box<Self>) {
        let Dbm { txn, db, path, .. } = *self;
        // First: the transaction holds a share of the database.
        drop(txn);
        let mut reg = registry();
        drop(db);
        if reg.get(&path).is_some_and(|db| Arc::strong_count(db) == 1) {
            if let Some(Ok(db)) = reg.remove(&path).map(Arc::try_unwrap) {
                // Still under the lock: a dbm_open of this path waits until the files are
                // closed and unlocked.
                let _ = db.close();
            }
        }
    }

    /// Runs `f` in the handle's transaction, or in a transaction of its own (retried on a
    /// conflict) when none is open.
    fn with_txn<T>(&mut self, mut f: impl FnMut(&mut Txn<'_>) -> Result<T, Error>) -> Result<T, Failure> {
        match &mut self.txn {
            TxnState::None => {
                let level = self.durability;
                Ok(self.db.run_within(RETRY_FOR, |t| {
                    if let Some(level) = level {
                        t.set_durability(level);
                    }
                    f(t)
                })?)
            }
            TxnState::Open(t) => match t.with(&mut f) {
                Ok(v) => Ok(v),
                Err(e) => {
                    if matches!(e, Error::Conflict(_) | Error::TxnFinished) {
                        // The engine rolled it back already.
                        self.txn = TxnState::RolledBack;
                    }
                    Err(e.into())
                }
            },
            TxnState::RolledBack => Err(rolled_back()),
        }
    }

    fn writable(&self) -> Result<(), Failure> {
        if self.read_only {
            return Err(Failure::new(TSUMIKI_DBM_READ_ONLY, "the handle was opened O_RDONLY"));
        }
        Ok(())
    }

    fn store(&mut self, key: &[u8], value: &[u8], mode: c_int) -> Result<c_int, Failure> {
        let insert = match mode {
            DBM_INSERT => true,
            DBM_REPLACE => false,
            _ => {
                return Err(Failure::bad_argument(format!(
                    "dbm_store: mode {mode} is neither DBM_INSERT nor DBM_REPLACE"
                )))
            }
        };
        self.writable()?;
        let stored = self.with_txn(|t| if insert { t.insert(key, value) } else { t.put(key, value).map(|()| true) })?;
        if stored {
            Ok(0)
        } else {
            Err(Failure::new(TSUMIKI_DBM_EXISTS, "dbm_store: DBM_INSERT of a key that exists"))
        }
    }

    fn fetch(&mut self, key: &[u8]) -> Result<Datum, Failure> {
        let found = match self.txn {
            // Outside a transaction a read is a snapshot: it never conflicts with writers.
            TxnState::None => self.db.view(|r| r.get(key))?,
            _ => self.with_txn(|t| t.get(key))?,
        };
        match found {
            Some(v) => {
                self.value = v;
                Ok(Datum::of(&mut self.value))
            }
            None => Err(Failure::new(TSUMIKI_DBM_NOT_FOUND, "dbm_fetch: no such key")),
        }
    }

    fn delete(&mut self, key: &[u8]) -> Result<c_int, Failure> {
        self.writable()?;
        if self.with_txn(|t| t.delete(key))? {
            Ok(0)
        } else {
            Err(Failure::new(TSUMIKI_DBM_NOT_FOUND, "dbm_delete: no such key"))
        }
    }

    /// The smallest key after `after` (or the smallest of all), kept as the cursor.
    fn next_key(&mut self, after: Option<Vec<u8>>) -> Result<Datum, Failure> {
        // The smallest key greater than `after` is the first one at or after `after` + 0.
        let start = after.map(|mut k| {
            k.push(0);
            k
        });
        let start = start.as_deref().unwrap_or_default();
        let found = match self.txn {
            TxnState::None => self.db.view(|r| r.range(start..).next().transpose().map(|r| r.map(|(k, _)| k)))?,
            _ => self.with_txn(|t| t.range(start..).next().transpose().map(|r| r.map(|(k, _)| k)))?,
        };
        match found {
            Some(k) => {
                let cursor = self.cursor.insert(k);
                Ok(Datum::of(cursor))
            }
            None => Err(Failure::new(TSUMIKI_DBM_NOT_FOUND, "no more keys")),
        }
    }

    fn first_key(&mut self) -> Result<Datum, Failure> {
        self.cursor = None;
        self.next_key(None)
    }

    fn following_key(&mut self) -> Result<Datum, Failure> {
        match self.cursor.clone() {
            Some(last) => self.next_key(Some(last)),
            None => Err(Failure::bad_argument("dbm_nextkey before dbm_firstkey")),
        }
    }

    fn begin(&mut self) -> Result<c_int, Failure> {
        match self.txn {
            TxnState::None => {
                let mut t = self.db.begin_owned();
                if let Some(level) = self.durability {
                    t.with(|t| t.set_durability(level));
                }
                self.txn = TxnState::Open(t);
                Ok(0)
            }
            TxnState::Open(_) => {
                Err(Failure::new(TSUMIKI_DBM_IN_TXN, "a transaction is open already (they do not nest)"))
            }
            TxnState::RolledBack => Err(Failure::new(
                TSUMIKI_DBM_IN_TXN,
                "the transaction rolled back by a conflict is still open: end it with tsumiki_dbm_abort",
            )),
        }
    }

    fn commit(&mut self) -> Result<c_int, Failure> {
        match std::mem::replace(&mut self.txn, TxnState::None) {
            TxnState::Open(t) => {
                t.commit()?;
                Ok(0)
            }
            TxnState::RolledBack => Err(rolled_back()),
            TxnState::None => Err(Failure::new(TSUMIKI_DBM_NO_TXN, "tsumiki_dbm_commit: no transaction is open")),
        }
    }

    fn set_durability(&mut self, level: c_int) -> Result<c_int, Failure> {
        let level = match level {
            TSUMIKI_DBM_SYNC => Durability::Sync,
            TSUMIKI_DBM_BUFFERED => Durability::Buffered,
            TSUMIKI_DBM_NOSYNC => Durability::None,
            _ => {
                return Err(Failure::bad_argument(format!(
                    "tsumiki_dbm_set_durability: {level} is not TSUMIKI_DBM_SYNC, TSUMIKI_DBM_BUFFERED or TSUMIKI_DBM_NOSYNC"
                )))
            }
        };
        self.durability = Some(level);
        if let TxnState::Open(t) = &mut self.txn {
            t.with(|t| t.set_durability(level));
        }
        Ok(0)
    }

    fn abort(&mut self) -> Result<c_int, Failure> {
        match std::mem::replace(&mut self.txn, TxnState::None) {
            TxnState::Open(t) => {
                t.abort();
                Ok(0)
            }
            TxnState::RolledBack => Ok(0),
            TxnState::None => Err(Failure::new(TSUMIKI_DBM_NO_TXN, "tsumiki_dbm_abort: no transaction is open")),
        }
    }

    /// The descriptor of the directory's [`LOCK_FILE`] (created 0600 if missing), opened on
    /// first use and kept until `dbm_close`.
    fn lock_fd(&mut self) -> Result<c_int, Failure> {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::OpenOptionsExt;
        if self.lock_file.is_none() {
            let name = self.path.join(LOCK_FILE);
            let open = |write: bool| {
                std::fs::OpenOptions::new()
                    .read(true)
                    .write(write)
                    .create(write)
                    .mode(0o600)
                    .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
                    .open(&name)
            };
            // A read-only file system (or directory) still lets an existing one be locked;
            // a read-only handle never creates it (it writes nothing).
            let f = if self.read_only { open(false) } else { open(true).or_else(|e| open(false).map_err(|_| e)) };
            let f = f.map_err(|e| {
                Failure::from(Error::Io { context: format!("opening {}", name.display()), source: Arc::new(e) })
            })?;
            self.lock_file = Some(f);
        }
        Ok(self.lock_file.as_ref().map_or(-1, |f| f.as_raw_fd()))
    }

    /// Records the outcome of a call.
    fn set_outcome(&mut self, code: c_int, msg: &str) {
        if code == TSUMIKI_DBM_OK && self.code == TSUMIKI_DBM_OK {
            return; // the common case, without an allocation
        }
        self.code = code;
        self.msg = c_message(msg);
    }
}

fn rolled_back() -> Failure {
    Failure::new(
        TSUMIKI_DBM_CONFLICT,
        "the transaction was rolled back by a conflict; end it with tsumiki_dbm_commit or tsumiki_dbm_abort and run it again",
    )
}

/// Runs `f` on the handle `db` with the boundary's duties: NULL check, panic catching,
/// recording the outcome, errno. Returns `on_error` when `f` fails.
fn call<T>(db: *mut Dbm, on_error: T, f: impl FnOnce(&mut Dbm) -> Result<T, Failure>) -> T {
    if db.is_null() {
        errno::set_errno(errno::Errno(libc::EINVAL));
        return on_error;
    }
    // SAFETY: non-NULL, and a `DBM *` the caller has is one dbm_open returned and
    // dbm_close has not freed, used by one thread at a time (the header's contract).
    let h = unsafe { &mut *db };
    let r = catch_unwind(AssertUnwindSafe(|| f(h)));
    // SAFETY: as above; the closure's borrow ended with it.
    let h = unsafe { &mut *db };
    match r {
        Ok(Ok(v)) => {
            h.set_outcome(TSUMIKI_DBM_OK, "");
            v
        }
        Ok(Err(fail)) => {
            if !fail.is_outcome() {
                h.error = true;
                set_errno(&fail);
            }
            h.set_outcome(fail.code, &fail.msg);
            on_error
        }
        Err(panic) => {
            h.error = true;
            h.set_outcome(
                TSUMIKI_DBM_INTERNAL,
                &format!("internal error (please report it): {}", panic_message(&panic)),
            );
            errno::set_errno(errno::Errno(libc::EIO));
            on_error
        }
    }
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into())
}

/// `dbm_open` (see the header).
///
/// # Safety
/// `file` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn dbm_open(file: *const c_char, flags: c_int, mode: libc::mode_t) -> *mut Dbm {
    let r = catch_unwind(|| open(file, flags, mode)).unwrap_or_else(|panic| {
        Err(Failure::new(TSUMIKI_DBM_INTERNAL, format!("internal error (please report it): {}", panic_message(&panic))))
    });
    match r {
        Ok(h) => Box::into_raw(h),
        Err(f) => {
            set_errno(&f);
            OPEN_ERROR.with(|e| *e.borrow_mut() = (f.code, c_message(&f.msg)));
            std::ptr::null_mut()
        }
    }
}

/// `dbm_close` (see the header).
///
/// # Safety
/// `db` is NULL or a handle from `dbm_open` not yet closed; it is invalid afterwards.
#[no_mangle]
pub unsafe extern "C" fn dbm_close(db: *mut Dbm) {
    if db.is_null() {
        return;
    }
    // SAFETY: a handle from dbm_open (Box::into_raw), closed once (the caller's promise).
    let h = unsafe { Box::from_raw(db) };
    // A panic here leaks what is left of the handle rather than crossing into C.
    let _ = catch_unwind(AssertUnwindSafe(|| h.close()));
}

/// `dbm_store` (see the header).
///
/// # Safety
/// `db` is NULL or an open handle; `key` and `content` point to `dsize` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn dbm_store(db: *mut Dbm, key: Datum, content: Datum, mode: c_int) -> c_int {
    let r = call(db, -1, |h| {
        // SAFETY: the caller's promise on `key` and `content`; `store` writes none of the
        // handle's buffers, into which they may point.
        let (k, v) = unsafe { (key.bytes("key")?, content.bytes("content")?) };
        h.store(k, v, mode)
    });
    // SAFETY: `call` returned -1 on a NULL handle before this reads it; otherwise the
    // handle is open (the caller's promise).
    if r == -1 && !db.is_null() && unsafe { (*db).code } == TSUMIKI_DBM_EXISTS {
        return 1;
    }
    r
}

/// `dbm_fetch` (see the header).
///
/// # Safety
/// `db` is NULL or an open handle; `key` points to `dsize` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn dbm_fetch(db: *mut Dbm, key: Datum) -> Datum {
    call(db, Datum::NULL, |h| {
        // SAFETY: the caller's promise on `key`. It may point into the handle's cursor or
        // value buffer; the copy is taken before `fetch` replaces the value buffer.
        let k = unsafe { key.bytes("key")? }.to_vec();
        h.fetch(&k)
    })
}

/// `dbm_delete` (see the header).
///
/// # Safety
/// `db` is NULL or an open handle; `key` points to `dsize` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn dbm_delete(db: *mut Dbm, key: Datum) -> c_int {
    call(db, -1, |h| {
        // SAFETY: the caller's promise on `key`; `delete` writes none of the handle's
        // buffers, into which it may point.
        let k = unsafe { key.bytes("key")? };
        h.delete(k)
    })
}

/// `dbm_firstkey` (see the header).
///
/// # Safety
/// `db` is NULL or an open handle.
#[no_mangle]
pub unsafe extern "C" fn dbm_firstkey(db: *mut Dbm) -> Datum {
    call(db, Datum::NULL, Dbm::first_key)
}

/// `dbm_nextkey` (see the header).
///
/// # Safety
/// `db` is NULL or an open handle.
#[no_mangle]
pub unsafe extern "C" fn dbm_nextkey(db: *mut Dbm) -> Datum {
    call(db, Datum::NULL, Dbm::following_key)
}

/// `dbm_error` (see the header).
///
/// # Safety
/// `db` is NULL or an open handle.
#[no_mangle]
pub unsafe extern "C" fn dbm_error(db: *mut Dbm) -> c_int {
    if db.is_null() {
        errno::set_errno(errno::Errno(libc::EINVAL));
        return -1;
    }
    // SAFETY: an open handle, used by this thread alone (the caller's promise).
    c_int::from(unsafe { (*db).error })
}

/// `dbm_clearerr` (see the header).
///
/// # Safety
/// `db` is NULL or an open handle.
#[no_mangle]
pub unsafe extern "C" fn dbm_clearerr(db: *mut Dbm) -> c_int {
    if db.is_null() {
        errno::set_errno(errno::Errno(libc::EINVAL));
        return -1;
    }
    // SAFETY: an open handle, used by this thread alone (the caller's promise).
    let h = unsafe { &mut *db };
    h.error = false;
    h.set_outcome(TSUMIKI_DBM_OK, "");
    0
}

/// `dbm_dirfno` (see the header).
///
/// # Safety
/// `db` is NULL or an open handle.
#[no_mangle]
pub unsafe extern "C" fn dbm_dirfno(db: *mut Dbm) -> c_int {
    call(db, -1, Dbm::lock_fd)
}

/// `dbm_pagfno` (see the header): the same descriptor as `dbm_dirfno`.
///
/// # Safety
/// `db` is NULL or an open handle.
#[no_mangle]
pub unsafe extern "C" fn dbm_pagfno(db: *mut Dbm) -> c_int {
    call(db, -1, Dbm::lock_fd)
}

/// `tsumiki_dbm_begin` (see the header).
///
/// # Safety
/// `db` is NULL or an open handle.
#[no_mangle]
pub unsafe extern "C" fn tsumiki_dbm_begin(db: *mut Dbm) -> c_int {
    call(db, -1, Dbm::begin)
}

/// `tsumiki_dbm_commit` (see the header).
///
/// # Safety
/// `db` is NULL or an open handle.
#[no_mangle]
pub unsafe extern "C" fn tsumiki_dbm_commit(db: *mut Dbm) -> c_int {
    call(db, -1, Dbm::commit)
}

/// `tsumiki_dbm_set_durability` (see the header).
///
/// # Safety
/// `db` is NULL or an open handle.
#[no_mangle]
pub unsafe extern "C" fn tsumiki_dbm_set_durability(db: *mut Dbm, level: c_int) -> c_int {
    call(db, -1, |h| h.set_durability(level))
}

/// `tsumiki_dbm_abort` (see the header).
///
/// # Safety
/// `db` is NULL or an open handle.
#[no_mangle]
pub unsafe extern "C" fn tsumiki_dbm_abort(db: *mut Dbm) -> c_int {
    call(db, -1, Dbm::abort)
}

/// `tsumiki_dbm_errcode` (see the header).
///
/// # Safety
/// `db` is NULL or an open handle.
#[no_mangle]
pub unsafe extern "C" fn tsumiki_dbm_errcode(db: *mut Dbm) -> c_int {
    if db.is_null() {
        return OPEN_ERROR.with(|e| e.borrow().0);
    }
    // SAFETY: an open handle, used by this thread alone (the caller's promise).
    unsafe { (*db).code }
}

/// `tsumiki_dbm_errmsg` (see the header).
///
/// # Safety
/// `db` is NULL or an open handle.
#[no_mangle]
pub unsafe extern "C" fn tsumiki_dbm_errmsg(db: *mut Dbm) -> *const c_char {
    if db.is_null() {
        // The thread-local lives as long as the thread, and only dbm_open replaces it.
        return OPEN_ERROR.with(|e| e.borrow().1.as_ptr());
    }
    // SAFETY: an open handle, used by this thread alone (the caller's promise); the
    // message lives until its next call replaces it.
    unsafe { (*db).msg.as_ptr() }
}

/// How long a call outside a transaction retries its conflicts before it reports
/// `TSUMIKI_DBM_CONFLICT`: a transaction of another handle of the same thread (2PL's locks,
/// MVCC-SI's pending versions) would otherwise make it wait forever.
const RETRY_FOR: std::time::Duration = std::time::Duration::from_secs(10);

/// The exported functions called as C calls them. (`.ci/capi.sh` runs the C test,
/// `tests/c/dbm_test.c`, against the installed library and gdbm's ndbm; these run in
/// `cargo test`, which does not build the C library itself.)
#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &[u8]) -> Datum {
        Datum { dptr: s.as_ptr() as *mut c_void, dsize: s.len() }
    }

    /// The bytes of a returned datum (`None` for NULL).
    fn bytes(x: Datum) -> Option<Vec<u8>> {
        // SAFETY: a datum the library returned: NULL or `dsize` bytes it owns.
        (!x.dptr.is_null()).then(|| unsafe { std::slice::from_raw_parts(x.dptr.cast::<u8>(), x.dsize) }.to_vec())
    }

    fn open_path(path: &Path, flags: c_int) -> *mut Dbm {
        let c = CString::new(path.as_os_str().as_bytes()).unwrap();
        // SAFETY: a NUL-terminated path.
        unsafe { dbm_open(c.as_ptr(), flags, 0o600) }
    }

    fn code(db: *mut Dbm) -> c_int {
        // SAFETY: NULL or an open handle.
        unsafe { tsumiki_dbm_errcode(db) }
    }

    fn keys(db: *mut Dbm) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        // SAFETY: an open handle.
        let mut k = unsafe { dbm_firstkey(db) };
        while let Some(key) = bytes(k) {
            out.push(key);
            // SAFETY: as above.
            k = unsafe { dbm_nextkey(db) };
        }
        out
    }

    #[test]
    fn durability_per_handle() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let db = open_path(&path, libc::O_RDWR | libc::O_CREAT);
        assert!(!db.is_null());
        // SAFETY: (the whole block) `db` is open until dbm_close; the datums point to live bytes.
        unsafe {
            assert_eq!(tsumiki_dbm_set_durability(db, 7), -1);
            assert_eq!(code(db), TSUMIKI_DBM_BAD_ARGUMENT);
            let syncs = |db: *mut Dbm| (*db).db.wal_stats().map_or(0, |w| w.syncs);
            assert_eq!(tsumiki_dbm_set_durability(db, TSUMIKI_DBM_NOSYNC), 0);
            assert_eq!(dbm_store(db, d(b"warm"), d(b"1"), DBM_REPLACE), 0); // makes the lane
            let before = syncs(db);
            for k in [&b"a"[..], b"b", b"c"] {
                assert_eq!(dbm_store(db, d(k), d(b"v"), DBM_REPLACE), 0);
            }
            assert_eq!(tsumiki_dbm_begin(db), 0);
            assert_eq!(dbm_delete(db, d(b"a")), 0);
            assert_eq!(tsumiki_dbm_commit(db), 0);
            assert_eq!(syncs(db), before, "commits kept in memory sync nothing");
            assert_eq!(tsumiki_dbm_set_durability(db, TSUMIKI_DBM_SYNC), 0);
            assert_eq!(dbm_store(db, d(b"d"), d(b"v"), DBM_REPLACE), 0);
            assert!(syncs(db) > before, "a synced commit syncs");
            dbm_close(db);
        }
        let db = open_path(&path, libc::O_RDONLY);
        // SAFETY: as above.
        unsafe {
            assert_eq!(keys(db), [&b"b"[..], b"c", b"d", b"warm"]);
            dbm_close(db);
        }
    }

    #[test]
    fn ndbm_calls_and_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        assert!(open_path(&path, libc::O_RDWR).is_null());
        assert_eq!(code(std::ptr::null_mut()), TSUMIKI_DBM_NOT_FOUND);
        let db = open_path(&path, libc::O_RDWR | libc::O_CREAT);
        assert!(!db.is_null());
        // SAFETY: (the whole block) `db` is open until dbm_close; the datums point to live bytes.
        unsafe {
            for k in [&b"b"[..], b"a", b"", b"a\0", b"c"] {
                assert_eq!(dbm_store(db, d(k), d(b"v"), DBM_INSERT), 0);
            }
            assert_eq!(dbm_store(db, d(b"a"), d(b"w"), DBM_INSERT), 1);
            assert_eq!((code(db), dbm_error(db)), (TSUMIKI_DBM_EXISTS, 0));
            assert_eq!(bytes(dbm_fetch(db, d(b"a"))), Some(b"v".to_vec()));
            assert_eq!(dbm_store(db, d(b"a"), d(b""), DBM_REPLACE), 0);
            let empty = dbm_fetch(db, d(b"a"));
            assert!(!empty.dptr.is_null() && empty.dsize == 0); // found, empty
            assert_eq!(dbm_delete(db, d(b"c")), 0);
            assert_eq!(dbm_delete(db, d(b"c")), -1);
            assert_eq!((code(db), dbm_error(db)), (TSUMIKI_DBM_NOT_FOUND, 0));
            assert_eq!(bytes(dbm_fetch(db, d(b"c"))), None);
            assert_eq!(keys(db), [&b""[..], b"a", b"a\0", b"b"]);
            assert!(bytes(dbm_nextkey(db)).is_none()); // stays at the end
            dbm_close(db);
        }
        // The last handle closed the database: reopening it (a second open would be
        // refused while it is open) finds everything.
        let db = open_path(&path, libc::O_RDONLY);
        assert!(!db.is_null());
        // SAFETY: as above.
        unsafe {
            assert_eq!(keys(db).len(), 4);
            assert_eq!(dbm_store(db, d(b"x"), d(b"v"), DBM_REPLACE), -1);
            assert_eq!((code(db), dbm_error(db)), (TSUMIKI_DBM_READ_ONLY, 1));
            assert_eq!(dbm_clearerr(db), 0);
            assert_eq!(dbm_error(db), 0);
            dbm_close(db);
        }
    }

    #[test]
    fn transactions_and_conflicts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let (h1, h2) = (open_path(&path, libc::O_RDWR | libc::O_CREAT), open_path(&path, libc::O_RDWR));
        assert!(!h1.is_null() && !h2.is_null());
        // SAFETY: (the whole block) both handles are open until dbm_close.
        unsafe {
            assert_eq!(tsumiki_dbm_begin(h1), 0);
            assert_eq!(tsumiki_dbm_begin(h1), -1);
            assert_eq!(code(h1), TSUMIKI_DBM_IN_TXN);
            assert_eq!(dbm_store(h1, d(b"k"), d(b"1"), DBM_REPLACE), 0);
            assert_eq!(bytes(dbm_fetch(h2, d(b"k"))), None); // not committed
            assert_eq!(tsumiki_dbm_commit(h1), 0);
            assert_eq!(bytes(dbm_fetch(h2, d(b"k"))), Some(b"1".to_vec()));

            assert_eq!(tsumiki_dbm_begin(h1), 0);
            assert_eq!(dbm_delete(h1, d(b"k")), 0);
            assert_eq!(tsumiki_dbm_abort(h1), 0);
            assert_eq!(tsumiki_dbm_abort(h1), -1);
            assert_eq!(code(h1), TSUMIKI_DBM_NO_TXN);
            assert_eq!(bytes(dbm_fetch(h2, d(b"k"))), Some(b"1".to_vec()));

            // Both read k, both write it: the second commit conflicts.
            assert_eq!((tsumiki_dbm_begin(h1), tsumiki_dbm_begin(h2)), (0, 0));
            assert!(bytes(dbm_fetch(h1, d(b"k"))).is_some() && bytes(dbm_fetch(h2, d(b"k"))).is_some());
            assert_eq!(dbm_store(h1, d(b"k"), d(b"2"), DBM_REPLACE), 0);
            assert_eq!(tsumiki_dbm_commit(h1), 0);
            let stored = dbm_store(h2, d(b"k"), d(b"3"), DBM_REPLACE);
            assert!(stored == 0 || code(h2) == TSUMIKI_DBM_CONFLICT);
            assert_eq!(tsumiki_dbm_commit(h2), -1);
            assert_eq!(code(h2), TSUMIKI_DBM_CONFLICT);
            assert_eq!(bytes(dbm_fetch(h2, d(b"k"))), Some(b"2".to_vec()));

            // Closing with an open transaction rolls it back.
            assert_eq!(tsumiki_dbm_begin(h2), 0);
            assert_eq!(dbm_store(h2, d(b"gone"), d(b"x"), DBM_REPLACE), 0);
            dbm_close(h2);
            assert_eq!(bytes(dbm_fetch(h1, d(b"gone"))), None);
            dbm_close(h1);
        }
    }

    #[test]
    fn bad_arguments_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        // SAFETY: (the whole block) NULL is allowed everywhere; `db` is open until dbm_close.
        unsafe {
            assert!(dbm_open(std::ptr::null(), libc::O_RDWR, 0).is_null());
            assert_eq!(code(std::ptr::null_mut()), TSUMIKI_DBM_BAD_ARGUMENT);
            assert_eq!(dbm_store(std::ptr::null_mut(), d(b"k"), d(b"v"), DBM_REPLACE), -1);
            assert!(bytes(dbm_fetch(std::ptr::null_mut(), d(b"k"))).is_none());
            assert_eq!(dbm_error(std::ptr::null_mut()), -1);
            dbm_close(std::ptr::null_mut());
            assert!(open_path(&path, libc::O_RDONLY | libc::O_TRUNC).is_null());
            let db = open_path(&path, libc::O_RDWR | libc::O_CREAT | libc::O_EXCL);
            assert!(!db.is_null());
            assert!(open_path(&path, libc::O_RDWR | libc::O_CREAT | libc::O_EXCL).is_null());
            assert_eq!(code(std::ptr::null_mut()), TSUMIKI_DBM_EXISTS);
            let null_key = Datum { dptr: std::ptr::null_mut(), dsize: 3 };
            assert_eq!(dbm_store(db, null_key, d(b"v"), DBM_REPLACE), -1);
            assert_eq!(code(db), TSUMIKI_DBM_BAD_ARGUMENT);
            assert_eq!(dbm_store(db, d(b"k"), d(b"v"), 2), -1);
            assert_eq!(code(db), TSUMIKI_DBM_BAD_ARGUMENT);
            assert_eq!(dbm_store(db, d(&[7; 5000]), d(b"v"), DBM_REPLACE), -1);
            assert_eq!(code(db), TSUMIKI_DBM_TOO_LONG);
            assert!(!CStr::from_ptr(tsumiki_dbm_errmsg(db)).to_bytes().is_empty());
            assert!(bytes(dbm_nextkey(db)).is_none());
            assert_eq!(code(db), TSUMIKI_DBM_BAD_ARGUMENT);
            assert_eq!(tsumiki_dbm_commit(db), -1);
            assert_eq!(code(db), TSUMIKI_DBM_NO_TXN);
            dbm_close(db);
        }
    }
}
