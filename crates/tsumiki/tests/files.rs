//! Real files: modes, the lock file, reopen after a clean close.

use std::os::unix::fs::PermissionsExt;

use tsumiki::{Db, Error, Options};

#[test]
fn files_are_private_locked_and_reopenable() {
    let dir = std::env::temp_dir().join(format!("tsumiki-files-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let db = Db::open(&dir, Options::default()).unwrap();
    for i in 0..100u32 {
        db.run(|t| t.put(&i.to_be_bytes(), b"v")).unwrap();
    }
    assert!(matches!(Db::open(&dir, Options::default()), Err(Error::Locked(_))));
    for e in std::fs::read_dir(&dir).unwrap() {
        let e = e.unwrap();
        let mode = e.metadata().unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{:?} has mode {mode:o}", e.file_name());
    }
    assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o077, 0, "directory private");
    let stats = db.wal_stats().unwrap();
    assert!(stats.syncs >= 100, "a sync per commit by default: {stats:?}");
    db.close().unwrap();
    let db = Db::open(&dir, Options::default()).unwrap();
    assert!(!db.recovery_stats().unwrap().replayed);
    assert_eq!(db.begin().scan(b"", None).count(), 100);
    drop(db);
    std::fs::remove_dir_all(&dir).unwrap();
}
