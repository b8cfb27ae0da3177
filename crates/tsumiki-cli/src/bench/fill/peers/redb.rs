//! redb: one write transaction per batch, `Durability::Immediate` (durable at commit) or
//! `Durability::None` for `--no-sync`, then one durable commit at close so the file holds
//! every batch. `--cache-mb` sets `Builder::set_cache_size`.

use std::path::Path;

use redb::{Builder, Database, Durability, ReadableDatabase, ReadableTableMetadata, TableDefinition};

use super::{err, Batch, FillConfig, FillEngine, KvEngine, KvReader, Tally};

const TABLE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("kv");

pub struct Redb {
    db: Database,
    durability: Durability,
}

impl Redb {
    /// Runs `f` on the table in one write transaction at the current durability.
    fn write<T>(
        &self,
        what: &'static str,
        f: impl FnOnce(&mut redb::Table<'_, &'static [u8], &'static [u8]>) -> Result<T, redb::StorageError>,
    ) -> Result<T, String> {
        let mut w = self.db.begin_write().map_err(err(what))?;
        w.set_durability(self.durability).map_err(err(what))?;
        let out = {
            let mut t = w.open_table(TABLE).map_err(err(what))?;
            f(&mut t).map_err(err(what))?
        };
        w.commit().map_err(err(what))?;
        Ok(out)
    }
}

impl FillEngine for Redb {
    fn open(dir: &Path, cfg: &FillConfig) -> Result<Self, String> {
        let mut b = Builder::new();
        if let Some(bytes) = cfg.cache_bytes {
            b.set_cache_size(bytes);
        }
        let db = b.create(dir.join("kv.redb")).map_err(err("redb open"))?;
        let durability = if cfg.sync { Durability::Immediate } else { Durability::None };
        let r = Redb { db, durability };
        // The table exists from the start, so that readers of an empty database find it.
        r.write("redb open", |_| Ok(()))?;
        Ok(r)
    }

    fn write_batch<const K: usize>(&mut self, batch: &Batch<'_, K>) -> Result<(), String> {
        self.write("redb insert", |t| batch.iter().try_for_each(|(k, v)| t.insert(k, v).map(drop)))
    }

    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
        let r = self.db.begin_read().map_err(err("redb get"))?;
        let t = r.open_table(TABLE).map_err(err("redb get"))?;
        Ok(t.get(key).map_err(err("redb get"))?.map(|v| v.value().to_vec()))
    }

    fn close(self) -> Result<(), String> {
        if matches!(self.durability, Durability::None) {
            // Non-durable commits reach the file only with a later durable one.
            let mut w = self.db.begin_write().map_err(err("redb close"))?;
            w.set_durability(Durability::Immediate).map_err(err("redb close"))?;
            w.commit().map_err(err("redb close"))?;
        }
        drop(self.db);
        Ok(())
    }
}

/// A reading thread's handle: the shared `Database`; one read transaction per call.
pub struct Reader<'a>(&'a Database);

impl Reader<'_> {
    fn table(&self) -> Result<redb::ReadOnlyTable<&'static [u8], &'static [u8]>, String> {
        let r = self.0.begin_read().map_err(err("redb read"))?;
        r.open_table(TABLE).map_err(err("redb read"))
    }
}

impl KvReader for Reader<'_> {
    fn get_each<'k>(&mut self, keys: impl Iterator<Item = &'k [u8]> + Clone) -> Result<Tally, String> {
        let t = self.table()?;
        let mut tally = Tally::default();
        for k in keys {
            if let Some(v) = t.get(k).map_err(err("redb get"))? {
                tally.add(v.value());
            }
        }
        Ok(tally)
    }

    fn scan_each<'k>(&mut self, starts: impl Iterator<Item = &'k [u8]> + Clone, n: usize) -> Result<Tally, String> {
        let t = self.table()?;
        let mut tally = Tally::default();
        for k in starts {
            for row in t.range(k..).map_err(err("redb range"))?.take(n) {
                tally.add(row.map_err(err("redb range"))?.1.value());
            }
        }
        Ok(tally)
    }
}

impl KvEngine for Redb {
    type Reader<'a> = Reader<'a>;

    fn set_durable(&mut self, durable: bool) -> Result<(), String> {
        self.durability = if durable { Durability::Immediate } else { Durability::None };
        Ok(())
    }

    fn reader(&self, _of: usize) -> Result<Reader<'_>, String> {
        Ok(Reader(&self.db))
    }

    fn len(&mut self) -> Result<u64, String> {
        Reader(&self.db).table()?.len().map_err(err("redb len"))
    }

    fn remove<const K: usize>(&mut self, keys: &[[u8; K]]) -> Result<(), String> {
        self.write("redb remove", |t| keys.iter().try_for_each(|k| t.remove(&k[..]).map(drop)))
    }

    fn pop(&mut self, n: usize, last: bool) -> Result<u64, String> {
        self.write("redb pop", |t| {
            let mut popped = 0;
            for _ in 0..n {
                let row = if last { t.pop_last()? } else { t.pop_first()? };
                if row.is_none() {
                    break;
                }
                popped += 1;
            }
            Ok(popped)
        })
    }

    fn retain(&mut self, mut keep: impl FnMut(&[u8], &[u8]) -> bool) -> Result<u64, String> {
        self.write("redb retain", |t| {
            let before = t.len()?;
            t.retain(|k, v| keep(k, v))?;
            Ok(before - t.len()?)
        })
    }

    fn compact_and_close(mut self, _dir: &Path) -> Result<(), String> {
        // Each call compacts what it can; one returning false found nothing more.
        for _ in 0..64 {
            if !self.db.compact().map_err(err("redb compact"))? {
                break;
            }
        }
        FillEngine::close(self)
    }
}
