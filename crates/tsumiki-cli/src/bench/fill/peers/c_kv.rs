//! LevelDB and RocksDB through their C APIs (`leveldb/c.h`, `rocksdb/c.h`), the Debian
//! system libraries linked by build.rs. The two APIs have the same shape, so one adapter
//! drives both through a table of function pointers (one indirect call per put is noise
//! next to the libraries' own work). Default options plus create_if_missing, and with
//! `--cache-mb` an LRU block cache of that size; each transaction is one write batch
//! written with `sync` as the write option.

use std::ffi::{c_char, c_void, CStr, CString};
use std::path::Path;
use std::ptr;

use super::{Batch, FillConfig, FillEngine, KvEngine, KvReader, Tally};

type P = *mut c_void;

/// The C functions one library provides (all pointers opaque).
pub struct CApi {
    name: &'static str,
    options_create: unsafe extern "C" fn() -> P,
    options_destroy: unsafe extern "C" fn(P),
    options_set_create_if_missing: unsafe extern "C" fn(P, u8),
    open: unsafe extern "C" fn(P, *const c_char, *mut *mut c_char) -> P,
    close: unsafe extern "C" fn(P),
    writeoptions_create: unsafe extern "C" fn() -> P,
    writeoptions_destroy: unsafe extern "C" fn(P),
    writeoptions_set_sync: unsafe extern "C" fn(P, u8),
    readoptions_create: unsafe extern "C" fn() -> P,
    readoptions_destroy: unsafe extern "C" fn(P),
    writebatch_create: unsafe extern "C" fn() -> P,
    writebatch_destroy: unsafe extern "C" fn(P),
    writebatch_clear: unsafe extern "C" fn(P),
    writebatch_put: unsafe extern "C" fn(P, *const c_char, usize, *const c_char, usize),
    write: unsafe extern "C" fn(P, P, P, *mut *mut c_char),
    get: unsafe extern "C" fn(P, P, *const c_char, usize, *mut usize, *mut *mut c_char) -> *mut c_char,
    free: unsafe extern "C" fn(*mut c_void),
    writebatch_delete: unsafe extern "C" fn(P, *const c_char, usize),
    create_iterator: unsafe extern "C" fn(P, P) -> P,
    iter_destroy: unsafe extern "C" fn(P),
    iter_valid: unsafe extern "C" fn(P) -> u8,
    iter_seek_to_first: unsafe extern "C" fn(P),
    iter_seek_to_last: unsafe extern "C" fn(P),
    iter_seek: unsafe extern "C" fn(P, *const c_char, usize),
    iter_next: unsafe extern "C" fn(P),
    iter_prev: unsafe extern "C" fn(P),
    iter_key: unsafe extern "C" fn(P, *mut usize) -> *const c_char,
    iter_value: unsafe extern "C" fn(P, *mut usize) -> *const c_char,
    iter_get_error: unsafe extern "C" fn(P, *mut *mut c_char),
    compact_range: unsafe extern "C" fn(P, *const c_char, usize, *const c_char, usize),
    cache_create_lru: unsafe extern "C" fn(usize) -> P,
    cache_destroy: unsafe extern "C" fn(P),
    /// Makes the options use the cache (the one call whose shape differs: LevelDB sets it
    /// on the options, RocksDB on its block-based table options).
    attach_cache: unsafe fn(P, P),
}

/// Declares one library's functions and its [`CApi`] table. The declarations follow the
/// headers, with every handle type as `void *` (they are opaque structs there).
macro_rules! c_api {
    ($table:ident, $lib:literal, attach_cache = $attach:path;
     $($field:ident = $sym:ident : fn($($arg:ty),*) $(-> $ret:ty)?;)*) => {
        unsafe extern "C" {
            $(fn $sym($(_: $arg),*) $(-> $ret)?;)*
        }
        pub static $table: CApi = CApi { name: $lib, attach_cache: $attach, $($field: $sym),* };
    };
}

#[cfg(have_leveldb)]
c_api!(LEVELDB, "leveldb", attach_cache = leveldb_attach_cache;
    options_create = leveldb_options_create: fn() -> P;
    options_destroy = leveldb_options_destroy: fn(P);
    options_set_create_if_missing = leveldb_options_set_create_if_missing: fn(P, u8);
    open = leveldb_open: fn(P, *const c_char, *mut *mut c_char) -> P;
    close = leveldb_close: fn(P);
    writeoptions_create = leveldb_writeoptions_create: fn() -> P;
    writeoptions_destroy = leveldb_writeoptions_destroy: fn(P);
    writeoptions_set_sync = leveldb_writeoptions_set_sync: fn(P, u8);
    readoptions_create = leveldb_readoptions_create: fn() -> P;
    readoptions_destroy = leveldb_readoptions_destroy: fn(P);
    writebatch_create = leveldb_writebatch_create: fn() -> P;
    writebatch_destroy = leveldb_writebatch_destroy: fn(P);
    writebatch_clear = leveldb_writebatch_clear: fn(P);
    writebatch_put = leveldb_writebatch_put: fn(P, *const c_char, usize, *const c_char, usize);
    write = leveldb_write: fn(P, P, P, *mut *mut c_char);
    get = leveldb_get: fn(P, P, *const c_char, usize, *mut usize, *mut *mut c_char) -> *mut c_char;
    free = leveldb_free: fn(*mut c_void);
    writebatch_delete = leveldb_writebatch_delete: fn(P, *const c_char, usize);
    create_iterator = leveldb_create_iterator: fn(P, P) -> P;
    iter_destroy = leveldb_iter_destroy: fn(P);
    iter_valid = leveldb_iter_valid: fn(P) -> u8;
    iter_seek_to_first = leveldb_iter_seek_to_first: fn(P);
    iter_seek_to_last = leveldb_iter_seek_to_last: fn(P);
    iter_seek = leveldb_iter_seek: fn(P, *const c_char, usize);
    iter_next = leveldb_iter_next: fn(P);
    iter_prev = leveldb_iter_prev: fn(P);
    iter_key = leveldb_iter_key: fn(P, *mut usize) -> *const c_char;
    iter_value = leveldb_iter_value: fn(P, *mut usize) -> *const c_char;
    iter_get_error = leveldb_iter_get_error: fn(P, *mut *mut c_char);
    compact_range = leveldb_compact_range: fn(P, *const c_char, usize, *const c_char, usize);
    cache_create_lru = leveldb_cache_create_lru: fn(usize) -> P;
    cache_destroy = leveldb_cache_destroy: fn(P);
);

#[cfg(have_leveldb)]
unsafe extern "C" {
    fn leveldb_options_set_cache(opts: P, cache: P);
}

/// # Safety
/// `opts` and `cache` are live LevelDB handles; the cache outlives the database.
#[cfg(have_leveldb)]
unsafe fn leveldb_attach_cache(opts: P, cache: P) {
    // SAFETY: the caller's contract.
    unsafe { leveldb_options_set_cache(opts, cache) }
}

#[cfg(have_rocksdb)]
unsafe extern "C" {
    fn rocksdb_block_based_options_create() -> P;
    fn rocksdb_block_based_options_destroy(t: P);
    fn rocksdb_block_based_options_set_block_cache(t: P, cache: P);
    fn rocksdb_options_set_block_based_table_factory(opts: P, t: P);
}

/// # Safety
/// `opts` and `cache` are live RocksDB handles.
#[cfg(have_rocksdb)]
unsafe fn rocksdb_attach_cache(opts: P, cache: P) {
    // SAFETY: the caller's contract; the table options are copied into the factory (which
    // holds a reference to the cache) and destroyed once, here.
    unsafe {
        let t = rocksdb_block_based_options_create();
        rocksdb_block_based_options_set_block_cache(t, cache);
        rocksdb_options_set_block_based_table_factory(opts, t);
        rocksdb_block_based_options_destroy(t);
    }
}

// `unsigned char` in rocksdb/c.h where leveldb has `uint8_t`: the same type.
#[cfg(have_rocksdb)]
c_api!(ROCKSDB, "rocksdb", attach_cache = rocksdb_attach_cache;
    options_create = rocksdb_options_create: fn() -> P;
    options_destroy = rocksdb_options_destroy: fn(P);
    options_set_create_if_missing = rocksdb_options_set_create_if_missing: fn(P, u8);
    open = rocksdb_open: fn(P, *const c_char, *mut *mut c_char) -> P;
    close = rocksdb_close: fn(P);
    writeoptions_create = rocksdb_writeoptions_create: fn() -> P;
    writeoptions_destroy = rocksdb_writeoptions_destroy: fn(P);
    writeoptions_set_sync = rocksdb_writeoptions_set_sync: fn(P, u8);
    readoptions_create = rocksdb_readoptions_create: fn() -> P;
    readoptions_destroy = rocksdb_readoptions_destroy: fn(P);
    writebatch_create = rocksdb_writebatch_create: fn() -> P;
    writebatch_destroy = rocksdb_writebatch_destroy: fn(P);
    writebatch_clear = rocksdb_writebatch_clear: fn(P);
    writebatch_put = rocksdb_writebatch_put: fn(P, *const c_char, usize, *const c_char, usize);
    write = rocksdb_write: fn(P, P, P, *mut *mut c_char);
    get = rocksdb_get: fn(P, P, *const c_char, usize, *mut usize, *mut *mut c_char) -> *mut c_char;
    free = rocksdb_free: fn(*mut c_void);
    writebatch_delete = rocksdb_writebatch_delete: fn(P, *const c_char, usize);
    create_iterator = rocksdb_create_iterator: fn(P, P) -> P;
    iter_destroy = rocksdb_iter_destroy: fn(P);
    iter_valid = rocksdb_iter_valid: fn(P) -> u8;
    iter_seek_to_first = rocksdb_iter_seek_to_first: fn(P);
    iter_seek_to_last = rocksdb_iter_seek_to_last: fn(P);
    iter_seek = rocksdb_iter_seek: fn(P, *const c_char, usize);
    iter_next = rocksdb_iter_next: fn(P);
    iter_prev = rocksdb_iter_prev: fn(P);
    iter_key = rocksdb_iter_key: fn(P, *mut usize) -> *const c_char;
    iter_value = rocksdb_iter_value: fn(P, *mut usize) -> *const c_char;
    iter_get_error = rocksdb_iter_get_error: fn(P, *mut *mut c_char);
    compact_range = rocksdb_compact_range: fn(P, *const c_char, usize, *const c_char, usize);
    cache_create_lru = rocksdb_cache_create_lru: fn(usize) -> P;
    cache_destroy = rocksdb_cache_destroy: fn(P);
);

/// An open LevelDB or RocksDB database and the handles the benchmarks reuse.
pub struct CKv {
    api: &'static CApi,
    db: P,
    /// Write options with `sync` on, and off.
    wopts_sync: P,
    wopts_nosync: P,
    durable: bool,
    ropts: P,
    batch: P,
    /// The block cache (`--cache-mb`), or null; destroyed after the database.
    cache: P,
}

impl CKv {
    fn open(api: &'static CApi, dir: &Path, cfg: &FillConfig) -> Result<Self, String> {
        let path = CString::new(dir.as_os_str().as_encoded_bytes()).map_err(|e| format!("{}: {e}", api.name))?;
        let mut error = ptr::null_mut();
        let mut cache = ptr::null_mut();
        // SAFETY: the table holds the library's own functions with the header's signatures;
        // `path` is a NUL-terminated string that outlives the call; the options are
        // destroyed once, after open (which copies what it keeps; LevelDB keeps the cache
        // pointer, destroyed only after the database); `error` is an out-pointer the library
        // sets to a malloc'ed message or leaves null.
        let db = unsafe {
            let opts = (api.options_create)();
            (api.options_set_create_if_missing)(opts, 1);
            if let Some(bytes) = cfg.cache_bytes {
                cache = (api.cache_create_lru)(bytes);
                (api.attach_cache)(opts, cache);
            }
            let db = (api.open)(opts, path.as_ptr(), &mut error);
            (api.options_destroy)(opts);
            db
        };
        // SAFETY: `error` is null or the library's malloc'ed message, freed once here.
        let opened = unsafe { check(api, error) };
        if opened.is_err() || db.is_null() {
            if !cache.is_null() {
                // SAFETY: created above; no database uses it.
                unsafe { (api.cache_destroy)(cache) };
            }
            opened?;
            return Err(format!("{}: open returned no database", api.name));
        }
        // SAFETY: plain constructors and setters on the handles just created.
        let (wopts_sync, wopts_nosync, ropts, batch) = unsafe {
            let (ws, wn) = ((api.writeoptions_create)(), (api.writeoptions_create)());
            (api.writeoptions_set_sync)(ws, 1);
            (api.writeoptions_set_sync)(wn, 0);
            (ws, wn, (api.readoptions_create)(), (api.writebatch_create)())
        };
        Ok(CKv { api, db, wopts_sync, wopts_nosync, durable: cfg.sync, ropts, batch, cache })
    }

    /// Writes the batch filled by `fill` (cleared first) with the current durability.
    fn write(&mut self, fill: impl FnOnce(&CApi, P)) -> Result<(), String> {
        let api = self.api;
        let mut error = ptr::null_mut();
        let wopts = if self.durable { self.wopts_sync } else { self.wopts_nosync };
        // SAFETY: `self.batch`, `self.db` and the write options are live handles of this
        // library (destroyed only in `close`); `fill` adds records whose pointers are valid
        // during its calls, and the batch copies them.
        unsafe {
            (api.writebatch_clear)(self.batch);
            fill(api, self.batch);
            (api.write)(self.db, wopts, self.batch, &mut error);
            check(api, error)
        }
    }

    fn write_batch<const K: usize>(&mut self, batch: &Batch<'_, K>) -> Result<(), String> {
        self.write(|api, b| {
            for (k, v) in batch.iter() {
                // SAFETY: `b` is the live batch; key and value are valid for their lengths.
                unsafe { (api.writebatch_put)(b, k.as_ptr().cast(), k.len(), v.as_ptr().cast(), v.len()) };
            }
        })
    }

    /// Deletes `keys` in one write batch.
    fn delete_all<'k>(&mut self, keys: impl Iterator<Item = &'k [u8]>) -> Result<(), String> {
        self.write(|api, b| {
            for k in keys {
                // SAFETY: `b` is the live batch; the key is valid for its length.
                unsafe { (api.writebatch_delete)(b, k.as_ptr().cast(), k.len()) };
            }
        })
    }

    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
        get_with(self.api, self.db, self.ropts, key, |v| v.to_vec())
    }

    fn iter(&self) -> Iter {
        Iter::new(self.api, self.db, self.ropts)
    }

    fn close(self) {
        let api = self.api;
        // SAFETY: each handle is destroyed exactly once (`self` is consumed); close waits
        // for the library's background work and releases the database, before its cache.
        unsafe {
            (api.writebatch_destroy)(self.batch);
            (api.readoptions_destroy)(self.ropts);
            (api.writeoptions_destroy)(self.wopts_sync);
            (api.writeoptions_destroy)(self.wopts_nosync);
            (api.close)(self.db);
            if !self.cache.is_null() {
                (api.cache_destroy)(self.cache);
            }
        }
    }
}

/// Reads `key` and maps its value with `f` (the value lives in a malloc'ed copy).
fn get_with<T>(api: &CApi, db: P, ropts: P, key: &[u8], f: impl FnOnce(&[u8]) -> T) -> Result<Option<T>, String> {
    let (mut error, mut len) = (ptr::null_mut(), 0usize);
    // SAFETY: live handles; `key` is valid for its length; the result is null or a
    // malloc'ed buffer of `len` bytes that we read and free once with the library's free.
    unsafe {
        let v = (api.get)(db, ropts, key.as_ptr().cast(), key.len(), &mut len, &mut error);
        check(api, error)?;
        if v.is_null() {
            return Ok(None);
        }
        let out = f(std::slice::from_raw_parts(v.cast::<u8>(), len));
        (api.free)(v.cast());
        Ok(Some(out))
    }
}

/// An iterator of the library, destroyed when dropped.
struct Iter {
    api: &'static CApi,
    it: P,
}

impl Iter {
    fn new(api: &'static CApi, db: P, ropts: P) -> Self {
        // SAFETY: live database and read options.
        Iter { api, it: unsafe { (api.create_iterator)(db, ropts) } }
    }

    fn valid(&self) -> bool {
        // SAFETY: a live iterator.
        unsafe { (self.api.iter_valid)(self.it) != 0 }
    }

    /// Moves to the first key (`last`: the last one).
    fn seek_end(&mut self, last: bool) {
        // SAFETY: a live iterator.
        unsafe {
            if last {
                (self.api.iter_seek_to_last)(self.it)
            } else {
                (self.api.iter_seek_to_first)(self.it)
            }
        }
    }

    fn seek(&mut self, key: &[u8]) {
        // SAFETY: a live iterator; the key is valid for its length (the library copies it).
        unsafe { (self.api.iter_seek)(self.it, key.as_ptr().cast(), key.len()) }
    }

    /// Steps forward (`back`: backward).
    fn step(&mut self, back: bool) {
        // SAFETY: a live, valid iterator (callers check `valid` first).
        unsafe {
            if back {
                (self.api.iter_prev)(self.it)
            } else {
                (self.api.iter_next)(self.it)
            }
        }
    }

    /// The current key and value, valid until the iterator moves.
    fn entry(&self) -> (&[u8], &[u8]) {
        let (mut kl, mut vl) = (0usize, 0usize);
        // SAFETY: a live, valid iterator; the library returns pointers to `kl` and `vl`
        // bytes that stay valid until the iterator moves, which needs `&mut self`.
        unsafe {
            let k = (self.api.iter_key)(self.it, &mut kl);
            let v = (self.api.iter_value)(self.it, &mut vl);
            (std::slice::from_raw_parts(k.cast(), kl), std::slice::from_raw_parts(v.cast(), vl))
        }
    }

    /// The error that ended the iteration, if any.
    fn status(&self) -> Result<(), String> {
        let mut error = ptr::null_mut();
        // SAFETY: a live iterator; `error` is set to a malloc'ed message or left null.
        unsafe {
            (self.api.iter_get_error)(self.it, &mut error);
            check(self.api, error)
        }
    }

    /// Visits records from the current position (at most `n`, forward or `back`).
    fn each(&mut self, n: usize, back: bool, mut f: impl FnMut(&[u8], &[u8])) -> Result<(), String> {
        let mut seen = 0;
        while seen < n && self.valid() {
            let (k, v) = self.entry();
            f(k, v);
            seen += 1;
            self.step(back);
        }
        self.status()
    }
}

impl Drop for Iter {
    fn drop(&mut self) {
        // SAFETY: destroyed once, here.
        unsafe { (self.api.iter_destroy)(self.it) }
    }
}

/// A reading thread's handle: the shared database and read options of its own.
pub struct CReader<'a> {
    kv: &'a CKv,
    ropts: P,
}

// SAFETY: LevelDB's and RocksDB's database handles are safe to use from several threads at
// once (their documentation: "a database may be safely accessed concurrently by multiple
// threads"); the read options are this reader's own, and `CReader` borrows the `CKv`, so the
// database outlives it.
unsafe impl Send for CReader<'_> {}

impl KvReader for CReader<'_> {
    fn get_each<'k>(&mut self, keys: impl Iterator<Item = &'k [u8]> + Clone) -> Result<Tally, String> {
        let mut t = Tally::default();
        for k in keys {
            get_with(self.kv.api, self.kv.db, self.ropts, k, |v| t.add(v))?;
        }
        Ok(t)
    }

    fn scan_each<'k>(&mut self, starts: impl Iterator<Item = &'k [u8]> + Clone, n: usize) -> Result<Tally, String> {
        let mut t = Tally::default();
        // One iterator per call, repositioned for each scan.
        let mut it = Iter::new(self.kv.api, self.kv.db, self.ropts);
        for k in starts {
            it.seek(k);
            it.each(n, false, |_, v| t.add(v))?;
        }
        Ok(t)
    }
}

impl Drop for CReader<'_> {
    fn drop(&mut self) {
        // SAFETY: this reader's own read options, destroyed once.
        unsafe { (self.kv.api.readoptions_destroy)(self.ropts) }
    }
}

impl CKv {
    fn reader(&self) -> CReader<'_> {
        // SAFETY: a plain constructor.
        CReader { kv: self, ropts: unsafe { (self.api.readoptions_create)() } }
    }

    fn len(&self) -> Result<u64, String> {
        let mut it = self.iter();
        it.seek_end(false);
        let mut n = 0u64;
        it.each(usize::MAX, false, |_, _| n += 1)?;
        Ok(n)
    }

    /// Reads the `n` first (last) keys, then deletes them in one batch: a write batch cannot
    /// read its own writes.
    fn pop(&mut self, n: usize, last: bool) -> Result<u64, String> {
        let mut keys = Vec::with_capacity(n);
        {
            let mut it = self.iter();
            it.seek_end(last);
            it.each(n, last, |k, _| keys.push(k.to_vec()))?;
        }
        self.delete_all(keys.iter().map(|k| &k[..]))?;
        Ok(keys.len() as u64)
    }

    fn retain(&mut self, mut keep: impl FnMut(&[u8], &[u8]) -> bool) -> Result<u64, String> {
        let mut gone = Vec::new();
        {
            let mut it = self.iter();
            it.seek_end(false);
            it.each(usize::MAX, false, |k, v| {
                if !keep(k, v) {
                    gone.push(k.to_vec());
                }
            })?;
        }
        self.delete_all(gone.iter().map(|k| &k[..]))?;
        Ok(gone.len() as u64)
    }

    /// Compacts the whole key range (CompactRange with no bounds), then closes.
    fn compact_and_close(self) {
        // SAFETY: a live database; null bounds with length 0 mean the whole range.
        unsafe { (self.api.compact_range)(self.db, ptr::null(), 0, ptr::null(), 0) };
        self.close();
    }
}

/// Turns an error out-pointer into a `Result`, freeing the message.
///
/// # Safety
/// `error` is null or a NUL-terminated message allocated by `api`'s library.
unsafe fn check(api: &CApi, error: *mut c_char) -> Result<(), String> {
    if error.is_null() {
        return Ok(());
    }
    // SAFETY: non-null, NUL-terminated, allocated by the library (caller's contract).
    let msg = unsafe { CStr::from_ptr(error) }.to_string_lossy().into_owned();
    // SAFETY: freed once, by the library that allocated it.
    unsafe { (api.free)(error.cast()) };
    Err(format!("{}: {msg}", api.name))
}

/// Defines a [`FillEngine`] and [`KvEngine`] over [`CKv`] for one library's table.
macro_rules! c_engine {
    ($cfg:ident, $name:ident, $table:ident) => {
        #[cfg($cfg)]
        pub struct $name(CKv);

        #[cfg($cfg)]
        impl FillEngine for $name {
            fn open(dir: &Path, cfg: &FillConfig) -> Result<Self, String> {
                CKv::open(&$table, dir, cfg).map($name)
            }
            fn write_batch<const K: usize>(&mut self, batch: &Batch<'_, K>) -> Result<(), String> {
                self.0.write_batch(batch)
            }
            fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
                self.0.get(key)
            }
            fn close(self) -> Result<(), String> {
                self.0.close();
                Ok(())
            }
        }

        #[cfg($cfg)]
        impl KvEngine for $name {
            type Reader<'a> = CReader<'a>;
            fn set_durable(&mut self, durable: bool) -> Result<(), String> {
                self.0.durable = durable;
                Ok(())
            }
            fn reader(&self, _of: usize) -> Result<CReader<'_>, String> {
                Ok(self.0.reader())
            }
            fn len(&mut self) -> Result<u64, String> {
                self.0.len()
            }
            fn remove<const K: usize>(&mut self, keys: &[[u8; K]]) -> Result<(), String> {
                self.0.delete_all(keys.iter().map(|k| &k[..]))
            }
            fn pop(&mut self, n: usize, last: bool) -> Result<u64, String> {
                self.0.pop(n, last)
            }
            fn retain(&mut self, keep: impl FnMut(&[u8], &[u8]) -> bool) -> Result<u64, String> {
                self.0.retain(keep)
            }
            fn compact_and_close(self, _dir: &Path) -> Result<(), String> {
                self.0.compact_and_close();
                Ok(())
            }
        }
    };
}

c_engine!(have_leveldb, LevelDb, LEVELDB);
c_engine!(have_rocksdb, RocksDb, ROCKSDB);
