//! LMDB through `heed` (which builds LMDB's C source). LMDB's default flags are durable at
//! commit; `--no-sync` sets `MDB_NOSYNC`. The map is 4 GiB (sparse: the file grows with
//! the pages written).

use std::path::Path;

use heed::types::Bytes;
use heed::{Database, Env, EnvFlags, EnvOpenOptions};

use super::{err, Batch, FillConfig, FillEngine};

pub struct Lmdb {
    env: Env,
    db: Database<Bytes, Bytes>,
    sync: bool,
}

impl FillEngine for Lmdb {
    fn open(dir: &Path, cfg: &FillConfig) -> Result<Self, String> {
        let mut opts = EnvOpenOptions::new();
        opts.map_size(4 << 30);
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

    fn write_batch(&mut self, batch: &Batch<'_>) -> Result<(), String> {
        let mut w = self.env.write_txn().map_err(err("lmdb begin"))?;
        for (k, v) in batch.iter() {
            self.db.put(&mut w, k, v).map_err(err("lmdb put"))?;
        }
        w.commit().map_err(err("lmdb commit"))
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
