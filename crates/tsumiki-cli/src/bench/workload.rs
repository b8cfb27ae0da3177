//! Workload generation shared by the benchmarks: keys, skewed key choice, operation mixes.
//! Everything is generated before the timed part.

use rand::distr::Distribution;
use rand::{RngExt, SeedableRng};
use rand_distr::Zipf;

/// A table of `n` fixed-size keys: a constant prefix, then the key number big-endian, so
/// byte order is numeric order and longer keys cost longer comparisons.
pub struct KeyTable {
    data: Vec<u8>,
    size: usize,
}

impl KeyTable {
    pub fn new(n: usize, size: usize) -> Self {
        assert!(size >= 8);
        let mut data = Vec::with_capacity(n * size);
        for i in 0..n as u64 {
            data.extend(std::iter::repeat_n(b'k', size - 8));
            data.extend_from_slice(&i.to_be_bytes());
        }
        KeyTable { data, size }
    }
    #[inline]
    pub fn get(&self, i: u32) -> &[u8] {
        let s = i as usize * self.size;
        &self.data[s..s + self.size]
    }
    pub fn len(&self) -> usize {
        self.data.len() / self.size
    }
}

/// Chooses key numbers: uniform for skew 0, else zipfian over ranks with the ranks
/// scrambled (as YCSB does) so the hot keys are spread over the key space.
pub enum KeyChooser {
    Uniform(u64),
    Zipf(Zipf<f64>, u64),
}

impl KeyChooser {
    pub fn new(n: u64, skew: f64) -> Result<Self, String> {
        if skew == 0.0 {
            Ok(KeyChooser::Uniform(n))
        } else {
            Zipf::new(n as f64, skew).map(|z| KeyChooser::Zipf(z, n)).map_err(|e| format!("bad --skew {skew}: {e}"))
        }
    }
    pub fn pick<R: rand::Rng>(&self, rng: &mut R) -> u32 {
        match self {
            KeyChooser::Uniform(n) => rng.random_range(0..*n) as u32,
            KeyChooser::Zipf(z, n) => {
                let rank = z.sample(rng) as u64 - 1;
                (fnv1a(rank) % n) as u32
            }
        }
    }
}

fn fnv1a(x: u64) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in x.to_le_bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

/// A deterministic RNG for thread `t` of run `run`.
pub fn rng(seed: u64, run: u64, t: u64) -> rand::rngs::StdRng {
    rand::rngs::StdRng::seed_from_u64(seed ^ (run << 32) ^ (t.wrapping_mul(0x9e3779b97f4a7c15)))
}

/// A weighted mix of operation kinds, parsed from `name=weight,...`.
pub struct Mix<K> {
    table: Vec<(K, u32)>,
    total: u32,
}

impl<K: Copy> Mix<K> {
    pub fn parse(s: &str, names: &[(&str, K)]) -> Result<Self, String> {
        let mut table = Vec::new();
        for part in s.split(',').filter(|p| !p.is_empty()) {
            let (name, w) =
                part.split_once('=').ok_or_else(|| format!("bad mix entry {part:?}: expected name=weight"))?;
            let kind = names.iter().find(|(n, _)| *n == name.trim()).map(|(_, k)| *k).ok_or_else(|| {
                format!(
                    "unknown operation {name:?} in mix; known: {}",
                    names.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
                )
            })?;
            let w: u32 = w.trim().parse().map_err(|_| format!("bad weight in {part:?}"))?;
            if w > 0 {
                table.push((kind, w));
            }
        }
        let total = table.iter().map(|(_, w)| w).sum();
        if total == 0 {
            return Err("the mix has no operation with a positive weight".into());
        }
        Ok(Mix { table, total })
    }
    pub fn pick<R: rand::Rng>(&self, rng: &mut R) -> K {
        let mut x = rng.random_range(0..self.total);
        for (k, w) in &self.table {
            if x < *w {
                return *k;
            }
            x -= w;
        }
        self.table[0].0
    }
}
