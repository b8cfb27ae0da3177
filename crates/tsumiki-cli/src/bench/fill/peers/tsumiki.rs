//! tsumiki with its default options (TicToc, P-WAL, NLR, an fdatasync per commit, the log
//! written with direct I/O unless `--no-direct-io`), or with the log buffered in the OS
//! (`Durability::Buffered`) for `--no-sync`.

use std::path::Path;

use ::tsumiki::{Db, Durability, LogOptions, Options};

use super::{err, Batch, FillConfig, FillEngine};

pub struct Tsumiki(Db);

impl FillEngine for Tsumiki {
    fn open(dir: &Path, cfg: &FillConfig) -> Result<Self, String> {
        let opts = if cfg.sync {
            Options { log: LogOptions { direct_io: cfg.direct_io, ..LogOptions::default() }, ..Options::default() }
        } else {
            Options {
                log: LogOptions { durability: Durability::Buffered, ..LogOptions::default() },
                ..Options::default()
            }
        };
        Db::create(dir, opts).map(Tsumiki).map_err(err("tsumiki open"))
    }

    fn write_batch(&mut self, batch: &Batch<'_>) -> Result<(), String> {
        // Single-threaded, so no conflicts are expected; retry anyway, as an embedder would.
        loop {
            let mut t = self.0.begin();
            let res = batch.iter().try_for_each(|(k, v)| t.put(k, v)).and_then(|()| t.commit());
            match res {
                Ok(()) => return Ok(()),
                Err(e) if e.is_retryable() => std::thread::yield_now(),
                Err(e) => return Err(format!("tsumiki commit: {e}")),
            }
        }
    }

    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
        let t = self.0.begin();
        let v = t.get(key).map_err(err("tsumiki get"))?;
        t.commit().map_err(err("tsumiki get"))?;
        Ok(v)
    }

    fn close(self) -> Result<(), String> {
        self.0.close().map_err(err("tsumiki close"))
    }

    fn log_blocks(&self) -> Option<u64> {
        self.0.wal_stats().map(|w| w.bytes / 4096)
    }
}
