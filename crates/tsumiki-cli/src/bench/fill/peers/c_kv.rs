//! LevelDB and RocksDB through their C APIs (`leveldb/c.h`, `rocksdb/c.h`), the Debian
//! system libraries linked by build.rs. The two APIs have the same shape, so one adapter
//! drives both through a table of function pointers (one indirect call per put is noise
//! next to the libraries' own work). Default options plus create_if_missing; each
//! transaction is one write batch written with `sync` as the write option.

use std::ffi::{c_char, c_void, CStr, CString};
use std::path::Path;
use std::ptr;

use super::{Batch, FillConfig, FillEngine};

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
}

/// Declares one library's functions and its [`CApi`] table. The declarations follow the
/// headers, with every handle type as `void *` (they are opaque structs there).
macro_rules! c_api {
    ($table:ident, $lib:literal, $($field:ident = $sym:ident : fn($($arg:ty),*) $(-> $ret:ty)?;)*) => {
        unsafe extern "C" {
            $(fn $sym($(_: $arg),*) $(-> $ret)?;)*
        }
        pub static $table: CApi = CApi { name: $lib, $($field: $sym),* };
    };
}

#[cfg(have_leveldb)]
c_api!(LEVELDB, "leveldb",
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
);

// `unsigned char` in rocksdb/c.h where leveldb has `uint8_t`: the same type.
#[cfg(have_rocksdb)]
c_api!(ROCKSDB, "rocksdb",
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
);

/// An open LevelDB or RocksDB database and the handles the fill reuses.
pub struct CKv {
    api: &'static CApi,
    db: P,
    wopts: P,
    ropts: P,
    batch: P,
}

impl CKv {
    fn open(api: &'static CApi, dir: &Path, sync: bool) -> Result<Self, String> {
        let path = CString::new(dir.as_os_str().as_encoded_bytes()).map_err(|e| format!("{}: {e}", api.name))?;
        let mut error = ptr::null_mut();
        // SAFETY: the table holds the library's own functions with the header's signatures;
        // `path` is a NUL-terminated string that outlives the call; the options are
        // destroyed once, after open (which copies what it keeps); `error` is an
        // out-pointer the library sets to a malloc'ed message or leaves null.
        let db = unsafe {
            let opts = (api.options_create)();
            (api.options_set_create_if_missing)(opts, 1);
            let db = (api.open)(opts, path.as_ptr(), &mut error);
            (api.options_destroy)(opts);
            db
        };
        // SAFETY: `error` is null or the library's malloc'ed message, freed once here.
        unsafe { check(api, error)? };
        if db.is_null() {
            return Err(format!("{}: open returned no database", api.name));
        }
        // SAFETY: plain constructors and a setter on the handle just created.
        let (wopts, ropts, batch) = unsafe {
            let wopts = (api.writeoptions_create)();
            (api.writeoptions_set_sync)(wopts, sync as u8);
            (wopts, (api.readoptions_create)(), (api.writebatch_create)())
        };
        Ok(CKv { api, db, wopts, ropts, batch })
    }

    fn write_batch(&mut self, batch: &Batch<'_>) -> Result<(), String> {
        let api = self.api;
        let mut error = ptr::null_mut();
        // SAFETY: `self.batch`, `self.db` and `self.wopts` are live handles of this library
        // (destroyed only in `close`); each key and value pointer is valid for its length
        // during the call, and the batch copies them.
        unsafe {
            (api.writebatch_clear)(self.batch);
            for (k, v) in batch.iter() {
                (api.writebatch_put)(self.batch, k.as_ptr().cast(), k.len(), v.as_ptr().cast(), v.len());
            }
            (api.write)(self.db, self.wopts, self.batch, &mut error);
            check(api, error)
        }
    }

    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
        let api = self.api;
        let (mut error, mut len) = (ptr::null_mut(), 0usize);
        // SAFETY: live handles; `key` is valid for its length; the result is null or a
        // malloc'ed buffer of `len` bytes that we copy and free once with the library's free.
        unsafe {
            let v = (api.get)(self.db, self.ropts, key.as_ptr().cast(), key.len(), &mut len, &mut error);
            check(api, error)?;
            if v.is_null() {
                return Ok(None);
            }
            let out = std::slice::from_raw_parts(v.cast::<u8>(), len).to_vec();
            (api.free)(v.cast());
            Ok(Some(out))
        }
    }

    fn close(self) {
        let api = self.api;
        // SAFETY: each handle is destroyed exactly once (`self` is consumed); close waits
        // for the library's background work and releases the database.
        unsafe {
            (api.writebatch_destroy)(self.batch);
            (api.readoptions_destroy)(self.ropts);
            (api.writeoptions_destroy)(self.wopts);
            (api.close)(self.db);
        }
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

/// Defines a [`FillEngine`] over [`CKv`] for one library's table.
macro_rules! c_engine {
    ($cfg:ident, $name:ident, $table:ident) => {
        #[cfg($cfg)]
        pub struct $name(CKv);

        #[cfg($cfg)]
        impl FillEngine for $name {
            fn open(dir: &Path, cfg: &FillConfig) -> Result<Self, String> {
                CKv::open(&$table, dir, cfg.sync).map($name)
            }
            fn write_batch(&mut self, batch: &Batch<'_>) -> Result<(), String> {
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
    };
}

c_engine!(have_leveldb, LevelDb, LEVELDB);
c_engine!(have_rocksdb, RocksDb, ROCKSDB);
