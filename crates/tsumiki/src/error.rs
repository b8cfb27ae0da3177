//! The one error type of the crate, and the limits its variants name.
//!
//! Every layer (`index` aside, which has its own [`IndexError`]) returns [`Error`]; it sits
//! below all of them so that no lower layer imports from [`crate::db`].

use std::sync::Arc;

/// The longest value accepted.
pub use crate::limits::MAX_VALUE_LEN;

/// Errors of the index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IndexError {
    /// The key is longer than [`crate::index::MAX_KEY_LEN`].
    KeyTooLong {
        /// Length of the rejected key.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A [`crate::index::BwTreeConfig`] value is out of range.
    InvalidConfig(String),
    /// A bulk load ([`crate::index::BwTreeBuilder`]) was given a key not greater than the one before it.
    NotSorted {
        /// Records accepted before the rejected one (its position, if nothing else failed).
        index: u64,
    },
    /// The mapping table is full (2^28 pages): the bulk load does not fit in one tree.
    TooManyPages,
}

impl std::fmt::Display for IndexError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IndexError::KeyTooLong { len, max } => write!(f, "key of {len} bytes is longer than the {max}-byte limit"),
            IndexError::InvalidConfig(why) => write!(f, "invalid Bw-tree configuration: {why}"),
            IndexError::NotSorted { index } => {
                write!(f, "bulk load: record {index} has a key not greater than the one before it")
            }
            IndexError::TooManyPages => write!(f, "the Bw-tree's mapping table is full"),
        }
    }
}

impl std::error::Error for IndexError {}

/// Why an operation of a transaction could not go on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Conflict {
    /// A record the transaction read changed before it could commit.
    #[error("a record read by the transaction changed")]
    ReadValidation,
    /// A lock (or latch) was held by another transaction, and the protocol does not wait.
    #[error("a record was locked by another transaction")]
    LockBusy,
    /// Wait-die: a younger transaction met an older holder and died.
    #[error("wait-die: an older transaction holds the lock")]
    Died,
    /// Snapshot isolation: another transaction wrote the record first.
    #[error("another transaction wrote the record first")]
    WriteWrite,
}

/// Everything that can go wrong in a transaction or with a database's files.
///
/// Match on [`Error::kind`] (a stable [`ErrorKind`]) where the variant's data is not
/// needed: new variants may be added (the enum is `#[non_exhaustive]`), kinds are what the
/// C library's codes and the Python module's exceptions map from.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The transaction conflicted with another and was rolled back: run it again
    /// ([`Error::is_retryable`]; [`crate::Db::run`] does so).
    #[error("transaction conflict, retry: {0}")]
    Conflict(Conflict),
    /// A key longer than [`crate::index::MAX_KEY_LEN`].
    #[error("key of {len} bytes is longer than the limit of {max}")]
    KeyTooLong {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A value longer than [`MAX_VALUE_LEN`].
    #[error("value of {len} bytes is longer than the limit of {max}")]
    ValueTooLong {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The transaction's writes do not fit in one log record ([`MAX_TXN_BYTES`]): it was
    /// rolled back. Split it into smaller transactions; running it again cannot succeed.
    #[error("the transaction's write set is larger than the {max}-byte log record limit; split it")]
    TxnTooLarge {
        /// The limit.
        max: u64,
    },
    /// The transaction already ended (it conflicted earlier, or was committed or aborted).
    #[error("the transaction has already ended")]
    TxnFinished,
    /// A bad index configuration in [`crate::Options`].
    #[error("index: {0}")]
    Index(IndexError),
    /// A bad setting in [`crate::Options`]; nothing was created on disk.
    #[error("bad option: {0}")]
    Config(String),
    /// An operating-system I/O error, with what was being done. The source keeps its
    /// [`std::io::ErrorKind`] ([`Error::io_kind`]): a full disk, a permission problem and a
    /// missing file can be told apart.
    #[error("I/O error {context}: {source}")]
    Io {
        /// What was being done ("creating log segment wal-1-0-3.log").
        context: String,
        /// The operating system's error.
        #[source]
        source: Arc<std::io::Error>,
    },
    /// A log write or sync failed earlier: no commit can be acknowledged any more. The
    /// outcome of the commit that got this error is unknown: it may or may not be durable.
    /// Close and reopen the database; recovery keeps every acknowledged commit. The
    /// [`Poison`] keeps the first failure's operating-system error ([`Error::os_error`]):
    /// a full disk is `ENOSPC`.
    #[error("the database is poisoned by an earlier log failure ({0}); reopen it")]
    Poisoned(Poison),
    /// A database file is damaged, missing, or is not a tsumiki file; the [`Corruption`]
    /// names the file, the offset and the reason where they are known.
    #[error("corrupt database: {0}")]
    Corrupt(Corruption),
    /// The database is open elsewhere (another process, or another handle).
    #[error("{0}")]
    Locked(String),
    /// [`Db::open`](crate::Db::open) found no database at the path (use
    /// [`Db::create`](crate::Db::create) to make one).
    #[error("{0}")]
    NotFound(String),
    /// [`OpenOptions::create_new`](crate::OpenOptions::create_new) found something at the
    /// path, or a truncating open found something there that is not a tsumiki database.
    #[error("{0}")]
    AlreadyExists(String),
    /// A write through a database opened with [`Options::read_only`](crate::Options::read_only).
    #[error("the database was opened read-only")]
    ReadOnly,
    /// Input a call cannot take, such as records out of order for
    /// [`Db::bulk_load`](crate::Db::bulk_load); nothing was written.
    #[error("{0}")]
    InvalidInput(String),
}

/// `key` for a message: its bytes with everything outside printable ASCII escaped, at
/// most 64 of them.
pub(crate) fn show_key(key: &[u8]) -> String {
    let shown = key.iter().take(64).flat_map(|b| b.escape_ascii()).map(char::from).collect::<String>();
    if key.len() > 64 {
        format!("{shown}... ({} bytes)", key.len())
    } else {
        shown
    }
}

/// The largest write set one transaction may log, in encoded bytes ([`Error::TxnTooLarge`]).
pub const MAX_TXN_BYTES: u64 = crate::limits::MAX_WRITE_SET_BYTES as u64;

/// What kind of failure an [`Error`] is: stable across releases (new kinds may be added,
/// existing ones keep their meaning). The C library and the Python module map from it:
///
/// | kind | C code (`tsumiki_dbm_errcode`) | errno | Python |
/// |---|---|---|---|
/// | `Conflict`, `TxnFinished` | `TSUMIKI_DBM_CONFLICT` | `EAGAIN` | `tsumiki.ConflictError` |
/// | `KeyTooLong`, `ValueTooLong` | `TSUMIKI_DBM_TOO_LONG` | `EINVAL` | `tsumiki.error` |
/// | `TxnTooLarge` | `TSUMIKI_DBM_TXN_TOO_LARGE` | `EFBIG` | `tsumiki.error` |
/// | `InvalidArgument` (also [`Error::InvalidInput`]) | `TSUMIKI_DBM_BAD_ARGUMENT` | `EINVAL` | `tsumiki.error` |
/// | `Io` | `TSUMIKI_DBM_IO` | the OS error's, else `EIO` | `tsumiki.error` |
/// | `Poisoned` | `TSUMIKI_DBM_POISONED` | the first failure's, else `EIO` | `tsumiki.error` |
/// | `Corrupt` | `TSUMIKI_DBM_CORRUPT` | `EIO` | `tsumiki.error` |
/// | `Locked` | `TSUMIKI_DBM_LOCKED` | `EAGAIN` | `tsumiki.error` |
/// | `NotFound` | `TSUMIKI_DBM_NOT_FOUND` | `ENOENT` | `tsumiki.error` |
/// | `AlreadyExists` | `TSUMIKI_DBM_EXISTS` | `EEXIST` | `tsumiki.error` |
/// | `ReadOnly` | `TSUMIKI_DBM_READ_ONLY` | `EPERM` | `tsumiki.error` |
///
/// (`tsumiki.error` is a subclass of `OSError`, raised with the errno of the table.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A conflict with another transaction ([`Error::Conflict`]): run it again.
    Conflict,
    /// The transaction already ended ([`Error::TxnFinished`]).
    TxnFinished,
    /// A key over the limit ([`Error::KeyTooLong`]).
    KeyTooLong,
    /// A value over the limit ([`Error::ValueTooLong`]).
    ValueTooLong,
    /// A write set over the log record limit ([`Error::TxnTooLarge`]).
    TxnTooLarge,
    /// A bad option or configuration ([`Error::Config`], [`Error::Index`]), or input a call
    /// cannot take ([`Error::InvalidInput`]).
    InvalidArgument,
    /// An operating-system error ([`Error::Io`]).
    Io,
    /// An earlier log failure ([`Error::Poisoned`]): reopen.
    Poisoned,
    /// A damaged database ([`Error::Corrupt`]).
    Corrupt,
    /// Open elsewhere ([`Error::Locked`]).
    Locked,
    /// No database at the path ([`Error::NotFound`]).
    NotFound,
    /// Something exists at the path ([`Error::AlreadyExists`]).
    AlreadyExists,
    /// A write through a read-only database ([`Error::ReadOnly`]).
    ReadOnly,
}

impl ErrorKind {
    /// The errno of this kind when no operating-system error says more (see the table
    /// above; [`Error::errno`] prefers the operating system's own).
    pub fn errno(self) -> i32 {
        match self {
            ErrorKind::Conflict | ErrorKind::TxnFinished | ErrorKind::Locked => libc::EAGAIN,
            ErrorKind::KeyTooLong | ErrorKind::ValueTooLong | ErrorKind::InvalidArgument => libc::EINVAL,
            ErrorKind::TxnTooLarge => libc::EFBIG,
            ErrorKind::Io | ErrorKind::Poisoned | ErrorKind::Corrupt => libc::EIO,
            ErrorKind::NotFound => libc::ENOENT,
            ErrorKind::AlreadyExists => libc::EEXIST,
            ErrorKind::ReadOnly => libc::EPERM,
        }
    }
}

/// Why a database is poisoned ([`Error::Poisoned`]): what was being done, and the first
/// operating-system error, if one caused it. Every later commit reports the same one.
///
/// It dereferences to its context, so code written when the variant held a `String`
/// (`m.contains("...")`) keeps working; `to_string()` gives the context and the cause.
#[derive(Debug, Clone)]
pub struct Poison {
    /// What failed ("log write failed; the database is poisoned").
    pub context: String,
    /// The operating system's error behind it (`None`: a failure of another kind, such as
    /// a damaged file met by a checkpoint, or a disk already full at open).
    pub source: Option<Arc<std::io::Error>>,
}

impl Poison {
    /// A poisoning by `context` alone.
    pub fn new(context: impl Into<String>) -> Poison {
        Poison { context: context.into(), source: None }
    }

    /// A poisoning by the operating-system error `source`, met while doing `context`.
    pub fn io(context: impl Into<String>, source: Arc<std::io::Error>) -> Poison {
        Poison { context: context.into(), source: Some(source) }
    }
}

impl Poison {
    /// A poisoning by `cause`, met while doing `what`: keeps its operating-system error.
    pub(crate) fn caused_by(what: &str, cause: &Error) -> Poison {
        match cause {
            Error::Io { context, source } => Poison::io(format!("{what}: {context}"), source.clone()),
            Error::Poisoned(p) => p.clone(),
            e => Poison::new(format!("{what}: {e}")),
        }
    }
}

impl std::fmt::Display for Poison {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.source {
            Some(e) => write!(f, "{}: {e}", self.context),
            None => f.write_str(&self.context),
        }
    }
}

impl std::ops::Deref for Poison {
    type Target = str;

    fn deref(&self) -> &str {
        &self.context
    }
}

impl From<String> for Poison {
    fn from(context: String) -> Poison {
        Poison::new(context)
    }
}

/// What is wrong with a damaged database ([`Error::Corrupt`]): the file and the offset in
/// it, where known, and the reason.
///
/// It dereferences to its reason, so code written when the variant held a `String`
/// (`m.contains("...")`) keeps working; `to_string()` names the file and offset too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Corruption {
    /// The damaged file's name in the database directory (`None`: not one file's fault,
    /// such as a state the files disagree on).
    pub file: Option<String>,
    /// The byte offset of the damage in `file`, where known.
    pub offset: Option<u64>,
    /// What is wrong.
    pub reason: String,
}

impl Corruption {
    /// A corruption of no particular file.
    pub fn new(reason: impl Into<String>) -> Corruption {
        Corruption { file: None, offset: None, reason: reason.into() }
    }

    /// A corruption of `file`, at `offset` if known.
    pub fn in_file(file: impl Into<String>, offset: Option<u64>, reason: impl Into<String>) -> Corruption {
        Corruption { file: Some(file.into()), offset, reason: reason.into() }
    }
}

impl std::fmt::Display for Corruption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.file, self.offset) {
            (Some(file), Some(off)) => write!(f, "{file} at offset {off}: {}", self.reason),
            (Some(file), None) => write!(f, "{file}: {}", self.reason),
            _ => f.write_str(&self.reason),
        }
    }
}

impl std::ops::Deref for Corruption {
    type Target = str;

    fn deref(&self) -> &str {
        &self.reason
    }
}

impl From<String> for Corruption {
    fn from(reason: String) -> Corruption {
        Corruption::new(reason)
    }
}

impl From<&str> for Corruption {
    fn from(reason: &str) -> Corruption {
        Corruption::new(reason)
    }
}

impl Error {
    /// Whether running the transaction again may succeed (a conflict with another one).
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Conflict(_))
    }

    /// The stable kind of this error, which bindings map to their codes.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Conflict(_) => ErrorKind::Conflict,
            Error::TxnFinished => ErrorKind::TxnFinished,
            Error::KeyTooLong { .. } => ErrorKind::KeyTooLong,
            Error::ValueTooLong { .. } => ErrorKind::ValueTooLong,
            Error::TxnTooLarge { .. } => ErrorKind::TxnTooLarge,
            Error::Index(_) | Error::Config(_) | Error::InvalidInput(_) => ErrorKind::InvalidArgument,
            Error::Io { .. } => ErrorKind::Io,
            Error::Poisoned(_) => ErrorKind::Poisoned,
            Error::Corrupt(_) => ErrorKind::Corrupt,
            Error::Locked(_) => ErrorKind::Locked,
            Error::NotFound(_) => ErrorKind::NotFound,
            Error::AlreadyExists(_) => ErrorKind::AlreadyExists,
            Error::ReadOnly => ErrorKind::ReadOnly,
        }
    }

    /// The kind of the operating system's error, for [`Error::Io`] and for an
    /// [`Error::Poisoned`] that one caused.
    pub fn io_kind(&self) -> Option<std::io::ErrorKind> {
        self.os_error().map(std::io::Error::kind)
    }

    /// The operating system's error behind this one: an [`Error::Io`]'s source, or the
    /// first failure of an [`Error::Poisoned`] database.
    pub fn os_error(&self) -> Option<&std::io::Error> {
        match self {
            Error::Io { source, .. } | Error::Poisoned(Poison { source: Some(source), .. }) => Some(source),
            _ => None,
        }
    }

    /// The errno for this error: the operating system's own when there is one (or the one
    /// its [`std::io::ErrorKind`] stands for, as for a simulated full disk), else its
    /// kind's ([`ErrorKind::errno`]). Never 0.
    pub fn errno(&self) -> i32 {
        self.os_error().and_then(errno_of_io).unwrap_or_else(|| self.kind().errno())
    }

    /// An [`Error::Io`] for `source` met while doing `context`.
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Error {
        Error::Io { context: context.into(), source: Arc::new(source) }
    }
}

/// The errno of an I/O error: its own, or the one its kind stands for.
fn errno_of_io(e: &std::io::Error) -> Option<i32> {
    use std::io::ErrorKind as K;
    if let Some(n) = e.raw_os_error().filter(|&n| n != 0) {
        return Some(n);
    }
    Some(match e.kind() {
        K::StorageFull => libc::ENOSPC,
        K::NotFound => libc::ENOENT,
        K::PermissionDenied => libc::EACCES,
        K::AlreadyExists => libc::EEXIST,
        K::WouldBlock => libc::EAGAIN,
        K::ReadOnlyFilesystem => libc::EROFS,
        K::QuotaExceeded => libc::EDQUOT,
        K::FileTooLarge => libc::EFBIG,
        K::InvalidInput => libc::EINVAL,
        _ => return None,
    })
}

/// Two I/O errors are equal when they say the same thing of the same kind of failure.
impl PartialEq for Error {
    fn eq(&self, other: &Self) -> bool {
        use Error::*;
        match (self, other) {
            (Conflict(a), Conflict(b)) => a == b,
            (KeyTooLong { len: a, max: m }, KeyTooLong { len: b, max: n })
            | (ValueTooLong { len: a, max: m }, ValueTooLong { len: b, max: n }) => a == b && m == n,
            (TxnTooLarge { max: a }, TxnTooLarge { max: b }) => a == b,
            (TxnFinished, TxnFinished) | (ReadOnly, ReadOnly) => true,
            (Index(a), Index(b)) => a == b,
            (Io { context: a, source: s }, Io { context: b, source: t }) => a == b && s.kind() == t.kind(),
            (Poisoned(a), Poisoned(b)) => {
                a.context == b.context && a.source.as_ref().map(|s| s.kind()) == b.source.as_ref().map(|s| s.kind())
            }
            (Corrupt(a), Corrupt(b)) => a == b,
            (Config(a), Config(b))
            | (Locked(a), Locked(b))
            | (NotFound(a), NotFound(b))
            | (AlreadyExists(a), AlreadyExists(b))
            | (InvalidInput(a), InvalidInput(b)) => a == b,
            _ => false,
        }
    }
}

impl Eq for Error {}

impl From<Conflict> for Error {
    fn from(c: Conflict) -> Self {
        Error::Conflict(c)
    }
}
