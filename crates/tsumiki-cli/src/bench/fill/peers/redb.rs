//! redb: one write transaction per batch, `Durability::Immediate` (durable at commit) or
//! `Durability::None` for `--no-sync`, then one durable commit at close so the file holds
//! every batch.

use std::path::Path;

use redb::{Database, Durability, ReadableDatabase, TableDefinition};

use super::{err, Batch, FillConfig, FillEngine};

const TABLE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("kv");

pub struct Redb {
    db: Database,
    durability: Durability,
}

impl FillEngine for Redb {
    fn open(dir: &Path, cfg: &FillConfig) -> Result<Self, String> {
        let db = Database::create(dir.join("kv.redb")).map_err(err("redb open"))?;
        let durability = if cfg.sync { Durability::Immediate } else { Durability::None };
        Ok(Redb { db, durability })
    }

    fn write_batch(&mut self, batch: &Batch<'_>) -> Result<(), String> {
        let mut w = self.db.begin_write().map_err(err("redb begin"))?;
        w.set_durability(self.durability).map_err(err("redb durability"))?;
        {
            let mut t = w.open_table(TABLE).map_err(err("redb table"))?;
            for (k, v) in batch.iter() {
                t.insert(k, v).map_err(err("redb insert"))?;
            }
        }
        w.commit().map_err(err("redb commit"))
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
