//! Helpers shared by the index tests.
#![allow(dead_code)]

use tsumiki::index::BwTreeConfig;

/// Every combination of the paper's two improvements, on the given base configuration.
pub fn variants(base: BwTreeConfig) -> Vec<(&'static str, BwTreeConfig)> {
    let mk = |a, b| BwTreeConfig { numbered_deltas: a, split_delta_at_head: b, ..base.clone() };
    vec![
        ("paper", mk(false, false)),
        ("numbered", mk(true, false)),
        ("split-at-head", mk(false, true)),
        ("both", mk(true, true)),
    ]
}

/// A key of `n` encoded so byte order equals numeric order, padded to `len` bytes.
pub fn key(n: u64, len: usize) -> Vec<u8> {
    let mut k = n.to_be_bytes().to_vec();
    k.resize(len.max(8), b'k');
    k
}
