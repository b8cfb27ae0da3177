//! [`OwnedTxn`]: a transaction that owns a share of its database, for callers that keep a
//! transaction across calls without a Rust lifetime to tie it to (the C library's
//! `tsumiki_dbm_begin`, the Python module's `Database.transaction()`).

use std::sync::Arc;

use super::{Db, ReadTxn, Txn};
use crate::error::Error;
use crate::wal::CommitTicket;

/// A transaction holding an [`Arc`] of its [`Db`] ([`Db::begin_owned`]): `'static` and
/// `Send`, so it may be stored in a handle and moved between threads. Dropping it rolls
/// back. The operations of [`Txn`] run through [`with`](Self::with) (or the shortcuts
/// below); the database cannot close while it lives.
///
/// ```
/// # use std::sync::Arc;
/// # use tsumiki::{Db, Options};
/// let db = Arc::new(Db::open_in_memory(Options::default()).unwrap());
/// let mut txn = db.begin_owned();
/// std::thread::spawn(move || {
///     txn.put("k", "v").unwrap();
///     let n = txn.with(|t| t.range("a"..).count());
///     assert_eq!(n, 1);
///     txn.commit().unwrap();
/// })
/// .join()
/// .unwrap();
/// assert_eq!(db.begin().get("k").unwrap(), Some(b"v".to_vec()));
/// ```
pub struct OwnedTxn {
    // Declared first, so dropped first: it borrows the `Db` that `db` keeps alive.
    //
    // The `'static` stands for "as long as `db`". Sound because: the `Arc` keeps the `Db`
    // alive and at one address while this exists (`Arc::try_unwrap` cannot move it out
    // while `db` is a strong reference); `txn` drops before `db` (field order, and
    // `commit`/`abort` end it before letting `db` go); and `txn` is only lent to closures
    // generic over its lifetime ([`OwnedTxn::with`]), which can neither keep it nor swap it
    // with another transaction (`Txn` is invariant in its lifetime).
    txn: Txn<'static>,
    db: Arc<Db>,
}

// A handle may carry it to another thread between calls.
const _: fn() = || {
    fn assert_send<T: Send>() {}
    assert_send::<OwnedTxn>();
};

/// A snapshot read transaction holding an [`Arc`] of its [`Db`]
/// ([`Db::begin_read_owned`]): `'static` and `Send`, as [`OwnedTxn`] is. Dropping it ends
/// the snapshot.
///
/// ```
/// # use std::sync::Arc;
/// # use tsumiki::{Db, Options};
/// let db = Arc::new(Db::open_in_memory(Options::default()).unwrap());
/// db.run(|t| t.put("k", "1")).unwrap();
/// let snap = db.begin_read_owned();
/// db.run(|t| t.put("k", "2")).unwrap();
/// let old = std::thread::spawn(move || snap.get("k").unwrap()).join().unwrap();
/// assert_eq!(old, Some(b"1".to_vec()));
/// ```
pub struct OwnedReadTxn {
    // Declared first, so dropped first; `'static` as in `OwnedTxn::txn`, sound for the same
    // reasons (`ReadTxn` wraps an invariant `Txn`, lent only to closures generic over it).
    txn: ReadTxn<'static>,
    db: Arc<Db>,
}

const _: fn() = || {
    fn assert_send<T: Send>() {}
    assert_send::<OwnedReadTxn>();
};

impl OwnedReadTxn {
    /// Runs `f` on the snapshot: any read of [`ReadTxn`] (scans included).
    pub fn read<T>(&self, f: impl FnOnce(&ReadTxn<'_>) -> T) -> T {
        f(&self.txn)
    }

    /// [`ReadTxn::get`].
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>, Error> {
        self.txn.get(key)
    }

    /// The database the snapshot reads.
    pub fn db(&self) -> &Arc<Db> {
        &self.db
    }
}

impl Db {
    /// Starts a snapshot read transaction that keeps the database alive
    /// ([`OwnedReadTxn`]); see [`begin_read`](Self::begin_read).
    pub fn begin_read_owned(self: &Arc<Self>) -> OwnedReadTxn {
        // SAFETY: as in `begin_owned`: the `Db` behind the `Arc` outlives the snapshot.
        let db: &'static Db = unsafe { &*Arc::as_ptr(self) };
        OwnedReadTxn { txn: db.begin_read(), db: Arc::clone(self) }
    }

    /// Starts a transaction that keeps the database alive ([`OwnedTxn`]), for a caller
    /// that must store it without a lifetime.
    pub fn begin_owned(self: &Arc<Self>) -> OwnedTxn {
        // SAFETY: the `Db` behind the `Arc` outlives the transaction that borrows it; see
        // the comment on `OwnedTxn::txn`.
        let db: &'static Db = unsafe { &*Arc::as_ptr(self) };
        OwnedTxn { txn: db.begin(), db: Arc::clone(self) }
    }
}

impl OwnedTxn {
    /// Runs `f` on the transaction: any operation of [`Txn`] (scans included).
    pub fn with<T>(&mut self, f: impl FnOnce(&mut Txn<'_>) -> T) -> T {
        f(&mut self.txn)
    }

    /// Runs `f`, which only reads, on the transaction.
    pub fn read<T>(&self, f: impl FnOnce(&Txn<'_>) -> T) -> T {
        f(&self.txn)
    }

    /// [`Txn::get`].
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>, Error> {
        self.txn.get(key)
    }

    /// [`Txn::put`].
    pub fn put(&mut self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<(), Error> {
        self.txn.put(key, value)
    }

    /// [`Txn::insert`].
    pub fn insert(&mut self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<bool, Error> {
        self.txn.insert(key, value)
    }

    /// [`Txn::delete`].
    pub fn delete(&mut self, key: impl AsRef<[u8]>) -> Result<bool, Error> {
        self.txn.delete(key)
    }

    /// The database the transaction runs on.
    pub fn db(&self) -> &Arc<Db> {
        &self.db
    }

    /// [`Txn::commit`]; the database's share is let go after.
    pub fn commit(self) -> Result<(), Error> {
        let OwnedTxn { txn, db } = self;
        let r = txn.commit();
        drop(db);
        r
    }

    /// [`Txn::commit_deferred`].
    pub fn commit_deferred(self) -> Result<CommitTicket, Error> {
        let OwnedTxn { txn, db } = self;
        let r = txn.commit_deferred();
        drop(db);
        r
    }

    /// [`Txn::abort`].
    pub fn abort(self) {
        let OwnedTxn { txn, db } = self;
        txn.abort();
        drop(db);
    }
}
