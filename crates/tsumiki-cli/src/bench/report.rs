//! What every benchmark's human output shares: tables, percentiles, a plot's footer. (The
//! machine-readable output is [`super::schema`].)

/// Latency percentiles reported: 1 to 99 in steps of 5 (paper 002), plus 50, 99 and 99.9.
pub fn percentiles() -> Vec<f64> {
    let mut p: Vec<f64> = (0..20).map(|i| 1.0 + 5.0 * i as f64).collect();
    p.extend([50.0, 99.0, 99.9]);
    p.sort_by(|a, b| a.partial_cmp(b).unwrap());
    p.dedup();
    p
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

/// A plot's small print: the version and commit, the machine, the date.
pub fn footer() -> String {
    let m = super::schema::Machine::detect();
    let commit = env!("TSUMIKI_GIT_COMMIT");
    format!(
        "tsumiki {} ({}) on {} CPUs{}, {}; {}",
        env!("CARGO_PKG_VERSION"),
        &commit[..commit.len().min(12)],
        m.cpus,
        m.cpu_model.map_or(String::new(), |c| format!(" ({c})")),
        m.kernel.map_or(m.os.to_string(), |k| format!("Linux {k}")),
        humantime::format_rfc3339_seconds(std::time::SystemTime::now()),
    )
}
