//! A backup killed at a random moment (SIGKILL of the process running
//! [`Db::backup_to`]) leaves no database at its destination: nothing opens there, and
//! `check` finds no database; a backup that finished holds every record. The next
//! backup to the same name removes what a killed one left beside it.
//!
//! `TSUMIKI_BACKUP_KILLS` sets the number of kills (default 30).

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use tsumiki::storage::SimRng;
use tsumiki::{Db, Error, Options};

const RECORDS: u32 = 20_000;

fn value(k: u32) -> Vec<u8> {
    let mut v = k.to_be_bytes().repeat(25);
    v.truncate(97);
    v
}

/// The child: backs up `TSUMIKI_BACKUP_FROM` into `TSUMIKI_BACKUP_TO`, then says so.
#[test]
fn backup_child_entry() {
    let (Some(from), Some(to)) = (std::env::var_os("TSUMIKI_BACKUP_FROM"), std::env::var_os("TSUMIKI_BACKUP_TO"))
    else {
        return;
    };
    let db = Db::open(&from, Options::default()).unwrap();
    println!("ready");
    let n = db.backup_to(&to).unwrap();
    println!("done {n}");
}

fn leftovers(parent: &std::path::Path) -> usize {
    std::fs::read_dir(parent)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().starts_with(".copy.backup-"))
        .count()
}

#[test]
fn a_killed_backup_never_opens_as_a_database() {
    let kills: u64 = std::env::var("TSUMIKI_BACKUP_KILLS").ok().and_then(|v| v.parse().ok()).unwrap_or(30);
    let dir = tempfile::tempdir().unwrap();
    let from = dir.path().join("live");
    let to = dir.path().join("copy");
    {
        let db = Db::create(&from, Options::default()).unwrap();
        for chunk in (0..RECORDS).collect::<Vec<_>>().chunks(2000) {
            db.run(|t| chunk.iter().try_for_each(|&k| t.put(k.to_be_bytes(), value(k)))).unwrap();
        }
        db.close().unwrap();
    }
    // How long a backup takes here, so that kills land across it however fast or loaded
    // the machine is.
    let took = {
        let db = Db::open(&from, Options::default()).unwrap();
        let start = std::time::Instant::now();
        assert_eq!(db.backup_to(&to).unwrap(), RECORDS as u64);
        let took = start.elapsed();
        db.close().unwrap();
        std::fs::remove_dir_all(&to).unwrap();
        took
    };
    let exe = std::env::current_exe().unwrap();
    let mut rng = SimRng::new(7);
    let (mut cut, mut finished) = (0, 0);
    for i in 0..kills {
        let mut child = Command::new(&exe)
            .args(["backup_child_entry", "--exact", "--nocapture", "--test-threads=1"])
            .env("TSUMIKI_BACKUP_FROM", &from)
            .env("TSUMIKI_BACKUP_TO", &to)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Killed at a uniformly random moment within 1.2 times the backup's usual length
        // after the child opened the database (one kill in ten sooner: while it opens).
        let mut out = BufReader::new(child.stdout.take().unwrap());
        if i % 10 != 0 {
            let mut line = String::new();
            while out.read_line(&mut line).unwrap() > 0 && !line.ends_with("ready\n") {
                line.clear();
            }
        }
        std::thread::sleep(took.mul_f64(rng.below(1200) as f64 / 1000.0));
        child.kill().unwrap();
        child.wait().unwrap();
        drop(out);
        match Db::open(&to, Options { read_only: true, ..Options::default() }) {
            Ok(copy) => {
                // Finished: every record, each with its value.
                let t = copy.begin();
                let mut n = 0u32;
                for row in t.iter() {
                    let (k, v) = row.unwrap();
                    let k = u32::from_be_bytes(k.as_slice().try_into().unwrap());
                    assert_eq!(v, value(k), "kill {i}: record {k}");
                    n += 1;
                }
                assert_eq!(n, RECORDS, "kill {i}: a backup that opens holds {n} of {RECORDS} records");
                t.commit().unwrap();
                drop(copy);
                let report = tsumiki::check(&to).unwrap();
                assert!(report.is_healthy() && report.records == RECORDS as u64, "kill {i}: {report:?}");
                finished += 1;
                std::fs::remove_dir_all(&to).unwrap();
            }
            Err(Error::NotFound(_)) => {
                cut += 1;
                assert!(tsumiki::check(&to).is_err(), "kill {i}: check finds a database in a cut backup");
                // The destination is missing or empty (never a partial database).
                if let Ok(mut d) = std::fs::read_dir(&to) {
                    assert!(d.next().is_none(), "kill {i}: a cut backup left files at its destination");
                }
            }
            Err(e) => panic!("kill {i}: opening the backup: {e}"),
        }
        // What killed backups left beside the destination: at most the last one's, since
        // each backup first removes the dead ones'.
        assert!(leftovers(dir.path()) <= 1, "kill {i}: {} leftover copies", leftovers(dir.path()));
    }
    println!("{kills} kills: {cut} backups cut, {finished} finished");
    assert!(cut * 3 >= kills, "a third of the kills must land before the backup finished ({cut} of {kills})");
    // A backup run to the end removes the last leftover and makes a full copy.
    let db = Db::open(&from, Options::default()).unwrap();
    assert_eq!(db.backup_to(&to).unwrap(), RECORDS as u64);
    assert_eq!(leftovers(dir.path()), 0);
}
