//! fjall: one keyspace, default options; each transaction is one write batch, persisted
//! with `PersistMode::SyncData` (fdatasync of the journal) before the commit returns, or
//! left in OS buffers (fjall's default, `PersistMode::Buffer`) for `--no-sync`.
//! `--cache-mb` sets the block cache (`Database::builder(..).cache_size`).

use std::path::Path;

use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};

use super::{err, Batch, FillConfig, FillEngine, KvEngine, KvReader, Tally};

pub struct Fjall {
    db: Database,
    ks: Keyspace,
    sync: bool,
}

impl Fjall {
    /// An empty write batch at the current durability.
    fn batch(&self) -> fjall::OwnedWriteBatch {
        let b = self.db.batch();
        if self.sync {
            b.durability(Some(PersistMode::SyncData))
        } else {
            b
        }
    }

    /// Deletes `keys` in one batch (a batch cannot read its own writes: callers read first).
    fn remove_all<'k>(&self, keys: impl Iterator<Item = &'k [u8]>) -> Result<(), String> {
        let mut b = self.batch();
        for k in keys {
            b.remove(&self.ks, k);
        }
        b.commit().map_err(err("fjall remove"))
    }
}

impl FillEngine for Fjall {
    fn open(dir: &Path, cfg: &FillConfig) -> Result<Self, String> {
        let mut b = Database::builder(dir);
        if let Some(bytes) = cfg.cache_bytes {
            b = b.cache_size(bytes as u64);
        }
        let db = b.open().map_err(err("fjall open"))?;
        let ks = db.keyspace("kv", KeyspaceCreateOptions::default).map_err(err("fjall keyspace"))?;
        Ok(Fjall { db, ks, sync: cfg.sync })
    }

    fn write_batch<const K: usize>(&mut self, batch: &Batch<'_, K>) -> Result<(), String> {
        let mut b = self.batch();
        for (k, v) in batch.iter() {
            b.insert(&self.ks, k, v);
        }
        b.commit().map_err(err("fjall commit"))
    }

    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
        Ok(self.ks.get(key).map_err(err("fjall get"))?.map(|v| v.to_vec()))
    }

    fn close(self) -> Result<(), String> {
        self.db.persist(PersistMode::SyncAll).map_err(err("fjall close"))?;
        drop(self.ks);
        drop(self.db);
        Ok(())
    }
}

/// A reading thread's handle: a clone of the keyspace (plain reads; fjall needs no read
/// transaction for them).
pub struct Reader(Keyspace);

impl KvReader for Reader {
    fn get_each<'k>(&mut self, keys: impl Iterator<Item = &'k [u8]> + Clone) -> Result<Tally, String> {
        let mut t = Tally::default();
        for k in keys {
            if let Some(v) = self.0.get(k).map_err(err("fjall get"))? {
                t.add(&v);
            }
        }
        Ok(t)
    }

    fn scan_each<'k>(&mut self, starts: impl Iterator<Item = &'k [u8]> + Clone, n: usize) -> Result<Tally, String> {
        let mut t = Tally::default();
        for k in starts {
            for g in self.0.range(k..).take(n) {
                t.add(&g.value().map_err(err("fjall range"))?);
            }
        }
        Ok(t)
    }
}

impl KvEngine for Fjall {
    /// fjall's ingestion writes the sorted records as tables, past the journal, then
    /// persists (as `write_batch`'s synced commit does).
    fn append_load<const K: usize>(&mut self, batch: &Batch<'_, K>) -> Result<(), String> {
        let mut ing = self.ks.start_ingestion().map_err(err("fjall ingestion"))?;
        for (k, v) in batch.iter() {
            ing.write(k, v).map_err(err("fjall ingestion"))?;
        }
        ing.finish().map_err(err("fjall ingestion"))?;
        self.db.persist(PersistMode::SyncData).map_err(err("fjall persist"))
    }

    type Reader<'a> = Reader;

    fn set_durable(&mut self, durable: bool) -> Result<(), String> {
        if durable && !self.sync {
            // What the buffered batches left unsynced.
            self.db.persist(PersistMode::SyncData).map_err(err("fjall persist"))?;
        }
        self.sync = durable;
        Ok(())
    }

    fn reader(&self, _of: usize) -> Result<Reader, String> {
        Ok(Reader(self.ks.clone()))
    }

    fn len(&mut self) -> Result<u64, String> {
        // Exact, by a scan (`approximate_len` is instant but an estimate).
        self.ks.len().map(|n| n as u64).map_err(err("fjall len"))
    }

    fn remove<const K: usize>(&mut self, keys: &[[u8; K]]) -> Result<(), String> {
        self.remove_all(keys.iter().map(|k| &k[..]))
    }

    fn pop(&mut self, n: usize, last: bool) -> Result<u64, String> {
        let ends =
            if last { self.ks.iter().rev().take(n).collect::<Vec<_>>() } else { self.ks.iter().take(n).collect() };
        let keys = ends.into_iter().map(|g| g.key().map_err(err("fjall pop"))).collect::<Result<Vec<_>, _>>()?;
        self.remove_all(keys.iter().map(|k| &k[..]))?;
        Ok(keys.len() as u64)
    }

    fn retain(&mut self, mut keep: impl FnMut(&[u8], &[u8]) -> bool) -> Result<u64, String> {
        let mut gone = Vec::new();
        for g in self.ks.iter() {
            let (k, v) = g.into_inner().map_err(err("fjall retain"))?;
            if !keep(&k, &v) {
                gone.push(k);
            }
        }
        self.remove_all(gone.iter().map(|k| &k[..]))?;
        Ok(gone.len() as u64)
    }

    fn compact_and_close(self, _dir: &Path) -> Result<(), String> {
        // Major compaction (public, though hidden from fjall's docs): every table rewritten,
        // tombstones dropped. The memtable is flushed first so that it takes part.
        self.ks.rotate_memtable_and_wait().map_err(err("fjall flush"))?;
        self.ks.major_compact().map_err(err("fjall compact"))?;
        FillEngine::close(self)
    }
}
