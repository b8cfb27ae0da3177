//! Rough timings of the index, printed rather than asserted:
//! `cargo test --release -p tsumiki --test index_perf -- --ignored --nocapture`.

use std::time::Instant;

use tsumiki::index::BwTree;

/// A bijection on `u64` (an odd multiplier), so `spread(0..n)` are `n` distinct keys in a
/// random-looking order.
fn spread(i: u64) -> u64 {
    i.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// One million `first_from` calls (half of them exclusive) at random keys of a tree of one
/// million 8-byte keys inserted in random order, some leaves carrying deltas.
#[test]
#[ignore]
fn first_from_rate() {
    let n: u64 = std::env::var("TSUMIKI_FIRST_FROM_KEYS").ok().and_then(|v| v.parse().ok()).unwrap_or(1_000_000);
    let tree = BwTree::new();
    for i in 0..n {
        tree.insert(&spread(i).to_be_bytes(), i).unwrap();
    }
    // Rewrites leave short delta chains on many leaves, as a running workload does.
    for i in 0..n / 10 {
        tree.upsert(&spread(i * 7 % n).to_be_bytes(), i).unwrap();
    }
    let probes: Vec<[u8; 8]> = (0..n).map(|i| spread(i ^ 0x5555).wrapping_add(1).to_be_bytes()).collect();

    // The same descents without the successor search, for scale.
    let t = Instant::now();
    let hits = probes.iter().filter(|p| tree.get(&p[..]).unwrap().is_some()).count();
    let get = t.elapsed();

    let t = Instant::now();
    let mut sum = 0u64;
    for (i, p) in probes.iter().enumerate() {
        if let Some((k, v)) = tree.first_from(p, i % 2 == 1) {
            sum = sum.wrapping_add(k[7] as u64 + v);
        }
    }
    let owned = t.elapsed();

    let t = Instant::now();
    let mut sum2 = 0u64;
    for (i, p) in probes.iter().enumerate() {
        sum2 = sum2.wrapping_add(tree.first_from_with(p, i % 2 == 1, |r| r.map_or(0, |(k, v)| k[7] as u64 + v)));
    }
    let borrowed = t.elapsed();
    assert_eq!(sum, sum2);
    println!(
        "first_from on {n} keys: {:.0} ns/call owned (first_from), {:.0} ns/call borrowed \
         (first_from_with); get {:.0} ns/call ({hits} hits)",
        owned.as_nanos() as f64 / n as f64,
        borrowed.as_nanos() as f64 / n as f64,
        get.as_nanos() as f64 / n as f64,
    );
}

/// A sequential load (one million ascending 8-byte keys), in every configuration: pages
/// allocated (mostly leaves) and mean records per page, i.e. how full the leaves are.
#[test]
#[ignore]
fn ascending_fill() {
    use tsumiki::index::BwTreeConfig;
    let n: u64 = std::env::var("TSUMIKI_ASCENDING_KEYS").ok().and_then(|v| v.parse().ok()).unwrap_or(1_000_000);
    for (name, cfg) in [
        ("default", BwTreeConfig::default()),
        ("paper", BwTreeConfig::paper()),
        ("numbered", BwTreeConfig { split_delta_at_head: false, ..BwTreeConfig::default() }),
        ("split-at-head", BwTreeConfig { numbered_deltas: false, ..BwTreeConfig::default() }),
    ] {
        let tree = BwTree::with_config(cfg).unwrap();
        let t = Instant::now();
        for i in 0..n {
            tree.insert(&i.to_be_bytes(), i).unwrap();
        }
        let took = t.elapsed();
        let s = tree.stats();
        assert_eq!(tree.scan(b"", None).count() as u64, n);
        println!(
            "{name}: {n} ascending inserts in {took:.2?}: {} pages, {:.1} records/page, {} splits, height {}",
            s.pages_allocated,
            n as f64 / s.pages_allocated as f64,
            s.splits,
            s.height
        );
    }
}

/// Loading a sorted snapshot: 1M 4-byte big-endian keys with `u64` values through
/// `BwTreeBuilder` against `insert` in ascending order.
#[test]
#[ignore]
fn bulk_load_rate() {
    let n: u32 = std::env::var("TSUMIKI_BULK_KEYS").ok().and_then(|v| v.parse().ok()).unwrap_or(1_000_000);
    let t = Instant::now();
    let mut b = tsumiki::index::BwTreeBuilder::new(tsumiki::index::BwTreeConfig::default()).unwrap();
    for i in 0..n {
        b.push(&i.to_be_bytes(), i as u64).unwrap();
    }
    let bulk = b.finish().unwrap();
    let built = t.elapsed();

    let t = Instant::now();
    let ins = BwTree::new();
    for i in 0..n {
        ins.insert(&i.to_be_bytes(), i as u64).unwrap();
    }
    let inserted = t.elapsed();

    assert_eq!(bulk.get(&(n / 2).to_be_bytes()).unwrap(), Some(n as u64 / 2));
    let (bs, is) = (bulk.stats(), ins.stats());
    println!(
        "{n} keys: builder {built:?} ({:.2} M/s, {} pages, height {}); insert {inserted:?} ({:.2} M/s, {} pages, height {})",
        n as f64 / built.as_secs_f64() / 1e6,
        bs.pages_allocated,
        bs.height,
        n as f64 / inserted.as_secs_f64() / 1e6,
        is.pages_allocated,
        is.height,
    );
}
