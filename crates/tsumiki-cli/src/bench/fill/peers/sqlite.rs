//! SQLite (bundled by rusqlite): `kv(k BLOB PRIMARY KEY, v BLOB) WITHOUT ROWID` in WAL
//! mode, `synchronous=FULL` (an fsync of the WAL at every commit) or `OFF` for `--no-sync`;
//! one BEGIN ... COMMIT per transaction with a cached prepared INSERT.

use std::path::Path;

use rusqlite::Connection;

use super::{err, Batch, FillConfig, FillEngine};

const INSERT: &str = "INSERT INTO kv (k, v) VALUES (?1, ?2)";

pub struct Sqlite(Connection);

impl FillEngine for Sqlite {
    fn open(dir: &Path, cfg: &FillConfig) -> Result<Self, String> {
        let c = Connection::open(dir.join("kv.sqlite")).map_err(err("sqlite open"))?;
        let mode: String =
            c.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0)).map_err(err("sqlite journal_mode"))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(format!("sqlite: journal_mode is {mode}, not wal"));
        }
        c.pragma_update(None, "synchronous", if cfg.sync { "FULL" } else { "OFF" })
            .map_err(err("sqlite synchronous"))?;
        c.execute_batch("CREATE TABLE IF NOT EXISTS kv (k BLOB PRIMARY KEY, v BLOB) WITHOUT ROWID")
            .map_err(err("sqlite create"))?;
        Ok(Sqlite(c))
    }

    fn write_batch(&mut self, batch: &Batch<'_>) -> Result<(), String> {
        let t = self.0.transaction().map_err(err("sqlite begin"))?;
        {
            let mut ins = t.prepare_cached(INSERT).map_err(err("sqlite prepare"))?;
            for (k, v) in batch.iter() {
                ins.execute((k, v)).map_err(err("sqlite insert"))?;
            }
        }
        t.commit().map_err(err("sqlite commit"))
    }

    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
        let mut q = self.0.prepare_cached("SELECT v FROM kv WHERE k = ?1").map_err(err("sqlite get"))?;
        let mut rows = q.query([key]).map_err(err("sqlite get"))?;
        match rows.next().map_err(err("sqlite get"))? {
            Some(r) => Ok(Some(r.get(0).map_err(err("sqlite get"))?)),
            None => Ok(None),
        }
    }

    fn close(self) -> Result<(), String> {
        // Closing the last connection checkpoints the WAL into the database file.
        self.0.close().map_err(|(_, e)| format!("sqlite close: {e}"))
    }
}
