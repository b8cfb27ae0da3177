//! fjall: one keyspace, default options; each transaction is one write batch, persisted
//! with `PersistMode::SyncData` (fdatasync of the journal) before the commit returns, or
//! left in OS buffers (fjall's default, `PersistMode::Buffer`) for `--no-sync`.

use std::path::Path;

use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};

use super::{err, Batch, FillConfig, FillEngine};

pub struct Fjall {
    db: Database,
    ks: Keyspace,
    sync: bool,
}

impl FillEngine for Fjall {
    fn open(dir: &Path, cfg: &FillConfig) -> Result<Self, String> {
        let db = Database::builder(dir).open().map_err(err("fjall open"))?;
        let ks = db.keyspace("kv", KeyspaceCreateOptions::default).map_err(err("fjall keyspace"))?;
        Ok(Fjall { db, ks, sync: cfg.sync })
    }

    fn write_batch(&mut self, batch: &Batch<'_>) -> Result<(), String> {
        let mut b = self.db.batch();
        if self.sync {
            b = b.durability(Some(PersistMode::SyncData));
        }
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
