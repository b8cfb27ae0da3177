//! `tsumiki bench index`: paper 002's index benchmark. The same pre-generated workload runs,
//! in one invocation, against the Bw-tree (as the paper, with each improvement, with both)
//! and against other concurrent ordered maps.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use clap::Args;
use hdrhistogram::Histogram;
use parking_lot::RwLock;
use serde::Serialize;
use tsumiki::index::{BwTree, BwTreeConfig};

use super::plot::{self, Chart};
use super::schema::{Family, Latency, OutputArgs, Reporter, ResultRecord};
use super::workload::{rng, KeyChooser, KeyTable, Mix};
use super::{progress, report};

#[derive(Args, Debug, Clone, Serialize)]
pub struct IndexArgs {
    /// Records loaded before the timed part.
    #[arg(long, default_value_t = 1_000_000)]
    pub initial: u64,
    /// Operations per run, over all threads.
    #[arg(long, default_value_t = 5_000_000)]
    pub ops: u64,
    /// Distinct keys operations choose from.
    #[arg(long, default_value_t = 1_000_000)]
    pub keys: u64,
    /// Key size in bytes.
    #[arg(long, default_value_t = 8, value_parser = parse_key_size)]
    pub key_size: usize,
    /// Zipf skew s of key choice; 0 is uniform. Hot keys are scrambled over the key space.
    /// A comma-separated list runs each value on the same loaded structure.
    #[arg(long, default_value = "0", value_delimiter = ',')]
    pub skew: Vec<f64>,
    /// Operation mix as name=weight pairs: read, scan, upsert, insert, update, delete.
    /// Several mixes separated by `;` run one after the other on the same loaded structure.
    #[arg(long, default_value = "read=50,upsert=50")]
    pub mix: String,
    /// Records read by each scan.
    #[arg(long, default_value_t = 100)]
    pub scan_len: usize,
    /// Worker threads; a comma-separated list runs each count on the same loaded structure.
    #[arg(long, default_value = "2", value_delimiter = ',')]
    pub threads: Vec<usize>,
    /// Timed runs per structure; throughput is their mean.
    #[arg(long, default_value_t = 5)]
    pub runs: u64,
    /// Each thread repeats its operation list (whole passes) until the run has lasted at
    /// least this long, so that short runs are not dominated by thread start and stop; the
    /// rate counts every operation done. Later passes repeat the same operations, so on
    /// insert or delete mixes they mostly find the key already there (or gone). 0: one pass.
    #[arg(long, default_value_t = 1000)]
    pub min_run_ms: u64,
    /// Structures, comma-separated, or `all`: bwtree (the paper's), bwtree-opt (both
    /// improvements), bwtree-a (numbered deltas only), bwtree-b (split delta at head only),
    /// btree-rwlock, skiplist, scc, art (8-byte keys only).
    #[arg(long, default_value = "all")]
    pub index: String,
    /// Bw-tree leaf and inner node size.
    #[arg(long, default_value_t = 128)]
    pub node_size: usize,
    /// Bw-tree delta-chain length that triggers consolidation.
    #[arg(long, default_value_t = 4)]
    pub delta_threshold: usize,
    /// Seed of the workload generator.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    #[command(flatten)]
    #[serde(flatten)]
    pub out: OutputArgs,
}

fn parse_key_size(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n @ (8 | 16 | 32 | 64 | 128)) => Ok(n),
        _ => Err("key size must be one of 8, 16, 32, 64, 128".into()),
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum OpKind {
    Read,
    Scan,
    Upsert,
    Insert,
    Update,
    Delete,
}

const OP_NAMES: &[(&str, OpKind)] = &[
    ("read", OpKind::Read),
    ("scan", OpKind::Scan),
    ("upsert", OpKind::Upsert),
    ("insert", OpKind::Insert),
    ("update", OpKind::Update),
    ("delete", OpKind::Delete),
];

/// What every benchmarked structure offers. Implementations are monomorphised into the
/// runner: the structure is chosen once, never per operation.
pub trait BenchIndex: Sync {
    fn get(&self, k: &[u8]) -> bool;
    fn scan(&self, k: &[u8], n: usize) -> usize;
    fn upsert(&self, k: &[u8], v: u64);
    fn insert(&self, k: &[u8], v: u64) -> bool;
    fn update(&self, k: &[u8], v: u64) -> bool;
    fn delete(&self, k: &[u8]) -> bool;
    /// Structure-specific counters for the report.
    fn stats(&self) -> Option<IndexStats> {
        None
    }
}

/// The Bw-tree's structure modification counters (`BwTreeStats`) after a combination.
#[derive(Serialize, Debug, Clone)]
pub struct IndexStats {
    consolidations: u64,
    failed_consolidations: u64,
    splits: u64,
    merges: u64,
    root_splits: u64,
    helped_splits: u64,
    helped_merges: u64,
    restarts: u64,
    height: usize,
}

impl BenchIndex for BwTree<u64> {
    fn get(&self, k: &[u8]) -> bool {
        BwTree::get(self, k).unwrap().is_some()
    }
    fn scan(&self, k: &[u8], n: usize) -> usize {
        BwTree::scan(self, k, None).take(n).count()
    }
    fn upsert(&self, k: &[u8], v: u64) {
        BwTree::upsert(self, k, v).unwrap();
    }
    fn insert(&self, k: &[u8], v: u64) -> bool {
        BwTree::insert(self, k, v).unwrap()
    }
    fn update(&self, k: &[u8], v: u64) -> bool {
        BwTree::update(self, k, v).unwrap()
    }
    fn delete(&self, k: &[u8]) -> bool {
        BwTree::delete(self, k).unwrap()
    }
    fn stats(&self) -> Option<IndexStats> {
        let s = BwTree::stats(self);
        Some(IndexStats {
            consolidations: s.consolidations,
            failed_consolidations: s.failed_consolidations,
            splits: s.splits,
            merges: s.merges,
            root_splits: s.root_splits,
            helped_splits: s.helped_splits,
            helped_merges: s.helped_merges,
            restarts: s.restarts,
            height: s.height,
        })
    }
}

/// The floor to beat: std's BTreeMap behind one reader-writer lock.
pub struct BTreeRwLock(RwLock<BTreeMap<Vec<u8>, u64>>);

impl BenchIndex for BTreeRwLock {
    fn get(&self, k: &[u8]) -> bool {
        self.0.read().contains_key(k)
    }
    fn scan(&self, k: &[u8], n: usize) -> usize {
        self.0.read().range::<[u8], _>((Bound::Included(k), Bound::Unbounded)).take(n).count()
    }
    fn upsert(&self, k: &[u8], v: u64) {
        self.0.write().insert(k.to_vec(), v);
    }
    fn insert(&self, k: &[u8], v: u64) -> bool {
        let mut m = self.0.write();
        if m.contains_key(k) {
            return false;
        }
        m.insert(k.to_vec(), v);
        true
    }
    fn update(&self, k: &[u8], v: u64) -> bool {
        self.0.write().get_mut(k).map(|x| *x = v).is_some()
    }
    fn delete(&self, k: &[u8]) -> bool {
        self.0.write().remove(k).is_some()
    }
}

/// The peers built from crates (the default feature `peers`).
#[cfg(feature = "peers")]
mod peer_indexes {
    use super::*;

    pub struct SkipList(pub crossbeam_skiplist::SkipMap<Vec<u8>, u64>);

    impl BenchIndex for SkipList {
        fn get(&self, k: &[u8]) -> bool {
            self.0.get(k).is_some()
        }
        fn scan(&self, k: &[u8], n: usize) -> usize {
            self.0.range::<[u8], _>((Bound::Included(k), Bound::Unbounded)).take(n).count()
        }
        fn upsert(&self, k: &[u8], v: u64) {
            self.0.insert(k.to_vec(), v);
        }
        fn insert(&self, k: &[u8], v: u64) -> bool {
            if self.0.contains_key(k) {
                return false;
            }
            self.0.get_or_insert(k.to_vec(), v);
            true
        }
        fn update(&self, k: &[u8], v: u64) -> bool {
            if !self.0.contains_key(k) {
                return false;
            }
            self.0.insert(k.to_vec(), v);
            true
        }
        fn delete(&self, k: &[u8]) -> bool {
            self.0.remove(k).is_some()
        }
    }

    pub struct Scc(pub scc::TreeIndex<Vec<u8>, u64>);

    impl BenchIndex for Scc {
        fn get(&self, k: &[u8]) -> bool {
            self.0.read_sync(k, |_, v| *v).is_some()
        }
        fn scan(&self, k: &[u8], n: usize) -> usize {
            let guard = scc::Guard::new();
            self.0.range::<[u8], _>((Bound::Included(k), Bound::Unbounded), &guard).take(n).count()
        }
        fn upsert(&self, k: &[u8], v: u64) {
            self.0.upsert_sync(k.to_vec(), v);
        }
        fn insert(&self, k: &[u8], v: u64) -> bool {
            self.0.insert_sync(k.to_vec(), v).is_ok()
        }
        fn update(&self, k: &[u8], v: u64) -> bool {
            // TreeIndex values are immutable in place: an update replaces the entry.
            if self.0.read_sync(k, |_, _| ()).is_none() {
                return false;
            }
            self.0.upsert_sync(k.to_vec(), v);
            true
        }
        fn delete(&self, k: &[u8]) -> bool {
            self.0.remove_sync(k)
        }
    }

    /// An adaptive radix tree (congee); keys are the 8-byte big-endian integers of the table.
    pub struct Art(pub congee::Congee<usize, usize>);

    fn art_key(k: &[u8]) -> usize {
        usize::from_be_bytes(k[k.len() - 8..].try_into().unwrap())
    }

    impl BenchIndex for Art {
        fn get(&self, k: &[u8]) -> bool {
            let g = self.0.pin();
            self.0.get(&art_key(k), &g).is_some()
        }
        fn scan(&self, k: &[u8], n: usize) -> usize {
            let g = self.0.pin();
            let mut buf = vec![(0usize, 0usize); n];
            self.0.range(&art_key(k), &usize::MAX, &mut buf, &g)
        }
        fn upsert(&self, k: &[u8], v: u64) {
            let g = self.0.pin();
            self.0.insert(art_key(k), v as usize, &g).expect("congee out of memory");
        }
        fn insert(&self, k: &[u8], v: u64) -> bool {
            let g = self.0.pin();
            let mut inserted = false;
            self.0
                .compute_or_insert(
                    art_key(k),
                    |old| match old {
                        Some(o) => o,
                        None => {
                            inserted = true;
                            v as usize
                        }
                    },
                    &g,
                )
                .expect("congee out of memory");
            inserted
        }
        fn update(&self, k: &[u8], v: u64) -> bool {
            let g = self.0.pin();
            self.0.compute_if_present(&art_key(k), |_| Some(v as usize), &g).is_some()
        }
        fn delete(&self, k: &[u8]) -> bool {
            let g = self.0.pin();
            self.0.remove(&art_key(k), &g).is_some()
        }
    }
}
#[cfg(feature = "peers")]
use peer_indexes::{Art, Scc, SkipList};

/// One point of the grid that runs on a loaded structure.
#[derive(Clone)]
struct Combo {
    mix: String,
    threads: usize,
    skew: f64,
}

/// One structure's results over all runs of one combination.
struct Outcome {
    name: String,
    combo: Combo,
    throughputs: Vec<f64>,
    latency: Histogram<u64>,
    succeeded: u64,
    stats: Option<IndexStats>,
}

/// Pre-generated operations of one thread for one run: (kind, key number).
type Ops = Vec<(OpKind, u32)>;

fn gen_ops(args: &IndexArgs, threads: usize, mix: &Mix<OpKind>, chooser: &KeyChooser, run: u64) -> Vec<Ops> {
    let per = args.ops / threads as u64;
    (0..threads as u64)
        .map(|t| {
            let mut r = rng(args.seed, run + 1, t);
            (0..per).map(|_| (mix.pick(&mut r), chooser.pick(&mut r))).collect()
        })
        .collect()
}

/// Latency is sampled on one operation in this many, to keep timer reads off most ops.
const LATENCY_SAMPLE: usize = 8;

fn bench_one<I: BenchIndex>(
    name: &str,
    idx: I,
    args: &IndexArgs,
    keys: &KeyTable,
    grid: &[(Combo, Vec<Vec<Ops>>)],
    reporter: &mut Reporter,
) -> Result<Vec<Outcome>, String> {
    // Load: the first `initial` keys in a random order, in parallel.
    let mut order: Vec<u32> = (0..args.initial.min(keys.len() as u64) as u32).collect();
    {
        use rand::seq::SliceRandom;
        order.shuffle(&mut rng(args.seed, 0, 999));
    }
    let loaders = args.threads.iter().copied().max().unwrap_or(1);
    let chunk = order.len().div_ceil(loaders).max(1);
    let bar = progress::bar(args.out.quiet, order.len() as u64, format!("{name} load"), "records");
    std::thread::scope(|s| {
        for part in order.chunks(chunk) {
            let (idx, bar) = (&idx, &bar);
            s.spawn(move || {
                for (i, &k) in part.iter().enumerate() {
                    idx.upsert(keys.get(k), k as u64);
                    if i % 4096 == 4095 {
                        bar.inc(4096);
                    }
                }
            });
        }
    });
    bar.finish_and_clear();
    let mut out = Vec::new();
    for (combo, all_ops) in grid {
        let o = run_combo(name, &idx, args, keys, combo, all_ops);
        reporter.row(&record(args, &o))?;
        out.push(o);
    }
    Ok(out)
}

fn run_combo<I: BenchIndex>(
    name: &str,
    idx: &I,
    args: &IndexArgs,
    keys: &KeyTable,
    combo: &Combo,
    all_ops: &[Vec<Ops>],
) -> Outcome {
    let mut latency = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).unwrap();
    let mut throughputs = Vec::new();
    let mut succeeded = 0;
    let total_ops: u64 = all_ops[0].iter().map(|o| o.len() as u64).sum();
    for (run, ops) in all_ops.iter().enumerate() {
        let prefix = format!("{name} {}t {} s={} run {}/{}", combo.threads, combo.mix, combo.skew, run + 1, args.runs);
        let bar = progress::bar(args.out.quiet, total_ops, prefix, "ops");
        let done = AtomicU64::new(0);
        let barrier = Barrier::new(combo.threads + 1);
        let min_run = Duration::from_millis(args.min_run_ms);
        // Each thread reads the clock itself when released and when done: the run lasts
        // from the first start to the last end, whatever the main thread's scheduling.
        let (elapsed, ops_done, hists, oks) = std::thread::scope(|s| {
            let handles: Vec<_> = ops
                .iter()
                .map(|my_ops| {
                    let (barrier, done) = (&barrier, &done);
                    s.spawn(move || {
                        let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).unwrap();
                        let (mut ok, mut n) = (0u64, 0u64);
                        barrier.wait();
                        let start = Instant::now();
                        loop {
                            for (i, &(kind, k)) in my_ops.iter().enumerate() {
                                let key = keys.get(k);
                                let t0 = (i % LATENCY_SAMPLE == 0).then(Instant::now);
                                let hit = match kind {
                                    OpKind::Read => idx.get(key),
                                    OpKind::Scan => idx.scan(key, args.scan_len) > 0,
                                    OpKind::Upsert => {
                                        idx.upsert(key, i as u64);
                                        true
                                    }
                                    OpKind::Insert => idx.insert(key, i as u64),
                                    OpKind::Update => idx.update(key, i as u64),
                                    OpKind::Delete => idx.delete(key),
                                };
                                ok += hit as u64;
                                if let Some(t0) = t0 {
                                    let _ = h.record(t0.elapsed().as_nanos() as u64);
                                }
                                if i % 4096 == 4095 {
                                    done.fetch_add(4096, Ordering::Relaxed);
                                }
                            }
                            n += my_ops.len() as u64;
                            if my_ops.is_empty() || start.elapsed() >= min_run {
                                break;
                            }
                        }
                        (h, ok, n, start, Instant::now())
                    })
                })
                .collect();
            barrier.wait();
            // The bar only: polling no longer decides the run's length.
            while !handles.iter().all(|h| h.is_finished()) {
                bar.set_position(done.load(Ordering::Relaxed));
                std::thread::sleep(Duration::from_millis(50));
            }
            let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
            let first = results.iter().map(|r| r.3).min().unwrap();
            let last = results.iter().map(|r| r.4).max().unwrap();
            let oks: u64 = results.iter().map(|r| r.1).sum();
            let ops_done: u64 = results.iter().map(|r| r.2).sum();
            (last - first, ops_done, results.into_iter().map(|r| r.0).collect::<Vec<_>>(), oks)
        });
        bar.finish_and_clear();
        throughputs.push(ops_done as f64 / elapsed.as_secs_f64());
        for h in hists {
            latency.add(h).unwrap();
        }
        succeeded += oks;
    }
    let stats = idx.stats();
    Outcome { name: name.to_string(), combo: combo.clone(), throughputs, latency, succeeded, stats }
}

fn bwtree(args: &IndexArgs, a: bool, b: bool) -> Result<BwTree<u64>, String> {
    let cfg = BwTreeConfig {
        leaf_max: args.node_size,
        inner_max: args.node_size,
        merge_threshold: (args.node_size / 8).max(1),
        delta_threshold: args.delta_threshold,
        numbered_deltas: a,
        split_delta_at_head: b,
    };
    BwTree::with_config(cfg).map_err(|e| e.to_string())
}

const ALL: &[&str] = &["bwtree", "bwtree-opt", "btree-rwlock", "skiplist", "scc", "art"];
/// The structures of the feature `peers`.
const PEERS: &[&str] = &["skiplist", "scc", "art"];
const KNOWN: &[&str] = &["bwtree", "bwtree-opt", "bwtree-a", "bwtree-b", "btree-rwlock", "skiplist", "scc", "art"];

pub fn run(args: &IndexArgs) -> Result<(), String> {
    if args.threads.is_empty()
        || args.threads.contains(&0)
        || args.runs == 0
        || args.keys == 0
        || args.keys > u32::MAX as u64
    {
        return Err("--threads, --runs and --keys must be positive (and --keys below 2^32)".into());
    }
    if args.initial > args.keys {
        return Err(format!("--initial ({}) cannot exceed --keys ({})", args.initial, args.keys));
    }
    let mut names: Vec<&str> = Vec::new();
    for n in args.index.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        if n == "all" {
            names.extend(ALL);
        } else if let Some(k) = KNOWN.iter().find(|k| **k == n) {
            names.push(k);
        } else {
            return Err(format!("unknown index {n:?}; known: {}, all", KNOWN.join(", ")));
        }
    }
    names.dedup();
    if !cfg!(feature = "peers") {
        if let Some(n) = names.iter().find(|n| PEERS.contains(n)) {
            if !args.index.split(',').any(|i| i.trim() == "all") {
                return Err(format!("{n}: not built in; build with the default feature `peers`"));
            }
        }
        names.retain(|n| !PEERS.contains(n));
    }
    if args.key_size != 8 && names.contains(&"art") {
        if args.index.split(',').any(|n| n.trim() == "art") {
            return Err("art (congee) supports 8-byte keys only".into());
        }
        names.retain(|n| *n != "art");
    }
    let keys = KeyTable::new(args.keys as usize, args.key_size);
    // Every combination's operations, generated before anything is timed.
    let mut grid = Vec::new();
    for mix_s in args.mix.split(';').map(str::trim).filter(|m| !m.is_empty()) {
        let mix = Mix::parse(mix_s, OP_NAMES)?;
        for &skew in &args.skew {
            let chooser = KeyChooser::new(args.keys, skew)?;
            for &threads in &args.threads {
                let ops: Vec<Vec<Ops>> = (0..args.runs).map(|r| gen_ops(args, threads, &mix, &chooser, r)).collect();
                grid.push((Combo { mix: mix_s.to_string(), threads, skew }, ops));
            }
        }
    }

    let mut reporter = Reporter::start(Family::Index, &args.out, args)?;
    let mut outcomes = Vec::new();
    for name in names {
        let (g, r) = (&grid, &mut reporter);
        let o = match name {
            "bwtree" => bench_one(name, bwtree(args, false, false)?, args, &keys, g, r),
            "bwtree-opt" => bench_one(name, bwtree(args, true, true)?, args, &keys, g, r),
            "bwtree-a" => bench_one(name, bwtree(args, true, false)?, args, &keys, g, r),
            "bwtree-b" => bench_one(name, bwtree(args, false, true)?, args, &keys, g, r),
            "btree-rwlock" => bench_one(name, BTreeRwLock(RwLock::new(BTreeMap::new())), args, &keys, g, r),
            #[cfg(feature = "peers")]
            "skiplist" => bench_one(name, SkipList(crossbeam_skiplist::SkipMap::new()), args, &keys, g, r),
            #[cfg(feature = "peers")]
            "scc" => bench_one(name, Scc(scc::TreeIndex::new()), args, &keys, g, r),
            #[cfg(feature = "peers")]
            "art" => bench_one(name, Art(congee::Congee::default()), args, &keys, g, r),
            _ => unreachable!(),
        }?;
        outcomes.extend(o);
    }
    reporter.finish()?;
    if !args.out.json {
        print_table(args, &outcomes);
    }
    if let Some(path) = &args.out.plot {
        plot_outcomes(path, args, &outcomes)?;
    }
    Ok(())
}

/// The parameters of one result row.
#[derive(Serialize, Debug)]
struct IndexParams {
    threads: usize,
    key_size: usize,
    skew: f64,
    mix: String,
    initial: u64,
    keys: u64,
    ops: u64,
    runs: u64,
    scan_len: usize,
    min_run_ms: u64,
}

/// What one row measured.
#[derive(Serialize, Debug)]
struct IndexMetrics {
    /// Operations per second, the mean over runs.
    throughput_ops_s: f64,
    throughput_median_ops_s: f64,
    throughput_runs: Vec<f64>,
    /// Operations that found (or changed) what they looked for.
    succeeded_ops: u64,
    /// One operation in eight is timed, nanoseconds.
    latency_ns: Latency,
    stats: Option<IndexStats>,
}

fn record(args: &IndexArgs, o: &Outcome) -> ResultRecord<IndexParams, IndexMetrics> {
    let (mean, median) = report::mean_median(&o.throughputs);
    let params = IndexParams {
        threads: o.combo.threads,
        key_size: args.key_size,
        skew: o.combo.skew,
        mix: o.combo.mix.clone(),
        initial: args.initial,
        keys: args.keys,
        ops: args.ops,
        runs: args.runs,
        scan_len: args.scan_len,
        min_run_ms: args.min_run_ms,
    };
    let metrics = IndexMetrics {
        throughput_ops_s: mean,
        throughput_median_ops_s: median,
        throughput_runs: o.throughputs.clone(),
        succeeded_ops: o.succeeded,
        latency_ns: Latency::of(&o.latency),
        stats: o.stats.clone(),
    };
    ResultRecord::new(Family::Index, o.name.clone(), mean, "ops/s", params, metrics)
}

/// Throughput against threads, one line per structure (paper 002's figures), one panel
/// per mix and skew.
fn plot_outcomes(path: &std::path::Path, args: &IndexArgs, outcomes: &[Outcome]) -> Result<(), String> {
    let mut charts: Vec<(String, f64, Chart)> = Vec::new();
    for o in outcomes {
        let (mix, skew) = (&o.combo.mix, o.combo.skew);
        let at = match charts.iter().position(|(m, s, _)| m == mix && *s == skew) {
            Some(i) => i,
            None => {
                let caption = format!(
                    "{mix}, zipf {skew}: {}-byte keys, {} loaded of {} keys, {} ops per run, mean of {} runs",
                    args.key_size,
                    plot::si(args.initial as f64),
                    plot::si(args.keys as f64),
                    plot::si(args.ops as f64),
                    args.runs
                );
                charts.push((mix.clone(), skew, Chart::new(caption, "threads", "throughput (ops/s)", "structure")));
                charts.len() - 1
            }
        };
        charts[at].2.push(&o.name, o.combo.threads as f64, report::mean_median(&o.throughputs).0);
    }
    let charts: Vec<Chart> = charts.into_iter().map(|c| c.2).collect();
    plot::write_svg(path, "tsumiki bench index", &report::footer(), &charts)
}

fn print_table(args: &IndexArgs, outcomes: &[Outcome]) {
    println!(
        "index benchmark: {}-byte keys, {} initial, {} keys, {} ops x {} runs",
        args.key_size, args.initial, args.keys, args.ops, args.runs
    );
    let same = |a: &Combo, b: &Combo| a.mix == b.mix && a.threads == b.threads && a.skew == b.skew;
    let rows: Vec<Vec<String>> = outcomes
        .iter()
        .map(|o| {
            let (mean, median) = report::mean_median(&o.throughputs);
            let base = outcomes
                .iter()
                .find(|b| b.name == "btree-rwlock" && same(&b.combo, &o.combo))
                .map(|b| report::mean_median(&b.throughputs).0);
            let q = |p: f64| format!("{}", o.latency.value_at_quantile(p));
            vec![
                o.name.clone(),
                o.combo.mix.clone(),
                o.combo.threads.to_string(),
                o.combo.skew.to_string(),
                format!("{:.3}", mean / 1e6),
                format!("{:.3}", median / 1e6),
                base.map_or("-".into(), |b| format!("{:.2}x", mean / b)),
                q(0.50),
                q(0.99),
                q(0.999),
            ]
        })
        .collect();
    report::table(
        &[
            "index",
            "mix",
            "threads",
            "skew",
            "Mops/s mean",
            "median",
            "vs btree-rwlock",
            "p50 ns",
            "p99 ns",
            "p99.9 ns",
        ],
        &rows,
    );
}
