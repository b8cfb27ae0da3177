//! Transactions of the public API: [`Txn`] (one dispatch over the protocols), [`ReadTxn`],
//! key ranges and [`Scan`].

use super::*;

/// A snapshot read transaction ([`Db::begin_read`], [`Db::view`]): the reads of [`Txn`],
/// no writes, all of one committed state. Dropping it ends the snapshot.
pub struct ReadTxn<'a> {
    pub(super) txn: Txn<'a>,
}

impl<'a> ReadTxn<'a> {
    /// The value of `key`, if present.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>, Error> {
        self.txn.get(key)
    }

    /// The value of `key`, borrowed by `f`; see [`Txn::get_with`].
    pub fn get_with<T>(&self, key: impl AsRef<[u8]>, f: impl FnOnce(Option<&[u8]>) -> T) -> Result<T, Error> {
        self.txn.get_with(key, f)
    }

    /// The values of `keys`, in order; see [`Txn::get_many`].
    pub fn get_many<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<Vec<Option<Vec<u8>>>, Error> {
        self.txn.get_many(keys)
    }

    /// The values of `keys`, borrowed by `f`; see [`Txn::get_many_with`].
    pub fn get_many_with<K: AsRef<[u8]>>(&self, keys: &[K], f: impl FnMut(usize, Option<&[u8]>)) -> Result<(), Error> {
        self.txn.get_many_with(keys, f)
    }

    /// The records whose keys are in `range`; see [`Txn::range`].
    pub fn range(&self, range: impl KeyRange) -> Scan<'_, 'a> {
        self.txn.range(range)
    }

    /// Every record; see [`Txn::iter`].
    pub fn iter(&self) -> Scan<'_, 'a> {
        self.txn.iter()
    }

    /// The records whose keys start with `prefix`; see [`Txn::prefix`].
    pub fn prefix(&self, prefix: impl AsRef<[u8]>) -> Scan<'_, 'a> {
        self.txn.prefix(prefix)
    }

    /// The number of records in the snapshot. Under TicToc, Silo and 2PL it comes from a
    /// count the commits keep (no scan: a few atomic reads per worker thread); under
    /// MVCC-SI it is counted by a scan.
    ///
    /// ```
    /// # use tsumiki::{Db, Options};
    /// # let db = Db::open_in_memory(Options::default()).unwrap();
    /// db.run(|t| { t.put("a", "1")?; t.put("b", "2") }).unwrap();
    /// let snap = db.begin_read();
    /// db.run(|t| t.delete("a").map(drop)).unwrap();
    /// assert_eq!(snap.len().unwrap(), 2); // its state, not the latest
    /// assert_eq!(db.len().unwrap(), 1);
    /// ```
    pub fn len(&self) -> Result<u64, Error> {
        self.txn.len()
    }

    /// Whether the snapshot holds no record.
    pub fn is_empty(&self) -> Result<bool, Error> {
        self.txn.is_empty()
    }
}

pub(super) enum AnyTxn<'a> {
    TicToc(TypedTxn<'a, TicToc>),
    Silo(TypedTxn<'a, Silo>),
    TwoPl(TypedTxn<'a, TwoPl>),
    Si(TypedTxn<'a, Si>),
}

impl<'a> From<TypedTxn<'a, TicToc>> for AnyTxn<'a> {
    fn from(t: TypedTxn<'a, TicToc>) -> Self {
        AnyTxn::TicToc(t)
    }
}
impl<'a> From<TypedTxn<'a, Silo>> for AnyTxn<'a> {
    fn from(t: TypedTxn<'a, Silo>) -> Self {
        AnyTxn::Silo(t)
    }
}
impl<'a> From<TypedTxn<'a, TwoPl>> for AnyTxn<'a> {
    fn from(t: TypedTxn<'a, TwoPl>) -> Self {
        AnyTxn::TwoPl(t)
    }
}
impl<'a> From<TypedTxn<'a, Si>> for AnyTxn<'a> {
    fn from(t: TypedTxn<'a, Si>) -> Self {
        AnyTxn::Si(t)
    }
}

// Transactions move between threads (the C and Python bindings hold them across calls).
const _: fn() = || {
    fn assert_send<T: Send>() {}
    assert_send::<Txn<'static>>();
    assert_send::<TypedTxn<'static, TicToc>>();
    assert_send::<TypedTxn<'static, Si>>();
};

/// A transaction. Reads see the transaction's own writes. Under TicToc, Silo and 2PL every
/// transaction is serializable, scans included (no phantoms); under MVCC-SI it reads the
/// snapshot taken when it began, and of two concurrent writers of a key the second aborts.
///
/// Reads take `&self`, so a [`get`](Self::get) may run while a scan of the same transaction
/// is open; writes take `&mut self`.
///
/// A conflict ([`Error::Conflict`]) rolls the transaction back at once; later calls return
/// [`Error::TxnFinished`].
pub struct Txn<'a> {
    /// Borrowed mutably for one operation (or one step of a scan) at a time.
    pub(super) inner: RefCell<AnyTxn<'a>>,
    /// The buffer [`get_with`](Self::get_with) reads into, kept between calls.
    pub(super) value_buf: Cell<Vec<u8>>,
    /// [`get_many_with`](Self::get_many_with)'s value lengths, reused.
    pub(super) lens_buf: Cell<Vec<Option<usize>>>,
}

impl<'a> Txn<'a> {
    /// The value of `key`, if present.
    ///
    /// ```
    /// # use tsumiki::{Db, Options};
    /// # let db = Db::open_in_memory(Options::default()).unwrap();
    /// let mut txn = db.begin();
    /// assert_eq!(txn.get(b"k").unwrap(), None);
    /// txn.put(b"k", b"v").unwrap();
    /// assert_eq!(txn.get(b"k").unwrap(), Some(b"v".to_vec())); // its own write
    /// assert_eq!(txn.get("k").unwrap(), Some(b"v".to_vec())); // any `AsRef<[u8]>`
    /// ```
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>, Error> {
        dispatch!(AnyTxn, &mut *self.inner.borrow_mut(), t => t.get(key.as_ref()))
    }

    /// Calls `f` with the value of `key` (`None`: absent), borrowed, and returns what `f`
    /// returns: the read of [`get`](Self::get) without allocating for the value (it is
    /// copied into a buffer the transaction keeps from call to call).
    ///
    /// ```
    /// # use tsumiki::{Db, Options};
    /// # let db = Db::open_in_memory(Options::default()).unwrap();
    /// let mut txn = db.begin();
    /// txn.put(b"k", b"value").unwrap();
    /// assert_eq!(txn.get_with(b"k", |v| v.map(<[u8]>::len)).unwrap(), Some(5));
    /// assert_eq!(txn.get_with(b"x", |v| v.is_none()).unwrap(), true);
    /// ```
    pub fn get_with<T>(&self, key: impl AsRef<[u8]>, f: impl FnOnce(Option<&[u8]>) -> T) -> Result<T, Error> {
        // Out of the cell while `f` runs: `f` may use the transaction again.
        let mut buf = self.value_buf.take();
        buf.clear();
        let present = dispatch!(AnyTxn, &mut *self.inner.borrow_mut(), t => t.get_into(key.as_ref(), &mut buf));
        let r = present.map(|p| f(p.then_some(buf.as_slice())));
        self.value_buf.set(buf);
        r
    }

    /// The values of `keys`, in order (`None`: absent): what a [`get`](Self::get) per key
    /// returns, read under one epoch pin, the descents of a few keys ahead of their reads
    /// so that their cache misses overlap (as RocksDB's `MultiGet`). The values of the
    /// whole batch are held at once: pass batches of a size that fits in memory.
    ///
    /// ```
    /// # use tsumiki::{Db, Options};
    /// # let db = Db::open_in_memory(Options::default()).unwrap();
    /// db.run(|t| { t.put("a", "1")?; t.put("c", "3") }).unwrap();
    /// let txn = db.begin();
    /// let got = txn.get_many(&["a", "b", "c"]).unwrap();
    /// assert_eq!(got, [Some(b"1".to_vec()), None, Some(b"3".to_vec())]);
    /// ```
    pub fn get_many<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<Vec<Option<Vec<u8>>>, Error> {
        let mut out = Vec::with_capacity(keys.len());
        self.get_many_with(keys, |_, v| out.push(v.map(<[u8]>::to_vec)))?;
        Ok(out)
    }

    /// [`get_many`](Self::get_many) with the values borrowed: once all are read, `f` gets
    /// each key's position in `keys` and its value, in order (and may use the
    /// transaction). Nothing is allocated per key.
    ///
    /// ```
    /// # use tsumiki::{Db, Options};
    /// # let db = Db::open_in_memory(Options::default()).unwrap();
    /// db.run(|t| { t.put("a", "1")?; t.put("c", "333") }).unwrap();
    /// let mut total = 0;
    /// db.begin_read().get_many_with(&["a", "b", "c"], |_, v| total += v.map_or(0, <[u8]>::len)).unwrap();
    /// assert_eq!(total, 4);
    /// ```
    pub fn get_many_with<K: AsRef<[u8]>>(
        &self,
        keys: &[K],
        mut f: impl FnMut(usize, Option<&[u8]>),
    ) -> Result<(), Error> {
        // Out of their cells while `f` runs: `f` may use the transaction again.
        let mut buf = self.value_buf.take();
        let mut lens = self.lens_buf.take();
        buf.clear();
        lens.clear();
        let r = dispatch!(AnyTxn, &mut *self.inner.borrow_mut(), t => t.get_many_into(keys, &mut buf, &mut lens));
        if r.is_ok() {
            let mut at = 0;
            for (i, len) in lens.iter().enumerate() {
                let v = len.map(|n| {
                    at += n;
                    &buf[at - n..at]
                });
                f(i, v);
            }
        }
        self.value_buf.set(buf);
        self.lens_buf.set(lens);
        r
    }

    /// Stores `value` under `key`, whether or not it exists.
    ///
    /// ```
    /// # use tsumiki::{Db, Options, Error};
    /// # let db = Db::open_in_memory(Options::default()).unwrap();
    /// let mut txn = db.begin();
    /// txn.put(b"k", b"v1").unwrap();
    /// txn.put("k", String::from("v2")).unwrap();
    /// assert!(matches!(txn.put(vec![0; 5000], b"v"), Err(Error::KeyTooLong { .. })));
    /// ```
    pub fn put(&mut self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<(), Error> {
        dispatch!(AnyTxn, self.inner.get_mut(), t => t.put(key.as_ref(), value.as_ref()))
    }

    /// Inserts only if `key` is absent; returns whether it did.
    ///
    /// ```
    /// # use tsumiki::{Db, Options};
    /// # let db = Db::open_in_memory(Options::default()).unwrap();
    /// let mut txn = db.begin();
    /// assert!(txn.insert(b"k", b"first").unwrap());
    /// assert!(!txn.insert(b"k", b"second").unwrap());
    /// assert_eq!(txn.get(b"k").unwrap(), Some(b"first".to_vec()));
    /// ```
    pub fn insert(&mut self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<bool, Error> {
        dispatch!(AnyTxn, self.inner.get_mut(), t => t.insert(key.as_ref(), value.as_ref()))
    }

    /// Replaces the value only if `key` is present; returns whether it did.
    ///
    /// ```
    /// # use tsumiki::{Db, Options};
    /// # let db = Db::open_in_memory(Options::default()).unwrap();
    /// let mut txn = db.begin();
    /// assert!(!txn.update(b"k", b"v").unwrap());
    /// txn.put(b"k", b"v").unwrap();
    /// assert!(txn.update(b"k", b"w").unwrap());
    /// ```
    pub fn update(&mut self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<bool, Error> {
        dispatch!(AnyTxn, self.inner.get_mut(), t => t.update(key.as_ref(), value.as_ref()))
    }

    /// Deletes `key`; returns whether it was present.
    ///
    /// ```
    /// # use tsumiki::{Db, Options};
    /// # let db = Db::open_in_memory(Options::default()).unwrap();
    /// let mut txn = db.begin();
    /// txn.put(b"k", b"v").unwrap();
    /// assert!(txn.delete(b"k").unwrap());
    /// assert!(!txn.delete(b"k").unwrap());
    /// ```
    pub fn delete(&mut self, key: impl AsRef<[u8]>) -> Result<bool, Error> {
        dispatch!(AnyTxn, self.inner.get_mut(), t => t.delete(key.as_ref()))
    }

    /// Deletes every record for which `keep(key, value)` returns false, in one pass in key
    /// order; returns how many it deleted (redb's `retain`). Each record is deleted through
    /// what the pass read, with no second lookup, so this is cheaper than a scan followed
    /// by [`delete`](Self::delete)s. Serializable as a scan of every key is.
    ///
    /// ```
    /// # use tsumiki::{Db, Options};
    /// # let db = Db::open_in_memory(Options::default()).unwrap();
    /// let mut txn = db.begin();
    /// for (k, v) in [("a", "1"), ("b", "2"), ("c", "3"), ("d", "4")] {
    ///     txn.put(k, v).unwrap();
    /// }
    /// let odd = |_: &[u8], v: &[u8]| v[0] % 2 == 1;
    /// assert_eq!(txn.retain(odd).unwrap(), 2);
    /// assert_eq!(txn.iter().map(|r| r.unwrap().0).collect::<Vec<_>>(), [b"a", b"c"]);
    /// ```
    pub fn retain(&mut self, keep: impl FnMut(&[u8], &[u8]) -> bool) -> Result<u64, Error> {
        self.retain_in(.., keep)
    }

    /// [`retain`](Self::retain) over the keys in `range` only (redb's `retain_in`).
    ///
    /// ```
    /// # use tsumiki::{Db, Options};
    /// # let db = Db::open_in_memory(Options::default()).unwrap();
    /// let mut txn = db.begin();
    /// for k in ["a", "b", "c", "d"] {
    ///     txn.put(k, "v").unwrap();
    /// }
    /// assert_eq!(txn.retain_in("b"..="c", |_, _| false).unwrap(), 2);
    /// assert_eq!(txn.iter().map(|r| r.unwrap().0).collect::<Vec<_>>(), [b"a", b"d"]);
    /// ```
    pub fn retain_in(&mut self, range: impl KeyRange, keep: impl FnMut(&[u8], &[u8]) -> bool) -> Result<u64, Error> {
        let (start, end) = bounds(&range);
        dispatch!(AnyTxn, self.inner.get_mut(), t => t.retain_in(&start, end.as_deref(), keep))
    }

    /// Deletes the record with the smallest key and returns it (`None` when there is
    /// none): one scan step and a delete of the record it read. Pops in one transaction
    /// skip its earlier pops' deletes instead of walking them again.
    ///
    /// ```
    /// # use tsumiki::{Db, Options};
    /// # let db = Db::open_in_memory(Options::default()).unwrap();
    /// let mut txn = db.begin();
    /// txn.put("a", "1").unwrap();
    /// txn.put("b", "2").unwrap();
    /// assert_eq!(txn.pop_first().unwrap(), Some((b"a".to_vec(), b"1".to_vec())));
    /// assert_eq!(txn.pop_last().unwrap(), Some((b"b".to_vec(), b"2".to_vec())));
    /// assert_eq!(txn.pop_first().unwrap(), None);
    /// ```
    pub fn pop_first(&mut self) -> Result<Option<Row>, Error> {
        dispatch!(AnyTxn, self.inner.get_mut(), t => t.pop(false))
    }

    /// Deletes the record with the largest key and returns it (see
    /// [`pop_first`](Self::pop_first)).
    pub fn pop_last(&mut self) -> Result<Option<Row>, Error> {
        dispatch!(AnyTxn, self.inner.get_mut(), t => t.pop(true))
    }

    /// The records whose keys are in `range` (any Rust range of `AsRef<[u8]>` keys:
    /// `a..b`, `a..=b`, `a..`, `..b`), in ascending key order, as `(key, value)`;
    /// [`.rev()`](Scan::rev) makes it descending. Reads (a `get`) may run while the scan
    /// is open.
    ///
    /// ```
    /// # use tsumiki::{Db, Options};
    /// # let db = Db::open_in_memory(Options::default()).unwrap();
    /// let mut txn = db.begin();
    /// for k in ["a", "b", "c", "d"] {
    ///     txn.put(k, k.to_uppercase()).unwrap();
    /// }
    /// let keys = |s: tsumiki::Scan| s.map(|r| r.unwrap().0).collect::<Vec<_>>();
    /// assert_eq!(keys(txn.range("b".."d")), [b"b", b"c"]);
    /// assert_eq!(keys(txn.range("b"..="d")), [b"b", b"c", b"d"]);
    /// assert_eq!(keys(txn.range(.."b")), [b"a"]);
    /// assert_eq!(keys(txn.range("c"..).rev()), [b"d", b"c"]);
    /// assert_eq!(keys(txn.range(b"a".as_slice()..b"c")), [b"a", b"b"]);
    /// assert_eq!(txn.range(..).count(), 4);
    /// // A read inside the scan loop:
    /// for row in txn.range("a"..) {
    ///     let (key, value) = row.unwrap();
    ///     assert_eq!(txn.get(&key).unwrap(), Some(value));
    /// }
    /// ```
    pub fn range(&self, range: impl KeyRange) -> Scan<'_, 'a> {
        let (start, end) = bounds(&range);
        Scan { txn: self, cursor: ScanCursor::new(start, end, false) }
    }

    /// Every record, in ascending key order (`.rev()`: descending).
    ///
    /// ```
    /// # use tsumiki::{Db, Options};
    /// # let db = Db::open_in_memory(Options::default()).unwrap();
    /// # db.run(|t| { t.put("x", "1")?; t.put("y", "2") }).unwrap();
    /// let txn = db.begin();
    /// assert_eq!(txn.iter().count(), 2);
    /// assert_eq!(txn.iter().rev().next().unwrap().unwrap().0, b"y"); // the last key
    /// ```
    pub fn iter(&self) -> Scan<'_, 'a> {
        Scan { txn: self, cursor: ScanCursor::new(Vec::new(), None, false) }
    }

    /// The records whose keys start with `prefix`, in ascending key order (`.rev()`:
    /// descending).
    ///
    /// ```
    /// # use tsumiki::{Db, Options};
    /// # let db = Db::open_in_memory(Options::default()).unwrap();
    /// let mut txn = db.begin();
    /// for k in ["user:1", "user:2", "users", "video:1"] {
    ///     txn.put(k, b"").unwrap();
    /// }
    /// let keys: Vec<_> = txn.prefix("user:").rev().map(|r| r.unwrap().0).collect();
    /// assert_eq!(keys, [b"user:2", b"user:1"]);
    /// ```
    pub fn prefix(&self, prefix: impl AsRef<[u8]>) -> Scan<'_, 'a> {
        let p = prefix.as_ref();
        Scan { txn: self, cursor: ScanCursor::new(p.to_vec(), prefix_end(p), false) }
    }

    /// The number of records the transaction sees (its own writes included), counted by a
    /// scan whose reads join the transaction's like any other: a commit validates them,
    /// so the count is exact at the commit's point in the serial order. A snapshot
    /// ([`ReadTxn::len`]) counts without a scan.
    ///
    /// ```
    /// # use tsumiki::{Db, Options};
    /// # let db = Db::open_in_memory(Options::default()).unwrap();
    /// let mut txn = db.begin();
    /// txn.put("a", "1").unwrap();
    /// assert_eq!(txn.len().unwrap(), 1);
    /// ```
    pub fn len(&self) -> Result<u64, Error> {
        if let Some(n) = dispatch!(AnyTxn, &*self.inner.borrow(), t => t.snapshot_count())? {
            return Ok(n);
        }
        let mut n = 0;
        let mut scan = self.iter();
        while let Some(row) = scan.next_ref() {
            row?;
            n += 1;
        }
        Ok(n)
    }

    /// Whether the transaction sees no record (a scan for the first).
    pub fn is_empty(&self) -> Result<bool, Error> {
        let mut scan = self.iter();
        match scan.next_ref() {
            None => Ok(true),
            Some(row) => row.map(|_| false),
        }
    }

    /// Makes the transaction's writes visible, or fails with a conflict (rolled back).
    ///
    /// ```
    /// # use tsumiki::{Db, Options};
    /// # let db = Db::open_in_memory(Options::default()).unwrap();
    /// let mut t1 = db.begin();
    /// let mut t2 = db.begin();
    /// t1.get(b"x").unwrap();
    /// t2.put(b"x", b"2").unwrap();
    /// t2.commit().unwrap();
    /// t1.put(b"x", b"1").unwrap();
    /// // t1 read "x" before t2 wrote it and writes it after: not serializable.
    /// assert!(t1.commit().unwrap_err().is_retryable());
    /// ```
    pub fn commit(self) -> Result<(), Error> {
        dispatch!(AnyTxn, self.inner.into_inner(), t => t.commit())
    }

    /// Chooses what this transaction's commit promises, in place of the database's
    /// [`LogOptions::durability`](crate::LogOptions::durability) (as redb's
    /// `set_durability` or RocksDB's `WriteOptions`):
    /// - [`Durability::Sync`](crate::Durability::Sync): on the device when `commit` returns;
    /// - [`Durability::Buffered`](crate::Durability::Buffered): handed to the operating system (survives the process,
    ///   not a power loss);
    /// - [`Durability::None`](crate::Durability::None): kept in memory until a later synced commit or a checkpoint.
    ///
    /// The crash rule, whatever the mix (on a database that syncs, the default): a synced
    /// commit makes every commit acknowledged before it durable too, and a crash never
    /// keeps a commit while losing one it read from or one acknowledged before it began.
    /// Under NLR, commits left unsynced live on one log lane at a time: a commit on another
    /// lane first syncs them, so threads that alternate unsynced commits pay a sync each
    /// (a database opened with `Buffered` or `None` does not, and orders nothing across
    /// threads until a synced commit, which syncs every lane). Under ELR and group commit
    /// with held locks, a commit promising less than the database is a deferred one that
    /// nobody waits for.
    ///
    /// ```
    /// # use tsumiki::{Db, Durability, Options};
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = Db::create(dir.path(), Options::default()).unwrap();
    /// let mut txn = db.begin();
    /// txn.set_durability(Durability::None);
    /// txn.put(b"cache", b"warm").unwrap();
    /// txn.commit().unwrap(); // no write, no fdatasync
    /// let mut txn = db.begin();
    /// txn.put(b"order", b"42").unwrap();
    /// txn.commit().unwrap(); // synced: "cache" is durable too
    /// ```
    pub fn set_durability(&mut self, level: crate::Durability) {
        dispatch!(AnyTxn, self.inner.get_mut(), t => t.set_durability(level))
    }

    /// Commits without waiting for the commit to become durable: the returned ticket's
    /// [`CommitTicket::wait`] does. A worker that defers several commits and then waits
    /// for the last lets them share flushes (group commit, paper 001); other transactions
    /// may see the writes before the ticket is waited on only under early lock release.
    ///
    /// ```
    /// # use tsumiki::{Db, Options};
    /// # let db = Db::open_in_memory(Options::default()).unwrap();
    /// let mut txn = db.begin();
    /// txn.put(b"k", b"v").unwrap();
    /// let ticket = txn.commit_deferred().unwrap();
    /// ticket.wait().unwrap();
    /// ```
    pub fn commit_deferred(self) -> Result<CommitTicket, Error> {
        dispatch!(AnyTxn, self.inner.into_inner(), t => t.commit_deferred())
    }

    /// Rolls the transaction back.
    ///
    /// ```
    /// # use tsumiki::{Db, Options};
    /// # let db = Db::open_in_memory(Options::default()).unwrap();
    /// let mut txn = db.begin();
    /// txn.put(b"k", b"v").unwrap();
    /// txn.abort();
    /// assert_eq!(db.begin().get(b"k").unwrap(), None);
    /// ```
    pub fn abort(self) {
        dispatch!(AnyTxn, self.inner.into_inner(), t => t.abort())
    }
}

/// A range of keys for [`Txn::range`]: any Rust range (`a..b`, `a..=b`, `a..`, `..b`,
/// `..=b`, `..`) or pair of [`Bound`]s, of keys of one `AsRef<[u8]>` type (`&str`,
/// `&[u8]`, `Vec<u8>`, `&[u8; N]`...). (A trait of its own rather than `RangeBounds`,
/// whose key type Rust cannot infer from `b"a"..b"b"`.)
pub trait KeyRange {
    /// The lower bound.
    fn start_bound(&self) -> Bound<&[u8]>;
    /// The upper bound.
    fn end_bound(&self) -> Bound<&[u8]>;
}

macro_rules! key_range {
    ($($ty:ty => |$r:ident| ($start:expr, $end:expr)),* $(,)?) => {$(
        impl<K: AsRef<[u8]>> KeyRange for $ty {
            #[allow(unused_variables)]
            fn start_bound(&self) -> Bound<&[u8]> {
                let $r = self;
                $start
            }
            #[allow(unused_variables)]
            fn end_bound(&self) -> Bound<&[u8]> {
                let $r = self;
                $end
            }
        }
    )*};
}

key_range! {
    std::ops::Range<K> => |r| (Bound::Included(r.start.as_ref()), Bound::Excluded(r.end.as_ref())),
    std::ops::RangeInclusive<K> => |r| (Bound::Included(r.start().as_ref()), Bound::Included(r.end().as_ref())),
    std::ops::RangeFrom<K> => |r| (Bound::Included(r.start.as_ref()), Bound::Unbounded),
    std::ops::RangeTo<K> => |r| (Bound::Unbounded, Bound::Excluded(r.end.as_ref())),
    std::ops::RangeToInclusive<K> => |r| (Bound::Unbounded, Bound::Included(r.end.as_ref())),
    (Bound<K>, Bound<K>) => |r| (r.0.as_ref().map(AsRef::as_ref), r.1.as_ref().map(AsRef::as_ref)),
}

impl KeyRange for std::ops::RangeFull {
    fn start_bound(&self) -> Bound<&[u8]> {
        Bound::Unbounded
    }
    fn end_bound(&self) -> Bound<&[u8]> {
        Bound::Unbounded
    }
}

/// The start and (exclusive) end of `range` as a scan takes them.
fn bounds(range: &impl KeyRange) -> (Vec<u8>, Option<Vec<u8>>) {
    let start = match range.start_bound() {
        Bound::Included(k) => k.to_vec(),
        Bound::Excluded(k) => successor_key(k),
        Bound::Unbounded => Vec::new(),
    };
    let end = match range.end_bound() {
        Bound::Included(k) => Some(successor_key(k)),
        Bound::Excluded(k) => Some(k.to_vec()),
        Bound::Unbounded => None,
    };
    (start, end)
}

/// The smallest key above every key that starts with `prefix` (`None`: no such key).
fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// A scan of a transaction ([`Txn::range`], [`Txn::prefix`], [`Txn::iter`]): `(key,
/// value)` pairs, or the error that ended it. Each step reads through the transaction, so
/// what it returns is part of the transaction's reads (validated, or locked, by its
/// protocol).
pub struct Scan<'t, 'a> {
    txn: &'t Txn<'a>,
    cursor: ScanCursor,
}

impl Scan<'_, '_> {
    /// The same records in descending key order (called after some `next()`, what is
    /// left of the range, descending). The index links its leaves rightward only, so a
    /// reverse scan reads the range a window at a time from the top, each window (about a
    /// leaf of the index at most, a few records at first) forward and then reversed.
    ///
    /// ```
    /// # use tsumiki::{Db, Options};
    /// # let db = Db::open_in_memory(Options::default()).unwrap();
    /// # db.run(|t| (0..200u32).try_for_each(|i| t.put(i.to_be_bytes(), b""))).unwrap();
    /// let txn = db.begin();
    /// let mut scan = txn.iter();
    /// assert_eq!(scan.next().unwrap().unwrap().0, 0u32.to_be_bytes());
    /// let rest: Vec<_> = scan.rev().map(|r| u32::from_be_bytes(r.unwrap().0.try_into().unwrap())).collect();
    /// assert_eq!(rest, (1..200).rev().collect::<Vec<u32>>());
    /// ```
    #[allow(clippy::should_implement_trait)]
    pub fn rev(mut self) -> Self {
        self.cursor.reverse();
        self
    }

    /// The next record, borrowed: the key and value stay valid until the scan's next
    /// call. It reads what [`next`](Iterator::next) reads, without allocating for the
    /// record (the scan keeps a chunk of records in one reused buffer), so a loop over a
    /// range allocates nothing per record.
    ///
    /// ```
    /// # use tsumiki::{Db, Options};
    /// # let db = Db::open_in_memory(Options::default()).unwrap();
    /// # db.run(|t| (0..100u32).try_for_each(|i| t.put(i.to_be_bytes(), [1, 2, 3]))).unwrap();
    /// let txn = db.begin();
    /// let mut scan = txn.range(10u32.to_be_bytes()..);
    /// let mut total = 0;
    /// while let Some(row) = scan.next_ref() {
    ///     let (_key, value) = row?;
    ///     total += value.len();
    /// }
    /// assert_eq!(total, 90 * 3);
    /// # Ok::<(), tsumiki::Error>(())
    /// ```
    pub fn next_ref(&mut self) -> Option<Result<RowRef<'_>, Error>> {
        let cursor = &mut self.cursor;
        dispatch!(AnyTxn, &mut *self.txn.inner.borrow_mut(), t => cursor.next_ref(t))
    }
}

impl Drop for Scan<'_, '_> {
    fn drop(&mut self) {
        // Not while the transaction is borrowed (a scan dropped inside a callback of the
        // same transaction): the hint is then lost, nothing else.
        if let Ok(mut inner) = self.txn.inner.try_borrow_mut() {
            let cursor = &mut self.cursor;
            dispatch!(AnyTxn, &mut *inner, t => cursor.finish(t));
        }
    }
}

impl Iterator for Scan<'_, '_> {
    type Item = Result<(Vec<u8>, Vec<u8>), Error>;

    fn next(&mut self) -> Option<Self::Item> {
        let cursor = &mut self.cursor;
        dispatch!(AnyTxn, &mut *self.txn.inner.borrow_mut(), t => cursor.next(t))
    }
}
