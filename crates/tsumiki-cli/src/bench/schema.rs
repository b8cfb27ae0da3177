//! The one output schema of every benchmark family, as serde structs.
//!
//! With `--json`, standard output carries JSON lines: first a [`Header`] record (schema
//! version, family, tsumiki version, git commit, machine, the run's options, start time),
//! then one [`ResultRecord`] per result row. Every result shares the envelope (`record`,
//! `bench`, `variant`, `throughput`, `throughput_unit`); `params` and `metrics` are the
//! family's own structs. `--csv FILE` writes the result rows with nested fields flattened
//! into dotted column names (`params.threads`, `metrics.latency_ns.99`).

use std::path::{Path, PathBuf};

use clap::Args;
use serde::{Serialize, Serializer};

/// Bumped whenever a field of the envelope or of a family's structs changes meaning or
/// disappears (adding a field does not bump it).
pub const SCHEMA_VERSION: u32 = 1;

/// Output options shared by every family.
#[derive(Args, Debug, Clone, Default, Serialize)]
pub struct OutputArgs {
    /// Print JSON lines instead of a table: a header record (machine, git commit, options),
    /// then one result record per row.
    #[arg(long)]
    pub json: bool,
    /// Also write the result rows to FILE as CSV (one header line, nested fields flattened
    /// into dotted column names).
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Draw the results as an SVG plot in FILE (throughput against the family's x axis, one
    /// line per variant).
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// No progress bars (they are hidden anyway when standard error is not a terminal).
    #[arg(long, short)]
    pub quiet: bool,
}

impl OutputArgs {
    /// Refuses, before anything runs, an output file whose directory does not exist.
    pub fn check(&self) -> Result<(), String> {
        #[cfg(not(feature = "plot"))]
        if self.plot.is_some() {
            return Err(super::plot::NOT_BUILT.into());
        }
        for (flag, path) in [("--csv", &self.csv), ("--plot", &self.plot)] {
            if let Some(p) = path {
                let parent = p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
                if !parent.is_dir() {
                    return Err(format!("{flag} {}: the directory {} does not exist", p.display(), parent.display()));
                }
                if p.is_dir() {
                    return Err(format!("{flag} {}: is a directory", p.display()));
                }
            }
        }
        Ok(())
    }
}

/// The benchmark families.
#[derive(Serialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    Cache,
    Fill,
    Index,
    Kv,
    Txn,
    Wal,
}

/// The `record` tag of a line.
#[derive(Serialize, Debug, Clone, Copy)]
#[serde(rename_all = "lowercase")]
pub enum RecordKind {
    Header,
    Result,
}

/// The first line: what ran, where, from which commit, with which options.
#[derive(Serialize, Debug)]
pub struct Header<'a, O: Serialize> {
    pub record: RecordKind,
    pub schema: u32,
    pub bench: Family,
    pub tsumiki_version: &'static str,
    /// `git rev-parse HEAD` when the binary was built, or `unknown`.
    pub git_commit: &'static str,
    pub machine: Machine,
    /// The command line as given.
    pub argv: Vec<String>,
    /// Every option of the run, defaults included.
    pub options: &'a O,
    /// RFC 3339, UTC, seconds.
    pub started_at: String,
}

/// The machine a run was measured on (Linux `/proc`; fields it cannot read are null).
#[derive(Serialize, Debug, Clone)]
pub struct Machine {
    /// CPUs this process may use.
    pub cpus: usize,
    pub cpu_model: Option<String>,
    pub memory_bytes: Option<u64>,
    pub os: &'static str,
    pub arch: &'static str,
    pub kernel: Option<String>,
    pub hostname: Option<String>,
}

impl Machine {
    pub fn detect() -> Self {
        let read = |p: &str| std::fs::read_to_string(p).ok().map(|s| s.trim().to_string()).filter(|s| !s.is_empty());
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string());
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let memory_bytes = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|kb| kb.parse::<u64>().ok())
            .map(|kb| kb * 1024);
        Machine {
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cpu_model,
            memory_bytes,
            os: std::env::consts::OS,
            arch: std::env::consts::ARCH,
            kernel: read("/proc/sys/kernel/osrelease"),
            hostname: read("/proc/sys/kernel/hostname"),
        }
    }
}

/// One result row: the shared envelope around a family's parameters and metrics.
#[derive(Serialize, Debug)]
pub struct ResultRecord<P: Serialize, M: Serialize> {
    pub record: RecordKind,
    pub bench: Family,
    /// What is compared: the protocol, engine, structure or log mode (and its options).
    pub variant: String,
    /// The row's headline rate, per second, in `throughput_unit`.
    pub throughput: f64,
    pub throughput_unit: &'static str,
    pub params: P,
    pub metrics: M,
}

impl<P: Serialize, M: Serialize> ResultRecord<P, M> {
    pub fn new(bench: Family, variant: String, throughput: f64, unit: &'static str, params: P, metrics: M) -> Self {
        ResultRecord { record: RecordKind::Result, bench, variant, throughput, throughput_unit: unit, params, metrics }
    }
}

/// Latency percentiles in nanoseconds, serialized as an object keyed by percentile
/// (`"1"`, `"6"`, ... `"99"`, `"99.9"`) in ascending order.
#[derive(Debug, Clone, Default)]
pub struct Latency(pub Vec<(f64, u64)>);

impl Latency {
    pub fn of(h: &hdrhistogram::Histogram<u64>) -> Self {
        Latency(super::report::percentiles().into_iter().map(|p| (p, h.value_at_quantile(p / 100.0))).collect())
    }
    /// The value at percentile `p` (one of those reported), or 0.
    pub fn at(&self, p: f64) -> u64 {
        self.0.iter().find(|(q, _)| *q == p).map_or(0, |(_, v)| *v)
    }
}

impl Serialize for Latency {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (p, v) in &self.0 {
            let key = if p.fract() == 0.0 { format!("{}", *p as u64) } else { format!("{p}") };
            m.serialize_entry(&key, v)?;
        }
        m.end()
    }
}

/// Serializes a duration as seconds (for options structs).
pub fn duration_secs<S: Serializer>(d: &std::time::Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// Where a family's header and rows go: JSON lines on standard output with `--json`, the
/// rows kept for `--csv`.
pub struct Reporter {
    json: bool,
    csv: Option<PathBuf>,
    /// Each row flattened to (column, cell).
    flat: Vec<Vec<(String, String)>>,
}

impl Reporter {
    /// Checks the output paths and, with `--json`, prints the header record.
    pub fn start<O: Serialize>(bench: Family, out: &OutputArgs, options: &O) -> Result<Self, String> {
        out.check()?;
        if out.json {
            let header = Header {
                record: RecordKind::Header,
                schema: SCHEMA_VERSION,
                bench,
                tsumiki_version: env!("CARGO_PKG_VERSION"),
                git_commit: env!("TSUMIKI_GIT_COMMIT"),
                machine: Machine::detect(),
                argv: std::env::args().collect(),
                options,
                started_at: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
            };
            println!("{}", serde_json::to_string(&header).map_err(|e| format!("encoding the header: {e}"))?);
        }
        Ok(Reporter { json: out.json, csv: out.csv.clone(), flat: Vec::new() })
    }

    /// Prints one result (with `--json`) and keeps it for the CSV.
    pub fn row<P: Serialize, M: Serialize>(&mut self, rec: &ResultRecord<P, M>) -> Result<(), String> {
        let line = serde_json::to_string(rec).map_err(|e| format!("encoding a result: {e}"))?;
        if self.json {
            println!("{line}");
        }
        if self.csv.is_some() {
            // Read back in field order (serde_json's own `Value` sorts object keys).
            let node: Node = serde_json::from_str(&line).map_err(|e| format!("flattening a result: {e}"))?;
            let mut cells = Vec::new();
            node.flatten("", &mut cells);
            self.flat.push(cells);
        }
        Ok(())
    }

    /// Writes the CSV file, if one was asked for.
    pub fn finish(self) -> Result<(), String> {
        let Some(path) = &self.csv else { return Ok(()) };
        write_csv(path, &self.flat)
    }
}

/// A JSON value that keeps the order of object fields (so CSV columns follow the structs).
enum Node {
    Null,
    Leaf(String),
    Array(Vec<Node>),
    Object(Vec<(String, Node)>),
}

impl Node {
    /// Flattens nested objects into dotted keys; arrays become one cell of `;`-separated
    /// values; a null is an empty cell.
    fn flatten(&self, prefix: &str, out: &mut Vec<(String, String)>) {
        match self {
            Node::Null => out.push((prefix.to_string(), String::new())),
            Node::Leaf(s) => out.push((prefix.to_string(), s.clone())),
            Node::Array(xs) => out.push((prefix.to_string(), xs.iter().map(Node::cell).collect::<Vec<_>>().join(";"))),
            Node::Object(fields) => {
                for (k, x) in fields {
                    x.flatten(&if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") }, out);
                }
            }
        }
    }

    fn cell(&self) -> String {
        match self {
            Node::Null => String::new(),
            Node::Leaf(s) => s.clone(),
            Node::Array(xs) => format!("[{}]", xs.iter().map(Node::cell).collect::<Vec<_>>().join(";")),
            Node::Object(_) => "{..}".into(),
        }
    }
}

impl<'de> serde::Deserialize<'de> for Node {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Node;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_unit<E>(self) -> Result<Node, E> {
                Ok(Node::Null)
            }
            fn visit_bool<E>(self, v: bool) -> Result<Node, E> {
                Ok(Node::Leaf(v.to_string()))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Node, E> {
                Ok(Node::Leaf(v.to_string()))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Node, E> {
                Ok(Node::Leaf(v.to_string()))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Node, E> {
                Ok(Node::Leaf(v.to_string()))
            }
            fn visit_str<E>(self, v: &str) -> Result<Node, E> {
                Ok(Node::Leaf(v.to_string()))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut a: A) -> Result<Node, A::Error> {
                let mut xs = Vec::new();
                while let Some(x) = a.next_element()? {
                    xs.push(x);
                }
                Ok(Node::Array(xs))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut a: A) -> Result<Node, A::Error> {
                let mut fields = Vec::new();
                while let Some(kv) = a.next_entry()? {
                    fields.push(kv);
                }
                Ok(Node::Object(fields))
            }
        }
        d.deserialize_any(V)
    }
}

/// The rows under the union of their columns (in first-seen order).
fn write_csv(path: &Path, rows: &[Vec<(String, String)>]) -> Result<(), String> {
    let mut columns: Vec<&str> = Vec::new();
    for r in rows {
        for (k, _) in r {
            if !columns.contains(&k.as_str()) {
                columns.push(k);
            }
        }
    }
    let err = |e: csv::Error| format!("writing {}: {e}", path.display());
    let mut w = csv::Writer::from_path(path).map_err(err)?;
    w.write_record(&columns).map_err(err)?;
    for r in rows {
        let line = columns.iter().map(|c| r.iter().find(|(k, _)| k == c).map_or("", |(_, v)| v.as_str()));
        w.write_record(line).map_err(err)?;
    }
    w.flush().map_err(|e| format!("writing {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    struct P {
        threads: usize,
        gc: Option<&'static str>,
    }
    #[derive(Serialize)]
    struct M {
        runs: Vec<f64>,
        latency_ns: Latency,
    }

    #[test]
    fn rows_flatten_into_the_union_of_their_columns() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("out.csv");
        let out = OutputArgs { csv: Some(path.clone()), ..OutputArgs::default() };
        let mut r = Reporter::start(Family::Txn, &out, &()).unwrap();
        let lat = Latency(vec![(50.0, 7), (99.9, 9)]);
        let m = |runs: Vec<f64>| M { runs, latency_ns: lat.clone() };
        r.row(&ResultRecord::new(Family::Txn, "a,b".into(), 1.5, "tx/s", P { threads: 1, gc: None }, m(vec![1.0])))
            .unwrap();
        r.row(&ResultRecord::new(Family::Txn, "c".into(), 2.0, "tx/s", P { threads: 2, gc: Some("aot") }, m(vec![])))
            .unwrap();
        r.finish().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "record,bench,variant,throughput,throughput_unit,params.threads,params.gc,metrics.runs,\
             metrics.latency_ns.50,metrics.latency_ns.99.9"
        );
        assert_eq!(lines[1], "result,txn,\"a,b\",1.5,tx/s,1,,1,7,9");
        assert_eq!(lines[2], "result,txn,c,2,tx/s,2,aot,,7,9");
    }

    #[test]
    fn a_missing_output_directory_is_refused_up_front() {
        let out = OutputArgs { plot: Some("/nonexistent-dir/x.svg".into()), ..OutputArgs::default() };
        assert!(out.check().unwrap_err().contains("does not exist"));
    }
}
