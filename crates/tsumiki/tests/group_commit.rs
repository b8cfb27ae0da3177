//! NLR group commit (paper 001's Algorithm 3). In a test binary of its own: any thread
//! that waits on a lock flushes every database's lanes that hold locks, so a test running
//! beside this one could make its group durable and hide whether the reader had to.

use std::sync::Arc;
use std::time::Duration;

use tsumiki::storage::SimStorage;
use tsumiki::{Cc, Db, LogOptions, Options};

/// NLR group commit (Algorithm 3): a deferred commit keeps its locks until its group is
/// durable, so a write another transaction could read is always recovered.
#[test]
fn algorithm_3_nothing_readable_before_durable() {
    let log = LogOptions { group: 8, max_wait: Duration::from_secs(60), ..LogOptions::default() };
    for round in 0..20u64 {
        let cc = [Cc::TicToc, Cc::TwoPl(tsumiki::LockWait::NoWait), Cc::TwoPl(tsumiki::LockWait::WaitDie)]
            [round as usize % 3];
        let opts = Options { cc, log: log.clone(), ..Options::default() };
        let disk = SimStorage::new(round);
        let db = Db::open_with_storage(Arc::new(disk.clone()), opts.clone()).unwrap();
        let mut t = db.begin();
        t.put(b"k", b"1").unwrap();
        let ticket = t.commit_deferred().unwrap(); // pending: its group is not full
        let syncs = db.wal_stats().unwrap().syncs;
        let seen = std::thread::scope(|s| s.spawn(|| db.run(|t| t.get(b"k")).unwrap()).join().unwrap());
        assert_eq!(seen.as_deref(), Some(&b"1"[..]));
        assert!(db.wal_stats().unwrap().syncs > syncs, "the reader had to make the group durable first");
        let image = disk.crash();
        drop(ticket);
        drop(db);
        let db = Db::open_with_storage(Arc::new(SimStorage::from_image(&image, round)), opts.clone()).unwrap();
        assert_eq!(db.begin().get(b"k").unwrap().as_deref(), Some(&b"1"[..]), "a read write was lost");
    }
}
