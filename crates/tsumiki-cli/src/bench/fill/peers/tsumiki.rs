//! tsumiki with its default options (TicToc, P-WAL, NLR, an fdatasync per commit, the log
//! written with direct I/O unless `--no-direct-io`), or with the log buffered in the OS
//! (`Durability::Buffered`) for `--no-sync`. `--cache-mb` sets `Options::cache_bytes`. The
//! kv family's non-durable writes commit with the transaction's own `Durability::None`.

use std::path::Path;

use ::tsumiki::{Db, Durability, LogOptions, Options, ReadTxn};

use super::{err, Batch, FillConfig, FillEngine, KvEngine, KvReader, Tally};

pub struct Tsumiki {
    db: Db,
    /// Commits keep their records in memory ([`Durability::None`], `set_durable(false)`).
    nosync: bool,
}

fn options(cfg: &FillConfig) -> Options {
    let log = if cfg.sync {
        LogOptions { direct_io: cfg.direct_io, ..LogOptions::default() }
    } else {
        LogOptions { durability: Durability::Buffered, ..LogOptions::default() }
    };
    let mut opts = Options { log, ..Options::default() };
    if let Some(bytes) = cfg.cache_bytes {
        opts.cache_bytes = bytes;
    }
    opts
}

/// Runs `f` in a read-only transaction through the cheapest read path tsumiki offers:
/// today [`Db::view`] (optimistic, retried on a conflict, so `f` must only compute).
/// The one place to change when a snapshot read API (`begin_read`) arrives.
fn read<T>(db: &Db, f: impl FnMut(&ReadTxn<'_>) -> Result<T, ::tsumiki::Error>) -> Result<T, String> {
    db.view(f).map_err(err("tsumiki read"))
}

impl Tsumiki {
    /// Runs `f` in a write transaction and commits it, again after a conflict.
    fn write<T>(
        &self,
        what: &'static str,
        mut f: impl FnMut(&mut ::tsumiki::Txn<'_>) -> Result<T, ::tsumiki::Error>,
    ) -> Result<T, String> {
        let nosync = self.nosync;
        self.db
            .run(|t| {
                if nosync {
                    t.set_durability(Durability::None);
                }
                f(t)
            })
            .map_err(err(what))
    }
}

impl FillEngine for Tsumiki {
    fn open(dir: &Path, cfg: &FillConfig) -> Result<Self, String> {
        let db = Db::create(dir, options(cfg)).map_err(err("tsumiki open"))?;
        Ok(Tsumiki { db, nosync: false })
    }

    fn write_batch<const K: usize>(&mut self, batch: &Batch<'_, K>) -> Result<(), String> {
        // Single-threaded, so no conflicts are expected; `run` retries anyway, as an
        // embedder would.
        self.write("tsumiki commit", |t| batch.iter().try_for_each(|(k, v)| t.put(k, v)))
    }

    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
        read(&self.db, |r| r.get(key))
    }

    fn close(self) -> Result<(), String> {
        self.db.close().map_err(err("tsumiki close"))
    }

    fn log_blocks(&self) -> Option<u64> {
        self.db.wal_stats().map(|w| w.bytes / 4096)
    }
}

/// A reading thread's handle: the shared `Db` (it is `Sync`).
pub struct Reader<'a>(&'a Db);

impl KvReader for Reader<'_> {
    fn get_each<'k>(&mut self, keys: impl Iterator<Item = &'k [u8]> + Clone) -> Result<Tally, String> {
        read(self.0, |r| {
            let mut t = Tally::default();
            for k in keys.clone() {
                // Borrowed, as the peers' reads are: no allocation per value.
                r.get_with(k, |v| {
                    if let Some(v) = v {
                        t.add(v);
                    }
                })?;
            }
            Ok(t)
        })
    }

    fn scan_each<'k>(&mut self, starts: impl Iterator<Item = &'k [u8]> + Clone, n: usize) -> Result<Tally, String> {
        read(self.0, |r| {
            let mut t = Tally::default();
            for k in starts.clone() {
                let mut scan = r.range(k..);
                for _ in 0..n {
                    // Borrowed: the scan allocates nothing per record.
                    let Some(row) = scan.next_ref() else { break };
                    t.add(row?.1);
                }
            }
            Ok(t)
        })
    }
}

impl KvEngine for Tsumiki {
    fn append_load<const K: usize>(&mut self, batch: &Batch<'_, K>) -> Result<(), String> {
        self.db.bulk_load(batch.iter()).map(|_| ()).map_err(err("tsumiki bulk load"))
    }

    type Reader<'a> = Reader<'a>;

    fn set_durable(&mut self, durable: bool) -> Result<(), String> {
        // The transaction's own durability (as redb's): `None` keeps commits in memory until
        // a later synced commit; back to durable, they are synced at once, untimed (as
        // fjall's persist).
        self.nosync = !durable;
        if durable {
            self.db.sync().map_err(err("tsumiki sync"))?;
        }
        Ok(())
    }

    fn reader(&self, _of: usize) -> Result<Reader<'_>, String> {
        Ok(Reader(&self.db))
    }

    fn len(&mut self) -> Result<u64, String> {
        read(&self.db, |r| r.len())
    }

    fn remove<const K: usize>(&mut self, keys: &[[u8; K]]) -> Result<(), String> {
        self.write("tsumiki remove", |t| keys.iter().try_for_each(|k| t.delete(k).map(drop)))
    }

    fn pop(&mut self, n: usize, last: bool) -> Result<u64, String> {
        self.write("tsumiki pop", |t| {
            let mut popped = 0;
            for _ in 0..n {
                // One scan step and a delete of the record it read (the transaction's
                // earlier pops are skipped, not walked again).
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
        // One pass that deletes through the records it reads (redb's `retain`).
        self.write("tsumiki retain", |t| t.retain(&mut keep))
    }

    fn compact_and_close(self, dir: &Path) -> Result<(), String> {
        FillEngine::close(self)?;
        // `tsumiki compact`: a checked copy of the records swapped in for the directory.
        let args = crate::tools::compact::CompactArgs { dir: dir.to_path_buf(), quiet: true };
        crate::tools::compact::run(&args).map(drop).map_err(|f| format!("tsumiki compact: {}", f.message))
    }
}
