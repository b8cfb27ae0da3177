//! The one result format of every benchmark: a human table or one JSON object per line.

use hdrhistogram::Histogram;
use serde_json::{json, Map, Value};

/// Latency percentiles reported: 1 to 99 in steps of 5 (paper 002), plus 50, 99 and 99.9.
pub fn percentiles() -> Vec<f64> {
    let mut p: Vec<f64> = (0..20).map(|i| 1.0 + 5.0 * i as f64).collect();
    p.extend([50.0, 99.0, 99.9]);
    p.sort_by(|a, b| a.partial_cmp(b).unwrap());
    p.dedup();
    p
}

pub fn latency_json(h: &Histogram<u64>) -> Value {
    let mut m = Map::new();
    for p in percentiles() {
        let key = if p.fract() == 0.0 { format!("{}", p as u64) } else { format!("{p}") };
        m.insert(key, json!(h.value_at_quantile(p / 100.0)));
    }
    Value::Object(m)
}

/// Mean and median of a sample.
pub fn mean_median(xs: &[f64]) -> (f64, f64) {
    let mean = xs.iter().sum::<f64>() / xs.len() as f64;
    let mut s = xs.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let med = if s.len() % 2 == 1 { s[s.len() / 2] } else { (s[s.len() / 2 - 1] + s[s.len() / 2]) / 2.0 };
    (mean, med)
}

/// Prints rows as an aligned table.
pub fn table(header: &[&str], rows: &[Vec<String>]) {
    let mut w: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.len());
        }
    }
    let line = |cells: Vec<String>| {
        cells.iter().enumerate().map(|(i, c)| format!("{:>width$}", c, width = w[i])).collect::<Vec<_>>().join("  ")
    };
    println!("{}", line(header.iter().map(|s| s.to_string()).collect()));
    for r in rows {
        println!("{}", line(r.clone()));
    }
}
