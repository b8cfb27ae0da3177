//! `tsumiki check DIR`: the library's read-only verification, printed.

use std::path::PathBuf;

use serde_json::json;
use tsumiki::{CheckReport, Error, Severity};

use super::{Failure, Outcome};

/// The text after `--help`'s options: details and examples.
pub const HELP: &str = "\
Reads every file of the database without opening it (opening recovers, which writes) and
without writing anything: MASTER's two superblocks; every block of the log segments of the
current generation, their records and lane ends, the lane registries, and recovery's
analysis; the page store's translation table, every image it names (block trailers,
checksums, page ids, chains, entries in key order and inside their page's range), every
other block of every page segment; then every page once more through the database's own
reader. Each problem is printed as `damage:` or `warning:` with the file, the byte offset
where one place is to blame, and what is wrong. Warnings are what the database handles by
itself (a log's torn tail after a crash, obsolete files, stale blocks no state uses).

A database open in another process is refused (its files change while it runs).

Exit code: 0 healthy (warnings allowed), 1 damage found, 2 the check could not run (no
database there, database open, I/O error).

Examples:
  tsumiki check ./db
  tsumiki check --json ./db | jq '.findings[]'
  tsumiki check --quiet ./db || echo damaged";

/// Arguments of `tsumiki check`.
#[derive(clap::Args)]
pub struct CheckArgs {
    /// The database directory.
    pub dir: PathBuf,
    /// Print one JSON object (findings and counts) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Print nothing: the exit code says healthy (0) or damaged (1).
    #[arg(long, short, conflicts_with = "json")]
    pub quiet: bool,
}

/// `tsumiki check`.
pub fn run(a: &CheckArgs) -> Outcome {
    let r = tsumiki::check(&a.dir).map_err(|e| match e {
        Error::Locked(m) => Failure::new(format!("cannot check: {m}")),
        e => Failure::new(format!("cannot check {}: {e}", a.dir.display())),
    })?;
    if a.json {
        println!("{}", to_json(&r));
    } else if !a.quiet {
        print!("{}", text(&a.dir, &r));
    }
    Ok(if r.is_healthy() { 0 } else { 1 })
}

fn text(dir: &std::path::Path, r: &CheckReport) -> String {
    let mut s = String::new();
    for f in &r.findings {
        s += &format!("{f}\n");
    }
    let state = match (r.generation, r.last_exit) {
        (None, _) => "no valid master record".to_string(),
        (Some(g), true) => format!("generation {g}, closed cleanly"),
        (Some(g), false) => format!("generation {g}, left open, crashed, or closed keeping a short log"),
    };
    s += &format!(
        "checked {} ({state}): {} files, {} bytes; {} blocks verified; {} log lanes with {} commit records; {} pages, {} images; {} records ({} key bytes, {} value bytes)\n",
        dir.display(),
        r.files,
        r.bytes,
        r.blocks,
        r.log_lanes,
        r.log_records,
        r.pages,
        r.images,
        r.records,
        r.key_bytes,
        r.value_bytes
    );
    s += &match (r.damage(), r.warnings()) {
        (0, 0) => "healthy\n".to_string(),
        (0, w) => format!("healthy ({w} warnings)\n"),
        (d, w) => format!("DAMAGED: {d} problems ({w} warnings)\n"),
    };
    s
}

fn to_json(r: &CheckReport) -> serde_json::Value {
    let findings: Vec<serde_json::Value> = r
        .findings
        .iter()
        .map(|f| {
            json!({
                "severity": match f.severity { Severity::Damage => "damage", Severity::Warning => "warning" },
                "file": f.file,
                "offset": f.offset,
                "what": f.what,
            })
        })
        .collect();
    json!({
        "healthy": r.is_healthy(),
        "damage": r.damage(),
        "warnings": r.warnings(),
        "findings": findings,
        "generation": r.generation,
        "last_exit": r.last_exit,
        "files": r.files,
        "bytes": r.bytes,
        "blocks": r.blocks,
        "log_lanes": r.log_lanes,
        "log_records": r.log_records,
        "pages": r.pages,
        "images": r.images,
        "records": r.records,
        "key_bytes": r.key_bytes,
        "value_bytes": r.value_bytes,
    })
}
