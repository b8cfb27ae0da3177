//! SQLite (bundled by rusqlite): `kv(k BLOB PRIMARY KEY, v BLOB) WITHOUT ROWID` in WAL
//! mode, `synchronous=FULL` (an fsync of the WAL at every commit) or `OFF` for `--no-sync`;
//! one BEGIN ... COMMIT per transaction with a cached prepared INSERT. `--cache-mb` sets
//! `PRAGMA cache_size`; each reading thread has a connection of its own (read-only; WAL
//! mode lets readers run beside each other) with its share of the cache, so that the
//! connections together hold no more than one engine's cache.

use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags, OptionalExtension};

use super::{err, Batch, FillConfig, FillEngine, KvEngine, KvReader, Tally};

const INSERT: &str = "INSERT INTO kv (k, v) VALUES (?1, ?2)";
const GET: &str = "SELECT v FROM kv WHERE k = ?1";
const DELETE: &str = "DELETE FROM kv WHERE k = ?1";

pub struct Sqlite {
    conn: Connection,
    path: PathBuf,
    cache_bytes: Option<usize>,
}

/// Sets the page cache of a connection to `bytes` (`None`: SQLite's default, 2 MB).
fn set_cache(c: &Connection, bytes: Option<usize>) -> Result<(), String> {
    match bytes {
        // A negative cache_size is in KiB rather than pages.
        Some(b) => c.pragma_update(None, "cache_size", -((b / 1024).max(1) as i64)).map_err(err("sqlite cache_size")),
        None => Ok(()),
    }
}

impl Sqlite {
    /// Runs `f` in one transaction and commits it.
    fn write<T>(
        &mut self,
        what: &'static str,
        f: impl FnOnce(&Connection) -> rusqlite::Result<T>,
    ) -> Result<T, String> {
        let t = self.conn.transaction().map_err(err(what))?;
        let out = f(&t).map_err(err(what))?;
        t.commit().map_err(err(what))?;
        Ok(out)
    }
}

impl FillEngine for Sqlite {
    fn open(dir: &Path, cfg: &FillConfig) -> Result<Self, String> {
        let path = dir.join("kv.sqlite");
        let c = Connection::open(&path).map_err(err("sqlite open"))?;
        let mode: String =
            c.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0)).map_err(err("sqlite journal_mode"))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(format!("sqlite: journal_mode is {mode}, not wal"));
        }
        c.pragma_update(None, "synchronous", if cfg.sync { "FULL" } else { "OFF" })
            .map_err(err("sqlite synchronous"))?;
        set_cache(&c, cfg.cache_bytes)?;
        c.execute_batch("CREATE TABLE IF NOT EXISTS kv (k BLOB PRIMARY KEY, v BLOB) WITHOUT ROWID")
            .map_err(err("sqlite create"))?;
        Ok(Sqlite { conn: c, path, cache_bytes: cfg.cache_bytes })
    }

    fn write_batch<const K: usize>(&mut self, batch: &Batch<'_, K>) -> Result<(), String> {
        self.write("sqlite insert", |t| {
            let mut ins = t.prepare_cached(INSERT)?;
            batch.iter().try_for_each(|(k, v)| ins.execute((k, v)).map(drop))
        })
    }

    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
        let mut q = self.conn.prepare_cached(GET).map_err(err("sqlite get"))?;
        q.query_row([key], |r| r.get(0)).optional().map_err(err("sqlite get"))
    }

    fn close(self) -> Result<(), String> {
        // Closing the last connection checkpoints the WAL into the database file.
        self.conn.close().map_err(|(_, e)| format!("sqlite close: {e}"))
    }
}

/// A reading thread's handle: a read-only connection of its own.
pub struct Reader(Connection);

impl KvReader for Reader {
    fn get_each<'k>(&mut self, keys: impl Iterator<Item = &'k [u8]> + Clone) -> Result<Tally, String> {
        let t = self.0.transaction().map_err(err("sqlite read"))?;
        let mut tally = Tally::default();
        {
            let mut q = t.prepare_cached(GET).map_err(err("sqlite get"))?;
            for k in keys {
                let mut rows = q.query([k]).map_err(err("sqlite get"))?;
                if let Some(r) = rows.next().map_err(err("sqlite get"))? {
                    tally.add(r.get_ref(0).and_then(|v| Ok(v.as_blob()?)).map_err(err("sqlite get"))?);
                }
            }
        }
        t.commit().map_err(err("sqlite read"))?;
        Ok(tally)
    }

    fn scan_each<'k>(&mut self, starts: impl Iterator<Item = &'k [u8]> + Clone, n: usize) -> Result<Tally, String> {
        let t = self.0.transaction().map_err(err("sqlite read"))?;
        let mut tally = Tally::default();
        {
            let mut q =
                t.prepare_cached("SELECT v FROM kv WHERE k >= ?1 ORDER BY k LIMIT ?2").map_err(err("sqlite range"))?;
            for k in starts {
                let mut rows = q.query((k, n as i64)).map_err(err("sqlite range"))?;
                while let Some(r) = rows.next().map_err(err("sqlite range"))? {
                    tally.add(r.get_ref(0).and_then(|v| Ok(v.as_blob()?)).map_err(err("sqlite range"))?);
                }
            }
        }
        t.commit().map_err(err("sqlite read"))?;
        Ok(tally)
    }
}

impl KvEngine for Sqlite {
    type Reader<'a> = Reader;

    fn set_durable(&mut self, durable: bool) -> Result<(), String> {
        self.conn
            .pragma_update(None, "synchronous", if durable { "FULL" } else { "OFF" })
            .map_err(err("sqlite synchronous"))
    }

    fn reader(&self, of: usize) -> Result<Reader, String> {
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_URI;
        let c = Connection::open_with_flags(&self.path, flags).map_err(err("sqlite open reader"))?;
        set_cache(&c, self.cache_bytes.map(|b| b / of.max(1)))?;
        Ok(Reader(c))
    }

    fn len(&mut self) -> Result<u64, String> {
        self.conn
            .query_row("SELECT count(*) FROM kv", [], |r| r.get::<_, i64>(0))
            .map(|n| n as u64)
            .map_err(err("sqlite len"))
    }

    fn remove<const K: usize>(&mut self, keys: &[[u8; K]]) -> Result<(), String> {
        self.write("sqlite delete", |t| {
            let mut del = t.prepare_cached(DELETE)?;
            keys.iter().try_for_each(|k| del.execute([&k[..]]).map(drop))
        })
    }

    fn pop(&mut self, n: usize, last: bool) -> Result<u64, String> {
        let first =
            if last { "SELECT k FROM kv ORDER BY k DESC LIMIT 1" } else { "SELECT k FROM kv ORDER BY k LIMIT 1" };
        self.write("sqlite pop", |t| {
            let (mut q, mut del) = (t.prepare_cached(first)?, t.prepare_cached(DELETE)?);
            let mut popped = 0;
            for _ in 0..n {
                let Some(k) = q.query_row([], |r| r.get::<_, Vec<u8>>(0)).optional()? else { break };
                del.execute([k])?;
                popped += 1;
            }
            Ok(popped)
        })
    }

    fn retain(&mut self, mut keep: impl FnMut(&[u8], &[u8]) -> bool) -> Result<u64, String> {
        self.write("sqlite retain", |t| {
            // Collected first: deleting under a running SELECT of the same table is allowed
            // by SQLite but its effect on the scan is undefined.
            let mut gone = Vec::new();
            {
                let mut q = t.prepare("SELECT k, v FROM kv")?;
                let mut rows = q.query([])?;
                while let Some(r) = rows.next()? {
                    let (k, v) = (r.get_ref(0)?.as_blob()?, r.get_ref(1)?.as_blob()?);
                    if !keep(k, v) {
                        gone.push(k.to_vec());
                    }
                }
            }
            let mut del = t.prepare_cached(DELETE)?;
            for k in &gone {
                del.execute([k])?;
            }
            Ok(gone.len() as u64)
        })
    }

    fn compact_and_close(self, _dir: &Path) -> Result<(), String> {
        // VACUUM rewrites the database; the checkpoint at close moves it out of the WAL.
        self.conn.execute_batch("VACUUM; PRAGMA wal_checkpoint(TRUNCATE);").map_err(err("sqlite vacuum"))?;
        FillEngine::close(self)
    }
}
