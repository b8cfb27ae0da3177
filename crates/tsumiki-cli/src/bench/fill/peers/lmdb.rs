//! LMDB through `heed` (which builds LMDB's C source). LMDB's default flags are durable at
//! commit; `--no-sync` (and `bench kv`'s non-durable row) sets `MDB_NOSYNC`. The map is
//! 4 GiB, or 2 KiB per record if more (sparse: the file grows with the pages written).
//! LMDB has no cache of its own (it reads through the OS page cache), so `--cache-mb` does
//! not apply to it.

use std::ops::Bound;
use std::path::Path;

use heed::types::Bytes;
use heed::{CompactionOption, Database, Env, EnvFlags, EnvOpenOptions, FlagSetMode};

use super::{err, Batch, FillConfig, FillEngine, KvEngine, KvReader, Tally};

pub struct Lmdb {
    env: Env,
    db: Database<Bytes, Bytes>,
    sync: bool,
}

impl Lmdb {
    /// Runs `f` in one write transaction and commits it.
    fn write<T>(
        &self,
        what: &'static str,
        f: impl FnOnce(&mut heed::RwTxn<'_>) -> heed::Result<T>,
    ) -> Result<T, String> {
        let mut w = self.env.write_txn().map_err(err(what))?;
        let out = f(&mut w).map_err(err(what))?;
        w.commit().map_err(err(what))?;
        Ok(out)
    }
}

impl FillEngine for Lmdb {
    fn open(dir: &Path, cfg: &FillConfig) -> Result<Self, String> {
        let mut opts = EnvOpenOptions::new();
        // 32 reading threads and the writer, with room to spare (the default is 126).
        opts.max_readers(256);
        opts.map_size((4usize << 30).max(cfg.records as usize * 2048));
        if !cfg.sync {
            // SAFETY: NO_SYNC only gives up durability at commit (a system crash may lose
            // recent commits); `close` syncs before the environment is closed.
            unsafe { opts.flags(EnvFlags::NO_SYNC) };
        }
        // SAFETY: the directory is this fill's own, opened by this process only, and
        // nothing else modifies its files while the environment is open.
        let env = unsafe { opts.open(dir) }.map_err(err("lmdb open"))?;
        let mut w = env.write_txn().map_err(err("lmdb open"))?;
        let db = env.create_database(&mut w, None).map_err(err("lmdb open"))?;
        w.commit().map_err(err("lmdb open"))?;
        Ok(Lmdb { env, db, sync: cfg.sync })
    }

    fn write_batch<const K: usize>(&mut self, batch: &Batch<'_, K>) -> Result<(), String> {
        let db = self.db;
        self.write("lmdb put", |w| batch.iter().try_for_each(|(k, v)| db.put(w, k, v)))
    }

    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
        let r = self.env.read_txn().map_err(err("lmdb get"))?;
        Ok(self.db.get(&r, key).map_err(err("lmdb get"))?.map(<[u8]>::to_vec))
    }

    fn close(self) -> Result<(), String> {
        if !self.sync {
            self.env.force_sync().map_err(err("lmdb sync"))?;
        }
        // Wait until the environment is really closed, so the reopen opens it afresh.
        let closed = self.env.prepare_for_closing();
        closed.wait();
        Ok(())
    }
}

/// A reading thread's handle: the shared environment; one read transaction per call,
/// begun in the reading thread (heed's read transactions stay on their thread).
pub struct Reader<'a> {
    env: &'a Env,
    db: Database<Bytes, Bytes>,
}

impl KvReader for Reader<'_> {
    fn get_each<'k>(&mut self, keys: impl Iterator<Item = &'k [u8]> + Clone) -> Result<Tally, String> {
        let r = self.env.read_txn().map_err(err("lmdb read"))?;
        let mut t = Tally::default();
        for k in keys {
            if let Some(v) = self.db.get(&r, k).map_err(err("lmdb get"))? {
                t.add(v);
            }
        }
        Ok(t)
    }

    fn scan_each<'k>(&mut self, starts: impl Iterator<Item = &'k [u8]> + Clone, n: usize) -> Result<Tally, String> {
        let r = self.env.read_txn().map_err(err("lmdb read"))?;
        let mut t = Tally::default();
        for k in starts {
            for row in self.db.range(&r, &(Bound::Included(k), Bound::Unbounded)).map_err(err("lmdb range"))?.take(n) {
                t.add(row.map_err(err("lmdb range"))?.1);
            }
        }
        Ok(t)
    }
}

impl KvEngine for Lmdb {
    fn append_load<const K: usize>(&mut self, batch: &Batch<'_, K>) -> Result<(), String> {
        let db = self.db;
        self.write("lmdb append", |w| {
            batch.iter().try_for_each(|(k, v)| db.put_with_flags(w, heed::PutFlags::APPEND, k, v))
        })
    }

    type Reader<'a> = Reader<'a>;

    fn set_durable(&mut self, durable: bool) -> Result<(), String> {
        if durable == self.sync {
            return Ok(());
        }
        if durable {
            // What the non-durable commits left unsynced.
            self.env.force_sync().map_err(err("lmdb sync"))?;
        }
        let mode = if durable { FlagSetMode::Disable } else { FlagSetMode::Enable };
        // SAFETY: only this thread sets flags, and no transaction is running. NO_SYNC only
        // gives up durability at commit.
        unsafe { self.env.set_flags(EnvFlags::NO_SYNC, mode) }.map_err(err("lmdb flags"))?;
        self.sync = durable;
        Ok(())
    }

    fn reader(&self, _of: usize) -> Result<Reader<'_>, String> {
        Ok(Reader { env: &self.env, db: self.db })
    }

    fn len(&mut self) -> Result<u64, String> {
        let r = self.env.read_txn().map_err(err("lmdb len"))?;
        self.db.len(&r).map_err(err("lmdb len"))
    }

    fn remove<const K: usize>(&mut self, keys: &[[u8; K]]) -> Result<(), String> {
        let db = self.db;
        self.write("lmdb delete", |w| keys.iter().try_for_each(|k| db.delete(w, k).map(drop)))
    }

    fn pop(&mut self, n: usize, last: bool) -> Result<u64, String> {
        let db = self.db;
        self.write("lmdb pop", |w| {
            let mut popped = 0;
            for _ in 0..n {
                let row = if last { db.last(w)? } else { db.first(w)? };
                let Some(key) = row.map(|(k, _)| k.to_vec()) else { break };
                db.delete(w, &key)?;
                popped += 1;
            }
            Ok(popped)
        })
    }

    fn retain(&mut self, mut keep: impl FnMut(&[u8], &[u8]) -> bool) -> Result<u64, String> {
        let db = self.db;
        self.write("lmdb retain", |w| {
            // Collected first: an iterator borrows the transaction.
            let mut gone = Vec::new();
            for row in db.iter(w)? {
                let (k, v) = row?;
                if !keep(k, v) {
                    gone.push(k.to_vec());
                }
            }
            for k in &gone {
                db.delete(w, k)?;
            }
            Ok(gone.len() as u64)
        })
    }

    fn compact_and_close(self, dir: &Path) -> Result<(), String> {
        // LMDB compacts by copying (mdb_env_copy2 with MDB_CP_COMPACT): the copy then
        // replaces the data file once the environment is closed.
        let copy = dir.join("compact.mdb");
        drop(self.env.copy_to_path(&copy, CompactionOption::Enabled).map_err(err("lmdb compact"))?);
        FillEngine::close(self)?;
        std::fs::rename(&copy, dir.join("data.mdb")).map_err(|e| format!("lmdb compact: replacing data.mdb: {e}"))
    }
}
