//! [`Db::backup_to`]: a consistent copy built beside its destination and renamed into
//! place only when complete, so that an unfinished backup never opens as a database.

use std::path::Path;

use super::{Db, Options};
use crate::error::Error;
use crate::wal::LogOptions;

/// Records per transaction of a [`Db::backup_to`] copy.
const BACKUP_BATCH: u64 = 4096;

impl Db {
    /// Copies the database, as one consistent state, into a new database in directory
    /// `dir` (which must not hold one), while transactions go on; returns the records
    /// copied. `dir` must be missing or empty. The copy is read in one
    /// [`view`](Self::view) and written in transactions of a few thousand records into a
    /// temporary directory beside `dir` (`.NAME.backup-*`), closed and synced, and only
    /// then renamed to `dir`: a backup that fails, or a process killed midway, leaves no
    /// database at `dir` (a killed one's temporary directory is removed by the next backup
    /// to the same name). Any protocol opens the copy.
    ///
    /// ```
    /// # use tsumiki::{Db, Options};
    /// let dir = tempfile::tempdir().unwrap();
    /// let db = Db::create(dir.path().join("live"), Options::default()).unwrap();
    /// db.run(|t| { t.put("a", 0u64.to_be_bytes())?; t.put("b", 0u64.to_be_bytes()) }).unwrap();
    /// let stop = std::sync::atomic::AtomicBool::new(false);
    /// std::thread::scope(|s| {
    ///     // A writer keeps a == b, changing both in each transaction.
    ///     s.spawn(|| {
    ///         let mut n = 0u64;
    ///         while !stop.load(std::sync::atomic::Ordering::Relaxed) {
    ///             n += 1;
    ///             db.run(|t| { t.put("a", n.to_be_bytes())?; t.put("b", n.to_be_bytes()) }).unwrap();
    ///         }
    ///     });
    ///     assert_eq!(db.backup_to(dir.path().join("copy")).unwrap(), 2);
    ///     stop.store(true, std::sync::atomic::Ordering::Relaxed);
    /// });
    /// let copy = Db::open(dir.path().join("copy"), Options::default()).unwrap();
    /// let t = copy.begin();
    /// assert_eq!(t.get("a").unwrap(), t.get("b").unwrap()); // one consistent state
    /// ```
    pub fn backup_to(&self, dir: impl AsRef<Path>) -> Result<u64, Error> {
        let dir = dir.as_ref();
        // Only a missing or empty directory, which the finished copy replaces.
        let existed = match std::fs::read_dir(dir) {
            Ok(mut entries) => {
                if entries.next().is_some() {
                    return Err(Error::Config(format!("backup: {} is not empty", dir.display())));
                }
                true
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(e) => return Err(Error::io(format!("backup: reading {}", dir.display()), e)),
        };
        let name = dir
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| Error::Config(format!("backup: {} does not end in a UTF-8 name", dir.display())))?;
        let parent = match dir.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let prefix = format!(".{name}.backup-");
        crate::storage::remove_dead_copies(parent, &prefix)
            .map_err(|e| Error::io(format!("backup: removing a killed backup's copy in {}", parent.display()), e))?;
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let tmp = parent.join(format!("{prefix}{}-{nanos:x}", std::process::id()));
        let io = |what: &str, e| Error::io(format!("backup: {what} {}", tmp.display()), e);
        {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new().mode(0o700).create(&tmp).map_err(|e| io("creating", e))?;
        }
        // Held while the temporary directory exists: a later backup removes it only once
        // this lock is free (this process gone).
        let hold = std::fs::File::open(&tmp).map_err(|e| io("locking", e))?;
        let result =
            hold.try_lock().map_err(|e| io("locking", e.into())).and_then(|()| self.copy_into(&tmp.join("db")));
        let result = result.and_then(|n| {
            let copy = tmp.join("db");
            if existed {
                if let Ok(m) = std::fs::metadata(dir) {
                    let _ = std::fs::set_permissions(&copy, m.permissions());
                }
            }
            // An empty directory at `dir` is replaced by the rename (POSIX rename(2)).
            std::fs::rename(&copy, dir)
                .map_err(|e| Error::io(format!("backup: renaming the copy to {}", dir.display()), e))?;
            std::fs::File::open(parent)
                .and_then(|d| d.sync_all())
                .map_err(|e| Error::io(format!("backup: syncing {}", parent.display()), e))?;
            Ok(n)
        });
        let removed = std::fs::remove_dir_all(&tmp).map_err(|e| io("removing", e));
        drop(hold);
        let n = result?;
        removed?;
        Ok(n)
    }

    /// Copies every record, read in one [`view`](Self::view), into a new database at
    /// `to` (a retried view starts over), then closes it: synced when this returns.
    fn copy_into(&self, to: &Path) -> Result<u64, Error> {
        let opts = Options {
            log: LogOptions { durability: crate::wal::Durability::Buffered, ..LogOptions::default() },
            ..Options::default()
        };
        self.view(|r| {
            if to.exists() {
                std::fs::remove_dir_all(to).map_err(|e| Error::io(format!("backup: removing {}", to.display()), e))?;
            }
            let copy = Db::create(to, opts.clone())?;
            let mut n = 0u64;
            let mut txn = copy.begin();
            for row in r.iter() {
                let (k, v) = row?;
                txn.put(k, v)?;
                n += 1;
                if n.is_multiple_of(BACKUP_BATCH) {
                    std::mem::replace(&mut txn, copy.begin()).commit()?;
                }
            }
            txn.commit()?;
            copy.close()?;
            Ok(n)
        })
    }
}
