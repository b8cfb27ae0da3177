//! `tsumiki bench kv`: the rows of redb's published engine comparison (redb's README and
//! `benches/lmdb_benchmark.rs`: 24-byte random keys, 150-byte random values), run on
//! tsumiki and every peer built in, each engine against its own database.
//!
//! As in `bench fill`, each (engine, round) runs in a child process of its own (this binary
//! re-run with a hidden `--child ENGINE`), so that its peak RSS is its alone; rounds
//! alternate the engines and the medians over rounds are reported. A child runs the rows
//! in this order (the report lists them in [`ROWS`] order):
//!
//! 1. sorted load: a fresh database loaded with the `--records` records in ascending key
//!    order, 1,000 per durable transaction; then closed and removed (run first, so that
//!    its memory is not added to the main database's); then append load: the same records,
//!    ascending, into another fresh database in one durable step by each engine's path for
//!    sorted input ([`KvEngine::append_load`]: tsumiki's `Db::bulk_load`, LMDB's
//!    `MDB_APPEND`, fjall's ingestion; one transaction for the others), closed, removed;
//! 2. bulk load: the records in random order, one transaction;
//! 3. individual writes: 1,000 new records, one durable transaction each;
//! 4. batch writes: 100 durable transactions of 1,000 new records;
//! 5. non-durable writes: 10,000 new records, one transaction each, by each engine's
//!    no-sync setting ([`KvEngine::set_durable`]);
//! 6. len(): the count of every record, repeated for at least 0.2 s (time per call);
//! 7. random reads: every loaded key in random order, 3 times, checking each value's
//!    length; 8. random range reads: from a random loaded key, the next 10 records;
//! 9. random reads on each `--threads` count (each thread reads its share of one pass);
//! 10. removals: half of the loaded records, random, 1,000 per transaction;
//! 11. pop first / pop last: 1,000 each, 100 per transaction; 12. retain: every record
//!     whose value's first byte is even removed, one transaction;
//! 13. compaction (each engine's own, [`KvEngine::compact_and_close`]), with the size on
//!     disk after the writes (open), after everything (closed) and after compaction.
//!
//! Reads run 1,000 keys (or scans) per read transaction. Counts are checked against what
//! the runner knows the database holds: `found` and `expected` in each row.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use clap::Args;
use rand::seq::SliceRandom;
use rand::Rng;
use serde::{Deserialize, Serialize};

use super::cleanup::{wait_child, TempDir};
use super::fill::peers::{self, match_engine, Batch, FillConfig, KvEngine, KvReader, Tally, KV_ENGINES};
use super::fill::{dir_bytes, peak_rss, result_line};
use super::plot::{self, Chart};
use super::schema::{Family, OutputArgs, Reporter, ResultRecord};
use super::workload::rng;
use super::{progress, report};

/// Key and value sizes of redb's benchmark.
const KEY: usize = 24;
const VALUE: usize = 150;
/// The fixed-size rows (redb's).
const INDIVIDUAL: usize = 1_000;
const BATCH_TXNS: usize = 100;
const BATCH_SIZE: usize = 1_000;
const NOSYNC: usize = 10_000;
/// Records written after the bulk load.
const EXTRA: usize = INDIVIDUAL + BATCH_TXNS * BATCH_SIZE + NOSYNC;
/// Records per transaction of the sorted load and of the removals.
const PER_TXN: usize = 1_000;
/// Keys (or scans) per read transaction.
const READ_BATCH: usize = 1_000;
const READ_PASSES: usize = 3;
const SCAN_LEN: usize = 10;
const POPS: usize = 1_000;
const POP_TXN: usize = 100;

/// Every row, in report order: (name, label, unit of its rate).
pub const ROWS: [(&str, &str, &str); 15] = [
    ("bulk_load", "bulk load", "records/s"),
    ("individual_writes", "individual writes", "txns/s"),
    ("batch_writes", "batch writes", "records/s"),
    ("nondurable_writes", "non-durable writes", "txns/s"),
    ("sorted_load", "sorted load", "records/s"),
    ("append_load", "append load", "records/s"),
    ("len", "len()", "calls/s"),
    ("random_reads", "random reads", "keys/s"),
    ("range_reads", "random range reads", "scans/s"),
    ("threaded_reads", "random reads", "keys/s"),
    ("removals", "removals", "records/s"),
    ("pop_first", "pop first", "records/s"),
    ("pop_last", "pop last", "records/s"),
    ("retain", "retain", "records/s"),
    ("compact", "compaction", "records/s"),
];

#[derive(Args, Debug, Clone, Serialize)]
pub struct KvArgs {
    /// Records of the bulk load (redb's published table uses 5,000,000); 111,000 more are
    /// written by the write rows.
    #[arg(long, default_value_t = 1_000_000)]
    pub records: usize,
    /// Engines, comma-separated: tsumiki, leveldb, rocksdb, lmdb, sqlite, redb, fjall, or
    /// all (every one built in).
    #[arg(long, default_value = "all", value_delimiter = ',')]
    pub engine: Vec<String>,
    /// Rounds; each runs every engine once, and the medians over rounds are reported.
    #[arg(long, default_value_t = 1)]
    pub rounds: usize,
    /// Thread counts of the multithreaded random reads.
    #[arg(long, default_value = "1,2,4,8,16,32", value_delimiter = ',')]
    pub threads: Vec<usize>,
    /// Each engine's cache in MiB (redb's benchmark: 4096): tsumiki's cache_bytes, redb's
    /// cache, fjall's and RocksDB's and LevelDB's block cache, SQLite's page cache (split
    /// among its reading connections). LMDB reads through the OS page cache.
    #[arg(long, default_value_t = 4096)]
    pub cache_mb: usize,
    /// Seed of the keys, values and orders.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Directory under which the databases go (default: the system temp dir). It should be
    /// on the device being measured, not a tmpfs.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    #[command(flatten)]
    #[serde(flatten)]
    pub out: OutputArgs,
    /// Internal: run every row for this engine and print the results as one JSON line.
    #[arg(long, hide = true)]
    #[serde(skip)]
    pub child: Option<String>,
    /// Internal: the progress bar's label in a child.
    #[arg(long, hide = true, default_value = "")]
    #[serde(skip)]
    pub label: String,
}

pub fn run(args: &KvArgs) -> Result<(), String> {
    if args.records < 2 || args.rounds == 0 || args.threads.is_empty() || args.threads.contains(&0) {
        return Err("--records must be at least 2, --rounds and every --threads at least 1".into());
    }
    if let Some(engine) = &args.child {
        let r = run_child(engine, args)?;
        println!("{}", serde_json::to_string(&r).map_err(|e| format!("encoding the result: {e}"))?);
        return Ok(());
    }
    let engines = select_engines(&args.engine)?;
    let exe = std::env::current_exe().map_err(|e| format!("finding this binary: {e}"))?;
    let mut reporter = Reporter::start(Family::Kv, &args.out, args)?;
    let base = TempDir::new("tsumiki-bench-kv-", args.dir.as_deref())?;
    let mut runs: Vec<Vec<ChildResult>> = engines.iter().map(|_| Vec::new()).collect();
    for round in 0..args.rounds {
        for (i, engine) in engines.iter().enumerate() {
            let label = format!("round {}/{} {engine}", round + 1, args.rounds);
            runs[i].push(spawn_child(&exe, engine, &label, base.path(), args)?);
        }
    }
    base.close()?;
    let mut rows = Vec::new();
    for (engine, r) in engines.iter().zip(&runs) {
        for row in summarize(engine, r, args) {
            reporter.row(&row)?;
            rows.push(row);
        }
    }
    reporter.finish()?;
    if !args.out.json {
        print_table(&rows, &engines, args);
    }
    if let Some(path) = &args.out.plot {
        plot_rows(path, args, &rows, &engines)?;
    }
    Ok(())
}

/// The engines to run: [`KV_ENGINES`] order for `all` (skipping, with a note, those not
/// built in), the given order otherwise.
fn select_engines(list: &[String]) -> Result<Vec<&'static str>, String> {
    let mut out = Vec::new();
    for name in list {
        let picked: Vec<&'static str> = if name == "all" {
            KV_ENGINES
                .iter()
                .filter(|e| match peers::missing(e) {
                    Some(why) => {
                        eprintln!("note: skipping {why}");
                        false
                    }
                    None => true,
                })
                .copied()
                .collect()
        } else {
            let e = KV_ENGINES
                .iter()
                .find(|e| **e == name.as_str())
                .ok_or_else(|| format!("unknown --engine {name:?}; known: {}, all", KV_ENGINES.join(", ")))?;
            if let Some(why) = peers::missing(e) {
                return Err(why);
            }
            vec![*e]
        };
        for e in picked {
            if !out.contains(&e) {
                out.push(e);
            }
        }
    }
    if out.is_empty() {
        return Err("no engine to run".into());
    }
    Ok(out)
}

/// Runs one engine's rows in a child process (its databases under `base`).
fn spawn_child(exe: &Path, engine: &str, label: &str, base: &Path, args: &KvArgs) -> Result<ChildResult, String> {
    let threads: Vec<String> = args.threads.iter().map(|t| t.to_string()).collect();
    let mut cmd = Command::new(exe);
    cmd.args(["bench", "kv", "--child", engine, "--label", label])
        .args(["--records", &args.records.to_string()])
        .args(["--threads", &threads.join(",")])
        .args(["--cache-mb", &args.cache_mb.to_string()])
        .args(["--seed", &args.seed.to_string()])
        .args(args.out.quiet.then_some("--quiet"))
        .arg("--dir")
        .arg(base);
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::inherit());
    let child = cmd.spawn().map_err(|e| format!("running {}: {e}", exe.display()))?;
    let out = wait_child(child).map_err(|e| format!("{label}: waiting for the child: {e}"))?;
    if !out.status.success() {
        return Err(format!("{label}: the child process failed ({})", out.status));
    }
    result_line(&out.stdout, label)
}

/// One row as a child measured it.
#[derive(Serialize, Deserialize, Debug, Clone)]
struct Measured {
    row: String,
    threads: Option<usize>,
    secs: f64,
    /// Operations the rate counts (records, transactions, calls, keys, scans).
    count: u64,
    /// What the row found, removed or counted, checked against `expected`.
    found: u64,
    expected: u64,
}

/// What one child reports: its rows and its engine-wide measures.
#[derive(Serialize, Deserialize, Debug)]
struct ChildResult {
    rows: Vec<Measured>,
    disk_after_writes_bytes: u64,
    disk_before_compact_bytes: u64,
    disk_after_compact_bytes: u64,
    peak_rss_bytes: u64,
}

/// The data of one run: every key and value (the bulk load's `records` first, then the
/// write rows' in the order they are written), and orders over them.
struct Data {
    keys: Vec<[u8; KEY]>,
    values: Vec<u8>,
    /// Record numbers in ascending key order.
    sorted: Vec<u32>,
    /// A random permutation of the bulk load's record numbers (reads, removals).
    shuffled: Vec<u32>,
}

impl Data {
    fn new(records: usize, seed: u64) -> Self {
        let n = records + EXTRA;
        let mut r = rng(seed, 0, 0);
        let mut keys = vec![[0u8; KEY]; n];
        for k in &mut keys {
            r.fill_bytes(k);
        }
        let mut values = vec![0u8; n * VALUE];
        r.fill_bytes(&mut values);
        let mut sorted: Vec<u32> = (0..n as u32).collect();
        sorted.sort_unstable_by_key(|&i| keys[i as usize]);
        let mut shuffled: Vec<u32> = (0..records as u32).collect();
        shuffled.shuffle(&mut rng(seed, 1, 0));
        Data { keys, values, sorted, shuffled }
    }

    /// Records `from..to` as one batch.
    fn batch(&self, from: usize, to: usize) -> Batch<'_, KEY> {
        Batch { keys: &self.keys[from..to], values: &self.values[from * VALUE..to * VALUE], value_size: VALUE }
    }

    fn key(&self, i: u32) -> &[u8] {
        &self.keys[i as usize]
    }

    fn value(&self, i: u32) -> &[u8] {
        &self.values[i as usize * VALUE..(i as usize + 1) * VALUE]
    }
}

/// The child: every row for one engine, in a fresh directory under `--dir`.
fn run_child(engine: &str, args: &KvArgs) -> Result<ChildResult, String> {
    let label = if args.label.is_empty() { engine.to_string() } else { args.label.clone() };
    let bar = progress::spinner(args.out.quiet, format!("{label} generating"), "");
    let data = Data::new(args.records, args.seed);
    bar.finish_and_clear();
    let tmp = TempDir::new(&format!("tsumiki-kv-{engine}-"), args.dir.as_deref())?;
    let steps = ROWS.len() + args.threads.len();
    let bar = progress::bar(args.out.quiet, steps as u64, label.clone(), "rows");
    let r = match_engine!(kv: engine, E => rows::<E>(tmp.path(), &data, args, &|row: &str| {
        bar.set_prefix(format!("{label} {row}"));
        bar.inc(1);
    }));
    bar.finish_and_clear();
    let mut r = r?;
    tmp.close()?;
    r.peak_rss_bytes = peak_rss()?;
    Ok(r)
}

/// Times `f`, returning its result and the seconds it took.
fn timed<T>(f: impl FnOnce() -> Result<T, String>) -> Result<(T, f64), String> {
    let t = Instant::now();
    let v = f()?;
    Ok((v, t.elapsed().as_secs_f64()))
}

/// Reads `keys` through `reader`, `READ_BATCH` per read transaction, checking every value's
/// length.
fn read_keys<R: KvReader>(reader: &mut R, data: &Data, keys: &[u32]) -> Result<Tally, String> {
    let mut t = Tally::default();
    for chunk in keys.chunks(READ_BATCH) {
        t.merge(reader.get_each(chunk.iter().map(|&i| data.key(i)))?);
    }
    if t.bytes != t.records * VALUE as u64 {
        return Err(format!("reads found {} values of {} bytes in all, not {VALUE} bytes each", t.records, t.bytes));
    }
    Ok(t)
}

/// The one runner: every row for engine `E` in `dir`. `step` names each row as it starts.
fn rows<E: KvEngine>(dir: &Path, data: &Data, args: &KvArgs, step: &dyn Fn(&str)) -> Result<ChildResult, String> {
    let n = args.records;
    let cfg = FillConfig {
        sync: true,
        records: (n + EXTRA) as u64,
        per_txn: PER_TXN,
        value_size: VALUE,
        direct_io: true,
        cache_bytes: Some(args.cache_mb << 20),
    };
    let mut out = Vec::new();
    let mut push = |row: &str, threads: Option<usize>, secs: f64, count: usize, found: u64, expected: usize| {
        let (count, expected) = (count as u64, expected as u64);
        out.push(Measured { row: row.into(), threads, secs, count, found, expected });
    };
    let mkdir = |name: &str| -> Result<PathBuf, String> {
        let d = dir.join(name);
        std::fs::create_dir(&d).map_err(|e| format!("creating {}: {e}", d.display()))?;
        Ok(d)
    };

    // Sorted load, first and on a database of its own (see the module's notes).
    step("sorted load");
    let sorted_dir = mkdir("sorted")?;
    let mut db = E::open(&sorted_dir, &cfg)?;
    let in_order: Vec<u32> = data.sorted.iter().copied().filter(|&i| (i as usize) < n).collect();
    let (keys, values): (Vec<[u8; KEY]>, Vec<u8>) = (
        in_order.iter().map(|&i| data.keys[i as usize]).collect(),
        in_order.iter().flat_map(|&i| data.value(i).to_vec()).collect(),
    );
    let ((), secs) = timed(|| {
        for (k, v) in keys.chunks(PER_TXN).zip(values.chunks(PER_TXN * VALUE)) {
            db.write_batch(&Batch { keys: k, values: v, value_size: VALUE })?;
        }
        Ok(())
    })?;
    let found = db.len()?;
    push("sorted_load", None, secs, n, found, n);
    db.close()?;
    std::fs::remove_dir_all(&sorted_dir).map_err(|e| format!("removing {}: {e}", sorted_dir.display()))?;

    step("append load");
    let append_dir = mkdir("append")?;
    let mut db = E::open(&append_dir, &cfg)?;
    let ((), secs) = timed(|| db.append_load(&Batch { keys: &keys, values: &values, value_size: VALUE }))?;
    let found = db.len()?;
    push("append_load", None, secs, n, found, n);
    db.close()?;
    std::fs::remove_dir_all(&append_dir).map_err(|e| format!("removing {}: {e}", append_dir.display()))?;
    drop((keys, values, in_order));

    let db_dir = mkdir("db")?;
    let mut db = E::open(&db_dir, &cfg)?;
    step("bulk load");
    let ((), secs) = timed(|| db.write_batch(&data.batch(0, n)))?;
    push("bulk_load", None, secs, n, n as u64, n);
    step("individual writes");
    let ((), secs) = timed(|| (n..n + INDIVIDUAL).try_for_each(|i| db.write_batch(&data.batch(i, i + 1))))?;
    push("individual_writes", None, secs, INDIVIDUAL, INDIVIDUAL as u64, INDIVIDUAL);
    step("batch writes");
    let from = n + INDIVIDUAL;
    let ((), secs) = timed(|| {
        (0..BATCH_TXNS)
            .try_for_each(|b| db.write_batch(&data.batch(from + b * BATCH_SIZE, from + (b + 1) * BATCH_SIZE)))
    })?;
    push(
        "batch_writes",
        None,
        secs,
        BATCH_TXNS * BATCH_SIZE,
        (BATCH_TXNS * BATCH_SIZE) as u64,
        BATCH_TXNS * BATCH_SIZE,
    );
    step("non-durable writes");
    db.set_durable(false)?;
    let from = n + INDIVIDUAL + BATCH_TXNS * BATCH_SIZE;
    let ((), secs) = timed(|| (from..from + NOSYNC).try_for_each(|i| db.write_batch(&data.batch(i, i + 1))))?;
    push("nondurable_writes", None, secs, NOSYNC, NOSYNC as u64, NOSYNC);
    db.set_durable(true)?;
    let disk_after_writes_bytes = dir_bytes(&db_dir)?;
    let total = n + EXTRA;

    step("len()");
    let (mut calls, mut found) = (0usize, 0u64);
    let t = Instant::now();
    // Repeated for at least 0.2 s, so that an engine that answers at once is measured too.
    while calls == 0 || t.elapsed().as_secs_f64() < 0.2 {
        found = db.len()?;
        calls += 1;
    }
    push("len", None, t.elapsed().as_secs_f64(), calls, found, total);

    step("random reads");
    let ((), secs) = timed(|| {
        let mut reader = db.reader(1)?;
        let mut t = Tally::default();
        for _ in 0..READ_PASSES {
            t.merge(read_keys(&mut reader, data, &data.shuffled)?);
        }
        found = t.records;
        Ok(())
    })?;
    push("random_reads", None, secs, READ_PASSES * n, found, READ_PASSES * n);

    step("random range reads");
    // From each loaded key in random order; a scan near the end finds fewer than 10.
    let expected: usize = data
        .shuffled
        .iter()
        .map(|&i| {
            let rank = data.sorted.binary_search_by_key(&data.keys[i as usize], |&j| data.keys[j as usize]);
            SCAN_LEN.min(total - rank.unwrap_or(total))
        })
        .sum();
    let ((), secs) = timed(|| {
        let mut reader = db.reader(1)?;
        let mut t = Tally::default();
        for chunk in data.shuffled.chunks(READ_BATCH) {
            t.merge(reader.scan_each(chunk.iter().map(|&i| data.key(i)), SCAN_LEN)?);
        }
        found = t.records;
        Ok(())
    })?;
    push("range_reads", None, secs, n, found, expected);

    for &threads in &args.threads {
        step(&format!("random reads ({threads} threads)"));
        let readers = (0..threads).map(|_| db.reader(threads)).collect::<Result<Vec<_>, _>>()?;
        let (t, secs) = timed(|| {
            let shares = data.shuffled.chunks(n.div_ceil(threads));
            std::thread::scope(|s| {
                let handles: Vec<_> = readers
                    .into_iter()
                    .zip(shares)
                    .map(|(mut r, share)| s.spawn(move || read_keys(&mut r, data, share)))
                    .collect();
                let mut t = Tally::default();
                for h in handles {
                    t.merge(h.join().map_err(|_| "a reading thread panicked".to_string())??);
                }
                Ok(t)
            })
        })?;
        push("threaded_reads", Some(threads), secs, n, t.records, n);
    }

    // From here on the runner tracks which records remain, to check the counts.
    let mut alive = vec![true; total];
    step("removals");
    let gone = &data.shuffled[..n / 2];
    let gone_keys: Vec<[u8; KEY]> = gone.iter().map(|&i| data.keys[i as usize]).collect();
    let ((), secs) = timed(|| gone_keys.chunks(PER_TXN).try_for_each(|c| db.remove(c)))?;
    gone.iter().for_each(|&i| alive[i as usize] = false);
    let left = db.len()?;
    push("removals", None, secs, n / 2, left, total - n / 2);

    for (row, last) in [("pop_first", false), ("pop_last", true)] {
        step(row);
        let ((), secs) = timed(|| {
            found = 0;
            for _ in 0..POPS / POP_TXN {
                found += db.pop(POP_TXN, last)?;
            }
            Ok(())
        })?;
        let order: Box<dyn Iterator<Item = &u32>> =
            if last { Box::new(data.sorted.iter().rev()) } else { Box::new(data.sorted.iter()) };
        let popped: Vec<u32> = order.copied().filter(|&i| alive[i as usize]).take(POPS).collect();
        popped.iter().for_each(|&i| alive[i as usize] = false);
        push(row, None, secs, POPS, found, popped.len());
    }

    step("retain");
    let examined = alive.iter().filter(|a| **a).count();
    let doomed = (0..total as u32).filter(|&i| alive[i as usize] && data.value(i)[0].is_multiple_of(2)).count();
    let (removed, secs) = timed(|| db.retain(|_, v| v.first().is_some_and(|b| b % 2 == 1)))?;
    push("retain", None, secs, examined, removed, doomed);
    let remaining = db.len()?;
    if remaining != (examined - doomed) as u64 {
        return Err(format!("after retain the database holds {remaining} records, not {}", examined - doomed));
    }

    step("compaction");
    db.close()?;
    let disk_before_compact_bytes = dir_bytes(&db_dir)?;
    let db = E::open(&db_dir, &cfg)?;
    let ((), secs) = timed(|| db.compact_and_close(&db_dir))?;
    let disk_after_compact_bytes = dir_bytes(&db_dir)?;
    // The compacted database still holds every record.
    let mut db = E::open(&db_dir, &cfg)?;
    let after = db.len()?;
    db.close()?;
    push("compact", None, secs, remaining as usize, after, remaining as usize);
    Ok(ChildResult {
        rows: out,
        disk_after_writes_bytes,
        disk_before_compact_bytes,
        disk_after_compact_bytes,
        peak_rss_bytes: 0,
    })
}

/// The parameters of one result row.
#[derive(Serialize, Debug)]
struct KvParams {
    engine: String,
    /// The row's name ([`ROWS`]).
    row: String,
    /// Reading threads (`threaded_reads` only).
    threads: Option<usize>,
    records: usize,
    cache_mb: usize,
    rounds: usize,
}

/// What one row measured: medians over the rounds.
#[derive(Serialize, Debug)]
struct KvMetrics {
    /// Seconds of the timed part.
    secs: f64,
    /// Each round's rate.
    rate_runs: Vec<f64>,
    /// Operations the rate counts.
    count: u64,
    /// What the row found, removed or counted (the first round's)...
    found: u64,
    /// ...and what the runner knows it should be.
    expected: u64,
    /// The engine's peak resident set over its whole child process.
    peak_rss_bytes: u64,
    /// Size on disk after the write rows (open), after every row (closed) and after the
    /// engine's compaction (closed): `compact` rows only.
    disk_after_writes_bytes: Option<u64>,
    disk_before_compact_bytes: Option<u64>,
    disk_after_compact_bytes: Option<u64>,
}

type KvRow = ResultRecord<KvParams, KvMetrics>;

/// One engine's rows: the medians over its rounds, in [`ROWS`] order.
fn summarize(engine: &str, runs: &[ChildResult], args: &KvArgs) -> Vec<KvRow> {
    let median = |xs: Vec<f64>| report::mean_median(&xs).1;
    let mut out = Vec::new();
    let Some(first) = runs.first() else { return out };
    for (name, _, unit) in ROWS {
        for m in first.rows.iter().filter(|m| m.row == name) {
            let same: Vec<&Measured> =
                runs.iter().filter_map(|r| r.rows.iter().find(|x| x.row == name && x.threads == m.threads)).collect();
            let rates: Vec<f64> = same.iter().map(|x| x.count as f64 / x.secs.max(1e-9)).collect();
            let compact = name == "compact";
            let size = |f: &dyn Fn(&ChildResult) -> u64| {
                compact.then(|| median(runs.iter().map(|r| f(r) as f64).collect()) as u64)
            };
            let params = KvParams {
                engine: engine.to_string(),
                row: name.to_string(),
                threads: m.threads,
                records: args.records,
                cache_mb: args.cache_mb,
                rounds: args.rounds,
            };
            let metrics = KvMetrics {
                secs: median(same.iter().map(|x| x.secs).collect()),
                rate_runs: rates.clone(),
                count: m.count,
                found: m.found,
                expected: m.expected,
                peak_rss_bytes: median(runs.iter().map(|r| r.peak_rss_bytes as f64).collect()) as u64,
                disk_after_writes_bytes: size(&|r| r.disk_after_writes_bytes),
                disk_before_compact_bytes: size(&|r| r.disk_before_compact_bytes),
                disk_after_compact_bytes: size(&|r| r.disk_after_compact_bytes),
            };
            out.push(ResultRecord::new(Family::Kv, engine.to_string(), median(rates), unit, params, metrics));
        }
    }
    out
}

/// A row's label in the table and the plot.
fn label(r: &KvRow) -> String {
    let base = ROWS.iter().find(|x| x.0 == r.params.row).map_or(r.params.row.as_str(), |x| x.1);
    match r.params.threads {
        Some(t) => format!("{base} ({t} thread{})", if t == 1 { "" } else { "s" }),
        None => base.to_string(),
    }
}

/// The table: one line per row, one column per engine (rates), and tsumiki's ratio to the
/// best engine (above 1: tsumiki is the best, by that much over the next). A count that
/// differs from what the runner expected is marked `!`.
fn print_table(rows: &[KvRow], engines: &[&str], args: &KvArgs) {
    println!(
        "kv: {} records ({KEY}-byte random keys, {VALUE}-byte values) + {EXTRA} written, cache {} MiB, median of {} round(s)",
        args.records, args.cache_mb, args.rounds
    );
    let mut header = vec!["row", "unit"];
    header.extend(engines);
    header.push("tsumiki/best");
    let mut labels: Vec<String> = Vec::new();
    for r in rows {
        if !labels.contains(&label(r)) {
            labels.push(label(r));
        }
    }
    let cell = |r: &KvRow| {
        format!("{}{}", plot::si(r.throughput), if r.metrics.found != r.metrics.expected { "!" } else { "" })
    };
    let mut table: Vec<Vec<String>> = Vec::new();
    for l in &labels {
        let of = |e: &str| rows.iter().find(|r| r.variant == e && label(r) == *l);
        let unit = engines.iter().find_map(|e| of(e)).map_or("", |r| r.throughput_unit);
        let mut line = vec![l.clone(), unit.to_string()];
        line.extend(engines.iter().map(|e| of(e).map_or_else(|| "-".into(), cell)));
        line.push(ratio(engines.iter().filter_map(|e| of(e).map(|r| (*e, r.throughput)))));
        table.push(line);
    }
    let mib = |v: Option<u64>| v.map_or_else(|| "-".into(), |v| format!("{:.1}", v as f64 / (1 << 20) as f64));
    type Pick = fn(&KvMetrics) -> Option<u64>;
    let sizes: [(&str, Pick); 4] = [
        ("disk after writes", |m| m.disk_after_writes_bytes),
        ("disk before compact", |m| m.disk_before_compact_bytes),
        ("disk after compact", |m| m.disk_after_compact_bytes),
        ("peak RSS", |m| Some(m.peak_rss_bytes)),
    ];
    for (name, pick) in sizes {
        let mut line = vec![name.to_string(), "MiB".into()];
        line.extend(engines.iter().map(|e| {
            mib(rows.iter().find(|r| r.variant == *e && r.params.row == "compact").and_then(|r| pick(&r.metrics)))
        }));
        line.push(String::new());
        table.push(line);
    }
    report::table(&header, &table);
}

/// tsumiki's rate over the best other engine's (`-` without both).
fn ratio<'a>(rates: impl Iterator<Item = (&'a str, f64)>) -> String {
    let (mut ours, mut best) = (None, None::<f64>);
    for (e, r) in rates {
        if e == "tsumiki" {
            ours = Some(r);
        } else {
            best = Some(best.map_or(r, |b| b.max(r)));
        }
    }
    match (ours, best) {
        (Some(o), Some(b)) if b > 0.0 => format!("{:.2}", o / b),
        _ => "-".into(),
    }
}

/// Two panels: each row's rate relative to the best engine's (x: the row's number in the
/// table), and the multithreaded reads against the thread count.
fn plot_rows(path: &Path, args: &KvArgs, rows: &[KvRow], engines: &[&str]) -> Result<(), String> {
    let caption = format!(
        "{} records, {KEY}-byte keys, {VALUE}-byte values, cache {} MiB; median of {} round(s)",
        plot::si(args.records as f64),
        args.cache_mb,
        args.rounds
    );
    let mut labels: Vec<String> = Vec::new();
    for r in rows.iter().filter(|r| r.params.threads.is_none()) {
        if !labels.contains(&label(r)) {
            labels.push(label(r));
        }
    }
    let key: Vec<String> = labels.iter().enumerate().map(|(i, l)| format!("{} {l}", i + 1)).collect();
    let mut relative =
        Chart::new(format!("{caption}; rows: {}", key.join(", ")), "row", "rate / best engine's rate", "engine");
    for (i, l) in labels.iter().enumerate() {
        let of_row: Vec<&KvRow> = rows.iter().filter(|r| label(r) == *l).collect();
        let best = of_row.iter().map(|r| r.throughput).fold(0.0, f64::max);
        for e in engines {
            if let Some(r) = of_row.iter().find(|r| r.variant == *e).filter(|_| best > 0.0) {
                relative.push(e, (i + 1) as f64, r.throughput / best);
            }
        }
    }
    let mut threads = Chart::new(caption, "reading threads", "random reads (keys/s)", "engine");
    for r in rows.iter().filter(|r| r.params.row == "threaded_reads") {
        threads.push(&r.variant, r.params.threads.unwrap_or(1) as f64, r.throughput);
    }
    plot::write_svg(path, "tsumiki bench kv", &report::footer(), &[relative, threads])
}
