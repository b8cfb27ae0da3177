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
#[derive(Debug, Clone, thiserror::Error)]
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
    /// Close and reopen the database; recovery keeps every acknowledged commit.
    #[error("the database is poisoned by an earlier log failure ({0}); reopen it")]
    Poisoned(String),
    /// A database file is damaged, missing, or is not a tsumiki file.
    #[error("corrupt database: {0}")]
    Corrupt(String),
    /// The database is open elsewhere (another process, or another handle).
    #[error("{0}")]
    Locked(String),
    /// [`Db::open`](crate::Db::open) found no database at the path (use
    /// [`Db::create`](crate::Db::create) to make one).
    #[error("{0}")]
    NotFound(String),
    /// A write through a database opened with [`Options::read_only`](crate::Options::read_only).
    #[error("the database was opened read-only")]
    ReadOnly,
}

impl Error {
    /// Whether running the transaction again may succeed (a conflict with another one).
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Conflict(_))
    }

    /// The kind of the operating system's error, for [`Error::Io`].
    pub fn io_kind(&self) -> Option<std::io::ErrorKind> {
        match self {
            Error::Io { source, .. } => Some(source.kind()),
            _ => None,
        }
    }

    /// An [`Error::Io`] for `source` met while doing `context`.
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Error {
        Error::Io { context: context.into(), source: Arc::new(source) }
    }
}

/// Two I/O errors are equal when they say the same thing of the same kind of failure.
impl PartialEq for Error {
    fn eq(&self, other: &Self) -> bool {
        use Error::*;
        match (self, other) {
            (Conflict(a), Conflict(b)) => a == b,
            (KeyTooLong { len: a, max: m }, KeyTooLong { len: b, max: n })
            | (ValueTooLong { len: a, max: m }, ValueTooLong { len: b, max: n }) => a == b && m == n,
            (TxnFinished, TxnFinished) | (ReadOnly, ReadOnly) => true,
            (Index(a), Index(b)) => a == b,
            (Io { context: a, source: s }, Io { context: b, source: t }) => a == b && s.kind() == t.kind(),
            (Config(a), Config(b))
            | (Poisoned(a), Poisoned(b))
            | (Corrupt(a), Corrupt(b))
            | (Locked(a), Locked(b))
            | (NotFound(a), NotFound(b)) => a == b,
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
