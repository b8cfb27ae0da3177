//! Random point reads and random range reads of redb's comparison (24-byte random keys,
//! 150-byte values), tsumiki alone: a target for `perf record` and cachegrind while the
//! read path changes (the comparison with the peers is `tsumiki bench kv`).
//!
//!     cargo run --release -p tsumiki-db --example reads -- 1000000 all
//!
//! Arguments: records (default 1,000,000); what to run: `get`, `get-ref`, `range`, `range-ref`
//! (the borrowed forms), `get-many` (`get_many_with` per batch), `get-each` (a snapshot per read), `get-each-txn` (a transaction per
//! read) or `all` (default); passes over the keys (default 1; more for a profile); the
//! value's length (default 150); `reopen` to close and open the database before reading
//! (the tree is then the one recovery builds bottom-up, as after any open).
//! Reads run in `Db::view` batches of 1,000 keys (100 scans).

use std::time::Instant;

use rand::{RngExt, SeedableRng};
use tsumiki::{Db, Durability, LogOptions, Options};

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().map_or(1_000_000, |a| a.parse().expect("records: a number"));
    let what = args.next().unwrap_or_else(|| "all".into());
    let passes: usize = args.next().map_or(1, |a| a.parse().expect("passes: a number"));
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let keys: Vec<[u8; 24]> = (0..n).map(|_| rng.random()).collect();
    let vlen: usize = args.next().map_or(150, |a| a.parse().expect("value length: a number"));
    let value = vec![7u8; vlen];
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let log = LogOptions { durability: Durability::None, ..LogOptions::default() };
    let reopen = args.next().is_some_and(|a| a == "reopen");
    let opts = Options { log, cache_bytes: 4 << 30, ..Options::default() };
    let mut db = Db::create(tmp.path(), opts.clone()).expect("open");
    let t = Instant::now();
    for chunk in keys.chunks(10_000) {
        db.run(|t| chunk.iter().try_for_each(|k| t.put(k, &value))).expect("fill");
    }
    eprintln!("load: {:.2} s", t.elapsed().as_secs_f64());
    if reopen {
        let t = Instant::now();
        db.close().expect("close");
        db = Db::open(tmp.path(), opts).expect("reopen");
        eprintln!("close and open: {:.2} s", t.elapsed().as_secs_f64());
    }
    let mut order: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        order.swap(i, rng.random_range(0..=i));
    }
    for (mode, borrowed) in [("get", false), ("get-ref", true), ("get-many", true)] {
        if what != mode && what != "all" {
            continue;
        }
        let many = mode == "get-many";
        let t = Instant::now();
        let mut found = 0usize;
        for chunk in std::iter::repeat_n(&order, passes).flat_map(|o| o.chunks(1000)) {
            found += db
                .view(|r| {
                    let mut c = 0;
                    if many {
                        let batch: Vec<&[u8; 24]> = chunk.iter().map(|&i| &keys[i]).collect();
                        r.get_many_with(&batch, |_, v| c += v.map_or(0, <[u8]>::len))?;
                        return Ok(c);
                    }
                    for &i in chunk {
                        c += match borrowed {
                            true => r.get_with(keys[i], |v| v.map_or(0, <[u8]>::len))?,
                            false => r.get(keys[i])?.map_or(0, |v| v.len()),
                        };
                    }
                    Ok(c)
                })
                .expect("read");
        }
        assert_eq!(found, passes * n * vlen);
        println!("{mode} random reads: {:.0} keys/s", (passes * n) as f64 / t.elapsed().as_secs_f64());
    }
    // One snapshot per read (what a binding that reads key by key does): the cost of
    // beginning and ending a snapshot beside the read's.
    for (mode, plain) in [("get-each", false), ("get-each-txn", true)] {
        if what != mode && what != "all" {
            continue;
        }
        let t = Instant::now();
        let mut found = 0usize;
        for &i in std::iter::repeat_n(&order, passes).flatten() {
            found += if plain {
                let txn = db.begin();
                let v = txn.get_with(keys[i], |v| v.map_or(0, <[u8]>::len)).expect("read");
                txn.commit().expect("commit");
                v
            } else {
                db.begin_read().get_with(keys[i], |v| v.map_or(0, <[u8]>::len)).expect("read")
            };
        }
        assert_eq!(found, passes * n * vlen);
        println!("{mode} random reads: {:.0} keys/s", (passes * n) as f64 / t.elapsed().as_secs_f64());
    }
    for (mode, borrowed) in [("range", false), ("range-ref", true)] {
        if what != mode && what != "all" {
            continue;
        }
        let scans = n / 4;
        let t = Instant::now();
        let mut seen = 0usize;
        for chunk in std::iter::repeat_n(&order[..scans], passes).flat_map(|o| o.chunks(100)) {
            seen += db
                .view(|r| {
                    let mut c = 0;
                    for &i in chunk {
                        let mut scan = r.range(keys[i]..);
                        if borrowed {
                            for _ in 0..10 {
                                let Some(row) = scan.next_ref() else { break };
                                c += row?.1.len();
                            }
                        } else {
                            for row in scan.take(10) {
                                c += row?.1.len();
                            }
                        }
                    }
                    Ok(c)
                })
                .expect("scan");
        }
        assert!(seen > passes * scans * vlen * 9);
        println!("{mode} reads (10): {:.0} scans/s", (passes * scans) as f64 / t.elapsed().as_secs_f64());
    }
    db.close().expect("close");
}
